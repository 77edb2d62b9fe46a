"""The Claude Agent SDK's in-process ``@tool`` tools protected by ctrlrun, in real sessions of the
SDK's bundled CLI against a scripted Messages API (tests_py/support/anthropic_scripted.py), on
SQLite and PostgreSQL: the effect template binds to the args dict's keys, twin calls in one
turn run the body once, refusals are tool results in the gateway's words, and a wrong
decorator order raises at decoration."""

from __future__ import annotations

import logging
import time
from typing import Any, Dict, NotRequired, TypedDict  # the SDK reads typing's TypedDict

import pytest
from claude_agent_sdk import tool

import ctrlrun
from ctrlrun.errors import EffectKeyError, InvalidArgument, NotExecuted
from ctrlrun.integrations import claude_agent_sdk as cas
from tests_py.integrations.test_claude_agent_sdk_support import (
    REFUND,
    refund_call,
    refund_tool,
    session,
    text,
)
from tests_py.support.anthropic_scripted import tool_use


class Charge(TypedDict):
    order_id: str
    note: NotRequired[str]


def state(store: Any, key: str) -> str:
    row = store.get_effect(key)
    return "none" if row is None else row.state.value


def test_twin_calls_in_one_turn_run_the_body_once(store_url, tmp_path, caplog):
    store = ctrlrun.open_store(store_url)
    runs: list = []
    refund = refund_tool(runs, store=store_url)
    first, twin = refund_call(call_id="toolu_a"), refund_call(call_id="toolu_b")
    with caplog.at_level(logging.WARNING):
        api = session(tmp_path, [refund], [[text("refunding"), first, twin]])
    assert runs == [{"payment_id": "pi_1", "amount": 500}]
    assert api.result_text("toolu_a") == "refunded pi_1"
    told = api.result_text("toolu_b")
    assert told.startswith("already done: refund:pi_1 committed at ") and "do not retry" in told
    assert "call the tool again" not in told  # no retry hint appended by the CLI
    (b,) = [r for r in api.tool_results() if r["tool_use_id"] == "toolu_b"]
    assert b.get("is_error") is True
    assert state(store, "refund:pi_1") == "committed"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]

    # a later session asking again is told the same, and the body does not run
    api = session(tmp_path, [refund], [[refund_call(call_id="toolu_c")]])
    assert api.result_text("toolu_c").startswith("already done: refund:pi_1")
    assert len(runs) == 1


def test_concurrent_twins_one_runs_the_other_is_told_in_progress(store_url, tmp_path):
    store = ctrlrun.open_store(store_url)
    runs: list = []
    refund = refund_tool(runs, parallel=True, store=store_url)
    twins = [refund_call(call_id="toolu_a"), refund_call(call_id="toolu_b")]
    started = time.monotonic()
    api = session(tmp_path, [refund], [twins])
    assert time.monotonic() - started < 30
    assert runs == [{"payment_id": "pi_1", "amount": 500}]
    told = {r["tool_use_id"]: api.result_text(r["tool_use_id"]) for r in api.tool_results()}
    assert sorted(told.values())[1] == "refunded pi_1"  # the real call ran to its end
    twin = sorted(told.values())[0]
    assert twin.startswith("in progress: refund:pi_1 is being done by another call")
    assert twin.endswith("do not retry now")
    assert state(store, "refund:pi_1") == "committed"


def test_the_key_and_fingerprint_bind_to_the_dict_keys(store_url, tmp_path):
    store = ctrlrun.open_store(store_url)
    runs: list = []
    refund = refund_tool(runs, store=store_url)
    turns = [
        [refund_call("pi_1", 500, "toolu_1"), refund_call("pi_2", 500, "toolu_2")],
        [refund_call("pi_1", 999, "toolu_3")],  # the same key, another amount
    ]
    api = session(tmp_path, [refund], turns)
    assert [r["payment_id"] for r in runs] == ["pi_1", "pi_2"]
    assert api.result_text("toolu_2") == "refunded pi_2"
    told = api.result_text("toolu_3")
    assert told.startswith("conflict: refund:pi_1 was already used with other arguments")
    assert "amount" in told
    record = store.get_effect("refund:pi_1")
    assert record is not None and record.action == "stripe.refund"


def test_an_ambiguous_outcome_is_told_and_never_run_again(store_url, tmp_path, caplog):
    store = ctrlrun.open_store(store_url)
    runs: list = []
    refund = refund_tool(runs, fail=RuntimeError("gateway timed out"), store=store_url)
    with caplog.at_level(logging.WARNING):
        api = session(
            tmp_path, [refund], [[refund_call(call_id="toolu_1")], [refund_call(call_id="toolu_2")]]
        )
    assert len(runs) == 1
    assert "gateway timed out" in api.result_text("toolu_1")  # the tool's own error
    told = api.result_text("toolu_2")
    assert told.startswith("outcome unknown: refund:pi_1 may or may not have happened")
    assert "a person must resolve it" in told and "Do not retry" in told
    assert state(store, "refund:pi_1") == "ambiguous"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_not_executed_leaves_the_key_failed_and_a_retry_runs(store_url, tmp_path):
    store = ctrlrun.open_store(store_url)
    runs: list = []
    declined = refund_tool(runs, fail=NotExecuted("card network down"), store=store_url)
    api = session(tmp_path, [declined], [[refund_call(call_id="toolu_1")]])
    assert "card network down" in api.result_text("toolu_1")
    assert state(store, "refund:pi_1") == "failed"

    works = refund_tool(runs, store=store_url)
    api = session(tmp_path, [works], [[refund_call(call_id="toolu_2")]])
    assert api.result_text("toolu_2") == "refunded pi_1"
    assert len(runs) == 2 and state(store, "refund:pi_1") == "committed"


def test_keys_the_schema_does_not_list_are_refused_before_anything_is_reserved(store_url, tmp_path):
    store = ctrlrun.open_store(store_url)
    runs: list = []
    refund = refund_tool(runs, store=store_url)
    odd = tool_use(REFUND, {"payment_id": "pi_1", "amount": 5, "reason": "x"}, "toolu_1")
    api = session(tmp_path, [refund], [[odd]])
    told = api.result_text("toolu_1")
    assert told.startswith("refused: unknown argument(s) reason;") and "Nothing was run" in told
    assert runs == [] and state(store, "refund:pi_1") == "none"


def test_json_schema_and_typeddict_schemas_optional_keys(store_url, tmp_path):
    runs: list = []

    schema = {
        "type": "object",
        "properties": {"order_id": {"type": "string"}, "note": {"type": "string"}},
        "required": ["order_id"],
    }
    made = []
    for n, input_schema in enumerate((schema, Charge)):

        @cas.protect(f"shop.charge{n}", effect="charge:{order_id}", store=store_url)
        @tool(f"charge{n}", "Charge an order.", input_schema)
        async def charge(args: Dict[str, Any]) -> Dict[str, Any]:
            runs.append(dict(args))
            return {"content": [{"type": "text", "text": f"charged {args['order_id']}"}]}

        made.append(charge)
    turns = [
        [tool_use("mcp__pay__charge0", {"order_id": "o1"}, "toolu_1")],
        [tool_use("mcp__pay__charge1", {"order_id": "o2", "note": "gift"}, "toolu_2")],
        [tool_use("mcp__pay__charge1", {"order_id": "o2", "note": "gift"}, "toolu_3")],
    ]
    api = session(tmp_path, made, turns)
    assert runs == [{"order_id": "o1"}, {"order_id": "o2", "note": "gift"}]  # the dict as sent
    assert api.result_text("toolu_1") == "charged o1"
    assert api.result_text("toolu_3").startswith("already done: charge:o2")


def test_the_protected_tool_keeps_what_the_model_sees():
    @tool("refund", "Refund a payment.", {"payment_id": str, "amount": int})
    async def refund(args: Dict[str, Any]) -> Dict[str, Any]:
        return {"content": []}

    protected = cas.protect("stripe.refund", effect="refund:{payment_id}")(refund)
    assert (protected.name, protected.description, protected.input_schema) == (
        refund.name,
        refund.description,
        refund.input_schema,
    )
    assert protected.annotations == refund.annotations
    assert ctrlrun.integrations._common.protected(protected.handler).action == "stripe.refund"


def test_a_wrong_decorator_order_raises_at_decoration_naming_the_right_one():
    with pytest.raises(InvalidArgument, match=r"ABOVE @tool") as raised:

        @tool("refund", "Refund a payment.", {"payment_id": str})
        @cas.protect("stripe.refund", effect="refund:{payment_id}")
        async def refund(args: Dict[str, Any]) -> Dict[str, Any]:
            return {"content": []}

    assert "*args" not in str(raised.value) and "builtin" not in str(raised.value)

    # the core decorator is never silently off either: under @tool it refuses at decoration;
    # above it, the core's seam hands the tool to this module (the args dict's keys bind)
    with pytest.raises(EffectKeyError, match="not a parameter"):

        @tool("refund", "Refund a payment.", {"payment_id": str})
        @ctrlrun.protect("stripe.refund", effect="refund:{payment_id}")
        async def refund2(args: Dict[str, Any]) -> Dict[str, Any]:
            return {"content": []}

    @ctrlrun.protect("stripe.refund", effect="refund:{payment_id}")
    @tool("refund", "Refund a payment.", {"payment_id": str})
    async def refund3(args: Dict[str, Any]) -> Dict[str, Any]:
        return {"content": []}

    assert cas._ours(refund3) is not None and refund3.name == "refund"


def test_decoration_refuses_what_cannot_be_bound():
    with pytest.raises(EffectKeyError, match="'order_id', which is not a parameter"):

        @cas.protect("stripe.refund", effect="refund:{order_id}")
        @tool("refund", "Refund a payment.", {"payment_id": str})
        async def refund(args: Dict[str, Any]) -> Dict[str, Any]:
            return {"content": []}

    with pytest.raises(InvalidArgument, match="cannot name a parameter"):

        @cas.protect("stripe.refund", effect="refund:{id}")
        @tool("refund", "Refund a payment.", {"id": str, "payment-id": str})
        async def refund2(args: Dict[str, Any]) -> Dict[str, Any]:
            return {"content": []}

    @tool("refund", "Refund a payment.", {"payment_id": str})
    async def refund3(args: Dict[str, Any]) -> Dict[str, Any]:
        return {"content": []}

    once = cas.protect("stripe.refund", effect="refund:{payment_id}")(refund3)
    with pytest.raises(InvalidArgument, match="already protected"):
        cas.protect("stripe.refund", effect="refund:{payment_id}")(once)
