"""Signing in and out: a sign-in form with its own CSRF token (a cookie of its own before any
session), the attempts limited per account and address, per address and per account
(ratelimit.py), a new session token on every sign-in."""

from __future__ import annotations

import logging
import math
import secrets
from typing import Dict

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from ctrlrun.console import accounts
from ctrlrun.console.identity import SESSION_COOKIE, client_address, identify, secret_mark
from ctrlrun.console.pages import render
from ctrlrun.console.ratelimit import Refused
from ctrlrun.console.sessions import same_token
from ctrlrun.console.state import ConsoleState
from ctrlrun.console.web import csrf_ok, posted, problem, redirect, safe_next, state_of

__all__ = ["signin_page", "signin", "signout"]

SIGNIN_COOKIE = "ctrlrun_signin"
log = logging.getLogger("ctrlrun.console")


def _set_cookie(state: ConsoleState, response: Response, name: str, value: str) -> None:
    response.set_cookie(
        name,
        value,
        httponly=True,
        samesite="strict",
        secure=state.settings.secure_cookies,
        path="/",
    )


def _form(
    request: Request, status: int = 200, error: str = "", account: str = "", nxt: str = ""
) -> Response:
    state = state_of(request)
    token = secrets.token_urlsafe(32)
    response = render(
        request,
        "signin.html",
        None,
        status=status,
        csrf=token,
        next=safe_next(nxt or request.query_params.get("next")),
        account=account,
        error=error or None,
    )
    _set_cookie(state, response, SIGNIN_COOKIE, token)
    return response


async def signin_page(request: Request) -> Response:
    state = state_of(request)
    if await run_in_threadpool(identify, state, request) is not None:
        return redirect(safe_next(request.query_params.get("next")))
    return _form(request)


@posted
async def signin(request: Request, form: Dict[str, str]) -> Response:
    state = state_of(request)
    name, secret = form.get("account", ""), form.get("secret", "")
    nxt = safe_next(form.get("next"))
    if not same_token(form.get("csrf"), request.cookies.get(SIGNIN_COOKIE) or "\0"):
        return _form(request, 403, "The sign-in form was stale; try again.", name, nxt)
    attempt = state.limiter.reserve(name, client_address(request))
    if isinstance(attempt, Refused):
        log.warning("console: sign-in attempts refused for a while (too many failures)")
        why = (
            "Too many sign-in attempts are being checked; try again in"
            if attempt.busy
            else "Too many failed sign-in attempts; try again in"
        )
        return _form(request, 429, f"{why} {math.ceil(attempt.wait)} seconds.", name, nxt)
    # Counted already (reserved above): concurrent attempts cannot all pass the limit while
    # this slow check runs. A failure stays counted; a success gives the attempt back.
    account = await run_in_threadpool(accounts.check, state.store, name, secret)
    if account is None:
        return _form(request, 401, "Unknown account or wrong secret.", name, nxt)
    state.limiter.succeeded(attempt)
    old = request.cookies.get(SESSION_COOKIE)
    state.sessions.end(old)
    session = state.sessions.start(account.name, secret_mark(account.secret_hash))
    response = redirect(nxt)
    _set_cookie(state, response, SESSION_COOKIE, session.token)
    response.delete_cookie(SIGNIN_COOKIE, path="/")
    return response


@posted
async def signout(request: Request, form: Dict[str, str]) -> Response:
    state = state_of(request)
    me = await run_in_threadpool(identify, state, request)
    if me is None:
        return redirect("/signin")
    if not csrf_ok(form, me):
        return problem(request, me, "The form was stale or forged: nothing was done.", 403)
    state.sessions.end(me.token)
    response = redirect("/signin")
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response
