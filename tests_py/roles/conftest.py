"""A PostgreSQL store whose agent and approver roles were given their duties by the real
``ctrlrun store roles`` command (tests_py/support/duties.py)."""

from __future__ import annotations

import os

import pytest

import ctrlrun
from tests_py.support.cli import run_cli
from tests_py.support.duties import Duties


@pytest.fixture
def duties(pg, pg_schema):
    d = Duties(pg, pg_schema)
    ctrlrun.open_store(d.owner_url).close()  # the owner creates the schema
    proc = run_cli(
        "store",
        "roles",
        "--agent",
        d.agent.name,
        "--approver",
        d.approver.name,
        env=dict(os.environ, CTRLRUN_STORE=d.owner_url),
    )
    assert proc.returncode == 0, proc.stderr
    assert d.agent.name in proc.stdout and d.approver.name in proc.stdout
    yield d
    d.drop()


@pytest.fixture
def owner(duties):
    s = ctrlrun.open_store(duties.owner_url)
    yield s
    s.close()


@pytest.fixture
def agent(duties):
    s = ctrlrun.open_store(duties.agent_url)
    yield s
    s.close()


@pytest.fixture
def approver(duties):
    s = ctrlrun.open_store(duties.approver_url)
    yield s
    s.close()
