"""The one rule for showing text a caller chose (an agent's arguments, keys, action names,
notes, errors) to a person, in the terminal (the CLI) and in the browser (the console): every
character that is not printable as its ``\\uXXXX`` escape, so that the text cannot rewrite what
a person reads (a bidi override turning ``…2010003`` into ``…2013000``, an invisible character,
a control or escape sequence)."""

from __future__ import annotations

from typing import Any

__all__ = ["printable", "hidden"]


def printable(text: str) -> str:
    """``text`` safe to show: every character that is not printable (control and escape
    characters, bidirectional overrides and isolates, zero-width and other invisible format
    characters, line separators, every space but ``' '``) as its ``\\uXXXX`` escape."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in text)


def hidden(value: Any) -> bool:
    """Whether any text in ``value`` (a string, or the keys and values of a JSON-like value,
    at any depth) holds a character :func:`printable` escapes."""
    if isinstance(value, str):
        return not value.isprintable()
    if isinstance(value, dict):
        return any(hidden(k) or hidden(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(hidden(v) for v in value)
    return False
