"""Ray's token counters: ``HashingVectorizer`` and ``CountVectorizer``.

Both tokenize each string of their columns (split on single spaces, or ``tokenization_fn``) and
replace it by a ``list<int64>`` of token counts (a document-term matrix row); a null document gives
a null row, as in Ray. ``HashingVectorizer`` counts into ``num_features`` buckets by Ray's SHA-256
hash (nothing to fit); ``CountVectorizer`` learns a vocabulary in ``fit`` (one streaming pass) and
counts its tokens, most frequent first.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any, Callable

from muster.data.preprocessor import ColumnsPreprocessor, Preprocessor, check_in, check_present
from muster.data.preprocessors.version_support import SerializablePreprocessor
from muster.data.preprocessors.utils import (check_count, check_tokenization_fn, count_into, object_column,
                                             simple_hash, tokenize)

if TYPE_CHECKING:
    from muster.data.dataset import Dataset


class _Vectorizer(ColumnsPreprocessor):
    """Tokenizes each column and counts each document's tokens into a row of ``_width(column)`` counts."""

    def __init__(self, columns: list[str], tokenization_fn: Callable[[str], list[str]] | None,
                 output_columns: list[str] | None):
        super().__init__(columns, output_columns)
        self._tokenization_fn = check_tokenization_fn(type(self).__name__, tokenization_fn)

    @property
    def tokenization_fn(self) -> Callable[[str], list[str]]:
        return self._tokenization_fn

    def _feature_index(self, column: str) -> tuple[int, Callable[[str], int | None]]:
        """The row width for ``column`` and each token's place in it (None: not counted)."""
        raise NotImplementedError

    def _transform_pandas(self, df: Any) -> Any:
        who = f"{self!r}.transform"
        check_in(who, df.columns, self._columns)
        for column, out in zip(self._columns, self._output_columns):
            width, place = self._feature_index(column)
            rows = [None if tokens is None else count_into(tokens, width, place)
                    for tokens in tokenize(who, df[column], column, self._tokenization_fn)]
            df[out] = object_column(rows, df.index)
        return df

    def _fn_name(self) -> Any:
        return getattr(self._tokenization_fn, "__name__", self._tokenization_fn)


@SerializablePreprocessor(version=1, identifier="io.muster.preprocessors.hashing_vectorizer")
class HashingVectorizer(_Vectorizer):
    """Each document as the counts of its tokens in ``num_features`` buckets: token ``t`` counts in
    bucket ``sha256(t) % num_features`` (Ray's ``simple_hash``, so Ray and muster give the same rows).
    Distinct tokens may share a bucket; a larger ``num_features`` makes that rarer."""

    _is_fittable = False

    def __init__(self, columns: list[str], num_features: int,
                 tokenization_fn: Callable[[str], list[str]] | None = None, *,
                 output_columns: list[str] | None = None):
        super().__init__(columns, tokenization_fn, output_columns)
        self._num_features = check_count("HashingVectorizer", "num_features", num_features)

    @property
    def num_features(self) -> int:
        return self._num_features

    def _feature_index(self, column: str) -> tuple[int, Callable[[str], int | None]]:
        buckets: dict[Any, int] = {}  # each distinct token hashed once per batch

        def place(token: Any) -> int:
            if token not in buckets:
                buckets[token] = simple_hash(token, self._num_features)
            return buckets[token]

        return self._num_features, place

    def __repr__(self) -> str:
        return (f"HashingVectorizer(columns={self._columns!r}, num_features={self._num_features!r}, "
                f"tokenization_fn={self._fn_name()}, output_columns={self._output_columns!r})")


@SerializablePreprocessor(version=1, identifier="io.muster.preprocessors.count_vectorizer")
class CountVectorizer(_Vectorizer):
    """Each document as the counts of the vocabulary's tokens. ``fit`` counts every token of each column
    (``stats_["token_counts(col)"]``: a ``Counter``, most frequent first, ties in order of first
    appearance; only the ``max_features`` most frequent when given); the rows follow that order, and a
    token outside the vocabulary is not counted."""

    def __init__(self, columns: list[str], tokenization_fn: Callable[[str], list[str]] | None = None,
                 max_features: int | None = None, *, output_columns: list[str] | None = None):
        super().__init__(columns, tokenization_fn, output_columns)
        self._max_features = None if max_features is None else check_count("CountVectorizer", "max_features",
                                                                           max_features, 0)

    @property
    def max_features(self) -> int | None:
        return self._max_features

    def _fit(self, ds: "Dataset") -> Preprocessor:
        who = f"{self!r}.fit"
        check_present(who, ds, self._columns)
        counts: dict[str, Counter] = {c: Counter() for c in self._columns}
        for df in ds.select_columns(self._columns).iter_batches(batch_size=None, batch_format="pandas"):
            for column in self._columns:
                for tokens in tokenize(who, df[column], column, self._tokenization_fn):
                    if tokens is not None:
                        counts[column].update(tokens)
        self.stats_ = {f"token_counts({c})": Counter(dict(counts[c].most_common(self._max_features)))
                       for c in self._columns}
        return self

    def _feature_index(self, column: str) -> tuple[int, Callable[[str], int | None]]:
        vocabulary = {token: i for i, (token, _) in enumerate(self.stats_[f"token_counts({column})"].most_common())}
        return len(vocabulary), vocabulary.get

    def __repr__(self) -> str:
        return (f"CountVectorizer(columns={self._columns!r}, tokenization_fn={self._fn_name()}, "
                f"max_features={self._max_features!r}, output_columns={self._output_columns!r})")


__all__ = ["CountVectorizer", "HashingVectorizer"]
