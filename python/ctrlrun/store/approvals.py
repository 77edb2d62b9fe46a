"""Approval requests: the record a person decides on, as read from the store (how a call asks
for one and waits is ``ctrlrun.call.approval``), and who is told when a decision lands."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable, Dict, List, Optional, Tuple

import ctrlrun._core as _core
from ctrlrun._records import StoredState, page_cursor
from ctrlrun.store.decode import from_row, stored_json

__all__ = ["ApprovalState", "ApprovalRecord", "DEFAULT_APPROVAL_TTL", "when_decided"]


class ApprovalState(StoredState):
    """``pending`` -> ``granted`` -> ``used`` (single use), or ``denied``; a pending request or
    a grant past its time is ``expired``."""

    PENDING = "pending"
    GRANTED = "granted"
    DENIED = "denied"
    USED = "used"
    EXPIRED = "expired"


#: How long a request waits for a decision, and a decision stands (per action in the policy,
#: or ``approval_ttl=`` on the decorator).
DEFAULT_APPROVAL_TTL = timedelta(minutes=15)


@dataclass(frozen=True)
class ApprovalRecord:
    """One approval request, as read from the store.

    Attributes:
        request_id: ``apr_`` + 32 hex digits.
        action: the action name.
        effect_key: the key the call reserves once approved.
        arguments: every argument of the call, canonical, by name (what the approver is shown).
        args_digest: the digest the approval is bound to.
        not_bound: the names in ``arguments`` left out of that digest (``fingerprint_exclude``):
            a call with other values for them matches this approval too.
        state: the :class:`ApprovalState` as of the read.
        requested_at / expires_at: aware UTC datetimes; a pending request, a grant or a denial
            stands until ``expires_at``.
        ttl: how long a request waits, and a decision stands.
        decided_at / decided_by / note: the person's decision, if any.
        used_at / used_by: when and by which attempt (action id) the grant was used.
        requested_by: who asked (the decorator's or gateway's ``requested_by``, e.g. the
            agent's name), or ``None``; they can never grant it.
        approvals_needed: how many distinct people must grant it (the policy's
            ``approvals:``); until then it stays ``pending``.
        granted_by: who granted it so far, in order (``decided_by`` is the latest of them
            while it is pending).
    """

    request_id: str
    action: str
    effect_key: str
    arguments: Dict[str, Any]
    args_digest: str
    state: ApprovalState
    requested_at: datetime
    expires_at: datetime
    ttl: timedelta
    decided_at: Optional[datetime]
    decided_by: Optional[str]
    note: Optional[str]
    used_at: Optional[datetime]
    used_by: Optional[str]
    not_bound: Tuple[str, ...] = ()
    requested_by: Optional[str] = None
    approvals_needed: int = 1
    granted_by: Tuple[str, ...] = ()

    @property
    def cursor(self) -> str:
        """Where a listing's next page starts: ``Store.list_approvals(after=record.cursor)``
        lists the requests after this one, in the same order."""
        return page_cursor(self.requested_at, self.request_id)

    def to_json(self) -> Dict[str, Any]:
        """A JSON-ready dict (times as ISO 8601 text)."""
        out: Dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if isinstance(value, datetime):
                value = value.isoformat()
            elif isinstance(value, timedelta):
                value = value.total_seconds()
            elif isinstance(value, ApprovalState):
                value = value.value
            elif isinstance(value, tuple):
                value = list(value)
            out[name] = value
        return out


# Where the stored arguments keep the names the digest leaves out (no parameter is named so).
NOT_BOUND = "$not_bound"


def approval_from_core(row: _core.ApprovalRow) -> ApprovalRecord:
    """The core's approval row as an :class:`ApprovalRecord`."""
    request_id = row.request_id
    shown = stored_json(f"the arguments of approval request {request_id!r}", row.arguments)
    not_bound: Tuple[str, ...] = ()
    if isinstance(shown, dict) and NOT_BOUND in shown:
        names = shown.pop(NOT_BOUND)
        not_bound = tuple(str(n) for n in names) if isinstance(names, list) else ()
    return from_row(
        ApprovalRecord, row, arguments=shown, not_bound=not_bound, granted_by=tuple(row.granted_by)
    )


# Told of every decision the store records (``Store.grant_approval`` / ``deny_approval``), in
# order: ``ctrlrun.notify.hooks`` adds its ``decided`` when imported, and the package imports it
# (the store imports nothing of what sits above it).
_TOLD: List[Callable[[ApprovalRecord], object]] = []


def when_decided(hook: Callable[[ApprovalRecord], object]) -> None:
    """Call ``hook(record)`` after each decision the store records (``hook`` must not raise)."""
    if hook not in _TOLD:
        _TOLD.append(hook)


def tell_decided(record: ApprovalRecord) -> ApprovalRecord:
    """Tell every hook of the decision ``record``; returns ``record``."""
    for hook in _TOLD:
        hook(record)
    return record
