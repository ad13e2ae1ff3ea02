"""PB2's bandit: a time-varying Gaussian process and its UCB acquisition (numpy, and torch's linear algebra).

Population Based Bandits (Parker-Holder et al., 2020) model the change in
reward per unit of time as a function of ``(time, reward before, hyperparameters)``
with a GP whose kernel is a squared exponential over the hyperparameters
times a forgetting factor over time (the TV-GP-UCB kernel of Bogunovic et
al., 2016)::

    k(x, x') = variance * exp(-|h - h'|^2 / lengthscale) * (1 - epsilon) ** (|t - t'| / 2)

where ``t`` is the first column and ``h`` the rest.  The kernel's three
hyperparameters maximise the log marginal likelihood (a pattern search in
log space within the same bounds as Ray's, started at Ray's initial values).
The next config maximises ``mean + sqrt(beta_t) * variance`` with
``beta_t = 0.2 + max(0, log(0.4 * n))`` -- a dense random search over the
unit box, then a shrinking local search around the best candidates.

The fit's time is Cholesky factorisations (one per likelihood evaluated). They run on one thread
(``select_config``): the fit runs beside trials that keep every core busy, and a multi-threaded LAPACK
there spends most of its time waiting for threads the OS does not schedule (measured: 10 to 50 times
slower on a loaded machine; ``docs/benchmarks.md``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

#: log-space bounds of (variance, lengthscale, epsilon), as Ray's kernel
_LOG_BOUNDS = np.log(np.array([[1e-5, 1e5], [1e-5, 1e5], [1e-5, 0.5]]))
_START = np.log(np.array([1.0, 1.0, 0.1]))
_JITTER = 1e-10  # the noise term on the diagonal (sklearn's default alpha, which Ray uses)
_MIN_LENGTH = 200  # fewer points than this: use them all (see select_length)
_LENGTH_STEP = 50  # the lengths select_length compares (Ray's: every 10th)
_TORCH_FROM = 100  # from this many points, the linear algebra is torch's (see _solve_lower)


def tv_squared_exp(a: np.ndarray, b: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """The time-varying squared exponential kernel between the rows of ``a`` and ``b`` (time first)."""
    return _kernel(_distances(a, b), theta)


def _distances(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The parts of the kernel that do not depend on its hyperparameters: squared distances between the
    rows' hyperparameter columns, and their distances in time."""
    ha, hb = a[:, 1:], b[:, 1:]
    sq = np.maximum((ha * ha).sum(axis=1)[:, None] + (hb * hb).sum(axis=1)[None, :] - 2.0 * ha @ hb.T, 0.0)
    return sq, np.abs(a[:, :1] - b[:, :1].T)


def _kernel(distances: tuple[np.ndarray, np.ndarray], theta: np.ndarray) -> np.ndarray:
    """``variance * exp(-sq / lengthscale) * (1 - epsilon) ** (dt / 2)``, with one exponential."""
    sq, dt = distances
    variance, lengthscale, epsilon = np.exp(theta)
    epsilon = min(max(epsilon, 1e-5), 0.5)
    out: np.ndarray = variance * np.exp(-sq / lengthscale + (0.5 * np.log1p(-epsilon)) * dt)
    return out


@dataclass
class GP:
    """A GP fitted to ``(x, y)``: ``predict`` gives the posterior mean and variance at new rows."""

    x: np.ndarray
    theta: np.ndarray
    chol: np.ndarray
    alpha: np.ndarray

    @classmethod
    def fit(cls, x: np.ndarray, y: np.ndarray, theta: np.ndarray | None = None, start: np.ndarray | None = None) -> GP:
        """Fit to ``x`` (n, d) and ``y`` (n,) with the kernel's log-hyperparameters ``theta``; with none,
        those of the highest marginal likelihood, searched from ``start`` (a nearby fit's) or Ray's start."""
        if theta is None:
            theta = _maximise_likelihood(x, y, start)
        chol = _cholesky(tv_squared_exp(x, x, theta))
        return cls(x, theta, chol, _cho_solve(chol, y))

    def predict(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k = tv_squared_exp(rows, self.x, self.theta)
        mean = k @ self.alpha
        v = _solve_lower(self.chol, k.T)
        var = np.exp(self.theta[0]) - (v * v).sum(axis=0)
        return mean, np.maximum(var, 0.0)

    def log_marginal_likelihood(self, y: np.ndarray) -> float:
        return _lml_from(self.chol, self.alpha, y)


def _use_torch(n: int) -> bool:
    """Whether a system of ``n`` points is solved with torch: numpy's own LAPACK has no triangular solve,
    and may run on several threads; a small one, in a driver that has not imported torch, keeps numpy's
    (importing torch costs more than it saves)."""
    return n >= _TORCH_FROM or "torch" in sys.modules


@contextmanager
def _one_thread(n: int) -> Iterator[None]:
    """torch's linear algebra, for systems of up to ``n`` points, on one thread in this thread (torch's
    setting is the calling thread's: the trials' and the controller's threads keep theirs)."""
    if not _use_torch(n):
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _cholesky(k: np.ndarray) -> np.ndarray:
    """The Cholesky factor of ``k`` plus jitter, growing the jitter until it is positive definite
    (``k``, a kernel matrix made for the call, may be changed)."""
    jitter = _JITTER
    if not _use_torch(k.shape[0]):
        eye = np.eye(k.shape[0])
        while True:
            try:
                return np.linalg.cholesky(k + jitter * eye)
            except np.linalg.LinAlgError:
                jitter *= 10.0
                if jitter > 1.0:
                    raise
    import torch

    matrix = torch.from_numpy(k)
    diagonal = matrix.diagonal().clone()
    while True:
        matrix.diagonal().copy_(diagonal + jitter)  # k itself is the caller's scratch: no n^2 copy
        chol, info = torch.linalg.cholesky_ex(matrix)
        if not int(info):
            factor: np.ndarray = chol.numpy()
            return factor
        jitter *= 10.0
        if jitter > 1.0:
            raise np.linalg.LinAlgError(f"the kernel matrix is not positive definite even with jitter {jitter / 10}")


def _solve_lower(chol: np.ndarray, b: np.ndarray, transposed: bool = False) -> np.ndarray:
    """``chol`` (lower triangular) ``\\ b``, or ``chol.T \\ b``: a triangular solve, O(n^2) per column
    (numpy has none; ``np.linalg.solve`` would factorise the triangle again, O(n^3)). Small systems, or
    a driver that has not imported torch, keep numpy's: importing torch costs more than they save."""
    if not _use_torch(chol.shape[0]):
        solved: np.ndarray = np.linalg.solve(chol.T if transposed else chol, b)
        return solved
    import torch

    lower = torch.from_numpy(np.ascontiguousarray(chol))
    rhs = torch.from_numpy(np.ascontiguousarray(b).reshape(b.shape[0], -1))
    out = torch.linalg.solve_triangular(lower.T if transposed else lower, rhs, upper=transposed)
    result: np.ndarray = out.numpy().reshape(b.shape)
    return result


def _cho_solve(chol: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``K \\ y`` for ``K = chol @ chol.T``."""
    return _solve_lower(chol, _solve_lower(chol, y), transposed=True)


def _lml_from(chol: np.ndarray, alpha: np.ndarray, y: np.ndarray) -> float:
    return float(-0.5 * y @ alpha - np.log(np.diag(chol)).sum() - 0.5 * len(y) * np.log(2 * np.pi))


def _lml(distances: tuple[np.ndarray, np.ndarray], y: np.ndarray, theta: np.ndarray) -> float:
    """The log marginal likelihood: ``y' K^-1 y = |L^-1 y|^2``, one triangular solve."""
    try:
        chol = _cholesky(_kernel(distances, theta))
    except np.linalg.LinAlgError:
        return -np.inf
    z = _solve_lower(chol, y)
    return float(-0.5 * z @ z - np.log(np.diag(chol)).sum() - 0.5 * len(y) * np.log(2 * np.pi))


def _maximise_likelihood(x: np.ndarray, y: np.ndarray, start: np.ndarray | None = None) -> np.ndarray:
    """The kernel's log-hyperparameters: a compass search (step halving down to 0.01) from ``start``
    with a small first step, else from Ray's start."""
    theta = _START.copy() if start is None else start.copy()
    distances = _distances(x, x)  # computed once: each step only changes the hyperparameters
    best, step = _lml(distances, y, theta), (1.0 if start is None else 0.125)
    seen = {tuple(theta): best}  # a move comes back to points it saw (and a bound clips to them)
    while step > 1e-2:
        moved = False
        for i in range(3):
            for sign in (1.0, -1.0):
                trial = theta.copy()
                trial[i] = np.clip(trial[i] + sign * step, *_LOG_BOUNDS[i])
                value = seen.get(tuple(trial))
                if value is None:
                    value = seen[tuple(trial)] = _lml(distances, y, trial)
                if value > best + 1e-9:
                    theta, best, moved = trial, value, True
        if not moved:
            step /= 2.0
    return theta


def normalize(data: np.ndarray, wrt: np.ndarray) -> np.ndarray:
    """``data`` scaled to [0, 1] column-wise by the min and max of ``wrt``'s columns."""
    low, high = np.min(wrt, axis=0), np.max(wrt, axis=0)
    out: np.ndarray = (data - low) / (high - low + 1e-8)
    return out


def standardize(y: np.ndarray) -> np.ndarray:
    """``y`` to zero mean and unit variance, clipped to [-2, 2]."""
    out: np.ndarray = np.clip((y - y.mean()) / (y.std() + 1e-8), -2.0, 2.0)
    return out


def ucb(mean_gp: GP, var_gp: GP, fixed: np.ndarray, h: np.ndarray) -> np.ndarray:
    """UCB at the hyperparameter rows ``h`` (in [0, 1]), with time and reward fixed at ``fixed``.

    The mean comes from ``mean_gp``; the variance from ``var_gp``, which also holds the configs
    other trials are running now, so that a batch does not pick one point twice (Desautels et al.).
    """
    beta = 0.2 + max(0.0, float(np.log(0.4 * mean_gp.x.shape[0])))
    rows = np.hstack([np.broadcast_to(fixed, (h.shape[0], fixed.size)), h])
    mean, _ = mean_gp.predict(rows)
    _, var = var_gp.predict(rows)
    out: np.ndarray = mean + np.sqrt(beta) * var
    return out


def maximise_ucb(mean_gp: GP, var_gp: GP, fixed: np.ndarray, dims: int, rng: np.random.Generator,
                 samples: int = 2000, starts: int = 10) -> np.ndarray:
    """The point of ``[0, 1]^dims`` with the highest UCB: random search, then local refinement."""
    cands = rng.uniform(0.0, 1.0, (samples, dims))
    values = ucb(mean_gp, var_gp, fixed, cands)
    order = np.argsort(values)[::-1][:starts]
    points, best = cands[order], values[order]
    step = 0.1
    while step > 1e-4:
        moves = points[:, None, :] + step * rng.standard_normal((points.shape[0], 8, dims))
        moves = np.clip(moves, 0.0, 1.0).reshape(-1, dims)
        scores = ucb(mean_gp, var_gp, fixed, moves).reshape(points.shape[0], 8)
        top = scores.argmax(axis=1)
        better = scores[np.arange(points.shape[0]), top] > best
        if not better.any():
            step /= 2.0
            continue
        chosen = moves.reshape(points.shape[0], 8, dims)[np.arange(points.shape[0]), top]
        points[better], best[better] = chosen[better], scores[np.arange(points.shape[0]), top][better]
    out: np.ndarray = np.clip(points[int(best.argmax())], 0.0, 1.0)
    return out


def select_length(x: np.ndarray, y: np.ndarray, bounds: np.ndarray, num_fixed: int) -> tuple[int, np.ndarray | None]:
    """How many of the most recent points to fit, and the kernel fitted to them: all points (and no kernel
    yet) below 200; else the length (200, 250, ...; Ray's compares every 10th) whose fitted GP has the highest
    log marginal likelihood. Each length's fit starts from the previous one's, which keeps this affordable."""
    if x.shape[0] < _MIN_LENGTH:
        return int(x.shape[0]), None
    fits = []
    theta = None
    for length in range(_MIN_LENGTH, x.shape[0] + 1, _LENGTH_STEP):
        xs, ys = _scaled(x[-length:], y[-length:], bounds, num_fixed)
        gp = GP.fit(xs, ys, start=theta)
        theta = gp.theta
        fits.append((gp.log_marginal_likelihood(ys), length, theta))
    _, length, theta = max(fits, key=lambda fit: fit[0])
    return length, theta


def _scaled(x: np.ndarray, y: np.ndarray, bounds: np.ndarray, num_fixed: int) -> tuple[np.ndarray, np.ndarray]:
    """``x`` in [0, 1] (fixed columns by their data range, hyperparameters by ``bounds``), ``y`` standardized."""
    fixed = x[:, :num_fixed]
    limits = np.hstack([np.vstack([fixed.max(axis=0), fixed.min(axis=0)]), bounds])
    return normalize(x, limits), standardize(y)


def select_config(x: np.ndarray, y: np.ndarray, running: np.ndarray | None, newpoint: np.ndarray,
                  bounds: np.ndarray, rng: np.random.Generator, num_fixed: int = 2) -> np.ndarray:
    """The next hyperparameters (in ``bounds``' units) for a trial continuing from ``newpoint``.

    Args:
        x: one row per observation: ``num_fixed`` columns (time, reward before) then the hyperparameters.
        y: the change in reward per unit of time after each row.
        running: hyperparameter rows other trials already took at this time step, or None.
        newpoint: the donor's (time, reward before), which the new config cannot change.
        bounds: shape (2, n_hyperparameters): the lows, then the highs.
    """
    with _one_thread(x.shape[0] + (0 if running is None else len(running))):
        return _select_config(x, y, running, newpoint, bounds, rng, num_fixed)


def _select_config(x: np.ndarray, y: np.ndarray, running: np.ndarray | None, newpoint: np.ndarray,
                   bounds: np.ndarray, rng: np.random.Generator, num_fixed: int) -> np.ndarray:
    length, theta = select_length(x, y, bounds, num_fixed)
    x, y = x[-length:], y[-length:]
    xs, ys = _scaled(x, y, bounds, num_fixed)
    fixed = normalize(newpoint, x[:, :num_fixed])
    mean_gp = GP.fit(xs, ys, theta)
    var_gp = mean_gp
    if running is not None and len(running):
        pending = np.hstack([np.tile(fixed, (running.shape[0], 1)), normalize(running, bounds)])
        var_gp = GP.fit(np.vstack([xs, pending]), np.concatenate([ys, np.zeros(len(pending))]), mean_gp.theta)
    best = maximise_ucb(mean_gp, var_gp, fixed, bounds.shape[1], rng)
    out: np.ndarray = bounds[0] + best * (bounds[1] - bounds[0])
    return out
