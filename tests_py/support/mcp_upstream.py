"""A small upstream MCP server on stdio for the gateway tests (the MCP SDK's low-level
``Server``). Every call that "does" something appends a line to the file ``UPSTREAM_LOG``
names, so a test counts real executions."""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from typing import Any

import anyio
from mcp import types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPDeprecationWarning

LOG = os.environ["UPSTREAM_LOG"]
# it serves the handshake-era (2025-11-25) logging and subscriptions on purpose
warnings.simplefilter("ignore", MCPDeprecationWarning)

OBJECT = {"type": "object"}
READ_ONLY = types.ToolAnnotations(read_only_hint=True)
TOOLS = [
    types.Tool(
        name="refund",
        description="Refund a payment.",
        input_schema={
            "type": "object",
            "properties": {"payment_id": {"type": "string"}, "amount": {"type": "integer"}},
        },
    ),
    types.Tool(name="lookup", description="Read a payment.", input_schema=OBJECT),
    types.Tool(name="flaky", description="Always a tool error.", input_schema=OBJECT),
    types.Tool(name="slow", description="Takes `seconds`.", input_schema=OBJECT),
    types.Tool(name="die", description="Exits mid-call.", input_schema=OBJECT),
    # the relay (tests_py/gateway/test_gateway_relay.py): requests to the agent, notifications
    types.Tool(
        name="ask",
        description="Asks the agent's model (sampling).",
        input_schema=OBJECT,
        annotations=READ_ONLY,
    ),
    types.Tool(
        name="confirm",
        description="Asks the agent's user (elicitation).",
        input_schema=OBJECT,
        annotations=READ_ONLY,
    ),
    types.Tool(
        name="roots",
        description="Lists the agent's roots.",
        input_schema=OBJECT,
        annotations=READ_ONLY,
    ),
    types.Tool(
        name="chatty",
        description="Logs, then says its lists changed.",
        input_schema=OBJECT,
        annotations=READ_ONLY,
    ),
]
RESOURCE = "memo://notes"


def did(tool: str, arguments: dict) -> None:
    with open(LOG, "a", encoding="utf-8") as f:
        f.write(json.dumps([tool, arguments], sort_keys=True) + "\n")


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


def text(t: str, is_error: bool = False, structured: Any = None) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=t)],
        is_error=is_error,
        structured_content=structured,
    )


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
    if name in ("ask", "confirm", "roots"):
        await anyio.sleep(float(args.get("delay", 0)))  # a test's other agent acts meanwhile
        return await ask_the_agent(ctx, name, args)
    if name == "chatty":
        session = ctx.session
        await session.send_notification(
            types.LoggingMessageNotification(
                params=types.LoggingMessageNotificationParams(
                    level="warning", logger="upstream", data={"note": args.get("note")}
                )
            ),
            related_request_id=ctx.request_id,
        )
        await session.send_notification(types.ToolListChangedNotification())
        await session.send_notification(
            types.ResourceUpdatedNotification(
                params=types.ResourceUpdatedNotificationParams(uri=RESOURCE)
            )
        )
        return text("chatted")
    return text(f"unknown tool {name}", is_error=True)


async def ask_the_agent(ctx: Any, name: str, args: dict) -> types.CallToolResult:
    """One request to the agent, on this call's channel; its answer as the tool's text."""
    from mcp.shared.exceptions import MCPError
    from mcp.shared.message import ServerMessageMetadata

    request: Any
    if name == "ask":
        request, kind = (
            types.CreateMessageRequest(
                params=types.CreateMessageRequestParams(
                    messages=[
                        types.SamplingMessage(
                            role="user",
                            content=types.TextContent(type="text", text=str(args.get("question"))),
                        )
                    ],
                    max_tokens=50,
                )
            ),
            types.CreateMessageResult,
        )
    elif name == "confirm":
        request, kind = (
            types.ElicitRequest(
                params=types.ElicitRequestFormParams(
                    message=str(args.get("question")),
                    requested_schema={"type": "object", "properties": {"ok": {"type": "boolean"}}},
                )
            ),
            types.ElicitResult,
        )
    else:
        request, kind = types.ListRootsRequest(), types.ListRootsResult
    try:
        answer = await ctx.session.send_request(
            request, kind, metadata=ServerMessageMetadata(related_request_id=ctx.request_id)
        )
    except MCPError as exc:
        return text(f"the agent refused: {exc.error.message}", is_error=True)
    return text(
        json.dumps(answer.model_dump(mode="json", by_alias=True, exclude_none=True), sort_keys=True)
    )


LEVEL: list = []
SUBSCRIBED: list = []
ROOTS_CHANGED: list = []


async def set_level(ctx: Any, params: types.SetLevelRequestParams) -> types.EmptyResult:
    LEVEL.append(params.level)
    return types.EmptyResult()


async def subscribe(ctx: Any, params: types.SubscribeRequestParams) -> types.EmptyResult:
    SUBSCRIBED.append(str(params.uri))
    return types.EmptyResult()


async def unsubscribe(ctx: Any, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
    SUBSCRIBED.remove(str(params.uri))
    return types.EmptyResult()


async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
    return types.ListResourcesResult(resources=[types.Resource(uri=RESOURCE, name="notes")])


async def read_resource(
    ctx: Any, params: types.ReadResourceRequestParams
) -> types.ReadResourceResult:
    state = (
        f"level={','.join(LEVEL)} subscribed={','.join(SUBSCRIBED)} "
        f"roots_changed={len(ROOTS_CHANGED)}"
    )
    return types.ReadResourceResult(
        contents=[types.TextResourceContents(uri=RESOURCE, text=state, mime_type="text/plain")]
    )


async def complete(ctx: Any, params: types.CompleteRequestParams) -> types.CompleteResult:
    prefix = params.argument.value
    return types.CompleteResult(
        completion=types.Completion(
            values=[v for v in ("pi_1", "pi_2", "re_9") if v.startswith(prefix)]
        )
    )


async def roots_changed(ctx: Any, params: Any) -> None:
    ROOTS_CHANGED.append(1)


async def ping(ctx: Any, params: Any) -> types.EmptyResult:
    if os.environ.get("UPSTREAM_PINGS"):  # a test counts the pings it gets
        with open(os.environ["UPSTREAM_PINGS"], "a", encoding="utf-8") as f:
            f.write("ping\n")
    return types.EmptyResult()


async def main() -> None:
    server: Server[Any] = Server(
        "test-upstream",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_set_logging_level=set_level,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
        on_subscribe_resource=subscribe,
        on_unsubscribe_resource=unsubscribe,
        on_completion=complete,
        on_ping=ping,
        on_roots_list_changed=roots_changed,
    )
    if len(sys.argv) > 2 and sys.argv[1] == "--http":  # streamable HTTP on 127.0.0.1:PORT
        import uvicorn

        app = server.streamable_http_app(host="127.0.0.1")
        config = uvicorn.Config(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
        await uvicorn.Server(config).serve()
        return
    async with stdio_server() as (r, w):
        await server.run(
            r,
            w,
            server.create_initialization_options(
                NotificationOptions(tools_changed=True, resources_changed=True)
            ),
        )


if __name__ == "__main__":
    anyio.run(main)
