"""What a Tune callback's trial hooks see, and what a failed trial's ``error.txt`` says, as in Ray Tune 2.60.

The expected values (but the paused trial's, read from Ray's source) were read off Ray 2.60 running the same
experiments (``ray.init(num_cpus=2)``, the same trainable, stopper, scheduler and callback): which hooks come for a
trial, in which order, with which ``trial.status``; and the ``error.txt`` of a trial that failed once, and of one
that failed again after a retry.
"""

from __future__ import annotations

import os
import time

from muster import tune
from muster.tune.schedulers import FIFOScheduler


def _steps(config):
    kind = config["kind"]
    for i in (1, 2, 3):
        tune.report({"score": float(i)})
        if kind in ("error", "retry") and i == 2:
            raise RuntimeError(f"boom {kind}")
        if kind in ("stopper", "sched") and i == 2:
            time.sleep(60)  # stopped at this result: it reports no third one


class _StopsItsKind(tune.Stopper):
    def __call__(self, trial_id, result):
        return result["config"]["kind"] == "stopper" and result["training_iteration"] == 2

    def stop_all(self):
        return False


class _StopsSched(FIFOScheduler):
    def on_trial_result(self, controller, trial, result):
        return self.STOP if trial.config["kind"] == "sched" and result["training_iteration"] == 2 else self.CONTINUE


class _Hooks(tune.Callback):
    def __init__(self):
        self.calls: list[tuple] = []

    def _add(self, hook, trial, *more):
        self.calls.append((hook, trial.config["kind"], trial.status, *more))

    def on_trial_start(self, iteration, trials, trial, **info):
        self._add("start", trial)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self._add("result", trial, result["training_iteration"], result["done"])

    def on_trial_recover(self, iteration, trials, trial, **info):
        self._add("recover", trial)

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._add("complete", trial, trial.is_finished())

    def on_trial_error(self, iteration, trials, trial, **info):
        self._add("error", trial, trial.num_failures)


def _fit(storage, name, kinds, max_failures=0):
    hooks = _Hooks()
    grid = tune.Tuner(
        _steps, param_space={"kind": tune.grid_search(kinds)},
        tune_config=tune.TuneConfig(max_concurrent_trials=1, scheduler=_StopsSched()),
        run_config=tune.RunConfig(name=name, storage_path=storage, callbacks=[hooks], stop=_StopsItsKind(),
                                  verbose=0, failure_config=tune.FailureConfig(max_failures=max_failures)),
    ).fit()
    return grid, hooks.calls


def test_each_hook_sees_the_trial_status_rays_callbacks_see(storage):
    _, calls = _fit(storage, "statuses", ["plain", "stopper", "sched", "error"])
    # Ray 2.60: on_trial_complete comes from stop_trial before it sets TERMINATED (the trial is RUNNING,
    # not finished, in it); on_trial_error after _schedule_trial_stop set ERROR
    by_kind = {kind: [c for c in calls if c[1] == kind] for kind in ("plain", "stopper", "sched", "error")}
    assert by_kind["plain"] == [
        ("start", "plain", "PENDING"), ("result", "plain", "RUNNING", 1, False),
        ("result", "plain", "RUNNING", 2, False), ("result", "plain", "RUNNING", 3, False),
        ("complete", "plain", "RUNNING", False),
    ], calls
    for kind in ("stopper", "sched"):
        assert by_kind[kind] == [
            ("start", kind, "PENDING"), ("result", kind, "RUNNING", 1, False), ("result", kind, "RUNNING", 2, True),
            ("complete", kind, "RUNNING", False),
        ], calls
    assert by_kind["error"] == [
        ("start", "error", "PENDING"), ("result", "error", "RUNNING", 1, False),
        ("result", "error", "RUNNING", 2, False), ("error", "error", "ERROR", 1),
    ], calls


class _PauseTheFirst(FIFOScheduler):
    """Pauses ``kind="paused"`` at its first result and never resumes it (only PENDING trials start)."""

    def on_trial_result(self, controller, trial, result):
        return self.PAUSE if trial.config["kind"] == "paused" else self.CONTINUE

    def choose_trial_to_run(self, controller, candidates):
        return next((t for t in candidates if t.status == "PENDING"), None)


def test_a_paused_trial_ended_without_running_again_is_paused_in_on_trial_complete(storage):
    # as Ray 2.60's TuneController.stop_trial shows a paused trial it ends (HyperBand's), read from its source:
    # on_trial_complete comes before _schedule_trial_stop sets TERMINATED (Ray itself has no such stall)
    hooks = _Hooks()
    grid = tune.Tuner(
        _steps, param_space={"kind": tune.grid_search(["paused", "plain"])},
        tune_config=tune.TuneConfig(max_concurrent_trials=1, scheduler=_PauseTheFirst()),
        run_config=tune.RunConfig(name="paused", storage_path=storage, callbacks=[hooks], verbose=0),
    ).fit()
    assert [c for c in hooks.calls if c[0] == "complete"] == [
        ("complete", "plain", "RUNNING", False), ("complete", "paused", "PAUSED", False)], hooks.calls
    assert sorted(r.metrics["training_iteration"] for r in grid) == [1, 3]


def _error_txt(result):
    with open(os.path.join(result.path, "error.txt")) as f:
        return f.read()


def test_error_txt_holds_each_failure_once_as_ray(storage):
    # Ray 2.60 appends "Failure # N (occurred at ...)" and that failure's own traceback, once per failure: a
    # trial that fails once has one traceback, one that fails again after a retry two, one each
    once, _ = _fit(storage, "once", ["error"])
    text = _error_txt(next(iter(once)))
    assert text.startswith("Failure # 1 (occurred at ") and text.count("Failure # ") == 1, text
    assert text.count('raise RuntimeError(f"boom {kind}")') == 1 and text.count("RuntimeError: boom error") == 2
    assert "failed after 1 attempt(s) (FailureConfig(max_failures=0))" in text, text
    twice, calls = _fit(storage, "twice", ["retry"], max_failures=1)
    assert [c[0] for c in calls].count("recover") == 1
    text = _error_txt(next(iter(twice)))
    first, second = text.split("Failure # 2 (occurred at ")
    assert first.startswith("Failure # 1 (occurred at ") and text.count("Failure # ") == 2, text
    for part in (first, second):  # each failure's traceback, once
        assert part.count('raise RuntimeError(f"boom {kind}")') == 1, text
        assert part.count("Traceback (most recent call last)") == 1, text
    assert "failed after 2 attempt(s) (FailureConfig(max_failures=1))" in second, text
    error = next(iter(twice)).error
    assert isinstance(error, RuntimeError) and "boom retry" in str(error)  # error.pkl: the error itself
