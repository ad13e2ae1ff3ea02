"""The commit protocol with real workers: a checkpoint is whole or absent, whatever dies when.

Each test makes the ranks run out of step (no collective between their reports) and kills
one for real (SIGKILL), then checks what was committed and where the restart resumed.
Ordering between ranks is forced with marker files (bounded waits), never with sleeps.
"""

from __future__ import annotations

import json
import os

import pytest

from muster.train import FailureConfig, RunConfig, ScalingConfig
from muster.train.storage import MANIFEST
from muster.train.torch import TorchTrainer


def _checkpoints(run_dir: str) -> list[str]:
    return sorted(n for n in os.listdir(run_dir) if n.startswith("checkpoint_"))


def _user_files(folder: str) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n not in (MANIFEST, ".muster"))


def _fit(loop, storage, tmp_path, **run_kwargs):
    return TorchTrainer(
        loop, train_loop_config={"dir": str(tmp_path)}, scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=storage, verbose=0, failure_config=FailureConfig(max_failures=1),
                             **run_kwargs),
    ).fit()


def test_out_of_step_ranks_resume_from_the_last_whole_round(storage, tmp_path):
    """The issue's scenario: round 1 in step; rank 1 runs ahead (rounds 2..4) while the slow
    rank 0 dies before its round 2. Rounds 2..4 hold only rank 1's files: none may commit,
    and the restart resumes from round 1 with both ranks' files."""

    def loop(config):
        import signal
        import tempfile
        import time

        import torch.distributed as dist

        import muster.train as train
        from muster.train import Checkpoint

        ctx = train.get_context()
        rank, attempt = ctx.get_world_rank(), ctx.get_attempt()
        marker = os.path.join(config["dir"], "rank1_at_round_4")
        if attempt > 0:
            ckpt = train.get_checkpoint()
            with ckpt.as_directory() as d:
                seen = {"name": os.path.basename(ckpt.path), "files": sorted(os.listdir(d))}
            with open(os.path.join(config["dir"], f"resumed_{rank}.json"), "w") as f:
                json.dump(seen, f)
            dist.barrier()
        for step in range(4 if attempt == 0 else 1):
            with tempfile.TemporaryDirectory() as tmp:
                with open(os.path.join(tmp, f"shard_{rank}.txt"), "w") as f:
                    f.write(f"{attempt}:{step}")
                if rank == 0 and attempt == 0 and step == 1:
                    for _ in range(3000):  # the slow rank: still saving while rank 1 runs ahead
                        if os.path.exists(marker):
                            break
                        time.sleep(0.01)
                    time.sleep(2.5)  # long enough for a timer-based rule (the old 2 s grace) to act
                    os.kill(os.getpid(), signal.SIGKILL)  # dies before its round-2 report
                train.report({"step": step}, checkpoint=Checkpoint.from_directory(tmp))
            if step == 0:
                dist.barrier()  # round 1 in step; no collective after it
        if rank == 1 and attempt == 0:
            open(marker, "w").close()  # every report of rounds 2..4 has returned
            time.sleep(60)  # killed with the gang once rank 0's death is seen

    with pytest.warns(UserWarning, match=r"Rank 0 is 3 rounds behind"):
        result = _fit(loop, storage, tmp_path)
    resumed = [json.load(open(tmp_path / f"resumed_{r}.json")) for r in (0, 1)]
    for seen in resumed:
        assert seen["name"] == "checkpoint_000001"
        assert [f for f in seen["files"] if f not in (".muster", MANIFEST)] == ["shard_0.txt", "shard_1.txt"]
    names = _checkpoints(result.path)
    assert "checkpoint_000002" not in names and "checkpoint_000003" not in names
    assert "checkpoint_000004" not in names
    for name in names:  # every committed checkpoint is whole
        folder = os.path.join(result.path, name)
        assert _user_files(folder) == ["shard_0.txt", "shard_1.txt"], name
        assert json.load(open(os.path.join(folder, MANIFEST)))["ranks"] == [0, 1]
    # The rows of round 1 name their checkpoint; rank 1's rows of the dropped rounds name none.
    attempt0 = [json.loads(line) for line in open(os.path.join(result.path, "result.json"))]
    by_round = {(r["_attempt"], r["training_iteration"], r["_rank"]): r["checkpoint_dir_name"] for r in attempt0}
    assert by_round[(0, 1, 0)] == by_round[(0, 1, 1)] == "checkpoint_000001"
    assert by_round[(0, 2, 1)] is None and by_round[(0, 4, 1)] is None


def test_a_rank_killed_mid_upload_never_publishes_its_round(storage, tmp_path):
    """Rank 0 is killed while its round-2 files are being copied to staging: round 2 is
    absent, the restart resumes from round 1, and no staged file of round 2 is ever published."""

    def loop(config):
        import signal
        import tempfile
        import threading
        import time

        import torch.distributed as dist

        import muster.train as train
        from muster.train import Checkpoint

        ctx = train.get_context()
        rank, attempt = ctx.get_world_rank(), ctx.get_attempt()
        if attempt > 0:
            with open(os.path.join(config["dir"], f"resumed_{rank}.txt"), "w") as f:
                f.write(os.path.basename(train.get_checkpoint().path))
        for step in range(2 if attempt == 0 else 1):
            with tempfile.TemporaryDirectory() as tmp:
                with open(os.path.join(tmp, f"shard_{rank}.bin"), "wb") as f:
                    f.write(os.urandom((64 if step == 1 and rank == 0 else 1) * 1024 * 1024))
                if rank == 0 and attempt == 0 and step == 1:
                    staged = os.path.join(ctx.get_run_dir(), ".staging", "checkpoint_000002", "shard_0.bin")

                    def kill_once_copying() -> None:
                        for _ in range(3000):
                            if os.path.exists(staged):
                                break
                            time.sleep(0.001)
                        os.kill(os.getpid(), signal.SIGKILL)

                    threading.Thread(target=kill_once_copying, daemon=True).start()
                train.report({"step": step}, checkpoint=Checkpoint.from_directory(tmp))
                if rank == 0 and attempt == 0 and step == 1:
                    time.sleep(60)  # report() returned before the kill came: still killed here
            if step == 0:
                dist.barrier()

    result = _fit(loop, storage, tmp_path)
    assert (tmp_path / "resumed_0.txt").read_text() == "checkpoint_000001"
    names = _checkpoints(result.path)
    assert "checkpoint_000002" not in names
    for name in names:
        folder = os.path.join(result.path, name)
        assert _user_files(folder) == ["shard_0.bin", "shard_1.bin"], name
        sizes = {f: os.path.getsize(os.path.join(folder, f)) for f in _user_files(folder)}
        assert sizes == {"shard_0.bin": 1024 * 1024, "shard_1.bin": 1024 * 1024}  # no 64 MB stale file
        assert result.path and not os.path.exists(os.path.join(result.path, ".staging"))


def test_healthy_ranks_finish_queued_async_uploads_when_a_rank_dies(storage, tmp_path):
    """Rank 1 queues three async uploads (report() returned each time), rank 0 reported the
    same rounds and dies. Rank 1's uploads finish before the gang is stopped, so all three
    rounds commit and the restart resumes from round 3."""

    def loop(config):
        import signal
        import tempfile
        import time

        import torch.distributed as dist

        import muster.train as train
        from muster.train import Checkpoint

        ctx = train.get_context()
        rank, attempt = ctx.get_world_rank(), ctx.get_attempt()
        marker = os.path.join(config["dir"], "rank1_queued")
        if attempt > 0:
            with open(os.path.join(config["dir"], f"resumed_{rank}.txt"), "w") as f:
                f.write(os.path.basename(train.get_checkpoint().path))
            return
        for step in range(3):
            folder = tempfile.mkdtemp()
            size = 48 if rank == 1 else 1  # rank 1's uploads are the slow ones
            with open(os.path.join(folder, f"shard_{rank}.bin"), "wb") as f:
                f.write(os.urandom(size * 1024 * 1024))
            train.report({"step": step}, checkpoint=Checkpoint.from_directory(folder),
                         checkpoint_upload_mode="async" if rank == 1 else "sync")
        dist.barrier()  # both ranks' report() calls of rounds 1..3 have returned
        if rank == 1:
            open(marker, "w").close()
            time.sleep(120)  # killed with the gang after its uploads are in
        for _ in range(3000):
            if os.path.exists(marker):
                break
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGKILL)

    result = _fit(loop, storage, tmp_path, upload_drain_s=60)
    assert (tmp_path / "resumed_0.txt").read_text() == "checkpoint_000003"
    for name in ("checkpoint_000001", "checkpoint_000002", "checkpoint_000003"):
        folder = os.path.join(result.path, name)
        assert _user_files(folder) == ["shard_0.bin", "shard_1.bin"]
        assert os.path.getsize(os.path.join(folder, "shard_1.bin")) == 48 * 1024 * 1024
