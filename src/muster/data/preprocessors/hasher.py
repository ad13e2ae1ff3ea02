"""Ray's ``FeatureHasher``: the hashing trick over columns of token frequencies (nothing to fit)."""

from __future__ import annotations

from typing import Any

import numpy as np

from muster.data.preprocessor import Preprocessor, check_columns
from muster.data.preprocessors.version_support import SerializablePreprocessor
from muster.data.preprocessors.utils import check_count, check_numeric, object_column, simple_hash
from muster.exceptions import InvalidTypeError


@SerializablePreprocessor(version=1, identifier="io.muster.preprocessors.feature_hasher")
class FeatureHasher(Preprocessor):
    """Sum ``columns`` (each one token's frequency) into ``num_features`` buckets: column ``c`` adds to
    bucket ``sha256(c) % num_features`` (Ray's ``simple_hash`` of the column's name). The sums go to one
    new tensor column, ``output_column``, of ``num_features`` values per row (int64 when every column is
    an integer one, else float64; a 2-D array in numpy batches); the input columns are kept."""

    _is_fittable = False

    def __init__(self, columns: list[str], num_features: int, output_column: str):
        super().__init__()
        check_columns("FeatureHasher", columns)
        if not isinstance(output_column, str):
            raise InvalidTypeError(f"FeatureHasher(output_column={output_column!r}): pass the name of the column "
                                   "to create, e.g. output_column='hashed'.")
        self._columns = list(columns)
        self._num_features = check_count("FeatureHasher", "num_features", num_features)
        self._output_column = output_column

    @property
    def columns(self) -> list[str]:
        return self._columns

    @property
    def num_features(self) -> int:
        return self._num_features

    @property
    def output_column(self) -> str:
        return self._output_column

    def get_input_columns(self) -> list[str]:
        return self._columns

    def get_output_columns(self) -> list[str]:
        return [self._output_column]

    def _transform_pandas(self, df: Any) -> Any:
        import pandas as pd

        check_numeric(f"{self!r}.transform", df, self._columns, "FeatureHasher sums token frequencies, so name "
                      "numeric columns (CountVectorizer or HashingVectorizer count the tokens of text)")
        whole = all((pd.api.types.is_integer_dtype(df[c]) or pd.api.types.is_bool_dtype(df[c]))
                    and not df[c].isna().any() for c in self._columns)  # else float64, a null as NaN
        sums = np.zeros((len(df), self._num_features), dtype=np.int64 if whole else np.float64)
        for column in self._columns:
            values = df[column].to_numpy(sums.dtype) if whole else df[column].to_numpy(sums.dtype, na_value=np.nan)
            sums[:, simple_hash(column, self._num_features)] += values
        df[self._output_column] = object_column(list(sums), df.index)
        return df

    def __repr__(self) -> str:
        return (f"FeatureHasher(columns={self._columns!r}, num_features={self._num_features!r}, "
                f"output_column={self._output_column!r})")


__all__ = ["FeatureHasher"]
