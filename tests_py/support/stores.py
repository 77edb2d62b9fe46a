"""Store URLs the tests build."""

from __future__ import annotations


def sqlite_url(path) -> str:
    """``sqlite:////abs/path`` for an absolute path."""
    p = str(path)
    assert p.startswith("/"), p
    return f"sqlite:///{p}"


def keys(store):
    return [r.effect_key for r in store.list_effects()]
