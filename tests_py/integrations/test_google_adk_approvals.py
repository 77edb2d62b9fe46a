"""ctrlrun approvals as ADK tool confirmations, in the real ADK agent loop driven by a scripted
``BaseLlm``: asked BEFORE the body runs, the user's confirmation recorded as the ctrlrun grant
(a rejection as its denial) and the approved call run once; a body that asks for confirmation
itself (``tool_context.request_confirmation()``) leaves its key ``failed``, never committed, and
the confirmed call runs once. Every case on SQLite and PostgreSQL, sync and async tools."""

from __future__ import annotations

from typing import Any, Callable, List

import pytest
from google.adk.tools import FunctionTool, ToolContext

import ctrlrun
from ctrlrun.integrations.google_adk import DEFAULT_APPROVER, protect, tool
from tests_py.integrations.adk_support import Run

CALL = [("refund", {"payment_id": "p1", "amount": 30})]


def refund_body(mode: Any, ran: List[str], with_context: bool = False) -> Callable[..., Any]:
    """The tool's body, sync or async (taking the ToolContext when ``with_context``)."""
    if with_context:
        if mode.is_async:

            async def refund(payment_id: str, amount: int, tool_context: ToolContext) -> str:
                ran.append(payment_id)
                return f"refunded {amount} on {payment_id}"

            return refund

        def refund(payment_id: str, amount: int, tool_context: ToolContext) -> str:  # type: ignore[no-redef]
            ran.append(payment_id)
            return f"refunded {amount} on {payment_id}"

        return refund
    if mode.is_async:

        async def refund(payment_id: str, amount: int) -> str:  # type: ignore[no-redef]
            ran.append(payment_id)
            return f"refunded {amount} on {payment_id}"

        return refund

    def refund(payment_id: str, amount: int) -> str:  # type: ignore[no-redef]
        ran.append(payment_id)
        return f"refunded {amount} on {payment_id}"

    return refund


def approve_tool(store_url: str, mode: Any, ran: List[str], **kw: Any) -> Any:
    with_context = kw.pop("with_context", False)
    return protect(
        "stripe.refund", effect="refund:{payment_id}", decision="approve", store=store_url, **kw
    )(refund_body(mode, ran, with_context))


def test_an_approval_is_an_adk_confirmation_asked_before_the_body(store_url, store, mode):
    ran: List[str] = []
    run = Run([approve_tool(store_url, mode, ran, with_context=True)], [CALL, "asked", "done"])
    asked = run.confirmations(run.say())

    assert ran == [] and store.get_effect("refund:p1") is None  # nothing reserved or run
    [request] = store.list_approvals()
    assert request.state.value == "pending"
    assert request.arguments == {"payment_id": "p1", "amount": 30}  # no ToolContext shown
    [told] = run.model.results("refund")
    assert told.startswith(f"waiting for approval {request.request_id}: stripe.refund")
    [confirmation] = asked
    assert confirmation.args["originalFunctionCall"]["name"] == "refund"
    payload = confirmation.args["toolConfirmation"]["payload"]["ctrlrun"]
    assert payload["request_id"] == request.request_id
    assert payload["arguments"] == {"payment_id": "p1", "amount": 30}

    run.confirm(asked, confirmed=True)
    assert ran == ["p1"]
    assert run.model.results("refund")[-1] == "refunded 30 on p1"
    record = store.get_effect("refund:p1")
    assert record.state.value == "committed" and record.approval_id == request.request_id
    decided = store.get_approval(request.request_id)
    assert decided.state.value == "used" and decided.decided_by == DEFAULT_APPROVER
    assert "confirmed in a Google ADK run" in (decided.note or "")


def test_a_rejected_confirmation_is_a_ctrlrun_denial(store_url, store, mode):
    ran: List[str] = []
    guarded = approve_tool(store_url, mode, ran, approved_by=lambda ctx: "alice")
    run = Run([guarded], [CALL, "asked", "done"])
    asked = run.confirmations(run.say())
    run.confirm(asked, confirmed=False)

    assert ran == [] and store.get_effect("refund:p1") is None
    [request] = store.list_approvals()
    assert request.state.value == "denied" and request.decided_by == "alice"
    told = run.model.results("refund")[-1]
    assert told.startswith("denied by alice") and told.endswith("Do not retry")


def test_a_grant_made_in_ctrlrun_meanwhile_stands(store_url, store, mode):
    ran: List[str] = []
    run = Run([approve_tool(store_url, mode, ran, approved_by="bob")], [CALL, "asked", "done"])
    asked = run.confirmations(run.say())
    [request] = store.list_approvals()
    store.grant_approval(request.request_id, "carol", "granted on the console")

    run.confirm(asked, confirmed=True)
    assert ran == ["p1"]
    decided = store.get_approval(request.request_id)
    assert decided.decided_by == "carol" and decided.state.value == "used"


def test_parallel_twins_needing_approval_run_once_after_the_confirmation(store_url, store, mode):
    ran: List[str] = []
    run = Run([approve_tool(store_url, mode, ran)], [CALL + CALL, "asked", "done"])
    asked = run.confirmations(run.say())

    assert len(asked) == 2 and ran == []
    [request] = store.list_approvals()  # one request for the one consequence
    ids = {c.args["toolConfirmation"]["payload"]["ctrlrun"]["request_id"] for c in asked}
    assert ids == {request.request_id}

    run.confirm(asked, confirmed=True)
    assert ran == ["p1"]
    told = run.model.results("refund")[-2:]
    assert "refunded 30 on p1" in told
    [twin] = [t for t in told if t != "refunded 30 on p1"]
    assert twin.startswith(("already done: refund:p1", "in progress: refund:p1"))
    assert store.get_effect("refund:p1").state.value == "committed"


def test_a_function_tool_require_confirmation_is_recorded_as_the_grant(store_url, store, mode):
    """ADK's own gate asks first; its confirmation grants the ctrlrun request."""
    ran: List[str] = []
    core = ctrlrun.protect(
        "stripe.refund", effect="refund:{payment_id}", decision="approve", store=store_url
    )(refund_body(mode, ran))
    gated = FunctionTool(tool(core, approved_by="dana"), require_confirmation=True)
    run = Run([gated], [CALL, "asked", "done"])
    asked = run.confirmations(run.say())
    assert len(asked) == 1 and ran == []

    run.confirm(asked, confirmed=True)
    assert ran == ["p1"]
    [request] = store.list_approvals()
    assert request.state.value == "used" and request.decided_by == "dana"


def in_body_confirmation(mode: Any, ran: List[str]) -> Callable[..., Any]:
    """A body that asks the user itself, and acts once confirmed."""
    if mode.is_async:

        async def send(to: str, tool_context: ToolContext) -> str:
            if not tool_context.tool_confirmation:
                tool_context.request_confirmation(hint=f"send the invoice to {to}?")
                return "asked the user"
            ran.append(to)
            return f"sent to {to}"

        return send

    def send(to: str, tool_context: ToolContext) -> str:  # type: ignore[no-redef]
        if not tool_context.tool_confirmation:
            tool_context.request_confirmation(hint=f"send the invoice to {to}?")
            return "asked the user"
        ran.append(to)
        return f"sent to {to}"

    return send


def test_a_pause_inside_the_body_leaves_the_key_failed_and_runs_once_confirmed(
    store_url, store, mode
):
    ran: List[str] = []
    send = protect("mail.send", effect="invoice:{to}", store=store_url)(
        in_body_confirmation(mode, ran)
    )
    call = [("send", {"to": "bob"})]
    run = Run([send], [call, "asked", "done", call, "again"])
    asked = run.confirmations(run.say())

    assert [c.args["toolConfirmation"]["hint"] for c in asked] == ["send the invoice to bob?"]
    paused = store.get_effect("invoice:bob")
    assert paused.state.value == "failed"  # not committed: nothing was sent
    assert run.model.results("send") == ["asked the user"]

    run.confirm(asked, confirmed=True)
    assert ran == ["bob"]
    assert run.model.results("send")[-1] == "sent to bob"
    record = store.get_effect("invoice:bob")
    assert record.state.value == "committed" and record.attempt == 2

    run.say("send it again")  # the model calls again: refused, never asked again
    assert run.model.results("send")[-1].startswith("already done: invoice:bob")
    assert ran == ["bob"]


@pytest.mark.filterwarnings("ignore:This method is deprecated:DeprecationWarning")  # ADK's own
def test_a_body_asking_for_a_credential_leaves_the_key_failed(store_url, store, mode):
    """``tool_context.request_credential()`` is a pause too: the call did nothing yet."""
    from fastapi.openapi.models import APIKey, APIKeyIn
    from google.adk.auth.auth_credential import AuthCredential, AuthCredentialTypes
    from google.adk.auth.auth_tool import AuthConfig

    config = AuthConfig(
        auth_scheme=APIKey(**{"in": APIKeyIn.header, "name": "X-Key"}),
        raw_auth_credential=AuthCredential(auth_type=AuthCredentialTypes.API_KEY, api_key="k"),
    )
    ran: List[str] = []

    def body(to: str, tool_context: ToolContext) -> str:
        if tool_context.get_auth_response(config) is None:
            tool_context.request_credential(config)
            return "waiting for the user's credential"
        ran.append(to)
        return f"sent to {to}"

    if mode.is_async:

        async def send(to: str, tool_context: ToolContext) -> str:
            return body(to, tool_context)

    else:

        def send(to: str, tool_context: ToolContext) -> str:  # type: ignore[no-redef]
            return body(to, tool_context)

    guarded = protect("mail.send", effect="invoice:{to}", store=store_url)(send)
    run = Run([guarded], [[("send", {"to": "bob"})], "asked"])
    events = run.say()
    asked = [fc for e in events for fc in (e.get_function_calls() or [])]
    assert any(fc.name == "adk_request_credential" for fc in asked)
    assert ran == [] and store.get_effect("invoice:bob").state.value == "failed"


def test_an_approval_the_policy_asks_is_an_adk_confirmation(
    store_url, store, mode, tmp_path, monkeypatch
):
    policy = tmp_path / "ctrlrun.yaml"
    policy.write_text(
        "schema: ctrlrun.policy/v2\nactions:\n  stripe.refund:\n    decision: approve\n"
    )
    monkeypatch.setenv("CTRLRUN_CONFIG", str(policy))
    ran: List[str] = []
    guarded = protect("stripe.refund", effect="refund:{payment_id}", store=store_url)(
        refund_body(mode, ran)
    )
    run = Run([guarded], [CALL, "asked", "done"])
    asked = run.confirmations(run.say())
    assert len(asked) == 1 and ran == []
    run.confirm(asked, confirmed=True)
    assert ran == ["p1"] and store.get_effect("refund:p1").state.value == "committed"


def test_a_function_tools_own_require_confirmation_is_kept(store_url, store, mode):
    """``protect`` given a ``FunctionTool`` keeps its ``require_confirmation`` function, called
    with the tool's own arguments (not the ToolContext the integration adds)."""
    ran: List[str] = []

    def big(payment_id: str, amount: int) -> bool:
        return amount > 100

    original = FunctionTool(refund_body(mode, ran), require_confirmation=big)
    guarded = protect("stripe.refund", effect="refund:{payment_id}", store=store_url)(original)
    small = [("refund", {"payment_id": "p1", "amount": 30})]
    large = [("refund", {"payment_id": "p2", "amount": 300})]
    run = Run([guarded], [small, large, "asked", "done"])
    asked = run.confirmations(run.say())
    assert ran == ["p1"] and len(asked) == 1
    assert asked[0].args["originalFunctionCall"]["args"]["payment_id"] == "p2"
    assert store.get_effect("refund:p2") is None  # asked before anything was reserved

    run.confirm(asked, confirmed=True)
    assert ran == ["p1", "p2"] and store.get_effect("refund:p2").state.value == "committed"
