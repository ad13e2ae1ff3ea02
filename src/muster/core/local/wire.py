"""Framing for the local engine's sockets: cloudpickled tuples over a Connection.

Driver -> worker:  ("call", call_id, method, args, kwargs) | ("reply", event_id, ok, value) | ("exit",)
Worker -> driver:  ("hello", worker_id, pid, node_id) | ("result", call_id, ok, value)
                   | ("event", event_id, wants_reply, payload)
Driver -> zygote:  ("fork", worker_id, spec) | ("quit",)
Zygote -> driver:  ("ready", pid) | ("forked", worker_id, pid) | ("exited", pid, exitcode)
"""

from __future__ import annotations

import pickle
import traceback
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle

from muster.exceptions import TaskError


def send(conn: Connection, msg: tuple) -> None:
    conn.send_bytes(cloudpickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL))


def recv(conn: Connection) -> Any:
    return pickle.loads(conn.recv_bytes())


def capture_error(exc: BaseException, label: str, pid: int, host: str) -> TaskError:
    """Wrap an exception raised in a worker so it crosses back intact."""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    cause: BaseException | None = exc
    try:
        pickle.loads(cloudpickle.dumps(exc))
    except Exception:  # an exception that does not survive pickling travels as text
        cause = None
    exc.__traceback__ = None
    return TaskError(
        f"{type(exc).__module__}.{type(exc).__qualname__}".removeprefix("builtins."),
        str(exc),
        tb,
        label=label,
        pid=pid,
        host=host,
        cause=cause,
    )
