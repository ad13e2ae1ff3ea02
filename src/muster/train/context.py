"""``TrainContext``: who this worker is inside a run (Ray's ``get_context()``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NoReturn


@dataclass(frozen=True)
class TrainContext:
    """Ranks and names for the calling worker. Get it with ``muster.train.get_context()``."""

    world_rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    experiment_name: str
    run_dir: str
    attempt: int = 0
    trial_name: str | None = None

    def get_world_rank(self) -> int:
        return self.world_rank

    def get_world_size(self) -> int:
        return self.world_size

    def get_local_rank(self) -> int:
        return self.local_rank

    def get_local_world_size(self) -> int:
        return self.local_world_size

    def get_node_rank(self) -> int:
        return self.node_rank

    def get_experiment_name(self) -> str:
        return self.experiment_name

    def get_trial_name(self) -> str | None:
        return self.trial_name

    def get_run_dir(self) -> str:
        """The run's folder in storage (a local path or a URL)."""
        return self.run_dir

    get_trial_dir = get_run_dir

    def get_storage(self) -> NoReturn:
        """Ray's StorageContext is not muster's: the error names :meth:`get_run_dir` and the fix."""
        from muster._unsupported import raise_unsupported

        raise_unsupported("muster.train.TrainContext", "get_storage")

    def __getattr__(self, name: str) -> Any:
        """Ray's names this context lacks (``get_trial_id``, ``get_metadata``...): an error naming what to use."""
        if name.startswith("_"):  # pickle's and copy's probes, and private names: plainly absent
            raise AttributeError(name)
        from muster._unsupported import raise_unsupported

        raise_unsupported("muster.train.TrainContext", name)

    def get_attempt(self) -> int:
        """0 for the first attempt, 1 after the first restart, ..."""
        return self.attempt
