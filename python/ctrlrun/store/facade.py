"""The store API: :class:`Store`, the facade over the core's store, and :func:`open_store`.
(The default store is ``default.py``; ``api.py`` gives both in one import.)"""

from __future__ import annotations

import functools
import os
import traceback
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, List, Optional, Tuple, TypeVar, Union

import ctrlrun._core as _core
from ctrlrun.errors import InvalidArgument
from ctrlrun.store.approvals import ApprovalRecord, approval_from_core, tell_decided
from ctrlrun.store.approvers import ApproverMethods
from ctrlrun.store.decode import record_from_core
from ctrlrun.store.durations import datetime_to_micros, lease_to_micros
from ctrlrun.store.policy import PolicyMethods
from ctrlrun.store.receipts import ReceiptMethods
from ctrlrun.store.records import EffectRecord, EffectState, Reservation, result_to_json
from ctrlrun.store.retention import RetentionMethods

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["Store", "open_store", "Clock"]

Clock = Callable[[], datetime]


def _api(method: F) -> F:
    """A Store API method: text arguments (key, action id, error, resolver) must be valid
    Unicode (a lone surrogate, which no store can keep as text, is ``InvalidArgument`` before
    anything is written, not the ``UnicodeEncodeError`` of the conversion). (A
    ``StoreUnresolved`` names the call's key and action id as the core raised it.)"""

    @functools.wraps(method)
    def checked(self: Store, key: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, key, *args, **kwargs)
        except UnicodeEncodeError as exc:
            raise InvalidArgument(
                f"{method.__name__}: {exc.object!r} holds a lone surrogate at position "
                f"{exc.start}, which no store can keep as text; nothing was written"
            ) from None
        except (TypeError, OverflowError) as exc:
            if not _raised_by_a_call_in(exc, 2):
                raise  # from deeper down (a clock, a conversion): not the caller's arguments
            raise InvalidArgument(f"{method.__name__}: {exc}") from None

    return checked  # type: ignore[return-value]


def _raised_by_a_call_in(exc: BaseException, frames: int) -> bool:
    """Whether ``exc`` was raised by a built-in call (the core's, refusing an argument it
    cannot take) made in the innermost of the ``frames`` Python frames it passed through."""
    return sum(1 for _ in traceback.walk_tb(exc.__traceback__)) <= frames


class Store(ReceiptMethods, RetentionMethods, ApproverMethods, PolicyMethods):
    """A durable table of effect records (SQLite file or PostgreSQL database).

    Safe to share across threads; every call releases the GIL while it waits on the database.
    Open one with :func:`open_store`. Timestamps are aware UTC datetimes.

    ``clock``, when given, is a callable returning an aware datetime that replaces the
    backend's clock for every lease decision (tests move time with it, without sleeping).

    The transition methods accept ``attempt=`` to narrow the compare-and-set to one attempt;
    without it, the action id alone is matched.
    """

    __slots__ = ("__weakref__", "_clock", "_core")

    def __init__(self, core: _core.Store, clock: Optional[Clock] = None) -> None:
        if clock is not None and not callable(clock):
            raise InvalidArgument(f"clock must be a callable returning a datetime, got {clock!r}")
        self._core = core
        self._clock = clock

    # -- for ctrlrun's own modules (the decorator's hot path), not part of the API ----------
    # ``_core`` is the Rust store this handle wraps (set in __init__).

    def _now_us(self) -> Optional[int]:
        """The store clock's time in microseconds, or None: the backend's own clock."""
        clock = self._clock
        if clock is None:
            return None
        return datetime_to_micros(clock(), "the store clock's value")

    @property
    def url(self) -> str:
        """Where the store lives (``sqlite:////abs/path.db``; never a password)."""
        return self._core.url

    @property
    def backend(self) -> str:
        """``"sqlite"`` or ``"postgres"``: the database this store writes to."""
        return self._core.backend

    def posture(self) -> List[Tuple[str, str, str]]:
        """What the store's set-up does to the promise, as read at open: ``(check, standing,
        detail)`` for ``durable commits``, ``replication`` and (PostgreSQL) ``pooler``;
        standing ``pass``, ``fail``, ``not visible`` or ``info`` (docs/postgres.md)."""
        return [(c, s, d) for c, s, d in self._core.posture()]

    @property
    def clock(self) -> Optional[Clock]:
        return self._clock

    def with_clock(self, clock: Optional[Clock]) -> Store:
        """A handle on the same database whose lease decisions use ``clock``."""
        return Store(self._core, clock)

    # -- the reference's API -------------------------------------------------------------
    @_api
    def reserve_effect(
        self, key: str, action_id: str, lease: Union[timedelta, int, float]
    ) -> Reservation:
        """Reserve ``key`` for the attempt ``action_id`` for ``lease`` (timedelta or seconds).

        Raises:
            DuplicateEffect: the key is committed, or held under a live lease.
            AmbiguousEffect: the key is ambiguous (or just became so: its lease lapsed).
            StoreWriteFailed / StoreUnresolved: see docs/spec.md §6.
        """
        t = self._core.reserve(key, action_id, lease_to_micros(lease), self._now_us())
        rec = record_from_core(t)
        assert rec.lease_expires_at is not None
        return Reservation(rec.effect_key, rec.action_id, rec.attempt, rec.lease_expires_at, rec)

    @_api
    def begin_execution(
        self, key: str, action_id: str, *, attempt: Optional[int] = None
    ) -> EffectRecord:
        """``reserved`` -> ``executing``, just before the executor's body starts."""
        return record_from_core(
            self._core.transition(*self._step(key, action_id, attempt, _core.Step.BEGIN, None))
        )

    @_api
    def commit_effect(
        self, key: str, action_id: str, result: object = None, *, attempt: Optional[int] = None
    ) -> EffectRecord:
        """``executing`` -> ``committed``; ``result`` is stored as JSON (or its repr)."""
        return record_from_core(
            self._core.transition(
                *self._step(key, action_id, attempt, _core.Step.COMMIT, result_to_json(result))
            )
        )

    @_api
    def fail_effect(
        self, key: str, action_id: str, error: str, *, attempt: Optional[int] = None
    ) -> EffectRecord:
        """``executing`` (or ``reserved``: the body never started) -> ``failed``."""
        return record_from_core(
            self._core.transition(*self._step(key, action_id, attempt, _core.Step.FAIL, str(error)))
        )

    @_api
    def mark_ambiguous(
        self, key: str, action_id: str, error: str, *, attempt: Optional[int] = None
    ) -> EffectRecord:
        """``reserved``/``executing``/``ambiguous`` -> ``ambiguous`` (outcome unknown)."""
        return record_from_core(
            self._core.transition(
                *self._step(key, action_id, attempt, _core.Step.AMBIGUOUS, str(error))
            )
        )

    def _step(
        self, key: str, action_id: str, attempt: Optional[int], step: _core.Step, payload: Any
    ) -> Tuple[Any, ...]:
        # The core's transition arguments (the clock read now); the core call itself stays in
        # the API method's frame, where a TypeError/OverflowError is the caller's argument's.
        return (key, action_id, attempt, step, payload, self._now_us())

    @_api
    def extend_lease(
        self,
        key: str,
        action_id: str,
        until: Union[datetime, timedelta],
        *,
        attempt: Optional[int] = None,
    ) -> EffectRecord:
        """Move the live lease of an ``executing`` attempt to ``until``.

        ``until`` is an aware datetime, or a timedelta counted from now. It must not be earlier
        than the current expiry; a lapsed lease cannot be revived (``InvalidArgument``).
        """
        now = self._now_us()
        if isinstance(until, timedelta):
            base = now if now is not None else datetime_to_micros(_utcnow())
            until_us = base + lease_to_micros(until, "extension")
        else:
            until_us = datetime_to_micros(until, "until")
        return record_from_core(self._core.extend_lease(key, action_id, attempt, until_us, now))

    @_api
    def resolve_effect(
        self, key: str, state: Union[EffectState, str], resolver: str, note: Optional[str] = None
    ) -> EffectRecord:
        """A person settles an ``ambiguous`` effect as ``committed`` or ``failed``.

        A held effect (``reserved``/``executing``) whose lease has lapsed, its holder gone, is
        settled the same way: the lapse and the resolution are written together. ``resolver``
        names who decided, one printable line (``"ops:alice"``). Anything else (a live lease,
        ``committed``, ``failed``) is refused with ``InvalidArgument`` naming the state found.
        ``note``: why (one line, at most 2,000 characters), kept after the resolution in the
        record's ``error`` text.
        """
        return record_from_core(
            self._core.resolve(key, _state_text(state), resolver, self._now_us(), note)
        )

    @_api
    def get_effect(self, key: str) -> Optional[EffectRecord]:
        """The record for ``key``, or ``None``."""
        t = self._core.get_effect(key)
        return None if t is None else record_from_core(t)

    # -- approvals ------------------------------------------------------------------------
    def get_approval(self, request_id: str) -> Optional[ApprovalRecord]:
        """The approval request ``request_id`` (its state as of now), or ``None``."""

        try:
            t = self._core.get_approval(request_id, self._now_us())
        except (UnicodeEncodeError, TypeError) as exc:
            if isinstance(exc, TypeError) and not _raised_by_a_call_in(exc, 1):
                raise
            raise InvalidArgument(f"{request_id!r} is not an approval request id") from None
        return None if t is None else approval_from_core(t)

    def list_approvals(self, state: Optional[str] = None) -> List[ApprovalRecord]:
        """Every approval request (or those in ``state``: pending, granted, denied, used,
        expired), oldest first."""

        st = None if state is None else str(getattr(state, "value", state))
        try:
            found = self._core.list_approvals(st, self._now_us())
        except UnicodeEncodeError:
            raise InvalidArgument(f"unknown approval state {st!r}") from None
        return [approval_from_core(t) for t in found]

    def grant_approval(
        self, request_id: str, by: str, note: Optional[str] = None
    ) -> ApprovalRecord:
        """A person (``by``) approves a pending request: the next call of its action with the
        same arguments runs, once, within the request's time to live."""
        return self._decide(request_id, True, by, note)

    def deny_approval(self, request_id: str, by: str, note: Optional[str] = None) -> ApprovalRecord:
        """A person (``by``) denies a pending request: calls of its action with the same
        arguments raise ``ActionDenied`` naming them, for the request's time to live."""
        return self._decide(request_id, False, by, note)

    def _decide(self, request_id: str, grant: bool, by: str, note: Optional[str]) -> ApprovalRecord:
        try:
            t = self._core.decide_approval(request_id, grant, by, note, self._now_us())
        except UnicodeEncodeError:
            raise InvalidArgument(
                "a request id, name or note with a lone surrogate cannot be stored; nothing was written"
            ) from None
        except TypeError as exc:
            if not _raised_by_a_call_in(exc, 1):
                raise
            raise InvalidArgument(
                f"the request id, name and note must be str: {exc}; nothing was written"
            ) from None
        return tell_decided(approval_from_core(t))  # approval.granted / approval.denied

    def close(self) -> None:
        """Release the store's connections; later calls raise ``InvalidArgument``."""
        self._core.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<ctrlrun.Store {self.url}>"


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


def _state_text(state: Union[EffectState, str]) -> str:
    if isinstance(state, EffectState):
        return state.value
    if isinstance(state, str):
        return state
    raise InvalidArgument(f"state must be an EffectState or str, got {type(state).__name__}")


def open_store(url: str, *, clock: Optional[Clock] = None) -> Store:
    """Open (creating if needed) the store ``url`` names.

    * ``sqlite:///relative/state.db`` (relative to the working directory),
      ``sqlite:////abs/state.db``, or a bare file path. Options: ``?synchronous=full|normal``
      (default ``full``: a reservation survives power loss), ``busy_timeout=<seconds>``
      (default 30), ``file_mode=<octal>`` (default ``0600``: the mode of a file it creates; a
      folder it creates is ``0700``; the umask applies; nothing that exists is chmod-ed).
      In-memory databases are refused.

    Raises:
        InvalidArgument: a malformed URL, an unknown scheme or option, ``:memory:``.
        StoreError: the file cannot be created or opened (names the path), it is not a
            SQLite database, or its schema is newer than this version understands.
    """
    if not isinstance(url, (str, os.PathLike)):
        raise InvalidArgument(f"store URL must be a str, got {type(url).__name__}")
    return Store(_core.open_store(os.fspath(url)), clock)
