"""The effect pages: the ambiguous effects, oldest first, with what is known of each; one
effect with its receipts and the chains' verification; settling it as committed or failed, as
the signed-in account."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Dict, List, Optional

from starlette.requests import Request
from starlette.responses import Response

from ctrlrun.console import listing, web
from ctrlrun.console.identity import Identity
from ctrlrun.console.pages import effect_url
from ctrlrun.console.state import ConsoleState
from ctrlrun.errors import CTRLRunError
from ctrlrun.store.receipts import Receipt
from ctrlrun.store.records import EffectRecord, EffectState

__all__ = ["effects_page", "effect_page", "resolve"]

OUTCOMES = ("committed", "failed")
HELD = (EffectState.RESERVED, EffectState.EXECUTING)
#: Each view, and whether the newest come first (the ambiguous ones: the oldest, a queue of
#: work); the ambiguous view also shows, on its first page, held effects whose lease lapsed.
VIEWS = {"ambiguous": False, "reserved": True, "executing": True, "committed": True, "failed": True}
FILTERS = ("action", "prefix")

DONE = {"resolved": "You settled this effect."}


def _lapsed(rec: EffectRecord) -> bool:
    return rec.state in HELD and not rec.lease_live(datetime.now(timezone.utc))


def _listed(state: ConsoleState, request: Request) -> Dict[str, Any]:
    view = listing.view_of(request, list(VIEWS), FILTERS)
    store = state.store

    def read(limit: int) -> List[EffectRecord]:
        return store.list_effects(
            view.view,
            action=view.action,
            prefix=view.prefix,
            after=view.after,
            newest_first=VIEWS[view.view],
            limit=limit,
        )

    rows, next_link = listing.paged(view, read, lambda r: r.cursor)
    if view.view == "ambiguous" and view.after is None:
        # A held effect whose lease lapsed reads ambiguous to the next caller: shown too (a
        # page of each held state read, the lapsed ones kept).
        for held in HELD:
            rows += [
                r
                for r in store.list_effects(
                    held, action=view.action, prefix=view.prefix, limit=listing.PAGE
                )
                if _lapsed(r)
            ]
        rows.sort(key=lambda r: (r.created_at, r.effect_key))
    shown = [{"rec": r, "lapsed": _lapsed(r)} for r in rows]
    return listing.context(view, shown, next_link, views=list(VIEWS))


async def effects_page(request: Request) -> Response:
    return await web.list_page(request, "effects", _listed)


def _detail(
    request: Request, me: Identity, key: str, page: web.PageStatus = web.PAGE_OK
) -> Response:
    store = web.state_of(request).store
    try:
        rec = store.get_effect(key)
        if rec is None:
            return web.problem(
                request, me, f"No effect is recorded under key {key!r}.", 404, "/effects"
            )
        receipts = store.list_receipts(key)
        check = store.verify_receipts(key)  # this key's chains: reads nothing else
        # The call's arguments: only its approval request keeps them (an effect, the digest).
        approval = store.get_approval(rec.approval_id) if rec.approval_id else None
    except CTRLRunError as exc:
        return web.unreadable(request, me, exc)
    lapsed = _lapsed(rec)
    resolvable = rec.state is EffectState.AMBIGUOUS or lapsed
    shown = {
        "rec": rec,
        "lapsed": lapsed,
        "resolvable": resolvable,
        "receipts": receipts,
        "check": check,
        "approval": approval,
        "settled": settled(rec, receipts),
    }
    return web.detail_page(request, "effect", me, page, DONE, **shown)


def settled(rec: EffectRecord, receipts: List[Receipt]) -> Optional[Dict[str, Any]]:
    """A person's resolution of ``rec`` apart from what was known before: the store keeps
    its note in the error text, as ``EARLIER [resolved as OUTCOME by WHO: NOTE]`` (or without
    ``EARLIER``). ``None`` if ``rec`` was not resolved by a person."""
    if rec.resolved_by is None or rec.error is None:
        return None
    mark = f"resolved as {rec.state.value} by {rec.resolved_by}"
    error = rec.error
    if error.startswith(mark):
        earlier, told = "", error[len(mark) :]
    else:
        cut = error.rfind(f" [{mark}")
        if cut < 0 or not error.endswith("]"):
            return None
        earlier, told = error[:cut], error[cut + len(mark) + 2 : -1]
    if told and not told.startswith(": "):
        return None
    at = next((t.at for t in reversed(receipts) if t.kind == "resolution"), None)
    return {
        "earlier": earlier,
        "outcome": rec.state.value,
        "by": rec.resolved_by,
        "note": told[2:],
        "at": at,
    }


async def effect_page(request: Request) -> Response:
    key = request.path_params["key"]
    return await web.as_signed_in(request, lambda _, me: _detail(request, me, key))


@web.posted
async def resolve(request: Request, form: Dict[str, str]) -> Response:
    key = request.path_params["key"]

    def act(state: ConsoleState, me: Identity) -> Response:
        outcome = form.get("outcome", "")
        note, refused = web.note_of(form)
        if outcome not in OUTCOMES:  # the first thing to put right
            refused = (400, "Say what happened: committed or failed; nothing was done.")
        if refused is not None:
            return _detail(request, me, key, refused)
        try:
            state.store.resolve_effect(key, outcome, me.account, note)
        except CTRLRunError as exc:
            return _detail(request, me, key, (409, str(exc)))
        return web.redirect(effect_url(key) + "?done=resolved")

    return await web.as_signed_in(request, act, form)
