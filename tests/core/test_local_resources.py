"""Resource slots: impossible requests fail at once, GPUs by id, gangs all or nothing.

A separate ``LocalRuntime(num_cpus=2, num_gpus=2, resources={"tpu_like": 1})``
serves this module (GPUs here are only ids handed out through
CUDA_VISIBLE_DEVICES: no CUDA is touched).  Each test kills what it creates,
so the module's runtime holds no workers between tests.
"""

from __future__ import annotations

import os
import re
import threading
import time

import psutil
import pytest

from muster.core.api import get_runtime
from muster.core.local import LocalRuntime, slots
from muster.core.local.slots import SlotTable
from muster.exceptions import GetTimeoutError, ResourcesUnavailableError

from _shared import wait_for

TIMEOUT = 30
FULL = {"CPU": 2.0, "GPU": 2.0, "tpu_like": 1.0, **slots.node_resources()}  # and Ray's node: ones


class Probe:
    def visible(self) -> str | None:
        return os.environ.get("CUDA_VISIBLE_DEVICES")

    def pid(self) -> int:
        return os.getpid()


@pytest.fixture(scope="module")
def rt():
    saved = os.environ.get("MUSTER_PRELOAD")
    os.environ["MUSTER_PRELOAD"] = ""  # these workers never import torch
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    runtime = LocalRuntime(num_cpus=2, num_gpus=2, resources={"tpu_like": 1})
    try:
        runtime.start(wait=True)
    finally:
        if saved is None:
            os.environ.pop("MUSTER_PRELOAD", None)
        else:
            os.environ["MUSTER_PRELOAD"] = saved
    yield runtime
    runtime.shutdown()


@pytest.fixture
def track(rt):
    """Kill every actor handed to ``track`` after the test; check everything came back."""
    made = []

    def add(*handles):
        made.extend(handles)
        return handles[0] if len(handles) == 1 else list(handles)

    yield add
    for h in made:
        rt.kill(h)
    assert wait_for(lambda: rt.available() == FULL), f"resources not returned: {rt.available()}"


def _workers_of(rt: LocalRuntime) -> list[int]:
    return [p.pid for p in psutil.Process(rt._zygote.pid).children() if p.status() != psutil.STATUS_ZOMBIE]


def test_totals(rt):
    assert rt.resources() == FULL
    assert rt.available() == FULL


# -- requests that can never fit ------------------------------------------
def test_gang_larger_than_the_machine_fails_at_once_naming_ask_and_total(rt):
    t0 = time.monotonic()
    with pytest.raises(ResourcesUnavailableError) as info:
        rt.create_gang(3, Probe, {"CPU": 1})
    assert time.monotonic() - t0 < 20  # the alternative is waiting forever for resources that never come
    msg = str(info.value)
    assert "CPU=3" in msg and "CPU=2" in msg, msg
    assert "num_workers" in msg or "num_cpus" in msg, msg  # says how to fix it
    assert info.value.requested == {"CPU": 3.0}
    assert info.value.total["CPU"] == 2.0
    assert _workers_of(rt) == [] and rt.available() == FULL


def test_gpu_on_a_machine_without_gpus_fails_at_once_with_use_gpu_hint():
    session = get_runtime()  # the test session's engine has num_gpus=0
    assert session.resources().get("GPU", 0) == 0
    for attempt in (
        lambda: session.create_actor(Probe, (), {}, {"CPU": 1, "GPU": 1}),
        lambda: session.create_gang(2, Probe, {"GPU": 1}),
        lambda: session.submit(os.getpid, (), {}, {"GPU": 0.5}),
    ):
        t0 = time.monotonic()
        with pytest.raises(ResourcesUnavailableError, match="use_gpu=False"):
            attempt()
        assert time.monotonic() - t0 < 20  # the alternative is waiting forever for resources that never come


def test_unknown_or_too_much_custom_resource_fails_at_once(rt):
    with pytest.raises(ResourcesUnavailableError, match="tpu_like=2") as info:
        rt.create_actor(Probe, (), {}, {"tpu_like": 2})
    assert "tpu_like=1" in str(info.value)
    with pytest.raises(ResourcesUnavailableError, match=r"muster\.init\(resources="):
        rt.create_actor(Probe, (), {}, {"fpga": 1})
    assert rt.available() == FULL


def test_rays_node_resources_are_this_nodes_own(rt, track):
    """Ray's ``node:<IP>`` and ``node:__internal_head__`` (one unit each) are the one node's: a share of one runs
    there, and is not counted (it is the only node); more than the unit can never fit, as in Ray."""
    track(rt.create_actor(Probe, (), {}, {"CPU": 1, "node:__internal_head__": 0.5}))
    track(rt.create_actor(Probe, (), {}, {"CPU": 1, "node:__internal_head__": 0.75}))
    assert rt.available() == {**FULL, "CPU": 0.0}
    with pytest.raises(ResourcesUnavailableError, match="node:__internal_head__=1 in total"):
        rt.create_actor(Probe, (), {}, {"node:__internal_head__": 2})


def test_fractional_gpu_gang_that_cannot_fit_fails_at_once(rt):
    with pytest.raises(ResourcesUnavailableError, match="GPU"):
        rt.create_gang(5, Probe, {"GPU": 0.5})  # 2 GPUs hold at most 4 halves


def test_bad_requests_are_value_errors(rt):
    with pytest.raises(ValueError, match="CPU"):
        rt.create_actor(Probe, (), {}, {"CPU": -1})
    with pytest.raises(ValueError, match="GPU"):
        rt.create_actor(Probe, (), {}, {"GPU": 1.5})


# -- GPU ids and custom resources -----------------------------------------
def test_whole_gpus_get_distinct_cuda_visible_devices(rt, track):
    a = track(rt.create_actor(Probe, (), {}, {"GPU": 1}))
    b = track(rt.create_actor(Probe, (), {}, {"GPU": 1}))
    seen = sorted([a.call("visible").result(TIMEOUT), b.call("visible").result(TIMEOUT)])
    assert seen == ["0", "1"]
    assert sorted(a.gpu_ids + b.gpu_ids) == [0, 1]
    assert rt.available()["GPU"] == 0.0


def test_two_gpu_actor_sees_both(rt, track):
    a = track(rt.create_actor(Probe, (), {}, {"GPU": 2}))
    assert a.call("visible").result(TIMEOUT) == "0,1"


def test_fractional_gpus_share_one_id(rt, track):
    gang = track(*rt.create_gang(2, Probe, {"GPU": 0.5}))
    assert [h.call("visible").result(TIMEOUT) for h in gang] == ["0", "0"]
    assert gang[0].gpu_ids == gang[1].gpu_ids == [0]
    assert rt.available()["GPU"] == 1.0
    whole = track(rt.create_actor(Probe, (), {}, {"GPU": 1}))
    assert whole.call("visible").result(TIMEOUT) == "1"  # the shared GPU is not handed out whole


def test_custom_resources_are_accounted(rt, track):
    a = track(rt.create_actor(Probe, (), {}, {"CPU": 1, "tpu_like": 1}))
    assert rt.available() == {**FULL, "CPU": 1.0, "tpu_like": 0.0}
    # Feasible but busy: waits, and gives up at its timeout without taking anything.
    with pytest.raises(GetTimeoutError):
        rt.create_gang(1, Probe, {"tpu_like": 1}, timeout_s=0.5)
    assert rt.available() == {**FULL, "CPU": 1.0, "tpu_like": 0.0}
    rt.kill(a)
    assert wait_for(lambda: rt.available() == FULL)
    b = track(rt.create_actor(Probe, (), {}, {"tpu_like": 1}))
    assert b.is_alive()


# -- busy: wait, say so, all or nothing -------------------------------------
def test_busy_gang_waits_says_so_and_never_starts_partially(rt, track, monkeypatch):
    monkeypatch.setattr(slots, "_WAIT_NOTICE_S", 0.3)
    holder = track(rt.create_actor(Probe, (), {}, {"CPU": 1}))
    holder_pid = holder.pid
    messages: list[str] = []
    result: dict = {}

    def start_gang():
        try:
            result["gang"] = rt.create_gang(2, Probe, {"CPU": 1}, on_wait=messages.append)
        except BaseException as exc:  # noqa: BLE001
            result["error"] = exc

    thread = threading.Thread(target=start_gang, daemon=True)
    thread.start()
    assert wait_for(lambda: messages, timeout=10), "on_wait was never called"
    assert "Waiting for resources" in messages[0]
    assert "CPU=1" in messages[0]  # what it waits for / what is free
    assert f"(pid {holder_pid}, CPU=1)" in messages[0] and "It starts once CPU is freed" in messages[0]  # who holds it
    # All or nothing: the free CPU was not taken, no member process exists.
    assert thread.is_alive() and not result
    assert rt.available()["CPU"] == 1.0
    assert _workers_of(rt) == [holder_pid]

    rt.kill(holder)
    thread.join(TIMEOUT)
    assert not thread.is_alive() and "error" not in result, result
    gang = track(*result["gang"])
    assert len(gang) == 2 and all(h.is_alive() for h in gang)
    assert len({h.call("pid").result(TIMEOUT) for h in gang}) == 2
    assert rt.available()["CPU"] == 0.0


# -- SlotTable on its own (pure, in-process) ---------------------------------
def test_slot_table_wait_notice_comes_after_the_notice_delay(monkeypatch):
    monkeypatch.setattr(slots, "_WAIT_NOTICE_S", 0.5)
    table = SlotTable({"CPU": 2.0})
    (busy,) = table.acquire({"CPU": 1.0}, 1)
    notices: list[tuple[float, str]] = []
    got: list = []
    t0 = time.monotonic()
    thread = threading.Thread(
        target=lambda: got.extend(table.acquire({"CPU": 1.0}, 2,
                                                on_wait=lambda m: notices.append((time.monotonic(), m)))),
        daemon=True,
    )
    thread.start()
    assert wait_for(lambda: notices, timeout=5)
    assert notices[0][0] - t0 >= 0.5  # no notice before the delay
    assert got == []
    assert "2 worker(s) x {CPU=1}" in notices[0][1] and "free now: CPU=1 of CPU=2" in notices[0][1]
    assert table.free() == {"CPU": 1.0}  # nothing taken while waiting
    table.release(busy)
    thread.join(5)
    assert len(got) == 2 and table.free() == {"CPU": 0.0}
    for alloc in got:
        table.release(alloc)
    assert table.free() == {"CPU": 2.0}


def test_slot_table_gpu_ids_and_sharing():
    table = SlotTable({"CPU": 4.0, "GPU": 2.0})
    halves = table.acquire({"GPU": 0.5}, 3)
    assert [a.gpu_ids for a in halves] == [[0], [0], [1]]
    assert table.free()["GPU"] == 0.5
    with pytest.raises(GetTimeoutError):
        table.acquire({"GPU": 1.0}, 1, timeout_s=0.2)  # 0.5 free, but split: no whole GPU
    for a in halves:
        table.release(a)
    (both,) = table.acquire({"GPU": 2.0}, 1)
    assert both.gpu_ids == [0, 1]
    table.release(both)
    assert table.free() == {"CPU": 4.0, "GPU": 2.0}


def test_without_device_nodes_gpus_are_counted_by_nvidia_smi_in_its_own_process(monkeypatch, tmp_path):
    """Under WSL there is no /dev/nvidiaN: `nvidia-smi -L` is asked (NVML must not start in the
    driver, or the zygote cannot be forked); CUDA_VISIBLE_DEVICES still wins."""
    from muster.core.local import slots

    if any(re.fullmatch(r"nvidia\d+", n) for n in os.listdir("/dev")) or os.path.isdir("/proc/driver/nvidia"):
        pytest.skip("this machine has NVIDIA device nodes, which are counted first")
    smi = tmp_path / "nvidia-smi"  # GPU lines as nvidia-smi -L printed them on an H200; a MIG slice's line under one
    smi.write_text("#!/bin/sh\n"
                   "echo 'GPU 0: NVIDIA H200 (UUID: GPU-cae00d89-2a52-31bf-f7f3-5abe1952d1ae)'\n"
                   "echo '  MIG 1g.18gb     Device  0: (UUID: MIG-0a1b2c3d)'\n"
                   "echo 'GPU 1: NVIDIA H200 (UUID: GPU-0b2d1c4e-2a52-31bf-f7f3-5abe1952d1af)'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert slots._count_gpus() == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert slots._count_gpus() == 1


def test_new_work_leaves_a_pending_group_what_it_lacks_while_slots_come_back(monkeypatch):
    """A pending placement group goes first: new work may not take the CPUs it waits for, nor a GPU
    it does not need is held back. Once nothing has been given back for a while (what holds the
    slots may itself wait for new work), new work may take them again."""
    # the priority lasts 3 s from the group's start: a loaded box can hold this thread well past the 0.5 s it was
    # between the group's start and the takes below (the group's priority had then run out: "new work took ...")
    monkeypatch.setattr(slots, "_GROUP_PRIORITY_S", 3.0, raising=False)
    table = SlotTable({"CPU": 2.0, "GPU": 1.0})
    (holder,) = table.try_take([{"CPU": 1.0}])
    stop = threading.Event()
    group = threading.Thread(target=table.take_when_free, args=([{"CPU": 2.0}], stop), daemon=True)
    group.start()
    try:
        # the group waits: awaited, not slept for (a group thread not yet pending after a 0.1 s sleep left the
        # CPU to the take below)
        assert wait_for(lambda: bool(table._groups_waiting), TIMEOUT)
        assert table.try_take([{"CPU": 1.0}]) is None, "new work took a CPU the pending group waits for"
        gpu = table.try_take([{"GPU": 1.0}])  # the group needs no GPU
        assert gpu is not None
        table.release(gpu[0])
        assert wait_for(lambda: table.try_take([{"CPU": 1.0}]) is not None, TIMEOUT)  # no release for 3 s
    finally:
        stop.set()
        group.join(TIMEOUT)
        table.release(holder)
