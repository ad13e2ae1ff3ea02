"""Serve an ASGI app (``openai_asgi_app``) under uvicorn on a free 127.0.0.1 port for a module's tests."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Any, Iterator


@contextlib.contextmanager
def served(app: Any) -> Iterator[str]:
    """The app's base URL (``http://127.0.0.1:<port>/v1``) while uvicorn serves it in a thread; stopped after."""
    import uvicorn

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "uvicorn did not start in 30 s"
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(10)
