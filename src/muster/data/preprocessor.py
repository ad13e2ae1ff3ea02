"""Ray's ``ray.data.preprocessor``: the ``Preprocessor`` base class and ``PreprocessorNotFittedException``.

A preprocessor learns statistics from a dataset (``fit``: muster's aggregations or one streaming
pass over its batches) and applies them lazily (``transform``: one ``map_batches`` over the
dataset, in the batch format the preprocessor computes in). ``transform_batch`` applies it to one
in-memory batch. The concrete preprocessors are in :mod:`muster.data.preprocessors`.

To write your own, as in Ray: override ``_fit(ds)`` (set ``self.stats_``, return ``self``), or set
``_is_fittable = False``; and at least one of ``_transform_pandas(df)``, ``_transform_numpy(batch)``
or ``_transform_arrow(table)`` (with several, ``preferred_batch_format()`` picks one).
"""

from __future__ import annotations

import warnings
from enum import Enum
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np
import pyarrow as pa

from muster.data import block as blk
from muster.data.exceptions import DataError
from muster.exceptions import InvalidArgumentError, InvalidTypeError

if TYPE_CHECKING:
    from muster.data.dataset import Dataset

_FORMATS = ("pandas", "numpy", "pyarrow")


class PreprocessorNotFittedException(DataError, RuntimeError):
    """``transform``/``transform_batch`` on a preprocessor that needs ``fit`` and was not fitted."""


class Preprocessor:
    """A data preprocessing step: ``fit`` learns ``stats_`` from a dataset, ``transform`` applies them.

    Contract: ``fit(ds)`` replaces every fitted statistic (refitting warns, as in Ray) and returns
    ``self``; ``transform(ds)`` returns a new lazy dataset (nothing runs until it is consumed) and
    reads ``stats_`` when its batches run; a fitted preprocessor pickles, so it can be sent to
    training workers or stored in a checkpoint.
    """

    class FitStatus(str, Enum):
        NOT_FITTABLE = "NOT_FITTABLE"
        NOT_FITTED = "NOT_FITTED"
        PARTIALLY_FITTED = "PARTIALLY_FITTED"  # a Chain with some of its steps fitted
        FITTED = "FITTED"

    #: a preprocessor with nothing to learn (``Concatenator``) sets this False: ``fit`` does nothing
    _is_fittable = True

    def __init__(self) -> None:
        self.stats_: dict[str, Any] = {}

    # -- the public API ---------------------------------------------------------------
    def fit_status(self) -> "Preprocessor.FitStatus":
        if not self._is_fittable:
            return Preprocessor.FitStatus.NOT_FITTABLE
        if getattr(self, "_fitted", False) or getattr(self, "stats_", None):
            return Preprocessor.FitStatus.FITTED
        return Preprocessor.FitStatus.NOT_FITTED

    def fit(self, ds: "Dataset") -> "Preprocessor":
        """Learn this preprocessor's statistics (``stats_``) from ``ds``; runs the dataset now.

        Calling it again replaces every statistic (``p.fit(a).fit(b)`` is ``p.fit(b)``), with a warning.

        Returns:
            This preprocessor, fitted.

        Raises:
            InvalidTypeError: ``ds`` is not a muster dataset.
        """
        _check_dataset(ds, f"{type(self).__name__}.fit")
        status = self.fit_status()
        if status == Preprocessor.FitStatus.NOT_FITTABLE:
            return self
        if status in (Preprocessor.FitStatus.FITTED, Preprocessor.FitStatus.PARTIALLY_FITTED):
            warnings.warn(f"{type(self).__name__}.fit() was already called (or, for a Chain, on one of its "
                          "preprocessors): all previously fitted state will be overwritten.", stacklevel=2)
        self.stats_ = {}
        self._fit(ds)
        self._fitted = True
        return self

    def fit_transform(self, ds: "Dataset", *, transform_num_cpus: float | None = None,
                      transform_memory: float | None = None, transform_batch_size: int | None = None,
                      transform_concurrency: int | None = None) -> "Dataset":
        """``fit(ds)``, then ``transform(ds)`` (the ``transform_*`` options go to ``transform``)."""
        self.fit(ds)
        return self.transform(ds, batch_size=transform_batch_size, num_cpus=transform_num_cpus,
                              memory=transform_memory, concurrency=transform_concurrency)

    def transform(self, ds: "Dataset", *, batch_size: int | None = None, num_cpus: float | None = None,
                  memory: float | None = None, concurrency: int | None = None) -> "Dataset":
        """A new lazy dataset: ``ds`` with this preprocessor applied to each batch (one ``map_batches``).

        Args:
            batch_size / num_cpus / memory / concurrency: passed to ``map_batches`` when given.

        Raises:
            PreprocessorNotFittedException: the preprocessor needs ``fit`` and was not fitted.
        """
        _check_dataset(ds, f"{type(self).__name__}.transform")
        self._check_fitted("transform")
        options = {"batch_size": batch_size, "num_cpus": num_cpus, "memory": memory, "concurrency": concurrency}
        return self._transform(ds, {k: v for k, v in options.items() if v is not None})

    def transform_batch(self, data: Any) -> Any:
        """This preprocessor applied to one batch: a pandas DataFrame, a dict of numpy arrays or a pyarrow Table.

        As in Ray, the result is in the format the preprocessor computes in: a DataFrame in gives a
        DataFrame back; a dict or Table gives a DataFrame (pandas preprocessors), a Table
        (``StandardScaler``, ``OrdinalEncoder``, ``OneHotEncoder``) or a dict (numpy ones). The batch
        given is not modified.

        Raises:
            PreprocessorNotFittedException: the preprocessor needs ``fit`` and was not fitted.
            InvalidTypeError: ``data`` is none of those formats.
        """
        self._check_fitted("transform_batch")
        return self._transform_batch(data)

    def get_input_columns(self) -> list[str]:
        return list(getattr(self, "_columns", None) or getattr(self, "columns", None) or [])

    def get_output_columns(self) -> list[str]:
        return list(getattr(self, "_output_columns", None) or getattr(self, "output_columns", None) or [])

    @classmethod
    def preferred_batch_format(cls) -> str:
        """The format to compute in when a subclass implements more than one ``_transform_*``."""
        return "pandas"

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    # -- serialization (Ray's serialize/deserialize) ------------------------------------
    _serialization_id: str | None = None
    _serialization_version = 1

    def serialize(self) -> str | bytes:
        """This preprocessor, fitted statistics included, as Ray serializes it: bytes (``b"CPKL:..."``)
        for a class registered with ``@SerializablePreprocessor`` (every built-in), else a base64 string of
        its pickle. Not a stable format: read it back with the same muster version."""
        from muster.data.preprocessors.version_support import pack

        return pack(self)

    @staticmethod
    def deserialize(serialized: str | bytes) -> "Preprocessor":
        """The preprocessor ``serialize()`` gave ``serialized`` for, ready to transform.

        Raises:
            InvalidArgumentError: ``serialized`` is not what ``serialize()`` returned.
            UnknownPreprocessorError: no class is registered for its type.
        """
        from muster.data.preprocessors.version_support import unpack

        return unpack(serialized)

    @classmethod
    def get_preprocessor_class_id(cls) -> str:
        """The identifier ``@SerializablePreprocessor`` registered this class under (the class's name if none)."""
        return cls.__dict__.get("_serialization_id") or f"{cls.__module__}.{cls.__qualname__}"

    @classmethod
    def set_preprocessor_class_id(cls, identifier: str) -> None:
        cls._serialization_id = identifier

    @classmethod
    def get_version(cls) -> int:
        return cls._serialization_version

    @classmethod
    def set_version(cls, version: int) -> None:
        cls._serialization_version = version

    def _get_serializable_fields(self) -> dict[str, Any]:
        """What ``serialize`` keeps besides ``stats_``: every other attribute, by default."""
        return {k: v for k, v in self.__dict__.items() if k != "stats_"}

    def _set_serializable_fields(self, fields: dict[str, Any], version: int) -> None:
        self.__dict__.update(fields)

    def _get_stats(self) -> dict[str, Any]:
        return dict(getattr(self, "stats_", {}))

    def _set_stats(self, stats: dict[str, Any]) -> None:
        self.stats_ = dict(stats)

    # -- what a subclass overrides ------------------------------------------------------
    def _fit(self, ds: "Dataset") -> "Preprocessor":
        raise NotImplementedError(f"{type(self).__name__} is fittable but defines no _fit(ds); define it, "
                                  "or set _is_fittable = False.")

    def _transform_pandas(self, df: Any) -> Any:
        raise NotImplementedError

    def _transform_numpy(self, batch: Any) -> Any:
        raise NotImplementedError

    def _transform_arrow(self, table: pa.Table) -> pa.Table:
        raise NotImplementedError

    # -- the machinery ------------------------------------------------------------------
    def _check_fitted(self, what: str) -> None:
        if self.fit_status() in (Preprocessor.FitStatus.NOT_FITTED, Preprocessor.FitStatus.PARTIALLY_FITTED):
            raise PreprocessorNotFittedException(
                f"{self!r}.{what}() before fit(): call fit(ds) first, or fit_transform(ds) to run both steps.")

    def _batch_format(self) -> str:
        """``pandas``, ``numpy`` or ``pyarrow``: the one ``_transform_*`` this class implements, else its
        ``preferred_batch_format()``."""
        cls = type(self)
        own = [fmt for fmt, name in zip(_FORMATS, ("_transform_pandas", "_transform_numpy", "_transform_arrow"))
               if getattr(cls, name) is not getattr(Preprocessor, name)]
        if not own:
            raise NotImplementedError(f"{cls.__name__} implements none of _transform_pandas, _transform_numpy, "
                                      "_transform_arrow: define one of them.")
        if len(own) == 1:
            return own[0]
        preferred = "pyarrow" if cls.preferred_batch_format() in ("arrow", "pyarrow") else cls.preferred_batch_format()
        return preferred if preferred in own else own[0]

    def _transform(self, ds: "Dataset", options: dict[str, Any]) -> "Dataset":
        fmt = self._batch_format()
        fn = {"pandas": self._transform_pandas, "numpy": self._transform_numpy,
              "pyarrow": self._transform_arrow}[fmt]
        return ds.map_batches(fn, batch_format=fmt, **options)

    def _transform_batch(self, data: Any) -> Any:
        import pandas as pd

        if not isinstance(data, (pd.DataFrame, pa.Table, Mapping)):
            raise InvalidTypeError(f"{type(self).__name__}.transform_batch({type(data).__name__}): pass a pandas "
                                   "DataFrame, a dict of numpy arrays or a pyarrow Table.")
        fmt = self._batch_format()
        if fmt == "pandas":
            return self._transform_pandas(as_pandas(data))
        if fmt == "numpy":
            return self._transform_numpy(blk.to_numpy(_as_table(data)))
        if isinstance(data, pd.DataFrame):
            return self._transform_pandas_through_arrow(data)
        return self._transform_arrow(_as_table(data))

    def _transform_pandas_through_arrow(self, df: Any) -> Any:
        """An Arrow preprocessor on a DataFrame: its input columns go through Arrow, its output columns
        come back into a copy of ``df`` (index and other columns untouched)."""
        inputs = [c for c in self.get_input_columns() if c in df.columns] or list(df.columns)
        result = self._transform_arrow(blk.from_batch(df[inputs].reset_index(drop=True), "transform_batch"))
        out = df.copy(deep=False)
        for name in self.get_output_columns() or result.column_names:
            out[name] = blk.to_pandas(result.select([name]))[name].to_numpy()
        return out


def as_pandas(data: Any) -> Any:
    """A batch (DataFrame, dict of columns or Table) as a new DataFrame (a DataFrame given is not changed)."""
    import pandas as pd

    if isinstance(data, pd.DataFrame):
        return data.copy(deep=False)
    return blk.to_pandas(_as_table(data))


def _as_table(data: Any) -> pa.Table:
    if isinstance(data, Mapping):
        data = {k: np.asarray(v) if isinstance(v, list) else v for k, v in data.items()}
    return blk.from_batch(dict(data) if isinstance(data, Mapping) else data, "transform_batch")


def _check_dataset(ds: Any, where: str) -> None:
    from muster.data.dataset import Dataset

    if not isinstance(ds, Dataset):
        hint = " (for one in-memory batch, use transform_batch)" if where.endswith("transform") else ""
        raise InvalidTypeError(f"{where}({type(ds).__name__}): pass a muster.data Dataset, e.g. "
                               f"muster.data.from_pandas(df){hint}.")


class ColumnsPreprocessor(Preprocessor):
    """A preprocessor of named ``columns`` whose results go to ``output_columns`` (default: over the inputs)."""

    def __init__(self, columns: list[str], output_columns: list[str] | None = None):
        super().__init__()
        self._output_columns = derive_output_columns(type(self).__name__, columns, output_columns)
        self._columns = list(columns)

    @property
    def columns(self) -> list[str]:
        return self._columns

    @property
    def output_columns(self) -> list[str]:
        return self._output_columns


def derive_output_columns(who: str, columns: Any, output_columns: Any) -> list[str]:
    """``output_columns`` checked against ``columns`` (the same number), or ``columns`` when not given."""
    check_columns(who, columns)
    if output_columns is None or len(output_columns) == 0:
        return list(columns)
    check_columns(who, output_columns, "output_columns")
    if len(output_columns) != len(columns):
        raise InvalidArgumentError(f"{who}(columns={list(columns)!r}, output_columns={list(output_columns)!r}): "
                                   "give one output column per input column, or leave output_columns out to "
                                   "write the results over the input columns.")
    return list(output_columns)


def check_columns(who: str, columns: Any, name: str = "columns") -> None:
    """``columns`` is a list of column names (a bare string is refused: it is one name, not a list)."""
    if isinstance(columns, str):
        raise InvalidTypeError(f"{who}({name}={columns!r}): pass a list of column names, {name}=[{columns!r}].")
    if not isinstance(columns, (list, tuple)) or not all(isinstance(c, str) for c in columns):
        raise InvalidTypeError(f"{who}({name}={columns!r}): pass a list of column names (strings).")


def check_present(who: str, ds: "Dataset", columns: list[str]) -> None:
    """Every one of ``columns`` is in ``ds`` (read from its schema: this may run the first block)."""
    check_in(who, ds.columns(), columns, "dataset")


def check_in(who: str, have: Any, columns: list[str], where: str = "batch") -> None:
    """Every one of ``columns`` is among ``have`` (a batch's or dataset's column names)."""
    missing = [c for c in columns if c not in have]
    if missing:
        raise InvalidArgumentError(f"{who}: column(s) {missing!r} are not in the {where}, whose columns are "
                                   f"{list(have)!r}; name existing columns.")


class SerializablePreprocessorBase(Preprocessor):
    """Ray's base for preprocessors that ``serialize()`` by fields: every muster ``Preprocessor`` does, so
    this adds nothing; register a subclass with ``@SerializablePreprocessor(version=, identifier=)``
    (``muster.data.preprocessors.version_support``) and override ``_get_serializable_fields`` /
    ``_set_serializable_fields`` where its attributes need it."""


__all__ = ["Preprocessor", "PreprocessorNotFittedException", "SerializablePreprocessorBase"]
