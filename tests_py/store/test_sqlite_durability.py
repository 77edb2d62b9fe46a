"""SQLite's durability said at open (issue 46, item 1)."""

from __future__ import annotations

import logging

import ctrlrun


def test_synchronous_normal_is_warned_of_at_open(tmp_path, caplog):
    """A SQLite store that can lose its last commits on a power cut says so when it opens
    (issue 46, item 1); the default says nothing."""
    caplog.set_level(logging.WARNING, logger="ctrlrun.store")
    ctrlrun.open_store(f"sqlite:///{tmp_path / 'full.db'}").close()
    assert [r for r in caplog.records if r.name == "ctrlrun.store"] == []
    ctrlrun.open_store(f"sqlite:///{tmp_path / 'normal.db'}?synchronous=normal").close()
    (warned,) = [r.getMessage() for r in caplog.records if r.name == "ctrlrun.store"]
    assert "synchronous=normal" in warned and "power loss" in warned
