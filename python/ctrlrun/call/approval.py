"""How a protected call that needs a person's approval asks for it, waits for the decision
(``approval_timeout``), and what it raises while the request does not let it run."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any, Callable, Dict, Optional, Tuple

from ctrlrun.errors import ActionDenied, ApprovalRequired
from ctrlrun.notify import hooks as notify
from ctrlrun.store.api import Store
from ctrlrun.store.approvals import NOT_BOUND, ApprovalRecord, ApprovalState, approval_from_core


def refusal(record: ApprovalRecord) -> Exception:
    """The exception for a request that does not let the call run (pending or denied)."""
    action, request_id = record.action, record.request_id
    if record.state is ApprovalState.DENIED:
        note = f" ({record.note})" if record.note else ""
        why = (
            f"the action '{action}' was denied by {record.decided_by or '?'}{note} (approval "
            f"request {request_id}); nothing was reserved or run. A new call with the same "
            f"arguments asks again after {record.expires_at.isoformat()}"
        )
        return ActionDenied(why, action=action, request_id=request_id, denied_by=record.decided_by)
    return ApprovalRequired(
        f"the action '{action}' needs a person's approval for these arguments: approval request "
        f"{request_id} is pending; nothing was reserved or run. Approve it with `ctrlrun approve "
        f"{request_id} --by NAME` (or Store.grant_approval), then call again with the same "
        f"arguments",
        request_id=request_id,
        action=action,
        effect_key=record.effect_key,
        arguments=record.arguments,
        expires_at=record.expires_at,
        not_bound=record.not_bound,
    )


def ask(
    store: Store,
    action: str,
    effect_key: str,
    digest: str,
    arguments: Dict[str, Any],
    ttl: timedelta,
    not_bound: Tuple[str, ...] = (),
    requested_by: Optional[str] = None,
    approvals_needed: int = 1,
) -> ApprovalRecord:
    """The request that stands for ``action`` with these arguments, or a new pending one.
    ``not_bound``: the names in ``arguments`` the digest leaves out, kept with them (under a
    key no parameter can have) so that every reader shows them as not bound. A new request
    records ``requested_by`` (who can never grant it) and needs ``approvals_needed``
    distinct people to grant it."""
    shown = {**arguments, NOT_BOUND: list(not_bound)} if not_bound else arguments
    text = json.dumps(shown, sort_keys=True, separators=(",", ":"))
    t = store._core.request_approval(
        action,
        digest,
        effect_key,
        text,
        int(ttl / timedelta(microseconds=1)),
        store._now_us(),
        requested_by,
        approvals_needed,
    )
    record = approval_from_core(t)
    notify.requested(t.created, record)  # approval.requested, if this call wrote it
    return record


def poll_interval(waited: float) -> float:
    """Back off from 50 ms to 1 s while waiting for a decision."""
    return min(1.0, 0.05 * (2 ** min(waited, 10.0)))


def wait_for_decision(
    store: Store, request_id: str, timeout: float, sleep: Callable[[float], None] = time.sleep
) -> ApprovalRecord:
    """Poll the request (holding no connection between polls) until it is decided or
    ``timeout`` seconds pass; the last record read."""
    deadline = time.monotonic() + timeout
    started = time.monotonic()
    last: Optional[ApprovalRecord] = None
    while True:
        record = store.get_approval(request_id)
        if record is None:  # removed meanwhile (by hand): no grant, so no run
            if last is None:
                raise ApprovalRequired(
                    f"approval request {request_id} is gone from the store; nothing was reserved or run",
                    request_id=request_id,
                )
            return last
        last = record
        left = deadline - time.monotonic()
        if record.state is not ApprovalState.PENDING or left <= 0:
            return record
        sleep(min(left, poll_interval(time.monotonic() - started)))
