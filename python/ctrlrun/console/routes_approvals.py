"""The approval pages: what is pending (every argument shown, those not bound marked), what was
decided lately, one request, and granting or denying it as the signed-in account."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Tuple

from starlette.requests import Request
from starlette.responses import Response

from ctrlrun.console import listing, web
from ctrlrun.console.identity import Identity
from ctrlrun.console.state import ConsoleState
from ctrlrun.errors import CTRLRunError
from ctrlrun.store.approvals import ApprovalRecord
from ctrlrun.store.receipts import Receipt

__all__ = ["approvals_page", "approval_page", "grant", "deny"]

REQUEST_ID = re.compile(r"apr_[0-9a-f]{32}")
#: How many of the latest decided requests the pending view shows under the pending ones.
RECENT = 10
#: The most requests a view counts (``10,000+`` beyond).
COUNT_CAP = 10_000
DECIDED = ("granted", "denied", "used", "expired")
#: Each view: its states (every state when empty), and whether the newest come first.
VIEWS: Dict[str, Tuple[Tuple[str, ...], bool]] = {
    "pending": (("pending",), False),  # oldest first: nothing waits forever at the bottom
    "decided": (DECIDED, True),
    **{state: ((state,), True) for state in DECIDED},
    "all": ((), True),
}
FILTERS = ("action", "prefix", "requested_by")

DONE = {
    "granted": "You granted this request.",
    "partly": "Your grant is recorded; the request needs more approvers before the call may run.",
    "denied": "You denied this request.",
}


def _lists(state: ConsoleState, request: Request) -> Dict[str, Any]:
    """The view the URL asks for, a page of it, and its count; the pending view also shows
    the latest decided requests (on its first page)."""
    view = listing.view_of(request, list(VIEWS), FILTERS)
    states, newest_first = VIEWS[view.view]
    filters = {"action": view.action, "prefix": view.prefix, "requested_by": view.requested_by}
    store = state.store

    def read(limit: int) -> List[ApprovalRecord]:
        return store.list_approvals(
            list(states) or None,
            after=view.after,
            newest_first=newest_first,
            limit=limit,
            **filters,
        )

    rows, next_link = listing.paged(view, read, lambda r: r.cursor)
    count = store.count_approvals(list(states) or None, cap=COUNT_CAP, **filters)
    recent: List[ApprovalRecord] = []
    if view.view == "pending" and view.after is None:
        recent = store.list_approvals(list(DECIDED), newest_first=True, limit=RECENT, **filters)
    return listing.context(
        view,
        rows,
        next_link,
        count=listing.shown_count(count, COUNT_CAP),
        recent=recent,
        views=list(VIEWS),
    )


async def approvals_page(request: Request) -> Response:
    return await web.list_page(request, "approvals", _lists)


def _detail(
    request: Request, me: Identity, request_id: str, page: web.PageStatus = web.PAGE_OK
) -> Response:
    if not REQUEST_ID.fullmatch(request_id):
        return web.problem(request, me, f"No approval request {request_id!r}.", 404, "/approvals")
    try:
        r = web.state_of(request).store.get_approval(request_id)
    except CTRLRunError as exc:
        return web.unreadable(request, me, exc)
    if r is None:
        return web.problem(request, me, f"No approval request {request_id}.", 404, "/approvals")
    try:
        grants = _grants(web.state_of(request).store.list_receipts(r.effect_key), r)
    except CTRLRunError as exc:
        return web.unreadable(request, me, exc)
    return web.detail_page(request, "approval", me, page, DONE, r=r, grants=grants)


def _grants(receipts: List[Receipt], r: ApprovalRecord) -> List[Dict[str, Any]]:
    """Who granted ``r`` so far and when (the time of the request's ``granted`` or ``granted in part`` receipt)."""
    at = {
        t.actor: t.at
        for t in receipts
        if t.chain == "approval" and t.request_id == r.request_id and t.kind.startswith("granted")
    }
    return [{"by": name, "at": at.get(name)} for name in r.granted_by]


async def approval_page(request: Request) -> Response:
    request_id = request.path_params["request_id"]
    return await web.as_signed_in(request, lambda _, me: _detail(request, me, request_id))


@web.posted
async def grant(request: Request, form: Dict[str, str]) -> Response:
    return await _decide(request, form, True)


@web.posted
async def deny(request: Request, form: Dict[str, str]) -> Response:
    return await _decide(request, form, False)


async def _decide(request: Request, form: Dict[str, str], granting: bool) -> Response:
    request_id = request.path_params["request_id"]

    def act(state: ConsoleState, me: Identity) -> Response:
        if not REQUEST_ID.fullmatch(request_id):
            return web.problem(
                request, me, f"No approval request {request_id!r}.", 404, "/approvals"
            )
        note, refused = web.note_of(form)
        if refused is not None:
            return _detail(request, me, request_id, refused)
        try:
            decide = state.store.grant_approval if granting else state.store.deny_approval
            r = decide(request_id, me.account, note)
        except CTRLRunError as exc:
            return _detail(request, me, request_id, (409, str(exc)))
        done = "denied" if not granting else ("partly" if r.state.value == "pending" else "granted")
        return web.redirect(f"/approvals/{request_id}?done={done}")

    return await web.as_signed_in(request, act, form)
