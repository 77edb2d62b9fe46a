"""Approvals through pydantic-ai's deferred tools: a call that needs a person's approval ends the
run with DeferredToolRequests naming its ctrlrun request; the run resumed with ToolApproved /
ToolDenied / ToolApproved(override_args=...) records the decision in ctrlrun and runs the call
once; a grant made with the store (as `ctrlrun approve` does) is honoured. SQLite and PostgreSQL,
sync and async tools, each way of registering the tool."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied

import ctrlrun
from ctrlrun.integrations import pydantic_ai as pai
from tests_py.integrations.test_pydantic_ai import HOWS, Shop, call, returns


def deferred(shop: Shop, payment_id: str, amount: int, id: str = "c1") -> Any:
    """A run whose model asks for one refund, ended with the request for it: its result and
    the ctrlrun request it names."""
    result = shop.run([call("refund", id, payment_id=payment_id, amount=amount)])
    assert isinstance(result.output, DeferredToolRequests), result.output
    (asked,) = result.output.approvals
    assert asked.tool_call_id == id and asked.args == {"payment_id": payment_id, "amount": amount}
    said = result.output.metadata[id]["ctrlrun"]
    assert said["refused"] == "approval_required" and said["effect_key"] == f"refund:{payment_id}"
    # what a person is shown: the arguments, never the RunContext
    assert said["arguments"] == {"payment_id": payment_id, "amount": amount}
    return result, said["request_id"]


def resume(shop: Shop, result: Any, **decisions: Any) -> Any:
    return shop.run(
        message_history=result.all_messages(),
        deferred_tool_results=DeferredToolResults(**decisions),
    )


@pytest.mark.parametrize("how", HOWS)
def test_an_approval_defers_the_run_and_the_resumed_grant_runs_once(store_url, mode, how):
    store = ctrlrun.open_store(store_url)
    shop = Shop(how, mode, store, decision="approve")
    result, rid = deferred(shop, "pi_1", 5)
    assert shop.runs == [] and store.get_effect("refund:pi_1") is None
    assert store.get_approval(rid).state.value == "pending"  # type: ignore[union-attr]
    resumed = resume(
        shop, result, approvals={"c1": ToolApproved()}, metadata={"c1": {"decided_by": "ops:al"}}
    )
    assert returns(resumed)["c1"].content == "refunded pi_1 5" and resumed.output == "finished"
    record = store.get_approval(rid)
    assert record is not None and record.state.value == "used" and record.decided_by == "ops:al"
    assert "pydantic-ai (tool call c1)" in (record.note or "")
    row = store.get_effect("refund:pi_1")
    assert row is not None and row.state.value == "committed" and row.approval_id == rid
    # the model asks again in a new run: already done, no deferral
    again = shop.run([call("refund", "c2", payment_id="pi_1", amount=5)])
    assert returns(again)["c2"].content.startswith("already done: refund:pi_1 committed")
    assert shop.runs == [("pi_1", 5)]
    store.close()


def test_a_denial_is_recorded_and_the_model_told(store_url, mode):
    store = ctrlrun.open_store(store_url)
    named = pai.Approvals(approver="ops:bo")  # the approver, named once
    shop = Shop("tool", mode, store, approvals=named, decision="approve")
    result, rid = deferred(shop, "pi_1", 5)
    resumed = resume(shop, result, approvals={"c1": ToolDenied("not this customer")})
    assert returns(resumed)["c1"].content == "not this customer" and shop.runs == []
    record = store.get_approval(rid)
    assert record is not None and record.state.value == "denied"
    assert (record.decided_by, record.note) == ("ops:bo", "not this customer")
    # a new run asking the same: ctrlrun's denial is the answer, not another deferral
    again = returns(shop.run([call("refund", "c2", payment_id="pi_1", amount=5)]))["c2"].content
    assert again.startswith("denied by ops:bo: ") and again.endswith("Do not retry")
    assert shop.runs == [] and store.get_effect("refund:pi_1") is None
    store.close()


@pytest.mark.parametrize("how", ["tool_plain", "tool"])
def test_edited_arguments_are_granted_as_a_new_request_and_the_original_denied(
    store_url, mode, how
):
    store = ctrlrun.open_store(store_url)
    shop = Shop(how, mode, store, decision="approve")
    result, rid = deferred(shop, "pi_1", 500)
    edited = ToolApproved(override_args={"payment_id": "pi_1", "amount": 300})
    resumed = resume(shop, result, approvals={"c1": edited})
    assert returns(resumed)["c1"].content == "refunded pi_1 300"
    assert shop.runs == [("pi_1", 300)]
    old = store.get_approval(rid)
    (new,) = [a for a in store.list_approvals() if a.request_id != rid]
    assert old is not None and old.state.value == "denied" and old.decided_by == "pydantic-ai"
    assert new.request_id in (old.note or "") and rid in (new.note or "")
    assert new.state.value == "used" and new.arguments == {"payment_id": "pi_1", "amount": 300}
    assert new.decided_by == "pydantic-ai"
    row = store.get_effect("refund:pi_1")
    assert row is not None and row.approval_id == new.request_id
    store.close()


def test_a_decision_made_with_the_store_stands(store_url, mode):
    store = ctrlrun.open_store(store_url)
    shop = Shop("tool_plain", mode, store, decision="approve")
    result, rid = deferred(shop, "pi_1", 5)
    store.grant_approval(rid, by="ops:cy", note="checked")  # `ctrlrun approve` meanwhile
    resumed = resume(shop, result, approvals={"c1": ToolApproved()})
    assert returns(resumed)["c1"].content == "refunded pi_1 5"
    record = store.get_approval(rid)
    assert record is not None and (record.state.value, record.decided_by) == ("used", "ops:cy")
    # granted before the model asks: the new run runs it, no deferral at all
    about = pai.protected(shop.tool)
    assert about is not None
    ahead = about.approval(payment_id="pi_2", amount=7)
    assert ahead is not None and ahead.state.value == "pending"
    store.grant_approval(ahead.request_id, by="ops:cy")
    direct = shop.run([call("refund", "c2", payment_id="pi_2", amount=7)])
    assert direct.output == "finished" and returns(direct)["c2"].content == "refunded pi_2 7"
    assert shop.runs == [("pi_1", 5), ("pi_2", 7)]
    # denied with `ctrlrun deny` while the run waits: approving it through pydantic-ai is too late
    paused, denied = deferred(shop, "pi_3", 9, id="c3")
    store.deny_approval(denied, by="ops:cy", note="fraud")
    told = returns(resume(shop, paused, approvals={"c3": ToolApproved()}))["c3"].content
    assert told.startswith("denied by ops:cy: ") and shop.runs[-1] == ("pi_2", 7)
    assert store.get_approval(denied).decided_by == "ops:cy"  # type: ignore[union-attr]
    store.close()


def test_without_the_capability_the_model_is_told_to_wait(store_url, mode):
    store = ctrlrun.open_store(store_url)
    shop = Shop("tool_plain", mode, store, approvals=False, decision="approve")
    result = shop.run([call("refund", "c1", payment_id="pi_1", amount=5)])
    told = returns(result)["c1"].content
    assert told.startswith("waiting for approval apr_") and result.output == "finished"
    (pending,) = store.list_approvals("pending")
    assert pending.request_id in told and shop.runs == []
    store.grant_approval(pending.request_id, by="ops:cy")
    again = shop.run([call("refund", "c2", payment_id="pi_1", amount=5)])
    assert returns(again)["c2"].content == "refunded pi_1 5"
    store.close()
