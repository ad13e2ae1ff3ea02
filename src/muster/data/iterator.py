"""``DataIterator``: batches from a dataset (or one rank's shard of it), with
prefetching, a local shuffle buffer, torch conversion and an exact position.

A shard of ``n`` ranks keeps the rows whose index in the pass's output is
``rank mod n``; with ``equal=True`` a row is handed out only once its whole
group of ``n`` is complete, so every rank gets the same number of rows (and
so of batches) and every kept row goes to exactly one rank.  Every rank runs
the pipeline itself (the rows it keeps are chosen after execution), which is
what makes the split deterministic and independent of timing.

Each pass over an iterator is one epoch; ``random_shuffle`` is seeded from
(seed, epoch).  The local shuffle buffer, as Ray's, gives the same order on
every pass with the same ``local_shuffle_seed``; without one, each pass's is
new (a trainer's shard seeds it from (its seed, epoch), so a resumed epoch
replays its order).  A dataset's own iterator
numbers its passes among all the dataset's executions (a ``take_all`` between
two passes takes a number too), as Ray's execution index; a shard's iterator
counts its own passes, so every rank's are the same.  ``state_dict()``
records the epoch and the batches handed out, and ``load_state_dict()``
makes the next pass continue that epoch with the first batch not yet
handed out.
"""

from __future__ import annotations

import queue
import threading
import time
import warnings
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa

from muster._unsupported import refuse_removed_args
from muster.data import block as blk
from muster.data.task_context import Executions
from muster.data.exceptions import DataColumnError, DataTypeError
from muster.exceptions import InvalidArgumentError, InvalidTypeError

if TYPE_CHECKING:
    from muster.data.dataset import Dataset
    from muster.data.context import DataContext

_END = object()


class DataIterator:
    """Iterates a dataset, or rank ``rank`` of ``world`` of it (``streaming_split``, ``get_dataset_shard``)."""

    def __init__(self, dataset: "Dataset", rank: int = 0, world: int = 1, equal: bool = True,
                 seed: int | None = None, executions: Executions | None = None):
        if not 0 <= rank < world:
            raise InvalidArgumentError(f"DataIterator(rank={rank}, world={world}): rank must be in [0, world).")
        self._dataset, self._rank, self._world, self._equal = dataset, rank, world, equal
        self._seed = seed  # the local shuffle buffer's seed when the call gives none
        # numbers the passes: its dataset's executions for ``Dataset.iterator()``, else its own
        self._executions = executions if executions is not None else Executions()
        self._pass_epoch = 0  # the running pass's epoch
        self._skip = 0  # batches of the next pass already consumed before a restart
        self._position = 0  # batches of the current pass handed out
        self._in_pass = False
        self._on_pass_start: Callable[[], None] | None = None
        self._on_wait: Callable[[float], None] | None = None  # a trainer's data-wait meter
        self.last_wait_s = 0.0
        self._context: "DataContext | None" = None  # this dataset's own (a DataConfig's per-dataset options)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        from muster._unsupported import raise_unsupported

        raise_unsupported("muster.data.DataIterator", name)

    def __repr__(self) -> str:
        """As Ray's ``DataIterator(<dataset>)``; a ``streaming_split`` shard also names its rank and world."""
        if self._world == 1:
            return f"DataIterator({self._dataset!r})"
        return f"DataIterator(rank={self._rank}, world={self._world}, dataset={self._dataset!r})"

    @property
    def _epoch(self) -> int:
        """The next pass's epoch."""
        return self._executions.next

    @_epoch.setter
    def _epoch(self, epoch: int) -> None:
        self._executions.restart_at(epoch)

    # -- blocks of one pass -------------------------------------------------------
    def _blocks(self, epoch: int) -> Iterator[pa.Table]:
        from muster.data.context import under

        stream = under(self._context, self._dataset._execute(epoch))
        if self._world == 1:
            return stream
        return _stride(stream, self._rank, self._world, self._equal)

    # -- public iteration ---------------------------------------------------------
    def iter_batches(self, *, batch_size: int | None = 256, batch_format: str | None = "numpy",
                     prefetch_batches: int = 1, drop_last: bool = False, local_shuffle_buffer_size: int | None = None,
                     local_shuffle_seed: int | None = None, _finalize: Callable[[Any], Any] | None = None,
                     **removed: Any) -> "Passes":
        """Batches of ``batch_size`` rows (the last may be short unless ``drop_last``).

        Args:
            batch_size: rows per batch; ``None`` gives whole blocks.
            batch_format: ``"numpy"`` (dict of arrays), ``"pandas"`` or ``"pyarrow"``; ``None``, as Ray's, the
                blocks' own format (pyarrow).
            prefetch_batches: batches prepared ahead on a background thread (0: none).
            drop_last: drop a final short batch.
            local_shuffle_buffer_size: shuffle rows within a buffer of at least this many rows.
            local_shuffle_seed: seeds that buffer: every pass with the same seed gives the same order, as
                Ray's (to vary it per epoch, pass a seed of your own per epoch, e.g. ``seed + epoch``).
        """
        refuse_removed_args("iter_batches", removed)
        fmt = blk.check_batch_format(batch_format, "iter_batches")
        if batch_size is not None and batch_size < 1:
            raise InvalidArgumentError(f"iter_batches(batch_size={batch_size}): use a positive number or None.")
        if prefetch_batches < 0:
            raise InvalidArgumentError(f"iter_batches(prefetch_batches={prefetch_batches}): use 0 or more.")
        return Passes(lambda: self._pass(batch_size, fmt, prefetch_batches, drop_last, local_shuffle_buffer_size,
                                         local_shuffle_seed, _finalize))

    def _pass(self, batch_size: int | None, fmt: str, prefetch_batches: int, drop_last: bool,
              local_shuffle_buffer_size: int | None, local_shuffle_seed: int | None,
              _finalize: Callable[[Any], Any] | None) -> Iterator[Any]:
        """One pass (epoch) of batches; it starts when its first batch is asked for."""
        epoch, skip = self._executions.take(), self._skip
        self._pass_epoch, self._skip = epoch, 0
        if self._on_pass_start is not None:
            self._on_pass_start()

        def produce() -> Iterator[Any]:
            blocks = self._blocks(epoch)
            if local_shuffle_buffer_size:
                blocks = _local_shuffle(blocks, local_shuffle_buffer_size, batch_size or 1024,
                                        self._shuffle_key(local_shuffle_seed, epoch))
            batches = _rebatch(blocks, batch_size, drop_last)
            for i, b in enumerate(batches):
                if i < skip:
                    continue
                out = blk.to_batch(b, fmt)
                yield _finalize(out) if _finalize is not None else out

        self._position, self._in_pass = skip, True
        source = _prefetch(produce(), prefetch_batches) if prefetch_batches else produce()
        try:
            while True:
                t = time.perf_counter()
                batch = next(source, _END)
                waited = time.perf_counter() - t
                self.last_wait_s += waited
                if self._on_wait is not None:
                    self._on_wait(waited)
                if batch is _END:
                    break
                self._position += 1
                yield batch
            self._in_pass = False
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()

    def _shuffle_key(self, local_shuffle_seed: int | None, epoch: int) -> list[int] | None:
        """The local shuffle buffer's seed: the call's ``local_shuffle_seed`` gives the same order every pass,
        as Ray's; without one, a trainer's shard seed (one for every attempt, so a resumed epoch replays its
        order) is mixed with the epoch, so each epoch is shuffled anew, as Ray's unseeded buffer is."""
        if local_shuffle_seed is not None:
            return [local_shuffle_seed, self._rank]
        return None if self._seed is None else [self._seed, epoch, self._rank]

    def iter_rows(self) -> Iterable[dict[str, Any]]:
        """Rows as dicts (each ``for`` over the result is a new pass, as with ``iter_batches``)."""
        tables = self.iter_batches(batch_size=None, batch_format="pyarrow")
        return Passes(lambda: (row for table in tables for row in blk.iter_rows(table)))

    def iter_torch_batches(self, *, batch_size: int | None = 256, dtypes: Any = None, device: Any = "auto",
                           collate_fn: Callable[[dict[str, np.ndarray]], Any] | None = None,
                           drop_last: bool = False, prefetch_batches: int = 1,
                           local_shuffle_buffer_size: int | None = None, local_shuffle_seed: int | None = None,
                           pin_memory: bool = False, **removed: Any) -> "Passes":
        """Batches as dicts of torch tensors (or whatever ``collate_fn`` makes of a numpy batch).

        Args:
            dtypes: one torch dtype for every column, or a dict column -> dtype naming every column (a
                column it leaves out raises ``KeyError`` at its first batch, as in Ray; a key that is no column
                is ignored). Not with ``collate_fn``.
            device: where to put the tensors; ``"auto"`` is the training worker's device (CPU otherwise).
            collate_fn: takes the batch and returns the batch to yield (convert dtypes inside it): a numpy
                batch for a plain function, or the format of its ``muster.data.collate_fn`` base class
                (``ArrowBatchCollateFn``: a ``pyarrow.Table``; ``PandasBatchCollateFn``: a DataFrame).
            pin_memory: page-lock the tensors before they go to a CUDA device (faster, asynchronous
                copies); no effect without CUDA.

        Raises:
            InvalidArgumentError: both ``collate_fn`` and ``dtypes`` given (as Ray refuses them).
            DataTypeError: a column cannot become a tensor (strings, ragged lists).
            DataColumnError: (a ``KeyError``, at the first batch) ``dtypes`` is a dict without a batch's column.
        """
        import torch

        refuse_removed_args("iter_torch_batches", removed)
        if collate_fn is not None and dtypes is not None:
            raise InvalidArgumentError(
                f"iter_torch_batches(collate_fn={collate_fn!r}, dtypes={dtypes!r}): collate_fn cannot be used with "
                "dtypes (as in Ray); convert the tensors to the dtypes you want inside collate_fn, or drop it.")
        _check_dtypes(dtypes, torch)
        dev = _device(device)
        pin = bool(pin_memory) and dev is not None and dev.type == "cuda" and torch.cuda.is_available()

        from muster.data.collate_fn import batch_format_of

        def finalize(batch: Any) -> Any:
            if collate_fn is not None:
                out = collate_fn(batch)
                return _to_device(out, dev) if dev is not None else out
            if pin:
                return {k: _tensor(k, v, dtypes, None, torch).pin_memory().to(dev, non_blocking=True)
                        for k, v in batch.items()}
            return {k: _tensor(k, v, dtypes, dev, torch) for k, v in batch.items()}

        fmt = batch_format_of(collate_fn) if collate_fn is not None else "numpy"
        return self.iter_batches(batch_size=batch_size, batch_format=fmt, prefetch_batches=prefetch_batches,
                                 drop_last=drop_last, local_shuffle_buffer_size=local_shuffle_buffer_size,
                                 local_shuffle_seed=local_shuffle_seed, _finalize=finalize)

    def get_context(self) -> "DataContext":
        """The ``DataContext`` its passes run under (Ray's): its dataset's own, when a ``DataConfig`` gave that
        dataset ``execution_options``, else this process's current one."""
        from muster.data.context import DataContext

        return self._context if self._context is not None else DataContext.get_current()

    def schema(self) -> pa.Schema:
        """The columns and types of the dataset this iterator reads."""
        return self._dataset.schema()

    def materialize(self) -> "Dataset":
        """This iterator's rows of one pass, as an in-memory dataset."""
        from muster.data.dataset import from_blocks

        return from_blocks(list(self.iter_batches(batch_size=None, batch_format="pyarrow", prefetch_batches=0)))

    def stats(self) -> str:
        return self._dataset.stats()

    # -- exact resume (muster.train saves this with each checkpoint) ---------------
    def state_dict(self) -> dict[str, Any]:
        if self._in_pass:
            return {"epoch": self._pass_epoch, "position": self._position, "in_pass": True}
        return {"epoch": self._epoch, "position": 0, "in_pass": False}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._epoch, self._skip = int(state["epoch"]), int(state["position"]) if state.get("in_pass") else 0


class Passes:
    """What ``iter_batches``/``iter_torch_batches``/``iter_rows`` return: an iterable, as Ray's, each
    ``for`` over which is a new pass (an epoch), so a loader made once serves every epoch. ``next()``
    on it directly also works: it goes on through one pass of its own."""

    def __init__(self, start: Callable[[], Iterator[Any]]):
        self._start = start
        self._current: Iterator[Any] | None = None

    def __iter__(self) -> Iterator[Any]:
        return self._start()

    def __next__(self) -> Any:
        if self._current is None:
            self._current = self._start()
        return next(self._current)

    def close(self) -> None:
        """End the pass ``next()`` is going through (its prefetching stops), as a generator's ``close``."""
        current, self._current = self._current, None
        close = getattr(current, "close", None)
        if close is not None:
            close()


def _stride(stream: Iterator[pa.Table], rank: int, world: int, equal: bool) -> Iterator[pa.Table]:
    """Rows ``rank, rank+world, ...`` of ``stream``; with ``equal`` only whole groups of ``world`` rows."""
    seen = 0  # rows of the stream so far
    mine: list[pa.Table] = []  # this rank's rows not yet handed out
    held = 0
    given = 0
    for table in stream:
        first = (rank - seen) % world
        idx = np.arange(first, table.num_rows, world)
        seen += table.num_rows
        if len(idx):
            mine.append(table.take(pa.array(idx)))
            held += len(idx)
        ready = (seen // world - given) if equal else held
        if ready > 0:
            out = blk.concat(mine)
            yield out.slice(0, ready)
            rest = out.slice(ready)
            mine, held, given = ([rest] if rest.num_rows else []), held - ready, given + ready
    if not equal and held:
        yield blk.concat(mine)


def _rebatch(blocks: Iterator[pa.Table], batch_size: int | None, drop_last: bool) -> Iterator[pa.Table]:
    if batch_size is None:
        yield from (b for b in blocks if b.num_rows)
        return
    parts: list[pa.Table] = []
    held = 0
    for b in blocks:
        while b.num_rows:
            take = min(batch_size - held, b.num_rows)
            parts.append(b.slice(0, take))
            held += take
            b = b.slice(take)
            if held == batch_size:
                yield blk.concat(parts) if len(parts) > 1 else parts[0]
                parts, held = [], 0
    if held and not drop_last:
        yield blk.concat(parts)


def _local_shuffle(blocks: Iterator[pa.Table], buffer: int, batch: int, key: list[int] | None
                   ) -> Iterator[pa.Table]:
    """Rows shuffled within a window: fill to ``buffer + batch`` rows, permute, hand out all but ``buffer``
    (``key`` seeds the permutations; None: a new order each time)."""
    rng = np.random.default_rng(key)
    held: list[pa.Table] = []
    n = 0
    for b in blocks:
        held.append(b)
        n += b.num_rows
        if n >= buffer + batch:
            table = blk.concat(held)
            table = table.take(pa.array(rng.permutation(n)))
            out = n - buffer
            yield table.slice(0, out)
            held, n = [table.slice(out)], buffer
    if n:
        table = blk.concat(held)
        yield table.take(pa.array(rng.permutation(n)))


_CHUNK_S = 0.001  # batches made within this long travel to the consumer together
_CHUNK_MAX = 16


def _prefetch(source: Iterator[Any], depth: int) -> Iterator[Any]:
    """Run ``source`` on a background thread, at most ``depth`` hand-offs ahead.

    Cheap items (a slice of an Arrow block costs tens of microseconds) are
    handed over in chunks of those made within ``_CHUNK_S``: a thread hand-off
    per batch cost more than making the batch.  An item that takes longer than
    that to make travels alone, so slow pipelines keep the usual depth.
    """
    q: queue.Queue[Any] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def pump() -> None:
        try:
            chunk: list[Any] = []
            began = time.perf_counter()
            for item in source:
                chunk.append(item)
                if len(chunk) < _CHUNK_MAX and time.perf_counter() - began < _CHUNK_S:
                    continue
                if not _put(("items", chunk)):
                    break
                chunk, began = [], time.perf_counter()
            else:
                if not chunk or _put(("items", chunk)):
                    _put(("end", None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            _put(("error", exc))
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()

    def _put(item: tuple[str, Any]) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    thread = threading.Thread(target=pump, name="muster-data-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            kind, item = q.get()
            if kind == "end":
                return
            if kind == "error":
                raise item
            yield from item
    finally:
        stop.set()
        thread.join(timeout=10)


def _device(device: Any) -> Any:
    import torch

    if device == "auto":
        try:
            from muster.train.torch import get_device

            return get_device() if torch.cuda.is_available() else None
        except Exception:  # noqa: BLE001 - not in a training worker
            return None
    try:
        return None if device is None else torch.device(device)
    except (RuntimeError, TypeError):  # torch's own message lists every device type it knows
        raise InvalidArgumentError(f"iter_torch_batches(device={device!r}): use 'cpu', 'cuda', 'cuda:1', a "
                                   "torch.device, or 'auto' (the training worker's device).") from None


def _check_dtypes(dtypes: Any, torch: Any) -> None:
    """One torch dtype, or a dict column -> torch dtype (a string such as 'float32' would be taken
    by ``Tensor.to`` for a device name)."""
    values = dtypes.values() if isinstance(dtypes, dict) else [dtypes]
    bad = next((v for v in values if v is not None and not isinstance(v, torch.dtype)), None)
    if bad is not None:
        raise InvalidTypeError(f"iter_torch_batches(dtypes={dtypes!r}): {bad!r} is not a torch dtype; pass one such "
                               "as torch.float32, or a dict column -> dtype, e.g. {'x': torch.float32}.")


def _tensor(name: str, values: np.ndarray, dtypes: Any, device: Any, torch: Any) -> Any:
    if values.dtype == object or values.dtype.kind in "USM":
        sample = next((v for v in values if v is not None), None)
        raise DataTypeError(
            f"iter_torch_batches: column {name!r} holds {type(sample).__name__} values (numpy dtype "
            f"{values.dtype}), which cannot become a tensor. Drop it (drop_columns([{name!r}])), encode it as "
            "numbers in a map_batches, or pass collate_fn= to build the batch yourself."
        )
    with warnings.catch_warnings():  # read-only Arrow memory: the tensor is only read
        warnings.simplefilter("ignore", UserWarning)
        t = torch.as_tensor(values)
    if isinstance(dtypes, dict) and name not in dtypes:
        raise DataColumnError(
            f"iter_torch_batches(dtypes={dtypes!r}): no dtype for column {name!r}; a dict of dtypes names every "
            f"column, as in Ray: add {name!r}, pass one dtype for all columns, or drop the column first "
            f"(drop_columns([{name!r}])).")
    dtype = dtypes.get(name) if isinstance(dtypes, dict) else dtypes
    if dtype is not None:
        t = t.to(dtype)
    return t.to(device) if device is not None else t


def _to_device(batch: Any, device: Any) -> Any:
    if hasattr(batch, "to"):
        return batch.to(device)
    if isinstance(batch, dict):
        return {k: _to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(v, device) for v in batch)
    return batch
