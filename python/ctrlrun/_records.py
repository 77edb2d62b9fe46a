"""The records every layer speaks of: an effect key's row (:class:`EffectRecord`, in its
:class:`EffectState`) and a granted :class:`Reservation`. Below the errors that carry them and
the store that reads them, importing nothing of ctrlrun; ``ctrlrun.store.records`` gives them
too, with the JSON form a result is stored in."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Dict, Optional

__all__ = ["EffectState", "EffectRecord", "Reservation"]


class StoredState(str, enum.Enum):
    """A state as the store keeps it: the member is its text (``str()`` gives ``"failed"``, not
    ``"EffectState.FAILED"``), so it prints and compares as the store and the CLI write it."""

    _value_: str

    def __str__(self) -> str:
        return self.value


class EffectState(StoredState):
    """The stored states of an effect key. (``new`` means no row and is never stored.)"""

    RESERVED = "reserved"
    EXECUTING = "executing"
    COMMITTED = "committed"
    FAILED = "failed"
    AMBIGUOUS = "ambiguous"


@dataclass(frozen=True)
class EffectRecord:
    """One effect key's row, as read from the store (immutable).

    Attributes:
        effect_key: the key, compared byte for byte.
        state: the :class:`EffectState`.
        action_id: the attempt that holds or last held the key (``act_`` + 32 hex).
        attempt: 1 on the first reservation, +1 on each renewal after ``failed``.
        created_at: aware UTC datetime of the first reservation (kept across renewals).
        updated_at: aware UTC datetime of the last write.
        lease_expires_at: aware UTC datetime, or ``None`` once committed/failed/ambiguous.
        result: the executor's return value as JSON data, on ``committed``. A value JSON
            cannot hold is stored as ``{"__ctrlrun_unserializable__": repr(value)}``.
        error: why the effect is ``failed`` or ``ambiguous``; annotated by a resolution.
        resolved_by: who moved it out of ``ambiguous``; cleared by the next renewal.
        action: the current attempt's action name (``stripe.refund``), or ``None`` when the
            caller gave none (the ``Store`` API) or the row predates it.
        holder: who reserved the current attempt: ``host:pid``.
        args_digest: the digest of the attempt's canonical arguments (``sha256:…``), or
            ``None``.
        arg_digests: argument name -> digest of that argument (``{}`` when none were given).
        approval_id: the approval request the attempt used, or ``None``.
    """

    effect_key: str
    state: EffectState
    action_id: str
    attempt: int
    created_at: datetime
    updated_at: datetime
    lease_expires_at: Optional[datetime]
    result: Any
    error: Optional[str]
    resolved_by: Optional[str]
    action: Optional[str] = None
    holder: Optional[str] = None
    args_digest: Optional[str] = None
    arg_digests: Dict[str, str] = field(default_factory=dict)
    approval_id: Optional[str] = None

    def lease_live(self, now: Optional[datetime] = None) -> bool:
        """True when the state is reserved/executing and ``now <= lease_expires_at``."""
        if self.state not in (EffectState.RESERVED, EffectState.EXECUTING):
            return False
        if self.lease_expires_at is None:
            return False
        return (now or datetime.now(timezone.utc)) <= self.lease_expires_at

    @property
    def cursor(self) -> str:
        """Where a listing's next page starts: ``Store.list_effects(after=record.cursor)``
        lists the records after this one, in the same order."""
        return page_cursor(self.created_at, self.effect_key)


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def page_cursor(at: datetime, key: str) -> str:
    """A listing's cursor: the position of a row, ``<microseconds since the epoch>:<key>``."""
    return f"{(at - _EPOCH) // timedelta(microseconds=1)}:{key}"


@dataclass(frozen=True)
class Reservation:
    """A granted reservation: the attempt now holds ``effect_key`` until ``lease_expires_at``."""

    effect_key: str
    action_id: str
    attempt: int
    lease_expires_at: datetime
    record: EffectRecord
