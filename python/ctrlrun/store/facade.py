"""The store API: :class:`Store`, the facade over the core's store, and :func:`open_store`.
(The default store is ``default.py``; ``api.py`` gives both in one import.)"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from typing import Callable, List, Optional, Tuple, Union

import ctrlrun._core as _core
from ctrlrun.errors import InvalidArgument
from ctrlrun.store.approvals import ApprovalRecord, approval_from_core, tell_decided
from ctrlrun.store.approvers import ApproverMethods
from ctrlrun.store.decode import record_from_core
from ctrlrun.store.durations import datetime_to_micros, lease_to_micros
from ctrlrun.store.paging import MAX_COUNT, ApprovalStates, approval_query, limit_of
from ctrlrun.store.policy import PolicyMethods
from ctrlrun.store.receipts import ReceiptMethods
from ctrlrun.store.records import EffectRecord, EffectState, Reservation, result_to_json
from ctrlrun.store.retention import RetentionMethods

__all__ = ["Store", "open_store", "Clock"]

Clock = Callable[[], datetime]


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
    def reserve_effect(
        self, key: str, action_id: str, lease: Union[timedelta, int, float]
    ) -> Reservation:
        """Reserve ``key`` for the attempt ``action_id`` for ``lease`` (timedelta or seconds).

        Raises:
            DuplicateEffect: the key is committed, or held under a live lease.
            AmbiguousEffect: the key is ambiguous (or just became so: its lease lapsed).
            StoreWriteFailed / StoreUnresolved: see docs/spec.md §6.
        """
        t = self._core.reserve(
            _core.ReserveRequest(key, action_id, lease_to_micros(lease), self._now_us())
        )
        rec = record_from_core(t)
        assert rec.lease_expires_at is not None
        return Reservation(rec.effect_key, rec.action_id, rec.attempt, rec.lease_expires_at, rec)

    def begin_execution(
        self, key: str, action_id: str, *, attempt: Optional[int] = None
    ) -> EffectRecord:
        """``reserved`` -> ``executing``, just before the executor's body starts."""
        return self._step(key, action_id, attempt, _core.Step.BEGIN, None)

    def commit_effect(
        self, key: str, action_id: str, result: object = None, *, attempt: Optional[int] = None
    ) -> EffectRecord:
        """``executing`` -> ``committed``; ``result`` is stored as JSON (or its repr)."""
        return self._step(key, action_id, attempt, _core.Step.COMMIT, result_to_json(result))

    def fail_effect(
        self, key: str, action_id: str, error: str, *, attempt: Optional[int] = None
    ) -> EffectRecord:
        """``executing`` (or ``reserved``: the body never started) -> ``failed``."""
        return self._step(key, action_id, attempt, _core.Step.FAIL, str(error))

    def mark_ambiguous(
        self, key: str, action_id: str, error: str, *, attempt: Optional[int] = None
    ) -> EffectRecord:
        """``reserved``/``executing``/``ambiguous`` -> ``ambiguous`` (outcome unknown)."""
        return self._step(key, action_id, attempt, _core.Step.AMBIGUOUS, str(error))

    def _step(
        self,
        key: str,
        action_id: str,
        attempt: Optional[int],
        step: _core.Step,
        payload: Optional[str],
    ) -> EffectRecord:
        request = _core.OutcomeRequest(key, action_id, attempt, step, payload, self._now_us())
        return record_from_core(self._core.transition(request))

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
        return record_from_core(self._core.resolve(key, state, resolver, self._now_us(), note))

    def get_effect(self, key: str) -> Optional[EffectRecord]:
        """The record for ``key``, or ``None``."""
        t = self._core.get_effect(key)
        return None if t is None else record_from_core(t)

    # -- approvals ------------------------------------------------------------------------
    def get_approval(self, request_id: str) -> Optional[ApprovalRecord]:
        """The approval request ``request_id`` (its state as of now), or ``None``."""
        t = self._core.get_approval(request_id, self._now_us())
        return None if t is None else approval_from_core(t)

    def list_approvals(
        self,
        state: ApprovalStates = None,
        *,
        action: Optional[str] = None,
        prefix: Optional[str] = None,
        requested_by: Optional[str] = None,
        after: Optional[str] = None,
        newest_first: bool = False,
        limit: Optional[int] = None,
    ) -> List[ApprovalRecord]:
        """The approval requests every given filter selects, oldest first (request time, then
        id), each in its state as of now; filtered, ordered and cut by the database.

        Args:
            state: a state (pending, granted, denied, used, expired) or a list of them.
            action: of this action.
            prefix: whose effect key starts with this text (plain text, not a pattern).
            requested_by: asked for by this principal.
            after: the ``cursor`` of the last request of the page before: the requests after
                it, in the same order.
            newest_first: the latest request first.
            limit: at most this many (a positive integer).
        """
        query = approval_query(state, action, prefix, requested_by, after, newest_first, limit)
        return [approval_from_core(t) for t in self._core.list_approvals(query, self._now_us())]

    def count_approvals(
        self,
        state: ApprovalStates = None,
        *,
        action: Optional[str] = None,
        prefix: Optional[str] = None,
        requested_by: Optional[str] = None,
        cap: int = MAX_COUNT,
    ) -> int:
        """How many approval requests the filters select (as :meth:`list_approvals`),
        counting to ``cap`` at most: a count of a long history reads no further."""
        query = approval_query(state, action, prefix, requested_by)
        cap = limit_of(cap, "cap") or MAX_COUNT
        return int(self._core.count_approvals(query, cap, self._now_us()))

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
        t = self._core.decide_approval(request_id, grant, by, note, self._now_us())
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
