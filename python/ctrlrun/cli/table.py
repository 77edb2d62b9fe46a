"""Effect records as text: the table that `ctrlrun effects list` and the demo print."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import List, Optional, Sequence

from ctrlrun.store.printable import printable
from ctrlrun.store.records import EffectRecord, EffectState

__all__ = ["lease_text", "printable", "table"]


def _span(seconds: float) -> str:
    seconds = int(abs(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def lease_text(r: EffectRecord, now: datetime) -> str:
    if r.state not in (EffectState.RESERVED, EffectState.EXECUTING):
        return "-"
    if r.lease_expires_at is None:
        return "no lease"
    left = (r.lease_expires_at - now).total_seconds()
    return f"{_span(left)} left" if left >= 0 else f"lapsed {_span(left)} ago"


def _short(text: str, width: int) -> str:
    text = printable(text)
    return text if len(text) <= width else text[: width - 1] + "…"


def table(records: List[EffectRecord], now: Optional[datetime] = None) -> str:
    """Records as a text table, in the order given (the store lists oldest first)."""
    now = now or datetime.now(timezone.utc)
    head = (
        "EFFECT KEY",
        "STATE",
        "ATTEMPT",
        "LEASE",
        "UPDATED",
        "ACTION",
        "ACTION ID",
        "RESOLVED BY",
        "RESULT / ERROR",
        "HOLDER",
    )
    rows = [
        (
            _short(r.effect_key, 40),
            r.state.value,
            str(r.attempt),
            lease_text(r, now),
            r.updated_at.strftime("%Y-%m-%d %H:%M:%S"),
            printable(r.action or "-"),
            r.action_id,
            printable(r.resolved_by or "-"),
            _short(json.dumps(r.result) if r.result is not None else (r.error or ""), 50),
            printable(r.holder or "-"),
        )
        for r in records
    ]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]

    def fmt(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()

    return "\n".join([fmt(head), *map(fmt, rows)])
