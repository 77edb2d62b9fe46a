"""ctrlrun approvals as LlamaIndex workflow events, through real ``FunctionAgent`` runs (a
scripted model, no API key) on SQLite and PostgreSQL, sync and async tools: a call needing a
person pauses the step BEFORE its body with ``ApprovalRequested``; the ``ApprovalDecision``
sent back is recorded in ctrlrun and a granted call runs once; a step paused inside a protected
body (``ctx.wait_for_event``) leaves its key ``failed``, never ``ambiguous``, and runs once when
the event arrives."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Optional

import pytest
from llama_index.core.agent.workflow import AgentWorkflow
from llama_index.core.workflow import Context, HumanResponseEvent, InputRequiredEvent

import ctrlrun
from ctrlrun.integrations import llama_index as li
from ctrlrun.store.approvals import ApprovalState
from tests_py.integrations.test_llama_index_support import agent, approver, run, tool

ARGS = {"payment_id": "pi_1", "amount": 500}


def _refund_body(runs: list, takes_ctx: bool) -> Any:
    if takes_ctx:

        def refund(ctx: Context, payment_id: str, amount: int) -> str:
            """Refund a payment."""
            assert isinstance(ctx, Context)
            runs.append(payment_id)
            return f"refunded {payment_id}"

        return refund

    def refund(payment_id: str, amount: int) -> str:  # type: ignore[no-redef]
        """Refund a payment."""
        runs.append(payment_id)
        return f"refunded {payment_id}"

    return refund


@pytest.mark.parametrize("takes_ctx", [True, False], ids=["ctx", "no_ctx"])
def test_an_approval_is_asked_before_the_body_and_runs_once(store_url, mode, takes_ctx, caplog):
    store = ctrlrun.open_store(store_url)
    runs: list = []
    seen_before: list = []

    def person(ev: Any) -> Optional[Any]:
        if isinstance(ev, li.ApprovalRequested):
            seen_before.append((list(runs), store.get_effect("refund:pi_1")))
        return approver(True, by="ann", note="checked")(ev)

    made = tool(mode, "agent_tools", "stripe.refund", _refund_body(runs, takes_ctx),
                effect="refund:{payment_id}", store=store, decision="approve")  # fmt: skip
    target, script = agent([made], [("refund", ARGS, "c1")], [("refund", ARGS, "c2")], "ok")
    with caplog.at_level(logging.DEBUG):
        done = run(target, person)
    (asked,) = done.of(li.ApprovalRequested)
    assert isinstance(asked, InputRequiredEvent)
    assert seen_before == [([], None)]  # asked before anything ran or was reserved
    assert asked.action == "stripe.refund" and asked.effect_key == "refund:pi_1"
    assert asked.arguments == ARGS  # the Context is not shown to the approver
    assert asked.text.startswith(f"waiting for approval {asked.request_id}")
    first, again = done.said()
    assert first == "refunded pi_1" and runs == ["pi_1"]
    assert again.startswith("already done: refund:pi_1 committed at ")
    assert script.told == [first, again]
    record = store.get_approval(asked.request_id)
    assert record is not None and record.state is ApprovalState.USED
    assert record.granted_by == ("ann",)
    row = store.get_effect("refund:pi_1")
    assert row is not None and row.state.value == "committed"
    assert row.approval_id == asked.request_id
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    store.close()


def test_a_denial_is_the_denied_text_and_nothing_runs(store_url, mode):
    store = ctrlrun.open_store(store_url)
    runs: list = []
    made = tool(mode, "above", "stripe.refund", _refund_body(runs, True),
                effect="refund:{payment_id}", store=store, decision="approve")  # fmt: skip
    target, _ = agent([made], [("refund", ARGS, "c1")], "ok")
    done = run(target, approver(False, by="bob", note="not this one"))
    (asked,) = done.of(li.ApprovalRequested)
    (said,) = done.said()
    assert said.startswith("denied by bob: ") and said.endswith("Do not retry")
    assert runs == [] and store.get_effect("refund:pi_1") is None
    record = store.get_approval(asked.request_id)
    assert record is not None and record.state is ApprovalState.DENIED
    store.close()


def test_a_decision_made_in_ctrlrun_meanwhile_stands(store_url, mode):
    """``ApprovalDecision(approved=None)`` decides nothing: a grant made with ``ctrlrun
    approve`` while the run waited is what the resumed call uses."""
    store = ctrlrun.open_store(store_url)
    runs: list = []

    def person(ev: Any) -> Optional[Any]:
        if isinstance(ev, li.ApprovalRequested):
            store.grant_approval(ev.request_id, "carol", "by the CLI")
            return li.ApprovalDecision(request_id=ev.request_id)
        return None

    made = tool(mode, "from_defaults", "stripe.refund", _refund_body(runs, False),
                effect="refund:{payment_id}", store=store, decision="approve")  # fmt: skip
    target, _ = agent([made], [("refund", ARGS, "c1")], "ok")
    done = run(target, person)
    assert done.said() == ["refunded pi_1"] and runs == ["pi_1"]
    (asked,) = done.of(li.ApprovalRequested)
    record = store.get_approval(asked.request_id)
    assert record is not None and record.granted_by == ("carol",)
    store.close()


def test_outside_a_run_the_answer_is_the_waiting_text(store_url, mode):
    store = ctrlrun.open_store(store_url)
    runs: list = []
    made = tool(mode, "above", "stripe.refund", _refund_body(runs, False),
                effect="refund:{payment_id}", store=store, decision="approve")  # fmt: skip
    out = made.call(**ARGS) if not mode.is_async else asyncio.run(made.acall(**ARGS))
    assert str(out.content).startswith("waiting for approval apr_") and not out.is_error
    assert runs == []
    store.close()


def test_parallel_twins_wait_on_one_request(store_url, mode):
    """Two identical calls in one response: one waits for the person (one ApprovalRequested),
    its twin is told "waiting for approval" at once; one decision runs the body once."""
    store = ctrlrun.open_store(store_url)
    runs: list = []
    made = tool(mode, "agent_tools", "stripe.refund", _refund_body(runs, False),
                effect="refund:{payment_id}", store=store, decision="approve")  # fmt: skip
    target, script = agent([made], [("refund", ARGS, "c1"), ("refund", ARGS, "c2")], "ok")
    done = run(target, approver(True))
    (asked,) = done.of(li.ApprovalRequested)
    assert runs == ["pi_1"]
    by_call = {r.tool_id: str(r.tool_output.content) for r in done.results}
    assert sorted(by_call) == ["c1", "c2"]  # both calls answered, once each
    real = [a for a in by_call.values() if a == "refunded pi_1"]
    (twin,) = [a for a in by_call.values() if a != "refunded pi_1"]
    assert len(real) == 1
    # told to wait while its twin waited; or, when it came after the decision, what the key is
    assert twin.startswith(
        (f"waiting for approval {asked.request_id}", "already done: refund:pi_1", "in progress")
    )
    assert sorted(script.told) == sorted(by_call.values())
    row = store.get_effect("refund:pi_1")
    assert row is not None and row.state.value == "committed" and row.attempt == 1
    store.close()


# ---- a step paused inside a protected body (async tools: only they can await the event) ----


def _asking_refund(runs: list) -> Any:
    async def refund(ctx: Context, payment_id: str, amount: int) -> str:
        """Refund a payment once a person says yes."""
        ev = await ctx.wait_for_event(
            HumanResponseEvent, waiter_event=InputRequiredEvent(prefix=f"refund {payment_id}?")
        )
        if ev.response != "yes":
            raise ctrlrun.NotExecuted(f"declined: {ev.response}")
        runs.append(payment_id)
        return f"refunded {payment_id}"

    return refund


@pytest.mark.parametrize("answer", ["yes", "no"])
def test_a_pause_inside_the_body_never_leaves_the_key_ambiguous(store_url, answer, caplog):
    store = ctrlrun.open_store(store_url)
    runs: list = []
    during: list = []

    def person(ev: Any) -> Optional[Any]:
        if isinstance(ev, InputRequiredEvent):
            during.append(store.get_effect("refund:pi_1"))
            return HumanResponseEvent(response=answer)
        return None

    made = li.protect("stripe.refund", effect="refund:{payment_id}", store=store)(
        _asking_refund(runs)
    )
    target, _ = agent([made], [("refund", ARGS, "c1")], [("refund", ARGS, "c2")], "ok")
    with caplog.at_level(logging.DEBUG):
        done = run(target, person)
    assert during and all(p is not None and p.state.value == "failed" for p in during)
    assert all("paused" in (p.error or "") for p in during)  # never ambiguous
    row = store.get_effect("refund:pi_1")
    assert row is not None
    first, again = done.said()
    if answer == "yes":
        assert runs == ["pi_1"] and first == "refunded pi_1"
        assert row.state.value == "committed" and row.attempt == 2
        assert again.startswith("already done: refund:pi_1 committed at ")
    else:
        # (a failed key may run again: the model's retry asks the person again)
        assert runs == [] and first == again == "declined: no" and len(during) == 2
        assert row.state.value == "failed" and row.attempt == 4
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    store.close()


def test_an_approved_call_that_pauses_in_its_body_asks_again(store_url):
    """A grant is used once, by the attempt that reserves with it: the attempt a step's pause
    ended is recorded failed, so its replay needs a person's grant again (asked the same way)."""
    store = ctrlrun.open_store(store_url)
    runs: list = []

    def person(ev: Any) -> Optional[Any]:
        if isinstance(ev, li.ApprovalRequested):
            return li.ApprovalDecision(request_id=ev.request_id, approved=True, by="ann")
        if isinstance(ev, InputRequiredEvent):
            return HumanResponseEvent(response="yes")
        return None

    made = li.protect(
        "stripe.refund", effect="refund:{payment_id}", store=store, decision="approve"
    )(_asking_refund(runs))
    target, _ = agent([made], [("refund", ARGS, "c1")], "ok")
    done = run(target, person)
    assert done.said() == ["refunded pi_1"] and runs == ["pi_1"]
    first, second = done.of(li.ApprovalRequested)
    assert first.request_id != second.request_id
    row = store.get_effect("refund:pi_1")
    assert row is not None and row.state.value == "committed" and row.attempt == 2
    assert row.approval_id == second.request_id
    store.close()


def test_an_agent_workflow_asks_and_refuses_the_same_way(store_url, mode):
    """The multi-agent ``AgentWorkflow`` calls tools through its own step: the same events,
    the same answers."""
    store = ctrlrun.open_store(store_url)
    runs: list = []
    made = tool(mode, "from_defaults", "stripe.refund", _refund_body(runs, True),
                effect="refund:{payment_id}", store=store, decision="approve")  # fmt: skip
    shop, script = agent([made], [("refund", ARGS, "c1")], [("refund", ARGS, "c2")], "ok")
    flow = AgentWorkflow(agents=[shop], root_agent="shop")
    done = run(flow, approver(True, by="ann"))
    (asked,) = done.of(li.ApprovalRequested)
    first, again = done.said()
    assert first == "refunded pi_1" and runs == ["pi_1"]
    assert again.startswith("already done: refund:pi_1 committed at ")
    assert script.told == [first, again]
    record = store.get_approval(asked.request_id)
    assert record is not None and record.state is ApprovalState.USED
    store.close()
