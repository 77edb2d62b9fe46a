"""What one running console holds: its store, its settings, and its sessions and sign-in
limiter (in memory)."""

from __future__ import annotations

import ipaddress
import re
import secrets
from dataclasses import dataclass, field
from typing import FrozenSet, Optional, Sequence, Union

from ctrlrun.console.ratelimit import SignInLimiter
from ctrlrun.console.sessions import Sessions
from ctrlrun.errors import InvalidArgument
from ctrlrun.store.api import Store

__all__ = ["Settings", "ConsoleState", "networks"]

#: An HTTP header name (RFC 9110's token).
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")

Network = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]


def networks(addresses: Sequence[str]) -> FrozenSet[Network]:
    """``--trusted-proxy`` values (an address or a CIDR network) as networks."""
    out = set()
    for text in addresses:
        try:
            out.add(ipaddress.ip_network(text.strip(), strict=False))
        except ValueError:
            raise InvalidArgument(
                f"--trusted-proxy {text!r} is not an IP address or network (such as 10.0.0.5 "
                f"or 10.0.0.0/24)"
            ) from None
    return frozenset(out)


@dataclass(frozen=True)
class Settings:
    """How the console trusts what reaches it.

    Attributes:
        secure_cookies: cookies carry ``Secure`` (the console is served over TLS).
        proxy_header: the header an authenticating reverse proxy puts the signed-in user in
            (``X-Forwarded-User``); ``None`` (the default): no header is trusted.
        trusted_proxies: the addresses the header is taken from; from any other, ignored.
        console_url: the console's public address (links in notifications), if known.
    """

    secure_cookies: bool = False
    proxy_header: Optional[str] = None
    trusted_proxies: FrozenSet[Network] = frozenset()
    console_url: Optional[str] = None

    def __post_init__(self) -> None:
        if self.proxy_header is not None and not _HEADER_NAME.fullmatch(self.proxy_header):
            raise InvalidArgument(
                f"--trust-proxy-header {self.proxy_header!r} is not a header name (letters, "
                f"digits and -, such as X-Forwarded-User)"
            )
        if self.proxy_header is not None and not self.trusted_proxies:
            raise InvalidArgument(
                "--trust-proxy-header needs --trusted-proxy ADDR: the header is taken only from "
                "the proxy's own addresses"
            )
        if self.trusted_proxies and self.proxy_header is None:
            raise InvalidArgument("--trusted-proxy is given without --trust-proxy-header")


@dataclass
class ConsoleState:
    store: Store
    settings: Settings
    sessions: Sessions = field(default_factory=Sessions)
    limiter: SignInLimiter = field(default_factory=SignInLimiter)
    #: signs the CSRF tokens of proxy-authenticated requests (they have no session)
    key: bytes = field(default_factory=lambda: secrets.token_bytes(32))
