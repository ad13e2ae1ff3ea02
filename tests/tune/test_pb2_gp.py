"""PB2's GP fit: what makes it affordable (one thread, no likelihood computed twice) and that the
likelihood it maximises is the GP's, whichever linear algebra computes it."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from muster.tune.schedulers import pb2_gp
from muster.tune.schedulers.pb2_gp import select_config


def _observations(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    t = np.repeat(np.arange(1.0, n // 4 + 2), 4)[:n]
    lr = rng.uniform(0, 1, n)
    x = np.column_stack([t, t * 0.9 + rng.standard_normal(n), lr])
    return x, 1 - (lr - 0.7) ** 2 + 0.1 * rng.standard_normal(n)


@pytest.fixture
def recorded(monkeypatch):
    """Every likelihood the fit evaluates: its hyperparameters and the torch threads it ran on."""
    calls: list[tuple[tuple[float, ...], int]] = []
    lml = pb2_gp._lml

    def recording(distances, y, theta):
        calls.append((tuple(theta), torch.get_num_threads()))
        return lml(distances, y, theta)

    monkeypatch.setattr(pb2_gp, "_lml", recording)
    return calls


def test_the_fit_never_computes_one_likelihood_twice(recorded):
    x, y = _observations(120)
    select_config(x, y, None, x[-1, :2], np.array([[0.0], [1.0]]), np.random.default_rng(0))
    points = [theta for theta, _ in recorded]
    assert len(points) > 20 and len(set(points)) == len(points)


def test_the_fit_runs_on_one_thread_and_leaves_the_callers_setting(recorded):
    x, y = _observations(150)
    original = torch.get_num_threads()
    torch.set_num_threads(2)  # more than one, as on any machine of 2 cores or more
    try:
        seen: list[int] = []

        def fit() -> None:  # on a thread of its own, as PB2's fitting thread
            before = torch.get_num_threads()
            select_config(x, y, None, x[-1, :2], np.array([[0.0], [1.0]]), np.random.default_rng(0))
            seen.append(before - torch.get_num_threads())

        thread = threading.Thread(target=fit)
        thread.start()
        thread.join()
        assert seen == [0]  # the fitting thread's own setting is back
        assert {threads for _, threads in recorded} == {1}
        assert torch.get_num_threads() == 2  # and no other thread's changed
    finally:
        torch.set_num_threads(original)


@pytest.mark.parametrize("use_torch", [False, True])
def test_the_likelihood_is_the_gps_log_marginal_likelihood(use_torch, monkeypatch):
    monkeypatch.setattr(pb2_gp, "_use_torch", lambda n: use_torch)  # a small system in a driver without torch
    n = 150
    x, y = _observations(n, seed=1)
    xs = pb2_gp.normalize(x, np.vstack([x.max(axis=0), x.min(axis=0)]))
    ys = pb2_gp.standardize(y)
    theta = np.log(np.array([1.3, 0.4, 0.05]))
    k = pb2_gp.tv_squared_exp(xs, xs, theta) + 1e-10 * np.eye(n)
    sign, logdet = np.linalg.slogdet(k)
    expected = -0.5 * ys @ np.linalg.solve(k, ys) - 0.5 * logdet - 0.5 * n * np.log(2 * np.pi)
    assert sign > 0
    assert pb2_gp._lml(pb2_gp._distances(xs, xs), ys, theta) == pytest.approx(expected, rel=1e-6)
    assert pb2_gp.GP.fit(xs, ys, theta).log_marginal_likelihood(ys) == pytest.approx(expected, rel=1e-6)
