"""LangChain tools: protection in either order with ``@tool``; a refusal is the call's answer
(a ``ToolMessage`` with ``status="error"`` for a ``ToolCall``, the text for plain arguments),
never an exception out of ``invoke``; injected parameters are not the call's identity;
``replay`` gives back a ``content_and_artifact`` pair. Every case on SQLite and PostgreSQL,
with sync and async tools."""

from __future__ import annotations

from typing import Annotated, Any, Dict, Tuple

import pytest
from langchain_core.callbacks import Callbacks
from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, InjectedToolCallId, StructuredTool, tool

import ctrlrun
from ctrlrun.errors import InvalidArgument
from ctrlrun.integrations import langchain as lc
from ctrlrun.integrations._common import protected
from tests_py.integrations.test_langchain_support import ORDERS, call, invoke, make_tool


def _refund(runs):
    def refund(payment_id: str, amount: int) -> str:
        """Refund a payment."""
        runs.append((payment_id, amount))
        return f"refunded {amount} on {payment_id}"

    return refund


@pytest.mark.parametrize("order", ORDERS)
def test_either_order_answers_a_refusal_as_a_tool_result(store_url, mode, order):
    store = ctrlrun.open_store(store_url)
    runs: list = []
    t = make_tool(
        mode, order, "billing.refund", _refund(runs), effect="refund:{payment_id}", store=store
    )
    assert (t.name, t.description) == ("refund", "Refund a payment.")
    assert set(t.tool_call_schema.model_json_schema()["properties"]) == {"payment_id", "amount"}
    args = {"payment_id": "pi_1", "amount": 500}
    first = invoke(mode, t, call("refund", args, "call_1"))
    assert isinstance(first, ToolMessage) and first.content == "refunded 500 on pi_1"
    again = invoke(mode, t, call("refund", args, "call_2"))  # the model retries: a new call id
    assert isinstance(again, ToolMessage) and again.tool_call_id == "call_2"
    assert again.content.startswith("already done: refund:pi_1 committed at ")
    assert again.content.endswith("; do not retry")
    if order == "below":  # @tool cannot be told the call's id from below: the text is the result
        assert again.status == "success" and again.artifact is None
    else:
        assert again.status == "error" and again.name == "refund"
        assert again.artifact["refused"] == "committed" and again.artifact["attempt"] == 1
        assert protected(t) is not None and protected(t).action == "billing.refund"
    plain = invoke(mode, t, args)  # invoked with plain arguments: the text
    assert plain == again.content
    assert runs == [("pi_1", 500)]
    assert store.get_effect("refund:pi_1").state.value == "committed"
    store.close()


def test_plain_core_protect_under_tool_still_raises(store_url, mode):
    store = ctrlrun.open_store(store_url)
    runs: list = []
    t = make_tool(
        mode,
        "core_below",
        "billing.refund",
        _refund(runs),
        effect="refund:{payment_id}",
        store=store,
    )
    invoke(mode, t, call("refund", {"payment_id": "pi_1", "amount": 5}))
    with pytest.raises(ctrlrun.DuplicateEffect):
        invoke(mode, t, call("refund", {"payment_id": "pi_1", "amount": 5}))
    assert runs == [("pi_1", 5)]
    store.close()


def test_every_refusal_is_told_not_raised(store_url, mode):
    store = ctrlrun.open_store(store_url)
    broken = []

    def refund(payment_id: str, amount: int) -> str:
        """Refund a payment."""
        if payment_id == "pi_boom":
            broken.append(payment_id)
            raise TimeoutError("no reply from the bank")
        return "refunded"

    t = make_tool(
        mode, "above", "billing.refund", refund, effect="refund:{payment_id}", store=store
    )

    def told(args: Dict[str, Any]) -> ToolMessage:
        out = invoke(mode, t, call("refund", args))
        assert isinstance(out, ToolMessage) and out.status == "error", out
        return out

    invoke(mode, t, call("refund", {"payment_id": "pi_1", "amount": 5}))
    conflict = told({"payment_id": "pi_1", "amount": 6})
    assert conflict.content.startswith(
        "conflict: refund:pi_1 was already used with other arguments (amount differ)"
    )
    assert conflict.artifact["fields"] == ["amount"]
    with pytest.raises(TimeoutError):  # the tool's own error is the framework's to handle
        invoke(mode, t, call("refund", {"payment_id": "pi_boom", "amount": 5}))
    unknown = told({"payment_id": "pi_boom", "amount": 5})
    assert unknown.content.startswith(
        "outcome unknown: refund:pi_boom may or may not have happened"
    )
    assert unknown.artifact["refused"] == "ambiguous" and broken == ["pi_boom"]
    invalid = told({"payment_id": "", "amount": 5})  # no key can be made: a retry could succeed
    assert invalid.content.startswith("refused: ") and invalid.artifact["refused"] == "invalid"

    approve = make_tool(
        mode,
        "above",
        "billing.big_refund",
        refund,
        effect="big:{payment_id}",
        store=store,
        decision="approve",
    )
    waiting = invoke(mode, approve, call("refund", {"payment_id": "pi_2", "amount": 5}, "c9"))
    rid = waiting.artifact["request_id"]  # outside a graph: the model is told it waits
    assert waiting.status == "error" and waiting.content.startswith(f"waiting for approval {rid}: ")
    assert waiting.artifact["arguments"] == {"payment_id": "pi_2", "amount": 5}
    store.deny_approval(rid, by="ops:bob", note="not this one")
    denied = invoke(mode, approve, call("refund", {"payment_id": "pi_2", "amount": 5}))
    assert denied.status == "error" and denied.content.startswith("denied by ops:bob: ")
    assert denied.artifact["denied_by"] == "ops:bob"
    store.close()


def test_injected_parameters_are_not_the_calls_identity(store_url, mode):
    store = ctrlrun.open_store(store_url)
    seen: list = []

    def refund(
        payment_id: str,
        amount: int,
        call_id: Annotated[str, InjectedToolCallId],
        config: RunnableConfig,
        callbacks: Callbacks = None,
    ) -> str:
        """Refund a payment."""
        seen.append(call_id)
        return f"refunded {payment_id}"

    for replay in (False, True):
        t = make_tool(
            mode,
            "above",
            f"r{replay}",
            refund,
            effect=f"{replay}:{{payment_id}}",
            store=store,
            replay=replay,
        )
        args = {"payment_id": "pi_1", "amount": 5}
        assert invoke(mode, t, call("refund", args, f"a{replay}")).content == "refunded pi_1"
        again = invoke(mode, t, call("refund", args, f"b{replay}"))  # new id, new config
        if replay:  # the same consequence: its stored result, for the new call's id
            assert again.status == "success" and again.content == "refunded pi_1"
        else:  # a duplicate, not EffectConflict
            assert again.status == "error" and again.artifact["refused"] == "committed"
        assert again.tool_call_id == f"b{replay}"
    assert seen == ["aFalse", "aTrue"]

    gated = make_tool(
        mode, "above", "g", refund, effect="g:{payment_id}", store=store, decision="approve"
    )
    waiting = invoke(mode, gated, call("refund", {"payment_id": "pi_1", "amount": 5}, "c1"))
    assert waiting.artifact["arguments"] == {"payment_id": "pi_1", "amount": 5}  # what is shown
    retry = invoke(mode, gated, call("refund", {"payment_id": "pi_1", "amount": 5}, "c2"))
    assert retry.artifact["request_id"] == waiting.artifact["request_id"]  # the same request
    store.close()


@pytest.mark.parametrize("order", ("above", "below"))
def test_replay_gives_back_content_and_artifact(store_url, mode, order):
    store = ctrlrun.open_store(store_url)
    runs: list = []

    def charge(payment_id: str) -> Tuple[str, Dict[str, Any]]:
        """Charge a payment."""
        runs.append(payment_id)
        return f"charged {payment_id}", {"charge": "ch_" + payment_id, "cents": 500}

    def charge_plain(payment_id: str):
        """Charge a payment."""
        runs.append(payment_id)
        return f"charged {payment_id}", {"charge": "ch_" + payment_id, "cents": 500}

    body = charge if order == "below" else charge_plain  # below, only the annotation tells
    t = make_tool(
        mode,
        order,
        "pay",
        body,
        effect="charge:{payment_id}",
        store=store,
        replay=True,
        response_format="content_and_artifact",
    )
    for call_id in ("c1", "c2"):
        out = invoke(mode, t, call(t.name, {"payment_id": "pi_1"}, call_id))
        assert (out.content, out.artifact, out.tool_call_id) == (
            "charged pi_1",
            {"charge": "ch_pi_1", "cents": 500},
            call_id,
        )
        assert out.status == "success"
    assert invoke(mode, t, {"payment_id": "pi_1"}) == "charged pi_1"
    assert runs == ["pi_1"]
    store.close()


def test_only_a_structured_tool_is_protected_and_once(store_url):
    @tool(infer_schema=False)
    def single(text: str) -> str:
        """One string in."""
        return text

    class Lookup(BaseTool):  # a program's own tool class
        name: str = "lookup"
        description: str = "Look a payment up."

        def _run(self, payment_id: str) -> str:
            return payment_id

    for other, protect in ((single, lc.protect), (Lookup(), ctrlrun.protect)):
        with pytest.raises(InvalidArgument, match="below @tool"):
            protect("s", effect="s:{text}", store=store_url)(other)

    @tool
    @lc.protect("r", effect="r:{payment_id}", store=store_url)
    def refund(payment_id: str) -> str:
        """Refund."""
        return "ok"

    @lc.protect("r", effect="r:{payment_id}", store=store_url)
    @tool
    def refund_above(payment_id: str) -> str:
        """Refund."""
        return "ok"

    for t in (refund, refund_above):  # under @tool, or above it: protected once
        with pytest.raises(InvalidArgument, match="already protected as 'r'"):
            ctrlrun.protect("r2", effect="r:{payment_id}", store=store_url)(t)

    both = StructuredTool.from_function(
        func=lambda payment_id: "sync", coroutine=None, name="x", description="x"
    )
    protected_both = lc.protect_tool(both, "x", {"effect": "x:{payment_id}", "store": store_url})
    assert isinstance(protected_both, lc.ProtectedStructuredTool)
    assert protected_both.invoke({"payment_id": "p"}) == "sync"
    assert protected_both.invoke({"payment_id": "p"}).startswith("already done: x:p")
