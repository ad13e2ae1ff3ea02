"""The order in which a Tune result reaches the stopper, scheduler, searcher, callbacks and loggers,
as Ray Tune 2.60's controller hands it on (``TuneController._process_trial_result``): the stopper, or
else the scheduler, decides first; a result that stops the trial is marked ``done=True``; the searcher
sees it only where the trial goes on; the callbacks (loggers last) get it after all that."""

from __future__ import annotations

import json
import os
import time

import pandas as pd

from muster import tune
from muster.tune import session as tune_session
from muster.tune.logger import JsonLoggerCallback
from muster.tune.schedulers import FIFOScheduler
from muster.tune.search import BasicVariantGenerator


def _three(config):
    for i in range(1, 4):
        tune.report({"score": float(i)})


class _Log:
    def __init__(self):
        self.calls: list[tuple[str, int, bool]] = []

    def add(self, who, result):
        self.calls.append((who, result["training_iteration"], result["done"]))


class _StopAtTwo(FIFOScheduler):
    def __init__(self, log):
        super().__init__()
        self.log = log

    def on_trial_result(self, controller, trial, result):
        self.log.add("scheduler", result)
        return self.STOP if result["training_iteration"] == 2 else self.CONTINUE


class _Searcher(BasicVariantGenerator):
    def __init__(self, log):
        super().__init__()
        self.log = log

    def on_trial_result(self, trial_id, result):
        self.log.add("searcher", result)


class _Callback(tune.Callback):
    def __init__(self, log):
        self.log = log

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.log.add("callback", result)


def test_the_scheduler_decides_before_the_searcher_callbacks_and_loggers_see_the_result(storage):
    log = _Log()
    grid = tune.Tuner(
        _three, param_space={"x": 1},
        tune_config=tune.TuneConfig(scheduler=_StopAtTwo(log), search_alg=_Searcher(log)),
        run_config=tune.RunConfig(storage_path=storage, name="order", verbose=0,
                                  callbacks=[_Callback(log), JsonLoggerCallback()]),
    ).fit()
    (r,) = list(grid)
    assert r.error is None and r.metrics["training_iteration"] == 2 and r.metrics["done"] is True
    # (a result reported while the trial is being stopped still reaches the callbacks, as muster keeps it)
    assert log.calls[:5] == [
        ("scheduler", 1, False), ("searcher", 1, False), ("callback", 1, False),
        ("scheduler", 2, False), ("callback", 2, True),  # Ray: no searcher once the scheduler stops it
    ]
    assert [c for c in log.calls[5:] if c[0] != "callback"] == []
    with open(os.path.join(r.path, JsonLoggerCallback.FILE)) as f:
        lines = [json.loads(line) for line in f]
    assert [(line["training_iteration"], line["done"]) for line in lines][:2] == [(1, False), (2, True)]


def _long(config):
    for i in range(1, 60):
        tune.report({"score": float(i)})
        time.sleep(0.05)


class _PauseTheFirstOnce(FIFOScheduler):
    """Pauses x=0 at its first result and never resumes it (only PENDING trials start)."""

    def on_trial_result(self, controller, trial, result):
        return self.PAUSE if trial.config["x"] == 0 and result["training_iteration"] == 1 else self.CONTINUE

    def choose_trial_to_run(self, controller, candidates):
        return next((t for t in candidates if t.status == "PENDING"), None)


class _StopAllAtThree(tune.Stopper):
    """Stops the experiment once trial x=1 is at its third result and trial x=0 has had one taken too (under
    load, x=0's worker could start late: stopped before any of its results was taken, it has none, as on Ray)."""

    def __init__(self):
        self.results = 0
        self.seen: set[int] = set()

    def __call__(self, trial_id, result):
        self.seen.add(result["config"]["x"])
        self.results += result["training_iteration"] >= 3 and result["config"]["x"] == 1
        return False

    def stop_all(self):
        return self.results > 0 and self.seen == {0, 1}


class _Ends(tune.Callback):
    def __init__(self):
        self.heard: list[tuple[str, int, str]] = []

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.heard.append(("complete", trial.config["x"], trial.status))

    def on_trial_error(self, iteration, trials, trial, **info):
        self.heard.append(("error", trial.config["x"], trial.status))

    def on_experiment_end(self, trials, **info):
        self.heard.extend(("end", t.config["x"], t.status) for t in trials)


def test_stopping_the_experiment_ends_a_paused_trial_without_on_trial_complete_as_ray(storage):
    # Ray 2.60's TuneController._stop_experiment_if_needed stops every unfinished trial with
    # _schedule_trial_stop: TERMINATED, and no on_trial_complete for a paused or pending one
    ends = _Ends()
    tune.Tuner(
        _long, param_space={"x": tune.grid_search([0, 1])},
        tune_config=tune.TuneConfig(scheduler=_PauseTheFirstOnce(), max_concurrent_trials=1),
        run_config=tune.RunConfig(storage_path=storage, verbose=0, stop=_StopAllAtThree(), callbacks=[ends]),
    ).fit()
    assert ("end", 0, "TERMINATED") in ends.heard and ("end", 1, "TERMINATED") in ends.heard, ends.heard
    assert not [h for h in ends.heard if h[:2] == ("complete", 0)], ends.heard


def _longer(config):
    for i in range(1, 600):  # (stopped long before its end)
        tune.report({"score": float(i)})
        time.sleep(0.05)


class _ToldScheduler(FIFOScheduler):
    def __init__(self):
        super().__init__()
        self.completed: list[int] = []

    def on_trial_complete(self, controller, trial, result):
        self.completed.append(trial.config["x"])


class _ToldSearcher(BasicVariantGenerator):
    def __init__(self):
        super().__init__()
        self.completed: list[str] = []

    def on_trial_complete(self, trial_id, result=None, error=False):
        super().on_trial_complete(trial_id, result=result, error=error)
        self.completed.append(trial_id)


def test_stopping_the_experiment_ends_running_trials_without_on_trial_complete_as_ray(storage):
    # Ray 2.60, the same experiment under ray.init(num_cpus=2): stop_all() while both trials run ends
    # each TERMINATED (_schedule_trial_stop), with no on_trial_complete or on_trial_error for the
    # callbacks, the scheduler or the searcher, and each trial's last result says done=False
    ends, scheduler, searcher = _Ends(), _ToldScheduler(), _ToldSearcher()
    grid = tune.Tuner(
        _longer, param_space={"x": tune.grid_search([0, 1])},
        tune_config=tune.TuneConfig(scheduler=scheduler, search_alg=searcher),
        run_config=tune.RunConfig(storage_path=storage, name="stop_running", verbose=0, stop=_StopAllAtThree(),
                                  callbacks=[ends]),
    ).fit()
    assert sorted(ends.heard) == [("end", 0, "TERMINATED"), ("end", 1, "TERMINATED")], ends.heard
    assert scheduler.completed == [] and searcher.completed == []
    assert grid.num_errors == 0 and len(grid) == 2
    for r in grid:
        assert r.metrics["done"] is False and r.metrics["training_iteration"] < 599, r.metrics
    # restored, the experiment says the same: both TERMINATED, neither done
    restored = tune.Tuner.restore(grid.experiment_path, _longer).get_results()
    assert sorted(r.metrics["done"] for r in restored) == [False, False]


def _fast(config):
    for i in range(1, 2000):  # (stopped long before its end)
        tune.report({"score": float(i)})
        time.sleep(0.002)


class _StopAllAt(tune.Stopper):
    def __init__(self, at):
        self.at, self.stopped = at, False

    def __call__(self, trial_id, result):
        self.stopped = self.stopped or result["training_iteration"] >= self.at
        return False

    def stop_all(self):
        return self.stopped


class _SlowResults(tune.Callback):
    """Hears each result slowly, so that the trial reports many more while the controller is busy."""

    def __init__(self, stopper):
        self.stopper, self.before, self.after = stopper, [], []

    def on_trial_result(self, iteration, trials, trial, result, **info):
        (self.after if self.stopper.stopped and self.before[-1:] == [3] else self.before).append(
            result["training_iteration"])
        time.sleep(0.05)


def test_results_reported_after_the_experiment_was_stopped_are_dropped_as_ray(storage):
    # Ray 2.60 (ray.init(num_cpus=2), a stopper whose stop_all() turns true at a result): the results
    # the trial reports after it are dropped with its actor's futures: no callback or logger gets them
    stopper = _StopAllAt(3)
    slow = _SlowResults(stopper)
    grid = tune.Tuner(
        _fast, param_space={"x": 1},
        run_config=tune.RunConfig(storage_path=storage, name="dropped", verbose=0, stop=stopper,
                                  callbacks=[slow, JsonLoggerCallback()]),
    ).fit()
    (r,) = list(grid)
    assert slow.before == [1, 2, 3] and slow.after == []
    with open(os.path.join(r.path, JsonLoggerCallback.FILE)) as f:
        assert [json.loads(line)["training_iteration"] for line in f] == [1, 2, 3]
    assert r.metrics["training_iteration"] == 3 and r.metrics["done"] is False
    # as Ray's: the trial's function waits in tune.report for each decision, so it reported nothing after it
    assert list(r.metrics_dataframe["training_iteration"]) == [1, 2, 3]


def _wait_for(path):
    while not os.path.exists(path):
        time.sleep(0.01)


def _second_reports_late(config):
    if config["x"] == 0:
        _wait_for(config["mark"] + ".started")
        tune.report({"score": 0.0})
    else:  # reports only once the controller is busy with the other's result, which stops the experiment
        open(config["mark"] + ".started", "w").close()
        _wait_for(config["mark"])
        # tune.report hands the result to the trial's run (which records it) and then waits for the
        # controller's decision: say when it waits, so that the controller is held until then
        waits = tune_session._await_decision

        def say_it_waits():
            open(config["mark"] + ".reported", "w").close()
            waits()

        tune_session._await_decision = say_it_waits
        for i in range(3):
            tune.report({"score": 10.0 + i})
    time.sleep(30)


class _BusyOnTheFirst(tune.Callback):
    """Holds the controller on trial 0's result (which stops the experiment) until trial 1's run has
    recorded its report and the trial waits for the decision: that result then sits in the controller's
    queue, never taken. (A fixed 1 s sleep stood in for this handshake; on a loaded CI machine trial 1
    could still be polling for the mark, or sending its report, when the sleep ended, so the experiment
    stopped before its run recorded anything and its metrics_dataframe was empty.)"""

    def __init__(self):
        self.other_reported = False

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if trial.config["x"] == 0:
            open(trial.config["mark"], "w").close()
            deadline = time.monotonic() + 60
            while not os.path.exists(trial.config["mark"] + ".reported") and time.monotonic() < deadline:
                time.sleep(0.01)
            self.other_reported = os.path.exists(trial.config["mark"] + ".reported")


def test_a_trial_whose_results_the_stopped_experiment_never_took_has_none_as_ray(storage, tmp_path):
    # Ray 2.60 (ray.init(num_cpus=2), the same experiment): the experiment stops before the controller
    # took a result of trial 1, so its metrics have none (only its id and the actor's host fields),
    # it has no metrics_dataframe rows, no get_dataframe row, and get_best_result picks trial 0
    busy = _BusyOnTheFirst()
    grid = tune.Tuner(
        _second_reports_late, param_space={"x": tune.grid_search([0, 1]), "mark": str(tmp_path / "mark")},
        tune_config=tune.TuneConfig(max_concurrent_trials=2),
        run_config=tune.RunConfig(storage_path=storage, name="untaken", verbose=0, stop=_StopAllAt(1),
                                  callbacks=[busy]),
    ).fit()
    assert busy.other_reported, "trial 1 never reported while the controller was held on trial 0's result"
    first, late = sorted(grid, key=lambda r: r.config["x"])
    assert first.metrics["score"] == 0.0 and first.metrics["done"] is False
    assert "score" not in late.metrics and "training_iteration" not in late.metrics, late.metrics
    assert late.metrics["trial_id"] in late.path
    # Ray's has no row (nor result.checkpoint, a checkpoint it reported staying unregistered in its folder);
    # muster's run recorded the one result the trial reported before it waited for the decision, and would
    # keep a checkpoint committed with it. The trial reported no more: its function waits in tune.report.
    assert list(late.metrics_dataframe["score"]) == [10.0]
    assert grid.get_best_result("score", "max").config["x"] == 0
    df = grid.get_dataframe().set_index("config/x")
    assert df.loc[0, "score"] == 0.0 and pd.isna(df.loc[1, "score"])
    restored = tune.Tuner.restore(grid.experiment_path, _second_reports_late).get_results()
    assert restored.get_best_result("score", "max").config["x"] == 0
    assert sorted("score" in r.metrics for r in restored) == [False, True]


def _fails_with_the_other(config):
    tune.report({"score": 1.0})
    # both raise at once, and only once the controller has taken both results: the two trials' messages reach
    # it on separate channels, so a trial that raised as soon as the other had *sent* its result could have its
    # error handled first, and the stop would then end the other trial before its result
    _wait_for(os.path.join(config["dir"], "both results heard"))
    raise ValueError(f"trial {config['x']} failed")


class _SlowFirstResult(_Ends):
    """Holds the controller up once it has both trials' results, so that both failures wait in its queue."""

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.heard.append(("result", trial.config["x"], trial.status))
        if len(self.heard) == 2:
            open(os.path.join(trial.config["dir"], "both results heard"), "w").close()
            time.sleep(2.0)


def test_the_error_of_a_trial_the_experiments_stop_ended_is_ignored_as_ray(storage, tmp_path):
    # Ray 2.60 (ray.init(num_cpus=2), FailureConfig(fail_fast=True), two trials that raise at once): the
    # first error stops the experiment; the other trial ends TERMINATED, with no error and no on_trial_error
    ends = _SlowFirstResult()
    grid = tune.Tuner(
        _fails_with_the_other, param_space={"x": tune.grid_search([0, 1]), "dir": str(tmp_path)},
        run_config=tune.RunConfig(storage_path=storage, name="ff", verbose=0, callbacks=[ends],
                                  failure_config=tune.FailureConfig(fail_fast=True)),
    ).fit()
    assert grid.num_errors == 1, [r.error for r in grid]
    (failed,) = [r for r in grid if r.error is not None]
    (stopped,) = [r for r in grid if r.error is None]
    assert isinstance(failed.error, ValueError) and stopped.metrics["done"] is False
    x = failed.config["x"]
    assert [h for h in ends.heard if h[0] in ("error", "complete")] == [("error", x, "ERROR")]
    assert sorted(h for h in ends.heard if h[0] == "end") == sorted(
        [("end", x, "ERROR"), ("end", 1 - x, "TERMINATED")])
    assert not os.path.exists(os.path.join(stopped.path, "error.pkl"))
    restored = tune.Tuner.restore(grid.experiment_path, _fails_with_the_other).get_results()
    assert restored.num_errors == 1
