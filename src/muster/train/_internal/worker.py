"""The actor each training worker runs: set up the backend, run the user's loop."""

from __future__ import annotations

import inspect
import os
import socket
from typing import Any, Callable

from muster.core import context as core_context
from muster.core import settings
from muster.exceptions import StorageNotSharedError
from muster.observe.sampler import WorkerSampler
from muster.tasks import runtime_context as rc
from muster.train._internal import events, rendezvous
from muster.train._internal import session as session_mod
from muster.train._internal.backend import Backend
from muster.train.storage import RUN_STATE, Storage


class TrainWorker:
    """Lives in a worker process for one attempt of a run."""

    def info(self, identity: rc.WorkerIdentity | None = None) -> dict[str, Any]:
        """Where this worker runs; ``identity``: its job and actor id (``get_runtime_context()`` in the loop)."""
        if identity is not None:
            rc.set_library_worker(identity)
        node_id, _ = settings.node_identity()
        return {"pid": os.getpid(), "host": socket.gethostname(), "ip": settings.node_ip_address(), "node": node_id}

    def reserve_port(self) -> int:
        """MASTER_PORT, on rank 0: a port this process binds now and holds (see ``rendezvous``)."""
        return rendezvous.reserve_port()

    def run(
        self,
        train_fn: Callable[..., Any],
        config: dict[str, Any] | None,
        spec: session_mod.SessionSpec,
        env: dict[str, str],
        backend: Backend,
    ) -> Any:
        """Run the training function; returns what it returned on rank 0 (None on the other ranks: only
        rank 0's is the run's ``Result.return_value``, as in Ray Train)."""
        for key, value in env.items():
            os.environ[key] = value
        identity = rc.library_worker()  # get_runtime_context() in the loop: this call's task id, the resources
        if identity is not None:
            rc.set_library_worker(identity.running(spec.resources))
        check_storage_visible(spec.storage)
        backend.on_worker_start(spec.context)
        rendezvous.release()  # a backend that joined no process group: the loop may bind MASTER_PORT itself
        session = session_mod.Session(spec)
        session_mod.set_session(session)
        rank = spec.context.world_rank
        sampler = WorkerSampler(
            lambda figures: core_context.send_event(events.Sample(rank, dict(figures)), wait=False)
        )
        sampler.start()
        try:
            returned = train_fn(config if config is not None else {}) if _takes_config(train_fn) else train_fn()
            session.drain()
        except BaseException:
            # Leave the process group up: tearing it down now would break the peers'
            # collectives, and their errors could reach the driver before this one,
            # the root cause. The controller kills the whole gang once it has this error.
            session_mod.set_session(None)
            raise
        finally:
            sampler.stop()
        session_mod.set_session(None)
        backend.on_worker_end()
        return returned if rank == 0 else None


def _takes_config(fn: Callable[..., Any]) -> bool:
    try:
        params = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
        ]
    except (TypeError, ValueError):
        return True
    return bool(params)


def check_storage_visible(storage: Storage) -> None:
    """Fail at once when this worker cannot see the run folder the driver created.

    The driver writes the run's state file before any worker starts; a worker
    that does not find it is on a node where ``storage_path`` means something
    else (a local folder on a multi-node cluster), and would otherwise fail
    only at its first checkpoint.
    """
    marker = storage.join(storage.run_dir, RUN_STATE)
    if storage.exists(marker):
        return
    node_id, _ = settings.node_identity()
    node = f"{socket.gethostname()} ({settings.node_ip_address()}" + (f", Ray node {node_id}" if node_id else "") + ")"
    raise StorageNotSharedError(
        f"This worker on node {node} cannot see the run folder {storage.uri}: the driver created "
        f"{marker} there, but this node does not have it. On a cluster, every node must see the same "
        "storage. Fix: set RunConfig(storage_path='s3://bucket/prefix') (pip install \"muster[s3]\"; "
        "gs:// and other fsspec URLs work too), or mount one shared filesystem (NFS, EFS, Lustre) at the "
        "same path on every node and point storage_path there."
    )

