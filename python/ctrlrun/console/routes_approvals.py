"""The approval pages: what is pending (every argument shown, those not bound marked), what was
decided lately, one request, and granting or denying it as the signed-in account."""

from __future__ import annotations

import re
from typing import Dict, List, Optional

from starlette.requests import Request
from starlette.responses import Response

from ctrlrun.console.identity import Identity
from ctrlrun.console.pages import render
from ctrlrun.console.state import ConsoleState
from ctrlrun.console.web import (
    MAX_NOTE,
    FormTooLarge,
    as_signed_in,
    problem,
    read_form,
    redirect,
    too_large,
)
from ctrlrun.errors import CTRLRunError
from ctrlrun.store.approvals import ApprovalRecord

__all__ = ["approvals_page", "approval_page", "grant", "deny"]

REQUEST_ID = re.compile(r"apr_[0-9a-f]{32}")
#: How many decided or expired requests the list shows (the latest).
RECENT = 50

DONE = {
    "granted": "You granted this request.",
    "partly": "Your grant is recorded; the request needs more approvers before the call may run.",
    "denied": "You denied this request.",
}


def _lists(state: ConsoleState) -> Dict[str, List[ApprovalRecord]]:
    every = state.store.list_approvals()
    pending = [r for r in every if r.state.value == "pending"]
    recent = [r for r in every if r.state.value != "pending"][-RECENT:][::-1]
    return {"pending": pending, "recent": recent}


async def approvals_page(request: Request) -> Response:
    def page(state: ConsoleState, me: Identity) -> Response:
        try:
            found = _lists(state)
        except CTRLRunError as exc:
            return problem(request, me, f"The store could not be read: {exc}", 503)
        return render(
            request,
            "approvals.html",
            me,
            fragment="_approvals_live.html",
            pending=found["pending"],
            recent=found["recent"],
        )

    return await as_signed_in(request, page)


def _detail(
    request: Request,
    state: ConsoleState,
    me: Identity,
    request_id: str,
    status: int = 200,
    error: Optional[str] = None,
) -> Response:
    if not REQUEST_ID.fullmatch(request_id):
        return problem(request, me, f"No approval request {request_id!r}.", 404, "/approvals")
    try:
        r = state.store.get_approval(request_id)
    except CTRLRunError as exc:
        return problem(request, me, f"The store could not be read: {exc}", 503)
    if r is None:
        return problem(request, me, f"No approval request {request_id}.", 404, "/approvals")
    notice = DONE.get(request.query_params.get("done", "")) if error is None else None
    return render(
        request,
        "approval.html",
        me,
        status=status,
        fragment="_approval_live.html",
        r=r,
        error=error,
        notice=notice,
    )


async def approval_page(request: Request) -> Response:
    request_id = request.path_params["request_id"]
    return await as_signed_in(request, lambda state, me: _detail(request, state, me, request_id))


async def grant(request: Request) -> Response:
    return await _decide(request, True)


async def deny(request: Request) -> Response:
    return await _decide(request, False)


async def _decide(request: Request, granting: bool) -> Response:
    request_id = request.path_params["request_id"]
    try:
        form = await read_form(request)
    except FormTooLarge:
        return too_large()

    def act(state: ConsoleState, me: Identity) -> Response:
        if not REQUEST_ID.fullmatch(request_id):
            return problem(request, me, f"No approval request {request_id!r}.", 404, "/approvals")
        note = form.get("note", "").strip() or None
        if note is not None and len(note) > MAX_NOTE:
            return _detail(
                request,
                state,
                me,
                request_id,
                400,
                f"The note is longer than {MAX_NOTE} characters; nothing was done.",
            )
        try:
            decide = state.store.grant_approval if granting else state.store.deny_approval
            r = decide(request_id, me.account, note)
        except CTRLRunError as exc:
            return _detail(request, state, me, request_id, 409, str(exc))
        done = "denied" if not granting else ("partly" if r.state.value == "pending" else "granted")
        return redirect(f"/approvals/{request_id}?done={done}")

    return await as_signed_in(request, act, form)
