"""Fixtures of the CLI tests."""

from __future__ import annotations

import pytest

from tests_py.support.cli import make_ambiguous, make_committed, make_lapsed, make_live


@pytest.fixture
def populated(store, store_url):
    """committed, ambiguous, live, lapsed (created in that order; the lapsed one is the
    oldest by created_at because it was reserved 2 h in the past)."""
    make_committed(store, "cli:committed")
    make_ambiguous(store, "cli:ambiguous")
    make_live(store, "cli:live")
    make_lapsed(store_url, "cli:lapsed")
    return store
