"""muster.tune.result: Ray's result-key constants, used the way Ray scripts use them."""

from __future__ import annotations

import os
import threading

import pytest

from muster import tune
from muster.tune.result import (
    DONE,
    HOSTNAME,
    NODE_IP,
    PID,
    SHOULD_CHECKPOINT,
    TIME_THIS_ITER_S,
    TIME_TOTAL_S,
    TIMESTAMP,
    TRAINING_ITERATION,
    TRIAL_ID,
)


class _Steps(tune.Trainable):
    def setup(self, config):
        self.n = 0

    def step(self):
        self.n += 1
        return {"n": self.n, DONE: self.n == 4}

    def save_checkpoint(self, checkpoint_dir):
        return {"n": self.n}

    def load_checkpoint(self, checkpoint):
        self.n = checkpoint["n"]


class _CheckpointOddSteps(tune.Callback):
    """Asks for a checkpoint from a callback, as Ray's custom_checkpointing_with_callback example does."""

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if result[TRAINING_ITERATION] % 2 == 1:
            result[SHOULD_CHECKPOINT] = True


def test_result_constants_name_the_keys_tune_fills_and_reads(storage):
    grid = tune.Tuner(_Steps, run_config=tune.RunConfig(
        storage_path=storage, verbose=0, callbacks=[_CheckpointOddSteps()],
        checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=0, checkpoint_at_end=False))).fit()
    result = grid[0]
    assert result.metrics[DONE] is True and result.metrics[TRAINING_ITERATION] == 4  # DONE ended the trial
    for key in (TIME_THIS_ITER_S, TIME_TOTAL_S, TIMESTAMP, TRIAL_ID, HOSTNAME, NODE_IP, PID):
        assert key in result.metrics, key
    assert sorted(metrics["n"] for _, metrics in result.best_checkpoints) == [1, 3]  # what the callback asked for


class _LogdirFromConfig:
    """Outside a Tuner a Trainable saves under its ``logdir``, a new temp folder; the test's keep it in theirs."""

    config: dict

    @property
    def logdir(self):
        return self.config["logdir"]


class _StepsInTestFolder(_LogdirFromConfig, _Steps):
    pass


class _CannotRestore(_LogdirFromConfig, _Steps):
    def load_checkpoint(self, checkpoint):
        raise KeyError("n")


def test_validate_save_restore_round_trips_a_trainable_through_two_actors(tmp_path):
    from muster.tune.utils import validate_save_restore

    assert validate_save_restore(_StepsInTestFolder, config={"unused": 1, "logdir": str(tmp_path)}) is True
    assert os.listdir(tmp_path)  # the first actor's checkpoint, saved in the test's folder
    with pytest.raises(KeyError):  # the second actor's restore fails: the check says so
        validate_save_restore(_CannotRestore, config={"logdir": str(tmp_path)})


def test_diagnose_serialization_names_the_global_that_does_not_pickle(capsys):
    """Ray's tune.utils.diagnose_serialization docstring example (a threading.Event in its scope): the names that fail,
    or True for a trainable that pickles; Ray's ray.tune.utils.util path imports it too (both failed before)."""
    from muster.tune.utils import diagnose_serialization
    from muster.tune.utils.util import diagnose_serialization as from_util

    event = threading.Event()

    def uses_an_event(config):  # a closure pickles by value, as a script's functions do
        print(event)

    assert from_util is diagnose_serialization
    assert diagnose_serialization(uses_an_event) == {"event"}
    assert "[name='event']... FAILED" in capsys.readouterr().out
    assert diagnose_serialization(lambda config: config) is True
