"""``ray.data.datasource``: custom sources and sinks (``Datasource``, ``ReadTask``, ``Datasink``,
``WriteResult``: see ``datasource.py`` and ``datasink.py``; the file-based ones, ``FileBasedDatasource``,
``RowBasedFileDatasink``, ``BlockBasedFileDatasink``, ``FilenameProvider``: ``file_based.py``), and the
options objects of Ray's file readers that muster's readers take (``FileShuffleConfig``,
``PathPartitionFilter``); Ray's other
datasource classes fail naming the equivalent (muster's readers take their options directly, e.g.
``read_parquet(partitioning=...)``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from muster.data.datasource.datasink import Datasink, TaskContext, WriteResult, WriteReturnType
from muster.data.datasource.datasource import Datasource, Reader, ReadTask
from muster.data.datasource.file_based import (BlockBasedFileDatasink, FileBasedDatasource, FilenameProvider,
                                               RowBasedFileDatasink)
from muster.exceptions import InvalidArgumentError, InvalidTypeError


@dataclass(frozen=True)
class FileShuffleConfig:
    """``read_*(shuffle=FileShuffleConfig(seed=...))``: read the files in a shuffled order, the same
    one for the same seed (``shuffle="files"``: a new order each time the read is planned)."""

    seed: int | None = None


@dataclass(frozen=True)
class RandomSeedConfig:
    """The ``seed=`` of ``random_shuffle``, ``randomize_block_order`` and ``random_sample``, as Ray's:
    with a ``seed``, each pass (epoch) has its own order drawn from (seed, pass), or, with
    ``reseed_after_execution=False``, every pass the same one; without a seed, each pass a new
    random order. A plain integer seed is ``RandomSeedConfig(seed)`` here for ``random_shuffle`` and
    ``randomize_block_order``: a new order every epoch, where Ray repeats one (see docs/data.md, "Per-epoch
    shuffle"); for ``random_sample``, as in Ray, the same rows every pass."""

    seed: int | None = None
    reseed_after_execution: bool = True
    use_timestamp_as_default: bool = False  # Ray's retry detail; muster draws an unseeded order once per pass

    def __post_init__(self) -> None:
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise InvalidTypeError(f"RandomSeedConfig(seed={self.seed!r}): the seed is an integer or None.")

    @staticmethod
    def of(seed: "int | RandomSeedConfig | None", where: str) -> "RandomSeedConfig":
        """``seed=`` as given to ``where`` (an integer, a config or None) as a config."""
        if isinstance(seed, RandomSeedConfig):
            return seed
        if seed is None or (isinstance(seed, int) and not isinstance(seed, bool)):
            return RandomSeedConfig(seed)
        raise InvalidTypeError(f"{where}(seed={seed!r}): pass an integer, a RandomSeedConfig or None.")

    def plan(self) -> tuple[int, bool]:
        """``(seed, per pass)``: the base seed to draw from, and whether each pass draws its own order."""
        if self.seed is None:
            import random

            return random.SystemRandom().randrange(2**63), True
        return self.seed, self.reseed_after_execution

    def to_ray(self) -> Any:
        import ray.data

        return ray.data.RandomSeedConfig(seed=self.seed, reseed_after_execution=self.reseed_after_execution)


class PathPartitionFilter:
    """``read_*(partition_filter=...)``: keep only the files whose partition values pass ``filter_fn``.

    Make one with :meth:`of`; a plain function ``list of paths -> list of paths`` works too.
    """

    def __init__(self, filter_fn: Callable[[dict[str, str]], bool], field_names: list[str] | None = None,
                 base_dir: str | None = None):
        if not callable(filter_fn):
            raise InvalidTypeError(f"PathPartitionFilter.of(filter_fn={filter_fn!r}): pass a function of the "
                                   "partition values (a dict of str) -> bool.")
        self.filter_fn, self.field_names, self.base_dir = filter_fn, field_names, base_dir

    @classmethod
    def of(cls, filter_fn: Callable[[dict[str, str]], bool], style: str = "hive", base_dir: str | None = None,
           field_names: list[str] | None = None, **_ray_options: Any) -> "PathPartitionFilter":
        """``style="hive"``: ``key=value`` folders; ``"dirname"``: plain folders named by ``field_names``
        in order (from ``base_dir``)."""
        if style not in ("hive", "dirname"):
            raise InvalidArgumentError(f"PathPartitionFilter.of(style={style!r}): use 'hive' or 'dirname'.")
        if style == "dirname" and not field_names:
            raise InvalidArgumentError("PathPartitionFilter.of(style='dirname'): pass field_names, the name of "
                                       "each folder level.")
        return cls(filter_fn, field_names if style == "dirname" else None, base_dir)

    def values(self, path: str) -> dict[str, str]:
        """The partition values in ``path``'s folders."""
        return partition_values(path, self.base_dir, self.field_names)

    def __call__(self, paths: list[str]) -> list[str]:
        return [p for p in paths if self.filter_fn(self.values(p))]


def partition_values(path: str, base_dir: str | None = None, field_names: list[str] | None = None) -> dict[str, str]:
    """The partition values in ``path``'s folders: hive's ``key=value`` ones, or with ``field_names``
    the last folders' names in order (below ``base_dir``)."""
    folders = path.rsplit("/", 1)[0]
    if base_dir:
        folders = folders.split(base_dir.rstrip("/"), 1)[-1]
    parts = [p for p in folders.split("/") if p]
    if field_names is None:
        return dict(p.split("=", 1) for p in parts if "=" in p)
    return dict(zip(field_names, parts[-len(field_names):]))


def __getattr__(name: str) -> Any:
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.data.datasource", name)


__all__ = ["BlockBasedFileDatasink", "Datasink", "Datasource", "FileBasedDatasource", "FileShuffleConfig",
           "FilenameProvider", "PathPartitionFilter", "ReadTask", "Reader", "RowBasedFileDatasink", "TaskContext",
           "WriteResult", "WriteReturnType"]
