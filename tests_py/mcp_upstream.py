"""A small upstream MCP server on stdio for the gateway tests (the MCP SDK's low-level
``Server``). Every call that "does" something appends a line to the file ``UPSTREAM_LOG``
names, so a test counts real executions."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

LOG = os.environ["UPSTREAM_LOG"]

OBJECT = {"type": "object"}
TOOLS = [
    types.Tool(name="refund", description="Refund a payment.", input_schema={
        "type": "object", "properties": {"payment_id": {"type": "string"},
                                         "amount": {"type": "integer"}}}),
    types.Tool(name="lookup", description="Read a payment.", input_schema=OBJECT),
    types.Tool(name="flaky", description="Always a tool error.", input_schema=OBJECT),
    types.Tool(name="slow", description="Takes `seconds`.", input_schema=OBJECT),
    types.Tool(name="die", description="Exits mid-call.", input_schema=OBJECT),
]


def did(tool: str, arguments: dict) -> None:
    with open(LOG, "a", encoding="utf-8") as f:
        f.write(json.dumps([tool, arguments], sort_keys=True) + "\n")


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


def text(t: str, is_error: bool = False, structured: Any = None) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=t)],
                                is_error=is_error, structured_content=structured)


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    args = dict(params.arguments or {})
    name = params.name
    if name == "lookup":
        return text(f"payment {args.get('payment_id')} is settled")
    did(name, args)
    if name == "refund":
        return text(f"refunded {args.get('amount')}", structured={"refunded": args.get("amount")})
    if name == "flaky":
        return text("card declined", is_error=True)
    if name == "slow":  # progress for a caller that asked for it, then the wait
        await ctx.session.report_progress(0.5, 1.0, "halfway")
        await anyio.sleep(float(args.get("seconds", 5)))
        return text("slow done")
    if name == "die":
        time.sleep(0.05)
        os._exit(3)
    return text(f"unknown tool {name}", is_error=True)


async def main() -> None:
    server: Server[Any] = Server("test-upstream", on_list_tools=list_tools,
                                 on_call_tool=call_tool)
    if len(sys.argv) > 2 and sys.argv[1] == "--http":  # streamable HTTP on 127.0.0.1:PORT
        import uvicorn

        app = server.streamable_http_app(host="127.0.0.1")
        config = uvicorn.Config(app, host="127.0.0.1", port=int(sys.argv[2]),
                                log_level="warning")
        await uvicorn.Server(config).serve()
        return
    async with stdio_server() as (r, w):
        await server.run(r, w, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
