"""Framing for the local engine's sockets: cloudpickled tuples over a Connection.

Driver -> worker:  ("call", call_id, method, args, kwargs) | ("reply", event_id, ok, value) | ("exit",)
Worker -> driver:  ("hello", worker_id, pid, node_id) | ("result", call_id, ok, value, retiring[, metrics])
                   | ("event", event_id, wants_reply, payload) | ("metrics", (seq, series))
Driver -> zygote:  ("fork", worker_id, spec) | ("quit",)
Zygote -> driver:  ("ready", pid) | ("forked", worker_id, pid) | ("exited", pid, exitcode)

Each frame's header also carries the message's kind and id outside the pickle,
so a message whose body will not unpickle on the receiving side (a class only
the sender can import) still names the call it belongs to: the receiver
answers that call with the error (see :class:`Unreadable`) instead of
dropping it and leaving its caller waiting forever.
"""

from __future__ import annotations

import os
import pickle
import socket
import struct
import sys
import traceback
import weakref
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle

from muster.core import settings
from muster.core.serialization import ReceivedBuffer, dumps, empty_buffer, shared_fd_of
from muster.exceptions import MusterError, TaskError

_HEADER = struct.Struct("!IBq")  # buffer count, routed kind, id
ROUTED = ("call", "reply", "result", "event")  # kinds whose second field is an id the peer waits on


class Unreadable(Exception):
    """A whole message arrived but its body would not unpickle here.

    ``kind`` and ``msg_id`` come from the frame header (``kind`` is ``None``
    for messages nobody waits on), ``error`` is what unpickling raised.
    """

    def __init__(self, kind: str | None, msg_id: int, error: BaseException):
        super().__init__(f"{kind} {msg_id}: {type(error).__name__}: {error}")
        self.kind, self.msg_id, self.error = kind, msg_id, error

    def explain(self, what: str) -> str:
        """One paragraph for the user: what could not be read, why, and the fix."""
        hint = ""
        if isinstance(self.error, ModuleNotFoundError | AttributeError):
            hint = (" The receiving process cannot import what the sender pickled: workers are forked"
                    " when muster starts, so a module or class made importable later (a folder added to"
                    " sys.path after muster.init(), a class defined after it in an interactive session)"
                    " is missing there. Make it importable before muster.init() (PYTHONPATH, an"
                    " installed package) or pass plain data (numbers, lists, dicts, arrays, tensors).")
        return f"{what} could not be unpickled: {type(self.error).__name__}: {self.error}.{hint}"


_raw_sockets: "weakref.WeakKeyDictionary[Connection, socket.socket]" = weakref.WeakKeyDictionary()


def _raw(conn: Connection) -> socket.socket:
    """A socket on the connection's fd, for moving big buffers without extra copies."""
    sock = _raw_sockets.get(conn)
    if sock is None:
        sock = socket.socket(fileno=os.dup(conn.fileno()))
        sock.setblocking(True)
        _raw_sockets[conn] = sock
    return sock


def close(conn: Connection) -> None:
    """Close a connection and the raw socket made for its big buffers, if any."""
    sock = _raw_sockets.pop(conn, None)
    if sock is not None:
        sock.close()
    conn.close()


_SHARED_MIN = 1024 * 1024  # buffers this big travel as shared memory (Linux memfd) when possible

_SHARED = hasattr(os, "memfd_create") and hasattr(socket, "send_fds") and settings.shared_memory_transport()


def send(conn: Connection, msg: tuple) -> None:
    """Send one message. Callers serialise sends on a connection (one lock each).

    Big buffers skip the pickle stream. On Linux, each one is written once into
    an anonymous shared-memory file whose descriptor crosses the socket
    (SCM_RIGHTS); the receiver maps it, so the bytes are copied once in all.
    Elsewhere they stream through the socket.  A negative size in the header
    marks a shared one.
    """
    body, buffers = dumps(msg)
    shared = [_SHARED and b.raw().nbytes >= _SHARED_MIN for b in buffers]
    sizes = [-b.raw().nbytes if s else b.raw().nbytes for b, s in zip(buffers, shared)]
    routed = ROUTED.index(msg[0]) + 1 if msg and msg[0] in ROUTED else 0
    header = _HEADER.pack(len(sizes), routed, msg[1] if routed else 0)
    conn.send_bytes(header + struct.pack(f"!{len(sizes)}q", *sizes) + body)
    if buffers:
        sock = _raw(conn)
        for buf, is_shared in zip(buffers, shared):
            if is_shared:
                owner = shared_fd_of(buf.raw())
                if owner is not None:  # already in shared memory (a put value, an unchanged argument): pass it
                    socket.send_fds(sock, [b"m"], [owner])
                    continue
                fd = os.memfd_create("muster-buffer", os.MFD_CLOEXEC)
                try:
                    view, done = buf.raw(), 0
                    while done < view.nbytes:
                        done += os.write(fd, view[done:])
                    socket.send_fds(sock, [b"m"], [fd])
                finally:
                    os.close(fd)
            else:
                sock.sendall(buf.raw())


def recv(conn: Connection) -> Any:
    frame = conn.recv_bytes()
    count, routed, msg_id = _HEADER.unpack_from(frame)
    sizes = struct.unpack_from(f"!{count}q", frame, _HEADER.size)
    body = memoryview(frame)[_HEADER.size + 8 * count :]
    buffers = []
    sock = _raw(conn) if count else None
    for size in sizes:
        if size < 0:  # shared memory: map it privately (writable, copy-on-write), no copy here
            _, fds, _, _ = socket.recv_fds(sock, 1, 1)  # type: ignore[arg-type]
            if not fds:
                raise EOFError("connection closed in the middle of a message")
            buffers.append(ReceivedBuffer.mapping(fds[0], -size))
            continue
        # Writable (arrays rebuilt on it can be changed in place) and not zero-filled
        # first, unlike bytearray: the kernel hands out fresh pages as they are written.
        buf = empty_buffer(size)
        view, got = memoryview(buf), 0
        while got < size:
            n = sock.recv_into(view[got:], size - got)  # type: ignore[union-attr]
            if n == 0:
                raise EOFError("connection closed in the middle of a message")
            got += n
        buffers.append(buf)
    try:
        return pickle.loads(body, buffers=buffers)
    except Exception as exc:  # the frame was read whole, so the stream stays in step
        raise Unreadable(ROUTED[routed - 1] if routed else None, msg_id, exc) from exc


#: muster's own source folder: the frames of its worker plumbing that a remote traceback starts with.
_MUSTER_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep


def _plumbing() -> tuple[str, ...]:
    """The folders of a remote traceback's first frames that are plumbing: muster's, and the thread pool's or
    event loop's that ran the user's function for it (a Serve replica runs a sync method in a thread pool)."""
    loaded = (sys.modules.get(name) for name in ("concurrent.futures", "asyncio"))
    return (_MUSTER_DIR, *(os.path.dirname(m.__file__) + os.sep for m in loaded if m is not None and m.__file__))


def remote_traceback(exc: BaseException) -> str:
    """``exc``'s traceback as the caller is shown it: from the first frame of the user's code on, as Ray
    shows it (the frames of muster's worker loop that called the user's function say nothing to the
    reader). An error raised inside muster itself keeps every frame."""
    shown, plumbing = traceback.TracebackException(type(exc), exc, exc.__traceback__), _plumbing()
    first_user = next((i for i, frame in enumerate(shown.stack) if not frame.filename.startswith(plumbing)), None)
    if first_user:
        shown.stack = traceback.StackSummary.from_list(shown.stack[first_user:])
    return "".join(shown.format())


def returned_by(method: str, args: tuple, obj: Any) -> str:
    """What returned a worker call's value, as its caller knows it (``task f``, ``actor A's method m``): the
    worker's ``method`` is ``__task__`` for a task (``args[0]`` its function), ``_muster_call`` for an actor's
    method (``args[1]`` its name), else the actor object's own method."""
    if method == "__task__":
        return f"task {getattr(args[0], '__name__', '?')}"
    name = args[1] if method == "_muster_call" and len(args) > 1 else method
    return f"actor {type(getattr(obj, '_muster_obj', obj)).__name__}'s method {name}"


def unsendable(what: str, exc: BaseException) -> BaseException:
    """The error a caller gets for a result that would not pickle (``exc``, pickling's error): of ``exc``'s class
    where it can be made with a message, so ``except TypeError`` catches it as it catches Ray's
    ``RayTaskError(TypeError)``; it names ``what`` returned the value, and what to return instead."""
    message = (f"{what} returned a value that cannot be sent back to its caller ({type(exc).__name__}: {exc}); "
               "return plain data (numbers, strings, lists, dicts, tensors, numpy arrays).")
    try:
        return type(exc)(message)
    except Exception:  # noqa: BLE001 - a class that takes other arguments
        return MusterError(message)


def capture_error(exc: BaseException, label: str, pid: int, host: str) -> TaskError:
    """Wrap an exception raised in a worker so it crosses back intact. A task error it passed on (a nested
    ``get`` that raised) keeps its original exception, so the caller can still catch that class, as with Ray's
    ``RayTaskError(ValueError)``; its text, the nested task's traceback included, ends this one's."""
    tb = remote_traceback(exc)
    exc.__traceback__ = None
    if isinstance(exc, TaskError):
        return TaskError(exc.cause_type, exc.message, tb, label=label, pid=pid, host=host, cause=exc.cause,
                         cause_parts=exc.cause_parts)
    cause: BaseException | None = exc
    parts: tuple[type, tuple, dict] | None = None
    try:
        pickle.loads(cloudpickle.dumps(exc))
    except Exception:  # it does not survive pickling: send its class, args and attributes instead
        cause = None
        parts = (type(exc), exc.args, {k: v for k, v in vars(exc).items() if not k.startswith("__")})
        try:
            pickle.loads(cloudpickle.dumps(parts))
        except Exception:  # not even those: the exception travels as text
            parts = None
    return TaskError(
        f"{type(exc).__module__}.{type(exc).__qualname__}".removeprefix("builtins."),
        str(exc),
        tb,
        label=label,
        pid=pid,
        host=host,
        cause=cause,
        cause_parts=parts,
    )
