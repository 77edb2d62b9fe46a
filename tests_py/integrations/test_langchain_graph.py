"""Protected tools in a LangGraph agent (a fake chat model, the prebuilt ``ToolNode``): the
model is given the refusal as the call's ``ToolMessage``; what LangGraph injects (the graph's
state, the ``ToolRuntime``, the call's id) is not the call's identity; two identical calls in
one model turn run once, the twin told it is in progress, the real call never cancelled.
Every case on SQLite and PostgreSQL, with sync and async tools."""

from __future__ import annotations

import asyncio
import threading
from typing import Annotated, Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId
from langgraph.prebuilt import InjectedState, ToolRuntime

import ctrlrun
from tests_py.integrations.test_langchain_support import Agent, asks, call, make_tool


@pytest.mark.parametrize("order", ("above", "below"))  # core_above: test_langchain_tools.py
def test_the_model_is_given_the_refusal(store_url, mode, order):
    store = ctrlrun.open_store(store_url)
    runs: list = []

    def refund(payment_id: str, amount: int) -> str:
        """Refund a payment."""
        runs.append(payment_id)
        return f"refunded {payment_id}"

    t = make_tool(mode, order, "billing.refund", refund, effect="refund:{payment_id}", store=store)
    args = {"payment_id": "pi_1", "amount": 5}
    agent = Agent(
        [t], [asks(call("refund", args, "a")), asks(call("refund", args, "b")), AIMessage("done")]
    )
    out = agent.run(mode)
    assert out["messages"][-1].content == "done" and len(agent.seen) == 3
    first, second = agent.told()
    assert (first.tool_call_id, first.content, first.status) == ("a", "refunded pi_1", "success")
    assert second.tool_call_id == "b"
    assert second.content.startswith("already done: refund:pi_1 committed at ")
    assert second.status == ("success" if order == "below" else "error")
    assert runs == ["pi_1"]
    store.close()


@pytest.mark.parametrize("replay", (False, True))
def test_what_langgraph_injects_is_not_the_calls_identity(store_url, mode, replay):
    store = ctrlrun.open_store(store_url)
    runs: list = []

    def refund(
        payment_id: str,
        amount: int,
        state: Annotated[dict, InjectedState],
        runtime: ToolRuntime,
        call_id: Annotated[str, InjectedToolCallId],
    ) -> str:
        """Refund a payment."""
        assert runtime.tool_call_id == call_id
        runs.append((call_id, len(state["messages"])))
        return f"refunded {payment_id}"

    t = make_tool(
        mode,
        "above",
        "billing.refund",
        refund,
        effect="refund:{payment_id}",
        store=store,
        replay=replay,
    )
    args = {"payment_id": "pi_1", "amount": 5}
    agent = Agent(
        [t], [asks(call("refund", args, "a")), asks(call("refund", args, "b")), AIMessage("done")]
    )
    agent.run(mode)
    first, second = agent.told()  # the state grew, the runtime and the id are new
    assert (first.tool_call_id, second.tool_call_id) == ("a", "b")
    if replay:
        assert (second.content, second.status) == ("refunded pi_1", "success")
    else:
        assert second.status == "error" and second.artifact["refused"] == "committed"
    assert runs == [("a", 2)]
    store.close()


class _TwinRefused(BaseCallbackHandler):
    """Sets ``event`` once a tool call ends in an error ``ToolMessage`` (the twin's)."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def on_tool_end(self, output: Any, **kwargs: Any) -> None:
        if isinstance(output, ToolMessage) and output.status == "error":
            self.event.set()


def test_identical_calls_in_one_turn_run_once(store_url, mode):
    store = ctrlrun.open_store(store_url)
    twin = _TwinRefused()
    runs: list = []

    async def refund(payment_id: str, amount: int) -> str:
        """Refund a payment."""
        runs.append(payment_id)
        for _ in range(1000):  # the real call is still running when its twin is refused
            if twin.event.is_set():
                break
            if mode.is_async:
                await asyncio.sleep(0.005)
            else:
                twin.event.wait(5)
        return f"refunded {payment_id}"

    t = make_tool(
        mode, "above", "billing.refund", refund, effect="refund:{payment_id}", store=store
    )
    args = {"payment_id": "pi_1", "amount": 5}
    agent = Agent(
        [t], [asks(call("refund", args, "a"), call("refund", args, "b")), AIMessage("ok")]
    )
    agent.run(mode, callbacks=[twin])
    assert twin.event.is_set()
    told = {m.status: m for m in agent.told()}
    assert told["success"].content == "refunded pi_1"  # the real call finished, not cancelled
    refused = told["error"]
    assert refused.content.startswith("in progress: refund:pi_1 is being done by another call")
    assert refused.artifact["refused"] == "in_progress"
    assert runs == ["pi_1"]
    assert store.get_effect("refund:pi_1").state.value == "committed"
    store.close()
