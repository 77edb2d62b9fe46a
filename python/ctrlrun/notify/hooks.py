"""What the places where an event happens call: an approval request written
(``ctrlrun.call.approval.ask``), a person's decision (``Store._decide``) and a body's outcome
recorded ``ambiguous`` (the sync and async runners; the gateway runs the async one).

Each looks at the policy in force (``current_policy()``, the parsed file cached until it
changes) and does nothing more when no ``notify`` list names a target (``Policy.notifies``);
otherwise it queues the event for the delivery thread. None of them ever raises: a failure is
logged on ``ctrlrun.notify`` and the call, or the decision, goes on as if nothing was sent.
(Nothing on the path of a call that runs and commits calls any of this.)"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from datetime import datetime, timedelta, timezone
from typing import Any, Optional, Tuple

from ctrlrun._policy import Policy, current_policy
from ctrlrun.notify import delivery
from ctrlrun.notify.events import Event, approval_event, effect_event
from ctrlrun.store.approvals import ApprovalRecord, ApprovalState

__all__ = ["emit", "requested", "decided", "ambiguous", "recorded", "on_written", "fresh"]

log = logging.getLogger("ctrlrun.notify")

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
# How far a PostgreSQL server's clock may be from this host's for a request written by this
# call to be told from one that stood already (SQLite's clock is this host's).
SERVER_CLOCK_SLACK_US = 2_000_000
LOCAL_CLOCK_SLACK_US = 50_000
# The request ids this process told of already (a retry of the same call, another thread).
_told: OrderedDict[str, None] = OrderedDict()
_told_lock = threading.Lock()
_TOLD_KEPT = 4096


def _policy() -> Optional[Policy]:
    """The policy in force when it names a notification target, else ``None``."""
    policy = current_policy()
    return policy if policy is not None and policy.notifies else None


def emit(policy: Policy, event: Event, console_url: Optional[str] = None) -> int:
    """Queue ``event`` for every target of its action; how many were queued."""
    link_base = console_url or policy.console_url
    sent = 0
    for target in policy.targets(event.action):
        sent += delivery.submit(delivery.Delivery(target, event, link_base))
    return sent


def _micros(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(microseconds=1)


def now_us() -> int:
    """This host's clock, in microseconds (what bounds a request's ``requested_at``)."""
    return time.time_ns() // 1000


def fresh(
    row: Any,
    record: ApprovalRecord,
    fixed_us: Optional[int],
    before_us: int,
    after_us: int,
    backend: str,
) -> bool:
    """Whether ``record`` (``ask``'s answer) is a request this call wrote, not one that stood.

    The core's row says so itself when it has a ``created`` flag. Else: a new request is
    pending and was written at the instant of this call: exactly the store clock's value when
    the store has one, else within the call's own span on this host's clock (SQLite's), or
    within :data:`SERVER_CLOCK_SLACK_US` of it (a PostgreSQL server's clock). A request that
    stood was written by an earlier call; one written by another call in the same instant is
    told apart, in this process, by the ids already told of."""
    created = getattr(row, "created", None)
    if isinstance(created, bool):
        return created
    if record.state is not ApprovalState.PENDING:
        return False
    at = _micros(record.requested_at)
    if fixed_us is not None:
        return at == fixed_us
    slack = LOCAL_CLOCK_SLACK_US if backend == "sqlite" else SERVER_CLOCK_SLACK_US
    return before_us - slack <= at <= after_us + slack


def _first_time(request_id: str) -> bool:
    with _told_lock:
        if request_id in _told:
            return False
        _told[request_id] = None
        while len(_told) > _TOLD_KEPT:
            _told.popitem(last=False)
        return True


def requested(
    store: Any, row: Any, record: ApprovalRecord, fixed_us: Optional[int], before_us: int
) -> None:
    """``ask`` wrote (or found) ``record``: ``approval.requested`` if this call wrote it."""
    try:
        policy = _policy()
        if policy is None:
            return
        if not fresh(row, record, fixed_us, before_us, now_us(), store.backend):
            return
        if _first_time(record.request_id):
            emit(policy, approval_event("approval.requested", record, record.requested_at))
    except Exception as exc:
        log.error("ctrlrun: approval.requested for %s not sent: %s", record.request_id, exc)


def decided(record: ApprovalRecord) -> ApprovalRecord:
    """A person's decision landed: ``approval.granted`` once the last grant needed is in (the
    request reads ``granted``), ``approval.denied`` on a denial. Returns ``record``."""
    try:
        if record.state in (ApprovalState.GRANTED, ApprovalState.DENIED):
            policy = _policy()
            if policy is not None:
                name = f"approval.{record.state.value}"
                emit(policy, approval_event(name, record, record.decided_at))
    except Exception as exc:
        log.error("ctrlrun: the decision on %s was not notified: %s", record.request_id, exc)
    return record


def ambiguous(action: Optional[str], key: str, requested_by: Optional[str] = None) -> None:
    """A body's outcome was recorded ``ambiguous``: ``effect.ambiguous``."""
    try:
        policy = _policy()
        if policy is not None:
            emit(policy, effect_event(action, key, requested_by=requested_by))
    except Exception as exc:
        log.error("ctrlrun: effect.ambiguous for action %r not sent: %s", action, exc)


def _subject(call: Any) -> Tuple[Optional[str], str, Optional[str]]:
    spec = call.spec
    action = None if spec is None else spec.action
    return action, call.key, getattr(spec, "requested_by", None)


def recorded(call: Any, ending: Any) -> None:
    """The sync runner recorded ``ending`` for ``call``: an ``ambiguous`` one is notified."""
    if ending.state == "ambiguous":
        ambiguous(*_subject(call))


def on_written(call: Any, ending: Any, written: Any) -> None:
    """The async runner's outcome write ``written`` (a future) for ``ending``: once it has
    landed, an ``ambiguous`` one is notified (also when the caller was cancelled meanwhile)."""
    if ending.state != "ambiguous":
        return
    try:
        subject = _subject(call)

        def landed(done: Any) -> None:
            if not done.cancelled() and done.exception() is None:
                ambiguous(*subject)

        written.add_done_callback(landed)
    except Exception as exc:
        log.error("ctrlrun: effect.ambiguous not sent: %s", exc)
