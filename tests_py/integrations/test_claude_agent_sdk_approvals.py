"""Approvals through the Claude Agent SDK's human-in-the-loop (its ``PreToolUse`` hook and its
``can_use_tool`` callback), in real sessions of the bundled CLI on SQLite and PostgreSQL: a
``decision="approve"`` call is checked before anything runs, an undecided one is answered
"waiting for approval <id>" without holding the session, a person's answer is recorded in
ctrlrun (``_common.decide``), and the granted call runs once, its twin told "already done"."""

from __future__ import annotations

import asyncio
import time

import pytest

import ctrlrun
from ctrlrun.errors import InvalidArgument
from ctrlrun.integrations import claude_agent_sdk as cas
from tests_py.integrations.test_claude_agent_sdk_support import (
    SERVER,
    refund_call,
    refund_tool,
    session,
    text,
)

SHOWN = {"payment_id": "pi_1", "amount": 500}  # what an approver is shown: the dict's keys


def requests(store):
    return [(r.state.value, r.arguments, r.decided_by) for r in store.list_approvals()]


def test_undecided_is_waiting_then_a_grant_in_ctrlrun_runs_the_call_once(store_url, tmp_path):
    store = ctrlrun.open_store(store_url)
    runs: list = []
    refund = refund_tool(runs, store=store_url, decision="approve")
    approvals = cas.Approvals({SERVER: [refund]})
    api = session(tmp_path, [refund], [[refund_call(call_id="toolu_1")]], approvals=approvals)
    told = api.result_text("toolu_1")
    (request,) = store.list_approvals()
    assert f"waiting for approval {request.request_id}: stripe.refund runs once" in told
    assert runs == [] and store.get_effect("refund:pi_1") is None
    assert requests(store) == [("pending", SHOWN, None)]

    store.grant_approval(request.request_id, "alice", None)  # `ctrlrun approve ID --by alice`
    twins = [refund_call(call_id="toolu_2"), refund_call(call_id="toolu_3")]
    api = session(tmp_path, [refund], [twins], approvals=approvals)
    assert api.result_text("toolu_2") == "refunded pi_1"
    assert api.result_text("toolu_3").startswith("already done: refund:pi_1")
    assert runs == [SHOWN]
    assert [r[0] for r in requests(store)] == ["used"]
    assert store.get_effect("refund:pi_1").state.value == "committed"


def test_without_the_sdk_hook_the_tool_itself_answers_waiting(store_url, tmp_path):
    store = ctrlrun.open_store(store_url)
    runs: list = []
    refund = refund_tool(runs, store=store_url, decision="approve")
    api = session(tmp_path, [refund], [[refund_call(call_id="toolu_1")]])
    (request,) = store.list_approvals()
    assert api.result_text("toolu_1").startswith(f"waiting for approval {request.request_id}")
    assert runs == [] and store.get_effect("refund:pi_1") is None


def test_a_person_asked_through_the_hook_grants_and_the_call_runs_once(store_url, tmp_path):
    store = ctrlrun.open_store(store_url)
    runs: list = []
    asked: list = []
    refund = refund_tool(runs, store=store_url, decision="approve")

    async def ask(request):
        asked.append((request.action, request.arguments))
        return True

    approvals = cas.Approvals({SERVER: [refund]}, ask=ask, approved_by="alice")
    twins = [refund_call(call_id="toolu_1"), refund_call(call_id="toolu_2")]
    api = session(tmp_path, [refund], [[text("refunding"), *twins]], approvals=approvals)
    assert runs == [SHOWN]
    assert api.result_text("toolu_1") == "refunded pi_1"
    assert api.result_text("toolu_2").startswith("already done: refund:pi_1")
    assert asked == [("stripe.refund", SHOWN)]  # the twin is answered by its key, not asked
    assert requests(store) == [("used", SHOWN, "alice")]


def test_a_person_denying_is_recorded_and_the_model_told(store_url, tmp_path):
    store = ctrlrun.open_store(store_url)
    runs: list = []
    refund = refund_tool(runs, store=store_url, decision="approve")
    approvals = cas.Approvals({SERVER: [refund]}, ask=lambda request: False, approved_by="bob")
    api = session(tmp_path, [refund], [[refund_call(call_id="toolu_1")]], approvals=approvals)
    told = api.result_text("toolu_1")
    assert "denied by bob" in told and "Do not retry" in told
    assert runs == [] and requests(store) == [("denied", SHOWN, "bob")]

    # a later call with the same arguments is told the same, without asking or running
    api = session(tmp_path, [refund], [[refund_call(call_id="toolu_2")]])
    assert "denied by bob" in api.result_text("toolu_2") and runs == []


def test_can_use_tool_maps_onto_the_same_approvals(store_url, tmp_path):
    store = ctrlrun.open_store(store_url)
    runs: list = []
    refund = refund_tool(runs, store=store_url, decision="approve")
    answers = iter([None, True])
    approvals = cas.Approvals({SERVER: [refund]}, ask=lambda r: next(answers))
    turns = [[refund_call(call_id="toolu_1")], [refund_call(call_id="toolu_2")]]
    api = session(
        tmp_path,
        [refund],
        turns,
        approvals=approvals,
        hooks=False,
        can_use_tool=True,
        allowed=False,
    )
    (request,) = store.list_approvals()
    assert api.result_text("toolu_1").count(f"waiting for approval {request.request_id}") == 1
    assert api.result_text("toolu_2") == "refunded pi_1"
    assert runs == [SHOWN] and requests(store) == [("used", SHOWN, cas.DEFAULT_APPROVER)]


def test_a_person_who_does_not_answer_in_time_leaves_it_waiting(store_url, tmp_path):
    store = ctrlrun.open_store(store_url)
    runs: list = []
    refund = refund_tool(runs, store=store_url, decision="approve")

    async def slow(request):
        await asyncio.sleep(60)
        return True

    approvals = cas.Approvals({SERVER: [refund]}, ask=slow, timeout=0.5)
    started = time.monotonic()
    api = session(tmp_path, [refund], [[refund_call(call_id="toolu_1")]], approvals=approvals)
    assert time.monotonic() - started < 20
    (request,) = store.list_approvals()
    assert f"waiting for approval {request.request_id}" in api.result_text("toolu_1")
    assert runs == [] and requests(store) == [("pending", SHOWN, None)]


def test_calls_that_need_no_person_pass_the_hook(store_url, tmp_path):
    runs: list = []
    refund = refund_tool(runs, store=store_url)  # decision "allow"
    approvals = cas.Approvals({SERVER: [refund]}, ask=lambda r: False)
    api = session(tmp_path, [refund], [[refund_call(call_id="toolu_1")]], approvals=approvals)
    assert api.result_text("toolu_1") == "refunded pi_1" and len(runs) == 1
    assert ctrlrun.open_store(store_url).list_approvals() == []


def test_concurrent_twins_asked_through_the_hook_run_the_body_once(store_url, tmp_path):
    store = ctrlrun.open_store(store_url)
    runs: list = []
    refund = refund_tool(runs, parallel=True, store=store_url, decision="approve")
    approvals = cas.Approvals({SERVER: [refund]}, ask=lambda r: True, approved_by="alice")
    twins = [refund_call(call_id="toolu_1"), refund_call(call_id="toolu_2")]
    api = session(tmp_path, [refund], [twins], approvals=approvals)
    assert runs == [SHOWN]
    told = sorted(api.result_text(c) for c in ("toolu_1", "toolu_2"))
    assert told[1] == "refunded pi_1"
    assert told[0].startswith(("in progress: refund:pi_1", "already done: refund:pi_1"))
    assert requests(store) == [("used", SHOWN, "alice")]
    assert store.get_effect("refund:pi_1").state.value == "committed"


def test_approvals_refuse_what_they_cannot_record():
    with pytest.raises(InvalidArgument, match="approved_by"):
        cas.Approvals({SERVER: []}, approved_by="bad\u202ename")
    with pytest.raises(InvalidArgument, match="timeout"):
        cas.Approvals({SERVER: []}, timeout=0)
