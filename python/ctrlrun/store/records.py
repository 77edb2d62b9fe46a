"""The record a store keeps for each effect key."""

from __future__ import annotations

import dataclasses
import enum
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Dict, Optional

__all__ = ["EffectState", "EffectRecord", "Reservation"]

UNSERIALIZABLE_MARKER = "__ctrlrun_unserializable__"


class EffectState(str, enum.Enum):
    """The stored states of an effect key. (``new`` means no row and is never stored.)"""

    RESERVED = "reserved"
    EXECUTING = "executing"
    COMMITTED = "committed"
    FAILED = "failed"
    AMBIGUOUS = "ambiguous"

    def __str__(self) -> str:
        return self.value


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


@dataclass(frozen=True)
class Reservation:
    """A granted reservation: the attempt now holds ``effect_key`` until ``lease_expires_at``."""

    effect_key: str
    action_id: str
    attempt: int
    lease_expires_at: datetime
    record: EffectRecord


_quote = json.encoder.encode_basestring_ascii


def _json_form(encoder: Optional[Callable[[Any], Any]]) -> Callable[[Any], Any]:
    """``json.dumps``'s ``default``: a dataclass instance as its fields, a pydantic model as
    its JSON form (``model_dump(mode="json")``), anything else through ``encoder`` (the
    caller's ``result_encoder``), or a ``TypeError`` (then the value is stored as its repr)."""

    def form(value: Any) -> Any:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        dump = getattr(value, "model_dump", None)
        if callable(dump) and not isinstance(value, type):
            return dump(mode="json")
        if encoder is not None:
            return encoder(value)
        raise TypeError(f"{type(value).__name__} is not JSON")

    return form


def result_to_json(value: Any, encoder: Optional[Callable[[Any], Any]] = None) -> str:
    """The executor's return value as JSON text; never raises (docs/spec.md §8.4). Dataclasses and
    pydantic models are stored as their JSON form; other values go through ``encoder`` when
    given; what is still not JSON is stored as its repr under ``UNSERIALIZABLE_MARKER``."""
    kind = type(value)
    if value is None:
        return "null"
    try:
        if kind is int:  # exactly int: bool and int subclasses may print otherwise
            return str(value)  # ValueError past sys.get_int_max_str_digits: handled below
        if kind is str:
            return _quote(value)  # what json.dumps does for a str, without its Python layers
        return json.dumps(value, allow_nan=False, default=_json_form(encoder))
    except Exception:  # not JSON, or a container whose own methods raise (items(), __iter__)
        pass
    try:
        text = repr(value)
        if not isinstance(text, str):
            raise TypeError("__repr__ returned a non-string")
    except BaseException:
        # not turn a done effect into a failure or leave its row executing: the effect happened
        text = f"<unrepresentable {kind.__qualname__}>"
    return json.dumps({UNSERIALIZABLE_MARKER: text})
