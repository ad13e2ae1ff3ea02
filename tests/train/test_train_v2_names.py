"""Ray Train V2 names: WorkerGroupError, muster.train.v2 paths, preemption config/info, upload modes,
get_all_reported_checkpoints. Real 2-worker runs."""

from __future__ import annotations

import os
import tempfile

import pytest

import muster.train as train
from muster.train import CheckpointConsistencyMode, CheckpointUploadMode, Checkpoint, FailureConfig


def reporting_loop(config):
    rank = train.get_context().get_world_rank()
    assert train.get_preemption_info() is None
    for step in range(3):
        with tempfile.TemporaryDirectory() as d:
            if rank == 0:
                open(os.path.join(d, "step"), "w").write(str(step))
            mode = CheckpointUploadMode.ASYNC if step == 1 else CheckpointUploadMode.SYNC
            train.report({"step": step}, checkpoint=Checkpoint.from_directory(d), checkpoint_upload_mode=mode)
    seen = train.get_all_reported_checkpoints(consistency_mode=CheckpointConsistencyMode.COMMITTED, timeout_s=60)
    steps = []
    for reported in seen:
        with reported.checkpoint.as_directory() as d:
            steps.append((reported.metrics.get("step"), int(open(os.path.join(d, "step")).read())))
    train.report({"seen": steps, "status": [r.status.value for r in seen], "keys": [sorted(r.metrics) for r in seen]})


def test_reported_checkpoints_upload_modes_and_preemption_info(fit):
    result = fit(reporting_loop, workers=2, failure_config=FailureConfig(max_failures=1, max_preemption_failures=3))
    rows = [r for r in result.all_reports if "seen" in r]
    assert len(rows) == 2
    for row in rows:
        assert row["seen"] == [[0, 0], [1, 1], [2, 2]], row
        assert set(row["status"]) == {"COMMITTED"}
        assert row["keys"] == [["step"]] * 3  # what was reported, as in Ray (not the controller's own keys)


def failing_loop(config):
    if train.get_context().get_world_rank() == 1:
        raise RuntimeError("rank one broke")
    train.report({"ok": 1})


def test_worker_group_error_names_catch_a_failed_run(fit):
    from muster.train.v2.api.exceptions import WorkerGroupError as V2WorkerGroupError

    with pytest.raises(train.WorkerGroupError, match="rank one broke") as info:
        fit(failing_loop, workers=2)
    assert isinstance(info.value, V2WorkerGroupError)


def test_v2_module_paths_and_config_checks():
    from muster.train.v2 import ScalingConfig as V2ScalingConfig
    from muster.train.v2.api.config import FailureConfig as V2FailureConfig
    from muster.train.v2.api.report_config import CheckpointUploadMode as V2Mode
    from muster.train.v2.api.train_fn_utils import get_all_reported_checkpoints
    from muster.train.v2.api.data_parallel_trainer import DataParallelTrainer
    from muster.train.v2.torch import TorchTrainer
    from muster.train.v2.api.callback import UserCallback
    from muster.train.v2.api.validation_config import ValidationConfig, ValidationTaskConfig

    assert V2ScalingConfig is train.ScalingConfig and V2FailureConfig is FailureConfig
    assert V2Mode is CheckpointUploadMode
    assert get_all_reported_checkpoints is train.get_all_reported_checkpoints
    assert UserCallback is train.UserCallback and ValidationConfig is train.ValidationConfig
    assert ValidationTaskConfig is train.ValidationTaskConfig
    assert TorchTrainer is train.torch.TorchTrainer and issubclass(TorchTrainer, DataParallelTrainer)
    with pytest.raises(ValueError, match="max_preemption_failures=-2"):
        FailureConfig(max_preemption_failures=-2)
    from muster.exceptions import UnsupportedRayAPIError

    with pytest.raises(UnsupportedRayAPIError, match="LoggingConfig"):
        train.LoggingConfig


def get_storage_loop(config):
    ctx, deprecated = train.get_context(), {}
    for name in ("get_trial_id", "get_trial_resources", "get_metadata", "no_such_method"):
        try:
            getattr(ctx, name)()
        except AttributeError as e:  # Ray 2.60 deprecates the first three; they were bare AttributeErrors here
            deprecated[name] = f"{type(e).__name__}: {e}"
    try:
        train.get_context().get_storage()
    except AttributeError as e:  # UnsupportedRayAPIError is also an AttributeError
        train.report({"error": type(e).__name__, "message": str(e), "deprecated": deprecated})


def test_get_storage_names_rays_storage_context_and_the_muster_way(fit):
    """Ray's asynchronous-validation guide builds a NO_UPLOAD checkpoint path with
    get_context().get_storage(); muster's TrainContext had no such attribute (a bare AttributeError)."""
    result = fit(get_storage_loop, workers=1)
    assert result.metrics["error"] == "UnsupportedRayAPIError"
    message = result.metrics["message"]
    assert "ray.train.TrainContext.get_storage" in message and "get_run_dir()" in message
    assert "NO_UPLOAD" in message and "report({'score': ...})" in message
    deprecated = result.metrics["deprecated"]
    for name, words in (("get_trial_id", "tune.get_context()"), ("get_trial_resources", "get_run_dir()"),
                        ("get_metadata", "checkpoint.get_metadata()")):
        assert deprecated[name].startswith("UnsupportedRayAPIError") and words in deprecated[name], deprecated
    assert deprecated["no_such_method"].startswith("AttributeError: 'TrainContext' object has no attribute")
