"""Serve the dashboard: bind, decide on a token, print the URL, run uvicorn."""

from __future__ import annotations

import socket
import sys
from typing import TextIO

from muster.core import settings
from muster.observe.dashboard.security import is_loopback, new_token
from muster.observe.store.reader import StoreReader

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8265


def _need(module: str) -> None:
    try:
        __import__(module)
    except ImportError as exc:
        raise SystemExit(
            f"muster dashboard needs {module!r}, which is not installed: pip install \"muster[dashboard]\""
        ) from exc


def resolve_token(host: str, token: str | None) -> str | None:
    """The token to require: the one given (flag or MUSTER_DASHBOARD_TOKEN); a new one when
    ``host`` is not loopback and none was given; None on loopback without one."""
    token = token or settings.dashboard_token()
    if token is None and not is_loopback(host):
        token = new_token()
    return token


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: any free port).

    Raises:
        SystemExit: the address cannot be bound, with what to do instead.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise SystemExit(
            f"muster dashboard: cannot listen on {host}:{port} ({exc.strerror}). "
            "Pick another --port (0 picks a free one) or stop what holds it."
        ) from exc
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def serve(root: str, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, token: str | None = None,
          out: TextIO = sys.stdout) -> None:
    """Serve the dashboard of storage root ``root`` until interrupted."""
    for module in ("starlette", "uvicorn"):
        _need(module)
    import uvicorn

    from muster.observe.dashboard.app import create_app

    reader = StoreReader.for_root(root)
    token = resolve_token(host, token)
    loopback = is_loopback(host)
    sock = bind(host, port)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{bound}/" + (f"?token={token}" if token else "")
    print(f"muster dashboard: {url}", file=out, flush=True)
    print(f"  run store {reader.path}", file=out, flush=True)
    if not loopback:
        print("  listening beyond this machine: anyone with the token above can read these runs.", file=out,
              flush=True)
    app = create_app(reader, root, token=token, loopback=loopback)
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])
