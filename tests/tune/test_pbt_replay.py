"""PopulationBasedTrainingReplay: a PBT run's policy log, replayed for one trial."""

from __future__ import annotations

import glob
import json
import os
import tempfile
import time

import _pbt_pair
import pytest

from muster import tune
from muster.exceptions import InvalidArgumentError
from muster.train import Checkpoint
from muster.tune.schedulers import PopulationBasedTraining, PopulationBasedTrainingReplay, create_scheduler

STEPS = 6


def _trainable(config):
    step = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            step = json.load(open(os.path.join(d, "step.json")))
    # the PBT run's two trials run at once (the replay's config holds "marks" too: logged from a donor's)
    _pbt_pair.at_start(config["marks"], restored=bool(checkpoint), weak=config["lr"] == 0.1)
    while step < STEPS:
        step += 1
        with tempfile.TemporaryDirectory() as d:
            json.dump(step, open(os.path.join(d, "step.json"), "w"))
            tune.report({"score": step * config["lr"], "lr": config["lr"]}, checkpoint=Checkpoint.from_directory(d))
        _pbt_pair.after_result(config["marks"], step, strong=config["lr"] == 1.0)
        time.sleep(0.2)  # pacing only: a pause decided on a result stops the trial in its tune.report (lockstep)


def test_replay_changes_the_config_at_the_logged_iterations(storage, tmp_path):
    pbt = PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=2, quantile_fraction=0.5,
                                  hyperparam_mutations={"lr": tune.uniform(0.01, 100.0)}, resample_probability=0.0,
                                  perturbation_factors=(2.0, 2.0), seed=1)  # each exploit doubles the donor's lr
    grid = tune.Tuner(
        _trainable, param_space={"lr": tune.grid_search([0.1, 1.0]), "marks": str(tmp_path)},
        tune_config=tune.TuneConfig(metric="score", mode="max", scheduler=pbt),
        run_config=tune.RunConfig(name="pbt", storage_path=storage, verbose=0),
    ).fit()
    assert grid.num_errors == 0 and pbt.num_perturbations >= 1
    policy_file = max(glob.glob(os.path.join(grid.experiment_path, "pbt_policy_*.txt")),
                      key=lambda p: len(open(p).read().splitlines()))
    logged = [json.loads(line) for line in open(policy_file).read().splitlines()]

    replay = PopulationBasedTrainingReplay(policy_file)
    changes = replay._policy
    # what the log says: the lineage's last exploits, each [.., .., .., donor's iteration, .., new config]
    assert changes and changes == [(line[3], line[5]) for line in logged[-len(changes):]]
    assert replay.config == logged[-len(changes)][4]  # it starts with the config the first of them cloned
    result = tune.Tuner(
        _trainable, tune_config=tune.TuneConfig(scheduler=replay),
        run_config=tune.RunConfig(name="replay", storage_path=storage, verbose=0),
    ).fit()[0]
    assert result.error is None
    rows = {int(i): lr for i, lr in zip(result.metrics_dataframe["training_iteration"], result.metrics_dataframe["lr"])}
    assert sorted(rows) == list(range(1, STEPS + 1))  # every iteration once: each restart went on from its own
    expected, lr = {}, replay.config["lr"]
    for i in range(1, STEPS + 1):  # the config in force at each iteration: a change applies after its iteration
        expected[i] = lr
        lr = next((c["lr"] for at, c in changes if at == i), lr)
    assert rows == expected, (rows, changes)
    assert len(set(rows.values())) > 1  # the first exploit is at iteration 2 or 4: the replay changed the config
    assert result.config == changes[-1][1]
    assert result.metrics["training_iteration"] == STEPS


def test_policy_chain_and_bad_files(tmp_path):
    # a trial's log holds its donors' lines first; a line whose trial is not the next line's donor ends
    # the chain: what came before it was replaced by a later exploit
    lines = [
        ["1", "0", 2, 2, {"lr": 0.0}, {"lr": 0.5}],   # not in the chain: "1" is not the donor below
        ["2", "3", 4, 4, {"lr": 1.0}, {"lr": 1.5}],   # "2" exploited "3" at 3's iteration 4
        ["4", "2", 6, 7, {"lr": 1.5}, {"lr": 2.0}],   # then "4" exploited "2" at 2's iteration 7
    ]
    path = tmp_path / "pbt_policy_x.txt"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    replay = create_scheduler("pbt_replay", policy_file=str(path))
    assert isinstance(replay, PopulationBasedTrainingReplay)
    assert replay.config == {"lr": 1.0} and replay._policy == [(4, {"lr": 1.5}), (7, {"lr": 2.0})]
    with pytest.raises(InvalidArgumentError, match="no such policy file.*log_config=True"):
        PopulationBasedTrainingReplay(str(tmp_path / "missing.txt"))
    path.write_text("not json\n")
    with pytest.raises(InvalidArgumentError, match="line 1 is not a PBT policy line"):
        PopulationBasedTrainingReplay(str(path))
