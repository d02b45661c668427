"""Which ``Host`` headers the dashboard answers: DNS rebinding cannot read it.

A web page on another site can point its own host name at 127.0.0.1 and
then read a local dashboard from the browser as a same-origin page.  Its
requests still name that site in their ``Host`` header, so answering only
the names this machine's loopback goes by (and the address given to
``--host``) closes that door.  Bound to every address (``0.0.0.0``, ``::``)
the dashboard is open to the network anyway, and any name is answered.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from kinetolens import json_codec

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]

LOOPBACK_NAMES = frozenset({"localhost"})
WILDCARDS = frozenset({"", "0.0.0.0", "::"})


_PORT = re.compile(r"^[0-9]{1,5}$")
_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$")


def host_name(header: str) -> str | None:
    """The host of a ``Host`` header (``name``, ``name:port``, ``[v6]``,
    ``[v6]:port``), lower-cased, without a trailing dot; None where the
    header is anything else (``127.0.0.1:1@evil.com``, ``[::1].evil.com``).

    Parsed strictly: whatever a lenient parser and a browser might read
    differently is refused rather than guessed at.
    """
    h = header.strip().lower()
    if h.startswith("["):  # [::1] or [::1]:6006
        inner, sep, rest = h[1:].partition("]")
        if not sep or (rest and not (rest.startswith(":") and _PORT.match(rest[1:]))):
            return None
        try:
            return str(ipaddress.IPv6Address(inner))
        except ValueError:
            return None
    name, sep, port = h.partition(":")
    if sep and not _PORT.match(port):
        return None
    name = name[:-1] if name.endswith(".") else name
    return name if _NAME.match(name) else None


def bound_name(bound: str) -> str:
    """The address given to ``serve --host``, as :func:`host_name` writes hosts."""
    b = bound.strip().lower().strip("[]").rstrip(".")
    try:
        return str(ipaddress.ip_address(b))
    except ValueError:
        return b


def is_loopback(name: str) -> bool:
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def allowed(header: str | None, bound: str) -> bool:
    """Whether a request with this ``Host`` header may be answered by a server bound to ``bound``."""
    if bound_name(bound) in WILDCARDS:
        return True
    if header is None:  # not a browser: no page of another site sent it
        return True
    name = host_name(header)
    if name is None:
        return False
    return is_loopback(name) or name == bound_name(bound)


class HostCheck:
    """ASGI middleware: 403 with one line of JSON for a ``Host`` the dashboard does not go by."""

    def __init__(self, app: ASGIApp, bound: str) -> None:
        self.app = app
        self.bound = bound

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Any]],
                       send: Callable[[Any], Awaitable[None]]) -> None:  # fmt: skip
        if scope["type"] == "http":
            header = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"host"), None)
            if not allowed(header, self.bound):
                body = json_codec.encode({"error": (
                    f"host {header!r} is not this dashboard's: it answers loopback names "
                    f"(and the address given to serve --host)")})  # fmt: skip
                await send({"type": "http.response.start", "status": 403,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode())]})  # fmt: skip
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
