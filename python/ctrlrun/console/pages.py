"""The console's pages: Jinja2 templates (autoescaped, every one of them: what they show is
attacker-controlled text) rendered into responses that carry a strict Content-Security-Policy
(no inline script or style runs, whatever a page might contain).

Every ``{{ value }}`` of every template passes :func:`_shown` (the environment's ``finalize``)
before it is escaped: the CLI's rule (:func:`ctrlrun.store.printable.printable`) writes each
character that is not printable as ``\\uXXXX``, so a bidi override or an invisible character
an agent put in an argument, a key or a note is seen, not obeyed. A template cannot forget it."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta, timezone
from typing import Any, Dict, Optional
from urllib.parse import quote

import jinja2
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from ctrlrun.console.identity import Identity
from ctrlrun.store.printable import hidden, printable

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


class Shown(str):
    """Text already made printable (by a filter that keeps its own line breaks)."""


def _shown(value: Any) -> Any:
    """What a ``{{ value }}`` prints: text as :func:`printable` shows it. Markup the console
    made itself (:func:`_when`) and :class:`Shown` text pass as they are."""
    if value is None or isinstance(value, (bool, int, float, Shown, Markup)):
        return value
    return printable(str(value))


_env = jinja2.Environment(
    loader=jinja2.PackageLoader("ctrlrun.console", "templates"),
    autoescape=True,  # every template, whatever its name
    finalize=_shown,  # every value, whatever the template
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def _when(dt: Optional[datetime]) -> Markup:
    """An aware time as ``<time>``: UTC in the page (``2026-05-01 10:00:00 UTC``, also its
    title), shown in the viewer's zone by static/console.js."""
    if dt is None:
        return Markup("")
    utc = dt.astimezone(timezone.utc)
    text = utc.strftime("%Y-%m-%d %H:%M:%S UTC")
    stamp = utc.strftime("%Y-%m-%dT%H:%M:%SZ")
    return Markup('<time datetime="{}" title="{}">{}</time>').format(stamp, text, text)


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


def _json(value: Any) -> Shown:
    """``value`` as indented JSON, each line printable (JSON escapes control characters in
    strings, not bidi or invisible ones: :func:`printable` does)."""
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    return Shown("\n".join(printable(line) for line in text.split("\n")))


def _count(n: int, noun: str, plural: str = "") -> str:
    """``1 chain``, ``2 chains`` (``plural`` when adding ``s`` is wrong)."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


def _duration(td: Optional[timedelta]) -> str:
    return "" if td is None else _span(td.total_seconds())


_env.filters.update(when=_when, relative=_relative, json=_json, duration=_duration, count=_count)
#: ``hidden(a, b, ...)``: whether any of them holds a character shown escaped (the warning).
_env.globals["hidden"] = lambda *values: hidden(list(values))


def render(
    request: Request,
    template: str,
    identity: Optional[Identity],
    status: int = 200,
    fragment: Optional[str] = None,
    **context: Any,
) -> Response:
    """The page ``template`` (or, asked for by the page script, only its ``fragment``)."""
    values: Dict[str, Any] = {
        "me": identity,
        "path": request.url.path,
        "notice": None,
        "error": None,
        **context,
    }
    if fragment is None or request.headers.get(FRAGMENT_HEADER) != "1":
        html = _env.get_template(template).render(values)
        return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)
    # A live update: the page script sends the ETag of the part it shows, and gets a 304
    # with no body while the part is the same (each open tab asks every 2 s).
    html = _env.get_template(fragment).render(values)
    tag = '"' + hashlib.sha256(html.encode("utf-8")).hexdigest()[:32] + '"'
    headers = {**SECURITY_HEADERS, "etag": tag}
    if status == 200 and request.headers.get("if-none-match") == tag:
        return Response(status_code=304, headers=headers)
    return HTMLResponse(html, status_code=status, headers=headers)


def effect_url(key: str) -> str:
    """The console page of the effect ``key`` (every character but the unreserved quoted, so
    ``/``, ``?`` and ``#`` in a key stay part of it)."""
    return "/effects/" + quote(key, safe="")


def _path(value: str) -> Shown:
    """A path of this console kept in a form (sign-in's ``next``): its characters that are
    not printable percent-encoded, so the value reads printable and still leads to the page."""
    return Shown("".join(c if c.isprintable() else quote(c, safe="") for c in value))


_env.filters.update(effect_url=effect_url, path=_path)
