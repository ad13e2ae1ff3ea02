"""Gang scheduling of a deployment's replicas (Ray Serve's ``gang_scheduling_config``).

``@serve.deployment(num_replicas=4, gang_scheduling_config=GangSchedulingConfig(gang_size=2))`` starts its
replicas in gangs of two: each gang is one placement group with a bundle per member (the replica's
``ray_actor_options`` resources), placed whole or not at all with the config's ``PACK`` or ``SPREAD``
strategy. Every member sees the gang in ``serve.get_replica_context().gang_context`` (its ``rank`` in the
gang, the ``world_size``, the ``gang_id`` and the members' ids), which is what a data-parallel group of
replicas needs to set up its collectives. Under ``RESTART_GANG`` (Ray's only policy) a member that dies or
fails its health check takes its whole gang down, and a whole new gang replaces it. Replica counts
(``num_replicas``, autoscaling bounds and decisions) are whole gangs.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any

from muster.exceptions import InvalidArgumentError, InvalidTypeError


class GangPlacementStrategy(str, enum.Enum):
    """How a gang's members are placed: on as few nodes as possible (``PACK``) or on distinct ones
    (``SPREAD``); the placement group's strategy. One machine meets both."""

    PACK = "PACK"
    SPREAD = "SPREAD"


class GangRuntimeFailurePolicy(str, enum.Enum):
    """What a member's failure does to its gang once it runs. ``RESTART_GANG``: the whole gang stops and a new one
    starts. ``RESTART_REPLICA`` is named, as in Ray 2.60, and refused there too."""

    RESTART_GANG = "RESTART_GANG"
    RESTART_REPLICA = "RESTART_REPLICA"


@dataclass(frozen=True)
class GangSchedulingConfig:
    """A deployment's gangs: ``gang_size`` replicas each (``num_replicas`` and the autoscaling bounds are
    multiples of it), placed by ``gang_placement_strategy``, restarted by ``runtime_failure_policy``."""

    gang_size: int
    gang_placement_strategy: GangPlacementStrategy = GangPlacementStrategy.PACK
    runtime_failure_policy: GangRuntimeFailurePolicy = GangRuntimeFailurePolicy.RESTART_GANG

    def __post_init__(self) -> None:
        if isinstance(self.gang_size, bool) or not isinstance(self.gang_size, int) or self.gang_size < 1:
            raise InvalidArgumentError(f"GangSchedulingConfig(gang_size={self.gang_size!r}): use an integer >= 1, "
                                       "the replicas in each gang.")
        object.__setattr__(self, "gang_placement_strategy",
                           _member(GangPlacementStrategy, self.gang_placement_strategy, "gang_placement_strategy"))
        policy = _member(GangRuntimeFailurePolicy, self.runtime_failure_policy, "runtime_failure_policy")
        if policy is GangRuntimeFailurePolicy.RESTART_REPLICA:  # Ray 2.60 refuses it: not implemented there
            raise InvalidArgumentError(
                "GangSchedulingConfig(runtime_failure_policy=RESTART_REPLICA) is not implemented (nor in Ray "
                "2.60): use RESTART_GANG (the default), which restarts the whole gang when a member fails.")
        object.__setattr__(self, "runtime_failure_policy", policy)

    @classmethod
    def coerce(cls, value: Any, deployment: str) -> "GangSchedulingConfig | None":
        """``value`` (a config, a dict of its fields as a config file gives, or None) as a config."""
        if value is None or isinstance(value, cls):
            return value
        if isinstance(value, dict):
            unknown = sorted(set(value) - {"gang_size", "gang_placement_strategy", "runtime_failure_policy"})
            if unknown:
                raise InvalidArgumentError(
                    f"deployment {deployment!r}: gang_scheduling_config has unknown key(s) {unknown}; known: "
                    "gang_size, gang_placement_strategy, runtime_failure_policy.")
            if "gang_size" not in value:
                raise InvalidArgumentError(f"deployment {deployment!r}: gang_scheduling_config={value!r} lacks "
                                           "gang_size, the replicas in each gang (e.g. {'gang_size': 2}).")
            return cls(**value)
        raise InvalidTypeError(f"deployment {deployment!r}: gang_scheduling_config={value!r}: pass "
                               "GangSchedulingConfig(gang_size=N) or a dict such as {'gang_size': N}.")

    def check_counts(self, deployment: str, counts: dict[str, int | None]) -> None:
        """Refuse a replica count (``num_replicas``, an autoscaling bound) that is not whole gangs."""
        for what, n in counts.items():
            if n is not None and n % self.gang_size:
                raise InvalidArgumentError(
                    f"deployment {deployment!r}: {what}={n} is not a multiple of gang_size={self.gang_size}; "
                    f"replicas start and stop in whole gangs. Fix: use {round_up(n, self.gang_size)} (or another "
                    f"multiple of {self.gang_size}), or change gang_size.")


def _member(enum_cls: type[enum.Enum], value: Any, what: str) -> Any:
    try:
        return enum_cls(value)
    except ValueError:
        raise InvalidArgumentError(f"GangSchedulingConfig({what}={value!r}): use one of "
                                   f"{', '.join(m.value for m in enum_cls)}.") from None


@dataclass
class GangContext:
    """What a replica knows of its gang (``serve.get_replica_context().gang_context``; None outside a gang)."""

    gang_id: str
    rank: int  # its place in the gang, 0..world_size-1 (the bundle of the gang's placement group it holds)
    world_size: int
    member_replica_ids: list[str]  # the members' unique ids (ReplicaID.unique_id), by rank
    pg_name: str = ""


@dataclass(eq=False)
class Gang:
    """One gang of a deployment, as the controller keeps it: its placement group and its members by rank."""

    id: str
    group: str  # the placement group's key on the runtime (``reserve`` / ``unreserve``)
    members: list[str]  # replica ids, by rank
    stopping: bool = False  # going down (a member failed, a downscale, a deploy that failed)

    def context(self, rank: int) -> GangContext:
        return GangContext(self.id, rank, len(self.members), [m.rsplit("#", 1)[-1] for m in self.members],
                           self.group)


def round_up(n: int, size: int) -> int:
    """``n`` replicas as whole gangs of ``size`` (Ray rounds its autoscaling decisions up the same way)."""
    return math.ceil(n / size) * size if n > 0 else 0
