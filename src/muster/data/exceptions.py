"""Errors muster.data raises; all under ``MusterError``, each naming the bad value and the fix."""

from __future__ import annotations

from muster.exceptions import MusterError


class DataError(MusterError):
    """Root of muster.data's errors."""


class DataTypeError(DataError, TypeError):
    """A value has the wrong type: a ``map`` returned a non-dict, a column cannot become a tensor."""


class DataSourceError(DataError, FileNotFoundError):
    """A path to read does not exist or holds no files."""


class DataSchemaError(DataError, ValueError):
    """Files (or blocks) disagree on a column's type."""


class UserFunctionError(DataError):
    """A user function (``map``, ``map_batches``, ``filter``...) raised; names the operator,
    the function and the first row of the failing batch."""


class DataColumnError(DataError, KeyError):
    """A column is missing from a mapping that must name every column (``iter_torch_batches(dtypes={...})``);
    a ``KeyError``, as Ray raises, whose message says which column and the fix."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0]) if self.args else ""
