"""An upstream over streamable HTTP: proof that a tool call was never sent, without a ping.

The gateway may record a reserved call ``failed`` only when the call provably never reached the
upstream. Over HTTP the proof is the POST that carries it failing to get a connection (refused,
no route, the TLS handshake failed, no connection within the connect or pool timeout): httpx
raises those before a byte of the request is written. The SDK's transport does not tell its
caller which POST failed how (and a request in flight when its transport dies is left to its
timeout), so the gateway's HTTP client carries its own transport wrapper, written here because
no library offers it: it sees each POST fail and cancels the wait of the one call it carried.

A call is known by a context variable its sender sets (the SDK sends each request's POST from a
copy of the sending task's context), and checked against the POST's body. Only the first POST
of a call counts: a later one (the SDK follows a same-origin redirect by posting again) comes
after one that may have reached the server.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Iterator, Optional, Tuple

import anyio
import httpx2

#: The SDK's own HTTP timeouts (its default client's): seconds to connect, write or wait for a
#: pooled connection, and to read (a response stream may stay open that long).
TIMEOUT, READ_TIMEOUT = 30.0, 300.0
#: What httpx raises before the request is written: the request never left.
UNSENT = (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout)


def call_id(name: Any, arguments: Any) -> str:
    """How a tools/call is recognised in a POST body: its name and arguments, canonical."""
    return json.dumps([name, arguments], sort_keys=True, separators=(",", ":"), default=str)


def _tool_call_in(request: httpx2.Request) -> Optional[str]:
    """The :func:`call_id` of the tools/call a POST carries, if it carries one."""
    try:
        body = json.loads(request.content)
    except (ValueError, httpx2.RequestNotRead):
        return None
    if not isinstance(body, dict) or body.get("method") != "tools/call":
        return None
    params = body.get("params") or {}
    return call_id(params.get("name"), params.get("arguments") or {})


class _Call:
    """One call being sent: its scope, how many POSTs carried it, and whether the upstream
    answered its first one that it does not know the session (``session_gone``)."""

    def __init__(self, which: str, scope: anyio.CancelScope) -> None:
        self.which = which
        self.scope = scope
        self.posts = 0
        self.over = False
        self.session_gone = False


_sending: ContextVar[Optional[_Call]] = ContextVar("ctrlrun_gateway_call", default=None)


class UnsentWatch(httpx2.AsyncBaseTransport):
    """Wraps an HTTP transport: when the first POST of the call being sent (see
    :func:`watching`) gets no connection, the call's scope is cancelled; when a POST of it is
    answered 404 for its session, the call's ``session_gone`` is set (the connection is over,
    and the next request opens a new one)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        call = _sending.get()
        first = False
        if call is not None and not call.over and _tool_call_in(request) == call.which:
            call.posts += 1
            first = call.posts == 1
        try:
            response: httpx2.Response = await self.inner.handle_async_request(request)
        except UNSENT:
            if first and call is not None and not call.over:
                call.scope.cancel()
            raise
        if (
            call is not None
            and not call.over
            and response.status_code == 404
            and "mcp-session-id" in request.headers
        ):
            # The MCP transport's rule: a server answers 404 to a request for a session it
            # has ended (it restarted). The connection is over; whether the call ran is not
            # proven by it (a proxy may have retried the POST elsewhere), so it is not
            # cancelled here: the SDK's answer (an error) makes it ambiguous.
            call.session_gone = True
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


@contextmanager
def watching(name: str, arguments: Any) -> Iterator[Tuple[anyio.CancelScope, _Call]]:
    """A scope to send the call ``name(arguments)`` in: cancelled (``cancelled_caught``) when
    its POST never got a connection; and the call, whose ``session_gone`` says whether the
    upstream answered it 404 for its session."""
    with anyio.CancelScope() as scope:
        call = _Call(call_id(name, arguments), scope)
        token = _sending.set(call)
        try:
            yield scope, call
        finally:
            call.over = True
            _sending.reset(token)


def http_client() -> httpx2.AsyncClient:
    """The HTTP client for the upstream: the SDK's own timeouts, the proxies the environment
    names (as the SDK's default client), and every transport wrapped in :class:`UnsentWatch`.
    httpx builds those transports itself, so they are wrapped after construction; were its
    attributes ever named otherwise, a call that gets no connection would be recorded
    ``ambiguous`` (the safe side), not ``failed``."""
    client = httpx2.AsyncClient(timeout=httpx2.Timeout(TIMEOUT, read=READ_TIMEOUT))
    if hasattr(client, "_transport"):
        client._transport = UnsentWatch(client._transport)
    mounts = getattr(client, "_mounts", None)
    if isinstance(mounts, dict):
        client._mounts = {
            pattern: UnsentWatch(t) if t is not None else None for pattern, t in mounts.items()
        }
    return client
