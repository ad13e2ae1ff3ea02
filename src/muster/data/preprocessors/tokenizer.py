"""Ray's ``Tokenizer``: each string of some columns replaced by its list of tokens (nothing to fit)."""

from __future__ import annotations

from typing import Any, Callable

from muster.data.preprocessor import ColumnsPreprocessor, check_in
from muster.data.preprocessors.version_support import SerializablePreprocessor
from muster.data.preprocessors.utils import check_tokenization_fn, object_column, tokenize


@SerializablePreprocessor(version=1, identifier="io.muster.preprocessors.tokenizer")
class Tokenizer(ColumnsPreprocessor):
    """Each string in ``columns`` as the list of its tokens (a ``list<string>`` column): split on single
    spaces (``s.split(" ")``), or by ``tokenization_fn(s)``. A null stays null. The lists replace the
    strings unless ``output_columns`` names other columns."""

    _is_fittable = False

    def __init__(self, columns: list[str], tokenization_fn: Callable[[str], list[str]] | None = None,
                 output_columns: list[str] | None = None):
        super().__init__(columns, output_columns)
        self._tokenization_fn = check_tokenization_fn("Tokenizer", tokenization_fn)

    @property
    def tokenization_fn(self) -> Callable[[str], list[str]]:
        return self._tokenization_fn

    def _transform_pandas(self, df: Any) -> Any:
        who = f"{self!r}.transform"
        check_in(who, df.columns, self._columns)
        for column, out in zip(self._columns, self._output_columns):
            df[out] = object_column(tokenize(who, df[column], column, self._tokenization_fn), df.index)
        return df

    def __repr__(self) -> str:
        name = getattr(self._tokenization_fn, "__name__", self._tokenization_fn)
        return f"Tokenizer(columns={self._columns!r}, tokenization_fn={name}, output_columns={self._output_columns!r})"


__all__ = ["Tokenizer"]
