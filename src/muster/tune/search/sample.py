"""Search-space primitives: Ray Tune's names (``tune.uniform``, ``tune.choice``, ...).

A *domain* describes where a hyperparameter's values come from. Searches draw
with ``draw(rng)``; users call Ray's ``sample(config=None, size=1,
random_state=None)``. ``grid_search`` is not a domain: it marks a list whose
every value is tried (``{"grid_search": [...]}``, as in Ray).
"""

from __future__ import annotations

import copy
import inspect
import math
import numbers
import random
from collections.abc import Callable, Sequence
from typing import Any

from muster.exceptions import InvalidArgumentError


class Domain:
    """A set of values to draw a hyperparameter from."""

    def draw(self, rng: random.Random, config: dict[str, Any] | None = None) -> Any:
        """One value; ``config`` is the trial's config so far (what ``sample_from`` functions read)."""
        raise NotImplementedError

    def sample(self, config: dict[str, Any] | None = None, size: int = 1, random_state: Any = None) -> Any:
        """Ray's: one value, or a list of ``size``. ``random_state``: a seed, a ``random.Random`` or a numpy
        ``RandomState``/``Generator``; without one the draw follows numpy's global seed (``np.random.seed``)."""
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise InvalidArgumentError(f"{self!r}.sample(size={size!r}): size is a number of values >= 1.")
        rng = _as_rng(random_state)
        values = [self.draw(rng, config) for _ in range(size)]
        return values[0] if size == 1 else values

    def is_grid(self) -> bool:
        return False

    def is_function(self) -> bool:
        return False


def _as_rng(random_state: Any) -> random.Random:
    if isinstance(random_state, random.Random):
        return random_state
    if random_state is None or hasattr(random_state, "randint") or hasattr(random_state, "integers"):
        import numpy as np

        source = np.random if random_state is None else random_state
        pick = source.integers if hasattr(source, "integers") else source.randint
        return random.Random(int(pick(0, 2**31 - 1)))
    if isinstance(random_state, int) and not isinstance(random_state, bool):
        return random.Random(random_state)
    raise InvalidArgumentError(
        f"sample(random_state={random_state!r}): pass a seed, a random.Random or a numpy RandomState/Generator."
    )


class Float(Domain):
    """Floats in ``[lower, upper]``, drawn uniformly (``tune.uniform``), on a log scale (``tune.loguniform``) or,
    with no bounds (``Float(None, None)``, as ``tune.randn`` makes), from a normal distribution (``.normal()``)."""

    def __init__(self, lower: float | None, upper: float | None, *, log_base: float | None = None,
                 q: float | None = None):
        lower = -math.inf if lower is None else lower
        upper = math.inf if upper is None else upper
        _check_range("uniform" if log_base is None else "loguniform", lower, upper)
        if log_base is not None and lower <= 0:
            raise InvalidArgumentError(
                f"loguniform(lower={lower!r}, upper={upper!r}): a log scale needs lower > 0, "
                "e.g. loguniform(1e-5, 1e-1)."
            )
        _check_q(q)
        self.lower, self.upper, self.log_base, self.q = float(lower), float(upper), log_base, q

    def _bounded(self) -> bool:
        return math.isfinite(self.lower) and math.isfinite(self.upper)

    def _need_bounds(self, how: str) -> None:
        if not self._bounded():
            raise InvalidArgumentError(
                f"{self!r}.{how}: drawing {how.split('(')[0]} needs finite bounds, and this domain has "
                f"lower={self.lower}, upper={self.upper}. Give both, e.g. Float(0.0, 1.0), or draw it with "
                ".normal(mean, sd) (tune.randn).")

    def draw(self, rng: random.Random, config: dict[str, Any] | None = None) -> float:
        self._need_bounds("uniform()" if self.log_base is None else "loguniform()")
        if self.log_base is None:
            value = rng.uniform(self.lower, self.upper)
        else:
            b = math.log(self.log_base)
            value = math.exp(rng.uniform(math.log(self.lower) / b, math.log(self.upper) / b) * b)
        return _quantize(value, self.q, self.lower, self.upper) if self.q else value

    def uniform(self) -> Float:
        """This range drawn uniformly (Ray's ``Float(lower, upper).uniform()``)."""
        self._need_bounds("uniform()")
        return Float(self.lower, self.upper, q=self.q)

    def loguniform(self, base: float = 10) -> Float:
        """This range drawn on a log scale."""
        self._need_bounds(f"loguniform({base})")
        return Float(self.lower, self.upper, log_base=base, q=self.q)

    def normal(self, mean: float = 0.0, sd: float = 1.0) -> Normal:
        """Drawn from the normal distribution (Ray's ``Float(None, None).normal(mean, sd)``, which is
        ``tune.randn(mean, sd)``); a normal draw has no bounds, so the domain must have none."""
        if self._bounded() or self.log_base is not None:
            raise InvalidArgumentError(
                f"{self!r}.normal(mean={mean!r}, sd={sd!r}): a normal draw takes no bounds and no log scale, and "
                f"this domain has lower={self.lower}, upper={self.upper}. Use tune.randn({mean!r}, {sd!r}) "
                "(or Float(None, None).normal(...)) instead.")
        return Normal(mean, sd, self.q)

    def quantized(self, q: float) -> Float:
        """This domain rounded to multiples of ``q`` (``tune.uniform(0, 1).quantized(0.1)``)."""
        return Float(self.lower, self.upper, log_base=self.log_base, q=q)

    def __repr__(self) -> str:
        kind = "uniform" if self.log_base is None else "loguniform"
        return f"{'q' if self.q else ''}{kind}({self.lower}, {self.upper}{f', q={self.q}' if self.q else ''})"


class Normal(Float):
    """``tune.randn(mean, sd)``: a ``Float`` (no bounds, as in Ray: ``lower=-inf``, ``upper=inf``) drawn from
    the normal distribution; with ``q`` (``tune.qrandn``, ``.quantized(q)``) rounded to a multiple of ``q``."""

    def __init__(self, mean: float = 0.0, sd: float = 1.0, q: float | None = None):
        if not isinstance(mean, (int, float, numbers.Real)):  # Ray fails later, at fit(): ValueError
            raise InvalidArgumentError(
                f"randn(mean={mean!r}, sd={sd!r}): mean must be a number, e.g. randn(0.0, 1.0); to pick one of "
                f"several values use tune.choice({mean!r}).")
        if not (isinstance(sd, (int, float)) and sd > 0):
            raise InvalidArgumentError(f"randn(mean={mean!r}, sd={sd!r}): sd must be > 0, e.g. randn(0.0, 1.0).")
        super().__init__(None, None, q=q)
        self.mean, self.sd = float(mean), float(sd)

    def draw(self, rng: random.Random, config: dict[str, Any] | None = None) -> float:
        value = rng.gauss(self.mean, self.sd)
        return round(value / self.q) * self.q if self.q else value

    def quantized(self, q: float) -> Normal:
        """This normal draw rounded to multiples of ``q`` (``tune.randn(0, 1).quantized(0.5)``)."""
        return Normal(self.mean, self.sd, q)

    def __repr__(self) -> str:
        if self.q:
            return f"qrandn({self.mean}, {self.sd}, q={self.q})"
        return f"randn({self.mean}, {self.sd})"


class Integer(Domain):
    """Integers in ``[lower, upper)`` (``randint``) or, with ``q``, multiples of ``q`` in ``[lower, upper]``."""

    def __init__(self, lower: int, upper: int, *, q: int | None = None, log: bool = False, inclusive: bool = False):
        for name, v in (("lower", lower), ("upper", upper)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise InvalidArgumentError(f"randint({name}={v!r}): bounds must be integers.")
        if upper < lower or (upper == lower and not inclusive):
            raise InvalidArgumentError(
                f"randint(lower={lower}, upper={upper}): need lower < upper (upper is excluded for randint, "
                "included for qrandint)."
            )
        if log and lower <= 0:
            raise InvalidArgumentError(f"lograndint(lower={lower}, upper={upper}): a log scale needs lower > 0.")
        if q is not None and (isinstance(q, bool) or not isinstance(q, int) or q < 1):
            raise InvalidArgumentError(f"qrandint(q={q!r}): q must be an integer >= 1.")
        self.lower, self.upper, self.q, self.log, self.inclusive = lower, upper, q, log, inclusive
        if q is not None:
            first, last = self._grid()
            if last < first:
                raise InvalidArgumentError(
                    f"qrandint(lower={lower}, upper={upper}, q={q}): no multiple of {q} lies between the bounds, so "
                    "there is nothing to draw. Widen the bounds or use a smaller q.")

    def _grid(self) -> tuple[int, int]:
        """The first and last ``k`` (inclusive) of the multiples ``k * q`` in the domain."""
        q = self.q or 1
        return -(-self.lower // q), self._top() // q

    def _top(self) -> int:
        return self.upper if self.inclusive else self.upper - 1

    def draw(self, rng: random.Random, config: dict[str, Any] | None = None) -> int:
        """Uniform (or log-uniform) over the domain's integers; with ``q``, over its multiples of ``q``
        (drawn by their index, so each multiple is as likely as the next, as Ray's are)."""
        lo, hi = self._grid() if self.q else (self.lower, self._top())
        if self.log:
            value = min(max(int(math.exp(rng.uniform(math.log(lo), math.log(hi + 1)))), lo), hi)
        else:
            value = rng.randint(lo, hi)
        return value * self.q if self.q else value

    def uniform(self) -> Integer:
        return copy.copy(self)

    def loguniform(self, base: float = 10) -> Integer:
        """This range drawn on a log scale (Ray's ``Integer(lower, upper).loguniform()``, i.e. ``lograndint``)."""
        return Integer(self.lower, self.upper, q=self.q, log=True, inclusive=self.inclusive)

    def quantized(self, q: int) -> Integer:
        """This domain's multiples of ``q`` (upper bound included, as ``qrandint``)."""
        return Integer(self.lower, self.upper, q=q, log=self.log, inclusive=True)

    def __repr__(self) -> str:
        return f"randint({self.lower}, {self.upper}{f', q={self.q}' if self.q else ''})"


class Categorical(Domain):
    def __init__(self, categories: Sequence[Any]):
        if isinstance(categories, (str, bytes)) or not isinstance(categories, Sequence) or not categories:
            raise InvalidArgumentError(f"choice({categories!r}): pass a non-empty list, e.g. choice([16, 32, 64]).")
        self.categories = list(categories)

    def draw(self, rng: random.Random, config: dict[str, Any] | None = None) -> Any:
        return self.categories[rng.randrange(len(self.categories))]

    def uniform(self) -> Categorical:
        return copy.copy(self)

    def __repr__(self) -> str:
        return f"choice({self.categories!r})"


class Function(Domain):
    """``sample_from(fn)``: ``fn(config)`` computes the value from the other values of the trial's config
    (``config["lr"]`` or ``config.lr``); Ray's older ``fn(spec)`` form (``spec.config.lr``) and a function of
    no arguments work too."""

    def __init__(self, fn: Callable[..., Any]):
        if not callable(fn):
            raise InvalidArgumentError(f"sample_from({fn!r}): pass a function, e.g. sample_from(lambda spec: 2 ** 4).")
        self.fn = fn
        try:
            inspect.signature(fn).bind(None)
            self.pass_config = True
        except TypeError:
            self.pass_config = False
        except ValueError:  # no signature to read (a builtin): give it the config
            self.pass_config = True

    def is_function(self) -> bool:
        return True

    def draw(self, rng: random.Random, config: dict[str, Any] | None = None) -> Any:
        if not self.pass_config:
            return self.fn()
        view = AttrDict(config or {})
        try:
            return self.fn(view)
        except (AttributeError, KeyError) as first:
            try:
                return self.fn(AttrDict(config=view))  # Ray's older form: fn(spec), spec.config.lr
            except (AttributeError, KeyError):
                raise first from None

    def __repr__(self) -> str:
        return f"sample_from({getattr(self.fn, '__name__', self.fn)})"


class AttrDict(dict):
    """A config as ``sample_from`` functions see it: ``config["lr"]`` and ``config.lr`` both work."""

    def __getattr__(self, name: str) -> Any:
        try:
            value = self[name]
        except KeyError:
            raise AttributeError(
                f"config.{name}: the trial config has no key {name!r} (yet: values are resolved in order, "
                "and sample_from runs after every other domain)."
            ) from None
        return AttrDict(value) if isinstance(value, dict) else value


def _check_range(name: str, lower: float, upper: float) -> None:
    if not (isinstance(lower, (int, float)) and isinstance(upper, (int, float))) or not lower < upper:
        raise InvalidArgumentError(f"{name}(lower={lower!r}, upper={upper!r}): need two numbers with lower < upper.")


def _check_q(q: float | None) -> None:
    if q is not None and not (isinstance(q, (int, float)) and q > 0):
        raise InvalidArgumentError(f"q={q!r}: the quantization step must be a number > 0.")


def _quantize(value: float, q: float, lower: float, upper: float) -> float:
    out = round(value / q) * q
    # rounding may step outside the bounds; step back inside
    while out > upper:
        out -= q
    while out < lower:
        out += q
    return round(out, 12) if isinstance(q, float) else out


# -- the public constructors -------------------------------------------------------
def uniform(lower: float, upper: float) -> Float:
    """A float drawn uniformly from ``[lower, upper]``."""
    return Float(lower, upper)


def quniform(lower: float, upper: float, q: float) -> Float:
    """``uniform`` rounded to a multiple of ``q``."""
    return Float(lower, upper, q=q)


def loguniform(lower: float, upper: float, base: float = 10) -> Float:
    """A float whose logarithm is uniform in ``[log lower, log upper]``."""
    return Float(lower, upper, log_base=base)


def qloguniform(lower: float, upper: float, q: float, base: float = 10) -> Float:
    """``loguniform`` rounded to a multiple of ``q``."""
    return Float(lower, upper, log_base=base, q=q)


def randn(mean: float = 0.0, sd: float = 1.0) -> Normal:
    """A float from the normal distribution."""
    return Normal(mean, sd)


def qrandn(mean: float, sd: float, q: float) -> Normal:
    """``randn`` rounded to a multiple of ``q``."""
    return Normal(mean, sd, q)


def randint(lower: int, upper: int) -> Integer:
    """An integer in ``[lower, upper)`` (upper excluded, like ``random.randrange``)."""
    return Integer(lower, upper)


def qrandint(lower: int, upper: int, q: int = 1) -> Integer:
    """A multiple of ``q`` in ``[lower, upper]`` (upper included)."""
    return Integer(lower, upper, q=q, inclusive=True)


def lograndint(lower: int, upper: int, base: float = 10) -> Integer:
    """An integer in ``[lower, upper)`` drawn on a log scale (the draw does not depend on ``base``)."""
    return Integer(lower, upper, log=True)


def qlograndint(lower: int, upper: int, q: int, base: float = 10) -> Integer:
    """A multiple of ``q`` in ``[lower, upper]`` (upper included) drawn on a log scale."""
    return Integer(lower, upper, q=q, log=True, inclusive=True)


def choice(categories: Sequence[Any]) -> Categorical:
    """One of ``categories``, each equally likely."""
    return Categorical(categories)


def sample_from(fn: Callable[..., Any]) -> Function:
    """A value computed by ``fn(config)`` from the trial's config so far (``config["a"]``; Ray's older
    ``fn(spec)`` with ``spec.config.a`` works too)."""
    return Function(fn)


def grid_search(values: Sequence[Any]) -> dict[str, list[Any]]:
    """Try every value: the grid's points are crossed with the other grids and repeated ``num_samples`` times."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
        raise InvalidArgumentError(f"grid_search({values!r}): pass a non-empty list, e.g. grid_search([0.1, 0.01]).")
    return {"grid_search": list(values)}
