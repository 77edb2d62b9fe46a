"""ctrlrun in LlamaIndex, driven through real ``FunctionAgent`` runs by a scripted
function-calling model (no API key), on SQLite and PostgreSQL, with sync and async tools:
either order protects the call and keeps the tool as LlamaIndex built it; a refusal is the
tool's result in the gateway's words (no error, nothing logged); the workflow ``Context`` is
not part of the call; parallel identical calls in one response run the body once."""

from __future__ import annotations

import logging
import threading
from typing import Optional

import pytest
from llama_index.core.tools import FunctionTool, QueryEngineTool
from llama_index.core.workflow import Context

import ctrlrun
from ctrlrun.errors import EffectKeyError, InvalidArgument
from ctrlrun.integrations import llama_index as li
from ctrlrun.integrations._common import protected
from tests_py.integrations.test_llama_index_support import ORDERS, agent, run, tool


def _quiet(caplog: pytest.LogCaptureFixture) -> None:
    bad = [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert not bad, [r.getMessage() for r in bad]


def test_either_order_protects_the_call_and_keeps_the_tool(store_url, mode, caplog):
    store = ctrlrun.open_store(store_url)
    runs = []

    def refund(payment_id: str, amount: int) -> str:
        """Refund a payment."""
        runs.append(payment_id)
        return f"refunded {payment_id}"

    plain = FunctionTool.from_defaults(fn=mode.executor(refund))
    for order in ORDERS:
        made = tool(mode, order, "stripe.refund", refund, effect="refund:{payment_id}", store=store)
        built = made if isinstance(made, FunctionTool) else FunctionTool.from_defaults(fn=made)
        assert built.metadata.name == plain.metadata.name == "refund"
        # (the same text; ours shows `str` where a string annotation shows `'str'`)
        text = built.metadata.description
        assert text.replace("'", "") == plain.metadata.description.replace("'", "")
        assert built.metadata.get_parameters_dict() == plain.metadata.get_parameters_dict()
        assert protected(built.real_fn) is not None

        args = {"payment_id": order, "amount": 500}
        target, script = agent([made], [("refund", args, "c1")], [("refund", args, "c2")], "ok")
        caplog.clear()
        with caplog.at_level(logging.DEBUG):
            done = run(target)
        first, again = done.said()
        assert first == f"refunded {order}" and runs[-1] == order
        assert script.told == [first, again]  # what the model read
        row = store.get_effect(f"refund:{order}")
        assert row is not None and row.state.value == "committed" and row.attempt == 1
        if order == "plain_core":  # protected, but LlamaIndex hands the model the exception
            assert done.results[1].tool_output.is_error
            continue
        assert again.startswith(f"already done: refund:{order} committed at ")
        assert again.endswith("; do not retry")
        assert not done.results[1].tool_output.is_error
        assert str(done.output) == "ok"
        _quiet(caplog)
    assert runs == list(ORDERS)  # each body once
    store.close()


def test_refusals_of_every_kind_are_the_tools_result(store_url, mode, caplog):
    store = ctrlrun.open_store(store_url)

    def refund(payment_id: str, amount: int) -> str:
        """Refund a payment."""
        if payment_id == "pi_down":
            raise ConnectionError("the provider hung up")
        return f"refunded {payment_id}"

    made = tool(mode, "above", "stripe.refund", refund, effect="refund:{payment_id}", store=store)
    target, _ = agent(
        [made],
        [("refund", {"payment_id": "pi_1", "amount": 5}, "c1")],
        [("refund", {"payment_id": "pi_1", "amount": 6}, "c2")],  # other arguments
        [("refund", {"payment_id": "pi_down", "amount": 5}, "c3")],  # the tool's own error
        [("refund", {"payment_id": "pi_down", "amount": 5}, "c4")],  # a retry of it
        [("refund", {"payment_id": "", "amount": 5}, "c5")],  # no key can be made
        "ok",
    )
    with caplog.at_level(logging.DEBUG):
        done = run(target)
    ran, conflict, own_error, unknown, invalid = done.said()
    assert ran == "refunded pi_1"
    assert conflict.startswith("conflict: refund:pi_1 was already used with other arguments")
    assert "(amount differ)" in conflict
    assert own_error == "the provider hung up" and done.results[2].tool_output.is_error
    assert unknown.startswith("outcome unknown: refund:pi_down may or may not have happened")
    assert "a person must resolve it" in unknown and unknown.endswith("Do not retry")
    assert invalid.startswith("refused: ") and "Nothing was run" in invalid
    refusals = [done.results[i].tool_output for i in (1, 3, 4)]
    assert not any(out.is_error for out in refusals)
    _quiet(caplog)
    row = store.get_effect("refund:pi_down")
    assert row is not None and row.state.value == "ambiguous"
    store.close()


def test_the_workflow_context_is_not_part_of_the_call(store_url, mode):
    """``Context`` (filled in by FunctionTool, new in every run) is left out of the key and
    the fingerprint: a retry in a new run is a duplicate, or replays."""
    store = ctrlrun.open_store(store_url)
    seen = []

    def refund(ctx: Context, payment_id: str, amount: int) -> str:
        """Refund a payment."""
        seen.append(ctx)
        return f"refunded {payment_id}"

    for replay, pid in ((False, "pi_1"), (True, "pi_2")):
        made = tool(
            mode, "from_defaults", "stripe.refund", refund, effect="refund:{payment_id}",
            store=store, replay=replay,
        )  # fmt: skip
        assert "ctx" not in made.metadata.get_parameters_dict()["properties"]
        args = {"payment_id": pid, "amount": 5}
        first = run(agent([made], [("refund", args, "c1")], "ok")[0])
        again = run(agent([made], [("refund", args, "c2")], "ok")[0])
        assert first.said() == [f"refunded {pid}"] and isinstance(seen[-1], Context)
        (answer,) = again.said()
        if replay:
            assert answer == f"refunded {pid}"  # the stored result, not a second refund
        else:
            assert answer.startswith(f"already done: refund:{pid} committed at ")
        row = store.get_effect(f"refund:{pid}")
        assert row is not None and row.state.value == "committed" and row.attempt == 1
        assert set(row.arg_digests or {}) == {"payment_id", "amount"}
    assert len(seen) == 2
    store.close()


def test_parallel_identical_calls_run_the_body_once(store_url, mode):
    """FunctionAgent runs the calls of one response concurrently: the twin is told "in
    progress" while the real call's body is still running, and that call is neither cancelled
    nor dropped: its result is delivered."""
    store = ctrlrun.open_store(store_url)
    twin_answered = threading.Event()
    runs = []

    async def refund(payment_id: str, amount: int) -> str:
        """Refund a payment."""
        runs.append(payment_id)
        assert await mode.to_thread(twin_answered.wait, 10), "the twin was never answered"
        return f"refunded {payment_id}"

    def person(ev):
        if str(getattr(getattr(ev, "tool_output", None), "content", "")).startswith("in progr"):
            twin_answered.set()

    made = tool(mode, "agent_tools", "stripe.refund", refund, effect="refund:{payment_id}",
                store=store)  # fmt: skip
    args = {"payment_id": "pi_1", "amount": 5}
    target, script = agent([made], [("refund", args, "c1"), ("refund", args, "c2")], "ok")
    done = run(target, person)
    assert runs == ["pi_1"]
    by_call = {r.tool_id: str(r.tool_output.content) for r in done.results}
    answers = sorted(by_call.values())
    assert answers[0].startswith("in progress: refund:pi_1 is being done by another call")
    assert answers[1] == "refunded pi_1"
    assert sorted(script.told) == answers  # both results reached the model
    row = store.get_effect("refund:pi_1")
    assert row is not None and row.state.value == "committed" and row.attempt == 1
    store.close()


def test_wrong_uses_raise_at_decoration(store_url):
    store = ctrlrun.open_store(store_url)

    def refund(payment_id: str) -> str:
        return payment_id

    once = li.protect("stripe.refund", effect="refund:{payment_id}", store=store)(refund)
    with pytest.raises(InvalidArgument, match="already protected"):
        li.protect("stripe.refund2", effect="r:{payment_id}", store=store)(once)
    with pytest.raises(InvalidArgument, match="already protected"):
        li.protect("x", effect="r:{payment_id}", store=store)(FunctionTool.from_defaults(once))
    other = QueryEngineTool.from_defaults(query_engine=object(), name="q", description="d")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="protect the function, then make the tool"):
        li.protect("x", store=store)(other)
    with pytest.raises(EffectKeyError, match="not a parameter"):
        li.protect("x", effect="r:{nope}", store=store)(refund)
    store.close()


def test_the_core_protect_of_a_function_tool_is_this_modules(store_url):
    """``ctrlrun.protect`` given a ``FunctionTool`` hands it to this module (the core's seam
    knows it): a protected ``FunctionTool``, its duplicate answered, never the *args error."""
    store = ctrlrun.open_store(store_url)
    ran = []

    def refund(payment_id: str) -> str:
        ran.append(payment_id)
        return f"refunded {payment_id}"

    guarded = ctrlrun.protect("stripe.refund", effect="refund:{payment_id}", store=store)(
        FunctionTool.from_defaults(refund)
    )
    assert isinstance(guarded, FunctionTool)
    assert guarded.call(payment_id="p1").content == "refunded p1"
    assert guarded.call(payment_id="p1").content.startswith("already done")
    assert ran == ["p1"]
    store.close()


def test_the_core_recognises_the_context_as_injected(store_url):
    """Without the integration too: ``Context`` (and ``Context[State]``) is never in the key,
    the fingerprint or what an approver is shown, and ``decision="approve"`` works on it."""
    store = ctrlrun.open_store(store_url)

    @ctrlrun.protect("r", effect="refund:{payment_id}", store=store, decision="approve")
    def refund(ctx: Context, payment_id: str, other: Optional[Context[dict]] = None) -> str:
        return "ok"

    with pytest.raises(ctrlrun.ApprovalRequired) as info:
        refund(object(), "pi_1")
    assert info.value.arguments == {"payment_id": "pi_1"}
    store.grant_approval(info.value.request_id, by="alice")
    assert refund(object(), "pi_1", other=object()) == "ok"  # another Context: the same call
    with pytest.raises(EffectKeyError, match="fills in"):
        ctrlrun.protect("r", effect="refund:{ctx}", store=store)(refund.__wrapped__)
    store.close()
