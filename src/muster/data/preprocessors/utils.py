"""Helpers of Ray's ``ray.data.preprocessors.utils`` that its text preprocessors share.

``simple_split_tokenizer`` is the default ``tokenization_fn`` (split on single spaces) and
``simple_hash`` the hash of ``HashingVectorizer`` and ``FeatureHasher`` (SHA-256 of ``str(value)``,
modulo the number of features): both are Ray's, so a token lands in the same feature under either.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable

import numpy as np

from muster.data.preprocessor import check_in
from muster.exceptions import InvalidArgumentError, InvalidTypeError

Tokenization = Callable[[str], list[str]]


def simple_split_tokenizer(value: str) -> list[str]:
    """``value`` split on each single space, as ``value.split(" ")`` (two spaces give an empty token)."""
    return value.split(" ")


def simple_hash(value: object, num_features: int) -> int:
    """The feature (0 to ``num_features - 1``) that ``value`` hashes to: SHA-256 of ``str(value)``."""
    return int(hashlib.sha256(str(value).encode()).hexdigest(), 16) % num_features


def is_missing(value: Any) -> bool:
    """None, NaN or pandas' NA/NaT (a list or array is never missing)."""
    if value is None or (isinstance(value, float) and value != value):
        return True
    return type(value).__name__ in ("NAType", "NaTType")


def check_tokenization_fn(who: str, tokenization_fn: Any) -> Tokenization:
    """``tokenization_fn`` when callable, ``simple_split_tokenizer`` when None."""
    if tokenization_fn is None:
        return simple_split_tokenizer
    if not callable(tokenization_fn):
        raise InvalidTypeError(f"{who}(tokenization_fn={tokenization_fn!r}): pass a function from a string to "
                               "its list of tokens, e.g. tokenization_fn=str.split, or leave it out to split on "
                               "spaces.")
    return tokenization_fn


def check_count(who: str, name: str, value: Any, minimum: int = 1) -> int:
    """``value`` is an int of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidTypeError(f"{who}({name}={value!r}): pass a whole number, e.g. {name}=16.")
    if value < minimum:
        raise InvalidArgumentError(f"{who}({name}={value!r}): pass a number of at least {minimum}.")
    return int(value)


def tokenize(who: str, values: Any, column: str, tokenization_fn: Tokenization) -> list[Any]:
    """Each value of ``values`` (a pandas Series) as its tokens; a missing value stays None, as in Ray.

    With the default tokenizer a value that is not a string is refused (a custom ``tokenization_fn``
    gets every present value, whatever its type)."""
    default = tokenization_fn is simple_split_tokenizer
    tokens: list[Any] = []
    for value in values:
        if is_missing(value):
            tokens.append(None)
            continue
        if default and not isinstance(value, str):
            raise InvalidTypeError(f"{who}: column {column!r} holds {value!r} ({type(value).__name__}), not text; "
                                   "tokenize only string columns (cast this one with "
                                   "ds.map_batches(lambda df: df.astype({...: str}), batch_format='pandas')), "
                                   "or pass a tokenization_fn that accepts these values.")
        tokens.append(tokenization_fn(value))
    return tokens


def count_into(items: Any, width: int, place: Callable[[Any], int | None]) -> list[int]:
    """A row of ``width`` counts: each of ``items`` adds 1 at ``place(item)`` (None: not counted)."""
    row = [0] * width
    for item in items:
        i = place(item)
        if i is not None:
            row[i] += 1
    return row


def check_numeric(who: str, df: Any, columns: list[str], fix: str) -> None:
    """Every one of ``columns`` of the DataFrame ``df`` is numeric (``fix`` says what to do otherwise)."""
    import pandas as pd

    check_in(who, df.columns, columns)
    bad = {c: str(df[c].dtype) for c in columns if not pd.api.types.is_numeric_dtype(df[c])}
    if bad:
        raise InvalidTypeError(f"{who}: column(s) {bad!r} are not numeric; {fix}.")


def object_column(rows: list[Any], index: Any) -> Any:
    """``rows`` (lists, arrays or None) as one pandas object column: one cell per row."""
    import pandas as pd

    return pd.Series(rows, index=index, dtype=object)


__all__ = ["simple_hash", "simple_split_tokenizer"]
