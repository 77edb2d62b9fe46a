"""Fixtures of the policy tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def here(tmp_path, monkeypatch):
    """The test's working directory, so ./ctrlrun.yaml is per test."""
    monkeypatch.delenv("CTRLRUN_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path
