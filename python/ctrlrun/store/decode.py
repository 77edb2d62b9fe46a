"""What the core returns, read into this package's values: stored times as aware datetimes,
stored JSON, and the effect row as an :class:`~ctrlrun.EffectRecord`. A value no record can
hold (a row edited by hand) is a ``StoreError``, never an ``OverflowError`` or a JSON error."""

from __future__ import annotations

import dataclasses
import enum
import json
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Dict, List, Optional, Tuple, Type, TypeVar, get_type_hints

import ctrlrun._core as _core
from ctrlrun.errors import StoreError
from ctrlrun.store.records import EffectRecord

R = TypeVar("R")

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def micros_to_datetime(us: int) -> datetime:
    """A stored time (microseconds since the epoch, UTC); one no date can hold (a row edited
    by hand) is a ``StoreError``, never an ``OverflowError``."""
    try:
        return _EPOCH + timedelta(microseconds=us)
    except (OverflowError, TypeError) as exc:
        why = f"the store holds a time that is not a date ({us!r} microseconds since 1970)"
        raise StoreError(f"{why}: the row was edited outside ctrlrun") from exc


def stored_json(what: str, text: str) -> Any:
    """JSON text ctrlrun wrote into a row (``what`` names it: "the stored result of 'k'"). Text
    that is not JSON (a row edited by hand) is a ``StoreError``, never a ``JSONDecodeError``;
    JSON this process cannot read (nested deeper than its stack allows, an integer past its
    digit limit) is a ``StoreError`` saying so."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise StoreError(
            f"{what} is not JSON: the row was edited outside ctrlrun; put JSON text back in its place"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise StoreError(
            f"{what} cannot be read by this process "
            f"({'nested too deeply here' if isinstance(exc, RecursionError) else exc})"
        ) from None


def stored_result(key: str, text: str) -> Any:
    return stored_json(f"the stored result of {key!r}", text)


def _optional_time(us: Optional[int]) -> Optional[datetime]:
    return None if us is None else micros_to_datetime(us)


def _duration(us: int) -> timedelta:
    return timedelta(microseconds=us)


_CONVERT: Dict[Any, Callable[[Any], Any]] = {
    datetime: micros_to_datetime,
    Optional[datetime]: _optional_time,
    timedelta: _duration,
}
_PLANS: Dict[type, List[Tuple[str, Optional[Callable[[Any], Any]]]]] = {}


def _plan(cls: type) -> List[Tuple[str, Optional[Callable[[Any], Any]]]]:
    """Per field of the record class ``cls``: its name and how the core's value becomes it (by
    the field's type: a time from microseconds, a duration, an enum from its value)."""
    plan = _PLANS.get(cls)
    if plan is None:
        hints = get_type_hints(cls)
        plan = []
        for f in dataclasses.fields(cls):
            kind = hints[f.name]
            is_enum = isinstance(kind, type) and issubclass(kind, enum.Enum)
            plan.append((f.name, kind if is_enum else _CONVERT.get(kind)))
        _PLANS[cls] = plan
    return plan


def from_row(cls: Type[R], row: Any, **given: Any) -> R:
    """The record ``cls`` from the core's ``row`` (the same field names), with the fields in
    ``given`` taken as they are (those that need more than their type to be read)."""
    values = dict(given)
    for name, convert in _plan(cls):
        if name not in values:
            value = getattr(row, name)
            values[name] = value if convert is None else convert(value)
    return cls(**values)


def record_from_core(row: _core.EffectRow) -> EffectRecord:
    """The core's effect row as an :class:`EffectRecord`."""
    result = row.result
    return from_row(
        EffectRecord,
        row,
        result=None if result is None else stored_result(row.effect_key, result),
        arg_digests=parse_arg_digests(row.arg_digests),
    )


def parse_arg_digests(text: Optional[str]) -> Dict[str, str]:
    if not text:
        return {}
    return dict(line.split(" ", 1) for line in text.splitlines() if " " in line)
