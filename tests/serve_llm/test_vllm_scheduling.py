"""A vLLM replica's scheduling group: what runs without vLLM installed (the engine starts only with it)."""

from __future__ import annotations

import os

import pytest

import muster
from muster.serve.llm.engine import vllm as vllm_engine
from muster.serve.llm.errors import LLMConfigError


def _autogroup_on() -> bool:
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled") as f:
            return f.read().strip() == "1"
    except OSError:
        return False


@muster.remote(num_cpus=0.1)
class Replica:
    """Stands in for a replica process: the engine adapter moves its process as it would before vLLM starts."""

    def regroup(self, nice: int) -> tuple[bool, str, str]:
        vllm_engine._own_scheduling_group(nice)
        group = refused = ""
        try:
            with open("/proc/self/autogroup") as f:
                group = f.read().strip()
            if not group.endswith(f"nice {nice}"):  # does this machine let a process lower its group's weight?
                with open("/proc/self/autogroup", "w") as f:
                    f.write(str(nice))
        except OSError as exc:
            refused = repr(exc)
        return os.getsid(0) == os.getpid(), group, refused


def test_a_local_replica_gets_a_low_weight_group_of_its_own_before_vllm_starts():
    """vLLM's engine processes (started from the replica) busy-poll; their group yields CPU to the ingress."""
    replica = Replica.remote()
    try:
        leader, group, refused = muster.get(replica.regroup.remote(10), timeout=60)
    finally:
        muster.kill(replica)
    if _autogroup_on():
        assert leader, "the replica did not start a session (an autogroup) of its own"
        assert group.endswith("nice 10") or refused, group  # only a machine that refuses the write may differ
    else:  # nothing to weigh: the replica stays in its worker's session
        assert not leader


def test_the_drivers_own_session_is_never_touched():
    """The engine can run in the driver (the adapter used directly): its session is the user's."""
    before = os.getsid(0)
    vllm_engine._own_scheduling_group(19)
    assert os.getsid(0) == before


@pytest.mark.parametrize("raw", ["-1", "20", "low"])
def test_a_bad_muster_vllm_nice_names_the_value_and_the_range(monkeypatch, raw):
    monkeypatch.setenv("MUSTER_VLLM_NICE", raw)
    with pytest.raises(LLMConfigError, match=f"MUSTER_VLLM_NICE='{raw}': use an integer from 0"):
        vllm_engine._group_nice()
    monkeypatch.setenv("MUSTER_VLLM_NICE", "0")
    assert vllm_engine._group_nice() == 0
