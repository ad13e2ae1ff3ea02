"""``DataConfig``: how a trainer hands its ``datasets`` to the workers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from muster.data.execution import DataContext
from muster.data.execution_options import ExecutionOptions
from muster.exceptions import InvalidArgumentError, InvalidTypeError


@dataclass(kw_only=True)
class DataConfig:
    """Which datasets are split across the training workers.

    Attributes:
        datasets_to_split: ``"all"`` (default) or a list of names; each split
            dataset gives rank ``r`` of ``n`` every ``n``-th row, the same
            number of rows per rank. Other datasets give every rank all rows.
        execution_options: a ``DataContext`` for the workers (threads, bytes in flight).
        enable_shard_locality: accepted for Ray compatibility (one machine: no effect).
    """

    datasets_to_split: Literal["all"] | list[str] = "all"
    execution_options: DataContext | None = None
    enable_shard_locality: bool = True
    _extra: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.datasets_to_split != "all" and not (
            isinstance(self.datasets_to_split, (list, tuple)) and all(isinstance(n, str) for n in self.datasets_to_split)
        ):
            raise InvalidArgumentError(
                f"DataConfig(datasets_to_split={self.datasets_to_split!r}): use 'all' or a list of dataset names."
            )
        if isinstance(self.execution_options, ExecutionOptions):  # Ray's type: its context's options
            self.execution_options = self.execution_options.context
        if self.execution_options is not None and not isinstance(self.execution_options, DataContext):
            raise InvalidTypeError(f"DataConfig(execution_options={self.execution_options!r}): pass a "
                                   "muster.data.DataContext, or DataConfig.default_ingest_options() changed.")

    @staticmethod
    def default_ingest_options() -> Any:
        """The execution options training workers use unless told otherwise (Ray's name): the
        ``execution_options`` of a fresh ``DataContext``, to change and pass back as
        ``DataConfig(execution_options=...)``."""
        return DataContext().execution_options

    def configure(self, datasets: dict[str, Any], world_size: int, worker_handles: Any = None,
                  worker_node_ids: list[str] | None = None, **kwargs: Any) -> list[dict[str, Any]]:
        """Each worker's iterators, as Ray's ``DataConfig.configure``: a list (one dict per rank) of name ->
        ``DataIterator`` (a ``Dataset`` is iterated whole). A subclass that overrides it decides the shards;
        the trainer calls it on the driver before each attempt of the run. ``worker_handles`` is always
        ``None`` here (workers are not actors); ``worker_node_ids`` names each rank's node."""
        from muster.data.iterator import DataIterator

        return [{name: DataIterator(ds, rank, world_size) if self.splits(name) and world_size > 1 else ds.iterator()
                 for name, ds in datasets.items()} for rank in range(world_size)]

    def splits(self, name: str) -> bool:
        return self.datasets_to_split == "all" or name in self.datasets_to_split
