"""What the gateway relays besides tool calls, end to end through the real gateway process and
the real upstream (tests_py/support/mcp_upstream.py): the upstream's sampling, elicitation and roots
requests reach the agent and its answers go back; the upstream's log messages and changed-list
and updated-resource notifications reach the agent; the agent's logging level, subscriptions
and completion requests reach the upstream. Both backends."""

from __future__ import annotations

import json
from typing import Any, List

import anyio
import pytest
from mcp import types

from tests_py.support.gateway_rig import Rig, listening_gateway

POLICY = """\
schema: ctrlrun.policy/v2
actions:
  mcp.acme.ask:
    effect: "ask:{id}"
"""


@pytest.fixture
def rig(tmp_path, store_url):
    return Rig(tmp_path, store_url, POLICY)


async def _read_until(session: Any, tail: str) -> str:
    """The test upstream's state (its resource), read until it ends with ``tail`` (what a
    notification changes lands a little after it is sent), for up to 10 s."""
    with anyio.fail_after(10):
        while True:
            text = (await session.read_resource("memo://notes")).contents[0].text
            if text.endswith(tail):
                return text
            await anyio.sleep(0.05)


def answer(result: types.CallToolResult) -> Any:
    assert not result.is_error, result
    return json.loads(result.content[0].text)


def test_sampling_from_a_reserved_call_reaches_the_agent_and_the_call_commits_once(rig, store):
    asked: List[types.CreateMessageRequestParams] = []

    async def sampling(context, params):
        asked.append(params)
        return types.CreateMessageResult(
            role="assistant", model="test-model", content=types.TextContent(type="text", text="yes")
        )

    async def body(s):
        first = await s.call_tool("ask", {"id": "q1", "question": "refund pi_1?"})
        again = await s.call_tool("ask", {"id": "q1", "question": "refund pi_1?"})
        return first, again

    first, again = rig.session(body, sampling_callback=sampling)
    got = answer(first)
    assert got["content"]["text"] == "yes" and got["model"] == "test-model"
    assert [m.content.text for m in asked[0].messages] == ["refund pi_1?"]
    assert len(asked) == 1  # the duplicate was refused before it reached the upstream
    assert again.is_error and again.structured_content["ctrlrun"]["refused"] == "committed"
    assert store.get_effect("ask:q1").state.value == "committed"


def test_elicitation_and_roots_reach_the_agent(rig, store):
    async def elicitation(context, params):
        assert params.message == "go ahead?"
        return types.ElicitResult(action="accept", content={"ok": True})

    async def roots(context):
        return types.ListRootsResult(roots=[types.Root(uri="file:///srv/repo", name="repo")])

    async def body(s):
        return (
            await s.call_tool("confirm", {"question": "go ahead?"}),
            await s.call_tool("roots", {}),
        )

    confirmed, listed = rig.session(
        body, elicitation_callback=elicitation, list_roots_callback=roots
    )
    assert answer(confirmed) == {"action": "accept", "content": {"ok": True}}
    assert answer(listed) == {"roots": [{"name": "repo", "uri": "file:///srv/repo"}]}
    assert store.list_effects() == []  # neither tool is reserved


def test_a_request_the_agent_cannot_answer_is_an_error_for_the_upstream(rig):
    # this agent declares no sampling and no roots: the gateway says so to the upstream,
    # which turns it into its tool error here
    async def body(s):
        return (
            await s.call_tool("ask", {"id": "q2", "question": "?"}),
            await s.call_tool("roots", {}),
        )

    sampled, rooted = rig.session(body)
    assert sampled.is_error and sampled.content[0].text == (
        "the agent refused: ctrlrun gateway: the agent does not support sampling"
    )
    assert rooted.is_error and rooted.content[0].text == (
        "the agent refused: ctrlrun gateway: the agent does not support roots"
    )


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
def test_the_upstreams_notifications_reach_the_agent(rig):
    logged: List[types.LoggingMessageNotificationParams] = []
    seen: List[Any] = []

    async def logging_callback(params):
        logged.append(params)

    async def message_handler(message):
        if isinstance(
            message, (types.ToolListChangedNotification, types.ResourceUpdatedNotification)
        ):
            seen.append(message)

    async def body(s):
        caps = s.server_capabilities
        await s.subscribe_resource("memo://notes")  # an update goes to subscribers only
        result = await s.call_tool("chatty", {"note": "careful"})
        with anyio.fail_after(10):  # the standalone notifications may trail the answer
            while len(seen) < 2:
                await anyio.sleep(0.02)
        return caps, result

    caps, result = rig.session(
        body, logging_callback=logging_callback, message_handler=message_handler
    )
    assert result.content[0].text == "chatted"
    assert [(p.level, p.logger, p.data) for p in logged] == [
        ("warning", "upstream", {"note": "careful"})
    ]
    assert isinstance(seen[0], types.ToolListChangedNotification)
    assert str(seen[1].params.uri) == "memo://notes"
    # the gateway announces what the upstream does
    assert caps.tools.list_changed is True and caps.resources.list_changed is True
    assert caps.resources.subscribe is True and caps.logging is not None
    assert caps.completions is not None


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
def test_the_agents_level_subscriptions_and_completions_reach_the_upstream(rig):
    async def body(s):
        await s.set_logging_level("error")
        await s.subscribe_resource("memo://notes")
        after_subscribe = await s.read_resource("memo://notes")
        await s.unsubscribe_resource("memo://notes")
        after_unsubscribe = await s.read_resource("memo://notes")
        completed = await s.complete(
            types.PromptReference(type="ref/prompt", name="refund"),
            {"name": "payment_id", "value": "pi"},
        )
        await s.send_roots_list_changed()  # a notification: the upstream counts it
        return (
            after_subscribe,
            after_unsubscribe,
            completed,
            await _read_until(s, "roots_changed=1"),
        )

    after_subscribe, after_unsubscribe, completed, roots = rig.session(body)
    assert after_subscribe.contents[0].text == (
        "level=error subscribed=memo://notes roots_changed=0"
    )
    assert after_unsubscribe.contents[0].text == "level=error subscribed= roots_changed=0"
    assert roots == "level=error subscribed= roots_changed=1"
    assert completed.completion.values == ["pi_1", "pi_2"]


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
def test_over_http_the_upstreams_request_goes_to_the_agent_whose_call_it_is(tmp_path, store_url):
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    gateway, port = listening_gateway(tmp_path, store_url, POLICY)

    def model(name: str) -> Any:
        async def sampling(context, params):
            return types.CreateMessageResult(
                role="assistant", model=name, content=types.TextContent(type="text", text=name)
            )

        return sampling

    try:

        async def main() -> list:
            url = f"http://127.0.0.1:{port}/mcp"
            async with (
                streamable_http_client(url) as (ra, wa),
                streamable_http_client(url) as (rb, wb),
            ):
                async with (
                    ClientSession(ra, wa, sampling_callback=model("agent-a")) as a,
                    ClientSession(rb, wb, sampling_callback=model("agent-b")) as b,
                ):
                    await a.initialize()
                    await b.initialize()  # both agents are connected
                    out: list = []
                    # A's call is in flight when B lists the tools (B is then the agent seen
                    # last); the upstream's question, asked after that, still goes to A
                    async with anyio.create_task_group() as tg:

                        async def ask_a() -> None:
                            out.append(
                                await a.call_tool(
                                    "ask", {"id": "h1", "question": "?", "delay": 1.5}
                                )
                            )

                        tg.start_soon(ask_a)
                        await anyio.sleep(0.5)
                        await b.list_tools()
                    out.append(await b.call_tool("ask", {"id": "h2", "question": "?"}))
                    # one subscription upstream while any agent holds one
                    await a.subscribe_resource("memo://notes")
                    await b.subscribe_resource("memo://notes")
                    await b.unsubscribe_resource("memo://notes")
                    out.append((await a.read_resource("memo://notes")).contents[0].text)
                    await a.unsubscribe_resource("memo://notes")
                    out.append((await a.read_resource("memo://notes")).contents[0].text)
                    # an agent that subscribes and leaves: its subscription ends with it
                    async with streamable_http_client(url) as (rc, wc):
                        async with ClientSession(rc, wc) as c:
                            await c.initialize()
                            await c.subscribe_resource("memo://notes")
                            out.append((await a.read_resource("memo://notes")).contents[0].text)
                    out.append(await _read_until(a, "subscribed= roots_changed=0"))
                    # while a call of A's is in flight, B's call makes the upstream ask: the
                    # gateway cannot tell whose request it is, and says so instead of guessing
                    async with anyio.create_task_group() as tg:

                        async def slow() -> None:
                            out.append(await a.call_tool("slow", {"seconds": 3}))

                        tg.start_soon(slow)
                        await anyio.sleep(1.0)
                        out.append(await b.call_tool("ask", {"id": "h3", "question": "?"}))
                    return out

        from_a, from_b, held, released, left_held, left_gone, unplaced, slow = anyio.run(main)
        assert answer(from_a)["model"] == "agent-a"
        assert answer(from_b)["model"] == "agent-b"
        assert held == "level= subscribed=memo://notes roots_changed=0"  # A still holds it
        assert released == "level= subscribed= roots_changed=0"
        assert left_held == "level= subscribed=memo://notes roots_changed=0"
        assert left_gone == "level= subscribed= roots_changed=0"
        assert unplaced.is_error and unplaced.content[0].text == (
            "the agent refused: ctrlrun gateway: requests of several agents are in flight, "
            "so it cannot tell which agent this request is for"
        )
        assert slow.content[0].text == "slow done"
    finally:
        gateway.terminate()
        gateway.wait(30)
