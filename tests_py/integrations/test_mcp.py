"""ctrlrun.integrations.mcp against the real MCP SDK: an ``MCPServer`` and an ``mcp.Client``
connected to it in memory, every case on both backends and with sync and async tools.

A refusal is the tool's result (``isError``, the gateway's words and payload) with no
traceback in the server log; the decorator above ``@server.tool()`` is refused naming the
order; the ``Context`` the SDK hands a tool is never part of its identity; ``replay`` gives
the client what the first call gave it; two identical calls at once run the body once."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Dict, Tuple

import anyio
import pytest
from mcp import Client
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from pydantic import BaseModel

import ctrlrun
from ctrlrun.errors import InvalidArgument
from ctrlrun.gateway.results import refusal_result
from ctrlrun.integrations import mcp as ctrlrun_mcp
from ctrlrun.integrations._common import protected


def served(server: MCPServer, script: Callable[[Client], Awaitable[Any]], **options: Any) -> Any:
    """``script(client)`` run against ``server`` by an in-memory ``mcp.Client``."""

    async def main() -> Any:
        async with Client(server, **options) as client:
            return await script(client)

    return anyio.run(main)


def text(result: Any) -> str:
    return result.content[0].text


def tracebacks(caplog: pytest.LogCaptureFixture) -> list:
    """What the server logged with a traceback, or at WARNING and above."""
    return [r for r in caplog.records if r.exc_info or r.levelno >= logging.WARNING]


def test_a_refusal_is_the_gateways_tool_result_with_no_traceback(store_url, mode, caplog):
    caplog.set_level(logging.DEBUG)
    store = ctrlrun.open_store(store_url)
    server = MCPServer("shop")
    runs = []

    def refund(payment_id: str, amount: int) -> dict:
        runs.append(payment_id)
        return {"refunded": payment_id, "amount": amount}

    registered = server.tool()(
        ctrlrun_mcp.protect("stripe.refund", effect="refund:{payment_id}", store=store)(
            mode.executor(refund)
        )
    )

    async def script(client: Client) -> list:
        return [
            await client.call_tool("refund", {"payment_id": "pi_1", "amount": 500}),
            await client.call_tool("refund", {"payment_id": "pi_1", "amount": 500}),
            await client.call_tool("refund", {"payment_id": "pi_1", "amount": 9}),
            await client.call_tool("refund", {"payment_id": "", "amount": 9}),
        ]

    first, again, other, invalid = served(server, script)
    assert not first.is_error and json.loads(text(first)) == {"refunded": "pi_1", "amount": 500}
    assert runs == ["pi_1"]
    assert again.is_error and text(again).startswith("already done: refund:pi_1 committed at ")
    assert text(again).endswith("; do not retry")
    # exactly what the gateway answers for the same refusal (the protected function raises it)
    with pytest.raises(ctrlrun.DuplicateEffect) as info:
        mode.call(registered.__wrapped__, "pi_1", 500)
    said = refusal_result("stripe.refund", "refund:pi_1", info.value)
    assert text(again) == text(said) and again.structured_content == said.structured_content
    assert again.structured_content["ctrlrun"]["refused"] == "committed"
    assert other.is_error and text(other).startswith("conflict: refund:pi_1 was already used")
    assert other.structured_content["ctrlrun"]["fields"] == ["amount"]
    assert invalid.is_error and text(invalid).startswith("refused: ")
    assert invalid.structured_content["ctrlrun"]["refused"] == "invalid"
    assert tracebacks(caplog) == []
    assert not any("Error executing tool" in r.getMessage() for r in caplog.records)
    store.close()


def test_protect_above_server_tool_is_refused_naming_the_order():
    for protect in (ctrlrun.protect, ctrlrun_mcp.protect):
        server = MCPServer("shop")
        with pytest.raises(InvalidArgument, match=r"below @server\.tool\(\)"):

            @protect("stripe.refund", effect="refund:{payment_id}")
            @server.tool()
            def refund(payment_id: str) -> str:
                return "ok"


def test_the_tool_helper_registers_a_protected_tool(store_url, mode):
    store = ctrlrun.open_store(store_url)
    server = MCPServer("shop")
    runs = []

    def refund(payment_id: str) -> str:
        runs.append(payment_id)
        return f"refunded {payment_id}"

    decorate = ctrlrun_mcp.tool(
        server,
        "stripe.refund",
        tool_name="refund_payment",
        title="Refund",
        effect="refund:{payment_id}",
        store=store,
    )
    registered = decorate(mode.executor(refund))
    assert protected(registered) is not None and protected(registered).action == "stripe.refund"

    async def script(client: Client) -> Tuple[Any, Any, Any]:
        listed = await client.list_tools()
        call = {"payment_id": "pi_1"}
        return (
            listed,
            await client.call_tool("refund_payment", call),
            await client.call_tool("refund_payment", call),
        )

    listed, first, again = served(server, script)
    (only,) = listed.tools
    assert only.name == "refund_payment" and only.title == "Refund"
    assert list(only.input_schema["properties"]) == ["payment_id"]
    assert text(first) == "refunded pi_1" and runs == ["pi_1"]
    assert again.is_error and again.structured_content["ctrlrun"]["refused"] == "committed"
    store.close()


def test_plain_protect_under_server_tool_still_protects(store_url, mode):
    store = ctrlrun.open_store(store_url)
    server = MCPServer("shop")
    runs = []

    def refund(payment_id: str) -> str:
        runs.append(payment_id)
        return "ok"

    server.tool()(
        ctrlrun.protect("stripe.refund", effect="refund:{payment_id}", store=store)(
            mode.executor(refund)
        )
    )

    async def script(client: Client) -> list:
        return [await client.call_tool("refund", {"payment_id": "pi_1"}) for _ in range(2)]

    first, again = served(server, script)
    assert not first.is_error and again.is_error  # the SDK's own words for a raised exception
    assert runs == ["pi_1"] and store.get_effect("refund:pi_1").state.value == "committed"
    store.close()


def test_the_context_is_not_the_calls_identity(store_url, mode):
    store = ctrlrun.open_store(store_url)
    server = MCPServer("shop")
    seen = []

    def refund(payment_id: str, amount: int, ctx: Context) -> str:
        seen.append(ctx.request_id)  # a real Context, new for every request
        return f"refunded {payment_id}"

    def notify(to: str, ctx: Context) -> str:
        seen.append(ctx.request_id)
        return f"told {to}"

    server.tool()(
        ctrlrun_mcp.protect(
            "stripe.refund", effect="refund:{payment_id}", store=store, replay=True
        )(mode.executor(refund))
    )
    server.tool()(
        ctrlrun_mcp.protect("mail.notify", effect="notify:{to}", store=store)(mode.executor(notify))
    )

    async def script(client: Client) -> list:
        out = [
            await client.call_tool("refund", {"payment_id": "pi_1", "amount": 5}) for _ in range(2)
        ]
        return out + [await client.call_tool("notify", {"to": "ann"}) for _ in range(2)]

    first, replayed, told, again = served(server, script)
    assert len(seen) == 2  # each body ran once
    assert (
        text(first) == text(replayed) == "refunded pi_1" and not replayed.is_error
    )  # replay, no conflict
    assert text(told) == "told ann"
    assert again.is_error and again.structured_content["ctrlrun"]["refused"] == "committed"
    store.close()


class Receipt(BaseModel):
    charge: str
    cents: int


@dataclass
class Slip:
    charge: str
    cents: int


def test_replay_gives_the_client_what_the_first_call_gave(store_url, mode):
    store = ctrlrun.open_store(store_url)
    server = MCPServer("shop")
    runs: Dict[str, int] = {}

    def pair(charge: str) -> Tuple[str, int]:
        runs["pair"] = runs.get("pair", 0) + 1
        return ("done", 5)

    def receipt(charge: str) -> Receipt:
        runs["receipt"] = runs.get("receipt", 0) + 1
        return Receipt(charge=charge, cents=5)

    def slip(charge: str) -> Slip:
        runs["slip"] = runs.get("slip", 0) + 1
        return Slip(charge, 5)

    def plain(charge: str) -> dict:
        runs["plain"] = runs.get("plain", 0) + 1
        return {"charge": charge, "items": [1, 2]}

    registered = {}
    for body in (pair, receipt, slip, plain):
        guard = ctrlrun_mcp.protect(
            body.__name__, effect=body.__name__ + ":{charge}", store=store, replay=True
        )
        registered[body.__name__] = server.tool()(guard(mode.executor(body)))

    async def script(client: Client) -> list:
        names = ("pair", "receipt", "slip", "plain")
        return [
            (await client.call_tool(n, {"charge": "c"}), await client.call_tool(n, {"charge": "c"}))
            for n in names
        ]

    for first, again in served(server, script):
        assert not again.is_error and again.structured_content == first.structured_content
        assert [c.text for c in again.content] == [c.text for c in first.content]
    assert runs == {"pair": 1, "receipt": 1, "slip": 1, "plain": 1}
    # called in Python, outside MCP: the tuple comes back a tuple; a model as its JSON form
    assert mode.call(registered["pair"], "c") == ("done", 5)
    assert mode.call(registered["receipt"], "c") == {"charge": "c", "cents": 5}
    store.close()


def test_not_executed_is_a_result_and_a_retry_runs(store_url, mode, caplog):
    caplog.set_level(logging.DEBUG)
    store = ctrlrun.open_store(store_url)
    server = MCPServer("shop")
    runs = []

    def send(message_id: str) -> str:
        runs.append(message_id)
        if len(runs) == 1:
            raise ctrlrun.NotExecuted("the mail server refused the connection")
        return "sent"

    server.tool()(
        ctrlrun_mcp.protect("mail.send", effect="email:{message_id}", store=store)(
            mode.executor(send)
        )
    )

    async def script(client: Client) -> list:
        return [await client.call_tool("send", {"message_id": "m1"}) for _ in range(2)]

    failed, sent = served(server, script)
    assert failed.is_error and text(failed).startswith(
        "failed: the mail server refused the connection"
    )
    assert failed.structured_content == {
        "ctrlrun": {"action": "mail.send", "effect_key": "email:m1", "outcome": "failed"}
    }
    assert text(sent) == "sent" and store.get_effect("email:m1").attempt == 2
    assert tracebacks(caplog) == []
    store.close()


def test_two_identical_calls_at_once_run_the_body_once(store_url, mode):
    store = ctrlrun.open_store(store_url)
    server = MCPServer("shop")
    state = {"running": 0, "ran": 0, "twin_answered": False, "cancelled": False}

    def started() -> None:
        state["running"] += 1

    if mode.is_async:

        async def refund(payment_id: str) -> str:
            started()
            try:
                while not state["twin_answered"]:
                    await anyio.sleep(0.005)
            except BaseException:
                state["cancelled"] = True
                raise
            state["ran"] += 1
            return "refunded"

    else:

        def refund(payment_id: str) -> str:
            started()
            deadline = time.monotonic() + 10
            while not state["twin_answered"] and time.monotonic() < deadline:
                time.sleep(0.005)
            state["ran"] += 1
            return "refunded"

    server.tool()(
        ctrlrun_mcp.protect("stripe.refund", effect="refund:{payment_id}", store=store)(refund)
    )
    results: Dict[str, Any] = {}

    async def script(client: Client) -> None:
        async def real() -> None:
            results["real"] = await client.call_tool("refund", {"payment_id": "pi_1"})

        async def twin() -> None:
            while not state["running"]:
                await anyio.sleep(0.005)
            results["twin"] = await client.call_tool("refund", {"payment_id": "pi_1"})
            state["twin_answered"] = True

        async with anyio.create_task_group() as group:
            group.start_soon(real)
            group.start_soon(twin)

    served(server, script)
    assert text(results["real"]) == "refunded" and not results["real"].is_error
    twin_said = results["twin"]
    assert twin_said.is_error and text(twin_said).startswith(
        "in progress: refund:pi_1 is being done"
    )
    assert twin_said.structured_content["ctrlrun"]["refused"] == "in_progress"
    assert state == {"running": 1, "ran": 1, "twin_answered": True, "cancelled": False}
    assert store.get_effect("refund:pi_1").state.value == "committed"
    store.close()
