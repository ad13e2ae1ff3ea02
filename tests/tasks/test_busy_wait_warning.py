"""A task or actor that waits for resources other running work holds says so, once.

muster never hangs silently: after ``slots._WAIT_NOTICE_S`` (5 s) of waiting, one warning on
muster's logger names the waiting task or actor, what it asks for, what is free, what holds the
rest (by name and pid), and the fix. Work that starts promptly, or waits less than that, is never
warned about, and a backlog of tasks of one shape gets one warning, not one per task.
"""

from __future__ import annotations

import os
import time

from _task_helpers import TIMEOUT, wait_for
from _waiting_work import Needy, hold_until, nap

import muster
from muster.core.local import slots


@muster.remote
def needs_all_cpus():
    return "ran"


@muster.remote
class Holder:
    def pid(self):
        return os.getpid()


def _cpus() -> int:
    return int(muster.cluster_resources()["CPU"])


def test_a_task_waiting_for_cpus_an_actor_holds_is_warned_about_naming_both_then_runs(busy):
    cpus = _cpus()
    holder = Holder.options(num_cpus=cpus).remote()
    pid = muster.get(holder.pid.remote(), timeout=TIMEOUT)
    t0 = time.monotonic()
    ref = needs_all_cpus.options(num_cpus=cpus).remote()
    try:
        assert wait_for(busy, timeout=10), "no warning within 10 s for a task waiting for CPUs"
        assert time.monotonic() - t0 >= slots._WAIT_NOTICE_S - 0.5  # not before the notice delay (5 s)
        (message,) = busy()
        assert "task needs_all_cpus has waited" in message
        assert f"{{CPU={cpus}}}" in message and "free now: CPU=0" in message  # what it asks, what is free
        assert f"Held by: actor Holder (pid {pid}, CPU={cpus})" in message  # who holds it
        assert "muster.init(num_cpus=N)" in message and "num_cpus=" in message  # the fix
        assert muster.wait([ref], timeout=0)[0] == []  # still waiting
    finally:
        muster.kill(holder)
    assert muster.get(ref, timeout=TIMEOUT) == "ran"  # it starts once the holder is gone
    assert len(busy()) == 1


def test_an_actor_waiting_for_cpus_a_task_holds_is_warned_about_once(busy, monkeypatch, tmp_path):
    monkeypatch.setattr(slots, "_WAIT_NOTICE_S", 0.3)  # the slot table tells every 0.6 s from then on
    cpus, go, started = _cpus(), str(tmp_path / "go"), str(tmp_path / "started")
    ref = hold_until.options(num_cpus=cpus).remote(go, started)
    assert wait_for(lambda: os.path.exists(started), TIMEOUT)
    needy = Needy.options(num_cpus=cpus).remote()
    try:
        assert wait_for(busy, timeout=10), "no warning for an actor waiting for CPUs"
        time.sleep(1.5)  # the table tells it twice more meanwhile: still one warning
        (message,) = busy()
        assert "actor Needy has waited" in message and f"{{CPU={cpus}}}" in message
        assert "Held by: task hold_until (pid " in message
        open(go, "w").close()
        holder_pid = muster.get(ref, timeout=TIMEOUT)
        assert f"(pid {holder_pid}, CPU={cpus})" in message
        assert muster.get(needy.ping.remote(), timeout=TIMEOUT) == "pong"  # created once the task ended
    finally:
        open(go, "w").close()
        muster.kill(needy)
    assert len(busy()) == 1


@muster.remote(num_cpus=1)
def waits_on(path: str, started: str, cpus: int):
    return muster.get(hold_until.options(num_cpus=cpus).remote(path, started))


def test_a_task_waiting_in_get_is_not_named_as_holding_the_cpus_it_lent(busy, monkeypatch, tmp_path):
    # The outer task lends its CPU while it waits in muster.get: only the inner task holds the CPUs. It was named
    # too, holding CPU=1 of a machine whose every CPU the inner task held.
    monkeypatch.setattr(slots, "_WAIT_NOTICE_S", 0.3)
    cpus, go, started = _cpus(), str(tmp_path / "go"), str(tmp_path / "started")
    outer = waits_on.remote(go, started, cpus)
    assert wait_for(lambda: os.path.exists(started), TIMEOUT)
    ref = needs_all_cpus.options(num_cpus=cpus).remote()
    try:
        assert wait_for(busy, timeout=10), "no warning for a task waiting for CPUs"
        (message,) = busy()
        assert "Held by: task hold_until (pid " in message and f"CPU={cpus})." in message, message
        assert "waits_on" not in message, message
    finally:
        open(go, "w").close()
    assert muster.get([outer, ref], timeout=TIMEOUT)[1] == "ran"


def test_a_backlog_of_tasks_of_one_shape_gets_one_warning(busy, monkeypatch):
    monkeypatch.setattr(slots, "_WAIT_NOTICE_S", 0.3)
    cpus = _cpus()
    refs = [nap.options(num_cpus=cpus).remote(1.0) for _ in range(3)]  # one at a time: each waits for the last
    assert muster.get(refs, timeout=TIMEOUT) == ["rested"] * 3
    (message,) = busy()
    assert "task nap has waited" in message and "Held by: task nap (pid " in message


def test_work_that_starts_promptly_or_waits_briefly_is_not_warned_about(busy):
    cpus = _cpus()
    assert muster.get(needs_all_cpus.remote(), timeout=TIMEOUT) == "ran"
    short = nap.options(num_cpus=cpus).remote(1.0)  # holds every CPU for 1 s
    waiter = needs_all_cpus.options(num_cpus=cpus).remote()  # waits ~1 s: well under the notice delay
    assert muster.get([short, waiter], timeout=TIMEOUT) == ["rested", "ran"]
    needy = Needy.options(num_cpus=cpus).remote()
    assert muster.get(needy.ping.remote(), timeout=TIMEOUT) == "pong"
    muster.kill(needy)
    assert busy() == []
