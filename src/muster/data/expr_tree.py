"""The expression tree behind ``muster.data.expressions`` (Ray's ``ray.data.expressions``): ``Expr`` with its
operators, math helpers and namespaces, and the nodes: columns, literals, binary and unary operations, aliases
and functions of whole columns (``UDFExpr``; ``ComputeExpr`` for one ``pyarrow.compute`` function).

Each node evaluates over one pyarrow block (``_eval``: an array, or a value that holds for every row) with
``pyarrow.compute``, with Ray's kernels (``//`` and ``%`` through floor division, ``+`` of strings joins them),
prints itself as Ray does in an operator's name (``_text``), and gives its ``pyarrow.compute.Expression`` where
it has one (``to_pyarrow``).
"""

from __future__ import annotations

import builtins
import enum
import operator
from typing import TYPE_CHECKING, Any, Callable

import pyarrow as pa
import pyarrow.compute as pc

from muster.data.datatype import DataType
from muster.exceptions import InvalidArgumentError, InvalidTypeError

if TYPE_CHECKING:
    from muster.data import expr_namespaces as ns

_MAX_LITERAL = 20  # Ray cuts a literal at 20 characters in an expression's one-line text


class Operation(str, enum.Enum):
    """The operations of ``BinaryExpr`` and ``UnaryExpr``."""

    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    MOD = "mod"
    FLOORDIV = "floordiv"
    GT = "gt"
    LT = "lt"
    GE = "ge"
    LE = "le"
    EQ = "eq"
    NE = "ne"
    AND = "and"
    OR = "or"
    NOT = "not"
    IS_NULL = "is_null"
    IS_NOT_NULL = "is_not_null"
    IN = "in"
    NOT_IN = "not_in"


def _add(left: Any, right: Any) -> Any:
    """``+``: string concatenation where either side is a string, as Ray's."""
    if any(isinstance(s, str) or pa.types.is_string(getattr(s, "type", pa.null())) for s in (left, right)):
        return pc.binary_join_element_wise(left, right, "")
    return pc.add(left, right)


def _is_in(left: Any, right: Any) -> Any:
    if isinstance(right, pa.ChunkedArray):
        right = right.combine_chunks()
    values = right if isinstance(right, pa.Array) else pa.array(
        list(right) if isinstance(right, (list, tuple, set)) else [right])
    return pc.is_in(left, value_set=values)


_KERNELS: dict[Operation, Callable[..., Any]] = {
    Operation.ADD: _add, Operation.SUB: pc.subtract, Operation.MUL: pc.multiply, Operation.DIV: pc.divide,
    Operation.MOD: lambda a, b: pc.subtract(a, pc.multiply(pc.floor(pc.divide(a, b)), b)),
    Operation.FLOORDIV: lambda a, b: pc.floor(pc.divide(a, b)),
    Operation.GT: pc.greater, Operation.LT: pc.less, Operation.GE: pc.greater_equal, Operation.LE: pc.less_equal,
    Operation.EQ: pc.equal, Operation.NE: pc.not_equal, Operation.AND: pc.and_kleene, Operation.OR: pc.or_kleene,
    Operation.NOT: pc.invert, Operation.IS_NULL: pc.is_null, Operation.IS_NOT_NULL: pc.is_valid,
    Operation.IN: _is_in, Operation.NOT_IN: lambda a, b: pc.invert(_is_in(a, b)),
}
_PYARROW_OPS: dict[Operation, Callable[..., Any]] = {  # the same on pyarrow.compute.Expression
    Operation.ADD: operator.add, Operation.SUB: operator.sub, Operation.MUL: operator.mul,
    Operation.DIV: operator.truediv, Operation.GT: operator.gt, Operation.LT: operator.lt,
    Operation.GE: operator.ge, Operation.LE: operator.le, Operation.EQ: operator.eq, Operation.NE: operator.ne,
    Operation.AND: operator.and_, Operation.OR: operator.or_, Operation.NOT: operator.invert,
    Operation.IS_NULL: lambda e: e.is_null(), Operation.IS_NOT_NULL: lambda e: e.is_valid(),
    Operation.IN: lambda e, v: e.isin(v), Operation.NOT_IN: lambda e, v: ~e.isin(v),
    Operation.FLOORDIV: lambda a, b: pc.floor(pc.divide(a, b)),
    Operation.MOD: lambda a, b: pc.subtract(a, pc.multiply(pc.floor(pc.divide(a, b)), b)),
}
_SYMBOLS = {Operation.ADD: "+", Operation.SUB: "-", Operation.MUL: "*", Operation.DIV: "/", Operation.MOD: "%",
            Operation.FLOORDIV: "//", Operation.GT: ">", Operation.LT: "<", Operation.GE: ">=", Operation.LE: "<=",
            Operation.EQ: "==", Operation.NE: "!=", Operation.AND: "&", Operation.OR: "|", Operation.IN: "in",
            Operation.NOT_IN: "not in"}


class Expr:
    """A column expression. Operators and methods build bigger ones; ``Dataset.with_column`` and
    ``filter(expr=...)`` evaluate them one block at a time."""

    data_type: DataType = DataType(object)

    # -- what every kind of expression gives
    def _eval(self, block: pa.Table) -> Any:
        """The values over ``block``: an array, or a scalar (a literal) that holds for every row."""
        raise NotImplementedError

    def _text(self) -> builtins.str:
        """One line, as Ray prints an expression in an operator's name."""
        raise NotImplementedError

    def _children(self) -> builtins.list["Expr"]:
        return []

    def _to_pyarrow(self) -> pc.Expression:
        raise InvalidTypeError(f"{self._text()} has no pyarrow.compute.Expression (a Python function, download, "
                               "random or uuid); use it in with_column or filter(expr=...) instead.")

    @property
    def name(self) -> builtins.str | None:
        """The output column's name: a column's own, an alias'; None for others."""
        return None

    def to_pyarrow(self) -> pc.Expression:
        """The same expression as a ``pyarrow.compute.Expression`` (for ``read_parquet(filter=...)``).

        Raises:
            InvalidTypeError: it calls a Python function, or is ``download``/``random``/``uuid``/``star``.
        """
        return self._to_pyarrow()

    def structurally_equals(self, other: Any) -> bool:
        """Whether ``other`` is the same tree (``==`` builds an expression instead)."""
        return isinstance(other, Expr) and type(other) is type(self) and self._key() == other._key()

    def _key(self) -> Any:
        return (self._text(), tuple(c._key() for c in self._children()))

    def __repr__(self) -> builtins.str:
        from muster.data.expr_repr import tree_text

        return tree_text(self)

    def __hash__(self) -> int:
        return id(self)

    def __bool__(self) -> bool:
        raise InvalidTypeError(f"{self._text()} has no truth value: combine conditions with & | ~ (not and/or/not) "
                               "and compare expressions with .structurally_equals(...).")

    # -- operators
    def _bin(self, other: Any, op: Operation) -> "Expr":
        return BinaryExpr(op, self, other if isinstance(other, Expr) else LiteralExpr(other))

    def _rbin(self, other: Any, op: Operation) -> "Expr":
        return BinaryExpr(op, other if isinstance(other, Expr) else LiteralExpr(other), self)

    def __add__(self, other: Any) -> "Expr":
        return self._bin(other, Operation.ADD)

    def __radd__(self, other: Any) -> "Expr":
        return self._rbin(other, Operation.ADD)

    def __sub__(self, other: Any) -> "Expr":
        return self._bin(other, Operation.SUB)

    def __rsub__(self, other: Any) -> "Expr":
        return self._rbin(other, Operation.SUB)

    def __mul__(self, other: Any) -> "Expr":
        return self._bin(other, Operation.MUL)

    def __rmul__(self, other: Any) -> "Expr":
        return self._rbin(other, Operation.MUL)

    def __truediv__(self, other: Any) -> "Expr":
        return self._bin(other, Operation.DIV)

    def __rtruediv__(self, other: Any) -> "Expr":
        return self._rbin(other, Operation.DIV)

    def __floordiv__(self, other: Any) -> "Expr":
        return self._bin(other, Operation.FLOORDIV)

    def __rfloordiv__(self, other: Any) -> "Expr":
        return self._rbin(other, Operation.FLOORDIV)

    def __mod__(self, other: Any) -> "Expr":
        return self._bin(other, Operation.MOD)

    def __rmod__(self, other: Any) -> "Expr":
        return self._rbin(other, Operation.MOD)

    def __gt__(self, other: Any) -> "Expr":
        return self._bin(other, Operation.GT)

    def __lt__(self, other: Any) -> "Expr":
        return self._bin(other, Operation.LT)

    def __ge__(self, other: Any) -> "Expr":
        return self._bin(other, Operation.GE)

    def __le__(self, other: Any) -> "Expr":
        return self._bin(other, Operation.LE)

    def __eq__(self, other: object) -> Any:
        return self._bin(other, Operation.EQ)

    def __ne__(self, other: object) -> Any:
        return self._bin(other, Operation.NE)

    def __and__(self, other: Any) -> "Expr":
        return self._bin(other, Operation.AND)

    def __rand__(self, other: Any) -> "Expr":
        return self._rbin(other, Operation.AND)

    def __or__(self, other: Any) -> "Expr":
        return self._bin(other, Operation.OR)

    def __ror__(self, other: Any) -> "Expr":
        return self._rbin(other, Operation.OR)

    def __invert__(self) -> "Expr":
        return UnaryExpr(Operation.NOT, self)

    def is_null(self) -> "Expr":
        return UnaryExpr(Operation.IS_NULL, self)

    def is_not_null(self) -> "Expr":
        return UnaryExpr(Operation.IS_NOT_NULL, self)

    def is_in(self, values: "builtins.list[Any] | Expr") -> "Expr":
        return self._bin(values, Operation.IN)

    def not_in(self, values: "builtins.list[Any] | Expr") -> "Expr":
        return self._bin(values, Operation.NOT_IN)

    def alias(self, name: builtins.str) -> "Expr":
        """The same values under the column name ``name`` (``with_columns``/``unnest`` name columns by it)."""
        return AliasExpr(self, name)

    # -- math, each one pyarrow.compute function (Ray's helpers)
    def _compute(self, fn: Callable[..., Any], *args: Any, dtype: DataType | None = None) -> "UDFExpr":
        return ComputeExpr(fn, self, args, {}, dtype or self.data_type)

    def ceil(self) -> "UDFExpr":
        return self._compute(pc.ceil)

    def floor(self) -> "UDFExpr":
        return self._compute(pc.floor)

    def round(self) -> "UDFExpr":
        return self._compute(pc.round)

    def trunc(self) -> "UDFExpr":
        return self._compute(pc.trunc)

    def ln(self) -> "UDFExpr":
        return self._compute(pc.ln, dtype=DataType.float64())

    def log10(self) -> "UDFExpr":
        return self._compute(pc.log10, dtype=DataType.float64())

    def log2(self) -> "UDFExpr":
        return self._compute(pc.log2, dtype=DataType.float64())

    def exp(self) -> "UDFExpr":
        return self._compute(pc.exp, dtype=DataType.float64())

    def sin(self) -> "UDFExpr":
        return self._compute(pc.sin, dtype=DataType.float64())

    def cos(self) -> "UDFExpr":
        return self._compute(pc.cos, dtype=DataType.float64())

    def tan(self) -> "UDFExpr":
        return self._compute(pc.tan, dtype=DataType.float64())

    def asin(self) -> "UDFExpr":
        return self._compute(pc.asin, dtype=DataType.float64())

    def acos(self) -> "UDFExpr":
        return self._compute(pc.acos, dtype=DataType.float64())

    def atan(self) -> "UDFExpr":
        return self._compute(pc.atan, dtype=DataType.float64())

    def negate(self) -> "UDFExpr":
        return self._compute(pc.negate_checked)

    def sign(self) -> "UDFExpr":
        return self._compute(pc.sign)

    def power(self, exponent: Any) -> "UDFExpr":
        return self._compute(pc.power, exponent)

    def abs(self) -> "UDFExpr":
        return self._compute(pc.abs_checked)

    def cast(self, target_type: DataType, *, safe: bool = True) -> "UDFExpr":
        """The values cast to ``target_type`` (an Arrow-backed ``DataType``); ``safe=False`` allows lossy casts.

        Raises:
            InvalidTypeError: ``target_type`` is no ``DataType``, or one backed by a Python type.
        """
        if not isinstance(target_type, DataType) or target_type.is_python_type():
            raise InvalidTypeError(f"cast({target_type!r}): pass an Arrow-backed muster.data.datatype.DataType, "
                                   "e.g. DataType.int64(), DataType.float64() or DataType.string().")
        arrow = target_type.to_arrow_dtype()

        def cast_udf(values: Any) -> Any:
            return pc.cast(values, arrow, safe=safe)

        return UDFExpr(cast_udf, (self,), {}, target_type)

    # -- namespaces
    @property
    def str(self) -> "ns._StringNamespace":
        from muster.data.expr_namespaces import _StringNamespace

        return _StringNamespace(self)

    @property
    def list(self) -> "ns._ListNamespace":
        from muster.data.expr_namespaces import _ListNamespace

        return _ListNamespace(self)

    @property
    def struct(self) -> "ns._StructNamespace":
        from muster.data.expr_namespaces import _StructNamespace

        return _StructNamespace(self)

    @property
    def map(self) -> "ns._MapNamespace":
        from muster.data.expr_namespaces import _MapNamespace

        return _MapNamespace(self)

    @property
    def dt(self) -> "ns._DatetimeNamespace":
        from muster.data.expr_namespaces import _DatetimeNamespace

        return _DatetimeNamespace(self)

    @property
    def arr(self) -> "ns._ArrayNamespace":
        from muster.data.expr_namespaces import _ArrayNamespace

        return _ArrayNamespace(self)


def _inner(expr: Expr) -> str:
    """An operand's text, in parentheses when it is itself a binary operation."""
    return f"({expr._text()})" if isinstance(expr, BinaryExpr) else expr._text()


class ColumnExpr(Expr):
    def __init__(self, name: str):
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def _eval(self, block: pa.Table) -> Any:
        if self._name not in block.column_names:
            raise KeyError(f"no column {self._name!r}")
        return block.column(self._name)

    def _text(self) -> str:
        return f"col({self._name!r})"

    def _to_pyarrow(self) -> pc.Expression:
        return pc.field(self._name)


class LiteralExpr(Expr):
    def __init__(self, value: Any):
        self.value = value
        self.data_type = DataType.infer_dtype(value)

    def _eval(self, block: pa.Table) -> Any:
        return self.value

    def _text(self) -> str:
        text = repr(self.value)
        return text if len(text) <= _MAX_LITERAL else text[:_MAX_LITERAL - 3] + "..."

    def _key(self) -> Any:
        return ("lit", repr(self.value))

    def _to_pyarrow(self) -> pc.Expression:
        return pc.scalar(self.value)


class BinaryExpr(Expr):
    def __init__(self, op: Operation, left: Expr, right: Expr):
        self.op, self.left, self.right = op, left, right

    def _children(self) -> list[Expr]:
        return [self.left, self.right]

    def _eval(self, block: pa.Table) -> Any:
        return _KERNELS[self.op](self.left._eval(block), self.right._eval(block))

    def _text(self) -> str:
        return f"{_inner(self.left)} {_SYMBOLS[self.op]} {_inner(self.right)}"

    def _to_pyarrow(self) -> pc.Expression:
        right = self.right.value if isinstance(self.right, LiteralExpr) else self.right._to_pyarrow()
        if self.op in (Operation.IN, Operation.NOT_IN) and not isinstance(right, list):
            right = [right]
        return _PYARROW_OPS[self.op](self.left._to_pyarrow(), right)


class UnaryExpr(Expr):
    def __init__(self, op: Operation, operand: Expr):
        self.op, self.operand = op, operand
        if op != Operation.NOT:
            self.data_type = DataType.bool()

    def _children(self) -> list[Expr]:
        return [self.operand]

    def _eval(self, block: pa.Table) -> Any:
        return _KERNELS[self.op](self.operand._eval(block))

    def _text(self) -> str:
        inner = _inner(self.operand)
        return {Operation.NOT: f"~{inner}", Operation.IS_NULL: f"{inner}.is_null()",
                Operation.IS_NOT_NULL: f"{inner}.is_not_null()"}[self.op]

    def _to_pyarrow(self) -> pc.Expression:
        return _PYARROW_OPS[self.op](self.operand._to_pyarrow())


class AliasExpr(Expr):
    def __init__(self, expr: Expr, name: str):
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"alias({name!r}): pass the output column's name, a non-empty string.")
        self.expr, self._name, self.data_type = expr, name, expr.data_type

    @property
    def name(self) -> str:
        return self._name

    def _children(self) -> list[Expr]:
        return [self.expr]

    def _eval(self, block: pa.Table) -> Any:
        return self.expr._eval(block)

    def _text(self) -> str:
        return f"{self.expr._text()}.alias({self._name!r})"

    def _to_pyarrow(self) -> pc.Expression:
        return self.expr._to_pyarrow()


class UDFExpr(Expr):
    """``fn`` over its arguments' values (pyarrow arrays: a whole block's column each), as ``@udf`` makes."""

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], data_type: DataType,
                 user: bool = False):
        self.fn, self.data_type, self._user = fn, data_type, user  # user: a @udf (its errors are the user's)
        self.args = tuple(a if isinstance(a, Expr) else LiteralExpr(a) for a in args)
        self.kwargs = {k: v if isinstance(v, Expr) else LiteralExpr(v) for k, v in kwargs.items()}

    def _children(self) -> list[Expr]:
        return [*self.args, *self.kwargs.values()]

    def _eval(self, block: pa.Table) -> Any:
        args, kwargs = [a._eval(block) for a in self.args], {k: v._eval(block) for k, v in self.kwargs.items()}
        if self._user:  # its failure is a UserFunctionError naming it and the batch, as map_batches' is
            from muster.data.plan import _guard

            out = _guard("Project", self.fn, block, lambda: self.fn(*args, **kwargs))
        else:
            out = self.fn(*args, **kwargs)
        if not (isinstance(out, (pa.Array, pa.ChunkedArray)) or hasattr(out, "__array__")):
            raise InvalidTypeError(f"the udf {_fn_name(self.fn)} returned a {type(out).__name__}; return the "
                                   "column's values: a pyarrow Array or ChunkedArray, a numpy array or a pandas "
                                   "Series, one value per row.")
        return out

    def _text(self) -> str:
        args = [a._text() for a in self.args] + [f"{k}={v._text()}" for k, v in self.kwargs.items()]
        return f"{_fn_name(self.fn)}({', '.join(args)})"

    def _key(self) -> Any:
        return (id(self.fn), tuple(c._key() for c in self._children()))


class ComputeExpr(UDFExpr):
    """One ``pyarrow.compute`` function of an expression (Ray's helpers and namespaces): it also has a
    ``pyarrow.compute.Expression``, so it can go into ``read_parquet(filter=...)``."""

    def __init__(self, pc_func: Callable[..., Any], expr: Expr, positional: tuple[Any, ...], kwargs: dict[str, Any],
                 data_type: DataType):
        def udf(values: Any) -> Any:
            return pc_func(values, *positional, **kwargs)

        super().__init__(udf, (expr,), {}, data_type)
        self.pc_func, self.pc_positional, self.pc_kwargs = pc_func, positional, kwargs

    def _key(self) -> Any:
        return (self.pc_func, repr(self.pc_positional), repr(self.pc_kwargs), self.args[0]._key())

    def _to_pyarrow(self) -> pc.Expression:
        return self.pc_func(self.args[0]._to_pyarrow(), *self.pc_positional, **self.pc_kwargs)


def _fn_name(fn: Any) -> str:
    return str(getattr(fn, "__name__", type(fn).__name__))
