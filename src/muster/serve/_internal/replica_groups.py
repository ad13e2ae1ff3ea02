"""Each replica's own placement group (Ray Serve's ``placement_group_bundles`` / ``placement_group_strategy``).

A deployment that sets ``placement_group_bundles`` gives every replica a placement group of those bundles,
placed with ``placement_group_strategy`` (PACK by default). The replica runs in bundle 0, so its
``ray_actor_options`` resources must fit there (checked when the deployment is made); the tasks and actors it
starts go into its group (Ray's ``placement_group_capture_child_tasks``), e.g. helpers in bundles 1..n. The
group is made with :func:`muster.util.placement_group.placement_group` when the replica starts and removed when
it stops, for whatever reason; a replacement gets a new one. A replica holds its whole group from the start,
which is what admission counts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from muster.core import resources as res
from muster.exceptions import InvalidArgumentError, InvalidTypeError

if TYPE_CHECKING:
    from muster.serve._internal.controller import ServeController
    from muster.serve._internal.state import DeploymentState
    from muster.util.placement_group import PlacementGroup


def checked(name: str, bundles: Any, strategy: Any, actor: dict[str, float],
            gang: bool) -> tuple[list[dict[str, float]] | None, str | None]:
    """Deployment ``name``'s ``placement_group_bundles`` (normalized) and ``placement_group_strategy`` (as
    given: None is PACK, see :func:`placement_strategy`); ``actor``: what its replica actor asks for; ``gang``: it is
    gang scheduled.

    Raises:
        InvalidArgumentError: a strategy without bundles, an empty or malformed bundle, an unknown strategy,
            bundles with gang scheduling, or a replica that does not fit bundle 0.
    """
    from muster.util.placement_group import STRATEGIES

    if bundles is None:
        if strategy is not None:  # as Ray
            raise InvalidArgumentError(f"deployment {name!r}: placement_group_strategy={strategy!r} is set without "
                                       "placement_group_bundles; give the bundles too, e.g. [{'CPU': 1}].")
        return None, None
    if gang:
        raise InvalidArgumentError(
            f"deployment {name!r}: placement_group_bundles with gang_scheduling_config is not supported by muster: "
            "a gang's placement group holds one bundle per member (its ray_actor_options). Drop one of them.")
    if not isinstance(bundles, (list, tuple)) or not bundles:
        raise InvalidTypeError(f"deployment {name!r}: placement_group_bundles={bundles!r}: pass a non-empty list "
                               "of dicts such as [{'CPU': 1}, {'CPU': 2}] (the replica runs in the first).")
    clean = []
    for i, b in enumerate(bundles):
        if not isinstance(b, dict) or not any(isinstance(v, (int, float)) and v > 0 for v in b.values()):
            raise InvalidArgumentError(f"deployment {name!r}: placement_group_bundles[{i}]={b!r}: each bundle is "
                                       "a dict of positive amounts, e.g. {'CPU': 1}.")
        clean.append(res.normalize(dict(b), what=f"deployment {name!r} placement_group_bundles[{i}]"))
    if strategy is not None and strategy not in STRATEGIES:
        raise InvalidArgumentError(f"deployment {name!r}: placement_group_strategy={strategy!r}: use one of "
                                   f"{', '.join(STRATEGIES)}.")
    if not res.fits(actor, clean[0]):
        raise InvalidArgumentError(
            f"deployment {name!r}: the replica runs in bundle 0 of its placement group, but its ray_actor_options "
            f"ask for {{{res.fmt(actor)}}} and placement_group_bundles[0] is {{{res.fmt(clean[0])}}}. Fix: make "
            "bundle 0 hold the replica, or ask for less in ray_actor_options (num_cpus defaults to 1).")
    return clean, strategy


def checked_selectors(name: str, bundles: list[dict[str, float]] | None, selectors: Any) -> list[dict] | None:
    """``placement_group_bundle_label_selector``: one selector per bundle (a single one applies to every
    bundle, as in Ray); each is checked against the node's labels when the group is made.

    Raises:
        InvalidArgumentError: selectors without bundles, or neither one nor one per bundle.
    """
    if selectors is None:
        return None
    if bundles is None:
        raise InvalidArgumentError(f"deployment {name!r}: placement_group_bundle_label_selector={selectors!r} is "
                                   "set without placement_group_bundles; give the bundles too.")
    if not isinstance(selectors, (list, tuple)) or len(selectors) not in (1, len(bundles)):
        raise InvalidArgumentError(
            f"deployment {name!r}: placement_group_bundle_label_selector={selectors!r}: pass a list of one selector "
            f"(a dict, for every bundle) or one per bundle ({len(bundles)}).")
    return list(selectors) * (len(bundles) if len(selectors) == 1 else 1)


def placement_strategy(config: Any) -> str:
    """How a replica's group of ``config`` (a DeploymentConfig) is placed: its strategy, PACK by default."""
    return config.placement_group_strategy or "PACK"


def held(bundles: list[dict[str, float]] | None, actor: dict[str, float]) -> dict[str, float]:
    """What one replica holds while it lives: its whole group, or (without one) its actor's resources."""
    return actor if bundles is None else dict(res.summed(bundles))


def reserve(ctl: ServeController, d: DeploymentState, replica_id: str) -> PlacementGroup | None:
    """Make replica ``replica_id``'s placement group and wait until it is placed (None: ``d`` asks for none).

    Raises:
        RayServeException: not placed in time (other work holds the room).
        ResourcesUnavailableError: the group can never be placed.
    """
    from muster.serve._internal import gangs
    from muster.util.placement_group import placement_group

    config = d.plan.config
    if config.placement_group_bundles is None:
        return None
    bundles = [dict(b) for b in config.placement_group_bundles]
    group = placement_group(bundles, placement_strategy(config), name=f"SERVE_REPLICA::{replica_id}",
                            bundle_label_selector=config.placement_group_bundle_label_selector)
    try:
        gangs.wait_placed(ctl, d, group.ready().future(),
                          f"a replica's placement group {bundles} ({placement_strategy(config)})")
    except BaseException:
        remove(group)
        raise
    return group


def remove(group: PlacementGroup | None) -> None:
    """Give a replica's group back (its replica stopped or died); nothing for None."""
    if group is not None:
        from muster.util.placement_group import remove_placement_group

        remove_placement_group(group)
