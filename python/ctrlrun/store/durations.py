"""Durations given as a ``timedelta`` or a number of seconds, checked and made microseconds."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Union

from ctrlrun.errors import InvalidArgument

__all__ = ["to_micros"]


def to_micros(value: Union[timedelta, int, float], what: str, most_us: int, most: str) -> int:
    """``value`` as whole microseconds: a ``timedelta`` or a number of seconds, > 0, finite
    and at most ``most_us`` (``most`` names that bound in messages)."""
    if isinstance(value, timedelta):
        us = value // timedelta(microseconds=1)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidArgument(f"{what} must be a finite number of seconds, got {value!r}")
        if abs(value) > most_us:  # compared exactly: an int too large for a float is no error
            raise InvalidArgument(f"{what} must be at most {most}, got {value!r}")
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
