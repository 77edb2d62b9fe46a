"""The console's ASGI app (Starlette): its routes, its static files, security headers on every
response, and an error page (never a traceback) for anything unexpected."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ctrlrun.console import routes_approvals as approvals
from ctrlrun.console import routes_auth as auth
from ctrlrun.console import routes_effects as effects
from ctrlrun.console.pages import SECURITY_HEADERS
from ctrlrun.console.state import ConsoleState
from ctrlrun.console.web import problem
from ctrlrun.errors import StoreError

__all__ = ["build_app"]

log = logging.getLogger("ctrlrun.console")
STATIC = Path(__file__).parent / "static"


class _Headers:
    """Adds the security headers to every response that has none of its own."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                have = {k.lower() for k, _ in message.get("headers", [])}
                extra = [
                    (k.encode(), v.encode())
                    for k, v in SECURITY_HEADERS.items()
                    if k.encode() not in have
                ]
                message["headers"] = list(message.get("headers", [])) + extra
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception:
            # Starlette re-raises what reached its error page once that page is sent (logged
            # by ``_failed``): stop it here, so the server neither logs a traceback nor drops
            # the connection.
            if not started:
                raise


async def _home(request: Request) -> Response:
    return RedirectResponse("/approvals", status_code=303)


async def _failed(request: Request, exc: Exception) -> Response:
    log.error("console: %s %s failed: %s", request.method, request.url.path, type(exc).__name__)
    return HTMLResponse(
        "<!doctype html><title>Error</title><p>The console could not do that; see its log.</p>",
        status_code=500,
    )


async def _store_failed(request: Request, exc: Exception) -> Response:
    """The store could not be reached or read (a database gone, say): said on the page, the
    details (the store's address among them) in the log only: who asked is not known yet."""
    log.error("console: %s %s: the store failed: %s", request.method, request.url.path, exc)
    return problem(request, None, "The store could not be used; see the console's log.", 503)


def build_app(state: ConsoleState) -> Any:
    """The console serving ``state`` (its store, settings and sessions)."""
    routes = [
        Route("/", _home, methods=["GET"]),
        Route("/signin", auth.signin_page, methods=["GET"]),
        Route("/signin", auth.signin, methods=["POST"]),
        Route("/signout", auth.signout, methods=["POST"]),
        Route("/approvals", approvals.approvals_page, methods=["GET"]),
        Route("/approvals/{request_id}", approvals.approval_page, methods=["GET"]),
        Route("/approvals/{request_id}/grant", approvals.grant, methods=["POST"]),
        Route("/approvals/{request_id}/deny", approvals.deny, methods=["POST"]),
        Route("/effects", effects.effects_page, methods=["GET"]),
        Route("/effects/{key:path}/resolve", effects.resolve, methods=["POST"]),
        Route("/effects/{key:path}", effects.effect_page, methods=["GET"]),
        Mount("/static", app=StaticFiles(directory=str(STATIC)), name="static"),
    ]
    app = Starlette(
        routes=routes, exception_handlers={StoreError: _store_failed, Exception: _failed}
    )
    app.state.console = state
    return _Headers(app)
