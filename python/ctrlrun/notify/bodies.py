"""The bodies a webhook gets: a Slack-compatible incoming-webhook message (``text`` and a few
blocks) or a generic JSON object (the event's fields). Both carry the same fields and never an
argument value. Text that came from a caller (the action, the effect key, a name) is shown as
plain text in the blocks and escaped in ``text``, so it cannot mention a channel or forge a
link."""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

from ctrlrun.notify.events import Event

__all__ = ["json_body", "slack_body", "render"]

_HEADLINES = {
    "approval.requested": "Approval requested",
    "approval.granted": "Approval granted",
    "approval.denied": "Approval denied",
    "approval.expired": "Approval request expired without a decision",
    "approval.escalated": "Approval request still pending (escalated)",
    "effect.ambiguous": "Effect outcome unknown (ambiguous): a person must resolve it",
}
# Slack limits a section's text to 3,000 characters and a field to 2,000: values are cut.
_LONGEST = 300


def _cut(text: str) -> str:
    return text if len(text) <= _LONGEST else text[: _LONGEST - 1] + "…"


def _escaped(text: str) -> str:
    """Slack's mrkdwn escapes: no ``<!channel>``, ``<@user>`` or ``<url|label>`` from a value."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def json_body(event: Event, console_url: Optional[str]) -> bytes:
    """The generic body: the event's fields as compact JSON (UTF-8)."""
    return json.dumps(
        event.fields(console_url), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode("utf-8")


def slack_body(event: Event, console_url: Optional[str]) -> bytes:
    """An incoming-webhook message: ``text`` (the notification's line) and blocks."""
    headline = _HEADLINES.get(event.event, event.event)
    action = _cut(event.action or "(no action name)")
    link = event.link(console_url)
    text = f"ctrlrun: {headline}: {_escaped(action)} ({_escaped(_cut(event.effect_key))})"
    if link is not None:
        text += f" <{link}|Open in the console>"
    shown = [
        ("Action", action),
        ("Effect key", _cut(event.effect_key)),
        ("State", event.state),
        ("Requested by", _cut(event.requested_by or "-")),
        ("Decided by", _cut(event.decided_by or "-")),
        ("Request", event.request_id or "-"),
        ("At", event.at),
    ]
    blocks: List[Dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*ctrlrun: {headline}*"}},
        {
            "type": "section",
            "fields": [
                {"type": "plain_text", "text": f"{name}: {value}", "emoji": False}
                for name, value in shown
            ],
        },
    ]
    if link is not None:
        blocks.append(
            {"type": "section", "text": {"type": "mrkdwn", "text": f"<{link}|Open in the console>"}}
        )
    body = {"text": text, "blocks": blocks}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def render(fmt: str, event: Event, console_url: Optional[str]) -> bytes:
    """The body of ``fmt`` (``slack`` or ``json``)."""
    return slack_body(event, console_url) if fmt == "slack" else json_body(event, console_url)
