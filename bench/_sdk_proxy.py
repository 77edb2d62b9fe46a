"""The smallest pass-through proxy the MCP Python SDK allows, for ``bench/gateway.py``: an MCP
server on stdio (the SDK's low-level ``Server`` and ``stdio_server``) whose tools are one
upstream's, each ``tools/call`` handed on with a ``ClientSession`` over ``stdio_client``. No
policy, no store, no relay of anything else. It is what any gateway built on the SDK pays per
call for its two protocol hops, so the gateway's own cost is the gateway's time less this.

    python bench/_sdk_proxy.py UPSTREAM_COMMAND [ARGS...]
"""

from __future__ import annotations

import os
import sys
from typing import Any

import anyio
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server


async def main(command: list) -> None:
    params = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
    async with stdio_client(params) as (r, w), ClientSession(r, w) as upstream:
        await upstream.initialize()
        tools = (await upstream.list_tools()).tools

        async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            return types.ListToolsResult(tools=tools)

        async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            return await upstream.call_tool(params.name, params.arguments)

        server = Server("sdk-proxy", on_list_tools=list_tools, on_call_tool=call_tool)
        async with stdio_server() as (sr, sw):
            await server.run(sr, sw, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main, sys.argv[1:])
