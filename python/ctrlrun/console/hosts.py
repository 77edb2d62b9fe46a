"""The names the console answers to (DNS rebinding): a page on a name its author controls, made
to resolve to this machine, would otherwise reach the console as same-origin, read its forms and
post sign-ins. A request whose ``Host`` is not one of the console's own names is answered 421
(Misdirected Request), as the gateway's MCP transport answers one (the MCP SDK's
``TransportSecurityMiddleware``: the same status, and its port-agnostic match of a name).

The console's names: those of the address it listens on (all loopback names for a loopback
address; any IP address of this machine for a wildcard one: an IP literal cannot be rebound),
the host of ``--console-url``, and each ``--allowed-host``."""

from __future__ import annotations

import ipaddress
import re
from typing import FrozenSet, Iterable, Optional, Union
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from ctrlrun.errors import InvalidArgument

__all__ = ["HostCheck", "console_names", "host_name", "check_allowed_host"]

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
#: A DNS name (labels of letters, digits and -), or an IP literal checked apart.
_DNS_NAME = re.compile(
    r"(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*"
)


def host_name(host: str) -> str:
    """The name in a ``Host`` value (``name``, ``name:port``, ``[v6]:port``): lowercase, without
    its port and a trailing dot; ``""`` when there is none."""
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        return host[1:end] if end > 0 else ""
    if host.count(":") == 1:
        host = host.partition(":")[0]
    return host.rstrip(".")


def _ip(name: str) -> Optional[Union[ipaddress.IPv4Address, ipaddress.IPv6Address]]:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


def check_allowed_host(text: str) -> str:
    """An ``--allowed-host`` value as a name (a DNS name or an IP address; a port is ignored)."""
    name = "" if any(c in text for c in "/@ ") else host_name(text)
    if not name or (_ip(name) is None and not _DNS_NAME.fullmatch(name)):
        raise InvalidArgument(
            f"--allowed-host {text!r} is not a host name (such as console.example.com or 10.0.0.5)"
        )
    return name


def console_names(
    listen_host: str, console_url: Optional[str] = None, allowed: Iterable[str] = ()
) -> FrozenSet[str]:
    """The names the console answers to (see the module's text); ``*`` stands for any IP
    address (a wildcard listen address)."""
    names = {host_name(listen_host)}
    listen_ip = _ip(host_name(listen_host))
    if listen_host == "localhost" or (listen_ip is not None and listen_ip.is_loopback):
        names |= LOOPBACK_NAMES
    if listen_ip is not None and listen_ip.is_unspecified:
        names |= LOOPBACK_NAMES | {"*"}
    if console_url:
        names.add(host_name(urlsplit(console_url).netloc.rpartition("@")[2]))
    names |= {check_allowed_host(a) for a in allowed}
    names.discard("")
    return frozenset(names)


def _answers(names: FrozenSet[str], host: str) -> bool:
    name = host_name(host)
    if not name:
        return False
    return name in names or ("*" in names and _ip(name) is not None)


class HostCheck:
    """Answers 421 to a request whose ``Host`` is not one of ``names``: no page, no cookie."""

    def __init__(self, app: ASGIApp, names: FrozenSet[str]) -> None:
        self.app = app
        self.names = names

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        hosts = [v for k, v in scope.get("headers", []) if k == b"host"]
        host = hosts[0].decode("latin-1") if len(hosts) == 1 else ""
        if _answers(self.names, host):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        shown = host_name(host)[:100] or "(none)"
        body = (
            f"421 Misdirected Request: this console does not answer to the name {shown}. If "
            f"that is its name, start it with --allowed-host {shown} (or --console-url).\n"
        ).encode("utf-8", "replace")
        headers = [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
            (b"x-content-type-options", b"nosniff"),
        ]
        await send({"type": "http.response.start", "status": 421, "headers": headers})
        await send({"type": "http.response.body", "body": body})
