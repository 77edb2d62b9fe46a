"""Starting the gateway: the upstream MCP server started (or reached) once, the line that says
what the gateway guards, and the agents served on stdio or over streamable HTTP.

An upstream command that cannot be run at all (no such file) stops the gateway with one line:
that is a wrong command line. An upstream that runs but never completes the MCP handshake
(it exits, or stays silent past the call timeout) is an upstream that is down: the gateway
serves anyway, lists no tools, and answers every call without sending it; a reserved call is
recorded ``failed`` (nothing ran, so a retry may run once the upstream is fixed)."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator, List, Optional, Tuple

import anyio
from mcp import types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

import ctrlrun._core as _core
from ctrlrun.call import io_threads as _io_threads
from ctrlrun.gateway import stdio as _gateway_stdio
from ctrlrun.gateway.forward import Gateway
from ctrlrun.gateway.launch import CannotRun, first_error, hold_upstream, only_errors
from ctrlrun.gateway.relay import PassThrough, Relay, handshake_era, notification_options
from ctrlrun.gateway.upstream import Upstream, brief, redacted
from ctrlrun.policy import current_policy
from ctrlrun.store.api import Store


class _OneLine(logging.Formatter):
    """The MCP SDK's log records as one line each, the exception named, never its traceback:
    an upstream that prints to its stdout (each line a message the SDK cannot parse) must not
    flood the gateway's stderr."""

    def __init__(self, alias: str) -> None:
        super().__init__()
        self.prefix = f"ctrlrun gateway {alias}: the MCP SDK: "

    def format(self, record: logging.LogRecord) -> str:
        lines = record.getMessage().splitlines()
        text = self.prefix + redacted(lines[0] if lines else "")
        if record.exc_info and record.exc_info[1] is not None:
            text += f" ({brief(record.exc_info[1])})"
        return text


@contextmanager
def _quiet_sdk_log(alias: str) -> Iterator[None]:
    """While the gateway serves, the SDK's log records go to stderr as :class:`_OneLine`s,
    and only there; the ``mcp`` logger is as it was afterwards (a gateway served in-process,
    as by tests, leaves no handler behind). Gateways served at once in one process share the
    first one's handler, removed when the last one ends."""
    global _log_users
    sdk = logging.getLogger("mcp")
    if _log_users == 0:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_OneLine(alias))
        _log_saved[:] = [handler, sdk.propagate]
        sdk.addHandler(handler)
        sdk.propagate = False
    _log_users += 1
    try:
        yield
    finally:
        _log_users -= 1
        if _log_users == 0:
            handler, sdk.propagate = _log_saved
            sdk.removeHandler(handler)
            _log_saved.clear()


_log_users = 0
_log_saved: List[Any] = []


#: After a SIGTERM, how long the gateway may take to end by itself before it ends anyway (once
#: the store writes in flight have finished).
SIGTERM_GRACE = 3.0


def _stop_on_sigterm() -> None:
    """SIGTERM (how an agent host stops an MCP server) ends the gateway as Ctrl-C does: the
    running loop's own SIGINT handler (``asyncio.Runner``'s) cancels the main task, so each
    call in flight is cancelled at an await and records its outcome (``ambiguous``), never
    left ``executing``. Where the SDK's own transport serves (``ctrlrun.gateway.stdio``), it reads
    stdin on a thread that only a line or the end of the input wakes, which would hold the
    exit until the agent closes it: past
    ``SIGTERM_GRACE``, once the store writes queued have finished, the process ends anyway.
    The handler stays for the rest of the process, on purpose: an agent host commonly closes
    stdin and then sends SIGTERM, which may arrive after serving ended while the outcome
    writes still queued are finishing; the default action would cut them off. (``serve`` is
    the ``ctrlrun gateway`` process's, not an API to embed.)"""
    if threading.current_thread() is not threading.main_thread():
        return
    on_int = signal.getsignal(signal.SIGINT)

    def handler(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: a second would cut the ending
        threading.Thread(target=_end_anyway, name="ctrlrun-sigterm", daemon=True).start()
        if callable(on_int) and on_int is not signal.default_int_handler:
            on_int(signal.SIGINT, frame)
        else:
            raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def _end_anyway() -> None:
    time.sleep(SIGTERM_GRACE)  # an ending by itself comes first, and takes this thread along
    for _ in range(2):  # the writes queued, then any a finished one queued
        finish = getattr(_core, "finish_background", None)
        if finish is not None:
            finish()
        _io_threads.finish_queued()
    sys.stderr.flush()
    _gateway_stdio.restore()  # the agent's pipes as they were: blocking, for who shares them
    os._exit(0)


async def serve(
    alias: str,
    store: Store,
    command: List[str],
    url: Optional[str],
    listen: Optional[Tuple[str, int]],
    call_timeout: float,
    requested_by: Optional[str] = None,
) -> None:
    """Start the upstream, then serve agents (on this process's stdin and stdout, or over
    streamable HTTP on ``listen``) until they are done."""
    _stop_on_sigterm()
    with _quiet_sdk_log(alias):
        shown = redacted(url) if url else command[0]
        relay = Relay(call_timeout)
        async with anyio.create_task_group() as tg:
            try:
                upstream, init, tools = await tg.start(
                    hold_upstream, alias, command, url, call_timeout, relay
                )
                relay.upstream = upstream
            except BaseException as exc:
                # A command that cannot be run, or a URL: the caller reports it and exits.
                if isinstance(exc, CannotRun) and exc.__cause__ is not None:
                    raise exc.__cause__ from None
                if url is not None or not isinstance(exc, Exception):
                    raise
                why = brief(exc)
                print(
                    f"ctrlrun gateway {alias}: the upstream {shown} did not start ({why}); "
                    f"serving anyway: no tools are listed and no call is sent (a reserved call "
                    f"is recorded failed)",
                    file=sys.stderr,
                    flush=True,
                )
                gateway = Gateway(
                    alias,
                    store,
                    Upstream(None, None, down=why),
                    call_timeout,
                    [],
                    requested_by=requested_by,
                )
                await _run(
                    Server(
                        f"ctrlrun-gateway-{alias}",
                        version=_core.__version__,
                        on_list_tools=gateway.list_tools,
                        on_call_tool=gateway.call_tool,
                    ),
                    listen,
                )
                return
            assert upstream.session is not None
            announce(alias, store, shown, tools)
            gateway = Gateway(
                alias, store, upstream, call_timeout, tools, relay, requested_by=requested_by
            )

            async def reconnect() -> None:
                # A new connection in a task of its own, as the first; bounded as the first.
                try:
                    again, _, _ = await tg.start(
                        hold_upstream, alias, command, url, call_timeout, relay
                    )
                except Exception as exc:  # name the first failure, not the group around it
                    raise ConnectionError(brief(first_error(exc))) from None
                replaced = upstream.stop
                upstream.session, upstream.watched = again.session, again.watched
                upstream.stop = again.stop
                replaced()  # the old connection, if its transport still runs (a 404 session)
                gateway.forget_tools()
                print(
                    f"ctrlrun gateway {alias}: reconnected to the upstream {shown}",
                    file=sys.stderr,
                    flush=True,
                )
                refused = await relay.restore()
                if refused:
                    print(
                        f"ctrlrun gateway {alias}: the new connection refused {', '.join(refused)}",
                        file=sys.stderr,
                        flush=True,
                    )

            upstream.timeout = call_timeout
            if url is not None:  # a stdio upstream is a process of ours: it is not started again
                upstream.reconnect = reconnect
            with handshake_era():
                server = GatewayServer(
                    f"ctrlrun-gateway-{alias}",
                    version=_core.__version__,
                    instructions=init.instructions,
                    on_list_tools=gateway.list_tools,
                    on_call_tool=gateway.call_tool,
                    **PassThrough(upstream, relay).handlers(init.capabilities),
                    **relay.server_handlers(init.capabilities),
                )
            server.notify = notification_options(init.capabilities)
            try:
                await _run(server, listen)
            finally:
                tg.cancel_scope.cancel()  # close the upstream's connection


class GatewayServer(Server[Any]):
    """The SDK's server, announcing the list-changed notifications the upstream announces:
    the SDK asks for its initialization options itself over HTTP, hence the override."""

    notify: Optional[NotificationOptions] = None

    def create_initialization_options(
        self, notification_options: Any = None, *args: Any, **kwargs: Any
    ) -> Any:
        return super().create_initialization_options(
            notification_options or self.notify, *args, **kwargs
        )


class _Answered:
    """The agent's messages on stdio, each request the SDK cannot read answered. The SDK hands
    on a line it cannot parse (a lone surrogate escape, an integer past Python's digit limit,
    nesting too deep) as an exception, which its dispatcher drops: the agent would wait for an
    answer that never comes. Python's ``json`` reads such a line, so the request's id is
    recovered and the request gets a JSON-RPC parse error (-32700); nothing is sent upstream.
    (A line with no id to answer is handed on as before.)"""

    def __init__(self, inner: Any, write: Any) -> None:
        self.inner = inner
        self.write = write

    @property
    def last_context(self) -> Any:
        return getattr(self.inner, "last_context", None)

    async def receive(self) -> Any:
        while True:
            item = await self.inner.receive()
            if not isinstance(item, Exception) or not await self._answer(item):
                return item

    async def _answer(self, exc: Exception) -> bool:
        errors = exc.errors() if isinstance(exc, ValidationError) else []
        request_id = _request_id(errors[0].get("input") if errors else None)
        if request_id is None:
            return False
        why = (errors[0].get("msg") or "not valid").splitlines()[0][:200]
        await self.write.send(
            SessionMessage(
                types.JSONRPCError(
                    jsonrpc="2.0",
                    id=request_id,
                    error=types.ErrorData(
                        code=types.PARSE_ERROR,
                        message=f"ctrlrun gateway: the request could not be read ({why}); nothing was sent",
                    ),
                )
            )
        )
        return True

    def __aiter__(self) -> _Answered:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> _Answered:
        await self.inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self.inner.__aexit__(*exc)


_TOO_LONG = object()  # an integer past Python's digit limit, in a line read for its id


def _request_id(raw: Any) -> Any:
    """The id of the request on the line ``raw``, or ``None`` (not a request, or no line)."""
    if not isinstance(raw, (str, bytes)):
        return None
    try:
        message = json.loads(raw, parse_int=lambda t: int(t) if len(t) < 4000 else _TOO_LONG)
    except (ValueError, RecursionError):
        return None
    if not isinstance(message, dict) or "method" not in message:
        return None
    found = message.get("id")
    return found if isinstance(found, (str, int)) and not isinstance(found, bool) else None


async def _run(server: Server[Any], listen: Optional[Tuple[str, int]]) -> None:
    """Serve agents on stdio, or over streamable HTTP on ``listen``."""
    if listen is None:
        try:
            async with _gateway_stdio.agent_stdio() as (r, w):
                await server.run(_Answered(r, w), w, server.create_initialization_options())
        except BaseException as exc:
            # Ending (a SIGTERM, the agent gone), the SDK's server closes its streams while
            # its stdio tasks still hand on a line the agent sent: serving is over all the same.
            if not only_errors(exc, (anyio.BrokenResourceError, anyio.ClosedResourceError)):
                raise
        return
    import uvicorn

    host, port = listen
    app = server.streamable_http_app(host=host)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve()


def unreserved_writes(alias: str, tools: List[types.Tool]) -> List[str]:
    """The upstream's tools that may write (not marked ``readOnlyHint: true``) and have no
    effect template in the policy: they run without a reservation."""
    policy = current_policy()
    out = []
    for tool in tools:
        hint = tool.annotations.read_only_hint if tool.annotations is not None else None
        entry = None if policy is None else policy.actions.get(f"mcp.{alias}.{tool.name}")
        if (
            hint is not True
            and (entry is None or entry.effect is None)
            and (entry is None or entry.decision != "deny")
        ):
            out.append(tool.name)
    return out


def announce(alias: str, store: Store, command: str, tools: List[types.Tool]) -> None:
    """One line on stderr (stdout is the MCP channel): what the gateway guards, and every
    write that runs unreserved."""
    policy = current_policy()
    where = policy.path if policy is not None else "no policy file"
    loose = unreserved_writes(alias, tools)
    tail = (
        f"; writes with no effect template, run unreserved: {', '.join(loose)}"
        if loose
        else "; every write has an effect template"
    )
    print(
        f"ctrlrun gateway {alias}: {command} ({len(tools)} tools) behind {store.url}, policy {where}{tail}",
        file=sys.stderr,
        flush=True,
    )
