"""The namespaces of Ray's expressions: ``col("name").str.upper()``, ``col("l").list.get(0)``,
``col("s").struct["age"]``, ``col("t").dt.year()``, ``col("m").map.keys()``, ``col("t").arr.to_list()``.

Each method is one ``pyarrow.compute`` function of the column (a ``ComputeExpr``: it also has a pyarrow
expression), or, where pyarrow has no single function (sorting within lists, flattening, map keys), a small
function of the whole array (a ``UDFExpr``). Result types are Ray's.
"""

from __future__ import annotations

import builtins
from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc

from muster.data.datatype import DataType
from muster.data.expr_tree import ComputeExpr, Expr, UDFExpr
from muster.exceptions import InvalidArgumentError, InvalidTypeError

_STR, _BOOL, _INT = DataType.string(), DataType.bool(), DataType.int32()
_OBJECT = DataType(object)


class _Namespace:
    def __init__(self, expr: Expr):
        self._expr = expr

    def _call(self, fn: Callable[..., Any], dtype: DataType, *args: Any, **kwargs: Any) -> ComputeExpr:
        return ComputeExpr(fn, self._expr, args, kwargs, dtype)

    def _udf(self, fn: Callable[[Any], Any], dtype: DataType) -> UDFExpr:
        return UDFExpr(fn, (self._expr,), {}, dtype)

    def _arrow_type(self) -> pa.DataType | None:
        dtype = self._expr.data_type
        return dtype.to_arrow_dtype() if dtype.is_arrow_type() else None


def _unary(fn: Callable[..., Any], dtype: DataType) -> Callable[[_Namespace], ComputeExpr]:
    def method(self: _Namespace) -> ComputeExpr:
        return self._call(fn, dtype)

    method.__doc__ = f"``pyarrow.compute.{fn.__name__}`` of each value."
    return method


def _pattern(fn: Callable[..., Any], dtype: DataType) -> Callable[..., ComputeExpr]:
    def method(self: _Namespace, pattern: Any, *args: Any, **kwargs: Any) -> ComputeExpr:
        return self._call(fn, dtype, pattern, *args, **kwargs)

    method.__doc__ = f"``pyarrow.compute.{fn.__name__}(values, pattern, ...)``."
    return method


class _StringNamespace(_Namespace):
    """String functions (``pyarrow.compute``'s ``utf8_*`` and friends)."""

    len = _unary(pc.utf8_length, _INT)
    byte_len = _unary(pc.binary_length, _INT)
    upper = _unary(pc.utf8_upper, _STR)
    lower = _unary(pc.utf8_lower, _STR)
    capitalize = _unary(pc.utf8_capitalize, _STR)
    title = _unary(pc.utf8_title, _STR)
    swapcase = _unary(pc.utf8_swapcase, _STR)
    reverse = _unary(pc.utf8_reverse, _STR)
    is_alpha = _unary(pc.utf8_is_alpha, _BOOL)
    is_alnum = _unary(pc.utf8_is_alnum, _BOOL)
    is_digit = _unary(pc.utf8_is_digit, _BOOL)
    is_decimal = _unary(pc.utf8_is_decimal, _BOOL)
    is_numeric = _unary(pc.utf8_is_numeric, _BOOL)
    is_space = _unary(pc.utf8_is_space, _BOOL)
    is_lower = _unary(pc.utf8_is_lower, _BOOL)
    is_upper = _unary(pc.utf8_is_upper, _BOOL)
    is_title = _unary(pc.utf8_is_title, _BOOL)
    is_printable = _unary(pc.utf8_is_printable, _BOOL)
    is_ascii = _unary(pc.string_is_ascii, _BOOL)
    starts_with = _pattern(pc.starts_with, _BOOL)
    ends_with = _pattern(pc.ends_with, _BOOL)
    contains = _pattern(pc.match_substring, _BOOL)
    match = _pattern(pc.match_like, _BOOL)
    match_regex = _pattern(pc.match_substring_regex, _BOOL)
    find = _pattern(pc.find_substring, _INT)
    find_regex = _pattern(pc.find_substring_regex, _INT)
    count = _pattern(pc.count_substring, _INT)
    count_regex = _pattern(pc.count_substring_regex, _INT)
    split = _pattern(pc.split_pattern, _OBJECT)
    split_regex = _pattern(pc.split_pattern_regex, _OBJECT)
    extract = _pattern(pc.extract_regex, _STR)
    repeat = _pattern(pc.binary_repeat, _STR)

    def slice(self, *args: Any, **kwargs: Any) -> ComputeExpr:
        """``utf8_slice_codeunits(values, start, stop=, step=)``."""
        return self._call(pc.utf8_slice_codeunits, _STR, *args, **kwargs)

    def replace(self, pattern: str, replacement: str, *args: Any, **kwargs: Any) -> ComputeExpr:
        return self._call(pc.replace_substring, _STR, pattern, replacement, *args, **kwargs)

    def replace_regex(self, pattern: str, replacement: str, *args: Any, **kwargs: Any) -> ComputeExpr:
        return self._call(pc.replace_substring_regex, _STR, pattern, replacement, *args, **kwargs)

    def replace_slice(self, start: int, stop: int, replacement: str, *args: Any, **kwargs: Any) -> ComputeExpr:
        return self._call(pc.binary_replace_slice, _STR, start, stop, replacement, *args, **kwargs)

    def split_whitespace(self, *args: Any, **kwargs: Any) -> ComputeExpr:
        return self._call(pc.utf8_split_whitespace, _OBJECT, *args, **kwargs)

    def center(self, width: int, padding: str = " ", *args: Any, **kwargs: Any) -> ComputeExpr:
        return self._call(pc.utf8_center, _STR, width, padding, *args, **kwargs)

    def lpad(self, width: int, padding: str = " ", *args: Any, **kwargs: Any) -> ComputeExpr:
        return self._call(pc.utf8_lpad, _STR, width, padding, *args, **kwargs)

    def rpad(self, width: int, padding: str = " ", *args: Any, **kwargs: Any) -> ComputeExpr:
        return self._call(pc.utf8_rpad, _STR, width, padding, *args, **kwargs)

    def pad(self, width: int, fillchar: str = " ", side: str = "right") -> ComputeExpr:
        """Pad to ``width`` with ``fillchar`` on the ``"left"``, ``"right"`` (default) or ``"both"`` sides."""
        fns = {"right": pc.utf8_rpad, "left": pc.utf8_lpad, "both": pc.utf8_center}
        if side not in fns:
            raise InvalidArgumentError(f"str.pad(side={side!r}): use 'left', 'right' or 'both'.")
        return self._call(fns[side], _STR, width=width, padding=fillchar)

    def _trim(self, whitespace: Callable[..., Any], chars: Callable[..., Any], characters: str | None) -> ComputeExpr:
        return self._call(whitespace, _STR) if characters is None else self._call(chars, _STR, characters=characters)

    def strip(self, characters: str | None = None) -> ComputeExpr:
        """Remove ``characters`` (default: whitespace) from both ends."""
        return self._trim(pc.utf8_trim_whitespace, pc.utf8_trim, characters)

    def lstrip(self, characters: str | None = None) -> ComputeExpr:
        return self._trim(pc.utf8_ltrim_whitespace, pc.utf8_ltrim, characters)

    def rstrip(self, characters: str | None = None) -> ComputeExpr:
        return self._trim(pc.utf8_rtrim_whitespace, pc.utf8_rtrim, characters)


class _StructNamespace(_Namespace):
    """A struct's fields: ``.struct["age"]``, ``.struct[0]``, ``.struct.field("age")``."""

    def __getitem__(self, key: str | int) -> ComputeExpr:
        if isinstance(key, str):
            return self.field(key)
        if isinstance(key, int) and not isinstance(key, bool):
            return self.field_by_index(key)
        raise InvalidTypeError(f"struct[{key!r}]: index a struct by a field's name or position.")

    def _field_type(self, key: str | int) -> DataType:
        arrow = self._arrow_type()
        if arrow is not None and pa.types.is_struct(arrow):
            try:
                return DataType.from_arrow(arrow.field(key).type)
            except (KeyError, IndexError):
                pass
        return _OBJECT

    def field(self, field_name: str) -> ComputeExpr:
        return self._call(pc.struct_field, self._field_type(field_name), field_name)

    def field_by_index(self, index: int) -> ComputeExpr:
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise InvalidArgumentError(f"struct.field_by_index({index!r}): pass a field's position, 0 or more.")
        return self._call(pc.struct_field, self._field_type(index), index)


class _ListNamespace(_Namespace):
    """List functions: ``len``, ``get`` (``[i]``), ``slice`` (``[a:b]``), ``sort``, ``flatten``."""

    def len(self) -> ComputeExpr:
        return self._call(pc.list_value_length, _INT)

    def __getitem__(self, key: int | builtins.slice) -> ComputeExpr:
        if isinstance(key, int) and not isinstance(key, bool):
            return self.get(key)
        if isinstance(key, slice):
            return self.slice(key.start, key.stop, key.step)
        raise InvalidTypeError(f"list[{key!r}]: index a list by a position or a slice.")

    def get(self, index: int) -> ComputeExpr:
        arrow = self._arrow_type()
        dtype = DataType.from_arrow(arrow.value_type) if arrow is not None and hasattr(arrow, "value_type") else _OBJECT
        return self._call(pc.list_element, dtype, index)

    def slice(self, start: int | None = None, stop: int | None = None, step: int | None = None) -> ComputeExpr:
        return self._call(pc.list_slice, self._expr.data_type, start=start or 0, stop=stop, step=step or 1)

    def sort(self, order: str = "ascending", null_placement: str = "at_end") -> UDFExpr:
        """Each list's values sorted (``order`` ``"ascending"``/``"descending"``; nulls ``"at_end"``/``"at_start"``)."""
        if order not in ("ascending", "descending") or null_placement not in ("at_start", "at_end"):
            raise InvalidArgumentError(f"list.sort(order={order!r}, null_placement={null_placement!r}): order is "
                                       "'ascending' or 'descending', null_placement 'at_start' or 'at_end'.")

        def list_sort(values: Any) -> Any:
            return _sort_lists(_one_array(values), order, null_placement)

        return self._udf(list_sort, self._expr.data_type)

    def flatten(self) -> UDFExpr:
        """Each row's list of lists as one list (one level)."""
        arrow = self._arrow_type()
        dtype = _OBJECT
        if arrow is not None and pa.types.is_list(arrow) and pa.types.is_list(arrow.value_type):
            dtype = DataType.from_arrow(arrow.value_type)

        def list_flatten(values: Any) -> Any:
            outer = _one_array(values)
            inner = outer.values
            return pa.ListArray.from_arrays(pc.take(inner.offsets, outer.offsets), inner.values,
                                            mask=outer.is_null() if outer.null_count else None)

        return self._udf(list_flatten, dtype)


def _one_array(values: Any) -> Any:
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


def _sort_lists(arr: Any, order: str, null_placement: str) -> Any:
    original = arr.type
    if pa.types.is_fixed_size_list(original):
        arr = arr.cast(pa.list_(original.value_type))
    flat = pc.list_flatten(arr)
    if len(flat):
        pairs = pa.StructArray.from_arrays([pc.list_parent_indices(arr), flat], ["row", "value"])
        try:  # pyarrow 25 takes null_placement per key (and deprecates the option)
            order_by = pc.sort_indices(pairs, sort_keys=[("row", "ascending", null_placement),
                                                         ("value", order, null_placement)])
        except (TypeError, ValueError):
            order_by = pc.sort_indices(pairs, sort_keys=[("row", "ascending"), ("value", order)],
                                       null_placement=null_placement)
        flat = pc.take(flat, order_by)
    lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False)
    offsets = pa.array([0, *lengths.cumsum()], type=pa.int32())
    out = pa.ListArray.from_arrays(offsets, flat, mask=arr.is_null() if arr.null_count else None)
    return out.cast(original)


class _DatetimeNamespace(_Namespace):
    """Parts of timestamps and dates, ``strftime``, and rounding to a unit (``"day"``, ``"hour"``, ...)."""

    year = _unary(pc.year, _INT)
    month = _unary(pc.month, _INT)
    day = _unary(pc.day, _INT)
    hour = _unary(pc.hour, _INT)
    minute = _unary(pc.minute, _INT)
    second = _unary(pc.second, _INT)

    def strftime(self, fmt: str) -> ComputeExpr:
        return self._call(pc.strftime, _STR, format=fmt)

    def ceil(self, unit: str) -> ComputeExpr:
        return self._call(pc.ceil_temporal, self._expr.data_type, unit=unit)

    def floor(self, unit: str) -> ComputeExpr:
        return self._call(pc.floor_temporal, self._expr.data_type, unit=unit)

    def round(self, unit: str) -> ComputeExpr:
        return self._call(pc.round_temporal, self._expr.data_type, unit=unit)


class _MapNamespace(_Namespace):
    """A map column's ``keys()`` and ``values()``, each row's as a list."""

    def _part(self, part: str) -> UDFExpr:
        arrow = self._arrow_type()
        dtype = _OBJECT
        if arrow is not None and pa.types.is_map(arrow):
            dtype = DataType.list(DataType.from_arrow(arrow.key_type if part == "keys" else arrow.item_type))

        def project(values: Any) -> Any:
            arr = _one_array(values)
            if not isinstance(arr, pa.MapArray):
                raise InvalidTypeError(f"map.{part}(): the values are {arr.type}, not a map.")
            return pa.ListArray.from_arrays(arr.offsets, arr.keys if part == "keys" else arr.items,
                                            mask=arr.is_null() if arr.null_count else None)

        project.__name__ = f"map_{part}"
        return self._udf(project, dtype)

    def keys(self) -> UDFExpr:
        return self._part("keys")

    def values(self) -> UDFExpr:
        return self._part("values")


class _ArrayNamespace(_Namespace):
    """A fixed-shape tensor (or fixed-size list) column's rows as plain lists (``to_list``)."""

    def to_list(self) -> UDFExpr:
        def to_list(values: Any) -> Any:
            arr = _one_array(values)
            if isinstance(arr, pa.ExtensionArray):
                arr = arr.storage
            if pa.types.is_fixed_size_list(arr.type):
                return arr.cast(pa.list_(arr.type.value_type))
            if pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type):
                return arr
            raise InvalidTypeError(f"arr.to_list(): the values are {arr.type}, not an array column.")

        return self._udf(to_list, _OBJECT)
