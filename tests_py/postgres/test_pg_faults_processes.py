"""PostgreSQL under faults with real OS processes (docs/spec.md §6): processes on two hosts (the server and
a proxy in front of it) racing on the same keys, and a client killed with SIGKILL while the proxy
holds its COMMIT. The faults of one process: test_pg_faults.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from datetime import timedelta

import pytest

import ctrlrun
from ctrlrun import DuplicateEffect, EffectState
from tests_py.conftest import MovableClock
from tests_py.support.racing import run_workers
from throwaway.pgproxy import PgProxy


# g. -------------------------------------------------------------------------------------
@pytest.fixture
def two_hosts(pg, pg_schema):
    """Two addresses reaching one server: proxies on 127.0.0.1 and 127.0.0.2."""
    proxies = [PgProxy(pg.host, pg.port, "127.0.0.1"), PgProxy(pg.host, pg.port, "127.0.0.2")]
    ctrlrun.open_store(pg.url(pg_schema)).close()  # tables exist before the race
    yield [pg.url(pg_schema, host=p.host, port=p.port) for p in proxies]
    for p in proxies:
        p.close()


def test_8_processes_on_two_hosts_race_on_one_key_one_executes(two_hosts, direct, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    key = f"k{uuid.uuid4().hex[:8]}"
    reports = run_workers(
        [
            {"url": two_hosts[i % 2], "marks": str(marks), "keys": [key], "sleep": 0.3}
            for i in range(8)
        ],
        tmp_path,
    )
    assert len(list(marks.iterdir())) == 1
    assert sum(len(r["ran"]) for r in reports) == 1
    assert direct.get_effect(key).state is EffectState.COMMITTED


def test_8_processes_on_two_hosts_over_200_keys_run_each_once(two_hosts, direct, tmp_path):
    import random

    marks = tmp_path / "marks"
    marks.mkdir()
    keys = [f"k{i:03d}" for i in range(200)]
    configs = []
    for i in range(8):
        order = keys[:]
        random.Random(i).shuffle(order)
        configs.append({"url": two_hosts[i % 2], "marks": str(marks), "keys": order, "sleep": 0})
    reports = run_workers(configs, tmp_path)
    files = [p.name.split(".")[0] for p in marks.iterdir()]
    assert sorted(files) == sorted(keys)
    assert sum(len(r["ran"]) for r in reports) == 200
    assert {r.state for r in direct.list_effects()} == {EffectState.COMMITTED}
    assert len(direct.list_effects()) == 200


# h. -------------------------------------------------------------------------------------
KILLED_CLIENT = textwrap.dedent(
    """
    import os, sys, ctrlrun
    store = ctrlrun.open_store(sys.argv[1])
    @ctrlrun.protect("pay", effect="pay:{order}", store=store, lease=30)
    def pay(order):
        os.close(os.open(os.path.join(sys.argv[2], order), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return "sent"
    print("result", pay("o9"), flush=True)
    """
)


def test_kill_9_while_the_commit_is_held_leaves_the_store_consistent(
    pg, pg_schema, proxy, direct, tmp_path
):
    marks = tmp_path / "marks"
    marks.mkdir()
    rule = proxy.arm("hold", b"committed")
    url = pg.url(pg_schema, host=proxy.host, port=proxy.port)
    client = subprocess.Popen(
        [sys.executable, "-c", KILLED_CLIENT, url, str(marks)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert rule.wait_fired(60), client.stderr.read() if client.poll() is not None else ""
        os.kill(client.pid, signal.SIGKILL)
        client.wait(timeout=30)
    finally:
        if client.poll() is None:
            client.kill()
    assert list(p.name for p in marks.iterdir()) == ["o9"]  # the executor ran once
    deadline = time.time() + 10
    while time.time() < deadline:  # the proxy closes the server side; the server rolls back
        rec = direct.get_effect("pay:o9")
        if rec.state is EffectState.EXECUTING:
            break
        time.sleep(0.1)
    # Nothing is failed that was not proven; it is not yet ambiguous either.
    assert rec.state is EffectState.EXECUTING
    assert rec.lease_expires_at is not None
    with pytest.raises(DuplicateEffect) as info:  # a contender under the live lease
        direct.reserve_effect("pay:o9", "act_" + "c" * 32, 60)
    assert info.value.state == "in_progress"
    later = MovableClock(rec.lease_expires_at + timedelta(microseconds=1))
    with pytest.raises(ctrlrun.AmbiguousEffect):  # a contender meets the lapsed lease
        direct.with_clock(later).reserve_effect("pay:o9", "act_" + "d" * 32, 60)
    after = direct.get_effect("pay:o9")
    assert after.state is EffectState.AMBIGUOUS
    assert "lapsed" in after.error
    assert len(list(marks.iterdir())) == 1
