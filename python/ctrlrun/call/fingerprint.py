"""The canonical form of a protected call's arguments, and their digests.

A reservation stores a digest of the call's canonical arguments and one digest per argument, so
that a later call on the same effect key with other arguments is refused naming the arguments
that differ (never their values), and so that an approval is bound to exactly the arguments a
person saw. Equal values give equal text; values of different types never share a text.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import decimal
import enum
import hashlib
import json
import math
import re
import uuid
from typing import Any, Collection, Dict, List, Mapping, NamedTuple, Set, Tuple

__all__ = [
    "Fingerprint",
    "Unfingerprintable",
    "canonical",
    "canonical_json",
    "differing_fields",
    "digest_text",
    "fingerprint",
]

_MAX_DEPTH = 100  # nesting deeper than this is refused (also bounds the Python stack)
_MAX_NODES = 1_000_000  # values visited per call; bounds shared-reference (DAG) blow-up
_MAX_PAD = 100  # a Decimal needing more padding zeros than this is written with an exponent


class Unfingerprintable(Exception):
    """A value (or a value nested in it) has no canonical form. The message names types only."""


def _qualname(tp: type) -> str:
    return f"{tp.__module__}.{tp.__qualname__}"


def _decimal_text(d: decimal.Decimal) -> str:
    """Positional text of a finite Decimal, equal for equal amounts (``1.0``, ``1.00``, ``1``).

    Trailing zeros are stripped exactly (no context rounding, so 40-digit amounts stay exact) and
    zero is ``"0"`` whatever its sign or exponent. An amount that would need more than
    ``_MAX_PAD`` padding zeros is written ``<digits>E<exp>`` instead; that text is unique too.
    """
    sign, digit_tuple, exp = d.as_tuple()
    assert isinstance(exp, int)
    digits = "".join(map(str, digit_tuple)).lstrip("0")
    if not digits:
        return "0"
    stripped = digits.rstrip("0")
    exp += len(digits) - len(stripped)
    digits, neg = stripped, "-" if sign else ""
    if exp >= 0:
        if exp > _MAX_PAD:
            return f"{neg}{digits}E+{exp}"
        return neg + digits + "0" * exp
    point = len(digits) + exp  # where the decimal point falls inside (or before) the digits
    if point > 0:
        return f"{neg}{digits[:point]}.{digits[point:]}"
    if -point > _MAX_PAD:
        return f"{neg}{digits}E{exp}"
    return f"{neg}0.{'0' * -point}{digits}"


class _Walker:
    """One canonicalisation: the depth, the containers being visited, and the node budget."""

    def __init__(self) -> None:
        self.active: Set[int] = set()
        self.nodes = 0

    def walk(self, v: Any, depth: int) -> object:
        self.nodes += 1
        if self.nodes > _MAX_NODES:
            raise Unfingerprintable(f"more than {_MAX_NODES} nested values")
        tp = type(v)
        if tp is str or tp is int or tp is bool or v is None:  # the common case, fast
            return v
        if isinstance(v, enum.Enum):  # before int/str: IntEnum and str-mixin members are enums
            return {"$enum": f"{_qualname(tp)}.{v.name}"}
        if isinstance(v, int):
            return int.__int__(v)  # a plain int whatever the subclass
        if isinstance(v, str):
            return str.__str__(v)
        if isinstance(v, float):
            f = float.__float__(v)
            if not math.isfinite(f):
                raise Unfingerprintable("a float that is not finite")
            return f + 0.0  # -0.0 == 0.0, so both are written 0.0
        if isinstance(v, (bytes, bytearray)):
            return {"$bytes": base64.b64encode(v).decode("ascii")}
        if isinstance(v, uuid.UUID):
            return {"$uuid": str(v)}
        if isinstance(v, decimal.Decimal):
            if not v.is_finite():
                raise Unfingerprintable("a Decimal that is not finite")
            return {"$decimal": _decimal_text(v)}
        if isinstance(v, datetime.datetime):  # before date: datetime is a date
            return {"$datetime": v.isoformat()}
        if isinstance(v, datetime.date):
            return {"$date": v.isoformat()}
        if depth >= _MAX_DEPTH:
            raise Unfingerprintable(f"nested deeper than {_MAX_DEPTH} levels")
        if id(v) in self.active:
            raise Unfingerprintable(f"a cyclic {_qualname(tp)}")
        self.active.add(id(v))
        try:
            return self._container(v, tp, depth + 1)
        finally:
            self.active.discard(id(v))

    def _container(self, v: Any, tp: type, depth: int) -> object:
        if isinstance(v, (list, tuple)):
            return [self.walk(item, depth) for item in v]
        if isinstance(v, dict):
            out: Dict[str, object] = {}
            for key, item in v.items():
                if not isinstance(key, str) or isinstance(key, enum.Enum):
                    raise Unfingerprintable(f"a dict key of type {_qualname(type(key))}")
                text = str.__str__(key)  # "$x" -> "$$x": a dict never looks like a tagged form
                out["$" + text if text.startswith("$") else text] = self.walk(item, depth)
            if len(out) != len(v):
                raise Unfingerprintable("dict keys that collide as plain str")
            return out
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            fields = {f.name: self.walk(getattr(v, f.name), depth) for f in dataclasses.fields(v)}
            return {"$dataclass": _qualname(tp), "fields": fields}
        if hasattr(tp, "model_fields") and callable(getattr(v, "model_dump", None)):
            return {
                "$model": _qualname(tp),
                "fields": self.walk(v.model_dump(mode="python"), depth),
            }
        raise Unfingerprintable(f"a value of type {_qualname(tp)}")


def canonical(value: Any) -> object:
    """The JSON-compatible canonical form of ``value``, or raise :class:`Unfingerprintable`.

    ``None``, ``bool``, ``str``, ``int`` and finite ``float`` are themselves (subclasses become the
    plain type; ``-0.0`` becomes ``0.0``). Tagged one-key objects: ``{"$bytes": base64}`` for
    bytes/bytearray, ``{"$uuid": str}``, ``{"$decimal": text}`` (finite only, equal amounts equal
    text), ``{"$datetime": isoformat}``, ``{"$date": isoformat}``, ``{"$enum":
    "module.Qualname.NAME"}``. Lists and tuples are lists; dicts need ``str`` keys (an Enum
    key is refused), and a key starting with ``$`` gets one more ``$`` so no dict is ever
    taken for a tagged form. Dataclass instances are ``{"$dataclass": "module.Qualname", "fields":
    {...}}``; pydantic-style models (type has ``model_fields``, instance a callable
    ``model_dump``) are ``{"$model": ..., "fields": canonical(model_dump(mode="python"))}``.
    Anything else, nesting deeper than 100, a cycle, more than a million nested values, or any
    ``Exception`` raised while reading the value makes the whole value Unfingerprintable.
    """
    try:
        return _Walker().walk(value, 0)
    except Unfingerprintable:
        raise
    except Exception as exc:
        raise Unfingerprintable(f"reading the value raised {_qualname(type(exc))}") from None


def _dumps(canon: object) -> str:
    try:
        return json.dumps(
            canon, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except Exception as exc:  # e.g. an int longer than the interpreter's int-to-text limit
        raise Unfingerprintable(f"writing the value raised {_qualname(type(exc))}") from None


def canonical_json(value: Any) -> str:
    """Compact JSON text of ``canonical(value)`` with sorted keys and non-ASCII kept as is."""
    return _dumps(canonical(value))


try:  # the interpreter's own SHA-256: for the short texts hashed here, twice as fast as OpenSSL's
    from _sha2 import sha256 as _hash  # type: ignore[import-not-found]  # Python 3.12+
except ImportError:  # pragma: no cover - depends on the interpreter
    try:
        from _sha256 import sha256 as _hash  # type: ignore[import-not-found]
    except ImportError:
        _hash = hashlib.sha256


def digest_text(text: str) -> str:
    """``"sha256:"`` + 64 lowercase hex of the UTF-8 text (lone surrogates encoded as is)."""
    hexdigest: str = _hash(text.encode("utf-8", "surrogatepass")).hexdigest()
    return "sha256:" + hexdigest


class Fingerprint(NamedTuple):
    """The digests of one call's arguments (an immutable tuple: made on every protected call).

    Attributes:
        digest: digest of the canonical JSON of ``{name: canonical value}`` over included arguments.
        fields: argument name -> digest of that argument's canonical JSON (included arguments).
        arguments: what an approver is shown, every argument of the call: name -> canonical
            value, or ``{"$unfingerprinted": "module.Qualname"}`` for a value with no
            canonical form.
        left_out: sorted names of the unfingerprintable arguments (not excluded).
        not_bound: sorted names of the excluded arguments: shown, but not part of the digest
            (a call with other values for them matches the same approval).
    """

    digest: str
    fields: Dict[str, str]
    arguments: Dict[str, object]
    left_out: Tuple[str, ...]
    not_bound: Tuple[str, ...] = ()


_quote = json.encoder.encode_basestring  # what json.dumps writes for a str (ensure_ascii=False)


def _text(value: Any) -> str:
    """The canonical JSON text of one argument: the plain types (most arguments) directly, as
    ``json.dumps`` writes them, anything else through :func:`canonical`. A lone surrogate, which
    no UTF-8 text can hold, is written as its JSON escape."""
    tp = type(value)
    if tp is str:
        text: str = _quote(value)
    elif tp is int:
        try:
            return int.__repr__(value)
        except ValueError:  # past the interpreter's int-to-text limit
            raise Unfingerprintable("an int too long to write as text") from None
    elif tp is bool:
        return "true" if value else "false"
    elif value is None:
        return "null"
    else:
        text = _dumps(canonical(value))
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text


_SURROGATE = re.compile("[\ud800-\udfff]")


def texts(
    arguments: Mapping[str, Any], exclude: Collection[str] = ()
) -> Tuple[List[Tuple[str, str]], List[str]]:
    """``[(name, canonical JSON text)]`` of the fingerprintable arguments in name order, and the
    names left out (unfingerprintable). Names in ``exclude`` are ignored. (Runs on every
    protected call; the core hashes the texts: :func:`ctrlrun._core.arg_digests`.)"""
    parts: List[Tuple[str, str]] = []
    left_out: List[str] = []
    for name in sorted(arguments):
        if name in exclude:
            continue
        try:
            parts.append((name, _text(arguments[name])))
        except Unfingerprintable:
            left_out.append(name)
    return parts, left_out


def fingerprint(arguments: Mapping[str, Any], exclude: Collection[str] = ()) -> Fingerprint:
    """Fingerprint a call's bound arguments (by parameter name, defaults applied).

    Names in ``exclude`` are left out of ``digest`` and ``fields`` but still shown in
    ``arguments`` (an approver sees every argument), and listed in ``not_bound``. An
    unfingerprintable argument is left out of ``digest`` and ``fields``, listed in ``left_out``
    and shown by type name in ``arguments``.
    No arguments at all still give a digest (of ``{}``). The digests are the core's
    (:func:`ctrlrun._core.arg_digests`), so they are those a reservation writes.
    """
    import ctrlrun._core as _core

    parts, left_out = texts(arguments, exclude)
    digest, lines = _core.arg_digests(parts)
    fields = dict(line.split(" ", 1) for line in lines.splitlines())
    shown: Dict[str, object] = {}
    for name in sorted(arguments):
        value = arguments[name]
        if name not in fields and not (name in exclude and _has_text(value)):
            shown[name] = {"$unfingerprinted": _qualname(type(value))}
        else:
            shown[name] = value if type(value) in _PLAIN else canonical(value)
    not_bound = tuple(sorted(n for n in arguments if n in exclude))
    return Fingerprint(digest, fields, shown, tuple(left_out), not_bound)


def _has_text(value: Any) -> bool:
    """Whether ``value`` has a canonical JSON text (so an approver can be shown it)."""
    try:
        _text(value)
    except Unfingerprintable:
        return False
    return True


_PLAIN = frozenset((str, int, bool, type(None)))


def differing_fields(stored: Mapping[str, str], now: Mapping[str, str]) -> List[str]:
    """Sorted names whose digests differ, including names present on one side only."""
    return sorted(n for n in set(stored) | set(now) if stored.get(n) != now.get(n))
