"""Ray's ``Repeater``: each configuration runs ``repeat`` times and the searcher hears the mean once.
Before, importing it raised muster's unsupported-API error."""

from __future__ import annotations

import pytest

from muster import tune
from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.tune.search import Repeater, Searcher


class _Listed(Searcher):
    """Suggests x = 1, then 2, then is finished; records what it is told."""

    def __init__(self):
        super().__init__()
        self.todo, self.completed = [1, 2], []

    def suggest(self, trial_id):
        return {"x": self.todo.pop(0)} if self.todo else Searcher.FINISHED

    def on_trial_complete(self, trial_id, result=None, error=False):
        self.completed.append((trial_id, result, error))


def _score(config):
    tune.report({"score": config["x"] * 10 + config["__trial_index__"]})


def test_each_config_runs_repeat_times_and_the_searcher_gets_the_mean():
    inner = _Listed()
    grid = tune.Tuner(_score, tune_config=tune.TuneConfig(
        metric="score", mode="max", num_samples=6, search_alg=Repeater(inner, repeat=3)),
        run_config=tune.RunConfig(verbose=0)).fit()
    runs = sorted((r.config["x"], r.config["__trial_index__"]) for r in grid)
    assert runs == [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2)]
    assert sorted(result["score"] for _, result, _ in inner.completed) == [11.0, 21.0]  # the means of 3 repeats
    first_ids = {r.metrics["trial_id"] for r in grid if r.config["__trial_index__"] == 0}
    assert {trial_id for trial_id, _, _ in inner.completed} == first_ids  # told under each group's first trial


def test_bad_arguments_are_refused_naming_them():
    with pytest.raises(InvalidArgumentError, match=r"repeat=0"):
        Repeater(_Listed(), repeat=0)
    with pytest.raises(InvalidTypeError, match=r"wrap a Searcher"):
        Repeater("optuna", repeat=2)
    assert tune.search.grid_search([1, 2]) == tune.grid_search([1, 2])  # Ray's other import path
