"""``DataConfig``: how a trainer hands its ``datasets`` to the workers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from muster.data.context import DataContext
from muster.data.execution_options import ExecutionOptions
from muster.exceptions import InvalidArgumentError, InvalidTypeError


@dataclass(kw_only=True)
class DataConfig:
    """Which datasets are split across the training workers.

    Attributes:
        datasets_to_split: ``"all"`` (default) or a list of names; each split
            dataset gives rank ``r`` of ``n`` every ``n``-th row, the same
            number of rows per rank. Other datasets give every rank all rows.
        execution_options: a ``DataContext`` for the workers (threads, bytes in flight), or Ray's
            ``ExecutionOptions``; or a dict of dataset name -> either, each dataset iterated under its own
            (a dataset not named there: the workers' default), as Ray's per-dataset options.
        enable_shard_locality: accepted for Ray compatibility (one machine: no effect).
    """

    datasets_to_split: Literal["all"] | list[str] = "all"
    execution_options: DataContext | dict[str, DataContext] | None = None
    enable_shard_locality: bool = True
    _extra: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.datasets_to_split != "all" and not (
            isinstance(self.datasets_to_split, (list, tuple))
            and all(isinstance(n, str) for n in self.datasets_to_split)
        ):
            raise InvalidArgumentError(
                f"DataConfig(datasets_to_split={self.datasets_to_split!r}): use 'all' or a list of dataset names."
            )
        given = self.execution_options
        if isinstance(given, dict):
            self.execution_options = {name: _context_of(options, f"execution_options[{name!r}]")
                                      for name, options in given.items()}
            bad = [name for name in given if not isinstance(name, str)]
            if bad:
                raise InvalidTypeError(f"DataConfig(execution_options={{{bad[0]!r}: ...}}): key the dict by "
                                       "dataset name (a str), as the trainer's datasets={...} names them.")
        elif given is not None:
            self.execution_options = _context_of(given, "execution_options")

    def context_for(self, name: str) -> DataContext | None:
        """The ``DataContext`` dataset ``name`` is iterated under on the workers (None: theirs)."""
        if isinstance(self.execution_options, dict):
            return self.execution_options.get(name)
        return self.execution_options

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


def _context_of(options: Any, where: str) -> DataContext:
    """A ``DataContext``, or Ray's ``ExecutionOptions`` (its context's options), as a ``DataContext``."""
    if isinstance(options, ExecutionOptions):
        return options.context
    if isinstance(options, DataContext):
        return options
    raise InvalidTypeError(f"DataConfig({where}={options!r}): pass Ray's ExecutionOptions (e.g. "
                           "DataConfig.default_ingest_options() changed) or a muster.data.DataContext; several "
                           "datasets: a dict of dataset name -> one of those.")
