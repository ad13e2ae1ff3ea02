"""Failures a user sees: a worker raising, a worker killed, impossible resources, bad metrics."""

from __future__ import annotations

import os
import signal
import time
import warnings

import pytest
import torch

import muster.train as train
from muster.exceptions import MusterError, ResourcesUnavailableError, TaskError, WorkerCrashedError
from muster.train import Result, RunConfig, ScalingConfig, TrainingFailedError
from muster.train._internal.session import _plain_metrics
from muster.train.torch import TorchTrainer


def raise_on_rank1(config):
    import torch.distributed as dist

    rank = train.get_context().get_world_rank()
    train.report({"step": 0})
    if rank == 1:
        time.sleep(config.get("delay", 0))
        raise ValueError(f"bad batch {40 + 2} on purpose")  # the user's line
    dist.barrier()  # rank 0 waits in a collective for a peer that will never come


def test_worker_exception_names_rank_type_message_and_traceback(fit, storage):
    with pytest.raises(TrainingFailedError) as info:
        fit(raise_on_rank1, workers=2, config={"delay": 0.2}, name="boom")
    err = info.value
    message = str(err)
    assert isinstance(err, MusterError)
    assert "rank 1" in message
    assert "ValueError: bad batch 42 on purpose" in message
    assert 'raise ValueError(f"bad batch {40 + 2} on purpose")  # the user\'s line' in message
    assert "raise_on_rank1" in message  # the traceback names the user's function
    assert "attempt 1" in message and "max_failures=0" in message
    assert os.path.join(storage, "boom") in message and err.run_path == os.path.join(storage, "boom")
    (cause,) = err.attempts
    assert isinstance(cause, TaskError)
    assert cause.label == "rank 1" and cause.cause_type.endswith("ValueError")
    assert "raise_on_rank1" in cause.remote_traceback
    # Ray V2's WorkerGroupError.worker_failures: what the rank's code raised
    assert err.worker_failures == {1: cause.cause} and type(cause.cause) is ValueError
    # read back later, the run is a failed one (its error was None, as if it had finished)
    recorded = Result.from_path(err.run_path).error
    assert isinstance(recorded, TrainingFailedError) and "ValueError: bad batch 42 on purpose" in str(recorded)
    assert "attempt 1" in str(recorded) and recorded.run_path == err.run_path


class HeardExceptions(train.UserCallback):
    def __init__(self):
        self.heard = []

    def after_exception(self, run_context, worker_exceptions):
        self.heard.append(dict(worker_exceptions))


def test_after_exception_gets_what_the_rank_raised(fit):
    # Ray V2 hands UserCallback.after_exception the user's own exception ({1: ValueError('bad batch 42 ...')}),
    # so `isinstance(error, torch.cuda.OutOfMemoryError)` in a callback works; muster gave its TaskError wrapper.
    hooks = HeardExceptions()
    with pytest.raises(TrainingFailedError):
        fit(raise_on_rank1, workers=2, config={"delay": 0}, name="heard", callbacks=[hooks])
    [failed] = hooks.heard
    assert list(failed) == [1]
    assert type(failed[1]) is ValueError and str(failed[1]) == "bad batch 42 on purpose"


def test_first_failure_is_the_root_cause_not_the_peer_it_broke(fit):
    # Rank 1 raises at once: rank 0's barrier then fails too (its peer left),
    # but the error must blame rank 1's ValueError, the failure that came first.
    for i in range(3):
        with pytest.raises(TrainingFailedError) as info:
            fit(raise_on_rank1, workers=2, config={"delay": 0}, name=f"root{i}")
        (cause,) = info.value.attempts
        assert cause.label == "rank 1", str(cause)
        assert "bad batch 42" in str(cause)


def sigkill_rank1(config):
    import torch.distributed as dist

    rank = train.get_context().get_world_rank()
    train.report({"pid": os.getpid()})
    dist.barrier()
    if rank == 1:
        time.sleep(config.get("delay", 0))
        os.kill(os.getpid(), signal.SIGKILL)
    if config.get("collective"):
        dist.barrier()
    else:
        time.sleep(60)


@pytest.mark.parametrize("collective", [False, True], ids=["peer-sleeps", "peer-in-collective"])
def test_sigkilled_worker_is_named_with_rank_pid_and_signal(fit, storage, collective):
    start = time.monotonic()
    with pytest.raises(TrainingFailedError) as info:
        fit(sigkill_rank1, workers=2, config={"collective": collective, "delay": 0.2}, name="killed")
    assert time.monotonic() - start < 30  # rank 0's sleep(60) was cut short
    reports = Result.from_path(os.path.join(storage, "killed")).all_reports
    pid = next(r["pid"] for r in reports if r["_rank"] == 1)
    message = str(info.value)
    assert f"rank 1 (pid {pid}" in message
    assert "SIGKILL" in message
    (cause,) = info.value.attempts
    assert isinstance(cause, WorkerCrashedError)
    assert cause.pid == pid and cause.signal == signal.SIGKILL


def test_use_gpu_without_gpus_fails_at_once(fit):
    start = time.monotonic()
    with pytest.raises(ResourcesUnavailableError) as info:
        fit(raise_on_rank1, scaling=ScalingConfig(num_workers=2, use_gpu=True), name="gpu")
    assert time.monotonic() - start < 20  # the alternative is waiting forever for resources that never come
    assert "use_gpu=False" in str(info.value)
    assert info.value.requested.get("GPU") == 2


def test_too_many_workers_fails_at_once_naming_asked_and_existing(fit):
    start = time.monotonic()
    with pytest.raises(ResourcesUnavailableError) as info:
        fit(raise_on_rank1, workers=64, name="huge")
    assert time.monotonic() - start < 20  # the alternative is waiting forever for resources that never come
    message = str(info.value)
    assert "CPU=64" in message  # asked
    assert "CPU=4" in message  # what the engine has
    assert "num_workers" in message


def test_failed_scheduling_is_not_left_running(fit, storage):
    with pytest.raises(ResourcesUnavailableError):
        fit(raise_on_rank1, workers=64, name="huge")
    import json

    state = json.load(open(os.path.join(storage, "huge", ".muster_run.json")))
    assert state["status"] == "ERRORED"


def bad_metrics():
    errors = {}
    try:
        train.report([("loss", 1.0)])
    except TypeError as exc:
        errors["list"] = str(exc)
    try:
        train.report(3)  # Ray 2.60 takes it and drops it: Result.metrics is None
    except TypeError as exc:
        errors["int"] = str(exc)
    try:  # Ray 2.60: AttributeError: 'str' object has no attribute 'path'
        train.report({"fine": 1.0}, checkpoint="path/string")
    except TypeError as exc:
        errors["str_checkpoint"] = str(exc)
    try:
        train.report({"fine": 1.0}, checkpoint_uplaod_mode="async")
    except TypeError as exc:
        errors["kw"] = str(exc)
    with warnings.catch_warnings(record=True) as said:  # Ray's keyword: accepted, and said to be unused
        warnings.simplefilter("always")
        train.report({"fine": 1.0}, checkpoint_dir_name="mine")
    errors["dir_name"] = [str(w.message) for w in said]
    train.report(
        {
            "errors": errors,
            "t0d": torch.tensor(0.25),
            "t1": torch.tensor([2.5]),
            "ti": torch.tensor([3]),
            "np": __import__("numpy").float32(1.5),
            "ok": [1, "a", {"b": True}],
            "vec": torch.ones(2, requires_grad=True) * 2,  # kept (detached), as Ray keeps what is reported
            "kinds": {"deep": [1, {3, 4}]},
        }
    )


def test_report_rejects_bad_calls_keeps_any_value_and_converts_scalar_tensors(fit):
    result = fit(bad_metrics, workers=1)
    m = result.metrics
    assert result.all_reports[-1]["training_iteration"] == 2  # the rejected calls did not use up a round
    assert "checkpoint_uplaod_mode" in m["errors"]["kw"] and "checkpoint_upload_mode" in m["errors"]["kw"]
    assert any("checkpoint_dir_name='mine') is not used" in w for w in m["errors"]["dir_name"])
    assert "takes a dict" in m["errors"]["list"] and "list" in m["errors"]["list"]
    assert m["errors"]["int"].startswith("report(metrics=3): report takes a dict, got int")
    assert "report({'loss': 0.1})" in m["errors"]["int"]
    assert "report(checkpoint='path/string')" in m["errors"]["str_checkpoint"]
    assert "Checkpoint.from_directory(folder)" in m["errors"]["str_checkpoint"]
    assert isinstance(m["vec"], torch.Tensor) and m["vec"].tolist() == [2.0, 2.0] and not m["vec"].requires_grad
    assert m["kinds"] == {"deep": [1, {3, 4}]}
    assert m["t0d"] == 0.25 and isinstance(m["t0d"], float)
    assert m["t1"] == 2.5 and isinstance(m["t1"], float)
    assert m["ti"] == 3
    assert m["np"] == 1.5
    assert m["ok"] == [1, "a", {"b": True}]
    assert result.metrics_dataframe["t1"].dtype.kind == "f"
    columns = set(result.metrics_dataframe.columns)  # a nested dict is one column of dicts, as Ray Train V2's
    assert "errors" in columns and "errors/kw" not in columns
    assert m["errors"]["kw"] == result.metrics_dataframe["errors"].iloc[-1]["kw"]
    on_disk = Result.from_path(result.path)  # result.json holds JSON's form of it
    assert on_disk.metrics["vec"] == [2.0, 2.0] and on_disk.metrics["kinds"] == {"deep": [1, [3, 4]]}


def test_plain_metrics_unit():
    assert _plain_metrics({"a": torch.tensor([[4.0]]), 3: 2}) == {"a": 4.0, "3": 2}
    kept = object()
    assert _plain_metrics({"x": kept, "t": (1, {2})})["x"] is kept
    assert _plain_metrics({"t": (1, {2})})["t"] == [1, {2}]
    with pytest.raises(TypeError, match="dict"):
        _plain_metrics([("loss", 1.0)])


def hang_on_rank1():
    train.report({"up": 1})
    if train.get_context().get_world_rank() == 1:
        time.sleep(120)


def test_worker_timeout_stops_a_hung_gang(fit):
    start = time.monotonic()
    with pytest.raises(TrainingFailedError, match="No worker reported for 3 s"):
        fit(hang_on_rank1, workers=2, worker_timeout_s=3)
    assert time.monotonic() - start < 30


def barrier_on_rank0_only():
    import torch.distributed as dist

    train.report({"up": 1})
    if train.get_context().get_world_rank() == 0:
        dist.barrier()  # rank 1 never makes it: rank 0 waits here (the bug of a Ray Lightning sample)
    else:
        time.sleep(60)  # busy elsewhere, alive: nothing breaks the barrier


def test_a_quiet_gang_is_reported_with_each_running_ranks_stacks(fit, capsys):
    with pytest.warns(UserWarning, match=r"no rank has reported for \d+ s; ranks \[0, 1\] still run; "
                                         r"ranks \[0, 1\] printed their Python stacks"):
        with pytest.raises(TrainingFailedError, match="No worker reported for 6 s"):
            fit(barrier_on_rank0_only, workers=2, stall_report_s=1.5, worker_timeout_s=6)
    out = capsys.readouterr().out.splitlines()
    # each stack says where its rank waits: both in the loop, rank 0 inside torch's barrier
    stacks = {rank: [line for line in out if line.startswith(f"(rank {rank}")] for rank in (0, 1)}
    for rank, lines in stacks.items():
        assert any("in barrier_on_rank0_only" in line for line in lines), (rank, out[-60:])
    assert any(line.endswith(" in barrier") for line in stacks[0]), stacks[0]
    with pytest.raises(ValueError, match=r"stall_report_s=0"):
        RunConfig(stall_report_s=0)


def test_a_run_warning_is_printed_once_and_still_recorded():
    import subprocess
    import sys

    from muster.exceptions import RunOutputWarning
    from muster.observe.progress import ProgressView
    from muster.train.controller import _warn

    script = ("from muster.observe.progress import ProgressView\n"
              "from muster.train.controller import _warn\n"
              "_warn(ProgressView('run', 1, verbose=1, run_path='/tmp/run'), 'disk nearly full')\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert (out.stdout + out.stderr).count("disk nearly full") == 1, (out.stdout, out.stderr)  # once, not twice
    assert "[muster] WARNING: disk nearly full" in out.stdout
    with pytest.warns(RunOutputWarning, match="disk nearly full"):  # and still recorded for code that checks
        _warn(ProgressView("run", 1, verbose=1, run_path="/tmp/run"), "disk nearly full")
    with pytest.warns(UserWarning, match="quiet run"):  # verbose=0: no live output, a plain warning
        _warn(ProgressView("run", 1, verbose=0, run_path="/tmp/run"), "quiet run")
