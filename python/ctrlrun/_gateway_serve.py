"""Starting the gateway: the upstream MCP server started (or reached) once, the line that says
what the gateway guards, and the agents served on stdio or over streamable HTTP.

An upstream command that cannot be run at all (no such file) stops the gateway with one line:
that is a wrong command line. An upstream that runs but never completes the MCP handshake
(it exits, or stays silent past the call timeout) is an upstream that is down: the gateway
serves anyway, lists no tools, and answers every call without sending it; a reserved call is
recorded ``failed`` (nothing ran, so a retry may run once the upstream is fixed)."""

from __future__ import annotations

import os
import re
import sys
from contextlib import AsyncExitStack
from typing import Any, Dict, List, Optional, Tuple

import anyio
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server

from . import _core
from ._gateway import Gateway, Upstream, WatchedStream, brief, upstream_tools
from ._gateway_relay import PassThrough, Relay, handshake_era, notification_options
from ._policy import current_policy
from ._store import Store


def upstream_env() -> Dict[str, str]:
    """The gateway's environment for the upstream, without ctrlrun's own settings (the store
    URL may hold a password the upstream has no business seeing)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("CTRLRUN_")}


def _upstream_transport(command: List[str], url: Optional[str]) -> Any:
    """The upstream's streams: a subprocess on stdio, or a server over streamable HTTP."""
    if url is not None:
        return streamable_http_client(url)
    params = StdioServerParameters(command=command[0], args=command[1:], env=upstream_env())
    return stdio_client(params)


class CannotRun(Exception):
    """The upstream command could not be run (its ``OSError`` is the cause)."""


async def _start(stack: AsyncExitStack, command: List[str], url: Optional[str],
                 timeout: float, relay: Relay
                 ) -> Tuple[Upstream, types.InitializeResult, List[types.Tool]]:
    """The upstream's session, initialized and its tools listed, within ``timeout``; its
    streams and process belong to ``stack``, its requests and notifications go to ``relay``.
    A command that cannot be run raises :class:`CannotRun`."""
    try:
        read, write = await stack.enter_async_context(_upstream_transport(command, url))
    except OSError as exc:
        raise CannotRun(exc) from exc
    watched = WatchedStream(read) if url is None else None
    with handshake_era():
        client = ClientSession(watched or read, write, **relay.client_callbacks())
    session = await stack.enter_async_context(client)
    relay.upstream = session
    with anyio.fail_after(timeout):
        init = await session.initialize()
        tools = await upstream_tools(session)
    return Upstream(session, watched), init, tools


async def _close_quietly(stack: AsyncExitStack) -> None:
    """Close what a failed start left open (the process, its streams), whatever they raise:
    the reason the start failed is the one to report."""
    try:
        await stack.aclose()
    except Exception:
        pass
    except BaseException as exc:  # a group of what the streams' tasks raised on the way out
        inner = getattr(exc, "exceptions", None)
        if inner is None or not all(isinstance(e, Exception) for e in inner):
            raise


async def serve(alias: str, store: Store, command: List[str], url: Optional[str],
                listen: Optional[Tuple[str, int]], call_timeout: float) -> None:
    """Start the upstream, then serve agents (on this process's stdin and stdout, or over
    streamable HTTP on ``listen``) until they are done."""
    shown = re.sub(r"(\w+://)[^/@\s]*@", r"\1***@", url) if url else command[0]
    stack = AsyncExitStack()
    relay = Relay()
    try:
        upstream, init, tools = await _start(stack, command, url, call_timeout, relay)
    except BaseException as exc:
        await _close_quietly(stack)
        # A command that cannot be run, or a URL: the caller reports it and exits.
        if isinstance(exc, CannotRun) and exc.__cause__ is not None:
            raise exc.__cause__ from None
        if url is not None or not isinstance(exc, Exception):
            raise
        why = brief(exc)
        print(f"ctrlrun gateway {alias}: the upstream {shown} did not start ({why}); serving "
              f"anyway: no tools are listed and no call is sent (a reserved call is recorded "
              f"failed)", file=sys.stderr, flush=True)
        gateway = Gateway(alias, store, Upstream(None, None, down=why), call_timeout, [])
        await _run(Server(f"ctrlrun-gateway-{alias}", version=_core.__version__,
                          on_list_tools=gateway.list_tools, on_call_tool=gateway.call_tool),
                   listen)
        return
    async with stack:
        assert upstream.session is not None
        announce(alias, store, shown, tools)
        gateway = Gateway(alias, store, upstream, call_timeout, tools, relay)
        with handshake_era():
            server: Server[Any] = Server(
                f"ctrlrun-gateway-{alias}", version=_core.__version__,
                instructions=init.instructions,
                on_list_tools=gateway.list_tools, on_call_tool=gateway.call_tool,
                **PassThrough(upstream.session, relay).handlers(init.capabilities),
                **relay.server_handlers(init.capabilities))
        await _run(server, listen, notification_options(init.capabilities))


async def _run(server: Server[Any], listen: Optional[Tuple[str, int]],
               notify: Optional[NotificationOptions] = None) -> None:
    """Serve agents on stdio, or over streamable HTTP on ``listen``; ``notify`` names the
    list-changed notifications announced on stdio."""
    if listen is None:
        async with stdio_server() as (r, w):
            await server.run(r, w, server.create_initialization_options(notify))
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
        if hint is not True and (entry is None or entry.effect is None) and (
                entry is None or entry.decision != "deny"):
            out.append(tool.name)
    return out


def announce(alias: str, store: Store, command: str, tools: List[types.Tool]) -> None:
    """One line on stderr (stdout is the MCP channel): what the gateway guards, and every
    write that runs unreserved."""
    policy = current_policy()
    where = policy.path if policy is not None else "no policy file"
    loose = unreserved_writes(alias, tools)
    tail = (f"; writes with no effect template, run unreserved: {', '.join(loose)}" if loose
            else "; every write has an effect template")
    print(f"ctrlrun gateway {alias}: {command} ({len(tools)} tools) behind {store.url}, policy "
          f"{where}{tail}", file=sys.stderr, flush=True)
