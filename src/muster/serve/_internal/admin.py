"""How ``muster serve status|shutdown`` reach a running Serve instance from another process.

The driver that runs Serve listens on a unix socket (one JSON line in, one out) and records it in
``<serve_state_dir>/serve-<port>.json`` (``serve-pid<pid>.json``, with port None, when it runs no HTTP
proxy). Ops: ``{"op": "status"}`` -> the controller's status; ``{"op": "config"}`` -> each app's config
file entry; ``{"op": "shutdown"}`` -> ``{"ok": true}``, then the driver shuts Serve down (and
``muster serve run`` exits).
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import shutil
import socket
import threading
from typing import Any, Callable

from muster.core import settings
from muster.serve._internal import eventloop

shutdown_requested = threading.Event()
_servers: dict[int, Any] = {}
_at_exit: dict[int, Callable[[], None]] = {}  # per controller: what its driver's exit removes if Serve still runs


def state_file(port: int | None) -> str:
    """Where the instance serving ``port`` is recorded; one with no HTTP proxy (``port`` None) is filed under
    its driver's pid, so it never takes the record of an instance that serves its configured port."""
    key = port if port is not None else f"pid{os.getpid()}"
    return os.path.join(settings.serve_state_dir(), f"serve-{key}.json")


def _port(controller: Any) -> int | None:
    return controller.port if controller.proxy else None


def start(controller: Any) -> None:
    path = os.path.join(controller.dir, "admin.sock")
    shutdown_requested.clear()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            req = json.loads(await asyncio.wait_for(reader.readline(), 10))
            op = req.get("op")
            loop = asyncio.get_running_loop()
            if op == "status":
                reply: dict[str, Any] = await loop.run_in_executor(None, controller.status)
            elif op == "config":
                reply = {"applications": controller.app_configs()}
            elif op == "deploy":
                from muster.serve import schema

                config = schema.load_config(req["path"])
                reply = {"applications": await loop.run_in_executor(None, schema.deploy, config)}
            elif op == "run":
                reply = {"applications": await loop.run_in_executor(None, _run_app, req)}
            elif op == "shutdown":
                reply = {"ok": True}
                shutdown_requested.set()
            else:
                reply = {"error": f"unknown op {op!r}; use 'status', 'config', 'deploy', 'run' or 'shutdown'"}
            writer.write(json.dumps(reply).encode() + b"\n")
            await writer.drain()
        except Exception as exc:  # noqa: BLE001 - answer the client, keep serving
            writer.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode() + b"\n")
            await writer.drain()
        finally:
            writer.close()

    async def listen() -> Any:
        return await asyncio.start_unix_server(handle, path)

    _servers[id(controller)] = eventloop.run_sync(listen(), timeout=10)
    os.makedirs(settings.serve_state_dir(), exist_ok=True)
    port = _port(controller)
    tmp = state_file(port) + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"pid": os.getpid(), "host": controller.host, "port": port, "admin": path}, f)
    os.replace(tmp, state_file(port))

    def forget() -> None:  # the driver exits with Serve running (as Ray's, it ends with the driver): leave no trace
        _remove_record(port)
        shutil.rmtree(controller.dir, ignore_errors=True)

    _at_exit[id(controller)] = forget
    atexit.register(forget)


def _run_app(req: dict[str, Any]) -> list[str]:
    """The ``run`` op (``muster serve run module:app --non-blocking`` onto a running instance, as Ray's adds an
    app to the cluster's Serve): import the app from the caller's folder and run it beside the others."""
    import sys

    from muster.serve import api, schema

    if req.get("app_dir") and req["app_dir"] not in sys.path:
        sys.path.insert(0, req["app_dir"])
    app = schema.import_app(req["import_path"], req.get("args") or {})
    api._run(app, name=req["name"], route_prefix=req.get("route_prefix"), env_vars=req.get("env_vars") or {})
    return [req["name"]]


def stop(controller: Any) -> None:
    server = _servers.pop(id(controller), None)
    if server is not None:
        eventloop.get_loop().call_soon_threadsafe(server.close)
    forget = _at_exit.pop(id(controller), None)
    if forget is not None:
        atexit.unregister(forget)
    _remove_record(_port(controller))


def _remove_record(port: int | None) -> None:
    """Remove the state file of the instance on ``port`` if this process wrote it."""
    try:
        with open(state_file(port)) as f:
            if json.load(f).get("pid") == os.getpid():
                os.remove(state_file(port))
    except (OSError, ValueError):
        pass


def instances() -> list[dict[str, Any]]:
    """Every recorded Serve instance whose admin socket still answers (stale records are removed)."""
    out = []
    d = settings.serve_state_dir()
    for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        if not (name.startswith("serve-") and name.endswith(".json")):
            continue
        path = os.path.join(d, name)
        try:
            with open(path) as f:
                rec = json.load(f)
            request(rec, "status", timeout_s=5)
            out.append(rec)
        except (OSError, ValueError):
            try:
                os.remove(path)
            except OSError:
                pass
    return out


def request(rec: dict[str, Any], op: str, timeout_s: float = 30.0, **fields: Any) -> dict[str, Any]:
    """Send one op to the instance ``rec`` describes and return its answer."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(timeout_s)
        s.connect(rec["admin"])
        s.sendall(json.dumps({"op": op, **fields}).encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    return json.loads(buf)
