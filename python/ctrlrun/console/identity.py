"""Who a request comes from: the account its session cookie names, or (only when configured,
and only from a trusted proxy's address) the user an authenticating reverse proxy names in a
header. Either way the name must be an approver account in the store, and it is what a grant,
denial or resolution records: never a name typed into a form."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from dataclasses import dataclass
from typing import Optional

from starlette.requests import Request

from ctrlrun.console import accounts
from ctrlrun.console.state import ConsoleState

__all__ = ["Identity", "identify", "secret_mark", "SESSION_COOKIE", "client_address"]

SESSION_COOKIE = "ctrlrun_session"


@dataclass(frozen=True)
class Identity:
    account: str
    csrf: str
    #: ``session`` or ``proxy``
    via: str
    token: Optional[str] = None


def secret_mark(secret_hash: str) -> str:
    return hashlib.sha256(secret_hash.encode("utf-8", "surrogatepass")).hexdigest()


def client_address(request: Request) -> str:
    return request.client.host if request.client is not None else "unknown"


def _from_trusted_proxy(state: ConsoleState, request: Request) -> bool:
    try:
        addr = ipaddress.ip_address(client_address(request))
    except ValueError:
        return False
    return any(addr in net for net in state.settings.trusted_proxies)


def identify(state: ConsoleState, request: Request) -> Optional[Identity]:
    """The signed-in identity of ``request``, or ``None``."""
    header = state.settings.proxy_header
    if header is not None and _from_trusted_proxy(state, request):
        name = request.headers.get(header)
        if name:
            if accounts.get(state.store, name) is None:
                return None
            csrf = hmac.new(state.key, b"proxy\0" + name.encode(), hashlib.sha256).hexdigest()
            return Identity(name, csrf, "proxy")
    token = request.cookies.get(SESSION_COOKIE)
    session = state.sessions.get(token)
    if session is None:
        return None
    account = accounts.get(state.store, session.account)
    if account is None or not hmac.compare_digest(
        secret_mark(account.secret_hash), session.secret_mark
    ):
        state.sessions.end(session.token)  # removed, or its secret reset: signed out
        return None
    return Identity(session.account, session.csrf, "session", session.token)
