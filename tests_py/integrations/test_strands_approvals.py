"""Approvals through Strands interrupts: with the Approvals hook, a call that needs a person's
approval stops the run (stop_reason "interrupt") before its body runs, the interrupt naming its
ctrlrun request; the run resumed with the person's response records the decision in ctrlrun
and runs the call once; a decision made with the store stands. A tool_context.interrupt() raised
inside a protected body leaves the key failed (never ambiguous, never committed), and the resumed
call runs the body once. SQLite and PostgreSQL, sync and async tools."""

from __future__ import annotations

from typing import Any, List

import pytest
from strands import Agent, ToolContext, tool

import ctrlrun
from ctrlrun.integrations import strands as cs
from tests_py.integrations.strands_support import ScriptedModel, call, results
from tests_py.integrations.test_strands import HOWS, Shop


def interrupted(shop: Shop, payment_id: str, amount: int, id: str = "c1") -> Any:
    """A run whose model asks for one refund, stopped by the interrupt for it: the interrupt
    and the ctrlrun request it names."""
    result = shop.run([call("refund", id, payment_id=payment_id, amount=amount)])
    assert result.stop_reason == "interrupt", result
    (asked,) = result.interrupts
    said = asked.reason["ctrlrun"]
    assert asked.name == cs.INTERRUPT_PREFIX + said["request_id"]
    assert said["effect_key"] == f"refund:{payment_id}" and said["action"] == "refund"
    # what a person is shown: the arguments, never the ToolContext or the Agent
    assert said["arguments"] == {"payment_id": payment_id, "amount": amount}
    return asked, said["request_id"]


def respond(shop: Shop, asked: Any, response: Any) -> Any:
    return shop.agent([{"interruptResponse": {"interruptId": asked.id, "response": response}}])


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("context", [False, True])
def test_an_approval_interrupts_before_the_body_and_the_granted_call_runs_once(
    store_url, mode, how, context
):
    store = ctrlrun.open_store(store_url)
    shop = Shop(how, mode, store, hooks=[cs.Approvals()], context=context, decision="approve")
    asked, rid = interrupted(shop, "pi_1", 5)
    assert shop.runs == [] and store.get_effect("refund:pi_1") is None
    assert store.get_approval(rid).state.value == "pending"  # type: ignore[union-attr]
    resumed = respond(shop, asked, {"approved": True, "by": "ops:al"})
    assert resumed.stop_reason == "end_turn" and shop.told("c1") == "refunded pi_1 5"
    record = store.get_approval(rid)
    assert record is not None and record.state.value == "used" and record.decided_by == "ops:al"
    assert "Strands interrupt (tool call c1)" in (record.note or "")
    row = store.get_effect("refund:pi_1")
    assert row is not None and row.state.value == "committed" and row.approval_id == rid
    # the model asks again: already done, no interrupt
    again = shop.run([call("refund", "c2", payment_id="pi_1", amount=5)])
    assert again.stop_reason == "end_turn"
    assert shop.told("c2").startswith("already done: refund:pi_1 committed")
    assert shop.runs == [("pi_1", 5)]
    store.close()


def test_a_denial_is_recorded_and_the_model_told(store_url, mode):
    store = ctrlrun.open_store(store_url)
    shop = Shop("under", mode, store, hooks=[cs.Approvals(approver="ops:bo")], decision="approve")
    asked, rid = interrupted(shop, "pi_1", 5)
    resumed = respond(shop, asked, "no")
    assert resumed.stop_reason == "end_turn" and shop.runs == []
    told = shop.told("c1")
    assert told.startswith("denied by ops:bo: ") and told.endswith("Do not retry")
    record = store.get_approval(rid)
    assert record is not None and record.state.value == "denied" and record.decided_by == "ops:bo"
    again = shop.run([call("refund", "c2", payment_id="pi_1", amount=5)])
    assert again.stop_reason == "end_turn" and shop.told("c2").startswith("denied by ops:bo")
    assert shop.runs == [] and store.get_effect("refund:pi_1") is None
    store.close()


def test_a_decision_made_with_the_store_stands(store_url, mode):
    store = ctrlrun.open_store(store_url)
    shop = Shop("above", mode, store, hooks=[cs.Approvals()], decision="approve")
    asked, rid = interrupted(shop, "pi_1", 5)
    store.grant_approval(rid, "ops:cy", "granted at the console")  # as `ctrlrun approve` does
    resumed = respond(shop, asked, False)  # a late "no" through Strands: the grant stands
    assert resumed.stop_reason == "end_turn" and shop.told("c1") == "refunded pi_1 5"
    record = store.get_approval(rid)
    assert record is not None and record.state.value == "used" and record.decided_by == "ops:cy"
    # a request granted before the model asks (the application asked ctrlrun first): no interrupt
    about = cs.protected(shop.tool._tool_func)
    assert about is not None
    early = about.approval(payment_id="pi_2", amount=7)
    assert early is not None and early.state.value == "pending"
    store.grant_approval(early.request_id, "ops:cy", None)
    assert shop.run([call("refund", "c2", payment_id="pi_2", amount=7)]).stop_reason == "end_turn"
    assert shop.told("c2") == "refunded pi_2 7"
    assert shop.runs == [("pi_1", 5), ("pi_2", 7)]
    store.close()


def test_without_the_hook_the_model_is_told_to_wait(store_url, mode):
    store = ctrlrun.open_store(store_url)
    shop = Shop("under", mode, store, decision="approve")
    result = shop.run([call("refund", "c1", payment_id="pi_1", amount=5)])
    told = shop.told("c1")
    assert result.stop_reason == "end_turn" and told.startswith("waiting for approval apr_")
    rid = told.split()[3].rstrip(":")
    assert store.get_approval(rid).state.value == "pending"  # type: ignore[union-attr]
    store.grant_approval(rid, "ops:al", None)
    shop.run([call("refund", "c2", payment_id="pi_1", amount=5)])
    assert shop.told("c2") == "refunded pi_1 5" and shop.runs == [("pi_1", 5)]
    store.close()


@pytest.mark.parametrize("order", ["under", "above"])
def test_an_interrupt_inside_the_body_never_leaves_the_key_ambiguous(store_url, mode, order):
    store = ctrlrun.open_store(store_url)
    done: List[str] = []

    async def refund(payment_id: str, tool_context: ToolContext) -> str:
        """Refund a payment, once a person confirms it."""
        answer = tool_context.interrupt("confirm-refund", reason={"payment_id": payment_id})
        if answer != "yes":
            return f"not refunded: {answer}"
        done.append(payment_id)  # the side effect, after the person's answer
        return f"refunded {payment_id}"

    body = mode.executor(refund)
    if order == "under":
        made = tool(context=True)(
            cs.protect("refund", effect="refund:{payment_id}", store=store)(body)
        )
    else:
        made = cs.protect("refund", effect="refund:{payment_id}", store=store)(
            tool(context=True)(body)
        )
    model = ScriptedModel([call("refund", "c1", payment_id="pi_1")])
    agent = Agent(model=model, tools=[made], callback_handler=None)
    result = agent("go")
    assert result.stop_reason == "interrupt" and done == []
    (asked,) = result.interrupts
    assert asked.name == "confirm-refund" and asked.reason == {"payment_id": "pi_1"}
    row = store.get_effect("refund:pi_1")
    assert row is not None and row.state.value == "failed"  # never ambiguous nor committed
    resumed = agent([{"interruptResponse": {"interruptId": asked.id, "response": "yes"}}])
    assert resumed.stop_reason == "end_turn" and results(agent)["c1"]["text"] == "refunded pi_1"
    assert done == ["pi_1"]
    row = store.get_effect("refund:pi_1")
    assert row is not None and row.state.value == "committed"
    store.close()
