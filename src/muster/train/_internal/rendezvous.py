"""Rank 0's MASTER_PORT: bound when the driver asks for it, held until the process group's store serves it.

A port picked by binding port 0 and closing the socket is free only until
someone else binds it, and the process group binds it seconds later (after
the driver's round trip, the worker's start and torch's import). Instead rank
0's worker keeps a listening socket on the port from the moment it names it;
peers that connect early wait in its backlog. Before ``init_process_group``
(``env://`` or ``tcp://``), :func:`serve_store` starts torch's ``TCPStore``
server on that very socket in the multi-tenant mode torch's own rendezvous
uses for rank 0, so the rendezvous finds its server already up on
MASTER_PORT and shares it. A backend that joins no process group gives the
port back (:func:`release`) just before the user's loop, which may then bind
MASTER_PORT itself (torchrun's variables).

State is per process: one worker process hosts one rank of one attempt.
"""

from __future__ import annotations

import datetime
import os
import socket
from typing import Any

_held: socket.socket | None = None
_store: Any = None  # the TCPStore serving on the held port, kept alive as long as the process


def reserve_port() -> int:
    """Bind a listening socket on a free port on every address (IPv6 and IPv4 when the host has both),
    keep it, and return its port: nothing else can take the port until :func:`serve_store` or
    :func:`release`."""
    global _held
    release()
    try:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind(("::", 0))
        except OSError:
            sock.close()
            raise
    except OSError:  # no IPv6 on this host
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("", 0))
    sock.listen(socket.SOMAXCONN)
    _held = sock
    return int(sock.getsockname()[1])


def serve_store(host: str, port: int, timeout_s: float) -> bool:
    """Start the TCPStore server on the held socket when it holds ``port``; True when it did.

    The server is registered as torch's multi-tenant server for ``port``, so a later
    ``TCPStore(..., port, is_master=True, multi_tenant=True)`` in this process (what
    ``init_process_group`` makes on rank 0) shares it instead of binding the port again.
    """
    global _held, _store
    if _held is None or _held.getsockname()[1] != port:
        return False
    import torch.distributed as dist

    sock, _held = _held, None
    _store = dist.TCPStore(
        host, port, is_master=True, wait_for_workers=False, multi_tenant=True,
        master_listen_fd=sock.detach(), timeout=datetime.timedelta(seconds=timeout_s), **_server_kind(dist),
    )
    return True


def _server_kind(dist: Any) -> dict[str, bool]:
    """Which TCPStore server takes the socket: torch's libuv server serves a socket it is handed only
    since torch 2.8 (before, it never listened on it), so older torch, and ``USE_LIBUV=0`` as torch
    reads it, get the classic server."""
    import torch

    if "use_libuv" not in (dist.TCPStore.__init__.__doc__ or ""):  # a torch without the libuv server
        return {}
    libuv = torch.__version__ >= "2.8" and os.environ.get("USE_LIBUV", "1") == "1"
    return {"use_libuv": libuv}


def release() -> None:
    """Close the held socket, if any: the port is free again for whoever binds it next."""
    global _held
    if _held is not None:
        _held.close()
        _held = None
