"""The record a store keeps for each effect key (:class:`EffectRecord`, defined in
``ctrlrun._records`` below the errors that carry it), and the JSON a result is stored as."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Optional

from ctrlrun._records import EffectRecord, EffectState, Reservation

__all__ = ["EffectState", "EffectRecord", "Reservation", "result_to_json", "UNSERIALIZABLE_MARKER"]

UNSERIALIZABLE_MARKER = "__ctrlrun_unserializable__"


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
