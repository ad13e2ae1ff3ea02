"""A config object of the wrong type, or a value a later layer would trip on, is refused where the user
wrote it: the error names the argument, the bad value and what to pass, in the words of the API called
(not an AttributeError from deep inside, nor a TypeError on every worker)."""

from __future__ import annotations

import pytest

from muster import tune
from muster.exceptions import InvalidArgumentError, InvalidTypeError
from muster.train import Checkpoint, RunConfig
from muster.train.torch import TorchTrainer
from muster.tune.schedulers import PopulationBasedTraining

from _shared import raise_naming


def _loop(config):
    pass


@pytest.mark.parametrize(
    "make, expected, shown",
    [
        (lambda: RunConfig(checkpoint_config={"num_to_keep": 2}), InvalidTypeError,
         ["RunConfig(checkpoint_config={'num_to_keep': 2})", "muster.train.CheckpointConfig"]),
        (lambda: RunConfig(failure_config=3), InvalidTypeError,
         ["RunConfig(failure_config=3)", "muster.train.FailureConfig"]),
        # Tune's RunConfig speaks of Tune's classes
        (lambda: tune.RunConfig(failure_config={"max_failures": 1}), InvalidTypeError,
         ["failure_config={'max_failures': 1}", "muster.tune.FailureConfig"]),
        (lambda: TorchTrainer(_loop, scaling_config={"num_workers": 2}), InvalidTypeError,
         ["TorchTrainer(scaling_config={'num_workers': 2})", "ScalingConfig(num_workers=2)"]),
        (lambda: TorchTrainer(_loop, run_config={"name": "x"}), InvalidTypeError,
         ["TorchTrainer(run_config={'name': 'x'})", "muster.train.RunConfig"]),
        (lambda: TorchTrainer(_loop, torch_config={"backend": "gloo"}), InvalidTypeError,
         ["TorchTrainer(torch_config={'backend': 'gloo'})", "TorchConfig"]),
        (lambda: TorchTrainer(_loop, resume_from_checkpoint="/tmp/ckpt"), InvalidTypeError,
         ["TorchTrainer(resume_from_checkpoint='/tmp/ckpt')", "Checkpoint.from_directory"]),
        (lambda: TorchTrainer(lambda config, extra: None), InvalidArgumentError,
         ["TorchTrainer(train_loop_per_worker=", "(config, extra)", "def train_func(config)"]),
        (lambda: tune.Tuner(lambda c: None, run_config={"name": "x"}), InvalidTypeError,
         ["Tuner(run_config={'name': 'x'})", "muster.tune.RunConfig"]),
        (lambda: PopulationBasedTraining(hyperparam_mutations={"lr": 5}), InvalidTypeError,
         ["hyperparam_mutations['lr']=5", "tune.uniform"]),
        (lambda: PopulationBasedTraining(hyperparam_mutations={"opt": {"lr": []}}), InvalidArgumentError,
         ["hyperparam_mutations['opt']['lr'] is an empty list"]),
        (lambda: Checkpoint.from_directory(5), InvalidTypeError, ["Checkpoint.from_directory(5)", "pathlib.Path"]),
    ],
)
def test_wrong_input_is_refused_where_written(make, expected, shown):
    raise_naming(make, expected, shown)


def test_a_file_is_not_called_missing(tmp_path):
    path = tmp_path / "model.pt"
    path.write_bytes(b"x")
    with pytest.raises(InvalidArgumentError, match="a file, not a folder"):
        Checkpoint.from_directory(path)


def test_good_inputs_still_pass(tmp_path):
    # what the checks must not refuse: no-arg and one-arg loops (defaults after), a callable
    # object, a Path, PBT's lists, spaces, functions and nested dicts
    TorchTrainer(lambda: None)
    TorchTrainer(lambda config, verbose=False: None)
    TorchTrainer(type("Loop", (), {"__call__": lambda self, config: None})())
    assert Checkpoint.from_directory(tmp_path).path == str(tmp_path)
    PopulationBasedTraining(hyperparam_mutations={
        "lr": tune.uniform(0.001, 0.1), "bs": [16, 32], "m": lambda: 0.9, "opt": {"wd": [0.0, 0.1]}})
    tune.Tuner(lambda c: None, run_config=RunConfig(name="train_run_config_accepted"))


def _reports_loss(config):
    for _ in range(2):
        tune.report({"loss": 0.5, "val": {"acc": 0.9}, "grade": "high"})


def _tuner(storage, name, **tune_config):
    return tune.Tuner(_reports_loss, tune_config=tune.TuneConfig(**tune_config),
                      run_config=tune.RunConfig(name=name, storage_path=storage, verbose=0))


def test_a_metric_never_reported_ends_fit_naming_it(storage, monkeypatch):
    # a misspelled metric left ASHA stopping nothing, silently (Ray refuses the result)
    from muster.tune.schedulers import ASHAScheduler

    with pytest.raises(InvalidArgumentError) as info:
        _tuner(storage, "typo", scheduler=ASHAScheduler(metric="accuracy", mode="max")).fit()
    for text in ("without 'accuracy'", "correct metric='accuracy'", "['grade', 'loss', 'val']",
                 "TUNE_DISABLE_STRICT_METRIC_CHECKING=1"):
        assert text in str(info.value)
    # a nested metric is found by its path, as Ray's flattened result has it
    assert not _tuner(storage, "nested", metric="val/acc", mode="max").fit().errors
    monkeypatch.setenv("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")
    assert not _tuner(storage, "let_through", metric="accuracy", mode="max").fit().errors


def test_pbt_names_the_value_that_is_not_a_number(storage):
    pbt = PopulationBasedTraining(perturbation_interval=1, hyperparam_mutations={"lr": [0.1, 0.2]})
    with pytest.raises(InvalidArgumentError) as info:
        _tuner(storage, "pbt", metric="grade", mode="max", scheduler=pbt).fit()
    assert "has no number for 'grade' ('high')" in str(info.value)
    assert "time_total_s'" not in str(info.value).split(";")[0]  # it was reported: not named as missing


def _node_loop(config):
    from muster import train

    train.report({"ok": 1})


def test_scaling_label_selector_is_checked_against_the_node(fit):
    """``ScalingConfig(label_selector=)`` as a task's: one the engine's node satisfies runs there, one it
    does not is refused when the workers start (Ray would leave them pending forever)."""
    from muster.tasks.labels import NODE_ID_LABEL
    from muster.tasks.runtime_context import node_id
    from muster.train import ScalingConfig

    here = ScalingConfig(num_workers=1, label_selector={NODE_ID_LABEL: node_id()})
    assert fit(_node_loop, scaling=here).metrics == {"ok": 1}
    elsewhere = ScalingConfig(num_workers=1, label_selector={NODE_ID_LABEL: "no-such-node"})
    with pytest.raises(InvalidArgumentError, match=r"label_selector=\{'ray.io/node-id': 'no-such-node'\} matches no"):
        fit(_node_loop, scaling=elsewhere, name="elsewhere")
