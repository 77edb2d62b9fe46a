"""Durations given as a ``timedelta`` or a number of seconds, checked and made microseconds."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from typing import Union

from ctrlrun.errors import InvalidArgument

__all__ = ["to_micros", "lease_to_micros", "datetime_to_micros"]

_UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
# The longest lease accepted: ten years, far past any real call, and far from int64 overflow
# when added to a timestamp in the store.
_MAX_LEASE_US = 10 * 366 * 86_400 * 1_000_000


def _shown(value: Union[int, float]) -> str:
    # An int past Python's digit limit for text (4,300 digits) has no repr.
    try:
        return repr(value)
    except ValueError:
        return f"an integer of about {int(value.bit_length() * 0.30103)} digits"  # type: ignore[union-attr]


def to_micros(value: Union[timedelta, int, float], what: str, most_us: int, most: str) -> int:
    """``value`` as whole microseconds: a ``timedelta`` or a number of seconds, > 0, finite
    and at most ``most_us`` (``most`` names that bound in messages)."""
    if isinstance(value, timedelta):
        us = value // timedelta(microseconds=1)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidArgument(f"{what} must be a finite number of seconds, got {value!r}")
        if abs(value) > most_us:  # compared exactly: an int too large for a float is no error
            raise InvalidArgument(f"{what} must be at most {most}, got {_shown(value)}")
        us = int(round(value * 1_000_000))  # noqa: RUF046 - a NumPy < 2 float rounds to a float
    else:
        raise InvalidArgument(
            f"{what} must be a timedelta or a number of seconds, got {type(value).__name__}"
        )
    if us <= 0:
        raise InvalidArgument(f"{what} must be > 0, got {value!r}")
    if us > most_us:
        raise InvalidArgument(f"{what} must be at most {most}, got {value!r}")
    return us


def lease_to_micros(lease: Union[timedelta, int, float], what: str = "lease") -> int:
    """A lease as whole microseconds: a ``timedelta`` or a number of seconds, > 0 and finite."""
    return to_micros(lease, what, _MAX_LEASE_US, "ten years")


def datetime_to_micros(dt: datetime, what: str = "datetime") -> int:
    """An aware datetime as microseconds since the epoch (UTC)."""
    if not isinstance(dt, datetime):
        raise InvalidArgument(f"{what} must be an aware datetime, got {type(dt).__name__}")
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise InvalidArgument(f"{what} must be timezone-aware (UTC), got naive {dt!r}")
    return (dt - _UNIX_EPOCH) // timedelta(microseconds=1)
