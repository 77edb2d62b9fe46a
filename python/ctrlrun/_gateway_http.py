"""An upstream over streamable HTTP: proof that a tool call was never sent, without a ping.

The gateway may record a reserved call ``failed`` only when the call provably never reached the
upstream. Over HTTP the proof is the POST that carries it failing to get a connection (refused,
no route, the TLS handshake failed, no connection within the connect or pool timeout): httpx
raises those before a byte of the request is written. The SDK's transport does not tell its
caller which POST failed how (and a request in flight when its transport dies is left to its
timeout), so the gateway's HTTP client carries its own transport wrapper, written here because
no library offers it: it sees each POST fail and cancels the wait of the one call it carried.

A reserved call is identified by its tool name and arguments: two reserved calls with the same
arguments render the same effect key, which one gateway never has in flight twice.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from typing import Any, Dict, Iterator, Optional

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


class UnsentWatch(httpx2.AsyncBaseTransport):
    """Wraps the HTTP transport: a tools/call POST that never got a connection cancels the
    scope of the call that sent it (registered with :meth:`watching`)."""

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self.inner = inner
        self.scopes: Dict[str, anyio.CancelScope] = {}

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            return await self.inner.handle_async_request(request)
        except UNSENT:
            which = _tool_call_in(request)
            scope = self.scopes.get(which) if which is not None else None
            if scope is not None:
                scope.cancel()
            raise

    async def aclose(self) -> None:
        await self.inner.aclose()

    @contextmanager
    def watching(self, name: str, arguments: Any) -> Iterator[anyio.CancelScope]:
        """A scope for sending the call ``name(arguments)``: cancelled (``cancelled_caught``)
        when its POST never got a connection."""
        which = call_id(name, arguments)
        with anyio.CancelScope() as scope:
            self.scopes[which] = scope
            try:
                yield scope
            finally:
                if self.scopes.get(which) is scope:
                    del self.scopes[which]


def http_client() -> "tuple[httpx2.AsyncClient, UnsentWatch]":
    """The HTTP client for the upstream, with the SDK's own timeouts, and its watch."""
    watch = UnsentWatch(httpx2.AsyncHTTPTransport())
    client = httpx2.AsyncClient(
        timeout=httpx2.Timeout(TIMEOUT, read=READ_TIMEOUT),
        transport=watch)
    return client, watch
