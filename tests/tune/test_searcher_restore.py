"""A search algorithm's state survives ``Tuner.restore``: the resumed search goes on from what it learned."""

from __future__ import annotations

import logging
import os
import pathlib
import re
import signal

import pytest

from muster import tune
from muster.tune.search import ConcurrencyLimiter, Repeater, Searcher


def _score(config):
    tune.report({"loss": (config["x"] - 0.3) ** 2})


class _InterruptOnce(tune.Callback):
    """Ctrl-C, as a user would press it, once ``after`` trials completed (once per marker file)."""

    def __init__(self, after: int, marker: str):
        self.after, self.marker, self.done = after, marker, 0

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.done += 1
        if self.done == self.after and not os.path.exists(self.marker):
            pathlib.Path(self.marker).touch()
            os.kill(os.getpid(), signal.SIGINT)


def _interrupt_then_restore(storage, tmp_path, search_alg, num_samples=6):
    run_config = tune.RunConfig(name="exp", storage_path=storage, verbose=0,
                                callbacks=[_InterruptOnce(3, str(tmp_path / "interrupted"))])
    tuner = tune.Tuner(
        _score, param_space={"x": tune.uniform(-2.0, 2.0)},
        tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=num_samples, search_alg=search_alg),
        run_config=run_config,
    )
    tuner.fit()  # Ctrl-C ends fit(), which returns the trials so far
    assert tuner._interrupted_by == "SIGINT"
    restored = tune.Tuner.restore(os.path.join(storage, "exp"), trainable=_score)
    return restored, restored.fit()


def test_optuna_study_is_restored_with_every_trial_it_was_told(storage, tmp_path):
    pytest.importorskip("optuna")  # the `tune` extra
    from muster.tune.search import OptunaSearch

    restored, grid = _interrupt_then_restore(storage, tmp_path, ConcurrencyLimiter(OptunaSearch(seed=0), 1))
    assert len(grid) == 6 and grid.num_errors == 0
    limiter = restored.tune_config.search_alg
    study = limiter.searcher._study
    # before, the restored search began a new, empty study: it knew only the trials run after the restore
    assert len([t for t in study.trials if t.state.name == "COMPLETE"]) == 6, study.trials
    assert not limiter._live and not limiter.searcher._live


class _Counting(Searcher):
    """Suggests x = 0, 1, 2, ... and remembers every loss it was told."""

    def __init__(self):
        super().__init__()
        self.made, self.told = 0, []

    def suggest(self, trial_id):
        self.made += 1
        return {"x": float(self.made - 1), "told_before": len(self.told)}

    def on_trial_complete(self, trial_id, result=None, error=False):
        self.told.append(result["loss"])

    def save(self, checkpoint_path):
        pathlib.Path(checkpoint_path).write_text(f"{self.made} {' '.join(map(str, self.told))}")

    def restore(self, checkpoint_path):
        made, *told = pathlib.Path(checkpoint_path).read_text().split()
        self.made, self.told = int(made), [float(v) for v in told]


def test_a_users_searcher_gets_its_saved_state_back(storage, tmp_path):
    restored, grid = _interrupt_then_restore(storage, tmp_path, ConcurrencyLimiter(_Counting(), 1))
    xs = sorted(r.config["x"] for r in grid)
    assert xs == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0], xs  # before: 0, 1, 2 again after the restore
    assert len(restored.tune_config.search_alg.searcher.told) == 6
    later = [r.config["told_before"] for r in grid if r.config["x"] >= 3]
    assert later and min(later) >= 3, later


def test_a_repeater_keeps_its_groups_and_scores_across_a_restore(storage, tmp_path):
    # interrupted after 3 trials ended, the second configuration's repeats part-way: the restored
    # Repeater still has the groups and the scores they collected, and tells the wrapped searcher
    # each configuration's mean once (before, a restored Repeater knew no group: nothing was told)
    restored, grid = _interrupt_then_restore(storage, tmp_path, ConcurrencyLimiter(Repeater(_Counting(), 2), 2))
    assert sorted((r.config["x"], r.config["__trial_index__"]) for r in grid) == [
        (0.0, 0), (0.0, 1), (1.0, 0), (1.0, 1), (2.0, 0), (2.0, 1)]
    told = restored.tune_config.search_alg.searcher.searcher.told
    assert sorted(told) == pytest.approx([0.09, 0.49, 2.89]), told


def test_a_searcher_without_save_says_the_restored_search_starts_afresh(storage, tmp_path, caplog):
    class Forgetful(_Counting):
        save = Searcher.save
        restore = Searcher.restore

    with caplog.at_level(logging.WARNING, logger="muster.tune.tuner"):
        _, grid = _interrupt_then_restore(storage, tmp_path, Forgetful(), num_samples=4)
    assert len(grid) == 4
    assert "Forgetful keeps no state" in caplog.text, caplog.text
    assert re.search(r"learned from the [34] finished trials", caplog.text), caplog.text


def test_save_to_dir_writes_whole_files_and_restore_from_dir_reads_them(tmp_path):
    s = _Counting()
    s.suggest("a"), s.on_trial_complete("a", {"loss": 1.5})
    assert s.save_to_dir(str(tmp_path)) is True
    assert os.listdir(tmp_path) == ["searcher-state-default.pkl"]  # no partial file left beside it
    fresh = _Counting()
    fresh.restore_from_dir(str(tmp_path))
    assert (fresh.made, fresh.told) == (1, [1.5])
    assert Searcher().save_to_dir(str(tmp_path / "x")) is False  # not implemented: nothing written
    with pytest.raises(FileNotFoundError, match="searcher-state-"):
        _Counting().restore_from_dir(str(tmp_path / "empty"))


class _Remembers(tune.Callback):
    """Ray's ``Callback.get_state`` docstring example: the ids of the trials that started."""

    def __init__(self):
        self.trial_ids: set[str] = set()
        self.set_state_calls = 0

    def on_trial_start(self, iteration, trials, trial, **info):
        self.trial_ids.add(trial.trial_id)

    def get_state(self):
        return {"trial_ids": self.trial_ids.copy()}

    def set_state(self, state):
        self.trial_ids = state["trial_ids"]
        self.set_state_calls += 1


def test_a_callbacks_state_is_saved_with_the_experiment_and_given_back_on_restore(storage, tmp_path):
    """Ray saves Callback.get_state() with the experiment and calls set_state on Tuner.restore (muster did
    neither: the restored callback knew only the trials run after the restore)."""
    from muster.tune.logger import CSVLoggerCallback

    run_config = tune.RunConfig(name="exp", storage_path=storage, verbose=0,
                                callbacks=[_InterruptOnce(3, str(tmp_path / "interrupted")), _Remembers(),
                                           CSVLoggerCallback()])
    tuner = tune.Tuner(_score, param_space={"x": tune.grid_search([0.1 * i for i in range(6)])},
                       tune_config=tune.TuneConfig(metric="loss", mode="min", max_concurrent_trials=1),
                       run_config=run_config)
    first = tuner.fit()
    assert tuner._interrupted_by == "SIGINT"
    assert len(first) == 3
    restored = tune.Tuner.restore(os.path.join(storage, "exp"), trainable=_score)
    grid = restored.fit()
    assert len(grid) == 6 and grid.num_errors == 0
    remembers = restored.run_config.callbacks[1]
    assert remembers.set_state_calls == 1
    assert remembers.trial_ids == {r.metrics["trial_id"] for r in grid}  # the first run's starts, and the rest
    for r in grid:  # the logger came back too: the trials run after the restore have their progress.csv
        assert os.path.exists(os.path.join(r.path, "progress.csv")), r.path
