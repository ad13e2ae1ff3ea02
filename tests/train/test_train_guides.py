"""Ray Train 2.60's user guides (checkpoints, metrics, failures) ported as muster users port them."""

from __future__ import annotations

import os
import tempfile

import muster.train as train
from muster.exceptions import InvalidArgumentError
from muster.train import Checkpoint, CheckpointUploadMode


def reports_with_and_without_deleting(config):
    """The checkpoints guide's asynchronous upload writes each checkpoint into ``tempfile.mkdtemp()``;
    ``delete_local_checkpoint_after_upload=True`` has the folder removed once its files are safe."""
    rank = train.get_context().get_world_rank()
    cases = [("sync", True), ("async", True), ("sync", None), ("async", None), ("async", "fn")]
    left = {}
    for mode, delete in cases:
        folder = tempfile.mkdtemp()
        with open(os.path.join(folder, f"model-rank={rank}.pt"), "w") as f:
            f.write(mode)
        kwargs = {} if delete is None else {"delete_local_checkpoint_after_upload": bool(delete)}
        if delete == "fn":  # with Ray's checkpoint_upload_fn the folder goes once the function's result is copied
            kwargs["checkpoint_upload_fn"] = lambda checkpoint, name: checkpoint
            train.report({"mode": mode, "delete": delete}, checkpoint=Checkpoint.from_directory(folder),
                         checkpoint_upload_mode=CheckpointUploadMode.ASYNC, **kwargs)
            train.get_all_reported_checkpoints(timeout_s=60)  # waits for this rank's upload
            left[f"{mode}-{delete}"] = os.path.isdir(folder)
            continue
        train.report({"mode": mode, "delete": delete}, checkpoint=Checkpoint.from_directory(folder),
                     checkpoint_upload_mode=CheckpointUploadMode[mode.upper()], **kwargs)
        left[f"{mode}-{delete}"] = os.path.isdir(folder)
        train.collective.barrier()  # keep the ranks in step (report() is no barrier)
    try:  # a folder that holds the run's own folder is refused, as in Ray, before anything is deleted
        train.report({}, checkpoint=Checkpoint.from_directory(os.path.dirname(train.get_context().get_run_dir())),
                     delete_local_checkpoint_after_upload=True)
        refused = ""
    except InvalidArgumentError as exc:
        refused = str(exc)
    train.report({"left": left, "refused": refused})


def test_delete_local_checkpoint_after_upload_removes_the_folder(fit):
    """Before, the keyword was accepted and ignored: every mkdtemp() folder stayed on the worker's disk."""
    result = fit(reports_with_and_without_deleting)
    assert result.metrics["left"] == {"sync-True": False, "async-True": False, "sync-None": True,
                                      "async-None": True, "async-fn": False}
    assert "delete_local_checkpoint_after_upload=False" in result.metrics["refused"]
    assert os.path.isdir(result.path)
    ckpts = sorted(result.best_checkpoints, key=lambda cm: cm[0].path)
    assert [m["mode"] for _, m in ckpts] == ["sync", "async", "sync", "async", "async"]
    for ckpt, metrics in ckpts:  # every rank's files were copied before its folder went
        for rank in (0, 1):
            with open(os.path.join(ckpt.path, f"model-rank={rank}.pt")) as f:
                assert f.read() == metrics["mode"]
