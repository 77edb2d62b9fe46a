"""Listing effects by filter, and retention: the methods of :class:`ctrlrun.Store` that read or
remove many rows at once.

Retention forgets: once a ``committed`` effect is pruned, the next call with its key runs
again. So a prune only removes settled rows (``committed``, ``failed``) whose creation and
last write are both older than the cut, never a row whose key has an approval request
pending or granted, and never an ``ambiguous``, ``reserved`` or ``executing`` one.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable, Iterable, List, Optional, Union

import ctrlrun._core as _core
from ctrlrun.errors import InvalidArgument
from ctrlrun.store.decode import record_from_core
from ctrlrun.store.durations import to_micros
from ctrlrun.store.paging import after_of, limit_of
from ctrlrun.store.records import EffectRecord, EffectState

__all__ = ["RetentionMethods", "PRUNABLE_STATES"]

#: The states a prune may remove, and its default.
PRUNABLE_STATES = ("committed", "failed")
_MAX_BATCH = 10_000
# The longest age accepted: a hundred years (far from int64 overflow in microseconds).
_MAX_AGE_US = 100 * 366 * 86_400 * 1_000_000


def age_to_micros(age: Union[timedelta, int, float]) -> int:
    """``older_than`` as whole microseconds: a ``timedelta`` or a number of seconds, > 0."""
    return to_micros(age, "older_than", _MAX_AGE_US, "a hundred years")


def _text(value: Any, what: str) -> Optional[str]:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidArgument(f"{what} must be a str, got {type(value).__name__}")
    if "\0" in value or any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        raise InvalidArgument(
            f"{what} {value!r} holds a NUL or a lone surrogate, which no store keeps as text"
        )
    return value


def _state(value: Union[EffectState, str], allowed: Iterable[str], what: str) -> str:
    text = value.value if isinstance(value, EffectState) else value
    if not isinstance(text, str) or text not in allowed:
        raise InvalidArgument(f"{what}: {value!r} is not one of {', '.join(allowed)}")
    return text


class RetentionMethods:
    """The listing and retention methods of :class:`ctrlrun.Store`."""

    __slots__ = ()
    _core: _core.Store
    _now_us: Callable[[], Optional[int]]  # Store's: the movable clock, or None

    def list_effects(
        self,
        state: Union[EffectState, str, None] = None,
        *,
        prefix: Optional[str] = None,
        action: Optional[str] = None,
        limit: Optional[int] = None,
        after: Optional[str] = None,
        newest_first: bool = False,
    ) -> List[EffectRecord]:
        """The records every given filter selects, oldest first (creation time, then key);
        with ``limit``, the first that many.

        Args:
            state: only records in this state.
            prefix: only keys that start with this text (plain text: ``%`` and ``_`` are no
                patterns).
            action: only records whose current attempt was made by this action name.
            limit: at most this many (a positive integer).
            after: the ``cursor`` of the last record of the page before: the records after
                it, in the same order.
            newest_first: the latest record first.

        A ``state`` or a ``prefix`` is served by an index, so a large store is never read
        whole for one; an ``action`` narrows what they select, and an ``action`` or a
        ``limit`` alone reads the table.
        """
        st = None if state is None else _state(state, [s.value for s in EffectState], "state")
        prefix = _text(prefix, "prefix")
        action = _text(action, "action")
        if not isinstance(newest_first, bool):
            raise InvalidArgument(f"newest_first must be True or False, got {newest_first!r}")
        limit = limit_of(limit)
        found = self._core.list_effects(st, prefix, action, limit, after_of(after), newest_first)
        return [record_from_core(t) for t in found]

    def prune(
        self,
        older_than: Union[timedelta, int, float],
        states: Iterable[Union[EffectState, str]] = PRUNABLE_STATES,
        *,
        receipts: bool = False,
        dry_run: bool = False,
        by: Optional[str] = None,
        batch_size: int = 1000,
        progress: Optional[Callable[[int], Any]] = None,
    ) -> int:
        """Delete settled effects created and last written more than ``older_than`` ago
        (by the store's clock, read once when the prune starts); the number deleted, or with
        ``dry_run`` the number that would be.

        A pruned key is forgotten: its next call runs again. Never removed, whatever
        ``states`` says: ``ambiguous``, ``reserved`` and ``executing`` rows, and a row whose
        key has an approval request pending or granted.

        Args:
            older_than: a ``timedelta`` or a number of seconds.
            states: ``committed``, ``failed`` or both (the default).
            receipts: also delete the pruned effects' receipts. Without it each pruned row's
                chain ends with a ``pruned`` receipt, and ``verify_receipts`` still passes.
            dry_run: count, delete nothing.
            by: who prunes, written on the ``pruned`` receipts.
            batch_size: rows per transaction (1 to 10,000): each batch commits by itself, so
                a busy store is never locked for long, and an interrupted prune keeps what it
                did.
            progress: called with the running count after each batch.
        """
        older_us = age_to_micros(older_than)
        if isinstance(states, (str, EffectState)):
            states = [states]
        try:
            names = list(dict.fromkeys(_state(s, PRUNABLE_STATES, "states") for s in states))
        except TypeError:
            raise InvalidArgument(
                f"states must be a list of committed and/or failed, got {states!r}"
            ) from None
        if not names:
            raise InvalidArgument("states is empty: name committed, failed or both")
        if (
            isinstance(batch_size, bool)
            or not isinstance(batch_size, int)
            or not (1 <= batch_size <= _MAX_BATCH)
        ):
            raise InvalidArgument(
                f"batch_size must be an integer from 1 to {_MAX_BATCH}, got {batch_size!r}"
            )
        for flag, value in (("receipts", receipts), ("dry_run", dry_run)):
            if not isinstance(value, bool):
                raise InvalidArgument(f"{flag} must be True or False, got {value!r}")
        by = _text(by, "by")
        if progress is not None and not callable(progress):
            raise InvalidArgument(f"progress must be callable, got {progress!r}")
        return int(
            self._core.prune(
                older_us, names, receipts, by, batch_size, dry_run, progress, self._now_us()
            )
        )
