"""The gateway's side of its upstream MCP server: the session, whether it is gone, proof
that a call was never sent, and reconnecting to an HTTP upstream whose connection ended."""

from __future__ import annotations

import re
from typing import Any, Awaitable, Callable, Dict, Optional, TypeVar

import anyio
from mcp import types
from mcp.client.session import ClientSession
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp.types import INTERNAL_ERROR

from ctrlrun.errors import NotExecuted
from ctrlrun.gateway.http import watching

T = TypeVar("T")


class NotSent(NotExecuted):
    """The call was never written to the upstream: nothing ran there (``failed``)."""


class WatchedStream:
    """The upstream's messages as the session reads them, noting when they end: a stdio
    upstream whose output ended, or an HTTP upstream whose transport gave up, is gone, and the
    session sends nothing after that."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.ended = False

    async def __aenter__(self) -> WatchedStream:
        await self.inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self.inner.__aexit__(*exc)

    def __aiter__(self) -> WatchedStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.inner.__anext__()
        except (StopAsyncIteration, anyio.EndOfStream, anyio.ClosedResourceError):
            self.ended = True
            raise

    async def receive(self) -> Any:
        try:
            return await self.inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            self.ended = True
            raise

    async def aclose(self) -> None:
        await self.inner.aclose()

    def close(self) -> None:
        self.inner.close()

    @property
    def last_context(self) -> Any:
        return getattr(self.inner, "last_context", None)


#: Where an upstream's progress for a call goes: ``(progress, total, message)``.
Progress = ProgressFnT


def progress_of(ctx: Any) -> Optional[Progress]:
    """The agent's progress channel for this call, when it asked for progress (a progress
    token): the upstream's progress is then relayed to it."""
    meta = getattr(ctx, "meta", None) or {}
    session = getattr(ctx, "session", None)
    if meta.get("progress_token") is None or session is None:
        return None
    report: Progress = session.report_progress
    return report


class Upstream:
    """The upstream MCP server's session, or, for an upstream that never started, why
    (``down``): then nothing is ever sent. Over HTTP (``http``), a call whose POST never got a
    connection, or was refused because the upstream no longer knows the session, is known
    (``ctrlrun.gateway.http``), and a connection that failed is opened again by the next request that
    needs it (``reconnect``, set by the server, bounded by ``timeout``: a restarted upstream
    needs no restart of the gateway)."""

    def __init__(
        self,
        session: Optional[ClientSession],
        watched: Optional[WatchedStream],
        down: Optional[str] = None,
        http: bool = False,
    ) -> None:
        self.session = session
        self.watched = watched
        self.down = down
        self.http = http
        self.reconnect: Optional[Callable[[], Awaitable[None]]] = None
        self.stop: Callable[[], None] = lambda: None  # closes this connection (set by its task)
        self.timeout = 60.0
        self._reconnecting = anyio.Lock()

    def _ended(self) -> bool:
        return self.watched is not None and self.watched.ended

    async def alive(self, timeout: Optional[float] = None) -> None:
        """Raise :class:`NotSent` when the upstream is known to be gone, so the call that
        follows is never sent: it never started, or its messages have ended (the session
        sends nothing after that) and it could not be reached again within ``timeout``
        (default: the gateway's call timeout). One reconnection runs at a time; a request that
        waited for another's uses the connection it made, or tries again itself in the time
        it has left."""
        if self.down is not None:
            raise NotSent(
                f"the upstream MCP server never started ({self.down}); the call was not sent"
            )
        if not self._ended():
            return
        if self.reconnect is None:
            raise NotSent("the upstream MCP server's connection has ended; the call was not sent")
        bound = self.timeout if timeout is None else timeout
        try:
            with anyio.fail_after(bound):
                async with self._reconnecting:
                    if not self._ended():
                        return  # reconnected while this request waited
                    try:
                        await self.reconnect()
                    except Exception as exc:
                        raise NotSent(self._unreachable(brief(exc))) from None
        except TimeoutError:
            raise NotSent(self._unreachable(f"no new connection within {bound:g} s")) from None

    async def ask(self, send: Callable[[ClientSession], Awaitable[T]]) -> T:
        """A request other than a tool call (a list, a read, a subscription, a completion, the
        log level), sent by ``send`` on the current session: reconnected first when it can be,
        and the whole bounded by the call timeout. What the upstream answers, an error too,
        passes through unchanged; a request that could not be sent or got no answer becomes a
        JSON-RPC error naming why, for the agent (never a traceback on the gateway's
        stderr)."""
        try:
            with anyio.fail_after(self.timeout):
                await self.alive()
                assert self.session is not None
                return await send(self.session)
        except MCPError:
            raise
        except NotSent as exc:
            raise MCPError(INTERNAL_ERROR, f"ctrlrun gateway: {exc}") from None
        except TimeoutError:
            raise MCPError(
                INTERNAL_ERROR,
                (
                    f"ctrlrun gateway: the upstream MCP server did not answer within {self.timeout:g} s"
                ),
            ) from None
        except Exception as exc:
            raise MCPError(
                INTERNAL_ERROR,
                (f"ctrlrun gateway: the upstream MCP server did not answer ({brief(exc)})"),
            ) from None

    @staticmethod
    def _unreachable(why: str) -> str:
        return (
            f"the upstream MCP server's connection has ended and it could not be reached "
            f"again ({why}); the call was not sent"
        )

    async def call(
        self,
        name: str,
        arguments: Dict[str, Any],
        timeout: float,
        progress: Optional[Progress] = None,
    ) -> types.CallToolResult:
        """Forward one tool call; a timeout or a lost connection raises (sent: ``ambiguous``),
        and a POST that never got a connection raises :class:`NotSent`. With ``progress``,
        the upstream's progress notifications for it are passed to it. When the upstream
        answers the call's POST with HTTP 404 for the session (it restarted), the connection
        is over and the next request opens a new one; the call itself stays unknown (a 404
        is not proof that it did not run: a proxy may have retried it elsewhere)."""
        await self.alive(timeout)  # NotSent: nothing to send to (reconnected if it can be)
        assert self.session is not None
        watched = self.watched  # this connection's: a reconnection meanwhile swaps the shared one
        request = types.CallToolRequest(
            params=types.CallToolRequestParams(name=name, arguments=arguments)
        )
        # Sent as a plain request: the client's own checks of a result against the tool's
        # output schema must not turn an answer the upstream gave into a lost one.
        with anyio.fail_after(timeout):
            if not self.http:
                return await self.session.send_request(
                    request, types.CallToolResult, progress_callback=progress
                )
            with watching(name, arguments) as (scope, sent):
                try:
                    result = await self.session.send_request(
                        request, types.CallToolResult, progress_callback=progress
                    )
                finally:
                    if sent.session_gone and watched is not None:
                        watched.ended = True
            if scope.cancelled_caught:
                raise NotSent(
                    "the upstream MCP server could not be reached (no connection "
                    "for the request); the call was not sent"
                )
            return result


def redacted(text: str) -> str:
    """``text`` with any URL's user, password and query hidden (a token rides in either;
    messages never show a secret)."""
    text = re.sub(r"(\w+://)[^/@\s]*@", r"\1***@", text)
    return re.sub(r"(\w+://[^\s?#]*)\?[^\s#]*", r"\1?***", text)


def brief(exc: BaseException) -> str:
    """The first line of what ``exc`` says, short enough for a message, any URL's secrets
    hidden (an HTTP error names the URL it was for)."""
    text = str(exc) or type(exc).__name__
    return redacted(text.splitlines()[0][:200] if text else type(exc).__name__)
