"""Ray's ``PowerTransformer``: a Yeo-Johnson or Box-Cox power transform of a given power (nothing to fit)."""

from __future__ import annotations

from typing import Any

import numpy as np

from muster.data.preprocessor import ColumnsPreprocessor
from muster.data.preprocessors.version_support import SerializablePreprocessor
from muster.data.preprocessors.utils import check_numeric
from muster.exceptions import InvalidArgumentError, InvalidTypeError

_METHODS = ("yeo-johnson", "box-cox")


def _yeo_johnson(x: np.ndarray, power: float) -> np.ndarray:
    out = np.zeros_like(x)
    pos = x >= 0  # NaN is not: it takes the second branch and stays NaN
    if power != 0:
        out[pos] = (np.power(x[pos] + 1, power) - 1) / power
    else:
        out[pos] = np.log(x[pos] + 1)
    if power != 2:
        out[~pos] = -(np.power(-x[~pos] + 1, 2 - power) - 1) / (2 - power)
    else:
        out[~pos] = -np.log(-x[~pos] + 1)
    return out


def _box_cox(x: np.ndarray, power: float) -> np.ndarray:
    return (np.power(x, power) - 1) / power if power != 0 else np.log(x)


@SerializablePreprocessor(version=1, identifier="io.muster.preprocessors.power_transformer")
class PowerTransformer(ColumnsPreprocessor):
    """Each column of ``columns`` through a power transform of ``power`` (float64), to make it more
    normally distributed: ``method="yeo-johnson"`` (any real values) or ``"box-cox"`` (positive values;
    as in Ray, others are not refused: a negative one mostly gives NaN). The power is given, not fitted (practitioners
    use -2.5 to 2.5)."""

    _is_fittable = False

    def __init__(self, columns: list[str], power: float, method: str = "yeo-johnson", *,
                 output_columns: list[str] | None = None):
        super().__init__(columns, output_columns)
        if isinstance(power, bool) or not isinstance(power, (int, float, np.number)):
            raise InvalidTypeError(f"PowerTransformer(power={power!r}): pass a number, e.g. power=0.5.")
        if method not in _METHODS:
            raise InvalidArgumentError(f"PowerTransformer(method={method!r}): use one of {list(_METHODS)}.")
        self._power = power
        self._method = method

    @property
    def power(self) -> float:
        return self._power

    @property
    def method(self) -> str:
        return self._method

    def _transform_pandas(self, df: Any) -> Any:
        check_numeric(f"{self!r}.transform", df, self._columns,
                      "transform only numeric columns (encode categories first, e.g. with OrdinalEncoder)")
        transform = _yeo_johnson if self._method == "yeo-johnson" else _box_cox
        with np.errstate(invalid="ignore", divide="ignore"):
            for column, out in zip(self._columns, self._output_columns):
                df[out] = transform(df[column].to_numpy(np.float64, na_value=np.nan), self._power)
        return df

    def __repr__(self) -> str:
        return (f"PowerTransformer(columns={self._columns!r}, power={self._power!r}, method={self._method!r}, "
                f"output_columns={self._output_columns!r})")


__all__ = ["PowerTransformer"]
