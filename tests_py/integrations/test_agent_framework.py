"""ctrlrun in Microsoft Agent Framework runs (a scripted chat client driving real ``Agent``
runs), on SQLite and PostgreSQL, sync and async functions, in either decorator order: a
refusal is the function's result in the gateway's words (no ERROR log, no "Function failed"),
the framework's ``FunctionInvocationContext`` is never part of a key, a pause from inside a
body leaves the key retryable, and parallel identical calls run the body once."""

from __future__ import annotations

import logging
from typing import Any, Callable

import pytest
from agent_framework import FunctionInvocationContext, FunctionTool, tool
from agent_framework.exceptions import UserInputRequiredException

import ctrlrun
from ctrlrun.errors import InvalidArgument, NotExecuted
from ctrlrun.integrations import agent_framework as af
from tests_py.integrations.test_agent_framework_support import (
    FRAMEWORK_ERROR,
    ORDERS,
    TwinSeen,
    agent,
    make,
    run,
    told,
    wait_for,
)

ARGS = {"payment_id": "pi_1", "amount": 500}


def framework_logs(caplog: Any) -> list:
    return [r for r in caplog.records if r.name.startswith("agent_framework")]


def test_a_refusal_is_the_function_result_in_the_gateway_words(store_url, mode, caplog):
    store = ctrlrun.open_store(store_url)
    runs: list = []
    for order in ORDERS:
        runs.clear()

        def refund(payment_id: str, amount: int) -> str:
            """Refund a payment."""
            runs.append(payment_id)
            return f"refunded {payment_id}"

        made = make(mode, order, "stripe.refund", refund, effect="refund:{payment_id}", store=store)
        args = {**ARGS, "payment_id": order}
        first = agent(made, [("refund", args, "c1")], "done")
        assert run(first, "refund").text == "done"
        assert told(first) == [f"refunded {order}"]

        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="agent_framework"):
            again = agent(made, [("refund", args, "c2")], "ok")
            assert run(again, "refund again").text == "ok"  # the run goes on
        (said,) = told(again)
        assert said.startswith(f"already done: refund:{order} committed at ")
        assert said.endswith("; do not retry") and FRAMEWORK_ERROR not in said
        assert runs == [order]  # the body ran once
        loud = [r for r in framework_logs(caplog) if r.levelno >= logging.WARNING]
        assert loud == [] and not any(r.exc_info for r in framework_logs(caplog))
        row = store.get_effect(f"refund:{order}")
        assert row is not None and row.state.value == "committed" and row.attempt == 1
    store.close()


def test_an_unknown_outcome_is_told_a_person_must_resolve_it(store_url, mode):
    store = ctrlrun.open_store(store_url)
    runs: list = []
    for order in ORDERS:
        runs.clear()

        def refund(payment_id: str, amount: int) -> str:
            """Refund a payment."""
            runs.append(payment_id)
            raise RuntimeError("the connection dropped")

        made = make(mode, order, "stripe.refund", refund, effect="refund:{payment_id}", store=store)
        args = {**ARGS, "payment_id": order}
        first = agent(made, [("refund", args, "c1")], [("refund", args, "c2")], "stop")
        run(first, "refund")
        crashed, said = told(first)
        assert crashed == FRAMEWORK_ERROR  # the tool's own error stays the framework's
        assert said.startswith(f"outcome unknown: refund:{order} may or may not have happened")
        assert "a person must resolve it" in said and said.endswith("Do not retry")
        assert runs == [order]
        row = store.get_effect(f"refund:{order}")
        assert row is not None and row.state.value == "ambiguous"
    store.close()


def test_not_executed_lets_the_next_call_run(store_url, mode):
    store = ctrlrun.open_store(store_url)
    runs: list = []
    for order in ORDERS:
        runs.clear()

        def refund(payment_id: str, amount: int) -> str:
            """Refund a payment."""
            runs.append(payment_id)
            if len(runs) == 1:
                raise NotExecuted("the bank refused the request")
            return f"refunded {payment_id}"

        made = make(mode, order, "stripe.refund", refund, effect="refund:{payment_id}", store=store)
        args = {**ARGS, "payment_id": order}
        target = agent(made, [("refund", args, "c1")], [("refund", args, "c2")], "done")
        run(target, "refund")
        assert told(target)[-1] == f"refunded {order}" and runs == [order, order]
        row = store.get_effect(f"refund:{order}")
        assert row is not None and row.state.value == "committed" and row.attempt == 2
    store.close()


def test_the_invocation_context_is_not_part_of_the_key_or_the_approval(store_url, mode):
    """A function taking the framework's FunctionInvocationContext: its key and fingerprint
    leave it out (two runs, two contexts, one key: "already done", not a conflict), and
    decision="approve" asks for the model's arguments only."""
    store = ctrlrun.open_store(store_url)
    runs: list = []
    for order in ORDERS:
        runs.clear()

        def refund(ctx: FunctionInvocationContext, payment_id: str, amount: int) -> str:
            """Refund a payment."""
            assert isinstance(ctx, FunctionInvocationContext)
            runs.append(payment_id)
            return f"refunded {payment_id}"

        made = make(
            mode,
            order,
            "stripe.refund",
            refund,
            effect="refund:{payment_id}",
            store=store,
            decision="approve",
        )
        params = (made if isinstance(made, FunctionTool) else tool(made)).parameters()
        assert set(params["properties"]) == {"payment_id", "amount"}  # the model sees no ctx
        args = {**ARGS, "payment_id": order}
        if order == "above":  # the framework's approval (tests_py/.../approvals) asks first
            continue
        first = agent(made, [("refund", args, "c1")], "wait")
        run(first, "refund")
        (said,) = told(first)
        (request,) = store.list_approvals(action="stripe.refund", state="pending")
        assert said.startswith(f"waiting for approval {request.request_id}: stripe.refund runs")
        assert request.arguments == args and runs == []  # no context shown, nothing run
        store.grant_approval(request.request_id, "alice", None)

        second = agent(made, [("refund", args, "c2")], [("refund", args, "c3")], "done")
        run(second, "refund")
        assert told(second)[0] == f"refunded {order}" and runs == [order]
        assert told(second)[1].startswith(f"already done: refund:{order} committed at ")
    store.close()


def test_a_pause_from_inside_the_body_leaves_the_key_retryable(store_url, mode):
    """A body that pauses the run for a person (UserInputRequiredException) has not acted:
    the run pauses with its request, the key is ``failed`` (neither ambiguous nor committed
    without the effect), and the call after the person's answer runs the body once."""
    store = ctrlrun.open_store(store_url)
    effects: list = []
    for order in ORDERS:
        effects.clear()

        def refund(ctx: FunctionInvocationContext, payment_id: str, amount: int) -> str:
            """Refund a payment."""
            if not ctx.kwargs.get("confirmed"):
                raise UserInputRequiredException([_question(payment_id)])
            effects.append(payment_id)
            return f"refunded {payment_id}"

        made = make(mode, order, "stripe.refund", refund, effect="refund:{payment_id}", store=store)
        args = {**ARGS, "payment_id": order}
        target = agent(made, [("refund", args, "c1")], [("refund", args, "c2")], "done")
        paused = run(target, "refund")
        assert [c.type for c in paused.user_input_requests] == ["text"] and effects == []
        row = store.get_effect(f"refund:{order}")
        assert row is not None and row.state.value == "failed"

        resumed = _run_with(target, {"confirmed": True})
        assert told(resumed)[-1] == f"refunded {order}" and effects == [order]
        row = store.get_effect(f"refund:{order}")
        assert row is not None and row.state.value == "committed" and row.attempt == 2
    store.close()


def _question(payment_id: str) -> Any:
    from agent_framework import Content

    question = Content.from_text(f"confirm the refund of {payment_id}?")
    question.user_input_request = True
    return question


def _run_with(target: Any, kwargs: Any) -> Any:
    import asyncio

    asyncio.run(target.run("go on", function_invocation_kwargs=kwargs))
    return target


def test_parallel_identical_calls_run_once(store_url, mode):
    """Two identical calls in one model response run concurrently: the twin is told "in
    progress", the real call goes on (never cancelled), its result reaches the model and its
    key ends committed."""
    store = ctrlrun.open_store(store_url)

    def body(twin: TwinSeen, runs: list) -> Callable[..., Any]:
        async def refund(payment_id: str, amount: int) -> str:
            """Refund a payment."""
            runs.append("started")
            await wait_for(twin.seen, mode)  # the twin is answered while this body runs
            runs.append("finished")
            return f"refunded {payment_id}"

        return refund

    for order in ORDERS:
        twin = TwinSeen("in progress: ")
        runs: list = []
        made = make(
            mode,
            order,
            "stripe.refund",
            body(twin, runs),
            effect="refund:{payment_id}",
            store=store,
        )
        args = {**ARGS, "payment_id": order}
        calls = [("refund", args, "call_1"), ("refund", args, "call_2")]
        target = agent(made, calls, "ok", middleware=[twin])
        assert run(target, "refund twice").text == "ok"
        assert runs == ["started", "finished"]
        real, other = sorted(told(target), key=lambda s: not s.startswith("refunded"))
        assert real == f"refunded {order}"
        assert other.startswith(f"in progress: refund:{order} is being done by another call")
        assert other.endswith("; do not retry now")
        row = store.get_effect(f"refund:{order}")
        assert row is not None and row.state.value == "committed" and row.attempt == 1
    store.close()


def test_what_cannot_be_protected_is_refused_at_decoration(store_url):
    store = ctrlrun.open_store(store_url)
    declared = FunctionTool(name="refund", description="", func=None)
    with pytest.raises(InvalidArgument, match="no function of its own to protect"):
        af.protect("stripe.refund", effect="refund:x", store=store)(declared)

    def refund(payment_id: str) -> str:
        return payment_id

    once = af.protect("stripe.refund", effect="refund:{payment_id}", store=store)(tool(refund))
    with pytest.raises(InvalidArgument, match="already protected"):
        af.protect("stripe.refund", effect="refund:{payment_id}", store=store)(once)
    with pytest.raises(InvalidArgument, match="already protected"):
        af.protect("other", effect="o:{payment_id}", store=store)(ctrlrun.protect("x")(refund))
    with pytest.raises(InvalidArgument, match="approved_by must be a name"):
        af.protect("stripe.refund", effect="refund:x", store=store, approved_by=3)
    with pytest.raises(TypeError, match="not_an_option"):
        af.protect("stripe.refund", not_an_option=1)
    store.close()


def test_the_core_protect_above_tool_delegates_to_the_integration(store_url):
    store = ctrlrun.open_store(store_url)

    @ctrlrun.protect("stripe.refund", effect="refund:{payment_id}", store=store)
    @tool
    def refund(payment_id: str) -> str:
        """Refund a payment."""
        return payment_id

    assert isinstance(refund, FunctionTool) and af._ours(refund) is not None
    store.close()
