"""Ray's ``ray.data.collate_fn``: base classes that say which batch format an ``iter_torch_batches``
``collate_fn`` takes. Subclass one and implement ``__call__``; a plain function gets numpy batches."""

from __future__ import annotations

import abc
from typing import Any


class CollateFn(abc.ABC):
    """A ``collate_fn`` for ``iter_torch_batches``: ``__call__(batch)`` returns what the loop gets
    (tensors, a tuple of them, a dict...); the result is moved to the iterator's device."""

    @abc.abstractmethod
    def __call__(self, batch: Any) -> Any:
        """The batch, collated."""


class ArrowBatchCollateFn(CollateFn):
    """Takes each batch as a ``pyarrow.Table``."""


class NumpyBatchCollateFn(CollateFn):
    """Takes each batch as a dict of numpy arrays (what a plain function gets too)."""


class PandasBatchCollateFn(CollateFn):
    """Takes each batch as a ``pandas.DataFrame``."""


def batch_format_of(collate_fn: Any) -> str:
    """The batch format ``collate_fn`` takes: its base class's, or numpy for a plain function."""
    if isinstance(collate_fn, ArrowBatchCollateFn):
        return "pyarrow"
    if isinstance(collate_fn, PandasBatchCollateFn):
        return "pandas"
    return "numpy"


__all__ = ["ArrowBatchCollateFn", "CollateFn", "NumpyBatchCollateFn", "PandasBatchCollateFn"]
