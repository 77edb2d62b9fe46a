"""ctrlrun in the OpenAI Agents SDK, driven by the SDK's own scripted model (no API key), on
SQLite and PostgreSQL, with sync and async tools: either decorator order protects the call and
keeps the tool as the SDK built it; a refusal is the tool's output in the gateway's words (never
the SDK's "please try again", nothing logged as an error); the run context is not part of the
call (a retry in a new run is a duplicate, or replays); parallel identical calls run once."""

from __future__ import annotations

import logging
from typing import Any, Callable, Tuple

import pytest
from agents import FunctionTool, RunContextWrapper, function_tool
from agents.tool_context import ToolContext

import ctrlrun
from ctrlrun.errors import InvalidArgument
from ctrlrun.integrations import openai_agents as oa
from ctrlrun.integrations._common import protected
from tests_py.integrations.test_openai_agents_support import (
    ORDERS,
    SDK_ERROR,
    TwinSeen,
    agent,
    outputs,
    run,
    tool,
    wait_for,
)

DONE = "already done: refund:pi_1 committed at "


def test_either_order_protects_the_call_and_keeps_the_tool(store_url, mode, caplog):
    store = ctrlrun.open_store(store_url)
    runs = []

    def refund(payment_id: str, amount: int) -> str:
        """Refund a payment.

        Args:
            payment_id: the payment to refund.
            amount: cents.
        """
        runs.append(payment_id)
        return f"refunded {payment_id}"

    plain = function_tool(mode.executor(refund))
    for order in ORDERS:
        made = tool(mode, order, "stripe.refund", refund, effect="refund:{payment_id}", store=store)
        assert isinstance(made, FunctionTool)
        assert (made.name, made.description, made.strict_json_schema) == (
            plain.name,
            plain.description,
            True,
        )
        assert made.params_json_schema == plain.params_json_schema
        assert protected(made.__wrapped__) is not None

        args = {"payment_id": order, "amount": 500}
        target = agent(made, [("refund", args, "call_1")], [("refund", args, "call_2")], "ok")
        caplog.clear()
        with caplog.at_level(logging.DEBUG):
            first, again = outputs(run(target, "refund"))
        assert first == f"refunded {order}" and runs[-1] == order
        row = store.get_effect(f"refund:{order}")
        assert row is not None and row.state.value == "committed"
        if order == "plain_under":  # protected, but the SDK words the refusal (use oa.protect)
            assert again == SDK_ERROR
            continue
        assert again.startswith(f"already done: refund:{order} committed at ")
        assert again.endswith("; do not retry")
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert runs == list(ORDERS)  # each body once
    store.close()


def test_refusals_of_every_kind_are_the_tools_output(store_url, mode):
    store = ctrlrun.open_store(store_url)

    def refund(payment_id: str, amount: int) -> str:
        """Refund a payment."""
        if payment_id == "pi_down":
            raise ConnectionError("the provider hung up")
        return f"refunded {payment_id}"

    refund_tool = tool(
        mode, "above", "stripe.refund", refund, effect="refund:{payment_id}", store=store
    )
    target = agent(
        refund_tool,
        [("refund", {"payment_id": "pi_1", "amount": 5}, "c1")],
        [("refund", {"payment_id": "pi_1", "amount": 6}, "c2")],  # other arguments
        [("refund", {"payment_id": "pi_down", "amount": 5}, "c3")],  # the tool's own error
        [("refund", {"payment_id": "pi_down", "amount": 5}, "c4")],  # a retry of it
        [("refund", {"payment_id": "", "amount": 5}, "c5")],  # no key can be made
        "ok",
    )
    ran, conflict, own_error, unknown, invalid = outputs(run(target, "go"))
    assert ran == "refunded pi_1"
    assert conflict.startswith("conflict: refund:pi_1 was already used with other arguments")
    assert "(amount differ)" in conflict
    assert own_error == SDK_ERROR  # the tool's own error stays the SDK's to word
    assert unknown.startswith("outcome unknown: refund:pi_down may or may not have happened")
    assert "a person must resolve it" in unknown and unknown.endswith("Do not retry")
    assert invalid.startswith("refused: ") and "Nothing was run" in invalid
    store.close()


def test_a_retry_in_a_new_run_is_the_same_call(store_url, mode):
    """The run context and the tool context (new in every run, with a new call id) are left
    out of the key, the fingerprint and the approval: a retry is a duplicate, or replays."""
    store = ctrlrun.open_store(store_url)
    seen = []

    def refund(ctx: ToolContext[dict], payment_id: str, amount: int) -> str:
        """Refund a payment."""
        seen.append((ctx.tool_call_id, ctx.context["user"]))
        return f"refunded {payment_id} for {ctx.context['user']}"

    for replay, pid in ((False, "pi_1"), (True, "pi_2")):
        made = tool(
            mode,
            "above",
            "stripe.refund",
            refund,
            effect="refund:{payment_id}",
            store=store,
            replay=replay,
        )
        args = {"payment_id": pid, "amount": 5}
        first = run(agent(made, [("refund", args, "call_a")], "ok"), "go", {"user": "ann"})
        again = run(agent(made, [("refund", args, "call_b")], "ok"), "go", {"user": "bob"})
        assert outputs(first) == [f"refunded {pid} for ann"] and seen[-1] == ("call_a", "ann")
        (answer,) = outputs(again)
        if replay:
            assert answer == f"refunded {pid} for ann"  # the stored result, not a second refund
        else:
            assert answer.startswith(f"already done: refund:{pid} committed at ")
        row = store.get_effect(f"refund:{pid}")
        assert row is not None and row.state.value == "committed" and row.attempt == 1
    assert len(seen) == 2
    store.close()


def test_replay_gives_back_a_tuple(store_url, mode):
    store = ctrlrun.open_store(store_url)
    runs = []

    def charge(ctx: RunContextWrapper[None], order: str, cents: int) -> Tuple[str, int]:
        """Charge an order."""
        runs.append(order)
        return ("ch_" + order, cents)

    charge_tool = tool(
        mode, "under", "charge", charge, effect="charge:{order}", store=store, replay=True
    )
    args = {"order": "o1", "cents": 5}
    first = outputs(run(agent(charge_tool, [("charge", args, "c1")], "ok"), "go"))
    again = outputs(run(agent(charge_tool, [("charge", args, "c2")], "ok"), "go"))
    assert first == again == [("ch_o1", 5)] and type(again[0]) is tuple and runs == ["o1"]
    store.close()


def test_parallel_identical_calls_run_once(store_url, mode):
    """Two identical calls in one model response run concurrently: the twin is told "in
    progress", the real call goes on (never cancelled) and its key ends committed."""
    store = ctrlrun.open_store(store_url)

    def body(hooks: TwinSeen, runs: list) -> Callable[..., Any]:
        async def refund(payment_id: str, amount: int) -> str:
            """Refund a payment."""
            runs.append("started")
            await wait_for(hooks.seen, mode)  # the twin is answered while this body runs
            runs.append("finished")
            return f"refunded {payment_id}"

        return refund

    for order in ("under", "above"):
        hooks = TwinSeen("in progress: ")
        runs: list = []
        refund = body(hooks, runs)
        made = tool(mode, order, "stripe.refund", refund, effect="refund:{payment_id}", store=store)
        args = {"payment_id": order, "amount": 5}
        target = agent(made, [("refund", args, "call_1"), ("refund", args, "call_2")], "ok")
        said = outputs(run(target, "refund twice", hooks=hooks))
        assert runs == ["started", "finished"]
        real, twin = sorted(said, key=lambda s: not s.startswith("refunded"))
        assert real == f"refunded {order}"
        assert twin.startswith(f"in progress: refund:{order} is being done by another call")
        assert twin.endswith("; do not retry now")
        row = store.get_effect(f"refund:{order}")
        assert row is not None and row.state.value == "committed" and row.attempt == 1
    store.close()


def test_what_cannot_be_protected_is_refused_at_decoration(store_url):
    store = ctrlrun.open_store(store_url)

    async def invoke(ctx: object, raw: str) -> str:
        return "ok"

    hand_made = FunctionTool(
        name="refund", description="", params_json_schema={}, on_invoke_tool=invoke
    )
    with pytest.raises(InvalidArgument, match="under @function_tool"):
        oa.protect("r", effect="refund:{payment_id}", store=store)(hand_made)

    @oa.protect("r", effect="refund:{payment_id}", store=store)
    @function_tool
    def refund(payment_id: str) -> str:
        """Refund."""
        return "ok"

    with pytest.raises(InvalidArgument, match="already protected"):
        oa.protect("r2", effect="refund:{payment_id}", store=store)(refund)

    def pay(payment_id: str) -> str:
        return "ok"

    once = ctrlrun.protect("r", effect="refund:{payment_id}", store=store)(pay)
    with pytest.raises(InvalidArgument, match="already protected"):  # two actions, one key
        oa.protect("r2", effect="refund:{payment_id}", store=store)(once)
    with pytest.raises(InvalidArgument, match="already protected"):
        oa.protect("r2", effect="refund:{payment_id}", store=store)(function_tool(once))
    with pytest.raises(InvalidArgument, match="approved_by"):
        oa.protect("r", effect="refund:{payment_id}", approved_by=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        oa.protect("r", effects="refund:{payment_id}")  # not an option of ctrlrun.protect
    store.close()
