"""report(..., checkpoint_upload_mode="async"): returns at once, commits in order, loses nothing."""

from __future__ import annotations

import json
import os

import pytest

from muster.train import RunConfig, ScalingConfig, TrainingFailedError
from muster.train.storage import MANIFEST
from muster.train.torch import TorchTrainer


def loop(config):
    import shutil
    import tempfile
    import time

    import muster.train as train
    from muster.train import Checkpoint

    rank = train.get_context().get_world_rank()
    stalls = []
    for step in range(6):
        folder = tempfile.mkdtemp()
        if rank == 0:
            with open(os.path.join(folder, "blob.bin"), "wb") as f:
                f.write(os.urandom(8 * 1024 * 1024))
        with open(os.path.join(folder, f"step_{rank}.txt"), "w") as f:
            f.write(str(step))
        mode = "sync" if step == 3 else "async"  # a sync report in the middle waits for the async ones
        t0 = time.perf_counter()
        train.report({"step": step, "mode": mode}, checkpoint=Checkpoint.from_directory(folder),
                     checkpoint_upload_mode=mode)
        stalls.append((mode, time.perf_counter() - t0))
        shutil.rmtree(folder)  # allowed at once: the files were snapshotted
    if rank == 0:
        with open(config["out"], "w") as f:
            f.write(repr(stalls))


def test_async_reports_commit_in_order_and_completely(storage, tmp_path):
    out = tmp_path / "stalls.txt"
    result = TorchTrainer(
        loop, train_loop_config={"out": str(out)}, scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=storage, verbose=0),
    ).fit()
    ckpts = sorted(result.best_checkpoints, key=lambda cm: cm[1]["step"])
    assert [m["step"] for _, m in ckpts] == list(range(6))  # every round committed, in order
    for ckpt, metrics in ckpts:
        names = set(os.listdir(ckpt.path))
        assert {"blob.bin", "step_0.txt", "step_1.txt"} <= names  # both ranks' files merged
        assert open(os.path.join(ckpt.path, "step_0.txt")).read() == str(metrics["step"])
        assert os.path.getsize(os.path.join(ckpt.path, "blob.bin")) == 8 * 1024 * 1024
    # Commit order, as the manifests record it (written at each commit, in the driver).
    manifests = [json.load(open(os.path.join(ckpt.path, MANIFEST))) for ckpt, _ in ckpts]
    assert [m["round"] for m in manifests] == list(range(1, 7))
    commit_times = [m["committed_at"] for m in manifests]
    assert commit_times == sorted(commit_times)
    assert all(m["ranks"] == [0, 1] for m in manifests)
    stalls = eval(out.read_text())
    assert [mode for mode, _ in stalls] == ["async"] * 3 + ["sync"] + ["async"] * 2


def test_bad_upload_mode_is_a_clear_error(storage):
    def bad():
        import muster.train as train

        train.report({"x": 1}, checkpoint_upload_mode="later")

    with pytest.raises(TrainingFailedError, match="checkpoint_upload_mode='later'.*'sync'.*'async'"):
        TorchTrainer(bad, run_config=RunConfig(storage_path=storage, verbose=0)).fit()


def loop_with_upload_fn(config):
    """Ray's checkpoint_upload_fn pattern: the checkpoint's files are still being written when report()
    returns (an async save), and the function waits for them before handing the checkpoint back."""
    import tempfile
    import threading
    import time

    import muster.train as train
    from muster.train import Checkpoint, CheckpointUploadMode

    rank = train.get_context().get_world_rank()
    names = []
    for step in range(3):
        folder = tempfile.mkdtemp()
        written = threading.Event()

        def save(folder=folder, step=step, written=written):
            time.sleep(0.3)
            with open(os.path.join(folder, f"rank_{rank}.txt"), "w") as f:
                f.write(str(step))
            written.set()

        def wait_for_save(checkpoint, checkpoint_dir_name, written=written):
            written.wait()
            names.append(checkpoint_dir_name)
            return checkpoint

        threading.Thread(target=save).start()
        mode = CheckpointUploadMode.ASYNC if step < 2 else CheckpointUploadMode.SYNC
        train.report({"step": step}, checkpoint=Checkpoint.from_directory(folder), checkpoint_upload_mode=mode,
                     checkpoint_upload_fn=wait_for_save)
    train.report({"names": names})


def test_checkpoint_upload_fn_runs_before_the_copy(storage):
    """Before, muster accepted checkpoint_upload_fn and never called it: the async snapshot was taken
    at report() time, before the files existed, and no checkpoint was committed."""
    result = TorchTrainer(
        loop_with_upload_fn, scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=storage, verbose=0),
    ).fit()
    assert result.metrics["names"] == ["checkpoint_000001", "checkpoint_000002", "checkpoint_000003"]
    ckpts = sorted(result.best_checkpoints, key=lambda cm: cm[1]["step"])
    assert [m["step"] for _, m in ckpts] == [0, 1, 2]
    for ckpt, metrics in ckpts:
        for rank in (0, 1):
            assert (ckpt.filesystem.cat_file(f"{ckpt.path}/rank_{rank}.txt") == str(metrics["step"]).encode())


def loop_with_bad_upload_fn(config):
    import tempfile

    import muster.train as train
    from muster.train import Checkpoint

    train.report({"step": 0}, checkpoint=Checkpoint.from_directory(tempfile.mkdtemp()),
                 checkpoint_upload_fn=lambda checkpoint, name: name)


def test_checkpoint_upload_fn_must_return_a_checkpoint(storage):
    with pytest.raises(TrainingFailedError, match=r"checkpoint_upload_fn=.*returned 'checkpoint_000001'.*Checkpoint"):
        TorchTrainer(
            loop_with_bad_upload_fn, scaling_config=ScalingConfig(num_workers=1),
            run_config=RunConfig(storage_path=storage, verbose=0),
        ).fit()
