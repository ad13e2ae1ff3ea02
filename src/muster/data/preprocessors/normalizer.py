"""Ray's ``Normalizer``: scale each row of a set of columns to unit norm (nothing to fit)."""

from __future__ import annotations

from typing import Any

import numpy as np

from muster.data.preprocessor import ColumnsPreprocessor
from muster.data.preprocessors.version_support import SerializablePreprocessor
from muster.exceptions import InvalidArgumentError

_NORMS = {
    "l1": lambda rows: np.abs(rows).sum(axis=1),
    "l2": lambda rows: np.sqrt(np.square(rows).sum(axis=1)),
    "max": lambda rows: np.abs(rows).max(axis=1),
}


@SerializablePreprocessor(version=1, identifier="io.muster.preprocessors.normalizer")
class Normalizer(ColumnsPreprocessor):
    """Divide each row's values in ``columns`` by that row's ``norm`` over them: ``"l2"`` (Euclidean),
    ``"l1"`` (sum of absolute values) or ``"max"`` (largest absolute value). A row of zeros becomes NaN,
    as in Ray."""

    _is_fittable = False

    def __init__(self, columns: list[str], norm: str = "l2", *, output_columns: list[str] | None = None):
        super().__init__(columns, output_columns)
        if norm not in _NORMS:
            raise InvalidArgumentError(f"Normalizer(norm={norm!r}): use one of {list(_NORMS)}.")
        self._norm = norm

    @property
    def norm(self) -> str:
        return self._norm

    def _transform_pandas(self, df: Any) -> Any:
        rows = df[self._columns].to_numpy(dtype="float64")
        with np.errstate(invalid="ignore", divide="ignore"):
            scaled = rows / _NORMS[self._norm](rows)[:, None]
        for i, out in enumerate(self._output_columns):
            df[out] = scaled[:, i]
        return df

    def __repr__(self) -> str:
        return f"Normalizer(columns={self._columns!r}, norm={self._norm!r}, output_columns={self._output_columns!r})"


__all__ = ["Normalizer"]
