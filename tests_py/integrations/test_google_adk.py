"""ctrlrun.integrations.google_adk against the real ADK agent loop (``InMemoryRunner``) driven by
a scripted ``BaseLlm``: refusals are tool results and the run goes on, parallel twins run the
body once without cancelling the real call, ADK's ToolContext is never part of a call's
identity, and the decoration orders. Every case on SQLite and PostgreSQL, sync and async tools."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, List

import pytest
from google.adk.tools import FunctionTool, ToolContext

import ctrlrun
from ctrlrun.errors import DuplicateEffect, InvalidArgument, NotExecuted
from ctrlrun.integrations.google_adk import Refusals, protect, tool
from tests_py.integrations.adk_support import Run


def refund_body(mode: Any, ran: List[str], pause: float = 0.0) -> Callable[..., Any]:
    """The tool's body, sync or async: records that it ran, after ``pause`` seconds."""
    if mode.is_async:

        async def refund(payment_id: str) -> str:
            """Refund a payment."""
            await asyncio.sleep(pause)
            ran.append(payment_id)
            return f"refunded {payment_id}"

        return refund

    def refund(payment_id: str) -> str:  # type: ignore[no-redef]
        """Refund a payment."""
        time.sleep(pause)
        ran.append(payment_id)
        return f"refunded {payment_id}"

    return refund


def final_text(run: Run) -> str:
    texts = [p.text for e in run.events for p in (e.content.parts if e.content else []) if p.text]
    return texts[-1] if texts else ""


def declared_parameters(adk_tool: FunctionTool) -> set:
    """The parameters ADK declares to the model for ``adk_tool``."""
    declared = adk_tool._get_declaration()
    if declared.parameters is not None:
        return set(declared.parameters.properties)
    return set(declared.parameters_json_schema["properties"])


def no_error_logs(caplog: Any) -> None:
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not bad, [r.getMessage() for r in bad]


def test_a_duplicate_is_the_tools_result_and_the_run_goes_on(store_url, store, mode, caplog):
    ran: List[str] = []
    refund = protect("stripe.refund", effect="refund:{payment_id}", store=store_url)(
        refund_body(mode, ran)
    )
    first = Run([refund], [[("refund", {"payment_id": "p1"})], "done"])
    first.say()
    second = Run([refund], [[("refund", {"payment_id": "p1"})], "told"])
    second.say()

    assert ran == ["p1"]
    assert first.model.results("refund") == ["refunded p1"]
    [told] = second.model.results("refund")
    assert told.startswith("already done: refund:p1 committed at ")
    assert told.endswith("; do not retry")
    assert final_text(second) == "told"  # the run went on to the model's answer
    assert store.get_effect("refund:p1").state.value == "committed"
    no_error_logs(caplog)


def test_without_the_integration_a_refusal_escapes_the_run(store_url, mode):
    """The user's report: a function protected only with ``ctrlrun.protect`` loses the run on
    its first refusal (ADK raises it out of ``run_async``); :func:`tool` answers it."""
    ran: List[str] = []
    core = ctrlrun.protect("stripe.refund", effect="refund:{payment_id}", store=store_url)(
        refund_body(mode, ran)
    )
    Run([core], [[("refund", {"payment_id": "p1"})], "done"]).say()
    with pytest.raises(DuplicateEffect):
        Run([core], [[("refund", {"payment_id": "p1"})], "lost"]).say()
    again = Run([tool(core)], [[("refund", {"payment_id": "p1"})], "told"])
    again.say()
    assert again.model.results("refund")[0].startswith("already done: refund:p1")
    assert final_text(again) == "told"
    assert ran == ["p1"]


def test_the_refusals_plugin_answers_functions_protected_with_ctrlrun_protect(
    store_url, store, mode, caplog
):
    ran: List[str] = []
    core = ctrlrun.protect("stripe.refund", effect="refund:{payment_id}", store=store_url)(
        refund_body(mode, ran, pause=0.2)
    )
    twins = [("refund", {"payment_id": "p1"}), ("refund", {"payment_id": "p1"})]
    run = Run([core], [twins, [("refund", {"payment_id": "p1"})], "told"], plugins=[Refusals()])
    run.say()

    assert ran == ["p1"]
    told = run.model.results("refund")
    assert "refunded p1" in told and told[-1].startswith("already done: refund:p1")
    assert final_text(run) == "told"
    assert store.get_effect("refund:p1").state.value == "committed"
    no_error_logs(caplog)


def test_parallel_identical_calls_run_the_body_once_and_the_real_call_finishes(
    store_url, store, mode, caplog
):
    ran: List[str] = []
    refund = protect("stripe.refund", effect="refund:{payment_id}", store=store_url)(
        refund_body(mode, ran, pause=0.2)
    )
    twins = [("refund", {"payment_id": "p1"}), ("refund", {"payment_id": "p1"})]
    run = Run([refund], [twins, "done"])
    run.say()

    assert ran == ["p1"]
    told = run.model.results("refund")
    assert len(told) == 2 and "refunded p1" in told  # the real call's result reached the model
    [twin] = [t for t in told if t != "refunded p1"]
    # async calls overlap (the twin meets the live lease); sync ones run one after the other
    assert twin.startswith(("in progress: refund:p1", "already done: refund:p1"))
    assert "do not retry" in twin
    record = store.get_effect("refund:p1")
    assert record.state.value == "committed" and record.attempt == 1
    assert final_text(run) == "done"
    no_error_logs(caplog)


def test_sync_twins_on_adks_tool_thread_pool_run_the_body_once(store_url, store, caplog):
    """With ``RunConfig.tool_thread_pool_config``, sync calls of one response run at once on
    worker threads: the twin meets the live lease and is told so; the real call finishes."""
    from google.adk.agents.run_config import RunConfig, ToolThreadPoolConfig

    ran: List[str] = []

    @protect("stripe.refund", effect="refund:{payment_id}", store=store_url)
    def refund(payment_id: str) -> str:
        time.sleep(0.3)
        ran.append(payment_id)
        return f"refunded {payment_id}"

    twins = [("refund", {"payment_id": "p1"}), ("refund", {"payment_id": "p1"})]
    pool = RunConfig(tool_thread_pool_config=ToolThreadPoolConfig(max_workers=2))
    run = Run([refund], [twins, "done"], run_config=pool)
    run.say()

    assert ran == ["p1"]
    told = sorted(run.model.results("refund"))
    assert told[0].startswith("in progress: refund:p1") and told[1] == "refunded p1"
    assert store.get_effect("refund:p1").state.value == "committed"
    no_error_logs(caplog)


def test_a_key_the_arguments_cannot_make_is_a_result(store_url, store, mode):
    ran: List[str] = []
    refund = protect("stripe.refund", effect="refund:{payment_id}", store=store_url)(
        refund_body(mode, ran)
    )
    run = Run([refund], [[("refund", {"payment_id": ""})], "done"])
    run.say()
    [told] = run.model.results("refund")
    assert told.startswith("refused: ") and "Nothing was run" in told
    assert ran == [] and final_text(run) == "done"


def test_an_ambiguous_key_is_refused_for_a_person_to_resolve(store_url, store, mode):
    ran: List[str] = []

    @protect("stripe.refund", effect="refund:{payment_id}", store=store_url)
    def refund(payment_id: str) -> str:
        ran.append(payment_id)
        raise RuntimeError("the bank timed out")

    with pytest.raises(RuntimeError):
        Run([refund], [[("refund", {"payment_id": "p1"})], "done"]).say()
    assert store.get_effect("refund:p1").state.value == "ambiguous"
    run = Run([refund], [[("refund", {"payment_id": "p1"})], "told"])
    run.say()
    [told] = run.model.results("refund")
    assert told.startswith("outcome unknown: refund:p1") and "a person must resolve" in told
    assert ran == ["p1"]


def test_not_executed_is_a_failure_the_model_may_retry(store_url, store, mode):
    calls: List[int] = []

    if mode.is_async:

        async def refund(payment_id: str) -> str:
            calls.append(1)
            if len(calls) == 1:
                raise NotExecuted("card declined before charging")
            return f"refunded {payment_id}"

    else:

        def refund(payment_id: str) -> str:  # type: ignore[no-redef]
            calls.append(1)
            if len(calls) == 1:
                raise NotExecuted("card declined before charging")
            return f"refunded {payment_id}"

    guarded = protect("stripe.refund", effect="refund:{payment_id}", store=store_url)(refund)
    call = [("refund", {"payment_id": "p1"})]
    run = Run([guarded], [call, call, "done"])
    run.say()
    first, second = run.model.results("refund")
    assert first.startswith("failed: card declined before charging; refund:p1 recorded failed")
    assert second == "refunded p1"
    record = store.get_effect("refund:p1")
    assert record.state.value == "committed" and record.attempt == 2


@pytest.mark.parametrize("annotated", [True, False])
def test_the_tool_context_is_never_part_of_the_key_or_fingerprint(
    store_url, store, mode, annotated
):
    ran: List[str] = []
    seen: List[Any] = []

    def note(payment_id: str, tool_context: Any) -> str:
        seen.append(tool_context)
        ran.append(payment_id)
        return f"refunded {payment_id}"

    if mode.is_async:

        async def refund(payment_id: str, tool_context: ToolContext) -> str:
            return note(payment_id, tool_context)

    else:

        def refund(payment_id: str, tool_context: ToolContext) -> str:  # type: ignore[no-redef]
            return note(payment_id, tool_context)

    if not annotated:  # ADK injects a parameter named tool_context without an annotation too
        refund.__annotations__.pop("tool_context")
    guarded = protect("stripe.refund", effect="refund:{payment_id}", store=store_url)(refund)
    Run([guarded], [[("refund", {"payment_id": "p1"})], "done"]).say()
    again = Run([guarded], [[("refund", {"payment_id": "p1"})], "told"])
    again.say()  # another run, another ToolContext: the same call, not a conflict

    assert ran == ["p1"] and isinstance(seen[0], ToolContext)
    assert again.model.results("refund")[0].startswith("already done: refund:p1")
    record = store.get_effect("refund:p1")
    assert set(record.arg_digests) == {"payment_id"}
    assert declared_parameters(FunctionTool(guarded)) == {"payment_id"}


def test_a_function_tool_is_protected_with_its_name_and_description(store_url, store, mode):
    ran: List[str] = []
    original = FunctionTool(refund_body(mode, ran))
    original.name = "refund_payment"
    original.description = "Refund a customer's payment."
    guarded = protect("stripe.refund", effect="refund:{payment_id}", store=store_url)(original)
    assert isinstance(guarded, FunctionTool) and guarded is not original
    assert (guarded.name, guarded.description) == ("refund_payment", original.description)
    # what the model is shown is the original's (ADK declares the function's own name)
    assert guarded._get_declaration() == original._get_declaration()
    assert declared_parameters(guarded) == {"payment_id"}

    call = [("refund_payment", {"payment_id": "p1"})]
    run = Run([guarded], [call, call, "done"])
    run.say()
    first, second = run.model.results("refund_payment")
    assert first == "refunded p1" and second.startswith("already done: refund:p1")
    assert ran == ["p1"]


def test_the_core_protect_of_a_function_tool_is_this_modules(store_url, mode):
    """``ctrlrun.protect`` given an ADK ``FunctionTool`` hands it to this module (the core's
    seam knows it): the same protected copy, refusals as the tool's result."""
    ran: List[str] = []
    guarded = ctrlrun.protect("stripe.refund", effect="refund:{payment_id}", store=store_url)(
        FunctionTool(refund_body(mode, ran))
    )
    assert isinstance(guarded, FunctionTool)
    call = [(guarded.name, {"payment_id": "p2"})]
    run = Run([guarded], [call, call, "done"])
    run.say()
    first, second = run.model.results(guarded.name)
    assert first == "refunded p2" and second.startswith("already done: refund:p2")
    assert ran == ["p2"]


def test_protecting_twice_is_refused_at_decoration(store_url):
    def refund(payment_id: str) -> str:
        return payment_id

    core = ctrlrun.protect("stripe.refund", effect="refund:{payment_id}", store=store_url)(refund)
    with pytest.raises(InvalidArgument, match=r"already protected.*google_adk\.tool"):
        protect("stripe.refund", effect="refund:{payment_id}")(core)
    with pytest.raises(InvalidArgument, match="already protected"):
        protect("stripe.refund", effect="refund:{payment_id}")(FunctionTool(core))
    from google.adk.tools import LongRunningFunctionTool

    with pytest.raises(InvalidArgument, match=r"LongRunningFunctionTool\(google_adk\.protect"):
        protect("stripe.refund", effect="refund:{payment_id}")(LongRunningFunctionTool(refund))
    with pytest.raises(InvalidArgument, match="is not protected"):
        tool(refund)
    ready = tool(core)
    assert tool(ready) is ready
