"""GPU ids and custom resources on an engine that declares 2 GPUs.

No CUDA is touched: a GPU here is an id the engine hands out through
CUDA_VISIBLE_DEVICES, which is all ``muster.get_gpu_ids()`` reads.  The
``gpu_engine`` fixture (tests/conftest.py) swaps the session engine for one with
2 GPUs and puts it back afterwards.
"""

from __future__ import annotations

import logging
import os
import threading
import time

import pytest
from _task_helpers import TIMEOUT

import muster
from muster.exceptions import ResourcesUnavailableError


@muster.remote(num_gpus=1)
def gpu_ids_when_both_run(barrier_dir):
    """Return this task's GPU ids once the other task is running too."""
    open(os.path.join(barrier_dir, str(os.getpid())), "w").close()
    deadline = time.time() + 20
    while len(os.listdir(barrier_dir)) < 2:
        if time.time() > deadline:
            raise TimeoutError("the other num_gpus=1 task never ran at the same time")
        time.sleep(0.01)
    return muster.get_gpu_ids(), os.environ.get("CUDA_VISIBLE_DEVICES")


@muster.remote(num_cpus=0, resources={"licence": 1})
def holds_the_licence(seconds):
    start = time.time()
    time.sleep(seconds)
    return start, time.time()


@muster.remote(num_gpus=1)
def gpu_window(seconds):
    start = time.time()
    time.sleep(seconds)
    return start, time.time(), muster.get_gpu_ids()


@muster.remote(num_gpus=1)
def gpu_pid():
    return os.getpid()


@muster.remote(num_gpus=1, max_calls=0)
def gpu_pid_reused():
    return os.getpid()


@muster.remote
class GpuActor:
    def ids(self):
        return muster.get_gpu_ids()


def test_concurrent_gpu_tasks_see_different_gpus(gpu_engine, tmp_path):
    refs = [gpu_ids_when_both_run.remote(str(tmp_path)) for _ in range(2)]
    (ids_a, env_a), (ids_b, env_b) = muster.get(refs, timeout=TIMEOUT)
    assert len(ids_a) == 1 and len(ids_b) == 1
    assert {ids_a[0], ids_b[0]} == {0, 1}
    assert env_a == str(ids_a[0]) and env_b == str(ids_b[0])


def test_gpu_actor_holds_its_gpu_and_gpu_tasks_wait_for_the_other(gpu_engine):
    a = GpuActor.options(num_gpus=1).remote()
    try:
        (actor_gpu,) = muster.get(a.ids.remote(), timeout=TIMEOUT)
        assert muster.available_resources()["GPU"] == 1.0
        refs = [gpu_window.remote(0.3) for _ in range(3)]
        runs = sorted(muster.get(refs, timeout=TIMEOUT))
        assert all(ids == [1 - actor_gpu] for _, _, ids in runs)  # never the actor's GPU
        for (_, end, _), (start, _, _) in zip(runs, runs[1:]):
            assert start >= end, f"two num_gpus=1 tasks shared the one free GPU: {runs}"
        with pytest.warns(UserWarning, match="GPU=3"):
            ref = gpu_window.options(num_gpus=3).remote(0)
        with pytest.raises(ResourcesUnavailableError, match="GPU=3"):
            muster.get(ref, timeout=30)
    finally:
        muster.kill(a)
    assert muster.get_gpu_ids() == []  # the driver holds none


def test_custom_resource_tasks_wait_for_each_other(gpu_engine):
    refs = [holds_the_licence.remote(0.3) for _ in range(3)]
    windows = sorted(muster.get(refs, timeout=TIMEOUT))
    for (_, end), (start, _) in zip(windows, windows[1:]):
        assert start >= end, f"two tasks held the one licence at once: {windows}"


@muster.remote(num_cpus=0)
def until_exists(path, started):
    open(started, "w").close()
    while not os.path.exists(path):
        time.sleep(0.05)
    return "there"


@muster.remote(num_cpus=1, resources={"licence": 1})
def licence_then_get(path, started):
    return muster.get(until_exists.remote(path, started), timeout=TIMEOUT)


def test_a_holder_waiting_in_get_is_named_as_waiting_itself(gpu_engine, monkeypatch, caplog, tmp_path):
    """A task that waits in muster.get keeps what it holds but its CPUs (the licence here, as a GPU): a wait for
    it names it as the holder, saying it waits on other work itself, so a wait that can never end (its get
    waits for the waiting task) reads as one. Before, it read as a task busy with the licence."""
    from muster.core.local import slots

    monkeypatch.setattr(slots, "_WAIT_NOTICE_S", 0.3)
    caplog.set_level(logging.WARNING, logger="muster")
    go, started = str(tmp_path / "go"), str(tmp_path / "started")
    holder = licence_then_get.remote(go, started)
    deadline = time.monotonic() + TIMEOUT
    while not os.path.exists(started):
        assert time.monotonic() < deadline, "the inner task never started"
        time.sleep(0.05)
    waiter = holds_the_licence.remote(0)
    try:
        while not any(" has waited " in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline, "no warning for a task waiting for the licence"
            time.sleep(0.05)
        message = next(r.getMessage() for r in caplog.records if " has waited " in r.getMessage())
        assert "Held by: task licence_then_get (pid " in message, message
        assert "licence=1; itself waiting in muster.get/wait)" in message, message
    finally:
        open(go, "w").close()
    assert muster.get(holder, timeout=TIMEOUT) == "there"
    assert muster.get(waiter, timeout=TIMEOUT)


def test_a_gpu_task_runs_once_per_worker_as_in_ray(gpu_engine):
    """Ray's default max_calls=1 for a function declared with GPUs: each task gets a fresh process, so
    the GPU memory a framework keeps is freed; max_calls=0 keeps the worker for the next task."""
    pids = [muster.get(gpu_pid.remote(), timeout=TIMEOUT) for _ in range(3)]
    assert len(set(pids)) == 3, pids
    reused = [muster.get(gpu_pid_reused.remote(), timeout=TIMEOUT) for _ in range(3)]
    assert len(set(reused)) < 3, reused


def _where_each_batch_ran(batch):
    time.sleep(0.1)  # long enough that every GPU is busy while later batches come up
    n = len(batch["id"])
    return {"id": batch["id"], "pid": [os.getpid()] * n, "visible": [os.environ.get("CUDA_VISIBLE_DEVICES")] * n}


def _slow_batch(batch):
    time.sleep(0.5)  # longer than the steal delay below: later batches wait for a GPU while no CPU is free
    return {"id": batch["id"], "pid": [os.getpid()] * len(batch["id"])}


def test_a_gpu_batch_that_waits_long_is_never_run_on_the_driver(gpu_engine, monkeypatch):
    """A CPU batch still queued after ``steal_after_s`` with no CPU free runs on the driver's threads; a GPU
    batch must not (it would use a GPU it does not hold). Seen once on a loaded 2-core box, where the
    queue wait passed the 10 s delay; here the delay is shortened so the wait always passes it."""
    import muster.data as md
    from muster.data import execution

    monkeypatch.setattr(execution._Workers, "steal_after_s", 0.25)
    rows = md.range(8, override_num_blocks=4).map_batches(_slow_batch, num_gpus=1, batch_size=2).take_all()
    assert sorted(r["id"] for r in rows) == list(range(8))
    assert os.getpid() not in {r["pid"] for r in rows}, "a GPU batch ran on the driver"


def test_a_data_functions_batches_run_only_where_a_gpu_is_held(gpu_engine):
    """``map_batches(fn, num_gpus=1)``: every batch runs on a pooled worker holding one of the 2 GPUs.
    (Before, a batch that found both GPUs busy ran on the driver's threads, on a GPU it
    did not hold: seen on an H200 with gpu_check.py.)"""
    import muster.data as md

    rows = md.range(16, override_num_blocks=8).map_batches(_where_each_batch_ran, num_gpus=1, batch_size=2).take_all()
    assert sorted(r["id"] for r in rows) == list(range(16))
    assert os.getpid() not in {r["pid"] for r in rows}, "a batch ran on the driver"
    assert {r["visible"] for r in rows} <= {"0", "1"}, {r["visible"] for r in rows}


class _Said(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_a_data_gpu_batch_waiting_for_held_gpus_says_what_holds_them(gpu_engine, monkeypatch):
    """Both GPUs held by actors: a ``map_batches(fn, num_gpus=1)`` batch waits for one, and says so (what it
    asks for, which actors hold the GPUs, that it starts once one is freed), then runs once they are killed.
    Before, it waited without a word: muster never hangs silently."""
    import muster.data as md
    from muster.core.local import slots

    monkeypatch.setattr(slots, "_WAIT_NOTICE_S", 0.3)
    holders = [GpuActor.options(num_gpus=1).remote() for _ in range(2)]
    assert sorted(muster.get([h.ids.remote() for h in holders], timeout=TIMEOUT)) == [[0], [1]]
    handler = _Said()
    said = handler.messages
    logger = logging.getLogger("muster.data")
    logger.addHandler(handler)
    got: dict = {}
    run = threading.Thread(target=lambda: got.setdefault("rows", md.range(4, override_num_blocks=2).map_batches(
        _where_each_batch_ran, num_gpus=1, batch_size=2).take_all()), daemon=True)
    try:
        run.start()
        deadline = time.monotonic() + TIMEOUT
        while not any("waits for a GPU" in m for m in said):
            assert time.monotonic() < deadline, f"no word of the wait; said: {said}"
            time.sleep(0.1)
        message = next(m for m in said if "waits for a GPU" in m)
        assert "GPU=1" in message and message.count("GpuActor") == 2, message
        assert "It starts once GPU is freed" in message, message
        assert run.is_alive() and "rows" not in got
        for h in holders:
            muster.kill(h)
        run.join(TIMEOUT)
    finally:
        logger.removeHandler(handler)
    assert sorted(r["id"] for r in got["rows"]) == list(range(4))
    assert {r["visible"] for r in got["rows"]} <= {"0", "1"}
