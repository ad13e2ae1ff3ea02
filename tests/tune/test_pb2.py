"""PB2: its GP-UCB selector on synthetic data, its bounds checks, its decisions, and a real Tuner run."""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from concurrent.futures import Future

import _pbt_pair
import numpy as np
import pytest

from muster import tune
from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.train import Checkpoint
from muster.tune.schedulers import PB2
from muster.tune.schedulers.pb2_gp import GP, select_config
from muster.tune.schedulers.trial_scheduler import PendingConfig


def _synthetic(rng, bounds, gain, n=60):
    """Observations (time, reward before, *h) -> improvement ``gain(h)`` (+ noise), h uniform in bounds."""
    h = rng.uniform(bounds[0], bounds[1], (n, bounds.shape[1]))
    t = (np.arange(n) // 4 + 1).astype(float)
    before = rng.uniform(0, 1, n)
    x = np.column_stack([t, before, h])
    return x, gain(h) + 0.01 * rng.standard_normal(n)


def test_gp_interpolates_its_data_and_is_unsure_far_from_it():
    x = np.array([[0.0, 0.0, 0.1], [0.0, 0.0, 0.5], [0.0, 0.0, 0.9]])
    y = np.array([-1.0, 1.0, -1.0])
    gp = GP.fit(x, y, theta=np.log([1.0, 0.05, 0.1]))
    mean, var = gp.predict(np.vstack([x, [[0.0, 0.0, 0.3]]]))
    assert mean[:3] == pytest.approx(y, abs=1e-4) and var[:3] == pytest.approx(0.0, abs=1e-4)
    assert var[3] > 0.3  # between the points, uncertain
    # later in time the same points are less certain: the kernel forgets at rate epsilon
    _, later = gp.predict(np.array([[10.0, 0.0, 0.5]]))
    assert later[0] > 0.3


@pytest.mark.parametrize("peak", [2.0, 7.5])
def test_selector_picks_the_region_where_reward_improves_most(peak):
    rng = np.random.default_rng(0)
    bounds = np.array([[0.0], [10.0]])
    x, y = _synthetic(rng, bounds, lambda h: -((h[:, 0] - peak) ** 2))
    chosen = select_config(x, y, None, x[-1, :2], bounds, rng)
    assert chosen.shape == (1,) and abs(chosen[0] - peak) < 1.5


def test_selector_in_two_dimensions_with_other_units_per_axis():
    bounds = np.array([[1e-4, 10.0], [1e-1, 200.0]])  # lows, then highs
    best = np.array([0.08, 60.0])
    scale = bounds[1] - bounds[0]
    for seed in range(3):
        rng = np.random.default_rng(seed)
        x, y = _synthetic(rng, bounds, lambda h: -(((h - best) / scale) ** 2).sum(axis=1), n=150)
        chosen = select_config(x, y, None, x[-1, :2], bounds, rng)
        assert np.all(np.abs(chosen - best) / scale < 0.15), chosen


def test_selector_stays_in_bounds_and_spreads_a_batch():
    for seed in range(5):
        rng = np.random.default_rng(seed)
        bounds = np.array([[-3.0, 0.0], [5.0, 1.0]])
        x, y = _synthetic(rng, bounds, lambda h: rng.standard_normal(len(h)) * 5, n=40)
        chosen = select_config(x, y, None, x[-1, :2], bounds, rng)
        assert np.all(chosen >= bounds[0]) and np.all(chosen <= bounds[1])
    # a config another trial already runs at this step has less variance there: UCB goes elsewhere
    rng = np.random.default_rng(0)
    bounds = np.array([[0.0], [1.0]])
    x, y = _synthetic(rng, bounds, lambda h: np.zeros(len(h)), n=12)
    first = select_config(x, y, None, x[-1, :2], bounds, rng)
    second = select_config(x, y, first[None, :], x[-1, :2], bounds, rng)
    assert abs(second[0] - first[0]) > 0.05


def test_hyperparam_bounds_are_validated_and_errors_name_the_key():
    with pytest.raises(InvalidArgumentError, match=r"hyperparam_bounds=None.*\[0.0001, 0.1\]"):
        PB2(metric="m", mode="max")
    with pytest.raises(InvalidArgumentError, match=r"'lr' is \[0.1\]; give each hyperparameter a \[low, high\]"):
        PB2(hyperparam_bounds={"lr": [0.1]})
    with pytest.raises(InvalidArgumentError, match=r"'model/lr' is \(0.5, 0.1\), with low > high; write it as"):
        PB2(hyperparam_bounds={"model": {"lr": (0.5, 0.1)}})
    with pytest.raises(InvalidTypeError, match=r"'lr' is \['a', 1\]; low and high must be finite numbers"):
        PB2(hyperparam_bounds={"lr": ["a", 1]})
    with pytest.raises(InvalidArgumentError, match=r"PB2\(quantile_fraction=0.7\)"):
        PB2(hyperparam_bounds={"lr": [0, 1]}, quantile_fraction=0.7)
    assert tune.create_scheduler("pb2", hyperparam_bounds={"lr": [0, 1]}).__class__ is PB2
    from muster.tune.schedulers.pb2 import PB2 as FromModule

    assert FromModule is PB2


def _pb2_trainable(config):
    ckpt = tune.get_checkpoint()
    state = {"step": 0, "score": 0.0, "origin": tune.get_context().get_trial_id()}
    if ckpt:
        with ckpt.as_directory() as d:
            state = json.load(open(os.path.join(d, "state.json")))
    _pbt_pair.at_start(config["marks"], restored=bool(ckpt), weak=config["lr"] == 0.1)  # both run at once
    while True:  # at least one step after a restore, even from a donor that had finished
        state["step"] += 1
        state["score"] += 1 - (config["lr"] - 1.2) ** 2  # improves fastest at lr=1.2
        with tempfile.TemporaryDirectory() as d:
            json.dump(state, open(os.path.join(d, "state.json"), "w"))
            tune.report(dict(state, lr=config["lr"]), checkpoint=Checkpoint.from_directory(d))
        _pbt_pair.after_result(config["marks"], state["step"], strong=config["lr"] == 1.1)
        if state["step"] >= 8:
            break
        time.sleep(0.05)


def test_pb2_tuner_run_exploits_and_explores_within_bounds(storage, tmp_path):
    sched = PB2(time_attr="training_iteration", perturbation_interval=1, hyperparam_bounds={"lr": [0.0, 1.5]},
                quantile_fraction=0.5, seed=3)
    initial = [0.1, 1.1]  # the weak trial exploits the strong one; its second exploit is the bandit's
    grid = tune.Tuner(
        _pb2_trainable,
        param_space={"lr": tune.grid_search(initial), "marks": str(tmp_path)},
        tune_config=tune.TuneConfig(metric="score", mode="max", scheduler=sched),
        run_config=tune.RunConfig(storage_path=storage),
    ).fit()
    assert grid.num_errors == 0 and sched.num_perturbations >= 1
    weak, strong = sorted(grid, key=lambda r: r.metrics_dataframe["lr"].iloc[0])
    assert all(0.0 <= lr <= 1.5 for r in grid for lr in r.metrics_dataframe["lr"])
    # the weak trial went on from the strong one's checkpoint, with a new config within the bounds
    weak_df = weak.metrics_dataframe
    assert weak_df["origin"].iloc[-1] == strong.metrics_dataframe["origin"].iloc[0] != weak_df["origin"].iloc[0]
    assert weak.config["lr"] != 0.1 and 0.0 <= weak.config["lr"] <= 1.5
    assert weak_df["score"].iloc[-1] > 0  # it kept the strong trial's progress (its own score only fell)
    # every perturbation point was recorded for the bandit: both trials, at each step they reported
    assert {row[0] for row in sched.data} == {weak.metrics["trial_id"], strong.metrics["trial_id"]}
    # log_config (the default): each exploit is one line of pbt_global.txt in the experiment's folder,
    # [trial's tag, donor's tag, trial's iteration, donor's iteration, donor's config, new config]
    folder = grid.experiment_path
    lines = [json.loads(x) for x in open(os.path.join(folder, "pbt_global.txt")).read().splitlines()]
    assert len(lines) == sched.num_perturbations
    assert all(len(x) == 6 and isinstance(x[2], int) and 0.0 <= x[5]["lr"] <= 1.5 for x in lines), lines
    weak_id = weak.metrics_dataframe["trial_id"].iloc[0]
    own = [json.loads(x) for x in open(os.path.join(folder, f"pbt_policy_{weak_id}.txt")).read().splitlines()]
    assert own[-1] in lines and own[-1][0].startswith("0_lr=0.1") and own[-1][5]["lr"] == weak.config["lr"]


class _PauseWithSlowConfig(tune.schedulers.FIFOScheduler):
    """Pauses the trial once, at its first result, with a restart config that takes a second to work out
    (as PB2's GP fit does): nothing else runs or waits meanwhile, so the controller has only that trial."""

    def on_trial_result(self, controller, trial, result):
        if result["training_iteration"] != 1 or trial.config["x"] != 1:
            return self.CONTINUE
        future: Future = Future()
        threading.Timer(1.0, future.set_result, [{"x": 2}]).start()
        trial.restart_plan = (PendingConfig(future, dict), None, trial.trial_id)
        return self.PAUSE


def _count_to_three(config):
    for _ in range(3):
        tune.report({"x": config["x"]})


def test_a_paused_trial_waits_for_its_pending_config_even_when_it_is_the_only_trial(storage):
    """The last trial paused (search done, nothing running) was chosen to resume before its config was known,
    and the run failed its 'PendingConfig is settled' check (seen in a fresh-clone CI run of PB2)."""
    sched = _PauseWithSlowConfig()
    grid = tune.Tuner(_count_to_three, param_space={"x": 1}, tune_config=tune.TuneConfig(scheduler=sched),
                      run_config=tune.RunConfig(storage_path=storage)).fit()
    assert grid.num_errors == 0
    xs = list(grid[0].metrics_dataframe["x"])  # (how many 1s were reported before the pause landed varies)
    assert xs[0] == 1 and xs[-3:] == [2, 2, 2] and grid[0].config == {"x": 2}  # restarted with the worked-out config
