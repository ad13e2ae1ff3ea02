"""Each replica's own placement group (Ray Serve's ``placement_group_bundles`` / ``placement_group_strategy``).

They were accepted with a warning and did nothing: a replica ran in no group, held only its ray_actor_options,
its helpers drew on the general pool, bundles that could never fit started anyway, and a replica too big for
bundle 0 was not refused.
"""

from __future__ import annotations

import os
import signal
import threading

import pytest
from serve_helpers import wait_until

import muster
from muster import serve
from muster.exceptions import ResourcesUnavailableError
from muster.util.placement_group import get_current_placement_group

pytestmark = pytest.mark.allow_leftover_workers  # Serve lives across the module (the client fixture checks its end)

_BUNDLES = [{"CPU": 0.5}, {"CPU": 0.5}]


@muster.remote(num_cpus=0.5)
class Helper:
    def group(self) -> tuple:
        pg = get_current_placement_group()
        return None if pg is None else (pg.id, pg.bundle_specs)


@serve.deployment(ray_actor_options={"num_cpus": 0.25}, placement_group_bundles=_BUNDLES,
                  placement_group_strategy="STRICT_PACK")
class InGroup:
    def __init__(self):
        self.helper = Helper.remote()  # no options: captured into the replica's group (bundle 1 has room)

    def __call__(self) -> tuple:
        pg = get_current_placement_group()
        mine = None if pg is None else (pg.id, pg.bundle_specs, pg.strategy)
        return mine, muster.get(self.helper.group.remote(), timeout=30), os.getpid()


def test_a_replica_and_its_helper_run_in_its_own_group_which_goes_with_it(client):
    free = muster.available_resources().get("CPU", 0.0)
    handle = serve.run(InGroup.bind(), name="grouped", route_prefix=None)
    mine, helper, pid = handle.remote().result(timeout_s=30)
    assert mine is not None, "the replica ran in no placement group"
    assert mine[1:] == (_BUNDLES, "STRICT_PACK")
    assert helper == mine[:2]  # the helper actor went into the replica's group
    # the whole group is held while the replica lives (its helper draws on bundle 1, not on the pool)
    assert muster.available_resources().get("CPU", 0.0) == pytest.approx(free - 1.0)
    os.kill(pid, signal.SIGKILL)  # its replacement gets a new group; the old one is given back
    answers: list[tuple] = []

    def replaced() -> bool:
        try:
            answers.append(handle.remote().result(timeout_s=10))
        except Exception:  # noqa: BLE001 - the dead replica's call, before the replacement runs
            return False
        return answers[-1][2] != pid

    wait_until(replaced, 30, "a new replica")
    again = answers[-1]
    assert again[0] is not None and again[0][0] != mine[0] and again[1] == again[0][:2]
    _free_cpus_become(free - 1.0, "the dead replica's group to be given back")
    serve.delete("grouped")
    _free_cpus_become(free, "the replica's placement group to be given back")


def test_a_downscale_gives_the_stopped_replicas_group_back(client):
    free = muster.available_resources().get("CPU", 0.0)
    serve.run(InGroup.options(num_replicas=2).bind(), name="two", route_prefix=None)
    assert muster.available_resources().get("CPU", 0.0) == pytest.approx(free - 2.0)
    serve.run(InGroup.options(num_replicas=1).bind(), name="two", route_prefix=None)
    _free_cpus_become(free - 1.0, "the stopped replica's group to be given back")
    serve.delete("two")
    _free_cpus_become(free, "the last replica's group to be given back")


def test_bundles_that_can_never_fit_fail_serve_run_at_once_naming_them(client):
    huge = [{"CPU": 0.25}, {"CPU": 10_000}]
    with pytest.raises(ResourcesUnavailableError, match=r"placement_group_bundles=.*10000"):
        serve.run(InGroup.options(placement_group_bundles=huge).bind(), name="huge", route_prefix=None)
    assert "huge" not in serve.status().applications


def test_ray_actor_options_that_do_not_fit_bundle_0_are_refused_naming_both():
    with pytest.raises(ValueError, match=r"bundle 0.*CPU=2.*placement_group_bundles\[0\].*CPU=0.5"):
        serve.deployment(ray_actor_options={"num_cpus": 2}, placement_group_bundles=_BUNDLES)(_plain)
    with pytest.raises(ValueError, match=r"bundle 0.*CPU=1}.*placement_group_bundles\[0\].*CPU=0.5"):
        InGroup.options(ray_actor_options={})  # Ray's default of 1 CPU
    with pytest.raises(ValueError, match="placement_group_strategy='NEAR'"):
        InGroup.options(placement_group_strategy="NEAR")


def test_a_label_selector_needs_bundles_and_one_is_for_every_bundle():
    with pytest.raises(ValueError, match="placement_group_bundle_label_selector=.* without placement_group_bundles"):
        serve.deployment(placement_group_bundle_label_selector=[{"zone": "a"}])(_plain)
    with pytest.raises(ValueError, match="one per bundle \\(2\\)"):
        InGroup.options(placement_group_bundle_label_selector=[{}, {}, {}])
    one = InGroup.options(placement_group_bundle_label_selector=[{"zone": "a"}])
    assert one.config.placement_group_bundle_label_selector == [{"zone": "a"}, {"zone": "a"}]


def _free_cpus_become(expected: float, what: str) -> None:
    wait_until(lambda: muster.available_resources().get("CPU", 0.0) == pytest.approx(expected), 15, what)


def _plain() -> str:
    return "plain"


@serve.deployment(ray_actor_options={"num_cpus": 1})
class Plain:
    def __call__(self) -> str:
        return "plain"


@pytest.mark.parametrize("deployment", [InGroup, Plain], ids=["own group", "plain replica"])
def test_a_first_deploy_that_waits_for_room_shows_it_in_status_only_while_it_waits(client, deployment):
    """A new app is in serve.status() as DEPLOYING while its replicas start (it was missing until they all ran), its
    deployment UPDATING with what the replica waits for; the message goes once it has the room."""
    from muster.util.placement_group import placement_group, remove_placement_group

    name, dep = f"waits-{deployment.name.lower()}", deployment.name
    blocker = placement_group([{"CPU": muster.available_resources().get("CPU", 0.0)}])  # every free CPU
    assert blocker.wait(10)
    deploying = threading.Thread(target=serve.run, args=(deployment.bind(),),
                                 kwargs={"name": name, "route_prefix": None})
    deploying.start()
    try:
        wait_until(lambda: _message(name, dep).startswith("waiting for resources"), 15, "the wait shown in status")
        app = serve.status().applications[name]
        assert (app.status, app.deployments[dep].status) == ("DEPLOYING", "UPDATING")
    finally:
        remove_placement_group(blocker)
        deploying.join(60)
    assert not deploying.is_alive()
    app = serve.status().applications[name]
    assert (app.status, app.deployments[dep].status, app.deployments[dep].message) == ("RUNNING", "HEALTHY", "")
    serve.delete(name)


def _message(app: str, deployment: str) -> str:
    found = serve.status().applications.get(app)
    return "" if found is None or deployment not in found.deployments else found.deployments[deployment].message
