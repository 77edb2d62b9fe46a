"""Approvals in an MCP server: a pending request is the tool's result naming it (what an
approver is shown holds no ``Context``), a grant made in the store as ``ctrlrun approve`` makes
it is honoured by the client's next call (run once), a denial is answered; with
``approval_url`` the person is sent to the approval page by a URL-mode elicitation, on
handshake-era connections (``elicitation/create`` mid-call) and on 2026-07-28 ones (inside an
``InputRequiredResult``), and the call is tried again when the client answers."""

from __future__ import annotations

import logging
from typing import Any, List

import pytest
from mcp import Client, types
from mcp.server import MCPServer
from mcp.server.mcpserver import Context

import ctrlrun
from ctrlrun.errors import InvalidArgument
from ctrlrun.integrations import mcp as ctrlrun_mcp
from tests_py.integrations.test_mcp import served, text, tracebacks

URL = "https://approve.example/requests/{request_id}"


def waiting(result: Any) -> str:
    """The request id a waiting-for-approval result names."""
    assert result.is_error, result
    said = result.structured_content["ctrlrun"]
    assert said["refused"] == "approval_required"
    rid = said["request_id"]
    assert text(result) == (
        f"waiting for approval {rid}: stripe.refund runs once a person grants it (`ctrlrun "
        f"approve {rid} --by NAME`); then call again with the same arguments"
    )
    return str(rid)


def refund_server(store: Any, mode: Any, runs: List[str], **options: Any) -> MCPServer:
    server = MCPServer("shop")

    def refund(payment_id: str, amount: int, ctx: Context) -> str:
        assert ctx.request_id  # the SDK's Context, handed to the body
        runs.append(payment_id)
        return f"refunded {payment_id}"

    guard = ctrlrun_mcp.protect(
        "stripe.refund", effect="refund:{payment_id}", store=store, decision="approve", **options
    )
    server.tool()(guard(mode.executor(refund)))
    return server


def test_a_pending_approval_is_named_and_a_grant_in_the_store_is_honoured(store_url, mode, caplog):
    caplog.set_level(logging.DEBUG)
    store = ctrlrun.open_store(store_url)
    runs: List[str] = []
    server = refund_server(store, mode, runs)
    call = {"payment_id": "pi_1", "amount": 500}

    async def script(client: Client) -> list:
        first = await client.call_tool("refund", call)
        again = await client.call_tool("refund", call)  # still pending: the same request
        store.grant_approval(waiting(first), by="alice", note="checked the order")
        return [
            first,
            again,
            await client.call_tool("refund", call),
            await client.call_tool("refund", call),
        ]

    first, again, granted, repeat = served(server, script)
    rid = waiting(first)
    assert waiting(again) == rid and runs == ["pi_1"]
    # the approver is shown the arguments, not the Context
    assert first.structured_content["ctrlrun"]["arguments"] == call
    assert store.get_approval(rid).arguments == call
    assert text(granted) == "refunded pi_1" and not granted.is_error
    assert store.get_approval(rid).state.value == "used"
    assert repeat.is_error and repeat.structured_content["ctrlrun"]["refused"] == "committed"
    assert tracebacks(caplog) == []
    store.close()


def test_a_denial_is_the_tool_result(store_url, mode):
    store = ctrlrun.open_store(store_url)
    runs: List[str] = []
    server = refund_server(store, mode, runs)
    call = {"payment_id": "pi_2", "amount": 5}

    async def script(client: Client) -> Any:
        store.deny_approval(waiting(await client.call_tool("refund", call)), by="bob", note="fraud")
        return await client.call_tool("refund", call)

    denied = served(server, script)
    assert denied.is_error and text(denied).startswith("denied by bob: ")
    assert text(denied).endswith("Do not retry")
    assert denied.structured_content["ctrlrun"]["denied_by"] == "bob" and runs == []
    store.close()


@pytest.fixture(params=["legacy", "auto"])
def connection(request) -> str:
    """``legacy``: a 2025-11-25 handshake (elicitation/create mid-call); ``auto``: 2026-07-28
    in memory (the elicitation inside an InputRequiredResult)."""
    return str(request.param)


def test_url_elicitation_sends_the_person_to_the_approval_page(store_url, mode, connection, caplog):
    caplog.set_level(logging.DEBUG)
    store = ctrlrun.open_store(store_url)
    server = MCPServer("shop")
    runs: List[str] = []

    def notify(to: str) -> str:  # takes no Context: ctrlrun adds the one it elicits through
        runs.append(to)
        return f"told {to}"

    guard = ctrlrun_mcp.protect(
        "mail.notify", effect="notify:{to}", store=store, decision="approve", approval_url=URL
    )
    server.tool()(guard(mode.executor(notify)))
    asked: List[Any] = []

    async def person_approves_on_the_page(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params)
        rid = params.url.rsplit("/", 1)[1]
        store.grant_approval(rid, by="carol")  # what the approval page records
        return types.ElicitResult(action="accept")

    async def script(client: Client) -> list:
        listed = await client.list_tools()
        out = [await client.call_tool("notify", {"to": "ann"}) for _ in range(2)]
        return [listed, *out]

    listed, first, again = served(
        server, script, elicitation_callback=person_approves_on_the_page, mode=connection
    )
    assert list(listed.tools[0].input_schema["properties"]) == ["to"]
    assert text(first) == "told ann" and not first.is_error and runs == ["ann"]
    (params,) = asked
    rid = params.url.rsplit("/", 1)[1]
    assert params.mode == "url" and params.url == URL.format(request_id=rid)
    assert rid in params.message and "mail.notify" in params.message
    if connection == "legacy":
        assert params.elicitation_id == rid
    record = store.get_approval(rid)
    assert record.decided_by == "carol" and record.state.value == "used"
    assert again.is_error and again.structured_content["ctrlrun"]["refused"] == "committed"
    assert tracebacks(caplog) == []
    store.close()


def test_a_declined_elicitation_leaves_the_request_pending(store_url, mode, connection):
    store = ctrlrun.open_store(store_url)
    runs: List[str] = []
    server = refund_server(store, mode, runs, approval_url=lambda rid: f"https://a.example/{rid}")

    async def declines(context: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="decline")

    call = {"payment_id": "pi_3", "amount": 7}

    async def script(client: Client) -> Any:
        return await client.call_tool("refund", call)

    declined = served(server, script, elicitation_callback=declines, mode=connection)
    rid = waiting(declined)
    said = declined.structured_content["ctrlrun"]
    assert said["approval_url"] == f"https://a.example/{rid}" and said["elicitation"] == "decline"
    assert store.get_approval(rid).state.value == "pending" and runs == []
    # a client that cannot open URLs is told the same, with the page in the payload
    unasked = served(server, script, mode=connection)
    assert waiting(unasked) == rid and "elicitation" not in unasked.structured_content["ctrlrun"]
    assert unasked.structured_content["ctrlrun"]["approval_url"] == f"https://a.example/{rid}"
    store.close()


def test_an_approval_url_is_checked_at_decoration():
    with pytest.raises(InvalidArgument, match="may name only"):
        ctrlrun_mcp.protect("r", effect="r:{x}", decision="approve", approval_url="https://a/{who}")
    with pytest.raises(InvalidArgument, match="URL template"):
        ctrlrun_mcp.protect("r", effect="r:{x}", decision="approve", approval_url="")
