"""Checkpoints written by workers: merged rounds, rank-0-only reporting, atomic commit, retention, and what
get_checkpoint() returns as a run reports."""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time

import pytest
import torch

import muster.train as train
from muster.train import Checkpoint, CheckpointConfig, Result
from muster.train.storage import MANIFEST


def checkpoint_dirs(run_dir: str) -> list[str]:
    return sorted(d for d in os.listdir(run_dir) if d.startswith("checkpoint_"))


def listing(folder: str) -> list[str]:
    """A checkpoint folder's entries, less muster's own resume-state folder ``.muster/``."""
    return sorted(n for n in os.listdir(folder) if n != ".muster")


def each_rank_writes_a_shard(config):
    import torch.distributed as dist

    rank = train.get_context().get_world_rank()
    for epoch in range(config["epochs"]):
        dist.barrier()
        with tempfile.TemporaryDirectory() as tmp:
            torch.save({"rank": rank, "epoch": epoch}, os.path.join(tmp, f"shard_{rank}.pt"))
            train.report({"epoch": epoch, "rank": rank}, checkpoint=Checkpoint.from_directory(tmp))


def test_every_ranks_files_merge_into_one_checkpoint(fit):
    result = fit(each_rank_writes_a_shard, workers=3, config={"epochs": 2})
    names = checkpoint_dirs(result.path)
    assert names == ["checkpoint_000001", "checkpoint_000002"]
    for epoch, name in enumerate(names):
        folder = os.path.join(result.path, name)
        assert listing(folder) == [MANIFEST, "shard_0.pt", "shard_1.pt", "shard_2.pt"]
        for rank in range(3):
            assert torch.load(os.path.join(folder, f"shard_{rank}.pt")) == {"rank": rank, "epoch": epoch}
        manifest = json.load(open(os.path.join(folder, MANIFEST)))
        assert manifest["ranks"] == [0, 1, 2]
        assert sorted(f for f in manifest["files"] if not f.startswith(".muster/")) == [
            "shard_0.pt", "shard_1.pt", "shard_2.pt",
        ]
        assert manifest["metrics"]["rank"] == 0  # the round's metrics are the lowest rank's
    assert result.checkpoint.path == os.path.join(result.path, "checkpoint_000002")
    assert not os.path.exists(os.path.join(result.path, ".staging"))  # cleared at the end of each attempt


def some_ranks_report(config):
    import torch.distributed as dist

    rank = train.get_context().get_world_rank()
    for epoch in range(3):
        dist.barrier()
        if rank in config["reporters"]:
            with tempfile.TemporaryDirectory() as tmp:
                with open(os.path.join(tmp, f"part_{rank}.txt"), "w") as f:
                    f.write(f"{rank}:{epoch}")
                train.report({"epoch": epoch, "rank": rank}, checkpoint=Checkpoint.from_directory(tmp))


def test_a_subset_of_ranks_reporting_merges_their_files(fit):
    result = fit(some_ranks_report, workers=3, config={"reporters": [1, 2]})
    names = checkpoint_dirs(result.path)
    assert names == ["checkpoint_000001", "checkpoint_000002", "checkpoint_000003"]
    for epoch, name in enumerate(names):
        folder = os.path.join(result.path, name)
        assert listing(folder) == [MANIFEST, "part_1.txt", "part_2.txt"]
        assert open(os.path.join(folder, "part_2.txt")).read() == f"2:{epoch}"
    # Rank 0 never reported: the result's metrics are the lowest reporting rank's.
    assert result.metrics["rank"] == 1 and result.metrics["epoch"] == 2


def rank0_only_seed_pattern(config):
    # The seed's pattern: every rank trains in step, only rank 0 saves and reports.
    import torch.distributed as dist

    model = train.torch.prepare_model(torch.nn.Linear(2, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(config["epochs"]):
        opt.zero_grad()
        model(torch.ones(4, 2)).sum().backward()
        opt.step()
        dist.barrier()
        if train.get_context().get_world_rank() == 0:
            with tempfile.TemporaryDirectory() as tmpdir:
                torch.save(
                    {"model": model.module.state_dict(), "epoch": epoch},
                    os.path.join(tmpdir, "checkpoint.pt"),
                )
                train.report({"loss": 1.0 / (epoch + 1), "epoch": epoch},
                             checkpoint=Checkpoint.from_directory(tmpdir))


@pytest.mark.timeout(30)
def test_rank0_only_reporting_commits_every_round_and_never_hangs(fit):
    import muster.train.torch  # noqa: F401  (train.torch inside the loop)

    start = time.monotonic()
    result = fit(rank0_only_seed_pattern, workers=3, config={"epochs": 3})
    assert time.monotonic() - start < 20
    assert checkpoint_dirs(result.path) == ["checkpoint_000001", "checkpoint_000002", "checkpoint_000003"]
    for i, name in enumerate(checkpoint_dirs(result.path)):
        assert listing(os.path.join(result.path, name)) == [MANIFEST, "checkpoint.pt"]
        assert torch.load(os.path.join(result.path, name, "checkpoint.pt"))["epoch"] == i
    assert result.metrics["epoch"] == 2
    assert len(result.all_reports) == 3


def rank0_only_then_watch_commit(config):
    # Rank 0 reports once, then waits until the driver has committed that round
    # while the attempt is still running (no later report, no end of attempt).
    rank = train.get_context().get_world_rank()
    if rank == 0:
        with tempfile.TemporaryDirectory() as tmp:
            open(os.path.join(tmp, "a.txt"), "w").close()
            train.report({"epoch": 0}, checkpoint=Checkpoint.from_directory(tmp))
        with tempfile.TemporaryDirectory() as tmp:
            open(os.path.join(tmp, "b.txt"), "w").close()
            train.report({"epoch": 1}, checkpoint=Checkpoint.from_directory(tmp))
        run_dir = train.get_context().get_run_dir()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if os.path.exists(os.path.join(run_dir, "checkpoint_000002", MANIFEST)):
                train.report({"epoch": 2, "seen_commit": True})
                return
            time.sleep(0.05)
        train.report({"epoch": 2, "seen_commit": False})


def test_rank0_only_rounds_commit_while_training_goes_on(fit):
    # After one round shows rank 0 alone reports, later rounds commit at once.
    result = fit(rank0_only_then_watch_commit, workers=2)
    assert result.metrics == {**result.metrics, "epoch": 2, "seen_commit": True}


def big_multi_file_rounds(config):
    import torch.distributed as dist

    rank = train.get_context().get_world_rank()
    for epoch in range(config["epochs"]):
        dist.barrier()
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(config["files"]):
                with open(os.path.join(tmp, f"r{rank}_{i}.bin"), "wb") as f:
                    f.write(os.urandom(256 * 1024))
            train.report({"epoch": epoch}, checkpoint=Checkpoint.from_directory(tmp))


def test_checkpoint_folders_appear_complete_or_not_at_all(fit, storage):
    run_dir = os.path.join(storage, "atomic")
    incomplete: list[tuple[str, list[str]]] = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            try:
                names = os.listdir(run_dir)
            except FileNotFoundError:
                continue
            for name in names:
                if not name.startswith("checkpoint_"):
                    continue
                folder = os.path.join(run_dir, name)
                try:
                    files = listing(folder)
                except FileNotFoundError:
                    continue
                if MANIFEST not in files or len(files) != 1 + 2 * 4:
                    incomplete.append((name, files))
            time.sleep(0.002)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        result = fit(big_multi_file_rounds, workers=2, config={"epochs": 4, "files": 4}, name="atomic")
    finally:
        stop.set()
        watcher.join()
    assert incomplete == []
    assert checkpoint_dirs(result.path) == [f"checkpoint_00000{i}" for i in range(1, 5)]
    for name in checkpoint_dirs(result.path):
        assert os.path.exists(os.path.join(result.path, name, MANIFEST))
    assert not os.path.exists(os.path.join(result.path, ".staging"))


def losses_per_epoch(config):
    import torch.distributed as dist

    rank = train.get_context().get_world_rank()
    for epoch, loss in enumerate(config["losses"]):
        dist.barrier()  # ranks in step, as a DDP loop keeps them
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, f"w{rank}.txt"), "w") as f:
                f.write(str(epoch))
            train.report({"loss": loss, "epoch": epoch, "acc": -loss},
                         checkpoint=Checkpoint.from_directory(tmp))


def test_retention_keeps_best_two_and_latest(fit):
    losses = [0.5, 0.1, 0.4, 0.2, 0.9]  # best: epochs 1 and 3; latest: epoch 4
    cfg = CheckpointConfig(num_to_keep=2, checkpoint_score_attribute="loss", checkpoint_score_order="min")
    result = fit(losses_per_epoch, workers=2, config={"losses": losses}, checkpoint_config=cfg)
    on_disk = checkpoint_dirs(result.path)
    assert on_disk == ["checkpoint_000002", "checkpoint_000004", "checkpoint_000005"]
    # the best two, as Ray's: the latest is kept on disk and is result.checkpoint, but it is no best one
    assert [m["epoch"] for _, m in result.best_checkpoints] == [1, 3]
    assert [c.path for c, _ in result.best_checkpoints] == [os.path.join(result.path, d) for d in
                                                             ("checkpoint_000002", "checkpoint_000004")]
    assert [m["epoch"] for _, m in Result.from_path(result.path).best_checkpoints] == [1, 3]
    assert result.checkpoint.path.endswith("checkpoint_000005")
    for ckpt, metrics in [*result.best_checkpoints, (result.checkpoint, {"epoch": 4})]:
        with ckpt.as_directory() as folder:
            assert listing(folder) == [MANIFEST, "w0.txt", "w1.txt"]
            assert open(os.path.join(folder, "w1.txt")).read() == str(metrics["epoch"])

    assert result.get_best_checkpoint("loss", "min").path.endswith("checkpoint_000002")
    assert result.get_best_checkpoint("loss", "max").path.endswith("checkpoint_000004")  # among the best, as Ray
    assert result.get_best_checkpoint("acc", "max").path.endswith("checkpoint_000002")
    with pytest.raises(ValueError, match="mode"):
        result.get_best_checkpoint("loss", "lowest")
    for error in (ValueError, RuntimeError):  # Ray's is a RuntimeError
        with pytest.raises(error, match="metric='nope'.*reported metrics are"):
            result.get_best_checkpoint("nope", "min")

    back = Result.from_path(result.path)
    assert [c.path for c, _ in back.best_checkpoints] == [c.path for c, _ in result.best_checkpoints]
    assert back.get_best_checkpoint("loss", "min") == result.get_best_checkpoint("loss", "min")
    # Every report is kept in the metrics, deleted checkpoints or not.
    assert list(back.metrics_dataframe["loss"]) == losses


def test_best_checkpoint_of_a_result_without_one_raises_as_rays(tmp_path):
    """Ray raises RuntimeError("No checkpoint exists...") where muster returned None."""
    from muster import tune

    for cls in (Result, tune.Result):
        with pytest.raises(RuntimeError, match=r"metric='loss', mode='min'\): the run at .* has no checkpoint"):
            cls(metrics={"loss": 1.0}, checkpoint=None, path=str(tmp_path)).get_best_checkpoint("loss", "min")


def test_retention_without_score_keeps_newest(fit):
    result = fit(losses_per_epoch, workers=1, config={"losses": [3, 2, 1, 0]},
                 checkpoint_config=CheckpointConfig(num_to_keep=1))
    assert checkpoint_dirs(result.path) == ["checkpoint_000004"]
    assert len(result.best_checkpoints) == 1
    assert result.metrics_dataframe["loss"].tolist() == [3, 2, 1, 0]


def dict_checkpoint_loop(config):
    model = torch.nn.Linear(3, 1)
    with torch.no_grad():
        model.weight.fill_(float(config["w"]))
    if train.get_context().get_world_rank() == 0:
        train.report({"w": config["w"]}, checkpoint=Checkpoint.from_dict({"model": model.state_dict(), "epoch": 0}))


def test_from_dict_checkpoint_reported_by_a_worker(fit):
    result = fit(dict_checkpoint_loop, workers=2, config={"w": 2.5})
    state = result.checkpoint.to_dict()
    assert state["epoch"] == 0
    assert torch.equal(state["model"]["weight"], torch.full((1, 3), 2.5))


def out_of_step_reports(config):
    # No collective between reports: rank 1 runs ahead of rank 0 once both have made their
    # first report (a rank whose first report comes 4 rounds after another's is taken for
    # one that never reports: docs/fault-tolerance.md).
    import torch.distributed as dist

    rank = train.get_context().get_world_rank()
    dist.barrier()
    for epoch in range(config["epochs"]):
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, f"w{rank}.txt"), "w") as f:
                f.write(str(epoch))
            train.report({"epoch": epoch, "rank": rank}, checkpoint=Checkpoint.from_directory(tmp))
        if epoch == 0:
            dist.barrier()
        if rank == 0:
            time.sleep(0.05)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_out_of_step_ranks_lose_no_checkpoint_files(fit):
    result = fit(out_of_step_reports, workers=2, config={"epochs": 4})
    names = checkpoint_dirs(result.path)
    assert names == [f"checkpoint_00000{i}" for i in range(1, 5)]
    assert [c.path for c, _ in result.best_checkpoints] == [os.path.join(result.path, n) for n in reversed(names)]
    for epoch, name in enumerate(names):
        folder = os.path.join(result.path, name)
        assert listing(folder) == [MANIFEST, "w0.txt", "w1.txt"]
        assert open(os.path.join(folder, "w0.txt")).read() == str(epoch)
        assert json.load(open(os.path.join(folder, MANIFEST)))["ranks"] == [0, 1]
    assert not os.path.exists(os.path.join(result.path, ".staging"))


def slow_rank0_saves_fast_rank1_does_not(config):
    # No collective after the first round: rank 1 (metrics only) races ahead of rank 0 (which saves).
    import torch.distributed as dist

    rank = train.get_context().get_world_rank()
    for epoch in range(config["epochs"]):
        if rank == 0:
            with tempfile.TemporaryDirectory() as tmp:
                torch.save({"epoch": epoch}, os.path.join(tmp, "model.pt"))
                train.report({"epoch": epoch}, checkpoint=Checkpoint.from_directory(tmp))
            time.sleep(0.05)
        else:
            train.report({"epoch": epoch})
        if epoch == 0:
            dist.barrier()


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_rounds_wait_for_the_slow_rank_that_saves(fit):
    result = fit(slow_rank0_saves_fast_rank1_does_not, workers=2, config={"epochs": 4})
    names = checkpoint_dirs(result.path)
    assert names == [f"checkpoint_00000{i}" for i in range(1, 5)]
    for epoch, name in enumerate(names):
        assert torch.load(os.path.join(result.path, name, "model.pt")) == {"epoch": epoch}
    assert result.checkpoint.path.endswith("checkpoint_000004")
    assert [r["checkpoint_dir_name"] for r in result.all_reports if r["_rank"] == 0] == names


def reports_a_folder_holding_a_socket(config):
    import socket

    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "model.pt"), "w") as f:
            f.write("weights")
        os.makedirs(os.path.join(tmp, "run"))
        server = socket.socket(socket.AF_UNIX)
        server.bind(os.path.join(tmp, "run", "ctl.sock"))  # as an engine's runtime folder in the temp dir holds
        try:
            for mode in ("sync", "async"):
                train.report({"mode": mode}, checkpoint=Checkpoint.from_directory(tmp), checkpoint_upload_mode=mode)
        finally:
            server.close()


def test_a_checkpoint_keeps_regular_files_only(fit):
    """Ray's getting-started guide checkpoints tempfile.gettempdir() itself, which holds a running
    engine's sockets; before, the copy failed on one: '[Errno 6] No such device or address'."""
    result = fit(reports_a_folder_holding_a_socket, workers=1)
    assert [m["mode"] for _, m in result.best_checkpoints] == ["async", "sync"]
    for ckpt, _ in result.best_checkpoints:
        assert listing(ckpt.path) == [MANIFEST, "model.pt"]


def checkpoint_the_trial_dir(config):
    # The Ray skill guide's Workflow 4: Checkpoint.from_directory(get_context().get_trial_dir())
    import torch.distributed as dist

    rank = train.get_context().get_world_rank()
    for epoch in range(2):
        checkpoint = Checkpoint.from_directory(config.get("sub", "") or train.get_context().get_trial_dir())
        torch.save({"epoch": epoch}, os.path.join(checkpoint.path, f"model_{rank}.pt"))
        dist.barrier()  # the folder is shared: each rank's copy holds both ranks' files of this epoch
        train.report({"epoch": epoch}, checkpoint=checkpoint)
        dist.barrier()


def test_the_run_folder_as_a_checkpoint_leaves_out_the_runs_own_entries(fit, storage):
    # Copying the run folder into its own staging folder nested the run inside each checkpoint, round after
    # round. Ray's copy of a trial folder leaves its checkpoints out; so does muster's.
    result = fit(checkpoint_the_trial_dir, workers=2, name="selfcopy")
    run_dir = os.path.join(storage, "selfcopy")
    assert checkpoint_dirs(run_dir) == ["checkpoint_000001", "checkpoint_000002"]
    for name in checkpoint_dirs(run_dir):
        entries = listing(os.path.join(run_dir, name))
        assert "model_0.pt" in entries and "model_1.pt" in entries
        assert not [e for e in entries if e.startswith("checkpoint_") or e in (".staging", ".muster_run.json")]
    with result.checkpoint.as_directory() as folder:
        assert torch.load(os.path.join(folder, "model_1.pt")) == {"epoch": 1}
    # a folder that holds the run folder (here the storage root) is refused, naming the fix
    with pytest.raises(train.TrainingFailedError, match="holds the run's own folder") as info:
        fit(checkpoint_the_trial_dir, workers=1, name="selfcopy2", config={"sub": storage})
    assert "TemporaryDirectory" in str(info.value)


def watch_get_checkpoint(config):
    rank = train.get_context().get_world_rank()
    seen = []

    def look(label):
        ckpt = train.get_checkpoint()
        seen.append([label, ckpt.path if ckpt is not None else None])

    def save(mode="sync"):
        folder = tempfile.mkdtemp()
        with open(os.path.join(folder, f"part_{rank}.txt"), "w") as f:
            f.write(str(rank))
        return dict(checkpoint=Checkpoint.from_directory(folder), checkpoint_upload_mode=mode,
                    delete_local_checkpoint_after_upload=True)

    look("start")
    train.report({"round": 1}, **save())
    look("after a checkpoint")
    train.report({"round": 2})
    look("after no checkpoint")
    train.report({"round": 3}, **(save() if rank == 0 else {}))  # rank 1 passes none
    look("after rank 0's alone")
    train.report({"round": 4}, **save("async"))
    train.report({"round": 5})  # a sync report waits for the async upload before it
    look("after an async one")
    with open(os.path.join(config["dir"], f"rank_{rank}.json"), "w") as f:
        json.dump(seen, f)


def test_get_checkpoint_becomes_the_one_this_rank_last_reported(storage, tmp_path):
    # Ray 2.60: "Access the latest reported checkpoint"; each rank's becomes the persisted folder of the last
    # checkpoint it reported (the same path on every rank), where muster's stayed the attempt's start.
    from muster.train import RunConfig, ScalingConfig
    from muster.train.torch import TorchTrainer

    def run(name, resume_from=None):
        out = tmp_path / name
        out.mkdir()
        result = TorchTrainer(watch_get_checkpoint, train_loop_config={"dir": str(out)},
                              scaling_config=ScalingConfig(num_workers=2), resume_from_checkpoint=resume_from,
                              run_config=RunConfig(name=name, storage_path=storage, verbose=0)).fit()
        return result, [json.load(open(out / f"rank_{r}.json")) for r in range(2)]

    first, seen = run("first")
    at = lambda n: os.path.join(first.path, f"checkpoint_{n:06d}")  # noqa: E731
    assert seen[0] == [["start", None], ["after a checkpoint", at(1)], ["after no checkpoint", at(1)],
                       ["after rank 0's alone", at(3)], ["after an async one", at(4)]]
    assert seen[1] == [["start", None], ["after a checkpoint", at(1)], ["after no checkpoint", at(1)],
                       ["after rank 0's alone", at(1)], ["after an async one", at(4)]]
    assert first.checkpoint.path == at(4)
    # resume_from_checkpoint is the start; the run's own reports then take over
    second, seen = run("second", resume_from=first.checkpoint)
    assert [row[1] for row in seen[0][:2]] == [at(4), os.path.join(second.path, "checkpoint_000001")]
    assert seen[0][:3] == seen[1][:3]  # the same on both ranks
