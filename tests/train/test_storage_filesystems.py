"""Storage on a pyarrow filesystem with real folders, as Ray's custom-storage guide passes one."""

from __future__ import annotations

import os
import time

import pytest
from _shared import without_aws_credentials

import muster.train as train
from muster.train import Checkpoint, FailureConfig, Result, RunConfig, ScalingConfig
from muster.train.torch import TorchTrainer


def two_rounds_then_resume(config):
    start = 0
    ckpt = train.get_checkpoint()
    if ckpt is not None:
        start = ckpt.to_dict()["step"] + 1
    for step in range(start, 3):
        train.report({"step": step}, checkpoint=Checkpoint.from_dict({"step": step}))
        if step == 1 and train.get_context().get_attempt() == 0:
            raise RuntimeError("fail once after round 2")


def test_a_pyarrow_subtree_filesystem_over_a_local_disk(tmp_path):
    """pyarrow's local filesystem does not make parent folders when a file is opened for writing;
    before, the first report's commit failed: 'Failed to open local file .../.staging/...'."""
    import pyarrow.fs as pafs

    fs = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())
    result = TorchTrainer(
        two_rounds_then_resume,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_filesystem=fs, storage_path="bucket/sub-path", name="run", verbose=0,
                             failure_config=FailureConfig(max_failures=1)),
    ).fit()
    assert result.metrics["step"] == 2 and result.checkpoint.to_dict()["step"] == 2
    run_dir = tmp_path / "bucket" / "sub-path" / "run"
    assert sorted(p for p in os.listdir(run_dir) if p.startswith("checkpoint_")) == [
        "checkpoint_000001", "checkpoint_000002", "checkpoint_000003"]
    again = Result.from_path("bucket/sub-path/run", storage_filesystem=fs)
    assert again.metrics["step"] == 2 and len(again.best_checkpoints) == 3
    # As in Ray, paths are shown within the filesystem (no "subtree://", which nothing takes back) and round-trip.
    assert result.path == "bucket/sub-path/run"
    assert Result.from_path(result.path, storage_filesystem=fs).path == result.path
    ckpt = result.checkpoint
    assert ckpt.path == "bucket/sub-path/run/checkpoint_000003"
    assert repr(ckpt) == "Checkpoint(filesystem=subtree, path=bucket/sub-path/run/checkpoint_000003)"  # Ray's form
    assert Checkpoint(ckpt.path, filesystem=fs).to_dict()["step"] == 2


def _never_runs(config):
    raise AssertionError("the storage check comes first")


def test_s3_without_credentials_fails_at_once_naming_the_fix(monkeypatch, tmp_path):
    """The seed overview's ``RunConfig(storage_path="s3://my-bucket/ray-results")`` on a machine without AWS
    credentials: botocore's NoCredentialsError was retried 6 times (over 6 s), then said only "Unable to
    locate credentials"."""
    s3fs = pytest.importorskip("s3fs")
    without_aws_credentials(monkeypatch, str(tmp_path))
    start = time.monotonic()
    try:
        with pytest.raises(PermissionError) as info:
            TorchTrainer(_never_runs, scaling_config=ScalingConfig(num_workers=1),
                         run_config=RunConfig(storage_path="s3://my-bucket/ray-results", name="training_run",
                                              verbose=0)).fit()
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
    message = str(info.value)
    assert "my-bucket/ray-results/training_run" in message and "NoCredentialsError" in message, message
    assert "AWS_ACCESS_KEY_ID" in message and "RunConfig(storage_filesystem=...)" in message, message
    # no retries: no credentials appear by waiting. The retries took 6 s or more; the refusal itself takes ~1 s of
    # CPU (botocore's service models, the client), which a loaded box stretched toward the 3 s bound it had
    assert time.monotonic() - start < 5, "no retries: no credentials appear by waiting"
