"""Gang scheduling (Ray Serve's ``gang_scheduling_config``): replicas start, stop and restart in whole gangs.

It was accepted with a warning and did nothing: replicas started one by one, ``gang_context`` was None, and a
dead member was replaced alone while its peers ran on without it.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from serve_helpers import alive, wait_until

import muster
from muster import serve
from muster.serve.config import GangPlacementStrategy, GangRuntimeFailurePolicy, GangSchedulingConfig
from muster.serve.exceptions import DeployFailedError
from muster.serve.schema import DeploymentSchema

pytestmark = pytest.mark.allow_leftover_workers  # Serve lives across the module (the client fixture checks its end)


@serve.deployment(num_replicas=4, ray_actor_options={"num_cpus": 0.25},
                  gang_scheduling_config=GangSchedulingConfig(gang_size=2))
class Member:
    def __init__(self, fail_rank: int | None = None):
        ctx = serve.get_replica_context()
        gang = ctx.gang_context
        if gang.rank == fail_rank:
            raise RuntimeError(f"rank {gang.rank} cannot start")
        self.me = (gang.gang_id, gang.rank, gang.world_size, tuple(gang.member_replica_ids), gang.pg_name,
                   ctx.replica_id.unique_id, os.getpid())

    def __call__(self) -> tuple:
        return self.me


def _members(handle, n: int) -> dict[str, tuple]:
    """Each replica's answer, by its unique id, once ``n`` distinct replicas have answered (bounded)."""
    seen: dict[str, tuple] = {}

    def ask() -> bool:
        for _ in range(20):
            me = handle.remote().result(timeout_s=10)
            seen[me[5]] = me
        return len(seen) >= n

    wait_until(ask, 30, f"{n} replicas to answer")
    return seen


def _gangs(members: dict[str, tuple]) -> dict[str, list[tuple]]:
    out: dict[str, list[tuple]] = {}
    for me in members.values():
        out.setdefault(me[0], []).append(me)
    return {g: sorted(ms, key=lambda m: m[1]) for g, ms in out.items()}


def test_the_config_is_checked_naming_the_value_and_the_fix():
    assert Member.options(num_replicas=6).config.gang_scheduling_config.gang_size == 2
    with pytest.raises(ValueError, match=r"num_replicas=3 is not a multiple of gang_size=2.*use 4"):
        Member.options(num_replicas=3)
    with pytest.raises(ValueError, match=r"autoscaling_config.max_replicas=5 is not a multiple of gang_size=2"):
        Member.options(autoscaling_config={"min_replicas": 2, "max_replicas": 5})
    with pytest.raises(ValueError, match=r"RESTART_REPLICA\) is not implemented.*use RESTART_GANG"):
        GangSchedulingConfig(gang_size=2, runtime_failure_policy="RESTART_REPLICA")
    with pytest.raises(ValueError, match=r"gang_placement_strategy='STRICT_PACK'\): use one of PACK, SPREAD"):
        GangSchedulingConfig(gang_size=2, gang_placement_strategy="STRICT_PACK")
    with pytest.raises(ValueError, match=r"gang_size=0"):
        GangSchedulingConfig(gang_size=0)
    with pytest.raises(ValueError, match=r"lacks gang_size"):
        Member.options(gang_scheduling_config={"gang_placement_strategy": "SPREAD"})
    # a config file's dict, with Ray's enum values as strings
    schema = DeploymentSchema.parse_obj({"name": "Member", "num_replicas": 4, "gang_scheduling_config": {
        "gang_size": 4, "gang_placement_strategy": "SPREAD"}})
    assert schema.gang_scheduling_config == {"gang_size": 4, "gang_placement_strategy": "SPREAD"}
    spread = Member.options(gang_scheduling_config={"gang_size": 4, "gang_placement_strategy": "SPREAD"})
    assert spread.config.gang_scheduling_config == GangSchedulingConfig(4, GangPlacementStrategy.SPREAD,
                                                                        GangRuntimeFailurePolicy.RESTART_GANG)


def test_members_know_their_gang_and_a_dead_member_takes_its_gang_down_and_back(client):
    handle = serve.run(Member.bind(), name="gangs", route_prefix=None)
    gangs = _gangs(_members(handle, 4))
    assert len(gangs) == 2
    for gang_id, members in gangs.items():
        ids = tuple(m[5] for m in members)
        assert [m[1] for m in members] == [0, 1] and {m[2] for m in members} == {2}
        assert {m[3] for m in members} == {ids}  # every member lists the gang's ids, by rank
        assert len({m[4] for m in members}) == 1 and members[0][4]  # one placement group per gang
    doomed, spared = gangs.values()
    os.kill(doomed[1][6], signal.SIGKILL)
    wait_until(lambda: not alive(doomed[0][6]), 30, "the dead member's peer to be stopped with it")

    def replaced() -> bool:
        now = _gangs(_members(handle, 4))
        return len(now) == 2 and doomed[0][0] not in now and spared[0][0] in now

    wait_until(replaced, 60, "a whole new gang beside the untouched one")
    assert all(alive(m[6]) for m in spared)
    status = serve.status().applications["gangs"].deployments["Member"]
    assert status.replica_states == {"RUNNING": 4} and status.restarts >= 1
    # a redeploy with fewer replicas stops a whole gang
    handle = serve.run(Member.options(num_replicas=2).bind(), name="gangs", route_prefix=None)
    wait_until(lambda: serve.status().applications["gangs"].deployments["Member"].replica_states == {"RUNNING": 2},
               30, "one gang to stop")
    assert len(_gangs(_members(handle, 2))) == 1
    handle = serve.run(Member.bind(), name="gangs", route_prefix=None)  # and more starts a whole gang
    assert len(_gangs(_members(handle, 4))) == 2
    serve.delete("gangs")


def test_a_slow_run_store_while_a_member_dies_starts_one_new_gang_not_two(client, monkeypatch):
    """The controller took the dead member out, wrote its end to the run store, and only then counted its gang's
    replacement as on its way: a supervisor tick in between saw a replica missing and started a gang of its own,
    so the deployment ran 6 replicas for 4 for good (seen once in CI, a tick landing in that window)."""
    from muster.serve import api

    handle = serve.run(Member.bind(), name="slow_store", route_prefix=None)
    doomed, spared = _gangs(_members(handle, 4)).values()
    record = api._controller.record
    write = record.replica_ended

    def slow_write(*args, **kwargs):  # the supervisor ticks every 0.1 s
        time.sleep(0.5)
        write(*args, **kwargs)

    monkeypatch.setattr(record, "replica_ended", slow_write)
    os.kill(doomed[1][6], signal.SIGKILL)

    def settled() -> bool:
        states = serve.status().applications["slow_store"].deployments["Member"].replica_states
        return set(states) == {"RUNNING"} and states["RUNNING"] >= 4 and not any(
            alive(m[6]) for m in doomed)

    wait_until(settled, 60, "the new gang to run and the old one to be gone")
    time.sleep(1.0)  # a second gang, if one was started, is running by now
    assert serve.status().applications["slow_store"].deployments["Member"].replica_states == {"RUNNING": 4}
    assert len(_gangs(_members(handle, 4))) == 2
    serve.delete("slow_store")


def test_a_gang_that_cannot_start_every_member_starts_none_and_gives_its_room_back(client):
    free = muster.available_resources().get("CPU", 0.0)
    with pytest.raises(DeployFailedError, match="rank 1 cannot start"):
        serve.run(Member.options(num_replicas=2).bind(fail_rank=1), name="broken", route_prefix=None)
    assert serve.status().applications["broken"].status == "DEPLOY_FAILED"
    wait_until(lambda: muster.available_resources().get("CPU", 0.0) == pytest.approx(free), 15,
               "the failed gang's placement group and replicas to give their CPUs back")
    serve.delete("broken")


def test_an_idle_gang_scales_to_zero(client):
    """Scaling moves whole gangs; an idle gang of 2 was stuck at 2: the policy's step down to 1 was rounded back
    up to a whole gang, so its last step, to 0, was never taken (Ray's gang policy counts the gang as one)."""
    auto = {"min_replicas": 0, "max_replicas": 2, "initial_replicas": 2, "upscale_delay_s": 30,
            "downscale_delay_s": 0.5, "metrics_interval_s": 0.2, "look_back_period_s": 0.4}
    handle = serve.run(Member.options(autoscaling_config=auto).bind(), name="idle", route_prefix=None)
    assert len(_gangs(_members(handle, 2))) == 1

    def at_zero() -> bool:
        d = serve.status().applications["idle"].deployments["Member"]
        return not d.replica_states and d.target_replicas == 0

    wait_until(at_zero, 30, "the idle gang at 0 replicas")
    serve.delete("idle")


@serve.deployment(num_replicas=2, ray_actor_options={"num_cpus": 0.25},
                  gang_scheduling_config=GangSchedulingConfig(gang_size=2))
class Flaky:
    """A gang whose rank 0 dies just after it started (flag ``die0``) while rank 1 still starts (``slow1``: it
    writes its pid to ``slow_pid``, then takes 2 s). Each flag is used once. Rank 0 dies once rank 1 is in its 2 s
    (0.3 s after its ``slow_pid``): a plain 0.3 s after its own start could come before the controller had it
    running on a loaded box (its start then failed: "a replica failed to start", not the lost member)."""

    def __init__(self, folder: str):
        import threading
        import time

        def die_once_rank_1_starts() -> None:
            deadline = time.monotonic() + 30
            while not os.path.exists(os.path.join(folder, "slow_pid")) and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.3)
            os._exit(1)

        rank = serve.get_replica_context().gang_context.rank
        flag = os.path.join(folder, "die0" if rank == 0 else "slow1")
        if os.path.exists(flag):
            os.remove(flag)
            if rank == 0:
                threading.Thread(target=die_once_rank_1_starts, daemon=True).start()
            else:
                with open(os.path.join(folder, "slow_pid"), "w") as f:
                    f.write(str(os.getpid()))
                time.sleep(2.0)
        self.me = (rank, os.getpid())

    def __call__(self) -> tuple:
        return self.me


def test_a_member_that_dies_while_its_gang_starts_fails_the_gang_and_leaves_no_member_running(client, tmp_path):
    """The gang started "whole" with one member: the deploy succeeded with a lone replica (its peer died while
    it started), and the supervisor then added a new gang beside it."""
    free = muster.available_resources().get("CPU", 0.0)
    for flag in ("die0", "slow1"):
        (tmp_path / flag).write_text("")
    with pytest.raises(DeployFailedError, match="lost member .* while it started"):
        serve.run(Flaky.bind(str(tmp_path)), name="flaky", route_prefix=None)
    slow = int((tmp_path / "slow_pid").read_text())
    wait_until(lambda: not alive(slow), 15, "the member that was still starting to be stopped")
    wait_until(lambda: muster.available_resources().get("CPU", 0.0) == pytest.approx(free), 15,
               "the gang's placement group and replicas to give their CPUs back")
    serve.delete("flaky")

