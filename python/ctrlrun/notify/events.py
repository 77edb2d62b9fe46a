"""What a notification says: one :class:`Event`, made from an approval request or an effect
record. No argument value is ever part of one (the console shows them to people signed in)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Dict, Optional
from urllib.parse import quote

from ctrlrun.store.approvals import ApprovalRecord

__all__ = ["Event", "EVENTS", "approval_event", "effect_event", "iso"]

EVENTS = (
    "approval.requested",
    "approval.granted",
    "approval.denied",
    "approval.expired",
    "approval.escalated",
    "effect.ambiguous",
)


def iso(moment: Optional[datetime] = None) -> str:
    """``moment`` (default: now) as ISO 8601 UTC text ending in ``Z``, to the second."""
    when = (moment or datetime.now(timezone.utc)).astimezone(timezone.utc)
    return when.replace(microsecond=0, tzinfo=None).isoformat() + "Z"


@dataclass(frozen=True)
class Event:
    """One event: its name, the action and effect key, the approval request (if any), the
    state it left, who asked and who decided, and when (ISO 8601 UTC)."""

    event: str
    action: Optional[str]
    effect_key: str
    request_id: Optional[str]
    state: str
    requested_by: Optional[str]
    decided_by: Optional[str]
    at: str

    def link(self, console_url: Optional[str]) -> Optional[str]:
        """The console page of the request (``/approvals/<id>``) or of the effect
        (``/effects/<quoted key>``); ``None`` without a console URL."""
        if not console_url:
            return None
        if self.request_id is not None and self.event.startswith("approval."):
            return f"{console_url}/approvals/{self.request_id}"
        return f"{console_url}/effects/{quote(self.effect_key, safe='')}"

    def fields(self, console_url: Optional[str]) -> Dict[str, Any]:
        """The body's fields (``link`` only with a console URL)."""
        out: Dict[str, Any] = {
            "event": self.event,
            "action": self.action,
            "effect_key": self.effect_key,
            "request_id": self.request_id,
            "state": self.state,
            "requested_by": self.requested_by,
            "decided_by": self.decided_by,
            "at": self.at,
        }
        link = self.link(console_url)
        if link is not None:
            out["link"] = link
        return out


def approval_event(name: str, record: ApprovalRecord, at: Optional[datetime] = None) -> Event:
    """The event ``name`` of an approval request (its arguments left out)."""
    state = "expired" if name == "approval.expired" else record.state.value
    return Event(
        name,
        record.action,
        record.effect_key,
        record.request_id,
        state,
        getattr(record, "requested_by", None),
        record.decided_by,
        iso(at),
    )


def effect_event(
    action: Optional[str],
    key: str,
    at: Optional[datetime] = None,
    requested_by: Optional[str] = None,
    request_id: Optional[str] = None,
) -> Event:
    """``effect.ambiguous`` for ``key``."""
    return Event(
        "effect.ambiguous", action, key, request_id, "ambiguous", requested_by, None, iso(at)
    )
