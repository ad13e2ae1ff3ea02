"""The actor each training worker runs: set up the backend, run the user's loop."""

from __future__ import annotations

import inspect
import os
import socket
from typing import Any, Callable

from muster.core import context as core_context
from muster.observe.sampler import WorkerSampler
from muster.train._internal import session as session_mod
from muster.train._internal.backend import Backend


class TrainWorker:
    """Lives in a worker process for one attempt of a run."""

    def info(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "host": socket.gethostname(), "ip": _node_ip()}

    def free_port(self) -> int:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("", 0))
            return int(s.getsockname()[1])

    def run(
        self,
        train_fn: Callable[..., Any],
        config: dict[str, Any] | None,
        spec: session_mod.SessionSpec,
        env: dict[str, str],
        backend: Backend,
    ) -> None:
        for key, value in env.items():
            os.environ[key] = value
        backend.on_worker_start(spec.context)
        session = session_mod.Session(spec)
        session_mod.set_session(session)
        rank = spec.context.world_rank
        sampler = WorkerSampler(
            lambda figures: core_context.send_event({"kind": "sample", "rank": rank, **figures}, wait=False)
        )
        sampler.start()
        try:
            if _takes_config(train_fn):
                train_fn(config if config is not None else {})
            else:
                train_fn()
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


def _node_ip() -> str:
    """This node's address as other nodes reach it (loopback when it has no other)."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"
