"""What every integration shares, framework-free: how a refusal becomes the model's answer
(:mod:`ctrlrun.call.refusals`, which the gateway uses too), what a protected function tells an
integration (:mod:`ctrlrun.call.protected`), and the one rule by which a decision made through
a framework's human-in-the-loop is recorded: :func:`decide`."""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Sequence, Union

from ctrlrun.call import io_threads
from ctrlrun.call.protected import Protected, protected
from ctrlrun.call.refusals import (
    REFUSALS,
    Refusal,
    Refused,
    answering,
    catching,
    key_or_none,
    refusal_of,
)
from ctrlrun.errors import InvalidArgument
from ctrlrun.store.api import Store
from ctrlrun.store.approvals import ApprovalRecord, ApprovalState

__all__ = [
    "Refusal",
    "Refused",
    "refusal_of",
    "answering",
    "catching",
    "key_or_none",
    "protected",
    "Protected",
    "REFUSALS",
    "decide",
    "adecide",
    "asks_approval",
    "answered_without_asking",
    "standing_request",
    "check_approver",
    "refuse_twice",
]

#: An approval request as :func:`decide` takes it: its id, or its record as read (or ``None``).
Request = Union[str, ApprovalRecord, None]


def decide(
    store: Store, request: Request, grant: bool, by: str, note: Optional[str]
) -> Optional[ApprovalRecord]:
    """Grant (``grant``) or deny, as ``by``, the pending approval request ``request`` (its id,
    or its record as read), unless it is pending no more: a decision made meanwhile (by a
    person with ``ctrlrun approve``, the console, a twin call) stands, as does an expiry.
    Returns the request as it now stands; ``None`` when none is recorded.

    A decision the store refuses while the request is still pending (a name or note it cannot
    keep, the asker granting their own request, a second grant by the same person) is not
    someone else's decision: its ``InvalidArgument`` propagates. Which of the two a refusal was
    is read from the request's state after it, never from the message."""
    current = store.get_approval(request) if isinstance(request, str) else request
    if current is None or current.state is not ApprovalState.PENDING:
        return current
    write = store.grant_approval if grant else store.deny_approval
    try:
        return write(current.request_id, by, note)
    except InvalidArgument:
        again = store.get_approval(current.request_id)
        if again is not None and again.state is ApprovalState.PENDING:
            raise
        return again


async def adecide(
    store: Store, request: Request, grant: bool, by: str, note: Optional[str]
) -> Optional[ApprovalRecord]:
    """:func:`decide`, its store I/O on a worker thread."""
    now: Optional[ApprovalRecord] = await io_threads.run(decide, store, request, grant, by, note)
    return now


def asks_approval(action: str, options: Mapping[str, Any]) -> bool:
    """Whether calls of ``action`` need a person: the policy in force now says ``approve``,
    or (where it decides nothing) the decorator's ``decision`` does."""
    from ctrlrun.policy import current_policy

    decision = options.get("decision", "allow")
    policy = current_policy()
    entry = None if policy is None else policy.actions.get(action)
    if entry is not None and entry.decided:
        decision = entry.decision
    return bool(decision == "approve")


def answered_without_asking(row: Any) -> bool:
    """A key already committed, in progress or ambiguous: the call is answered (refused or
    replayed) without a person, so none is asked."""
    return row is not None and row.state.value != "failed"


def standing_request(
    about: Protected, args: Sequence[Any], kwargs: Dict[str, Any]
) -> Optional[ApprovalRecord]:
    """The approval request standing for a call with these arguments (asked, pending, when
    none stands); ``None`` when the call needs no person: no approval for its action, a key
    the call answers by itself, or arguments the call refuses by itself (a denial by policy,
    no key)."""
    try:
        key = about.key(*args, **kwargs)
        if key is None:
            return None
        store = about.store()
        if answered_without_asking(store.get_effect(key)):
            return None
        record = about.approval(*args, **kwargs)
        # A twin's reservation may have used the grant since the read (a new request was then
        # asked): the key is answered now, and that request must not be granted.
        if record is not None and record.state is ApprovalState.PENDING:
            if answered_without_asking(store.get_effect(key)):
                return None
        return record
    except REFUSALS:
        return None


def check_approver(name: str, approved_by: Any, of: str) -> None:
    """Refuse an ``approved_by`` that is neither a name nor a function of ``of`` (what the
    framework hands a tool: its run context) giving one."""
    if approved_by is not None and not (isinstance(approved_by, str) or callable(approved_by)):
        raise InvalidArgument(
            f"protect({name!r}): approved_by must be a name or a function of {of}, "
            f"got {approved_by!r}"
        )


def refuse_twice(name: str, target: Any, hint: str = "") -> None:
    """Refuse to protect ``target`` when it is protected already (``hint``: what to do)."""
    if protected(target) is not None:
        raise InvalidArgument(
            f"protect({name!r}): {getattr(target, '__qualname__', target)!r} is already "
            f"protected; protect it once{hint}"
        )
