"""``ray.data.context``: ``DataContext``, the settings of muster.data's execution (one per process, or a
dataset's own while its blocks are made: ``under``), and ``ShuffleStrategy``."""

from __future__ import annotations

import contextlib
import contextvars
import copy as _copy
import enum
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator

import pyarrow as pa

from muster.data._ray_context_defaults import RAY_DEFAULTS
from muster.exceptions import InvalidArgumentError

if TYPE_CHECKING:
    from muster.data.execution_options import ExecutionOptions


@dataclass(kw_only=True)
class DataContext:
    """Execution settings for this process (``DataContext.get_current()``, as in Ray).

    Attributes:
        max_threads: threads that run read and map tasks per consuming process.
        max_bytes_in_flight: finished blocks not yet consumed, at most (bytes).
        target_block_rows: rows per block that in-memory sources and shuffles aim for.
        target_max_block_size: bytes per block, at most, for the sources that know their rows' size
            (``range_tensor``, ``from_numpy``, ``from_items``, ``from_arrow``...): they make blocks of
            fewer rows when ``target_block_rows`` rows would be bigger (Ray's setting and default,
            128 MiB; None: no cap).
        use_workers: let the driver run jobs with Python functions on idle pooled workers
            of an engine that is already running (see ``_Workers``).
        preserve_order: keep the input order of blocks (default, and what exact training
            shards need); off, an actor pool hands blocks on as they finish.
        enable_progress_bars: show the live per-operator view while a pass runs in the driver
            (see ``progress``).
        progress_every_s: how often the live view refreshes (plain lines: one per this period,
            the first only once a pass has run this long).
        enable_arrow_backed_pandas_conversion: True: pandas batches (and ``to_pandas``) hold Arrow-backed
            columns (``pd.ArrowDtype``: ``string[pyarrow]``, ``int64[pyarrow]`` keeping its nulls as ``<NA>``,
            ``list<item: int64>[pyarrow]``), exactly as Ray 2.56+ converts by default. False (muster's default):
            numpy dtypes (nulls as NaN/None, lists as object arrays of ndarrays), Ray's older conversion, under
            which numpy-only operations such as ``df["id"] % 2`` work (Arrow-backed columns raise on them).
    Only the settings above act here. Every other field of Ray 2.60's ``DataContext`` (``max_errored_blocks``,
    ``target_min_block_size``, ``read_op_min_num_blocks``, ``shuffle_strategy``...: ``RAY_ONLY_SETTINGS``)
    reads as Ray's default until set and keeps what is set, so a Ray script can save and restore it; none
    changes what muster does. Any other name is refused (``AttributeError``), to catch a misspelt one.
    """

    max_threads: int = field(default_factory=lambda: max(2, min(8, os.cpu_count() or 2)))
    max_bytes_in_flight: int = 256 * 1024 * 1024
    target_block_rows: int = 64 * 1024
    target_max_block_size: int | None = 128 * 1024 * 1024
    use_workers: bool = True
    preserve_order: bool = True
    enable_progress_bars: bool = True
    progress_every_s: float = 5.0
    enable_arrow_backed_pandas_conversion: bool = False
    _kv_configs: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.max_threads < 1:
            raise InvalidArgumentError(f"DataContext(max_threads={self.max_threads}): use 1 or more.")
        if self.max_bytes_in_flight < 1:
            raise InvalidArgumentError(f"DataContext(max_bytes_in_flight={self.max_bytes_in_flight}): "
                                       "use a positive size.")
        if self.progress_every_s <= 0:
            raise InvalidArgumentError(f"DataContext(progress_every_s={self.progress_every_s}): "
                                       "use a positive number of seconds.")
        if self.target_block_rows < 1:
            raise InvalidArgumentError(f"DataContext(target_block_rows={self.target_block_rows}): use 1 or more.")
        if self.target_max_block_size is not None and self.target_max_block_size < 1:
            raise InvalidArgumentError(f"DataContext(target_max_block_size={self.target_max_block_size}): use a "
                                       "positive number of bytes (Ray's default: 128 MiB), or None for no cap.")

    _current: "DataContext | None" = None

    def __setattr__(self, name: str, value: Any) -> None:
        """A setting muster has, or one of Ray's that only tunes Ray's cluster execution (kept, no
        effect); any other name is a mistake worth saying (a typo would otherwise change nothing)."""
        if name == "execution_options":  # Ray's ctx.execution_options = DataConfig.default_ingest_options()
            from muster.data.execution_options import ExecutionOptions

            ExecutionOptions.of(self).take(value)
            return
        if name not in _SETTINGS and name not in RAY_ONLY_SETTINGS and not name.startswith("_"):
            raise AttributeError(_no_setting(name))
        if name == "shuffle_strategy":  # Ray takes the strategy's name too
            value = _strategy(value)
        object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        """A Ray setting nobody set reads as Ray 2.60's default (kept from then on, so ``ctx.retried_io_errors
        .append(...)`` sticks); any other name is not a setting."""
        if name in RAY_DEFAULTS:
            value = _copy.deepcopy(RAY_DEFAULTS[name])
            object.__setattr__(self, name, _strategy(value) if name == "shuffle_strategy" else value)
            return self.__dict__[name]
        if name.startswith("_"):  # Python's own look-ups (__deepcopy__...) and private names
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        raise AttributeError(_no_setting(name))

    def copy(self) -> "DataContext":
        """A copy of this context (its settings, Ray's and ``set_config``'s included) that changes apart from it."""
        return _copy.deepcopy(self)

    @property
    def execution_options(self) -> "ExecutionOptions":
        """Ray's ``ctx.execution_options``: its ``preserve_order`` is this context's; Ray's other options
        (``resource_limits``, ``verbose_progress``...) are accepted and have no effect here."""
        from muster.data.execution_options import ExecutionOptions

        return ExecutionOptions.of(self)

    def get_config(self, key: str, default: Any = None) -> Any:
        """Ray's key-value settings (``set_config``): the value kept for ``key``, or ``default``."""
        return self._kv_configs.get(key, default)

    def set_config(self, key: str, value: Any) -> None:
        """Keep ``value`` for ``key``, as Ray's ``DataContext.set_config``; the keys Ray's docs set
        (``debug_limit_shuffle_execution_to_num_blocks``...) tune its cluster execution and change nothing here."""
        self._kv_configs[key] = value

    def remove_config(self, key: str) -> None:
        """Forget ``key``'s value (nothing to do if none is kept)."""
        self._kv_configs.pop(key, None)

    @staticmethod
    def get_current() -> "DataContext":
        scoped = _scoped.get()
        if scoped is not None:  # a dataset's own context, while its blocks are made (see ``under``)
            return scoped
        if DataContext._current is None:
            DataContext._current = DataContext()
        return DataContext._current

    @staticmethod
    def _set_current(context: "DataContext | None") -> "DataContext | None":
        """Make ``context`` this process's current one (``None``: a fresh default on the next ``get_current``);
        returns the one it replaces, as Ray's."""
        previous, DataContext._current = DataContext._current, context
        return previous

    @staticmethod
    @contextlib.contextmanager
    def current(context: "DataContext") -> Iterator[None]:
        """``with DataContext.current(ctx):`` ``ctx`` is this process's current context inside (Ray's)."""
        previous = DataContext._set_current(context)
        try:
            yield
        finally:
            DataContext._set_current(previous)


_SETTINGS = frozenset(DataContext.__dataclass_fields__)


def _no_setting(name: str) -> str:
    return (f"DataContext has no setting {name!r}. muster's: "
            f"{', '.join(sorted(n for n in _SETTINGS if not n.startswith('_')))}; Ray's settings that tune "
            "a cluster's execution (target_min_block_size, use_push_based_shuffle, ...: "
            "muster.data.context.RAY_ONLY_SETTINGS) are accepted and change nothing here.")


def _strategy(value: Any) -> "ShuffleStrategy":
    try:
        return ShuffleStrategy(value)
    except ValueError:
        raise InvalidArgumentError(f"DataContext.shuffle_strategy={value!r}: use one of "
                                   f"{', '.join(repr(s.value) for s in ShuffleStrategy)} (or a ShuffleStrategy)."
                                   ) from None
_scoped: contextvars.ContextVar[DataContext | None] = contextvars.ContextVar("muster_data_context",
                                                                           default=None)


def under(ctx: DataContext | None, blocks: Iterator[pa.Table]) -> Iterator[pa.Table]:
    """``blocks``, each made while ``DataContext.get_current()`` is ``ctx`` (in the pipeline's threads too): a
    dataset's own options (``DataConfig(execution_options={name: ...})``) without changing this process's."""
    return blocks if ctx is None else _made_under(ctx, blocks)


def _made_under(ctx: DataContext, blocks: Iterator[pa.Table]) -> Iterator[pa.Table]:
    try:
        while True:
            with current_as(ctx):
                block = next(blocks, None)
            if block is None:
                return
            yield block
    finally:
        close = getattr(blocks, "close", None)
        if close is not None:
            with current_as(ctx):
                close()


@contextlib.contextmanager
def current_as(ctx: DataContext | None) -> Iterator[None]:
    """``DataContext.get_current()`` is ``ctx`` inside (in this thread or task; ``None``: unchanged)."""
    if ctx is None:
        yield
        return
    token = _scoped.set(ctx)
    try:
        yield
    finally:
        _scoped.reset(token)

#: Ray's DataContext settings muster keeps and does not act on (they size blocks, place tasks, retry, shuffle,
#: convert or log on Ray's cluster): every field of Ray 2.60's DataContext but muster's own, each read as Ray's
#: default until set (``RAY_DEFAULTS``), and three names of older Rays that are only kept as set
RAY_ONLY_SETTINGS = frozenset(RAY_DEFAULTS) | {"eager_free", "log_internal_stack_trace_to_stdout",
                                               "target_shuffle_max_block_size"}


class ShuffleStrategy(str, enum.Enum):
    """Ray's names for its cluster shuffle algorithms. ``DataContext.shuffle_strategy`` keeps the one a
    script sets and nothing here reads it: every shuffle, sort and keyed ``repartition`` gathers its input
    in this process whatever the strategy (Ray runs ``repartition(keys=)`` only under ``HASH_SHUFFLE``,
    ``SHUFFLE_V2`` or ``GPU_SHUFFLE``)."""

    SORT_SHUFFLE_PULL_BASED = "sort_shuffle_pull_based"
    SORT_SHUFFLE_PUSH_BASED = "sort_shuffle_push_based"
    HASH_SHUFFLE = "hash_shuffle"
    SHUFFLE_V2 = "shuffle_v2"
    GPU_SHUFFLE = "gpu_shuffle"


def __getattr__(name: str) -> Any:
    from muster._unsupported import raise_unsupported

    raise_unsupported("muster.data.context", name)


__all__ = ["DataContext", "ShuffleStrategy"]
