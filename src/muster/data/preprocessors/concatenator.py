"""Ray's ``Concatenator``: several columns combined into one vector column (nothing to fit)."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from muster.data.preprocessor import Preprocessor, check_columns
from muster.data.preprocessors.version_support import SerializablePreprocessor
from muster.exceptions import InvalidArgumentError

logger = logging.getLogger(__name__)


@SerializablePreprocessor(version=1, identifier="io.muster.preprocessors.concatenator")
class Concatenator(Preprocessor):
    """Replace ``columns`` by one column, ``output_column_name``, holding each row's values of them as a
    1-D array (a tensor column: numpy batches hold a 2-D array, ``iter_torch_batches`` a 2-D tensor).

    Args:
        columns: the columns to combine, in this order.
        output_column_name: the new column (default ``"concat_out"``).
        dtype: the arrays' numpy dtype (default: numpy's common type of the columns).
        raise_if_missing: refuse a batch missing one of ``columns``; otherwise warn and combine the ones
            present.
        flatten: columns that hold arrays are flattened into each row's vector (tensor columns too).
    """

    _is_fittable = False

    def __init__(self, columns: list[str], output_column_name: str = "concat_out", dtype: Any = None,
                 raise_if_missing: bool = False, flatten: bool = False):
        super().__init__()
        check_columns("Concatenator", columns)
        self._columns = list(columns)
        self._output_column_name = output_column_name
        self._dtype = dtype
        self._raise_if_missing = raise_if_missing
        self._flatten = flatten

    @property
    def columns(self) -> list[str]:
        return self._columns

    @property
    def output_column_name(self) -> str:
        return self._output_column_name

    @property
    def dtype(self) -> Any:
        return self._dtype

    @property
    def raise_if_missing(self) -> bool:
        return self._raise_if_missing

    @property
    def flatten(self) -> bool:
        return self._flatten

    def get_output_columns(self) -> list[str]:
        return [self._output_column_name]

    def _present(self, df: Any) -> list[str]:
        missing = [c for c in self._columns if c not in df.columns]
        if missing:
            message = (f"{self!r}: column(s) {missing!r} are not in the batch, whose columns are "
                       f"{list(df.columns)!r}")
            if self._raise_if_missing:
                raise InvalidArgumentError(f"{message}; name existing columns.")
            logger.warning("%s; combining the others.", message)
        return [c for c in self._columns if c in df.columns]

    def _transform_pandas(self, df: Any) -> Any:
        present = self._present(df)
        if self._flatten:
            rows = [np.concatenate([np.atleast_1d(np.asarray(v, dtype=self._dtype)) for v in row])
                    for row in zip(*(df[c].to_numpy() for c in present))]
        else:
            stacked = np.column_stack([df[c].to_numpy(dtype=self._dtype) for c in present])
            rows = list(stacked)
        out = df.drop(columns=present)
        cells = np.empty(len(rows), dtype=object)
        cells[:] = rows
        out[self._output_column_name] = cells
        return out

    def __repr__(self) -> str:
        # as Ray prints it: only the arguments that differ from their defaults, values with str()
        defaults = {"output_column_name": "concat_out", "columns": None, "dtype": None, "raise_if_missing": False,
                    "flatten": False}
        given = [f"{name}={getattr(self, name)}" for name, default in defaults.items()
                 if getattr(self, name) != default]
        return f"Concatenator({', '.join(given)})"


__all__ = ["Concatenator"]
