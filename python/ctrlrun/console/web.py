"""What every console route shares: the console's state, who is signed in, reading a form
(bounded), the CSRF check, and the refusals (never a traceback, never a 500 for what a
person did)."""

from __future__ import annotations

import functools
from typing import Any, Awaitable, Callable, Dict, Optional, Tuple
from urllib.parse import parse_qsl, quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from ctrlrun.console.identity import Identity, identify
from ctrlrun.console.listing import BadView
from ctrlrun.console.pages import FRAGMENT_HEADER, SECURITY_HEADERS, render
from ctrlrun.console.sessions import same_token
from ctrlrun.console.state import ConsoleState
from ctrlrun.errors import CTRLRunError, InvalidArgument

__all__ = [
    "state_of",
    "read_form",
    "posted",
    "note_of",
    "csrf_ok",
    "signed_out",
    "problem",
    "unreadable",
    "list_page",
    "detail_page",
    "PageStatus",
    "PAGE_OK",
    "MAX_FORM",
    "MAX_NOTE",
]

#: The largest form body read (bytes); a note's longest length (characters).
MAX_FORM, MAX_NOTE = 64 * 1024, 2000

#: How a page is shown: its HTTP status, and the error it tells of (an action refused).
PageStatus = Tuple[int, Optional[str]]
PAGE_OK: PageStatus = (200, None)


class FormTooLarge(Exception):
    pass


def state_of(request: Request) -> ConsoleState:
    state: ConsoleState = request.app.state.console
    return state


async def read_form(request: Request) -> Dict[str, str]:
    """A URL-encoded form body as a dict (the first value of each name); bounded by
    ``MAX_FORM``; anything else (multipart, JSON) reads as empty and so fails the CSRF check."""
    kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM:
            raise FormTooLarge
    if kind != "application/x-www-form-urlencoded":
        return {}
    try:
        text = bytes(body).decode("utf-8")
        pairs = parse_qsl(text, keep_blank_values=True, strict_parsing=False, max_num_fields=50)
    except (UnicodeDecodeError, ValueError):
        return {}
    out: Dict[str, str] = {}
    for name, value in pairs:
        out.setdefault(name, value)
    return out


def posted(
    handler: Callable[[Request, Dict[str, str]], Awaitable[Response]],
) -> Callable[[Request], Awaitable[Response]]:
    """The route of a form post: ``handler`` gets the form read by :func:`read_form`; a body
    too large is refused here, before anything else is looked at."""

    @functools.wraps(handler)
    async def route(request: Request) -> Response:
        try:
            form = await read_form(request)
        except FormTooLarge:
            return too_large()
        return await handler(request, form)

    return route


def note_of(form: Dict[str, str]) -> Tuple[Optional[str], Optional[PageStatus]]:
    """The form's note (``None`` when blank), and the refusal to show when it is longer than
    ``MAX_NOTE`` (else ``None``)."""
    note = form.get("note", "").strip() or None
    if note is not None and len(note) > MAX_NOTE:
        return None, (400, f"The note is longer than {MAX_NOTE} characters; nothing was done.")
    return note, None


def csrf_ok(form: Dict[str, str], identity: Identity) -> bool:
    return same_token(form.get("csrf"), identity.csrf)


async def as_signed_in(
    request: Request,
    body: Callable[[ConsoleState, Identity], Response],
    form: Optional[Dict[str, str]] = None,
) -> Response:
    """``body`` for the signed-in person, on a worker thread (the store is never read on the
    event loop). Signed out: to sign in, nothing done. A posted ``form`` must carry the
    session's CSRF token, else nothing is done."""
    state = state_of(request)

    def page() -> Response:
        me = identify(state, request)
        if me is None:
            return signed_out(request)
        if form is not None and not csrf_ok(form, me):
            return problem(request, me, "The form was stale or forged: nothing was done.", 403)
        return body(state, me)

    return await run_in_threadpool(page)


def signed_out(request: Request) -> Response:
    """A page asked for without a signed-in identity: to the sign-in page (a form post or the
    page script: refused, nothing done)."""
    if request.method != "GET" or request.headers.get(FRAGMENT_HEADER) == "1":
        return problem(
            request,
            None,
            "Sign in first: nothing was done.",
            401 if request.method == "GET" else 403,
        )
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/signin?next={quote(target, safe='')}", status_code=303)


def problem(
    request: Request,
    identity: Optional[Identity],
    title: str,
    status: int,
    back: Optional[str] = None,
) -> Response:
    return render(request, "error.html", identity, status=status, title=title, back=back)


def unreadable(request: Request, identity: Identity, exc: CTRLRunError) -> Response:
    return problem(request, identity, f"The store could not be read: {exc}", 503)


async def list_page(
    request: Request, name: str, read: Callable[[ConsoleState, Request], Dict[str, Any]]
) -> Response:
    """The list page ``name`` (``NAME.html``, refreshed by its fragment ``_NAME_live.html``)
    showing what ``read`` found in the store for the URL, for the signed-in person. A URL the
    list cannot show (an unknown view, a filter too long, a cursor not of a listing) gets a
    400 page saying why."""

    def page(state: ConsoleState, me: Identity) -> Response:
        try:
            found = read(state, request)
        except (BadView, InvalidArgument) as exc:
            return problem(request, me, str(exc), 400, request.url.path)
        except CTRLRunError as exc:
            return unreadable(request, me, exc)
        return render(request, f"{name}.html", me, fragment=f"_{name}_live.html", **found)

    return await as_signed_in(request, page)


def detail_page(
    request: Request, name: str, me: Identity, page: PageStatus, done: Dict[str, str], **shown: Any
) -> Response:
    """The page of one thing, ``NAME.html`` (refreshed by ``_NAME_live.html``): with the error
    ``page`` tells of, else with what ``done`` says for the ``?done=`` an action redirected
    to."""
    status, error = page
    notice = done.get(request.query_params.get("done", "")) if error is None else None
    return render(
        request,
        f"{name}.html",
        me,
        status=status,
        fragment=f"_{name}_live.html",
        error=error,
        notice=notice,
        **shown,
    )


def too_large() -> Response:
    return PlainTextResponse("form too large", status_code=413, headers=SECURITY_HEADERS)


def redirect(path: str) -> Response:
    return RedirectResponse(path, status_code=303)


def safe_next(value: Any) -> str:
    """Where to go after signing in: a path of this console only."""
    if (
        isinstance(value, str)
        and value.startswith("/")
        and not value.startswith("//")
        and "\\" not in value
        and not any(ord(c) < 0x20 for c in value)
    ):
        return value
    return "/approvals"
