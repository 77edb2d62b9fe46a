"""Scratch stores on the user's backend, for ``ctrlrun verify`` and the pytest plugin: a
throwaway PostgreSQL schema (dropped afterwards), never the user's data."""

from __future__ import annotations

import uuid

import ctrlrun._core as _core


def scratch_schema_url(url: str) -> str:
    """``url`` (PostgreSQL) with its ``schema=`` replaced by a new ``ctrlrun_scratch_*`` one,
    which ``_core.drop_scratch_schema`` drops (and no other)."""
    base, _, query = url.partition("?")
    params = [p for p in query.split("&") if p and not p.startswith("schema=")]
    schema = _core.SCRATCH_SCHEMA_PREFIX + uuid.uuid4().hex[:12]
    return f"{base}?{'&'.join([*params, 'schema=' + schema])}"
