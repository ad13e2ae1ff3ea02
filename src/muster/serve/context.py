"""``serve.get_replica_context()``: who am I, inside a replica."""

from __future__ import annotations

import uuid
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class DeploymentID:
    """Ray's ``DeploymentID``: a deployment's ``name`` and ``app_name``."""

    name: str
    app_name: str

    def __str__(self) -> str:
        return f"Deployment(name='{self.name}', app='{self.app_name}')"  # Ray's, in its log lines and reprs

    def __repr__(self) -> str:
        return str(self)


_FULL_ID_PREFIX = "SERVE_REPLICA::"  # Ray's full replica id string starts with it


@dataclass(frozen=True)
class ReplicaID:
    """Ray's ``ReplicaID``: the replica's ``unique_id`` within its deployment and its ``deployment_id``."""

    unique_id: str
    deployment_id: DeploymentID

    @classmethod
    def _of_tag(cls, tag: str) -> ReplicaID:
        """The ID of muster's replica tag ``app#deployment#unique_id``."""
        app, _, rest = tag.partition("#")
        name, _, unique = rest.rpartition("#")
        return cls(unique, DeploymentID(name, app))

    def _tag(self) -> str:
        """muster's replica tag: ``app#deployment#unique_id`` (its log file and process names use it)."""
        return f"{self.deployment_id.app_name}#{self.deployment_id.name}#{self.unique_id}"

    def to_full_id_str(self) -> str:
        """Ray's full id string: ``SERVE_REPLICA::app#deployment#unique_id`` (no ``app#`` when the app is unnamed)."""
        app = f"{self.deployment_id.app_name}#" if self.deployment_id.app_name else ""
        return f"{_FULL_ID_PREFIX}{app}{self.deployment_id.name}#{self.unique_id}"

    @staticmethod
    def is_full_id_str(s: str) -> bool:
        return s.startswith(_FULL_ID_PREFIX)

    @classmethod
    def from_full_id_str(cls, s: str) -> ReplicaID:
        """The ID that ``to_full_id_str`` wrote as ``s``."""
        from muster.exceptions import InvalidArgumentError

        parts = s[len(_FULL_ID_PREFIX):].split("#") if cls.is_full_id_str(s) else []
        if len(parts) not in (2, 3):
            raise InvalidArgumentError(
                f"{s!r} is no full replica id string: pass one that ReplicaID.to_full_id_str() returned "
                f"({_FULL_ID_PREFIX}app#deployment#unique_id).")
        return cls(parts[-1], DeploymentID(parts[-2], parts[0] if len(parts) == 3 else ""))

    def __str__(self) -> str:
        return f"Replica(id='{self.unique_id}', deployment='{self.deployment_id.name}', " \
               f"app='{self.deployment_id.app_name}')"

    def __repr__(self) -> str:
        return str(self)  # Ray's


@dataclass(frozen=True)
class ReplicaRank:
    """A replica's place among its deployment's replicas (Ray's): ``rank`` runs 0..n-1 over the live ones, and
    a replacement takes the rank of the replica it replaces; ``local_rank`` counts on its node."""

    rank: int
    node_rank: int = 0
    local_rank: int = 0


@dataclass(frozen=True)
class ReplicaContext:
    """The replica running the current code (Ray Serve's fields). ``world_size`` is the deployment's replica
    count when this replica started; ``code_version`` is the deployment's generation (a deploy that replaces its
    replicas starts a new one; scaling, replacements and user_config updates keep it), the ``code_version`` of its
    deployment actors' ``get_deployment_actor_context()`` too; ``gang_context`` is its ``GangContext`` in a
    gang-scheduled deployment (``gang_scheduling_config``), else ``None``."""

    replica_id: ReplicaID
    servable_object: Any = None
    #: the deployment's ``DeploymentConfig`` (Ray keeps it under this private name too)
    _deployment_config: Any = field(default=None, repr=False)
    rank: ReplicaRank | None = None
    world_size: int = 0
    gang_context: Any = None
    code_version: str | None = None

    @property
    def app_name(self) -> str:
        return self.replica_id.deployment_id.app_name

    @property
    def deployment(self) -> str:
        return self.replica_id.deployment_id.name

    @property
    def replica_tag(self) -> str:
        """The replica's ``unique_id`` within its deployment, as Ray's (its metrics' ``replica`` tag)."""
        return self.replica_id.unique_id


_current: ReplicaContext | None = None
_deployment_actors: dict[str, Any] = {}


def _set(ctx: ReplicaContext | None) -> None:
    global _current
    _current = ctx


# the request a replica is serving (HTTP or a handle call), per asyncio task / executor call: (request id, route
# prefix). A handle call made while serving one carries both on, as Ray's nested calls do.
_request: ContextVar[tuple[str, str]] = ContextVar("muster_serve_request", default=("", ""))


def _set_request(request_id: str, route: str) -> None:
    _request.set((request_id, route))


def current_request_id() -> str:
    """The id of the request this code serves ("" outside one): an HTTP request's ``X-Request-ID``, or the
    one a handle call carries."""
    return _request.get()[0]


def current_route() -> str:
    """The route prefix of the request this code serves ("" outside one, and in a handle call from outside
    a request): Ray's ``route`` tag."""
    return _request.get()[1]


def _caller_request() -> tuple[str, str]:
    """The ``(request id, route)`` a handle call made here carries: those of the request this code serves
    (a nested call keeps its parent's, as in Ray), else a new id and no route."""
    request_id, route = _request.get()
    return (request_id or str(uuid.uuid4()), route)


@dataclass
class _RequestContext:
    """Ray's ``serve.context._RequestContext``: the request the current code serves (a snapshot here)."""

    route: str = ""
    request_id: str = ""
    _internal_request_id: str = ""
    app_name: str = ""
    multiplexed_model_id: str = ""
    session_id: str = ""
    grpc_context: Any = None
    is_http_request: bool = False
    cancel_on_parent_request_cancel: bool = False


def _get_serve_request_context() -> _RequestContext:
    """Ray's ``serve.context._get_serve_request_context()``: the request this code serves, empty outside one."""
    from muster.serve.multiplex import get_multiplexed_model_id

    request_id, route = _request.get()
    if not request_id:
        return _RequestContext()
    app = _current.app_name if _current is not None else ""
    return _RequestContext(route=route, request_id=request_id, _internal_request_id=request_id, app_name=app,
                           multiplexed_model_id=get_multiplexed_model_id())


# the contexts of the callers whose items the running ``@serve.batch`` call holds, in their order (per batch task)
_batch_requests: ContextVar[list[_RequestContext] | None] = ContextVar("muster_serve_batch_requests", default=None)


def _get_serve_batch_request_context() -> list[_RequestContext]:
    """Ray's ``serve.context._get_serve_batch_request_context()``: inside a ``@serve.batch`` method, the request
    context of each caller whose item the batch holds, in the order of the batch's lists; [] elsewhere."""
    got = _batch_requests.get()
    return [] if got is None else got


def _set_batch_request_context(request_contexts: list[_RequestContext]) -> None:
    """Name the callers of the batch running in this context (the batcher does it)."""
    _batch_requests.set(list(request_contexts))


def get_replica_context() -> ReplicaContext:
    """The context of the replica this code runs in.

    Raises:
        RayServeException: called outside a replica (for example in the driver).
    """
    if _current is None:
        from muster.serve.exceptions import RayServeException

        raise RayServeException(
            "serve.get_replica_context() only works inside a deployment's replica (in its __init__ or methods); "
            "it was called outside one."
        )
    return _current


def set_deployment_actors(handles: dict[str, Any]) -> None:
    """The handles of this replica's deployment-scoped actors (the replica sets them as it starts)."""
    global _deployment_actors
    _deployment_actors = dict(handles)


def get_deployment_actor(actor_name: str) -> Any:
    """The handle of the deployment-scoped actor ``actor_name`` of the deployment this replica serves
    (Ray 2.60's ``serve.get_deployment_actor``; declare it with ``deployment_actors=[DeploymentActorConfig(...)]``).

    Raises:
        RayServeException: called outside a replica.
        ValueError: the deployment declares no actor of that name (the message lists those it declares).
    """
    get_replica_context()  # raises outside a replica
    handle = _deployment_actors.get(actor_name)
    if handle is None:
        from muster.exceptions import InvalidArgumentError

        raise InvalidArgumentError(
            f"serve.get_deployment_actor({actor_name!r}): deployment {_current.deployment if _current else '?'!r} "
            f"declares no deployment actor of that name; it declares {sorted(_deployment_actors) or 'none'}. "
            "Add DeploymentActorConfig(name=..., actor_class=...) to its deployment_actors."
        )
    return handle


@dataclass(frozen=True)
class DeploymentActorContext:
    """Who a deployment-scoped actor is (Ray 2.60's): its deployment, its name, and ``code_version`` (here the
    deployment's generation: a redeploy that replaces the replicas starts actors of a new one)."""

    deployment_id: DeploymentID
    actor_name: str
    code_version: str | None = None

    @property
    def app_name(self) -> str:
        return self.deployment_id.app_name

    @property
    def deployment(self) -> str:
        return self.deployment_id.name


def get_deployment_actor_context() -> DeploymentActorContext:
    """The context of the deployment-scoped actor this code runs in (Ray 2.60's).

    Raises:
        RayServeException: called outside one.
    """
    import os

    from muster.serve._internal.deployment_actors import ACTOR_ENV

    app, _, rest = os.environ.get(ACTOR_ENV, "").partition("::")
    deployment, _, rest = rest.partition("::")
    generation, _, name = rest.partition("::")
    if not name:
        from muster.serve.exceptions import RayServeException

        raise RayServeException("serve.get_deployment_actor_context() only works inside a deployment-scoped actor "
                                "(one of a deployment's deployment_actors); it was called outside one.")
    return DeploymentActorContext(DeploymentID(deployment, app), name, generation)
