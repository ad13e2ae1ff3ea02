"""Whether an app can ever start: what its replicas need, against what the engine has and the other apps hold.

``serve.run`` fails at once, naming all three, where Ray Serve waits forever for replicas that never fit.
"""

from __future__ import annotations

from typing import Any

from muster.core import resources as res
from muster.exceptions import ResourcesUnavailableError
from muster.serve._internal import replica_groups
from muster.serve._internal.plan import DeploymentPlan
from muster.serve._internal.state import AppState

#: what a deployment that asks for GPUs on a machine with none should change (a Train-worded hint misleads here)
_KNOB = "the deployment's ray_actor_options={'num_cpus': ..., 'num_gpus': ...}"
_NO_GPU_FIX = ("ask for none: the deployment's ray_actor_options num_gpus (an LLMConfig asks for GPUs by its "
               "accelerator_type and engine_kwargs tensor_parallel_size/pipeline_parallel_size)")


def need(plans: list[DeploymentPlan]) -> dict[str, float]:
    """What ``plans``' replicas hold in all when they start."""
    total: dict[str, float] = {}
    for p in plans:
        for k, v in p.config.replica_holds().items():
            total[k] = total.get(k, 0.0) + v * p.config.initial_replicas
    return total


def check_fits(runtime: Any, apps: dict[str, AppState], name: str, plans: list[DeploymentPlan]) -> None:
    """Refuse app ``name`` at once if its replicas (``plans``) can never start: one of them needs more than the
    engine has, or all of them more than the other ``apps`` leave.

    Raises:
        ResourcesUnavailableError: naming what was asked, what exists and what each other app holds.
    """
    total = runtime.resources()
    for p in plans:
        what = f"serve deployment {p.name!r} of app {name!r}"
        res.ensure_feasible(p.config.resources(), 1, total, what=what, knob=_KNOB, no_gpu_fix=_NO_GPU_FIX)
        _check_group_fits(runtime, p, what)
    held: dict[str, dict[str, float]] = {}
    for app in apps.values():
        if app.name == name:
            continue
        for d in app.deployments.values():
            for r in d.replicas.values():
                if r.state != "DEAD":
                    for k, v in r.holds().items():
                        held.setdefault(app.name, {}).setdefault(k, 0.0)
                        held[app.name][k] += v
    room = dict(total)
    for h in held.values():
        for k, v in h.items():
            room[k] = room.get(k, 0.0) - v
    needed = need(plans)
    missing = res.shortfall(needed, room)
    if not missing:
        return
    asked = ", ".join(f"{p.config.initial_replicas} x {p.name} {{{res.fmt(p.config.replica_holds())}}}"
                      for p in plans)
    others = "; ".join(f"app {a!r} holds {res.fmt(h)}" for a, h in held.items()) or "no other app runs"
    raise ResourcesUnavailableError(
        f"serve.run(app {name!r}) can never start: its replicas ({asked}) need {res.fmt(needed)}, but this engine "
        f"has {res.fmt(res.machine(total))} in total and {others}, leaving "
        f"{res.fmt(res.machine({k: max(v, 0) for k, v in room.items()}))}. "
        "Fix: lower num_replicas, ray_actor_options num_cpus/num_gpus or placement_group_bundles, serve.delete "
        "another app, or start "
        "the engine with more (muster.init(num_cpus=N) oversubscribes).",
        requested=needed, total=total,
    )


def _check_group_fits(runtime: Any, p: DeploymentPlan, what: str) -> None:
    """Refuse a deployment whose replicas' own placement groups (``placement_group_bundles``) can never be placed.

    Raises:
        ResourcesUnavailableError: naming the bundles, the strategy and what the engine has.
    """
    from muster.util.placement_group import never_fits

    bundles, strategy = p.config.placement_group_bundles, replica_groups.placement_strategy(p.config)
    if bundles is None:
        return
    why = never_fits(bundles, strategy, runtime.node_resources())
    if why is not None:
        raise ResourcesUnavailableError(
            f"{what} can never start: each replica's placement group, placement_group_bundles={bundles} "
            f"(strategy {strategy}), is never placed on this engine: {why} Fix: smaller placement_group_bundles "
            "or another placement_group_strategy, or start the engine with more.", total=runtime.resources())
