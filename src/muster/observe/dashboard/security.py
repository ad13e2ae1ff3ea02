"""Who may read the dashboard: loopback by default, a token for anything else, GET only.

The rules, enforced for every request before a route sees it:

* only ``GET`` and ``HEAD`` are served (405 otherwise): the UI is read-only
  and no endpoint runs code;
* when a token is set, the request must carry it as ``?token=...`` (the
  printed URL; it is then kept in an HttpOnly cookie), a ``muster_token``
  cookie, or ``Authorization: Bearer ...`` (401 otherwise);
* when served on loopback without a token, the ``Host`` header must be a
  loopback name, so a web page elsewhere cannot reach it by DNS rebinding.
"""

from __future__ import annotations

import ipaddress
import secrets
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs

COOKIE = "muster_token"
_LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1", "[::1]"}


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the server reachable from this machine only."""
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def new_token() -> str:
    return secrets.token_urlsafe(24)


def _host_name(host_header: str) -> str:
    if host_header.startswith("["):
        return host_header.split("]", 1)[0] + "]"
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


class AccessMiddleware:
    """Pure ASGI middleware applying the rules in the module docstring."""

    def __init__(self, app: Any, token: str | None, loopback: bool):
        self.app, self.token, self.loopback = app, token, loopback

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if scope["method"] not in ("GET", "HEAD"):
            await _deny(send, 405, "The muster dashboard is read-only: only GET requests are served.",
                        [(b"allow", b"GET, HEAD")])
            return
        if self.token is None:
            if self.loopback and _host_name(headers.get("host", "")) not in _LOOPBACK_NAMES:
                await _deny(send, 403, "Host not allowed: open the dashboard as http://127.0.0.1:<port>/, or "
                                       "serve it with --host and a --token to reach it from elsewhere.")
                return
            await self.app(scope, receive, send)
            return
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        given = (query.get("token") or [None])[0]
        from_query = given is not None
        if given is None:
            cookie = SimpleCookie(headers.get("cookie", ""))
            given = cookie[COOKIE].value if COOKIE in cookie else None
        if given is None and headers.get("authorization", "").startswith("Bearer "):
            given = headers["authorization"][len("Bearer "):]
        if given is None or not secrets.compare_digest(given.encode(), self.token.encode()):
            await _deny(send, 401, "This dashboard needs its access token: open the URL `muster dashboard` printed "
                                   "(it ends in ?token=...), or send 'Authorization: Bearer <token>'.")
            return
        if not from_query:
            await self.app(scope, receive, send)
            return

        async def send_with_cookie(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                cookie = f"{COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/".encode()
                message = {**message, "headers": [*message.get("headers", []), (b"set-cookie", cookie)]}
            await send(message)

        await self.app(scope, receive, send_with_cookie)


async def _deny(send: Any, status: int, text: str, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    body = text.encode() + b"\n"
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + (extra or [])})
    await send({"type": "http.response.body", "body": body})
