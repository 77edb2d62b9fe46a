"""What the core returns, read into this package's values: stored times as aware datetimes,
stored JSON, and the effect row as an :class:`~ctrlrun.EffectRecord`. A value no record can
hold (a row edited by hand) is a ``StoreError``, never an ``OverflowError`` or a JSON error."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any, Dict, Optional

from ctrlrun import _core
from ctrlrun.errors import StoreError
from ctrlrun.store.records import EffectRecord, EffectState

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def micros_to_datetime(us: int) -> datetime:
    """A stored time (microseconds since the epoch, UTC); one no date can hold (a row edited
    by hand) is a ``StoreError``, never an ``OverflowError``."""
    try:
        return _EPOCH + timedelta(microseconds=us)
    except (OverflowError, TypeError) as exc:
        raise StoreError(
            f"the store holds a time that is not a date ({us!r} microseconds "
            f"since 1970): the row was edited outside ctrlrun"
        ) from exc


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


def record_from_core(row: _core.EffectRow) -> EffectRecord:
    """The core's effect row as an :class:`EffectRecord`."""
    key, lease, result = row.effect_key, row.lease_expires_at, row.result
    return EffectRecord(
        effect_key=key,
        state=EffectState(row.state),
        action_id=row.action_id,
        attempt=row.attempt,
        created_at=micros_to_datetime(row.created_at),
        updated_at=micros_to_datetime(row.updated_at),
        lease_expires_at=None if lease is None else micros_to_datetime(lease),
        result=None if result is None else stored_result(key, result),
        error=row.error,
        resolved_by=row.resolved_by,
        action=row.action,
        holder=row.holder,
        args_digest=row.args_digest,
        arg_digests=parse_arg_digests(row.arg_digests),
        approval_id=row.approval_id,
    )


def parse_arg_digests(text: Optional[str]) -> Dict[str, str]:
    if not text:
        return {}
    return dict(line.split(" ", 1) for line in text.splitlines() if " " in line)
