"""Store URLs the tests build."""

from __future__ import annotations


def sqlite_url(path) -> str:
    """``sqlite:////abs/path`` for an absolute path."""
    p = str(path)
    assert p.startswith("/"), p
    return f"sqlite:///{p}"


def keys(store):
    return [r.effect_key for r in store.list_effects()]


# The schema version this build writes, per backend (PostgreSQL's 5 adds `ctrlrun_durable()`,
# a function; 12 moves the hot writes' receipts into their statements).
SCHEMA_VERSION = {"sqlite": 8, "postgres": 12}
