"""Ray's ``wrap_function``/``FunctionTrainable`` (``ray.tune.trainable.function_trainable``) and
``SearchAlgorithm``/``SearchGenerator`` (``ray.tune.search``), which Ray's API docs list: before, each
import failed."""

from __future__ import annotations

import os

import pytest

from muster import tune
from muster.exceptions import InvalidArgumentError, InvalidTypeError, UnsupportedRayAPIError


def _double(config):
    tune.report({"y": 2 * config["x"], "pid": os.getpid()})


def test_a_wrap_function_class_runs_as_its_function_under_its_name(storage):
    from muster.tune.trainable import FunctionTrainable, wrap_function
    from muster.tune.trainable.function_trainable import FunctionTrainable as deep_cls, wrap_function as deep_fn

    assert deep_cls is FunctionTrainable and deep_fn is wrap_function
    cls = wrap_function(_double, name="doubler")
    assert issubclass(cls, FunctionTrainable) and issubclass(cls, tune.Trainable) and cls._name == "doubler"
    grid = tune.Tuner(tune.with_resources(cls, {"cpu": 1}), param_space={"x": tune.grid_search([1, 2])},
                      run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()
    assert grid.num_errors == 0 and sorted(r.metrics["y"] for r in grid) == [2, 4]
    assert os.path.basename(grid.experiment_path).startswith("doubler_")  # named as Ray names it: _name
    assert all(os.path.basename(r.path).startswith("doubler_") for r in grid)
    analysis = tune.run(wrap_function(_double), config={"x": 3}, storage_path=storage, verbose=0)
    assert [t.last_result["y"] for t in analysis.trials] == [6]


def test_wrap_function_refuses_what_ray_refuses_and_names_the_fix():
    from muster.tune.trainable import FunctionTrainable, wrap_function

    with pytest.raises(InvalidArgumentError, match=r"one positional argument.*with_parameters"):
        wrap_function(lambda config, data: None)
    with pytest.raises(InvalidTypeError, match="Trainable subclass goes to the Tuner"):
        wrap_function(tune.Trainable)
    with pytest.raises(UnsupportedRayAPIError, match=r"muster\.tune\.Tuner"):
        wrap_function(_double)({"x": 1})  # stepping it by hand, outside a trial, is not ported

    class Mine(FunctionTrainable):
        pass

    with pytest.raises(InvalidTypeError, match="FunctionTrainable subclass of your own"):
        tune.Tuner(Mine)


class _Listed(tune.search.Searcher):
    def __init__(self):
        super().__init__()
        self.todo, self.completed = [1, 5], []

    def suggest(self, trial_id):
        return {"x": self.todo.pop(0)} if self.todo else self.FINISHED

    def on_trial_complete(self, trial_id, result=None, error=False):
        self.completed.append(result["y"])


def test_search_generator_around_a_searcher_runs_as_the_searcher(storage):
    from muster.tune.search import BasicVariantGenerator, SearchAlgorithm, SearchGenerator
    from muster.tune.search.search_algorithm import SearchAlgorithm as deep_base
    from muster.tune.search.search_generator import SearchGenerator as deep_gen

    assert deep_base is SearchAlgorithm and deep_gen is SearchGenerator
    assert issubclass(BasicVariantGenerator, SearchAlgorithm) and issubclass(SearchGenerator, SearchAlgorithm)
    searcher = _Listed()
    alg = SearchGenerator(searcher)
    grid = tune.Tuner(_double, tune_config=tune.TuneConfig(search_alg=alg, metric="y", mode="max", num_samples=5),
                      run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()
    assert sorted(r.metrics["y"] for r in grid) == [2, 10] and sorted(searcher.completed) == [2, 10]
    assert alg.metric == searcher.metric == "y" and alg.total_samples == 5  # the Tuner's metric reached it
    assert grid.get_best_result().config == {"x": 5}


def test_a_search_algorithm_of_ones_own_is_refused_naming_searcher():
    from muster.tune.search import BasicVariantGenerator, SearchAlgorithm, SearchGenerator

    class Mine(SearchAlgorithm):
        def next_trial(self):
            return None

    with pytest.raises(InvalidTypeError, match=r"subclass Searcher and implement suggest"):
        tune.Tuner(_double, tune_config=tune.TuneConfig(search_alg=Mine())).fit()
    with pytest.raises(InvalidTypeError, match="BasicVariantGenerator goes to TuneConfig"):
        SearchGenerator(BasicVariantGenerator())
