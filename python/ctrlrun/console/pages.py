"""The console's pages: Jinja2 templates (autoescaped, every one of them: what they show is
attacker-controlled text) rendered into responses that carry a strict Content-Security-Policy
(no inline script or style runs, whatever a page might contain)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any, Dict, Optional
from urllib.parse import quote

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse

from ctrlrun.console.identity import Identity

__all__ = ["render", "SECURITY_HEADERS", "FRAGMENT_HEADER"]

#: The header the page script sends to get only a page's live part.
FRAGMENT_HEADER = "x-ctrlrun-fragment"

SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}

_env = jinja2.Environment(
    loader=jinja2.PackageLoader("ctrlrun.console", "templates"),
    autoescape=True,  # every template, whatever its name
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def _when(dt: Optional[datetime]) -> str:
    """An aware time as ``2026-05-01 10:00:00Z``."""
    if dt is None:
        return ""
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def _span(seconds: float) -> str:
    s = int(abs(seconds))
    if s < 60:
        return "<1m"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def _relative(dt: Optional[datetime]) -> str:
    """``in 14m`` or ``3m ago`` (minutes, so that a live part changes at most once a minute
    past the last one)."""
    if dt is None:
        return ""
    delta = (dt - datetime.now(timezone.utc)).total_seconds()
    return f"in {_span(delta)}" if delta >= 0 else f"{_span(delta)} ago"


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def _duration(td: Optional[timedelta]) -> str:
    return "" if td is None else _span(td.total_seconds())


_env.filters.update(when=_when, relative=_relative, json=_json, duration=_duration)


def render(
    request: Request,
    template: str,
    identity: Optional[Identity],
    status: int = 200,
    fragment: Optional[str] = None,
    **context: Any,
) -> HTMLResponse:
    """The page ``template`` (or, asked for by the page script, only its ``fragment``)."""
    values: Dict[str, Any] = {
        "me": identity,
        "path": request.url.path,
        "notice": None,
        "error": None,
        **context,
    }
    if fragment is not None and request.headers.get(FRAGMENT_HEADER) == "1":
        template = fragment
    html = _env.get_template(template).render(values)
    return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)


def effect_url(key: str) -> str:
    """The console page of the effect ``key`` (every character but the unreserved quoted, so
    ``/``, ``?`` and ``#`` in a key stay part of it)."""
    return "/effects/" + quote(key, safe="")


_env.filters["effect_url"] = effect_url
