"""The effect pages: the ambiguous effects, oldest first, with what is known of each; one
effect with its receipts and the chains' verification; settling it as committed or failed, as
the signed-in account."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Dict, List, Optional

from starlette.requests import Request
from starlette.responses import Response

from ctrlrun.console.identity import Identity
from ctrlrun.console.pages import effect_url, render
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
from ctrlrun.store.records import EffectRecord, EffectState

__all__ = ["effects_page", "effect_page", "resolve"]

#: The most ambiguous effects listed (the oldest).
LISTED = 500
OUTCOMES = ("committed", "failed")
HELD = (EffectState.RESERVED, EffectState.EXECUTING)

DONE = {"resolved": "You settled this effect."}


def _lapsed(rec: EffectRecord) -> bool:
    return rec.state in HELD and not rec.lease_live(datetime.now(timezone.utc))


def _listed(state: ConsoleState) -> List[Dict[str, Any]]:
    store = state.store
    found = list(store.list_effects("ambiguous", limit=LISTED))
    # A held effect whose lease lapsed reads ambiguous to the next caller: shown too.
    for held in HELD:
        found += [r for r in store.list_effects(held, limit=LISTED) if _lapsed(r)]
    found.sort(key=lambda r: (r.created_at, r.effect_key))
    return [
        {"rec": r, "lapsed": _lapsed(r), "receipts": len(store.list_receipts(r.effect_key))}
        for r in found[:LISTED]
    ]


async def effects_page(request: Request) -> Response:
    def page(state: ConsoleState, me: Identity) -> Response:
        try:
            effects = _listed(state)
        except CTRLRunError as exc:
            return problem(request, me, f"The store could not be read: {exc}", 503)
        return render(request, "effects.html", me, fragment="_effects_live.html", effects=effects)

    return await as_signed_in(request, page)


def _detail(
    request: Request,
    state: ConsoleState,
    me: Identity,
    key: str,
    status: int = 200,
    error: Optional[str] = None,
) -> Response:
    try:
        rec = state.store.get_effect(key)
        if rec is None:
            return problem(
                request, me, f"No effect is recorded under key {key!r}.", 404, "/effects"
            )
        receipts = state.store.list_receipts(key)
        check = state.store.verify_receipts(key)  # this key's chains: reads nothing else
    except CTRLRunError as exc:
        return problem(request, me, f"The store could not be read: {exc}", 503)
    lapsed = _lapsed(rec)
    notice = DONE.get(request.query_params.get("done", "")) if error is None else None
    return render(
        request,
        "effect.html",
        me,
        status=status,
        fragment="_effect_live.html",
        rec=rec,
        lapsed=lapsed,
        resolvable=rec.state is EffectState.AMBIGUOUS or lapsed,
        receipts=receipts,
        check=check,
        error=error,
        notice=notice,
    )


async def effect_page(request: Request) -> Response:
    key = request.path_params["key"]
    return await as_signed_in(request, lambda state, me: _detail(request, state, me, key))


async def resolve(request: Request) -> Response:
    key = request.path_params["key"]
    try:
        form = await read_form(request)
    except FormTooLarge:
        return too_large()

    def act(state: ConsoleState, me: Identity) -> Response:
        outcome = form.get("outcome", "")
        if outcome not in OUTCOMES:
            return _detail(
                request,
                state,
                me,
                key,
                400,
                "Say what happened: committed or failed; nothing was done.",
            )
        note = form.get("note", "").strip() or None
        if note is not None and len(note) > MAX_NOTE:
            return _detail(
                request,
                state,
                me,
                key,
                400,
                f"The note is longer than {MAX_NOTE} characters; nothing was done.",
            )
        try:
            state.store.resolve_effect(key, outcome, me.account, note)
        except CTRLRunError as exc:
            return _detail(request, state, me, key, 409, str(exc))
        return redirect(effect_url(key) + "?done=resolved")

    return await as_signed_in(request, act, form)
