"""Checkpointing to S3 on a real S3-compatible server on loopback (moto's server mode).

Faults are real: a worker is SIGKILLed, and the server itself is stopped and
started again while the run is checkpointing.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")

from muster.train import Checkpoint, FailureConfig, Result, RunConfig, ScalingConfig, TrainingFailedError  # noqa: E402
from muster.train.torch import TorchTrainer  # noqa: E402

from _shared import free_port  # noqa: E402

BUCKET = "muster-test"


@pytest.fixture
def s3(monkeypatch):
    """A fresh S3 server on a free loopback port; yields (server holder, storage URL)."""
    import boto3
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()  # fsspec caches clients; each test has its own server
    port = free_port()
    holder = {"server": moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)}
    holder["server"].start()
    # The driver's environment reaches the workers, so they find the server too.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{port}")
    bucket = f"{BUCKET}-{port}"
    boto3.client("s3").create_bucket(Bucket=bucket)
    holder["restart"] = lambda: _restart(holder, port)
    yield holder, f"s3://{bucket}/runs"
    holder["server"].stop()
    s3fs.S3FileSystem.clear_instance_cache()


def _restart(holder, port):
    holder["server"] = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    holder["server"].start()


def loop(config):
    import signal
    import tempfile

    import torch

    import muster.train as train

    ctx = train.get_context()
    ckpt = train.get_checkpoint()
    start = 0
    if ckpt:
        start = ckpt.to_dict()["step"] + 1
    for step in range(start, config["steps"]):
        time.sleep(config.get("sleep", 0))
        if ctx.get_world_rank() == 0:
            train.report({"step": step}, checkpoint=Checkpoint.from_dict({"step": step, "w": torch.ones(4) * step}))
        else:
            train.report({"step": step})
        if step == config.get("crash_step") and ctx.get_attempt() == 0 and ctx.get_world_rank() == 1:
            os.kill(os.getpid(), signal.SIGKILL)


def _assert_resumed_after_the_last_step_both_ranks_reported(result, steps: int, crash_step: int) -> None:
    """``loop``'s rank 1 died after reporting ``crash_step`` (or, killed mid-report, ``crash_step - 1``).
    How far rank 0 got before the death ended that attempt depends on timing, and every report it made is kept.
    A round commits once both ranks reported it: the next attempt must start right after the last step both
    reported, redoing nothing before it and skipping nothing."""
    first = {rank: [r["step"] for r in result.all_reports if r["_attempt"] == 0 and r["_rank"] == rank]
             for rank in (0, 1)}
    resumed = [r["step"] for r in result.all_reports if r["_attempt"] > 0 and r["_rank"] == 0]
    assert first[1] in (list(range(crash_step)), list(range(crash_step + 1))), first
    assert first[0] == list(range(len(first[0]))), first
    assert resumed == list(range(min(len(first[0]), len(first[1])), steps)), (first, resumed)


def test_s3_run_survives_a_killed_worker(s3):
    _, url = s3
    result = TorchTrainer(
        loop, train_loop_config={"steps": 5, "crash_step": 2},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="s3run", storage_path=url, failure_config=FailureConfig(max_failures=1)),
    ).fit()
    assert result.path.startswith("s3://")
    assert result.metrics["step"] == 4
    assert result.checkpoint.to_dict()["step"] == 4
    _assert_resumed_after_the_last_step_both_ranks_reported(result, steps=5, crash_step=2)
    again = Result.from_path(result.path)
    assert again.metrics["step"] == 4 and len(again.best_checkpoints) == 5
    for ckpt, _ in again.best_checkpoints:
        assert ckpt.filesystem.exists(f"{ckpt.path}/.muster_manifest.json")


def test_a_pyarrow_filesystem_as_ray_takes_it(s3):
    """Ray's persistent-storage guide passes RunConfig(storage_filesystem=pyarrow.fs.S3FileSystem(...))
    with a path in the bucket; before, fit() failed: 'S3FileSystem' has no attribute '_strip_protocol'."""
    import pyarrow.fs as pafs

    _, url = s3
    fs = pafs.S3FileSystem(access_key="testing", secret_key="testing", region="us-east-1", scheme="http",
                           endpoint_override=os.environ["AWS_ENDPOINT_URL_S3"].removeprefix("http://"))
    result = TorchTrainer(
        loop, train_loop_config={"steps": 2},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="pa", storage_path=url.removeprefix("s3://"), storage_filesystem=fs),
    ).fit()
    assert result.metrics["step"] == 1 and result.checkpoint.to_dict()["step"] == 1
    bucket_path = url.removeprefix("s3://") + "/pa"
    assert fs.get_file_info(f"{bucket_path}/{os.path.basename(result.checkpoint.path)}").type == pafs.FileType.Directory
    assert Result.from_path(bucket_path, storage_filesystem=fs).metrics["step"] == 1
    assert Checkpoint(result.checkpoint.path, filesystem=fs).to_dict()["step"] == 1
    assert not os.path.exists(bucket_path.split("/")[0])  # nothing written locally (the run store was, here)


@pytest.mark.timeout(180)
def test_s3_outage_mid_run_loses_nothing(s3):
    holder, url = s3

    import boto3

    bucket = url.split("/")[2]

    def outage():
        s3 = boto3.client("s3")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # wait until the run has committed a checkpoint
            listing = s3.list_objects_v2(Bucket=bucket, Prefix="runs/outage/checkpoint_")
            if any(o["Key"].endswith(".muster_manifest.json") for o in listing.get("Contents", [])):
                break
            time.sleep(0.05)
        holder["server"].stop()
        time.sleep(3.0)  # the store is unreachable for a few seconds
        holder["restart"]()

    t = threading.Thread(target=outage)
    t.start()
    result = TorchTrainer(
        loop, train_loop_config={"steps": 8, "sleep": 0.5},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="outage", storage_path=url),
    ).fit()
    t.join()
    assert result.metrics["step"] == 7
    committed = sorted(int(c.path.rsplit("_", 1)[-1]) for c, _ in result.best_checkpoints)
    assert committed == list(range(1, 9))  # every round's checkpoint made it, none lost to the outage
    assert result.checkpoint.to_dict()["step"] == 7


def test_restore_from_s3_after_driver_loss(s3):
    """TorchTrainer.restore on an S3 run folder continues from its latest checkpoint."""
    _, url = s3
    path = f"{url}/restored"
    with pytest.raises(TrainingFailedError):  # no retries: the crash ends this driver's fit()
        TorchTrainer(
            loop, train_loop_config={"steps": 4, "crash_step": 1},
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(name="restored", storage_path=url),
        ).fit()
    assert TorchTrainer.can_restore(path)
    result = TorchTrainer.restore(path).fit()
    _assert_resumed_after_the_last_step_both_ranks_reported(result, steps=4, crash_step=1)
    assert result.checkpoint.to_dict()["step"] == 3
