"""Approval requests: the record a person decides on, and how a protected call that needs one
asks for it (and, with ``approval_timeout``, waits for the decision)."""

from __future__ import annotations

import enum
import json
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Tuple

from ._records import micros_to_datetime, stored_json
from .errors import ActionDenied, ApprovalRequired

if TYPE_CHECKING:
    from ._store import Store

__all__ = ["ApprovalState", "ApprovalRecord", "DEFAULT_APPROVAL_TTL"]

#: How long a request waits for a decision, and a decision stands (per action in the policy,
#: or ``approval_ttl=`` on the decorator).
DEFAULT_APPROVAL_TTL = timedelta(minutes=15)


class ApprovalState(str, enum.Enum):
    """``pending`` -> ``granted`` -> ``used`` (single use), or ``denied``; a pending request or
    a grant past its time is ``expired``."""

    PENDING = "pending"
    GRANTED = "granted"
    DENIED = "denied"
    USED = "used"
    EXPIRED = "expired"

    def __str__(self) -> str:
        return self.value


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


def _when(us: Optional[int]) -> Optional[datetime]:
    return None if us is None else micros_to_datetime(us)


def approval_from_core(t: Tuple[Any, ...]) -> ApprovalRecord:
    request_id, action, args_digest, effect_key, arguments, state, more = t
    requested, ttl, expires, decided_at, decided_by, note, used_at, used_by = more
    shown = stored_json(f"the arguments of approval request {request_id!r}", arguments)
    not_bound: Tuple[str, ...] = ()
    if isinstance(shown, dict) and NOT_BOUND in shown:
        names = shown.pop(NOT_BOUND)
        not_bound = tuple(str(n) for n in names) if isinstance(names, list) else ()
    return ApprovalRecord(
        request_id=request_id,
        action=action,
        effect_key=effect_key,
        arguments=shown,
        not_bound=not_bound,
        args_digest=args_digest,
        state=ApprovalState(state),
        requested_at=micros_to_datetime(requested),
        expires_at=micros_to_datetime(expires),
        ttl=timedelta(microseconds=ttl),
        decided_at=_when(decided_at),
        decided_by=decided_by,
        note=note,
        used_at=_when(used_at),
        used_by=used_by,
    )


def refusal(record: ApprovalRecord) -> Exception:
    """The exception for a request that does not let the call run (pending or denied)."""
    if record.state is ApprovalState.DENIED:
        who = record.decided_by or "?"
        note = f" ({record.note})" if record.note else ""
        return ActionDenied(
            f"the action '{record.action}' was denied by {who}{note} (approval request "
            f"{record.request_id}); nothing was reserved or run. A new call with the same "
            f"arguments asks again after {record.expires_at.isoformat()}",
            action=record.action, request_id=record.request_id, denied_by=record.decided_by,
        )
    return ApprovalRequired(
        f"the action '{record.action}' needs a person's approval for these arguments: "
        f"approval request {record.request_id} is pending; nothing was reserved or run. "
        f"Approve it with `ctrlrun approve {record.request_id} --by NAME` (or "
        f"Store.grant_approval), then call again with the same arguments",
        request_id=record.request_id, action=record.action, effect_key=record.effect_key,
        arguments=record.arguments, expires_at=record.expires_at, not_bound=record.not_bound,
    )


def ask(store: "Store", action: str, effect_key: str, digest: str,
        arguments: Dict[str, Any], ttl: timedelta, not_bound: Tuple[str, ...] = ()
        ) -> ApprovalRecord:
    """The request that stands for ``action`` with these arguments, or a new pending one.
    ``not_bound``: the names in ``arguments`` the digest leaves out, kept with them (under a
    key no parameter can have) so that every reader shows them as not bound."""
    shown = {**arguments, NOT_BOUND: list(not_bound)} if not_bound else arguments
    text = json.dumps(shown, sort_keys=True, separators=(",", ":"))
    t = store.core.request_approval(action, digest, effect_key, text,
                                    int(ttl / timedelta(microseconds=1)), store.now_us())
    return approval_from_core(t)


def poll_interval(waited: float) -> float:
    """Back off from 50 ms to 1 s while waiting for a decision."""
    return min(1.0, 0.05 * (2 ** min(waited, 10.0)))


def wait_for_decision(store: "Store", request_id: str, timeout: float,
                      sleep: Callable[[float], None] = time.sleep) -> ApprovalRecord:
    """Poll the request (holding no connection between polls) until it is decided or
    ``timeout`` seconds pass; the last record read."""
    deadline = time.monotonic() + timeout
    started = time.monotonic()
    last: Optional[ApprovalRecord] = None
    while True:
        record = store.get_approval(request_id)
        if record is None:  # removed meanwhile (by hand): no grant, so no run
            if last is None:
                raise ApprovalRequired(f"approval request {request_id} is gone from the store; "
                                       f"nothing was reserved or run", request_id=request_id)
            return last
        last = record
        left = deadline - time.monotonic()
        if record.state is not ApprovalState.PENDING or left <= 0:
            return record
        sleep(min(left, poll_interval(time.monotonic() - started)))
