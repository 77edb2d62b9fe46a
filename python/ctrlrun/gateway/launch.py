"""Starting (or reaching) the upstream MCP server once, and holding its session for as long as
the gateway serves: a command on stdio or a streamable HTTP URL. A command that cannot be run
at all is :class:`CannotRun`; an upstream that runs but never completes the handshake is
reported to the caller, which serves anyway with the upstream down."""

from __future__ import annotations

import os
import sys
from contextlib import AsyncExitStack
from typing import Any, Dict, List, Optional, Tuple

import anyio
import httpx2
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from ctrlrun.gateway.forward import upstream_tools
from ctrlrun.gateway.http import http_client
from ctrlrun.gateway.relay import Relay, handshake_era
from ctrlrun.gateway.upstream import Upstream, WatchedStream, brief


def upstream_env() -> Dict[str, str]:
    """The gateway's environment for the upstream, without ctrlrun's own settings (the store
    URL may hold a password the upstream has no business seeing)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("CTRLRUN_")}


def _upstream_transport(
    command: List[str], url: Optional[str], http: Optional[httpx2.AsyncClient]
) -> Any:
    """The upstream's streams: a subprocess on stdio, or a server over streamable HTTP."""
    if url is not None:
        return streamable_http_client(url, http_client=http)
    params = StdioServerParameters(command=command[0], args=command[1:], env=upstream_env())
    return stdio_client(params)


class CannotRun(Exception):
    """The upstream command could not be run (its ``OSError`` is the cause)."""


async def _start(
    stack: AsyncExitStack, command: List[str], url: Optional[str], timeout: float, relay: Relay
) -> Tuple[Upstream, types.InitializeResult, List[types.Tool]]:
    """The upstream's session, initialized and its tools listed, within ``timeout``; its
    streams and process belong to ``stack``, its requests and notifications go to ``relay``.
    A command that cannot be run raises :class:`CannotRun`."""
    http = http_client() if url is not None else None
    if http is not None:
        await stack.enter_async_context(http)
    try:
        read, write = await stack.enter_async_context(_upstream_transport(command, url, http))
    except OSError as exc:
        raise CannotRun(exc) from exc
    watched = WatchedStream(read)
    with handshake_era():
        client = ClientSession(watched, write, **relay.client_callbacks())
    session = await stack.enter_async_context(client)
    with anyio.fail_after(timeout):
        init = await session.initialize()
        tools = await upstream_tools(session)
    return Upstream(session, watched, http=url is not None), init, tools


def only_errors(exc: BaseException, kinds: Tuple[type, ...] = (Exception,)) -> bool:
    """``exc`` is an error of ``kinds``, or a group of them (by default: not a cancellation
    or an exit)."""
    inner = getattr(exc, "exceptions", None)
    if inner is None:
        return isinstance(exc, kinds)
    return all(only_errors(e, kinds) for e in inner)


def first_error(exc: BaseException) -> BaseException:
    """The first error inside a group (what to name in a message)."""
    while getattr(exc, "exceptions", None):
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    return exc


async def _close_quietly(stack: AsyncExitStack) -> Optional[BaseException]:
    """Close what a failed start left open (the process, its streams), whatever they raise:
    the reason the start failed is the one to report. Returns what the closing raised (a
    transport's own failure, which it reports by cancelling the task that opened it)."""
    try:
        await stack.aclose()
    except BaseException as exc:  # a group of what the streams' tasks raised on the way out
        if not only_errors(exc):
            raise
        return exc
    return None


async def hold_upstream(
    alias: str,
    command: List[str],
    url: Optional[str],
    timeout: float,
    relay: Relay,
    *,
    task_status: Any,
) -> None:
    """Start the upstream, report it started, and keep its connection open in this task
    until cancelled. The connection runs in a task of its own because a transport that
    fails (an HTTP upstream that went away) cancels the task that opened it: that must be
    this one, never the one serving agents. Once it failed, nothing more is sent."""
    stack = AsyncExitStack()
    try:
        started = await _start(stack, command, url, timeout, relay)
    except BaseException as exc:
        failed = await _close_quietly(stack)
        if failed is not None and isinstance(exc, anyio.get_cancelled_exc_class()):
            # The transport failed (nothing listening) and cancelled this task to say so: its
            # failure is the reason, and the cancellation was its own. (A cancellation of the
            # gateway itself is delivered again at the caller's next wait.)
            raise failed from None
        raise
    # Its own stream, not whichever the gateway's shared upstream holds when this ends (a
    # reconnection swaps it); and a way to close this connection when a new one replaces it.
    watched, replaced = started[0].watched, anyio.Event()
    started[0].stop = replaced.set
    task_status.started(started)
    try:
        async with stack:
            await replaced.wait()
    except BaseException as exc:
        if not only_errors(exc):
            raise  # the gateway is stopping
        if replaced.is_set():
            return  # a new connection took its place; how this one closed does not matter
        then = (
            "the next request reconnects (a reserved call that cannot be sent is recorded failed)"
            if url is not None
            else "no call is sent any more (a reserved call is recorded failed)"
        )
        print(
            f"ctrlrun gateway {alias}: the connection to the upstream failed ({brief(first_error(exc))}); {then}",
            file=sys.stderr,
            flush=True,
        )
    finally:
        if watched is not None:
            watched.ended = True
