"""The step machine of one protected call: reserve (straight into ``executing``), run the
executor inside its context, record its outcome.

A :class:`Call` holds every decision once: the reservation, the executor context, what a
return or a raise records, how a refused outcome write is chained onto the executor's
exception. Its store steps (:meth:`Call.reserve`, :meth:`Call.record`,
:meth:`Call.fail_unstarted`) are plain blocking calls. The drivers only sequence the steps,
do the I/O and await: ``runner`` calls them in line, ``runner_async`` off the event loop
with the cancellation rules of docs/spec.md §8.1."""

from __future__ import annotations

import contextvars
import hashlib
import logging
import os
import time
from datetime import timedelta
from typing import Any, Callable, Dict, FrozenSet, Optional, Tuple, TypeVar, Union

import ctrlrun._core as _core
from ctrlrun.call import outcome
from ctrlrun.call.approval import ask, poll_interval, refusal
from ctrlrun.call.fingerprint import Fingerprint, fingerprint, texts
from ctrlrun.call.outcome import Outcome, exc_text
from ctrlrun.call.telemetry import body_started
from ctrlrun.errors import (
    AmbiguousEffect,
    DuplicateEffect,
    EffectConflict,
    InvalidArgument,
    StoreError,
    StoreLostWrite,
    StoreUnresolved,
)
from ctrlrun.notify import hooks as notify_hooks
from ctrlrun.store.api import Store
from ctrlrun.store.approvals import DEFAULT_APPROVAL_TTL, ApprovalRecord, ApprovalState
from ctrlrun.store.durations import lease_to_micros
from ctrlrun.store.records import UNSERIALIZABLE_MARKER, EffectRecord

log = logging.getLogger("ctrlrun")

# The call whose executor is running in this context (its effect key and attempt).
current: contextvars.ContextVar[Optional[Call]] = contextvars.ContextVar(
    "ctrlruncurrent_effect", default=None
)

# Outcome writes are compare-and-sets, so re-issuing them is safe: the pauses between tries.
OUTCOME_PAUSES = (0.05, 0.25, 1.0)

#: A protected function's positional and keyword arguments, as the wrapper got them.
Args = Tuple[Any, ...]
Kwargs = Dict[str, Any]

# What a failed outcome write raises in place of the executor's exception (chained onto it):
# the store's refusal, or the write that could not be recorded. Anything else (an interrupt)
# propagates as it is.
REFUSALS = (StoreError, DuplicateEffect, AmbiguousEffect, InvalidArgument)


#: Set on an exception that came out of a protected function's body (or out of recording
#: what the body did): whatever it is, this call ran, so it is never this call's refusal.
THROUGH_BODY = "__ctrlrun_through_body__"

E = TypeVar("E", bound=BaseException)


def through_body(exc: E) -> E:
    """Mark ``exc`` as raised after the body began (a nested protected call's refusal
    included); returns it."""
    try:
        setattr(exc, THROUGH_BODY, True)
    except (AttributeError, TypeError):  # an exception type without attributes: not ctrlrun's
        pass
    return exc


def idempotency_token() -> str:
    """A token for the remote API's own idempotency header, derived from the running
    executor's (effect key, attempt): the same on every call within one attempt, different
    after a renewal. Raises ``InvalidArgument`` outside a protected executor."""
    call = current.get()
    if call is None:
        raise InvalidArgument("idempotency_token() is only available inside a protected executor")
    text = f"{call.attempt}\x1f{call.key}"
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return f"ctrlrun-{digest[:40]}"


def extend_lease(seconds: Union[timedelta, int, float]) -> EffectRecord:
    """Inside a protected executor: move this attempt's lease to ``seconds`` from now (a
    ``timedelta`` or a number of seconds), so a long body is not lapsed to ``ambiguous`` by
    the next contender. A compare-and-set fenced by the attempt: refused (``InvalidArgument``)
    once the lease has lapsed or the key has moved on, or when the new end would be earlier
    than the current one. It is store I/O: from an ``async def`` body, call it with
    ``await asyncio.to_thread(ctrlrun.extend_lease, 600)``. Raises ``InvalidArgument``
    outside a protected executor."""
    call = current.get()
    if call is None:
        raise InvalidArgument("extend_lease() is only available inside a protected executor")
    length = timedelta(microseconds=lease_to_micros(seconds, "extend_lease()"))
    return call.store.extend_lease(call.key, call.action_id, length, attempt=call.attempt)


def replayable(dup: DuplicateEffect) -> bool:
    """Whether a refusal may be answered with the stored result (``replay``): the key is
    committed by a call with the same action and the same argument fingerprint (a conflict
    is raised as its own class), and its result was stored as JSON."""
    record = dup.record
    if isinstance(dup, EffectConflict) or record is None or dup.state != "committed":
        return False
    if record.args_digest is None:  # written without a fingerprint: nothing proves "same"
        return False
    result = record.result
    return not (isinstance(result, dict) and UNSERIALIZABLE_MARKER in result)


def after_refusal(
    dup: DuplicateEffect, replay: bool, wait: float, started: float, seen: Any
) -> Tuple[bool, Any]:
    """What a protected call does when refused with ``dup``, having started waiting at
    ``started`` (``time.monotonic()``): ``(True, result)`` to replay (``replay``, and the key is
    committed by a call with the same arguments; ``seen`` is marked replayed), ``(False,
    seconds)`` to reserve again after the pause, holding nothing meanwhile (another attempt
    holds the key, and ``wait`` seconds are not up); otherwise ``dup`` is raised."""
    if replay and replayable(dup):
        assert dup.record is not None
        seen.replayed = True
        return True, dup.record.result
    waited = time.monotonic() - started
    left = wait - waited
    if dup.state == "in_progress" and not isinstance(dup, EffectConflict) and left > 0:
        return False, min(left, poll_interval(waited))
    raise dup


class Spec:
    """What a protected call says about itself besides its key: its action name, its
    arguments (``parts``: name and canonical JSON text, which the core hashes onto the row),
    and for an ``approve`` action the approval's time to live, how long to wait for a
    decision, who asks (``requested_by``, who can never grant it) and how many distinct people
    must grant it."""

    __slots__ = (
        "action",
        "approval_timeout",
        "approval_ttl",
        "approvals_needed",
        "arguments",
        "encoder",
        "exclude",
        "left_out",
        "parts",
        "requested_by",
    )

    def __init__(
        self,
        action: str,
        arguments: Dict[str, Any],
        exclude: FrozenSet[str],
        approval_ttl: Optional[timedelta],
        approval_timeout: float,
        encoder: Optional[Callable[[Any], Any]] = None,
        requested_by: Optional[str] = None,
        approvals_needed: int = 1,
    ) -> None:
        self.encoder = encoder
        self.action = action
        self.arguments = arguments
        self.exclude = exclude
        self.parts, self.left_out = texts(arguments, exclude)
        self.approval_ttl = approval_ttl
        self.approval_timeout = approval_timeout
        self.requested_by = requested_by
        self.approvals_needed = approvals_needed

    def fingerprint(self) -> Fingerprint:
        """The whole fingerprint (digests and what an approver is shown): asked for only by an
        approval."""
        return fingerprint(self.arguments, self.exclude)


class Call:
    """One protected call of the executor for ``key``: its action id, its lease and, once
    reserved, its attempt. The steps, in order: :meth:`reserve`; :meth:`enter` the executor
    context; run the body; :meth:`leave`; :meth:`record` what :meth:`returned` or
    :meth:`raised` says, raising :meth:`refused` if that write is refused after a raise."""

    __slots__ = ("action_id", "approve", "attempt", "key", "lease_us", "spec", "store", "token")

    attempt: int
    token: contextvars.Token[Optional[Call]]

    def __init__(self, store: Store, key: str, lease_us: int, spec: Optional[Spec] = None) -> None:
        self.store = store
        self.key = key
        self.lease_us = lease_us
        self.spec = spec
        # Reserve with a grant in force: the caller's own policy says ``approve``, or the
        # store's policy said so when it refused a reservation without one (ApprovalNeeded).
        self.approve = spec is not None and spec.approval_ttl is not None
        self.action_id = "act_" + os.urandom(16).hex()
        # attempt: set by reserve(); token: by enter()

    # ---- step 1: the reservation (store I/O) ----------------------------------------------

    def reserve(self) -> int:
        """Reserve the key straight into ``executing`` (one durable write: the begin
        transition is folded into the reservation, since the body starts right after);
        returns the attempt."""
        attempt: Optional[int] = None
        try:
            attempt = self.store._core.reserve(self.reserve_request()).attempt
            # Still inside the try: an interrupt (KeyboardInterrupt) landing just after the
            # reservation returned records it as failed, since the body never started.
            self.attempt = attempt
            return attempt
        except StoreUnresolved:  # names this key and attempt (the core's), if it did land
            raise
        except BaseException as exc:
            if attempt is not None:
                self.attempt = attempt
                self.fail_unstarted(exc)
            raise

    def reserve_request(self) -> _core.ReserveRequest:
        """The core's reservation for this call (its clock read now), straight into
        ``executing``."""
        spec = self.spec
        now = self.store._now_us()
        if spec is None:
            return _core.ReserveRequest(self.key, self.action_id, self.lease_us, now, True)
        return _core.ReserveRequest(
            self.key,
            self.action_id,
            self.lease_us,
            now,
            True,
            spec.action,
            spec.parts,
            self.approve,
        )

    def ask(self) -> ApprovalRecord:
        """This call's approval request: the one that stands for its action and arguments, or
        a new pending one (store I/O). The store's policy may require it where the caller's
        own does not (a reservation refused with ``ApprovalNeeded``): the request then lives
        for the default time, and the next reservation uses its grant."""
        spec = self.spec
        assert spec is not None
        self.approve = True
        ttl = spec.approval_ttl if spec.approval_ttl is not None else DEFAULT_APPROVAL_TTL
        fp = spec.fingerprint()
        return ask(
            self.store,
            spec.action,
            self.key,
            fp.digest,
            fp.arguments,
            ttl,
            fp.not_bound,
            spec.requested_by,
            spec.approvals_needed,
        )

    def granted(self, record: ApprovalRecord) -> None:
        """Go on only with a grant in force: a pending or denied request raises
        ``ApprovalRequired`` / ``ActionDenied``."""
        if record.state is not ApprovalState.GRANTED:
            raise refusal(record)

    def fail_unstarted(self, why: BaseException) -> None:
        """The call stopped after the reservation landed but before the body began: nothing
        ran, so record ``failed`` (a retry may run). If that write fails too, the lease lapses
        into ``ambiguous``."""
        store = self.store
        try:
            store._core.transition(
                _core.OutcomeRequest(
                    self.key,
                    self.action_id,
                    self.attempt,
                    _core.Step.FAIL,
                    f"the executor never started: {exc_text(why)}",
                    store._now_us(),
                )
            )
        except Exception as exc:  # the original error is what the caller must see
            log.warning("ctrlrun: could not record %r as failed after %r: %s", self.key, why, exc)

    # ---- step 2: the executor's context ---------------------------------------------------

    def enter(self) -> None:
        """Make ``idempotency_token()`` answer for this attempt while the body runs."""
        self.token = current.set(self)
        body_started(self.attempt)

    def leave(self) -> None:
        current.reset(self.token)

    # ---- step 3: the outcome --------------------------------------------------------------

    def returned(self, result: Any) -> Outcome:
        """The outcome a return records: ``commit``, with the value as JSON."""
        return outcome.returned(result, None if self.spec is None else self.spec.encoder)

    def raised(self, exc: BaseException) -> Outcome:
        """The outcome an executor's exception records (:func:`outcome.raised`)."""
        return outcome.raised(exc)

    def refused(self, refusal: BaseException, exc: BaseException) -> BaseException:
        """What the caller gets when recording the outcome of ``exc`` raised one of
        ``REFUSALS``: the refusal, caused by the executor's exception (put at the end of
        the refusal's own chain of causes, which is kept)."""
        tail, seen = refusal, {id(refusal)}
        while (
            tail.__cause__ is not None
            and id(tail.__cause__) not in seen
            and tail.__cause__ is not exc
        ):
            tail = tail.__cause__
            seen.add(id(tail))
        tail.__cause__ = exc
        return refusal

    def record_request(self, ending: Outcome) -> _core.OutcomeRequest:
        """The core's outcome write for ``ending`` (the clock read now), re-issued after each
        of ``OUTCOME_PAUSES``."""
        return _core.OutcomeRequest(
            self.key,
            self.action_id,
            self.attempt,
            ending.step,
            ending.payload,
            self.store._now_us(),
            OUTCOME_PAUSES,
        )

    def record(self, ending: Outcome) -> None:
        """Record the executor's outcome as :meth:`returned` or :meth:`raised` gave it (store
        I/O). The core re-issues the compare-and-set on store failures after each of
        ``OUTCOME_PAUSES``, as the async path's core threads do."""
        try:
            self.store._core.record_outcome(self.record_request(ending))
        except Exception as exc:
            raise self.not_recorded(ending, exc)  # noqa: B904 - not_recorded() sets the cause itself

    def not_recorded(self, ending: Outcome, exc: Exception) -> Exception:
        """What recording the outcome ``ending`` raises when its last try raised ``exc``."""
        if isinstance(exc, StoreLostWrite):
            # The store lost this attempt's acknowledged write (the core logged it and marked
            # the key ambiguous where it could): a person hears of it as of any ambiguous one.
            if exc.marked:
                notify_hooks.ambiguous(
                    None if self.spec is None else self.spec.action,
                    self.key,
                    getattr(self.spec, "requested_by", None),
                )
            return exc
        if isinstance(exc, (DuplicateEffect, AmbiguousEffect, InvalidArgument)) and not (
            isinstance(exc, InvalidArgument) and self.store._core.closed
        ):
            # The row is no longer this attempt's to write (a newer attempt holds it, or a
            # person settled it in a way the outcome cannot change): the store's refusal is
            # the answer, and the outcome that came too late is on record in the log.
            log.error(
                "ctrlrun: the outcome (%s) of effect %r, attempt %d (action %s), was not recorded: %s",
                ending.word,
                self.key,
                self.attempt,
                self.action_id,
                exc,
            )
            return exc
        if isinstance(exc, StoreUnresolved):
            # A try may have landed: say so, whatever the later tries met (an error never
            # claims less than what may have been written).
            unknown = StoreUnresolved(
                f"the executor for effect '{self.key}' has already run (attempt "
                f"{self.attempt}, action {self.action_id}), and whether its outcome ({ending.word}) "
                f"was recorded is unknown: the outcome may have been recorded; the body has "
                f"run. {exc}. Read the effect once the store is reachable (`ctrlrun effects "
                f"show`) to see what it holds; do not retry it blindly",
                effect_key=self.key,
                action_id=self.action_id,
            )
            unknown.__cause__ = exc
            return unknown
        # A write that kept failing, a closed store, a broken clock: the executor has run, and
        # every try is known not to have landed.
        failed = StoreError(
            f"the executor for effect '{self.key}' has already run (attempt {self.attempt}, "
            f"action {self.action_id}), but recording its outcome ({ending.word}) failed: {exc}. The "
            f"row keeps what the store last recorded (executing, until a contender finds its "
            f"lease lapsed and marks it ambiguous); do not retry it blindly"
        )
        failed.__cause__ = exc
        return failed
