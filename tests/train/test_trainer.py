"""TorchTrainer.fit() on real worker processes: context, environment, process group, Result."""

from __future__ import annotations

import os

import pytest
import torch

import muster.train as train
from muster.train import Checkpoint, Result, RunConfig, ScalingConfig
from muster.train.torch import TorchTrainer

ENV_KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT")


def report_identity(config):
    import torch.distributed as dist

    ctx = train.get_context()
    train.report(
        {
            "ctx": [
                ctx.get_world_rank(),
                ctx.get_world_size(),
                ctx.get_local_rank(),
                ctx.get_local_world_size(),
                ctx.get_node_rank(),
            ],
            "name": ctx.get_experiment_name(),
            "run_dir": ctx.get_run_dir(),
            "attempt": ctx.get_attempt(),
            "env": {k: os.environ.get(k) for k in ENV_KEYS},
            "omp": os.environ.get("OMP_NUM_THREADS"),
            "threads": torch.get_num_threads(),
            "flag": os.environ.get("MUSTER_TEST_DRIVER_FLAG"),
            "dist": [dist.is_initialized(), dist.get_backend(), dist.get_rank(), dist.get_world_size()],
            "pid": os.getpid(),
            "config": config,
        }
    )


def by_rank(result: Result) -> dict[int, dict]:
    return {row["_rank"]: row for row in result.all_reports}


def test_context_env_and_process_group_on_three_workers(fit, storage, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("MUSTER_TEST_DRIVER_FLAG", "from-driver")
    result = fit(report_identity, workers=3, config={"lr": 0.1}, name="ident")
    rows = by_rank(result)
    assert sorted(rows) == [0, 1, 2]
    ports = set()
    for rank, row in rows.items():
        assert row["ctx"] == [rank, 3, rank, 3, 0]
        assert row["name"] == "ident"
        assert row["run_dir"] == os.path.join(storage, "ident")
        assert row["attempt"] == 0
        env = row["env"]
        assert env["RANK"] == str(rank) and env["LOCAL_RANK"] == str(rank)
        assert env["WORLD_SIZE"] == "3" and env["LOCAL_WORLD_SIZE"] == "3" and env["NODE_RANK"] == "0"
        assert env["MASTER_ADDR"] == "127.0.0.1"
        assert env["MASTER_PORT"].isdigit() and int(env["MASTER_PORT"]) > 0
        ports.add(env["MASTER_PORT"])
        assert row["omp"] == "1" and row["threads"] == 1
        assert row["flag"] == "from-driver"
        assert row["dist"] == [True, "gloo", rank, 3]
        assert row["config"] == {"lr": 0.1}
    assert len(ports) == 1  # one rendezvous
    assert len({row["pid"] for row in rows.values()}) == 3
    assert os.getpid() not in {row["pid"] for row in rows.values()}


def test_omp_num_threads_follows_cpus_per_worker(fit, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    scaling = ScalingConfig(num_workers=2, resources_per_worker={"CPU": 2})
    rows = by_rank(fit(report_identity, scaling=scaling))
    assert [rows[r]["omp"] for r in (0, 1)] == ["2", "2"]
    assert [rows[r]["threads"] for r in (0, 1)] == [2, 2]


def test_driver_omp_num_threads_is_respected(fit, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    rows = by_rank(fit(report_identity))
    assert [rows[r]["omp"] for r in (0, 1)] == ["3", "3"]


def reports_my_env():
    import os

    train.report({"level": os.environ.get("MY_LEVEL"), "rank": train.get_context().get_world_rank()})


def test_rays_run_and_scaling_options_reach_the_workers_or_say_they_do_nothing(fit):
    """worker_runtime_env env_vars, trainer_resources, sync_config... were TypeErrors (unknown keywords)."""
    with pytest.warns(UserWarning, match="sync_config=...\\) has no effect"):
        result = fit(reports_my_env, worker_runtime_env={"env_vars": {"MY_LEVEL": "7"}},
                     scaling=ScalingConfig(num_workers=2, trainer_resources={"CPU": 0}),
                     sync_config=object())
    assert sorted((r["rank"], r["level"]) for r in result.all_reports) == [(0, "7"), (1, "7")]
    with pytest.warns(UserWarning, match="not reserved"):
        assert ScalingConfig(num_workers=2, trainer_resources={"CPU": 1}).num_cpus_per_worker == 1.0
    with pytest.raises(ValueError, match="storage_path='/tmp/x' instead"):
        RunConfig(local_dir="/tmp/x")


def all_reduce_loop():
    import torch.distributed as dist

    rank = train.get_context().get_world_rank()
    t = torch.tensor([float(rank + 1), 10.0 * (rank + 1)])
    dist.all_reduce(t)
    gathered = [torch.zeros(1) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, torch.tensor([float(rank)]))
    train.report({"sum": t.tolist(), "gathered": [g.item() for g in gathered]})


def test_all_reduce_across_three_workers_and_no_arg_function(fit):
    result = fit(all_reduce_loop, workers=3, config={"ignored": True})
    assert len(result.all_reports) == 3
    for row in result.all_reports:
        assert row["sum"] == [6.0, 60.0]
        assert row["gathered"] == [0.0, 1.0, 2.0]


def test_one_worker_without_config_gets_empty_dict(fit):
    result = fit(report_identity, workers=1)
    assert result.metrics["config"] == {}
    assert result.metrics["ctx"] == [0, 1, 0, 1, 0]
    assert result.metrics["dist"] == [True, "gloo", 0, 1]


def five_reports_two_checkpoints(config):
    import tempfile

    rank = train.get_context().get_world_rank()
    for epoch in range(5):
        metrics = {"epoch": epoch, "loss": 10.0 - epoch, "rank": rank, "opt": {"lr": 0.5}}
        if rank == 0 and epoch in (1, 3):
            with tempfile.TemporaryDirectory() as tmp:
                torch.save({"epoch": epoch}, os.path.join(tmp, "model.pt"))
                train.report(metrics, checkpoint=Checkpoint.from_directory(tmp))
        else:
            train.report(metrics)


def test_result_metrics_are_rank0_latest_even_without_checkpoint(fit, storage):
    result = fit(five_reports_two_checkpoints, name="five")
    assert result.error is None
    assert result.path == os.path.join(storage, "five")
    # The last report (epoch 4) had no checkpoint: Ray would give None here.
    # Exactly what was reported, as Ray Train V2's (no training_iteration, timestamp, checkpoint_dir_name).
    assert result.metrics == {"epoch": 4, "loss": 6.0, "rank": 0, "opt": {"lr": 0.5}}
    # The latest committed checkpoint is round 4 (epoch 3).
    assert result.checkpoint.path.endswith("checkpoint_000004")
    with result.checkpoint.as_directory() as folder:
        assert torch.load(os.path.join(folder, "model.pt"))["epoch"] == 3
    df = result.metrics_dataframe
    assert list(df.columns) == ["epoch", "loss", "rank", "opt"]  # a nested dict stays one column, as Ray V2's
    assert list(df["epoch"]) == [0, 1, 2, 3, 4]
    assert set(df["rank"]) == {0} and list(df["opt"]) == [{"lr": 0.5}] * 5
    everyone = result.all_metrics_dataframe
    assert len(everyone) == 10 and sorted(set(everyone["_rank"])) == [0, 1]
    assert sorted(everyone.columns) == ["_attempt", "_rank", "epoch", "loss", "opt", "rank"]
    # The run's record keeps the rounds and checkpoint names (result.json, the run store).
    assert [r["checkpoint_dir_name"] for r in result.all_reports if r["_rank"] == 0] == [
        None, "checkpoint_000002", None, "checkpoint_000004", None,
    ]
    # Newest first without a score attribute.
    assert [c.path.rsplit("/", 1)[-1] for c, _ in result.best_checkpoints] == [
        "checkpoint_000004", "checkpoint_000002",
    ]
    assert [m for _, m in result.best_checkpoints] == [
        {"epoch": e, "loss": 10.0 - e, "rank": 0, "opt": {"lr": 0.5}} for e in (3, 1)
    ]


def test_result_from_path_reads_the_same_run(fit, storage):
    result = fit(five_reports_two_checkpoints, name="five")
    back = Result.from_path(result.path)
    assert back.metrics == result.metrics
    assert back.checkpoint == result.checkpoint
    assert [c for c, _ in back.best_checkpoints] == [c for c, _ in result.best_checkpoints]
    assert [m for _, m in back.best_checkpoints] == [m for _, m in result.best_checkpoints]
    assert list(back.metrics_dataframe["epoch"]) == [0, 1, 2, 3, 4]
    assert len(back.all_reports) == 10
    assert back.path == result.path


def reports_its_own_iteration_and_timestamp():
    import tempfile

    for step in (7, 8):
        metrics = {"training_iteration": step, "loss": 1.0 / step, "timestamp": 1000 + step}
        if step == 8 and train.get_context().get_world_rank() == 0:
            with tempfile.TemporaryDirectory() as tmp:
                torch.save({"step": step}, os.path.join(tmp, "model.pt"))
                train.report(metrics, checkpoint=Checkpoint.from_directory(tmp))
        else:
            train.report(metrics)


def test_a_runs_own_training_iteration_and_timestamp_are_kept(fit, storage):
    # Ray Train V2 keeps the reported dict as it is: the run's own training_iteration/timestamp
    # are what its Result shows, not the controller's round and clock.
    from muster.observe.loggers import CSVLoggerCallback

    result = fit(reports_its_own_iteration_and_timestamp, name="own", callbacks=[CSVLoggerCallback()])
    assert result.error is None
    with open(os.path.join(result.path, "progress.csv")) as f:  # the loggers see no bookkeeping key
        assert f.readline().strip().split(",") == ["training_iteration", "timestamp", "_rank", "_attempt", "loss"]
    assert result.metrics == {"training_iteration": 8, "loss": 0.125, "timestamp": 1008}
    df = result.metrics_dataframe
    assert list(df.columns) == ["training_iteration", "loss", "timestamp"]
    assert list(df["training_iteration"]) == [7, 8] and list(df["timestamp"]) == [1007, 1008]
    assert [m for _, m in result.best_checkpoints] == [result.metrics]
    back = Result.from_path(result.path)
    assert back.metrics == result.metrics and [m for _, m in back.best_checkpoints] == [result.metrics]
    # The run's record still has the controller's rounds (checkpoint folders are named by them).
    assert result.checkpoint.path.endswith("checkpoint_000002")


def test_callbacks_see_reports_checkpoints_and_the_end(storage):
    seen = {"reports": [], "checkpoints": [], "end": []}

    class Recorder:
        def on_report(self, row):
            seen["reports"].append((row["_rank"], row["epoch"]))

        def on_checkpoint(self, checkpoint, metrics):
            seen["checkpoints"].append((os.path.basename(checkpoint.path), metrics["epoch"]))

        def on_run_end(self, result):
            seen["end"].append(result.metrics["epoch"])

    class RayHooks(train.UserCallback):  # Ray V2's interface, beside muster's own hooks
        def after_report(self, run_context, metrics, checkpoint):
            assert run_context.get_run_config().name == "cb" and run_context.scaling_config.num_workers == 2
            assert type(run_context.backend_config).__name__ == "TorchConfig"  # as Ray's: the trainer's config
            seen["rounds"].append(([(m["rank"], m["epoch"]) for m in metrics],
                                   checkpoint and os.path.basename(checkpoint.path)))

    seen["rounds"] = []
    TorchTrainer(
        five_reports_two_checkpoints,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="cb", storage_path=storage, verbose=0, callbacks=[Recorder(), RayHooks()]),
    ).fit()
    assert sorted(seen["reports"]) == sorted((r, e) for r in (0, 1) for e in range(5))
    assert seen["checkpoints"] == [("checkpoint_000002", 1), ("checkpoint_000004", 3)]
    assert seen["end"] == [4]
    assert seen["rounds"] == [
        ([(0, e), (1, e)], f"checkpoint_00000{e + 1}" if e in (1, 3) else None) for e in range(5)
    ]


def noisy_loop():
    for i in range(3):
        train.report({"i": i})


def test_verbose_levels(fit, capsys):
    fit(noisy_loop, workers=1, name="quiet", verbose=0)
    assert "[muster]" not in capsys.readouterr().out
    fit(noisy_loop, workers=1, name="loud", verbose=2)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[muster] iter ")]
    assert len(lines) == 3 and "i=2" in lines[-1]


def test_worker_api_outside_a_worker_says_so():
    for call in (lambda: train.report({"x": 1}), train.get_checkpoint, train.get_context):
        with pytest.raises(RuntimeError, match="train_loop_per_worker"):
            call()


def test_trainer_argument_errors():
    with pytest.raises(TypeError, match="training"):
        TorchTrainer("not a function")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="dict"):
        TorchTrainer(noisy_loop, train_loop_config=[1, 2])  # type: ignore[arg-type]
    # older Ray docs pass metadata={"preprocessor_pkl": ...}: it was a bare "unexpected keyword argument"
    with pytest.raises(ValueError, match=r"TorchTrainer\(metadata=...\): Ray 2.60 removed .*set_metadata"):
        TorchTrainer(noisy_loop, metadata={"preprocessor_pkl": b"x"})


def test_default_run_name_and_storage_path(monkeypatch, tmp_path):
    monkeypatch.setenv("MUSTER_STORAGE_PATH", str(tmp_path / "default_root"))
    result = TorchTrainer(noisy_loop, run_config=RunConfig(verbose=0)).fit()
    parent, name = os.path.split(result.path)
    assert parent == str(tmp_path / "default_root")
    assert name.startswith("TorchTrainer_")
    assert os.path.exists(os.path.join(result.path, "result.json"))
    assert result.metrics["i"] == 2
