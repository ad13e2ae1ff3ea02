"""The Serve controller's HTTP ingress over its life: started (on the other server when its process dies while
starting), checked, and replaced on the same port when it goes down.

On one machine the ingress is its own process (an actor); on a Ray cluster it runs in the driver
(:class:`~muster.serve._internal.ingress.InProcess`). Which server it runs on while it lives is
:mod:`server_choice`'s.
"""

from __future__ import annotations

import dataclasses
import signal
import sys
import time
from typing import TYPE_CHECKING, Any

from muster.exceptions import ActorDiedError, describe_exit
from muster.serve._internal.ingress import InProcess, IngressActor, answers
from muster.serve.config import HTTPOptions
from muster.serve.exceptions import RayServeException

if TYPE_CHECKING:
    from muster.serve._internal.controller import ServeController

#: Signals by which a process dies of its own fault (SIGKILL and SIGTERM come from outside it).
_CRASHES = {signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGILL, signal.SIGFPE}


def start(ctl: "ServeController", options: HTTPOptions) -> Any:
    """Start an ingress; one whose process dies while starting is started again on the other server.

    The fallback is kept for later replacements (``ctl.options``), and said on stderr.
    """
    if not ctl.local:
        return InProcess(IngressActor(options, ctl.table, ctl.chosen))  # on a cluster: the driver's node, here
    try:
        return _start_process(ctl, options)
    except ActorDiedError as exc:
        options = _switch_server(ctl, f"died while starting on {options.server} ({exc})", options)
        return _start_process(ctl, options)


def _start_process(ctl: "ServeController", options: HTTPOptions) -> Any:
    # A fresh interpreter, not a fork of the zygote: in CI a forked ingress inherited the test
    # driver's state and its native loop aborted (granian) or crashed (uvicorn) while starting.
    return ctl.runtime.create_actor(
        ctl.ingress_class, (options, ctl.table, ctl.chosen), {}, {}, label="serve ingress", fresh_process=True
    )


def _switch_server(ctl: "ServeController", what: str, options: HTTPOptions) -> HTTPOptions:
    """Run the ingress on the other server, on asyncio's own event loop, from now on (``options``
    changed to match), saying why.  Both crashes seen in CI were inside uvloop's native code."""
    other = "uvicorn" if options.server == "granian" else "granian"
    print(f"[serve] the HTTP ingress {what}; starting it on {other} with asyncio's own event loop instead "
          "(choose outright with serve.start(http_options={'server': ..., 'loop': ...})).",
          file=sys.stderr, flush=True)
    ctl.options = dataclasses.replace(ctl.options, server=other, loop="asyncio")
    ctl.moved_for_websockets = False  # a fallback stays
    return dataclasses.replace(options, server=other, loop="asyncio")


def down(ctl: "ServeController") -> str | None:
    """Why the ingress cannot serve now (None: it can)."""
    if not ctl.ingress.is_alive():
        if ctl.local:
            return f"its process has exited ({describe_exit(ctl.runtime.exit_status(ctl.ingress, 0.2))})"
        return "its server has stopped"
    return None


def replace(ctl: "ServeController", why: str) -> None:
    """Start a new ingress on the same port, with the current routes."""
    with ctl.ingress_lock:
        if ctl._stop.is_set() or down(ctl) is None:
            return
        print(f"[serve] the HTTP ingress on {ctl.host}:{ctl.port} is down ({why}); starting a new one "
              "on the same port", file=sys.stderr, flush=True)
        options = dataclasses.replace(ctl.options, port=ctl.port)
        if ctl.local:
            code = ctl.runtime.exit_status(ctl.ingress, 0.2)
            ctl.runtime.kill(ctl.ingress)
            if code is not None and -code in _CRASHES:  # the server's own fault, not an OOM kill: try the other
                options = _switch_server(ctl, f"crashed ({describe_exit(code)})", options)
        ctl.ingress = start(ctl, options)
        ctl.ingress.call("address").result(30)
    ctl._push()  # whatever changed while it started


def confirm(ctl: "ServeController", timeout_s: float = 10.0) -> None:
    """Return once ``GET /-/healthz`` on the ingress answers from this process; replace a dead one.

    Raises:
        RayServeException: it does not answer within ``timeout_s`` (says what was seen).
    """
    deadline = time.monotonic() + timeout_s
    while ctl.proxy and not answers(ctl.host, ctl.port, timeout_s=2.0, tls=ctl.options.tls):
        why = down(ctl)
        if why is not None:
            replace(ctl, why)
        elif time.monotonic() > deadline:
            raise RayServeException(
                f"the HTTP ingress at http://{ctl.host}:{ctl.port} does not answer GET /-/healthz although "
                f"its process lives (after {timeout_s:g} s); its stderr says why. Restart Serve with "
                "serve.shutdown() and serve.start(), or pick another port with http_options={'port': N}."
            )
        else:
            time.sleep(0.05)
