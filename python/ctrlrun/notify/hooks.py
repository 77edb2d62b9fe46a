"""What the places where an event happens call: an approval request written
(``ctrlrun.call.approval.ask``), a person's decision (``Store._decide``, through the hook this
module adds with ``ctrlrun.store.approvals.when_decided``) and a body's outcome recorded
``ambiguous`` (the sync and async runners; the gateway runs the async one).

Each looks at the policy in force (``current_policy()``, the parsed file cached until it
changes) and does nothing more when no ``notify`` list names a target (``Policy.notifies``);
otherwise it queues the event for the delivery thread. None of them ever raises: a failure is
logged on ``ctrlrun.notify`` and the call, or the decision, goes on as if nothing was sent.
(Nothing on the path of a call that runs and commits calls any of this.)"""

from __future__ import annotations

import logging
from typing import Any, Optional, Tuple

from ctrlrun.notify import delivery
from ctrlrun.notify.events import Event, approval_event, effect_event
from ctrlrun.policy import Policy, current_policy
from ctrlrun.store.approvals import ApprovalRecord, ApprovalState, when_decided

__all__ = [
    "emit",
    "serve_links_from",
    "requested",
    "decided",
    "ambiguous",
    "recorded",
    "on_written",
]

log = logging.getLogger("ctrlrun.notify")


def _policy() -> Optional[Policy]:
    """The policy in force when it names a notification target, else ``None``."""
    policy = current_policy()
    return policy if policy is not None and policy.notifies else None


# The console this process serves (``ctrlrun console`` sets it): the links of the decisions
# made here point at it when the policy names none.
_serving_console: Optional[str] = None


def serve_links_from(console_url: Optional[str]) -> None:
    """Links of events this process tells point at ``console_url`` when the policy has no
    ``console_url`` (``ctrlrun console`` says where it is reached)."""
    global _serving_console
    _serving_console = console_url


def emit(policy: Policy, event: Event, console_url: Optional[str] = None) -> int:
    """Queue ``event`` for every target of its action; how many were queued."""
    link_base = console_url or _serving_console or policy.console_url
    sent = 0
    for target in policy.targets(event.action):
        sent += delivery.submit(delivery.Delivery(target, event, link_base))
    return sent


def requested(created: bool, record: ApprovalRecord) -> None:
    """``ask`` wrote (``created``, as the core says) or found ``record``:
    ``approval.requested`` if this call wrote it (exactly once per request, whatever the
    number of processes asking at once)."""
    try:
        if not created:
            return
        policy = _policy()
        if policy is not None:
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


when_decided(decided)


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
