"""``Dataset``'s splits (Ray's ``split``, ``split_at_indices``, ``split_proportionately``,
``train_test_split``, ``streaming_split``, ``streaming_train_test_split``): materialized parts, iterators that
stream shards, or lazy train and test sides."""

from __future__ import annotations

import hashlib
import uuid
import zlib
from typing import TYPE_CHECKING, Any, Iterator, cast

import numpy as np
import pyarrow as pa

from muster.data import _ray_plan, combine, task_context
from muster.data import block as blk
from muster.data.iterator import DataIterator
from muster.data.plan import RayCall, Transform
from muster.exceptions import InvalidArgumentError

if TYPE_CHECKING:
    from muster.data.dataset import Dataset, MaterializedDataset


def _positive(value: Any, name: str, where: str, optional: bool = True) -> None:
    """``value`` is an integer >= 1, or None where ``optional`` (the argument's default)."""
    if (value is None and not optional) or (value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1)):
        allowed = "a positive integer or None" if optional else "a positive integer"
        raise InvalidArgumentError(f"{where}({name}={value!r}): use {allowed}.")


def from_blocks(blocks: list[pa.Table]) -> "MaterializedDataset":
    """``dataset.from_blocks`` (imported when called: ``dataset`` builds on this module)."""
    from muster.data.dataset import from_blocks as make

    return make(blocks)


class Splits:
    """The split methods of ``Dataset``, which defines what they use."""

    if TYPE_CHECKING:
        def to_arrow(self) -> pa.Table: ...

        def _execute(self, epoch: int = 0) -> Iterator[pa.Table]: ...

        def count(self) -> int: ...

        def materialize(self) -> MaterializedDataset: ...

        def random_shuffle(self, *, seed: Any = None) -> Dataset: ...

    def split(self, n: int, *, equal: bool = False, locality_hints: Any = None) -> list["Dataset"]:
        """``n`` materialized parts, in order.

        Without ``equal``, Ray's rule when the dataset has ``n`` blocks or more: each part takes whole
        consecutive blocks, the block list cut as ``numpy.array_split`` cuts it (the first parts one block
        more); with fewer blocks (where Ray's rule leaves parts empty), parts of near-equal rows.
        ``equal=True`` cuts rows: ``count // n`` each, the remainder dropped.
        """
        _positive(n, "n", "split", optional=False)
        blocks = list(self._execute())
        if not equal and len(blocks) >= n:
            return [from_blocks([blocks[i] for i in part]) for part in np.array_split(np.arange(len(blocks)), n)]
        table = blk.concat(blocks)
        per = table.num_rows // n
        if equal:
            return [from_blocks([table.slice(i * per, per)]) for i in range(n)]
        bounds = np.linspace(0, table.num_rows, n + 1).astype(int)
        return [from_blocks([table.slice(int(a), int(b - a))]) for a, b in zip(bounds[:-1], bounds[1:])]

    def split_at_indices(self, indices: list[int]) -> list["Dataset"]:
        if any(b < a for a, b in zip(indices, indices[1:])) or any(i < 0 for i in indices):
            raise InvalidArgumentError(f"split_at_indices({indices!r}): indices must be >= 0 and sorted.")
        table = self.to_arrow()
        edges = [0, *[min(i, table.num_rows) for i in indices], table.num_rows]
        return [from_blocks([table.slice(a, b - a)]) for a, b in zip(edges[:-1], edges[1:])]

    def split_proportionately(self, proportions: list[float]) -> list["Dataset"]:
        """``len(proportions) + 1`` parts in order: each given fraction of the rows, then the rest."""
        if not proportions or any(not 0 < p < 1 for p in proportions) or sum(proportions) >= 1:
            raise InvalidArgumentError(
                f"split_proportionately({proportions!r}): pass fractions in (0, 1) that sum to less than 1 "
                "(the last part takes the rest)."
            )
        n = self.count()
        edges = np.cumsum([int(p * n) for p in proportions]).tolist()
        return self.materialize().split_at_indices(edges)

    def train_test_split(self, test_size: float | int, *, shuffle: bool = False, seed: int | None = None,
                         stratify: str | None = None) -> tuple["Dataset", "Dataset"]:
        """``(train, test)``: the last ``test_size`` (a fraction, or a row count) of the rows go to test.

        ``stratify``: split each value of that column alike, so both parts keep its proportions.
        """
        ds = self.random_shuffle(seed=seed) if shuffle else self
        if stratify is not None:
            train_rows, test_rows = combine.stratified_split(ds.to_arrow(), test_size, stratify)
            return from_blocks([train_rows]), from_blocks([test_rows])
        n = ds.count()
        share = combine.test_share(test_size, n)
        cut = n - (test_size if isinstance(test_size, int) else int(np.ceil(n * share)))
        train, test = ds.materialize().split_at_indices([cut])
        return train, test

    def streaming_split(self, n: int, *, equal: bool = False, locality_hints: Any = None) -> list[DataIterator]:
        """``n`` iterators; iterator ``i`` streams rows ``i, i+n, ...`` of each pass (see ``DataIterator``)."""
        _positive(n, "n", "streaming_split", optional=False)
        if _ray_plan.on_ray_engine():
            return _ray_plan.streaming_split(cast("Dataset", self), n, equal, locality_hints)
        return [DataIterator(cast("Dataset", self), i, n, equal) for i in range(n)]

    def streaming_train_test_split(self, test_size: float, *, split_type: str = "random",
                                   hash_column: str | None = None, seed: int | None = None,
                                   **ray_remote_kwargs: Any) -> tuple["Dataset", "Dataset"]:
        """``(train, test)`` decided row by row as the data streams, nothing gathered (Ray's).

        Args:
            test_size: each row's chance (``"random"``) or the share of key values (``"hash"``) that go to
                test, strictly between 0 and 1.
            split_type: ``"random"``: a draw per row, from ``seed`` and the batch's content, so every pass
                (train's and test's) splits alike in any order (Ray seeds by task index instead: the rows
                differ from Ray's, the proportion is the same); ``"hash"``: by a hash of ``hash_column``'s
                value, Ray's own (BLAKE2b of its text), so the same values go to test as in Ray.
            hash_column: the key column, required for (and only for) ``"hash"``.
            seed: for ``"random"`` only.
            **ray_remote_kwargs: go to the ``map_batches`` each side runs.
        """
        where = f"streaming_train_test_split(test_size={test_size!r}, split_type={split_type!r})"
        if isinstance(test_size, bool) or not isinstance(test_size, (int, float)) or not 0 < test_size < 1:
            raise InvalidArgumentError(f"{where}: test_size is the test share; use a number between 0 and 1.")
        if split_type not in ("random", "hash"):
            raise InvalidArgumentError(f"{where}: split_type is \"random\" or \"hash\".")
        if split_type == "hash" and (hash_column is None or seed is not None):
            raise InvalidArgumentError(f"{where}, hash_column={hash_column!r}, seed={seed!r}: a hash split needs "
                                       "hash_column=<key column> and takes no seed.")
        if split_type == "random" and hash_column is not None:
            raise InvalidArgumentError(f"{where}, hash_column={hash_column!r}: hash_column is for split_type=\"hash\"; "
                                       "drop it, or use the hash split.")
        ds = cast("Dataset", self)
        train, test = (ds.map_batches(_split_rows, batch_format="pyarrow", **ray_remote_kwargs, fn_kwargs={
            "test_size": float(test_size), "hash_column": hash_column, "seed": seed, "train": side})
            for side in (True, False))
        return train, test


def random_sample_op(fraction: float, seed: Any) -> Transform:
    """``random_sample(fraction, seed=)``'s lazy operator (Ray's ``MapBatches(random_sample)``): each row of a
    block kept when its draw from numpy's generator is below ``fraction``. An integer seed gives the same rows
    every pass (Ray's rule for ``random_sample``); ``RandomSeedConfig(s)`` other rows each pass (drawn from
    (block of the task, task, pass, seed), as ``random(seed=)``), with ``reseed_after_execution=False`` the same;
    no seed, fresh rows every pass."""
    from muster.data.datasource import RandomSeedConfig

    config = RandomSeedConfig.of(seed, "random_sample")
    per_pass = isinstance(seed, RandomSeedConfig) and config.reseed_after_execution
    counter = f"random_sample-{uuid.uuid4().hex}"  # its blocks within a task, apart from other draws'

    def sample(block: pa.Table) -> list[pa.Table]:
        if config.seed is None:
            rng = np.random.default_rng()
        else:
            task = task_context.current()
            execution = [task.epoch] if per_pass else []
            rng = np.random.default_rng([task.advance(counter, 1), task.task_idx, *execution, config.seed])
        return [block.filter(pa.array(rng.random(block.num_rows) < fraction))]

    ray_seed = seed.to_ray() if isinstance(seed, RandomSeedConfig) else seed
    return Transform("MapBatches(random_sample)", sample, RayCall.of("random_sample", fraction, seed=ray_seed))


def _split_rows(batch: pa.Table, *, test_size: float, hash_column: str | None, seed: int | None,
                train: bool) -> pa.Table:
    """``batch``'s rows of one side of ``streaming_train_test_split``."""
    if hash_column is None:  # a draw per row, from the seed and this batch's content
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_table(batch)
        rng = np.random.default_rng([seed or 0, zlib.crc32(sink.getvalue().to_pybytes())])
        to_train = rng.random(batch.num_rows) < 1 - test_size
    else:
        if hash_column not in batch.column_names:
            raise InvalidArgumentError(f"streaming_train_test_split(hash_column={hash_column!r}): no such column; "
                                       f"the columns are {batch.column_names}.")
        cut = (1 - test_size) * (1 << 64)  # Ray's rule: the key's text's 64-bit BLAKE2b below the cut is train
        keys = batch.column(hash_column).to_numpy(zero_copy_only=False)
        to_train = np.array([int.from_bytes(hashlib.blake2b(str(k).encode(), digest_size=8).digest(), "big") < cut
                             for k in keys], dtype=bool)
    return batch.filter(pa.array(to_train if train else ~to_train))
