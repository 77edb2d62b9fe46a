"""Approvals through the Microsoft Agent Framework's human-in-the-loop, on SQLite and
PostgreSQL, sync and async functions: a tool protected above ``@tool`` with decision="approve"
gets ``approval_mode="always_require"``, so the run pauses with a function approval request
before anything runs; the person's approval response is recorded as the ctrlrun grant (bound to
the arguments, used once); ``af.approve`` / ``af.reject`` record the decision under a person's
name (a rejection as a denial); decisions made in ctrlrun are carried into the responses by
``af.apply_decisions``."""

from __future__ import annotations

import asyncio

from agent_framework import FunctionInvocationContext, FunctionMiddleware

import ctrlrun
from ctrlrun.integrations import agent_framework as af
from tests_py.integrations.test_agent_framework_support import agent, answer, make, run, told

ARGS = {"payment_id": "pi_1", "amount": 500}
REJECTED = "Error: Tool call invocation was rejected by user."  # the framework's words


def refund_tool(mode, store, runs, order="above", **options):
    def refund(ctx: FunctionInvocationContext, payment_id: str, amount: int) -> str:
        """Refund a payment."""
        runs.append(payment_id)
        return f"refunded {payment_id}"

    options.setdefault("decision", "approve")
    return make(
        mode, order, "stripe.refund", refund, effect="refund:{payment_id}", store=store, **options
    )


def requests(store):
    return [(r.state.value, r.arguments, r.decided_by) for r in store.list_approvals()]


def paused_on(target, session):
    """The run paused before anything ran, on one function approval request."""
    paused = run(target, "refund", session)
    (request,) = paused.user_input_requests
    assert request.type == "function_approval_request"
    assert request.function_call.name == "refund"
    return request


def test_the_person_approving_in_the_framework_is_recorded_as_the_grant(store_url, mode):
    store = ctrlrun.open_store(store_url)
    approvers = (
        (None, "agent-framework"),
        ("ops-bot", "ops-bot"),
        (lambda c: "from-ctx", "from-ctx"),
    )
    for n, (approver, by) in enumerate(approvers):
        runs: list = []
        made = refund_tool(mode, store, runs, approved_by=approver)
        assert made.approval_mode == "always_require"
        args = {**ARGS, "payment_id": f"pi_{n}"}
        target = agent(made, [("refund", args, "c1")], "refunded")
        session = target.create_session()
        request = paused_on(target, session)
        assert runs == []  # checked before the body runs

        resumed = answer(target, [request.to_function_approval_response(True)], session)
        assert resumed.text == "refunded" and told(target) == [f"refunded pi_{n}"]
        assert runs == [f"pi_{n}"]
        assert requests(store)[n] == ("used", args, by)  # no context shown; used once

        # the same call again: the framework asks again; the key answers "already done"
        again = agent(made, [("refund", args, "c2")], "ok")
        session = again.create_session()
        request = paused_on(again, session)
        answer(again, [request.to_function_approval_response(True)], session)
        (said,) = told(again)
        assert said.startswith(f"already done: refund:pi_{n} committed at ")
        assert runs == [f"pi_{n}"] and len(store.list_approvals()) == n + 1
    store.close()


def test_af_approve_and_reject_record_the_person(store_url, mode):
    store = ctrlrun.open_store(store_url)
    runs: list = []
    made = refund_tool(mode, store, runs)
    target = agent(made, [("refund", ARGS, "c1")], "refunded")
    session = target.create_session()
    request = paused_on(target, session)
    response = af.approve(target, request, by="alice", note="checked the order")
    assert requests(store) == [("granted", ARGS, "alice")] and runs == []
    answer(target, [response], session)
    assert told(target) == ["refunded pi_1"] and runs == ["pi_1"]
    assert requests(store) == [("used", ARGS, "alice")]

    other = {**ARGS, "payment_id": "pi_2"}
    target = agent(made, [("refund", other, "c2")], "not refunded", [("refund", other, "c3")], "x")
    session = target.create_session()
    request = paused_on(target, session)
    answer(target, [af.reject(target, request, by="bob", note="too much")], session)
    assert told(target) == [REJECTED] and runs == ["pi_1"]
    assert requests(store)[1] == ("denied", other, "bob")

    # asked again and approved in the framework by someone else: the denial stands
    request = paused_on(target, session)
    answer(target, [request.to_function_approval_response(True)], session)
    said = told(target)[-1]
    assert said.startswith("denied by bob: ") and said.endswith("Do not retry")
    assert runs == ["pi_1"] and requests(store)[1] == ("denied", other, "bob")
    store.close()


def test_decisions_made_in_ctrlrun_are_applied_to_the_paused_run(store_url, mode):
    store = ctrlrun.open_store(store_url)
    runs: list = []
    made = refund_tool(mode, store, runs)
    granted, denied, waiting = ({**ARGS, "payment_id": p} for p in ("pi_g", "pi_d", "pi_w"))
    calls = [("refund", granted, "c1"), ("refund", denied, "c2"), ("refund", waiting, "c3")]
    target = agent(made, calls, "done")
    session = target.create_session()
    paused = run(target, "refund three", session)
    asked = paused.user_input_requests
    assert len(asked) == 3 and runs == []
    ids = [af.standing(target, r).request_id for r in asked]  # asked in ctrlrun, pending
    assert [r[0] for r in requests(store)] == ["pending"] * 3
    store.grant_approval(ids[0], "carol", None)  # `ctrlrun approve <id> --by carol`
    store.deny_approval(ids[1], "dave", "no")

    responses, still = af.apply_decisions(target, asked)
    assert [r.approved for r in responses] == [True, False] and still == [asked[2]]
    responses.append(af.approve(target, still[0], by="erin"))
    answer(target, responses, session)
    assert told(target) == ["refunded pi_g", REJECTED, "refunded pi_w"]
    assert sorted(runs) == ["pi_g", "pi_w"]  # run concurrently
    assert [(s, b) for s, _, b in requests(store)] == [
        ("used", "carol"),
        ("denied", "dave"),
        ("used", "erin"),
    ]
    store.close()


def test_under_tool_an_approval_waits_or_follows_the_tools_own_mode(store_url, mode):
    """Under @tool (approval_mode left as it is) the model is told "waiting for approval
    <id>" and the call after a grant in ctrlrun runs once; with the tool's own
    approval_mode="always_require" the framework asks and its approval is the grant."""
    store = ctrlrun.open_store(store_url)
    runs: list = []
    made = refund_tool(mode, store, runs, order="under")
    target = agent(made, [("refund", ARGS, "c1")], "waiting")
    run(target, "refund")
    (said,) = told(target)
    ((state, shown, _),) = requests(store)
    (pending,) = store.list_approvals()
    assert said.startswith(f"waiting for approval {pending.request_id}: stripe.refund runs")
    assert state == "pending" and shown == ARGS and runs == []
    store.grant_approval(pending.request_id, "alice", None)
    target = agent(made, [("refund", ARGS, "c2")], "done")
    run(target, "refund")
    assert told(target) == ["refunded pi_1"] and runs == ["pi_1"]

    other = {**ARGS, "payment_id": "pi_2"}
    asks = refund_tool(mode, store, runs, order="under", approval_mode="always_require")
    target = agent(asks, [("refund", other, "c3")], "done")
    session = target.create_session()
    request = paused_on(target, session)
    answer(target, [request.to_function_approval_response(True)], session)
    assert told(target) == ["refunded pi_2"] and runs == ["pi_1", "pi_2"]
    assert requests(store)[1] == ("used", other, "agent-framework")
    store.close()


class Passing(FunctionMiddleware):
    """A function middleware that lets every call through (the framework's middleware path)."""

    async def process(self, context, call_next):
        await call_next()


def test_an_approval_through_function_middleware_and_none_outside_a_run(store_url, mode):
    """With function middleware the framework runs an approved call through its pipeline: the
    approval is still the grant. Invoked outside a run (``tool.invoke``), nothing was
    approved by a person: the call is answered "waiting for approval"."""
    store = ctrlrun.open_store(store_url)
    runs: list = []
    made = refund_tool(mode, store, runs)
    target = agent(made, [("refund", ARGS, "c1")], "refunded", middleware=[Passing()])
    session = target.create_session()
    request = paused_on(target, session)
    answer(target, [request.to_function_approval_response(True)], session)
    assert told(target) == ["refunded pi_1"] and runs == ["pi_1"]
    assert requests(store) == [("used", ARGS, "agent-framework")]

    other = {**ARGS, "payment_id": "pi_2"}
    (said,) = asyncio.run(made.invoke(arguments=other))
    assert said.text.startswith("waiting for approval apr_") and runs == ["pi_1"]
    assert requests(store)[1] == ("pending", other, None)
    store.close()
