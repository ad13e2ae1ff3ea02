"""Tuner end to end on the embedded engine: real trial processes, real storage."""

from __future__ import annotations

import json
import os
import pickle
import tempfile
import time

import _pbt_pair
import pytest
import torch

import muster
from muster import train, tune
from muster.exceptions import (
    InvalidArgumentError,
    InvalidTypeError,
    ResourcesUnavailableError,
    TrainingFailedError,
)
from muster.train import Checkpoint, FailureConfig, ScalingConfig
from muster.train.torch import TorchTrainer
from muster.tune.search import BasicVariantGenerator
from muster.tune.schedulers import (
    ASHAScheduler,
    MedianStoppingRule,
    PopulationBasedTraining,
)


def _quadratic(config):
    for i in range(5):
        tune.report({"loss": (config["x"] - 0.3) ** 2 + 1.0 / (i + 1), "pid": os.getpid()})


def test_function_trainable_grid_and_random_search(storage):
    grid = tune.Tuner(
        _quadratic,
        param_space={"x": tune.uniform(0, 1), "tag": tune.grid_search(["a", "b"]), "fixed": {"depth": 3}},
        tune_config=tune.TuneConfig(num_samples=3, metric="loss", mode="min"),
        run_config=tune.RunConfig(name="exp", storage_path=storage),
    ).fit()
    assert len(grid) == 6 and grid.num_errors == 0 and grid.errors == []
    assert sorted(r.config["tag"] for r in grid) == ["a", "a", "a", "b", "b", "b"]
    assert all(r.config["fixed"] == {"depth": 3} for r in grid)
    for r in grid:
        df = r.metrics_dataframe
        assert list(df["training_iteration"]) == [1, 2, 3, 4, 5]
        assert (df["time_total_s"].diff().dropna() >= 0).all()
        assert r.metrics["loss"] == pytest.approx((r.config["x"] - 0.3) ** 2 + 0.2)
    best = grid.get_best_result()
    assert best.metrics["loss"] == min(r.metrics["loss"] for r in grid)
    worst = grid.get_best_result(metric="loss", mode="max")
    assert worst.metrics["loss"] == max(r.metrics["loss"] for r in grid)
    # scope="all" looks at every result: the best ever of every trial is its last (loss falls)
    assert grid.get_best_result(scope="all").path == best.path
    df = grid.get_dataframe()
    assert len(df) == 6 and {"config/x", "config/tag", "config/fixed/depth", "trial_id", "loss"} <= set(df.columns)
    state = json.load(open(os.path.join(storage, "exp", "experiment_state.json")))
    assert [t["status"] for t in state["trials"]] == ["TERMINATED"] * 6


def test_context_parameters_resources_and_returned_metrics(storage):
    big = torch.arange(10)

    def trainable(config, data):
        ctx = tune.get_context()
        return {
            "sum": int(data.sum()) * config["k"],
            "trial_id": ctx.get_trial_id(),
            "name": ctx.get_trial_name(),
            "cpus": ctx.get_trial_resources().required_resources["CPU"],  # Ray's PlacementGroupFactory
            "head_cpus": ctx.get_trial_resources().head_cpus,
            "visible": len(os.sched_getaffinity(0)) > 0,
        }

    fn = tune.with_resources(tune.with_parameters(trainable, data=big), {"cpu": 2})
    grid = tune.Tuner(fn, param_space={"k": tune.grid_search([1, 2])},
                      run_config=tune.RunConfig(storage_path=storage)).fit()
    assert sorted(r.metrics["sum"] for r in grid) == [45, 90]
    for r in grid:
        assert r.metrics["cpus"] == r.metrics["head_cpus"] == 2.0
        # Ray's folder name: <trial name>_<experiment tag>_<date>
        assert os.path.basename(r.path).startswith(f"{r.metrics['name']}_{r.config['k'] - 1}_k={r.config['k']}_")
        assert r.metrics["name"].startswith("trainable_") and r.metrics["name"].endswith(r.metrics["trial_id"])


def test_a_with_parameters_trainable_called_by_hand_gets_its_parameters():
    # Ray 2.60's wrapper is a function calling trainable(config, **parameters); muster's dropped the parameters
    def trainable(config, data=None):
        return config["k"] * data

    wrapped = tune.with_parameters(trainable, data=3)
    assert wrapped({"k": 2}) == 6 and wrapped.__name__ == "trainable"
    assert tune.with_resources(wrapped, {"cpu": 1})({"k": 2}) == 6


def reports_once(config):
    tune.report({"x": 1})


def test_tune_disable_dated_subdir_names_the_experiment_after_the_trainable(storage, monkeypatch):
    # Ray 2.60's StorageContext.get_experiment_dir_name: under TUNE_DISABLE_DATED_SUBDIR=1 a RunConfig(name=None)
    # experiment's folder is the trainable's name alone (Tuner and tune.run), not "<name>_<date>"; muster ignored it
    monkeypatch.setenv("TUNE_DISABLE_DATED_SUBDIR", "1")
    grid = tune.Tuner(reports_once, run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()
    assert grid.num_errors == 0 and grid.experiment_path == os.path.join(storage, "reports_once")
    analysis = tune.run(tune.with_parameters(reports_once), storage_path=os.path.join(storage, "run"), verbose=0)
    assert analysis.experiment_path == os.path.join(storage, "run", "reports_once")
    monkeypatch.setenv("TUNE_DISABLE_DATED_SUBDIR", "yes")
    with pytest.raises(InvalidArgumentError, match=r"TUNE_DISABLE_DATED_SUBDIR='yes': set it to 1"):
        tune.Tuner(reports_once, run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()


def test_trials_needing_more_than_the_engine_fail_at_once(storage):
    t0 = time.monotonic()
    with pytest.raises(ResourcesUnavailableError, match=r"needs 1 x CPU=64.*whole engine has CPU=4"):
        tune.Tuner(tune.with_resources(_quadratic, {"cpu": 64}), param_space={"x": 0.1},
                   run_config=tune.RunConfig(storage_path=storage)).fit()
    assert time.monotonic() - t0 < 10


def _once(config):
    tune.report({"x": config["x"], "cpus": tune.get_context().get_trial_resources().required_resources.get("CPU", 0.0)})


def test_points_to_evaluate_count_against_num_samples(storage):
    grid = tune.Tuner(
        _once,
        param_space={"x": tune.uniform(0, 1)},
        tune_config=tune.TuneConfig(num_samples=3, search_alg=BasicVariantGenerator(points_to_evaluate=[{"x": 7.0}])),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    xs = sorted(r.config["x"] for r in grid)
    assert len(grid) == 3 and xs[-1] == 7.0 and all(0 <= x < 1 for x in xs[:2])  # the point, then 2 draws


def test_with_resources_function_of_the_config_sizes_each_trial(storage):
    fn = tune.with_resources(_once, lambda config: {"cpu": 1 if config["x"] < 0.5 else 2})
    grid = tune.Tuner(fn, param_space={"x": tune.grid_search([0.1, 0.9])},
                      run_config=tune.RunConfig(storage_path=storage, name="sized", verbose=0)).fit()
    assert grid.num_errors == 0, grid.errors
    assert sorted((r.config["x"], r.metrics["cpus"]) for r in grid) == [(0.1, 1.0), (0.9, 2.0)]
    state = json.load(open(os.path.join(storage, "sized", "experiment_state.json")))
    assert sorted(t["resources"]["CPU"] for t in state["trials"]) == [1.0, 2.0]  # what was scheduled


def test_with_resources_takes_rays_placement_group_factory(storage):
    pgf = tune.PlacementGroupFactory([{"cpu": 1}, {"CPU": 1}])  # a trial's bundles, held together here
    assert pgf.required_resources == {"CPU": 2.0} and pgf.head_cpus == 1.0
    per_trial = tune.with_resources(
        _once, lambda config: tune.PlacementGroupFactory([{"cpu": 1 + (config["x"] > 0.5)}]))
    for trainable, name, want in ((tune.with_resources(_once, pgf), "pgf", [2.0]), (per_trial, "pgf_fn", [1.0, 2.0])):
        grid = tune.Tuner(trainable, param_space={"x": tune.grid_search([0.1, 0.9][:len(want)])},
                          run_config=tune.RunConfig(storage_path=storage, name=name, verbose=0)).fit()
        assert grid.num_errors == 0, grid.errors
        assert sorted(r.metrics["cpus"] for r in grid) == want
    with pytest.raises(ValueError, match="strategy='TIGHT'"):
        tune.PlacementGroupFactory([{"cpu": 1}], strategy="TIGHT")


def _reports_what_it_holds(config):
    tune.report({"assigned": muster.get_runtime_context().get_assigned_resources()})


class _ReportsWhatItHolds(tune.Trainable):
    def step(self):
        return {"assigned": muster.get_runtime_context().get_assigned_resources(), "done": True}


def test_a_trainable_holds_its_placement_groups_head_bundle(storage):
    """Ray places a trial's trainable in bundle 0 of its placement group, with that bundle's resources: in a
    function or a Trainable class given PlacementGroupFactory([{"CPU": 1}, {"CPU": 2}]),
    get_assigned_resources() is {"CPU": 1.0}; muster gave the bundles' sum, {"CPU": 3.0}. The trial still
    reserves the sum, and a plain dict is held whole."""
    factory = tune.PlacementGroupFactory([{"cpu": 1}, {"CPU": 2}])
    cases = [(tune.with_resources(_reports_what_it_holds, factory), "fn", {"CPU": 1.0}),
             (tune.with_resources(_ReportsWhatItHolds, factory), "cls", {"CPU": 1.0}),
             (tune.with_resources(_reports_what_it_holds, {"cpu": 2}), "dict", {"CPU": 2.0})]
    for trainable, name, want in cases:
        grid = tune.Tuner(trainable, run_config=tune.RunConfig(storage_path=storage, name=name, verbose=0)).fit()
        assert grid.num_errors == 0, grid.errors
        assert grid[0].metrics["assigned"] == want, name
    state = json.load(open(os.path.join(storage, "fn", "experiment_state.json")))
    assert state["trials"][0]["resources"]["CPU"] == 3.0  # what was scheduled: every bundle


def test_with_resources_function_returning_no_dict_names_it(storage):
    def per_trial(config):
        return 2

    with pytest.raises(InvalidTypeError, match=r"per_trial returned 2 .*return a dict such as"):
        tune.Tuner(tune.with_resources(_once, per_trial), param_space={"x": 0.1},
                   run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()


def test_with_resources_dict_without_cpu_asks_for_no_cpu(storage):
    # Ray's dict path: a missing "cpu" is 0 CPUs, so {"gpu": 1} is one GPU alone (here: more than exists).
    with pytest.raises(ResourcesUnavailableError, match=r"needs 1 x GPU=1 = GPU=1, but"):
        tune.Tuner(tune.with_resources(_once, {"gpu": 1}), param_space={"x": 0.1},
                   run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()


def test_rerunning_an_existing_experiment_name_starts_a_new_experiment_there(storage):
    # Ray reruns a script with a fixed RunConfig(name=...) into the same folder; restore then sees the new run only
    rc = tune.RunConfig(name="again", storage_path=storage)
    old = tune.Tuner(_quadratic, param_space={"x": 0.5}, run_config=rc).fit()[0].path
    grid = tune.Tuner(_quadratic, param_space={"x": 0.1},
                      run_config=tune.RunConfig(name="again", storage_path=storage)).fit()
    assert [r.config["x"] for r in grid] == [0.1] and grid[0].path != old and os.path.isdir(old)
    restored = tune.Tuner.restore(os.path.join(storage, "again"), _quadratic).get_results()
    assert [r.config["x"] for r in restored] == [0.1]


def _slow_linear(config):
    for i in range(12):
        time.sleep(0.05)
        tune.report({"score": config["q"] * (i + 1)})


def test_asha_stops_bad_trials_early_and_keeps_the_best(storage):
    sched = ASHAScheduler(max_t=12, grace_period=1, reduction_factor=3)
    grid = tune.Tuner(
        _slow_linear,
        # asynchronous halving compares a trial with those that passed a rung before it, so a
        # search whose every new trial beats all earlier ones stops nothing: mix the order
        param_space={"q": tune.grid_search([0.5, 0.9, 0.2, 0.7, 0.1, 0.8, 0.3, 0.6, 0.4])},
        tune_config=tune.TuneConfig(metric="score", mode="max", scheduler=sched, max_concurrent_trials=2),
        run_config=tune.RunConfig(storage_path=storage),
    ).fit()
    iters = {r.config["q"]: r.metrics["training_iteration"] for r in grid}
    assert iters[0.9] == 12  # the best trial always runs to max_t
    assert sum(iters.values()) < 0.75 * 12 * 9, iters  # early stopping cut the work
    assert min(iters.values()) < 12
    assert grid.get_best_result().config["q"] == 0.9
    # a stopped trial's run ended as STOPPED, not failed, and kept its reports
    stopped = [r for r in grid if r.metrics["training_iteration"] < 12]
    assert all(r.error is None and len(r.metrics_dataframe) >= r.metrics["training_iteration"] for r in stopped)


def test_median_stopping_and_stop_dict(storage):
    grid = tune.Tuner(
        _slow_linear,
        param_space={"q": tune.grid_search([0.9, 0.8, 0.7, 0.1])},
        tune_config=tune.TuneConfig(
            metric="score", mode="max", max_concurrent_trials=1,
            scheduler=MedianStoppingRule(time_attr="training_iteration", grace_period=2, min_samples_required=3),
        ),
        run_config=tune.RunConfig(storage_path=storage, stop={"training_iteration": 6}),
    ).fit()
    iters = {r.config["q"]: r.metrics["training_iteration"] for r in grid}
    assert iters[0.9] == iters[0.8] == iters[0.7] == 6  # the stop dict
    assert iters[0.1] == 2  # below the median of the others' running means once past the grace period


def _pbt_trainable(config):
    ckpt = tune.get_checkpoint()
    step, origin = 0, tune.get_context().get_trial_id()
    if ckpt:
        with ckpt.as_directory() as d:
            state = json.load(open(os.path.join(d, "state.json")))
        step, origin = state["step"], state["origin"]
    _pbt_pair.at_start(config["marks"], restored=bool(ckpt), weak=config["lr"] == 0.01)  # both run at once
    while True:  # at least one step after a restore, even from a donor that had finished
        step += 1
        with tempfile.TemporaryDirectory() as d:
            json.dump({"step": step, "origin": origin}, open(os.path.join(d, "state.json"), "w"))
            tune.report({"score": config["lr"] * step, "step": step, "origin": origin},
                        checkpoint=Checkpoint.from_directory(d))
        _pbt_pair.after_result(config["marks"], step, strong=config["lr"] == 1.0)
        if step >= 8:
            break
        time.sleep(0.05)


def test_pbt_restarts_bottom_trials_from_a_top_trials_checkpoint(storage, tmp_path):
    sched = PopulationBasedTraining(
        time_attr="training_iteration", perturbation_interval=2,
        hyperparam_mutations={"lr": tune.uniform(0.5, 1.5)}, quantile_fraction=0.5, seed=1,
    )
    grid = tune.Tuner(
        _pbt_trainable,
        param_space={"lr": tune.grid_search([0.01, 1.0]), "marks": str(tmp_path)},
        tune_config=tune.TuneConfig(metric="score", mode="max", scheduler=sched),
        run_config=tune.RunConfig(storage_path=storage),
    ).fit()
    assert grid.num_errors == 0
    by_lr = sorted(grid, key=lambda r: r.metrics_dataframe["score"].iloc[0])
    weak, strong = by_lr
    assert sched.num_perturbations >= 1
    # the weak trial continued from the strong one's checkpoint, with an explored lr
    weak_df = weak.metrics_dataframe
    assert strong.metrics["origin"] in set(weak_df["origin"])
    # explored from the strong one's lr (1.0, or a resample in [0.5, 1.5]), not from its own 0.01; a loaded
    # machine can give more than one exploit, each a further x0.8 or x1.2, hence the loose bounds
    assert 0.1 <= weak.config["lr"] <= 10 and weak.config["lr"] != 0.01
    assert weak.metrics["step"] >= 8


def _train_loop(config):
    import torch.distributed as dist

    ckpt = train.get_checkpoint()
    start = 0
    if ckpt:
        with ckpt.as_directory() as d:
            start = int(open(os.path.join(d, "epoch")).read()) + 1
    for epoch in range(start, 3):
        t = torch.tensor([config["lr"]])
        dist.all_reduce(t)
        with tempfile.TemporaryDirectory() as d:
            open(os.path.join(d, "epoch"), "w").write(str(epoch))
            train.report({"loss": float(t) / (epoch + 1), "world": dist.get_world_size(), "t": time.time()},
                         checkpoint=Checkpoint.from_directory(d) if dist.get_rank() == 0 else None)
        time.sleep(0.2)


def test_torch_trainer_trials_are_gang_scheduled_without_deadlock(storage):
    trainer = TorchTrainer(_train_loop, scaling_config=ScalingConfig(num_workers=2))
    # flat keys (as in the seed's example) go under train_loop_config
    grid = tune.Tuner(
        trainer,
        param_space={"lr": tune.grid_search([0.1, 0.2, 0.3, 0.4, 0.5])},
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=tune.RunConfig(storage_path=storage),
    ).fit()
    assert grid.num_errors == 0 and len(grid) == 5
    for r in grid:
        assert r.metrics["world"] == 2
        assert r.metrics["loss"] == pytest.approx(2 * r.config["train_loop_config"]["lr"] / 3, rel=1e-5)
        assert r.checkpoint is not None
    # 4 CPUs and 2-worker gangs: never more than 2 trials at once
    spans = [(r.metrics_dataframe["t"].min(), r.metrics_dataframe["t"].max()) for r in grid]
    for s, _ in spans:
        assert sum(1 for a, b in spans if a <= s <= b) <= 2
    assert grid.get_best_result().config == {"train_loop_config": {"lr": 0.1}}


def _reports_lr(config):
    train.report({"loss": config["lr"]})


def test_a_trainers_run_config_names_the_experiment_when_the_tuner_has_none(storage):
    trainer = TorchTrainer(_reports_lr, scaling_config=ScalingConfig(num_workers=1),
                           run_config=tune.RunConfig(name="named_by_the_trainer", storage_path=storage))
    grid = tune.Tuner(trainer, param_space={"lr": tune.grid_search([0.1])}).fit()  # as in Ray's Lightning+ASHA guide
    assert grid.num_errors == 0
    assert os.path.basename(os.path.dirname(grid[0].path)) == "named_by_the_trainer"


def test_function_that_fits_a_trainer_reports_through_the_trial(storage):
    def trial_fn(config):
        from muster.train import RunConfig
        from muster.tune.integration.ray_train import TuneReportCallback  # Ray's; muster needs none

        result = TorchTrainer(_train_loop, train_loop_config=config, scaling_config=ScalingConfig(num_workers=2),
                              run_config=RunConfig(callbacks=[TuneReportCallback()])).fit()
        assert result.metrics["world"] == 2

    grid = tune.Tuner(
        trial_fn, param_space={"lr": tune.grid_search([0.1, 0.3])},
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=tune.RunConfig(storage_path=storage),
    ).fit()
    assert grid.num_errors == 0
    for r in grid:
        assert list(r.metrics_dataframe["training_iteration"]) == [1, 2, 3]
        assert r.checkpoint is not None  # the nested trainer's
        with r.checkpoint.as_directory() as d:
            assert open(os.path.join(d, "epoch")).read() == "2"
        # Ray's TuneReportCallback puts each reported checkpoint's path in the trial's result
        paths = list(r.metrics_dataframe["checkpoint_path"])
        assert [p.rsplit("/", 1)[-1] for p in paths] == [f"checkpoint_00000{i}" for i in (1, 2, 3)]
        assert all(p.startswith(os.path.join(r.path, "trainer")) for p in paths)
        assert r.metrics["checkpoint_path"] == r.checkpoint.path
    assert grid.get_best_result().config == {"lr": 0.1}
    from muster.exceptions import MusterError
    from muster.tune.integration.ray_train import TuneReportCallback

    with pytest.raises(MusterError, match="outside a Tune trial"):
        TuneReportCallback()  # as Ray's: it belongs to a trainer inside a trial


def test_failed_trial_is_reported_and_the_others_finish(storage):
    def flaky(config):
        tune.report({"v": 1})
        if config["bad"]:
            raise RuntimeError(f"bad trial {config['bad']}")
        tune.report({"v": 2})

    grid = tune.Tuner(flaky, param_space={"bad": tune.grid_search([0, 1])},
                      tune_config=tune.TuneConfig(metric="v", mode="max"),
                      run_config=tune.RunConfig(storage_path=storage)).fit()
    assert grid.num_errors == 1 and "bad trial 1" in str(grid.errors[0])
    # as Ray's, the trial's error is also an instance of what the trainable raised
    err = grid.errors[0]
    assert isinstance(err, RuntimeError) and isinstance(err, TrainingFailedError)
    assert type(pickle.loads(pickle.dumps(err))) is TrainingFailedError  # and travels as the plain error
    # in Tune's words: the trial failed (not "Training"), also once it has travelled
    trial_id = next(r.metrics["trial_id"] for r in grid if r.error is not None)
    for shown in (err, pickle.loads(pickle.dumps(err))):
        assert str(shown).startswith(f"Trial {trial_id} failed after 1 attempt(s)"), str(shown)
    assert grid.get_best_result().config == {"bad": 0}
    df = grid.get_dataframe()
    assert "error" in df.columns and df["error"].notna().sum() == 1


def _fails_or_reports(config):
    if config["x"] == 0:
        raise ValueError("trial zero fails before reporting")
    for i in range(config["steps"]):
        tune.report({"v": i})
        time.sleep(0.05)


def test_a_trial_that_never_reported_has_a_metrics_dict(storage):
    grid = tune.Tuner(_fails_or_reports, param_space={"x": tune.grid_search([0, 1]), "steps": 1},
                      tune_config=tune.TuneConfig(metric="v", mode="max"),
                      run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()
    failed, ok = sorted(grid, key=lambda r: r.config["x"])
    # Ray's doc sample: result.metrics.get("training_iteration", 0); Ray's last_result has the trial id
    assert isinstance(failed.metrics, dict) and failed.metrics.get("training_iteration", 0) == 0
    assert failed.metrics["trial_id"] and failed.error is not None
    assert grid.get_best_result() is ok
    df = grid.get_dataframe()
    assert len(df) == 2 and sorted(df["trial_id"]) == sorted(r.metrics["trial_id"] for r in grid)


def _statuses(storage, name):
    state = json.load(open(os.path.join(storage, name, "experiment_state.json")))
    return [t["status"] for t in state["trials"]]


def test_fail_fast_stops_the_experiment_at_the_first_trial_error(storage):
    grid = tune.Tuner(
        _fails_or_reports, param_space={"x": tune.grid_search([0, 1, 2]), "steps": 100},
        tune_config=tune.TuneConfig(max_concurrent_trials=2),
        run_config=tune.RunConfig(storage_path=storage, name="ff", verbose=0,
                                  failure_config=FailureConfig(fail_fast=True)),
    ).fit()
    assert grid.num_errors == 1 and isinstance(grid[0].error, ValueError)
    restored = tune.Tuner.restore(os.path.join(storage, "ff"), _fails_or_reports).get_results()
    assert isinstance(restored[0].error, ValueError)  # kept with the trial (error.pkl), as in Ray
    # the running trial was stopped long before its 100 reports; the third never started
    statuses = _statuses(storage, "ff")
    assert statuses[:2] == ["ERROR", "TERMINATED"] and set(statuses[2:]) <= {"TERMINATED"}
    assert len(grid[1].metrics_dataframe) < 100
    assert all(r.metrics == {"trial_id": r.metrics["trial_id"]} and r.error is None for r in list(grid)[2:])


def test_fail_fast_raise_raises_the_trial_error_from_fit(storage):
    tuner = tune.Tuner(
        _fails_or_reports, param_space={"x": tune.grid_search([0, 1]), "steps": 100},
        run_config=tune.RunConfig(storage_path=storage, name="ffr", verbose=0,
                                  failure_config=FailureConfig(fail_fast="raise")),
    )
    with pytest.raises(ValueError, match="trial zero fails"):
        tuner.fit()
    assert _statuses(storage, "ffr") == ["ERROR", "TERMINATED"]
    with pytest.raises(InvalidArgumentError, match="fail_fast='sometimes'.*'raise'"):
        tune.Tuner(_fails_or_reports, run_config=tune.RunConfig(
            storage_path=storage, failure_config=FailureConfig(fail_fast="sometimes"))).fit()


def test_killed_trial_resumes_from_its_checkpoint(storage, tmp_path):
    marker = tmp_path / "killed"

    def trainable(config):
        ckpt = tune.get_checkpoint()
        start = 0
        if ckpt:
            with ckpt.as_directory() as d:
                start = int(open(os.path.join(d, "i")).read()) + 1
        for i in range(start, 6):
            with tempfile.TemporaryDirectory() as d:
                open(os.path.join(d, "i"), "w").write(str(i))
                tune.report({"i": i, "resumed_at": start}, checkpoint=Checkpoint.from_directory(d))
            if i == 2 and not marker.exists():
                marker.write_text(str(os.getpid()))
                os.kill(os.getpid(), 9)  # a real SIGKILL of the trial's worker

    grid = tune.Tuner(trainable, param_space={},
                      run_config=tune.RunConfig(storage_path=storage,
                                                failure_config=FailureConfig(max_failures=1))).fit()
    (r,) = grid
    assert r.error is None and marker.exists()
    df = r.metrics_dataframe
    assert list(df["i"]) == [0, 1, 2, 3, 4, 5]  # nothing redone, nothing lost
    assert list(df["resumed_at"]) == [0, 0, 0, 3, 3, 3]
    assert sorted(set(r.all_metrics_dataframe["_attempt"])) == [0, 1]
    # the restart is Ray's "restore": its counters start again, the totals go on
    assert list(df["iterations_since_restore"]) == [1, 2, 3, 1, 2, 3]
    assert df["time_since_restore"].iloc[3] < df["time_total_s"].iloc[3] - df["time_total_s"].iloc[2] + 0.5
    assert (df["time_total_s"].diff().dropna() >= 0).all()


def test_optuna_search_suggests_inside_the_space_and_learns(storage):
    pytest.importorskip("optuna")  # the `tune` extra; installed by scripts/test.sh
    from muster.tune.search import ConcurrencyLimiter, OptunaSearch

    searcher = OptunaSearch(seed=0)
    grid = tune.Tuner(
        _quadratic,
        param_space={"x": tune.uniform(-2.0, 2.0), "unused": tune.choice(["a", "b"]), "const": 5},
        tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=12,
                                    search_alg=ConcurrencyLimiter(searcher, max_concurrent=2)),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    assert len(grid) == 12 and grid.num_errors == 0
    assert all(-2 <= r.config["x"] <= 2 and r.config["const"] == 5 for r in grid)
    study = searcher._study
    assert len([t for t in study.trials if t.state.name == "COMPLETE"]) == 12
    assert abs(grid.get_best_result().config["x"] - 0.3) < 0.5


def _steps_fail_once(config):
    start = 0
    if tune.get_checkpoint():
        with tune.get_checkpoint().as_directory() as d:
            start = int(open(os.path.join(d, "step")).read())
    for step in range(start + 1, 4):
        if step == 2 and not os.path.exists(config["marker"]):
            open(config["marker"], "w").close()
            raise RuntimeError("once")
        with tempfile.TemporaryDirectory() as d:
            open(os.path.join(d, "step"), "w").write(str(step))
            tune.report({"step": step, "t": time.time()}, checkpoint=Checkpoint.from_directory(d))


def test_resume_config_says_per_status_what_restore_does(storage, tmp_path):
    done = tmp_path / "done"
    done.touch()
    space = {"marker": tune.grid_search([str(tmp_path / "fails"), str(done)])}
    run_config = tune.RunConfig(storage_path=storage, name="rc", verbose=0)
    assert tune.Tuner(_steps_fail_once, param_space=space, run_config=run_config).fit().num_errors == 1
    before = time.time()
    # Ray's ResumeConfig (its Tuner.restore argument _resume_config): rerun the finished trial from
    # scratch, resume the failed one from its checkpoint
    resume = tune.ResumeConfig(finished=tune.ResumeConfig.ResumeType.RESTART, errored="resume")
    grid = tune.Tuner.restore(os.path.join(storage, "rc"), _steps_fail_once, _resume_config=resume).fit()
    failed, finished = sorted(grid, key=lambda r: r.config["marker"] == str(done))
    assert failed.error is None and list(failed.metrics_dataframe["step"]) == [1, 2, 3]
    assert failed.metrics_dataframe["t"].iloc[0] < before  # resumed: its report before the failure is kept
    assert list(finished.metrics_dataframe["step"]) == [1, 2, 3]
    assert finished.metrics_dataframe["t"].min() > before  # restarted: nothing of its first run is kept
    with pytest.raises(InvalidArgumentError, match=r"errored='again'.*RESUME, RESTART or SKIP"):
        tune.ResumeConfig(errored="again")


def _one_report(config):
    tune.report({"loss": 1.0})


def test_a_tuner_without_run_config_uses_tunes_run_config_as_ray(storage, monkeypatch):
    # Ray's Tuner defaults to ray.tune.RunConfig (muster's took muster.train.RunConfig, Ray Train V2's)
    monkeypatch.setenv("MUSTER_STORAGE_PATH", storage)
    tuner = tune.Tuner(_one_report)
    assert type(tuner.run_config) is tune.RunConfig
    assert type(tuner.run_config.failure_config) is tune.FailureConfig
    assert type(tuner.run_config.checkpoint_config) is tune.CheckpointConfig
    grid = tuner.fit()
    assert grid.num_errors == 0 and grid.experiment_path.startswith(storage)
    assert type(tune.Tuner.restore(grid.experiment_path, _one_report).run_config) is tune.RunConfig
    trainer = TorchTrainer(lambda: None, scaling_config=ScalingConfig(num_workers=1),
                           run_config=train.RunConfig(name="mine"))
    assert tune.Tuner(trainer).run_config.name == "mine"  # a trainer's own, as in Ray


def _slow_reports(config):
    for i in range(100):
        time.sleep(0.1)
        tune.report({"i": i})


def test_tune_config_takes_a_timedelta_budget_and_no_concurrency_limit_of_zero_as_ray(storage):
    """Ray 2.60's TuneConfig takes ``time_budget_s=datetime.timedelta(...)`` and ``max_concurrent_trials=0``
    (no limit); muster's failed on the first with a bare TypeError and refused the second."""
    import datetime

    config = tune.TuneConfig(num_samples=2, time_budget_s=datetime.timedelta(seconds=1.5), max_concurrent_trials=0)
    assert (config.time_budget_s, config.max_concurrent_trials) == (1.5, None)
    started = time.monotonic()
    grid = tune.Tuner(_slow_reports, tune_config=config,
                      run_config=tune.RunConfig(storage_path=storage, verbose=0)).fit()
    assert time.monotonic() - started < 8  # the budget ended both trials, 100 steps of 0.1 s each
    assert len(grid) == 2 and grid.num_errors == 0
    assert all(0 < r.metrics["training_iteration"] < 100 for r in grid)
    with pytest.raises(InvalidTypeError, match=r"time_budget_s='5'\): pass a number of seconds or a datetime"):
        tune.TuneConfig(time_budget_s="5")
    with pytest.raises(InvalidArgumentError, match=r"max_concurrent_trials=-1\): use an integer >= 1, or None"):
        tune.TuneConfig(max_concurrent_trials=-1)
