"""Differences from Ray Tune 2.60 that were fixed: what ``training_iteration`` counts after a
trial restarts (PBT exploit, a pause without a checkpoint), where ``hostname``/``node_ip`` come
from, the ``_`` keys schedulers see, and the trial folders' names."""

from __future__ import annotations

import json
import re
import os
import tempfile
import time
from typing import Any

from muster import tune
from muster.train import Checkpoint
from muster.tune.schedulers import FIFOScheduler, PopulationBasedTraining
from muster.tune.trial import Trial


class _Seen(FIFOScheduler):
    """FIFO that records every result it is shown, per trial; pauses each trial once at ``pause_at``."""

    def __init__(self, pause_at: int | None = None):
        super().__init__()
        self.seen: dict[str, list[dict[str, Any]]] = {}
        self.pause_at, self.paused = pause_at, set()

    def on_trial_result(self, controller: Any, trial: Any, result: dict[str, Any]) -> str:
        self.seen.setdefault(trial.trial_id, []).append(dict(result))
        if self.pause_at is not None and result["training_iteration"] == self.pause_at and \
                trial.trial_id not in self.paused:
            self.paused.add(trial.trial_id)
            return self.PAUSE
        return self.CONTINUE


def _restored_step() -> int:
    """The step of the checkpoint the trial restored (0 without one)."""
    ckpt = tune.get_checkpoint()
    if not ckpt:
        return 0
    with ckpt.as_directory() as d:
        return int(json.load(open(os.path.join(d, "s.json")))["step"])


def _report_step(step: int, **metrics: Any) -> None:
    with tempfile.TemporaryDirectory() as d:
        json.dump({"step": step}, open(os.path.join(d, "s.json"), "w"))
        tune.report({"step": step, **metrics}, checkpoint=Checkpoint.from_directory(d))


def _stepper(config):
    marks = config["marks"]
    step = _restored_step()
    if step:  # an exploit restarted this trial from its donor's checkpoint
        open(os.path.join(marks, "restored"), "w").close()
    elif config["lr"] < 0.1:  # the weak trial starts once the strong one has reported: on a loaded machine
        _wait_for(os.path.join(marks, "strong"))  # trials start seconds apart, more than a whole trial takes
    while step < 8:
        step += 1
        _report_step(step, score=config["lr"] * step)
        if config["lr"] == 1.0:
            open(os.path.join(marks, "strong"), "w").close()
            if step == 4:  # the donor waits, steps ahead, until the weak trial has exploited it
                _wait_for(os.path.join(marks, "restored"))
        time.sleep(0.15 if config["lr"] < 0.1 else 0.03)  # the weak trial lags: its donor is steps ahead


def _wait_for(path: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)


class _PBTSeen(PopulationBasedTraining):
    seen: dict[str, list[dict[str, Any]]]

    def on_trial_result(self, controller: Any, trial: Any, result: dict[str, Any]) -> str:
        self.seen.setdefault(trial.trial_id, []).append(dict(result))
        return super().on_trial_result(controller, trial, result)


def test_pbt_exploit_continues_from_the_donor_checkpoints_iteration(storage, tmp_path):
    # Ray: the exploiting trial restores the donor's checkpoint, and its training_iteration goes on
    # from that checkpoint's (here, always equal to the step the trainable counts)
    sched = _PBTSeen(time_attr="training_iteration", perturbation_interval=2,
                     hyperparam_mutations={"lr": tune.uniform(0.5, 1.5)}, quantile_fraction=0.5, seed=1)
    sched.seen = {}
    grid = tune.Tuner(
        _stepper, param_space={"lr": tune.grid_search([0.01, 1.0]), "marks": str(tmp_path)},
        tune_config=tune.TuneConfig(metric="score", mode="max", scheduler=sched),
        run_config=tune.RunConfig(storage_path=storage),
    ).fit()
    assert grid.num_errors == 0 and sched.num_perturbations >= 1
    for r in grid:
        df = r.metrics_dataframe
        assert list(df["training_iteration"]) == list(df["step"])
        assert r.metrics["training_iteration"] == r.metrics["step"]
    for results in sched.seen.values():
        assert all(x["training_iteration"] == x["step"] for x in results)
    weak = min(grid, key=lambda r: r.metrics_dataframe["score"].iloc[0])
    assert (weak.metrics_dataframe["iterations_since_restore"] == 1).sum() >= 2  # it was restarted


def _no_checkpoints(config):
    for work in range(1, 5):
        tune.report({"work": work})
        time.sleep(0.02)


def test_a_trial_restarted_without_a_checkpoint_counts_from_one_again(storage):
    # Ray: a paused trial with no checkpoint restarts its trainable from scratch, iteration 1 again
    sched = _Seen(pause_at=2)
    grid = tune.Tuner(
        _no_checkpoints, param_space={"x": tune.grid_search([1])},
        tune_config=tune.TuneConfig(scheduler=sched), run_config=tune.RunConfig(storage_path=storage),
    ).fit()
    (r,) = list(grid)
    df = r.metrics_dataframe
    assert list(df["training_iteration"]) == list(df["work"]) == [1, 2, 1, 2, 3, 4]
    assert [x["training_iteration"] for x in next(iter(sched.seen.values()))] == [1, 2, 1, 2, 3, 4]
    assert r.metrics["training_iteration"] == 4 and r.metrics["work"] == 4
    # the controller's bookkeeping (the round it kept for the restarted stretch) is in no frame, as on Ray
    frames = [df, grid.get_dataframe(), r.all_metrics_dataframe]
    assert not any(c in f.columns for f in frames for c in ("_round", "_shown_iteration"))
    assert not {"_rank", "_attempt"} & (set(df.columns) | set(frames[1].columns))


def _late_checkpoint(config):
    for work in range(1, 5):
        if work == 3:
            with tempfile.TemporaryDirectory() as d:
                open(os.path.join(d, "w"), "w").write(str(work))
                tune.report({"work": work}, checkpoint=Checkpoint.from_directory(d))
        else:
            tune.report({"work": work})


def test_checkpoints_of_a_restarted_trial_keep_distinct_folders(storage):
    # the first stretch checkpoints at its iteration 3, then is paused at 4 and restored from it
    # (iterations 4, 5, ... again): no checkpoint folder is written twice under one name
    sched = _Seen(pause_at=4)
    grid = tune.Tuner(
        _late_checkpoint, param_space={"x": tune.grid_search([1])},
        tune_config=tune.TuneConfig(scheduler=sched), run_config=tune.RunConfig(storage_path=storage),
    ).fit()
    (r,) = list(grid)
    df = r.metrics_dataframe
    # restored from iteration 3's checkpoint, the function runs from scratch: Ray counts on from 3
    assert list(df["training_iteration"]) == [1, 2, 3, 4, 4, 5, 6, 7]
    names = [n for n in df["checkpoint_dir_name"] if isinstance(n, str)]
    assert len(names) == 2 and len(set(names)) == 2
    assert r.checkpoint is not None and open(os.path.join(r.checkpoint.path, "w")).read() == "3"


def _where(config):
    import socket

    from muster.util import get_node_ip_address

    tune.report({"host_here": socket.gethostname(), "ip_here": get_node_ip_address(), "_private": 7})


def test_hostname_and_node_ip_are_the_trial_workers(storage, monkeypatch):
    # the driver's own values are made different, so the test tells whose the results carry
    # (on one machine they are the same host; on a cluster they differ)
    from muster.tune import trial as trial_mod

    monkeypatch.setattr(trial_mod, "_HOST", "the-driver")
    monkeypatch.setattr(trial_mod, "_node_ip", lambda: "203.0.113.9")
    grid = tune.Tuner(_where, run_config=tune.RunConfig(storage_path=storage)).fit()
    (r,) = list(grid)
    assert r.metrics["hostname"] == r.metrics["host_here"] != "the-driver"
    assert r.metrics["node_ip"] == r.metrics["ip_here"] != "203.0.113.9"


def _where_in_train(config):
    import muster
    from muster import train
    from muster.util import get_node_ip_address

    train.report({"ip_here": get_node_ip_address(), "node_here": muster.nodes()[0]["NodeManagerAddress"]})


def test_one_node_ip_in_tune_results_train_workers_and_the_runtime(storage, monkeypatch):
    # Ray reports the node's address everywhere (its get_node_ip_address()); a cluster engine records
    # it for each worker (MUSTER_NODE_IP), a test address here, which every helper must then give
    import muster
    from muster.train import ScalingConfig
    from muster.train.torch import TorchTrainer
    from muster.util import get_node_ip_address

    monkeypatch.setenv("MUSTER_NODE_IP", "203.0.113.7")
    assert get_node_ip_address() == muster.nodes()[0]["NodeManagerAddress"] == "203.0.113.7"
    trainer = TorchTrainer(_where_in_train, scaling_config=ScalingConfig(num_workers=1))
    grid = tune.Tuner(trainer, run_config=tune.RunConfig(storage_path=storage)).fit()
    assert grid.num_errors == 0, grid.errors
    m = grid[0].metrics
    assert m["node_ip"] == m["ip_here"] == m["node_here"] == "203.0.113.7"


def test_schedulers_see_the_results_own_underscore_keys(storage):
    # Ray hands the scheduler (and searchers, callbacks) the whole result; muster's bookkeeping
    # (_rank, _attempt) is not part of it
    sched = _Seen()
    grid = tune.Tuner(_where, tune_config=tune.TuneConfig(scheduler=sched),
                      run_config=tune.RunConfig(storage_path=storage)).fit()
    (seen,) = sched.seen.values()
    assert seen[0]["_private"] == 7 and "_rank" not in seen[0] and "_attempt" not in seen[0]
    assert grid[0].metrics["_private"] == 7


def _named(config):
    tune.report({"dir": tune.get_context().get_trial_dir()})


def test_trial_folders_are_named_as_rays(storage):
    grid = tune.Tuner(
        _named, param_space={"lr": tune.grid_search([0.01]), "opt": tune.grid_search(["a/b c"])},
        run_config=tune.RunConfig(storage_path=storage, name="exp"),
    ).fit()
    (r,) = list(grid)
    name = os.path.basename(r.path)
    # <trainable>_<trial_id>_<experiment tag>_<date>; "/", " " and "," (Ray keeps the comma) become "_"
    assert re.fullmatch(rf"named_{r.metrics['trial_id']}_0_lr=0\.0100_opt=a_b_c_\d{{4}}-\d\d-\d\d_\d\d-\d\d-\d\d",
                        name), name
    assert r.metrics["dir"] == r.path and os.path.isdir(r.path)


def _fails_once(config):
    step = _restored_step()
    while step < 4:
        step += 1
        if step == 3 and not os.path.exists(config["marker"]):
            open(config["marker"], "w").close()
            raise RuntimeError("once")
        _report_step(step)


def test_an_experiment_with_folders_named_the_old_way_still_restores(storage, tmp_path):
    # experiments written before trial folders had Ray's names: <trainable>_<trial_id>
    marker = str(tmp_path / "failed")
    grid = tune.Tuner(_fails_once, param_space={"marker": marker},
                      run_config=tune.RunConfig(storage_path=storage, name="old")).fit()
    assert grid.num_errors == 1
    exp = os.path.join(storage, "old")
    state_file = os.path.join(exp, "experiment_state.json")
    state = json.load(open(state_file))
    (t,) = state["trials"]
    old = os.path.join(exp, t["trial_name"])
    os.rename(t["path"], old)
    t["path"] = old
    json.dump(state, open(state_file, "w"))
    grid = tune.Tuner.restore(exp, _fails_once, resume_errored=True).fit()
    (r,) = list(grid)
    assert r.error is None and r.path == old and r.metrics["step"] == 4
    assert list(r.metrics_dataframe["step"]) == [1, 2, 3, 4]
    assert [n for n in os.listdir(exp) if n.startswith("fails_once")] == [t["trial_name"]]  # no new folder



def test_a_trial_being_stopped_for_good_is_not_live_for_schedulers():
    # Ray's pbt_example (stop at iteration 10): a trial whose result met the stop criteria is TERMINATED
    # at once in Ray, so PBT's quantiles leave it out; here its process still ends, and PBT cloned its
    # iteration-10 checkpoint into a trial at its 5th, which then reported an 11th
    from types import SimpleNamespace

    from muster.tune.trial import PAUSED, RUNNING, TERMINATED
    from muster.tune.tune_controller import TuneController

    trials = [Trial(f"t{i}", f"t{i}", {}, f"/tmp/t{i}", {"CPU": 1.0}) for i in range(3)]
    for trial in trials:
        trial.status = RUNNING
    trials[0].ending_as, trials[1].ending_as = TERMINATED, PAUSED  # stopping for good; pausing (PBT, HyperBand)
    assert TuneController.live_trials(SimpleNamespace(trials=trials)) == trials[1:]


class _SeenIterations(tune.Callback):
    def __init__(self):
        self.iterations: list[Any] = []
        self.done: list[bool] = []

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.iterations.append(result["training_iteration"])
        self.done.append(result["done"])


def _own_iterations(config):
    for i in range(1, 5):
        tune.report({"loss": 1.0 / i, "training_iteration": 10 * i})


def test_a_results_own_training_iteration_is_kept_as_in_ray(storage):
    # Ray's Trainable.train fills training_iteration in only where the result lacks it: callbacks, stop
    # criteria, the result and the loggers' files all see the function's own count (muster showed 1, 2, 3)
    import csv

    from muster.tune.logger import CSVLoggerCallback, JsonLoggerCallback

    seen = _SeenIterations()
    grid = tune.Tuner(
        _own_iterations, param_space={"x": 1},
        run_config=tune.RunConfig(storage_path=storage, stop={"training_iteration": 30}, verbose=0,
                                  callbacks=[seen, CSVLoggerCallback(), JsonLoggerCallback()]),
    ).fit()
    (r,) = list(grid)
    # (a result reported while the trial is being stopped still reaches callbacks: muster keeps every result)
    assert r.error is None and seen.iterations[:3] == [10, 20, 30] and seen.iterations[3:] in ([], [40])
    assert r.metrics["training_iteration"] == 30 and r.metrics["loss"] == 1.0 / 3
    assert list(r.metrics_dataframe["training_iteration"])[:3] == [10, 20, 30]
    with open(os.path.join(r.path, CSVLoggerCallback.FILE)) as f:
        rows = list(csv.DictReader(f))
    assert [int(row["training_iteration"]) for row in rows][:3] == [10, 20, 30]
    with open(os.path.join(r.path, JsonLoggerCallback.FILE)) as f:
        lines = [json.loads(line) for line in f]
    assert [line["training_iteration"] for line in lines][:3] == [10, 20, 30]
    # the files hold Ray's result rows: Tune's keys, none of the controller's (_rank, _attempt, _own_run_keys...)
    internal = {"_rank", "_attempt", "_round", "_own_run_keys"}
    assert not internal & set(rows[0]) and all(not internal & set(line) for line in lines)
    assert {"trial_id", "time_total_s", "iterations_since_restore", "checkpoint_dir_name"} <= set(rows[0])
    assert not [k for k in rows[0] if k.startswith("config")] and lines[0]["config"] == {"x": 1}  # as Ray's
    # Ray's stopper decides before callbacks and loggers see a result: the one it stops the trial on says
    # done=True to both (Ray 2.60 logs done False, False, True for this experiment; muster showed False)
    assert seen.done[:3] == [False, False, True]
    assert [line["done"] for line in lines][:3] == [False, False, True]
    assert [row["done"] for row in rows][:3] == ["False", "False", "True"]
