"""Helpers for testing code that uses ctrlrun: a movable clock and assertions on effects.

The pytest plugin (:mod:`ctrlrun.pytest_plugin`, loaded automatically) builds its fixtures from
these; they work without pytest too.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Optional, Union

from ctrlrun.store.api import Store
from ctrlrun.store.records import EffectRecord, EffectState

__all__ = ["MovableClock", "assert_committed_once", "assert_effect_state", "assert_no_effect"]


class MovableClock:
    """A clock for a store: calling it returns an aware UTC datetime that moves only when told.

    ``store = ctrlrun.open_store(url, clock=clock)``; then ``clock.advance(301)`` (seconds or a
    ``timedelta``) lapses a 5-minute lease without sleeping.
    """

    def __init__(self, start: Optional[datetime] = None) -> None:
        if start is not None and (start.tzinfo is None or start.utcoffset() is None):
            raise ValueError("MovableClock needs an aware datetime")
        self.now = start if start is not None else datetime.now(timezone.utc)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, by: Union[float, int, timedelta]) -> datetime:
        """Move forward by ``by`` (seconds or a timedelta); returns the new time."""
        self.now = self.now + (by if isinstance(by, timedelta) else timedelta(seconds=by))
        return self.now

    def set(self, when: datetime) -> datetime:
        """Jump to the aware datetime ``when``."""
        if when.tzinfo is None or when.utcoffset() is None:
            raise ValueError("MovableClock.set needs an aware datetime")
        self.now = when
        return self.now


def _describe(store: Store, key: str, rec: Optional[EffectRecord]) -> str:
    if rec is None:
        return f"no effect is recorded under {key!r} in {store.url}"
    return f"effect {key!r} is {rec.state.value} (attempt {rec.attempt}, action {rec.action_id}, error {rec.error!r})"


def assert_effect_state(store: Store, key: str, state: Union[EffectState, str]) -> EffectRecord:
    """Assert the effect ``key`` is in ``state``; returns its record."""
    want = EffectState(state)
    rec = store.get_effect(key)
    assert rec is not None and rec.state is want, (
        f"expected {want.value}: {_describe(store, key, rec)}"
    )
    return rec


def assert_committed_once(store: Store, key: str) -> EffectRecord:
    """Assert the effect ``key`` committed on its first attempt: it ran once and succeeded, and
    nothing failed or was retried before it. Returns its record."""
    rec = assert_effect_state(store, key, EffectState.COMMITTED)
    assert rec.attempt == 1, (
        f"expected one attempt: {_describe(store, key, rec)} (earlier attempts failed first)"
    )
    assert rec.resolved_by is None, (
        f"expected a committed execution, not a resolution: {key!r} was resolved by {rec.resolved_by}"
    )
    return rec


def assert_no_effect(store: Store, key: str) -> None:
    """Assert nothing was ever reserved under ``key``."""
    rec = store.get_effect(key)
    assert rec is None, f"expected no effect: {_describe(store, key, rec)}"
