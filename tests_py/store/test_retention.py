"""Retention and listing by filter, on SQLite and PostgreSQL: ``Store.prune`` and
``ctrlrun effects prune`` remove only old settled effects (a pruned key runs again), in
batches, leaving receipts that still verify; ``list_effects`` / ``ctrlrun effects list``
filters. Rows are aged with the movable clock, or written under a clock set in the past for the
CLI, which runs on the real one."""

from __future__ import annotations

import json
import math
import os
import subprocess
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

import ctrlrun
from ctrlrun import InvalidArgument, NotExecuted
from ctrlrun.testing import MovableClock
from tests_py.support.cli import run_cli
from throwaway.pgserver import _find_bin

DAYS_30 = timedelta(days=30)


def settle_three(store) -> list:
    """One committed, one failed and one ambiguous effect; the calls each body saw."""
    runs: list = []

    @ctrlrun.protect("mail.send", effect="email:{n}", store=store)
    def send(n: int, how: str) -> dict:
        runs.append(n)
        if how == "refused":
            raise NotExecuted("SMTP refused")
        if how == "timeout":
            raise TimeoutError("no reply")
        return {"queued": n}

    send(1, "ok")
    for n, how in [(2, "refused"), (3, "timeout")]:
        with pytest.raises((NotExecuted, TimeoutError)):
            send(n, how)
    return [send, runs]


def test_prune_removes_old_settled_effects_and_a_pruned_key_runs_again(clocked_store, clock):
    send, runs = settle_three(clocked_store)
    assert clocked_store.prune(DAYS_30, dry_run=True) == 0
    clock.advance(timedelta(days=31))
    assert clocked_store.prune(DAYS_30, dry_run=True) == 2
    heard: list = []
    assert clocked_store.prune(DAYS_30, by="ops", progress=heard.append) == 2
    assert heard == [1, 2]  # the running count after the committed batch, then the failed one
    left = clocked_store.list_effects()
    assert [(r.effect_key, r.state.value) for r in left] == [("email:3", "ambiguous")]
    assert clocked_store.verify_receipts().ok
    receipts = clocked_store.list_receipts("email:1")
    assert [r.kind for r in receipts][-1] == "pruned" and receipts[-1].actor == "ops"
    # Forgotten: the committed key runs again; the ambiguous one is still refused.
    assert send(1, "ok") == {"queued": 1}
    with pytest.raises(ctrlrun.AmbiguousEffect):
        send(3, "ok")
    assert runs == [1, 2, 3, 1]
    assert clocked_store.verify_receipts().ok


def test_prune_only_the_states_asked_and_drops_receipts_when_asked(clocked_store, clock):
    settle_three(clocked_store)
    clock.advance(timedelta(days=31))
    assert clocked_store.prune(DAYS_30, ["failed"], receipts=True) == 1
    assert clocked_store.list_receipts("email:2") == []
    assert clocked_store.get_effect("email:1") is not None
    assert clocked_store.prune(timedelta(days=31), "committed") == 0  # not yet that old
    assert clocked_store.prune(30 * 86_400.0, ctrlrun.EffectState.COMMITTED) == 1
    assert clocked_store.verify_receipts().ok


def test_prune_goes_in_batches_and_an_exception_stops_it_keeping_what_was_done(
    clocked_store, clock
):
    for n in range(30):
        clocked_store.reserve_effect(f"k{n:02}", "act_1", 60)
        clocked_store.begin_execution(f"k{n:02}", "act_1")
        clocked_store.commit_effect(f"k{n:02}", "act_1", n)
    clock.advance(timedelta(days=2))
    heard: list = []
    assert clocked_store.prune(timedelta(days=1), ["committed"], batch_size=7, dry_run=True) == 30

    def stop_after_two(n: int) -> None:
        heard.append(n)
        if len(heard) == 2:
            raise RuntimeError("operator stopped it")

    with pytest.raises(RuntimeError, match="operator stopped it"):
        clocked_store.prune(timedelta(days=1), ["committed"], batch_size=7, progress=stop_after_two)
    assert heard == [7, 14]
    assert len(clocked_store.list_effects()) == 16
    heard.clear()
    assert (
        clocked_store.prune(timedelta(days=1), ["committed"], batch_size=7, progress=heard.append)
        == 16
    )
    assert heard == [7, 14, 16]


BAD_PRUNES = [
    ({"older_than": 0}, "older_than must be > 0"),
    ({"older_than": -5}, "older_than must be > 0"),
    ({"older_than": math.nan}, "finite"),
    ({"older_than": "30d"}, "timedelta or a number"),
    ({"older_than": True}, "timedelta or a number"),
    ({"older_than": 10**30}, "hundred years"),
    ({"older_than": 60, "states": ["ambiguous"]}, "not one of committed, failed"),
    ({"older_than": 60, "states": ["executing", "committed"]}, "not one of"),
    ({"older_than": 60, "states": []}, "empty"),
    ({"older_than": 60, "states": 5}, "list of committed"),
    ({"older_than": 60, "batch_size": 0}, "batch_size"),
    ({"older_than": 60, "batch_size": 10_001}, "batch_size"),
    ({"older_than": 60, "batch_size": True}, "batch_size"),
    ({"older_than": 60, "by": 7}, "by must be a str"),
    ({"older_than": 60, "by": "x\0y"}, "NUL"),
    ({"older_than": 60, "progress": "yes"}, "callable"),
    ({"older_than": 60, "receipts": "false"}, "receipts must be True or False"),
    ({"older_than": 60, "dry_run": 1}, "dry_run must be True or False"),
]


@pytest.mark.parametrize("kwargs,needle", BAD_PRUNES)
def test_a_bad_prune_is_refused_and_deletes_nothing(clocked_store, clock, kwargs, needle):
    settle_three(clocked_store)
    clock.advance(timedelta(days=400))
    with pytest.raises(InvalidArgument, match=needle):
        clocked_store.prune(**kwargs)
    assert len(clocked_store.list_effects()) == 3


def test_prune_never_removes_an_attempt_that_is_running_meanwhile(store):
    """A key that fails and is retried over and over while prunes of failed rows run: the
    prune takes the failed row or leaves it, never the running attempt (whose outcome write
    would then find no row)."""
    stop = threading.Event()
    pruned = [0]

    @ctrlrun.protect("job.try", effect="job:{n}", store=store)
    def attempt(n: int) -> None:
        raise NotExecuted("not yet")

    def prune_all_the_time() -> None:
        while not stop.is_set():
            pruned[0] += store.prune(timedelta(microseconds=1), ["failed"], batch_size=3)

    pruner = threading.Thread(target=prune_all_the_time)
    pruner.start()
    rounds, deadline = 0, time.monotonic() + 60
    try:
        # At least 60 rounds, and on until the pruner has taken a few failed rows between
        # attempts (on a loaded machine it may need more rounds to meet one).
        while rounds < 60 or (pruned[0] < 3 and time.monotonic() < deadline):
            for n in range(3):
                with pytest.raises(NotExecuted):
                    attempt(n)
            rounds += 1
            time.sleep(0.001)  # a moment with every key failed: the pruner's window
    finally:
        stop.set()
        pruner.join(timeout=60)
    assert pruned[0] >= 3, (pruned, rounds)
    assert store.verify_receipts().ok


def test_list_effects_filters(store):
    for key, action in [
        ("refund:pi_2", "stripe.refund"),
        ("refund:pi_1", "stripe.refund"),
        ("email:1", "mail.send"),
        ("refunds", "other"),
    ]:

        @ctrlrun.protect(action, effect=key, store=store)
        def run() -> None:
            return None

        run()
    keys = lambda **kw: [r.effect_key for r in store.list_effects(**kw)]  # noqa: E731
    assert keys(prefix="refund:") == ["refund:pi_2", "refund:pi_1"]
    assert keys(prefix="refund") == ["refund:pi_2", "refund:pi_1", "refunds"]
    assert keys(action="mail.send") == ["email:1"]
    assert keys(state="committed", prefix="refund", limit=1) == ["refund:pi_2"]
    assert keys(state="failed") == []
    for bad, needle in [
        ({"limit": 0}, "limit"),
        ({"limit": True}, "limit"),
        ({"limit": 2**63}, "limit"),
        ({"prefix": 5}, "prefix must be a str"),
        ({"prefix": "a\0"}, "NUL"),
        ({"action": "\ud800"}, "surrogate"),
        ({"state": "done"}, "not one of"),
    ]:
        with pytest.raises(InvalidArgument, match=needle):
            store.list_effects(**bad)


def test_the_cli_prunes_and_lists_with_filters(store_url):
    past = MovableClock(datetime.now(timezone.utc) - timedelta(days=40))
    old = ctrlrun.open_store(store_url, clock=past)
    settle_three(old)
    old.close()
    url = ["--store", store_url]
    listed = run_cli(
        "effects",
        "list",
        "--prefix",
        "email:",
        "--state",
        "committed",
        "--action",
        "mail.send",
        "--limit",
        "5",
        "--json",
        *url,
    )
    assert listed.returncode == 0, listed.stderr
    assert [r["effect_key"] for r in json.loads(listed.stdout)] == ["email:1"]
    none = run_cli("effects", "list", "--prefix", "zz", *url)
    assert none.returncode == 0 and none.stdout.startswith("no effects with key prefix 'zz'")
    dry = run_cli("effects", "prune", "--older-than", "30d", "--dry-run", "--json", *url)
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["pruned"] == 2 and json.loads(dry.stdout)["dry_run"]
    done = run_cli("effects", "prune", "--older-than", "4w", *url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("pruned 2 effect(s) (committed, failed) settled more than 4w")
    again = run_cli("effects", "prune", "--older-than", "1d12h", "--json", *url)
    assert json.loads(again.stdout)["pruned"] == 0
    left = run_cli("effects", "list", "--json", *url)
    assert [r["state"] for r in json.loads(left.stdout)] == ["ambiguous"]
    verify = run_cli("receipts", "verify", *url)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    for bad in (
        ["--older-than", "30"],
        ["--older-than", "0d"],
        ["--older-than", "30d", "--state", "ambiguous"],
        ["--older-than", "30d", "--batch-size", "0"],
        [],
    ):
        proc = run_cli("effects", "prune", *bad, *url)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    bad_limit = run_cli("effects", "list", "--limit", "0", *url)
    assert bad_limit.returncode == 2 and "Traceback" not in bad_limit.stderr


def test_an_approval_request_in_flight_keeps_its_row_from_a_prune(pg, pg_schema):
    """PostgreSQL orders a request for approval and a prune of the same key: a request that
    holds the key's row (as ``request_approval`` does, ``FOR KEY SHARE``) makes the prune wait,
    and once it commits the prune sees it and keeps the row. A psql session plays the request,
    so the interleaving is exact."""
    url = pg.url(pg_schema)
    past = MovableClock(datetime.now(timezone.utc) - timedelta(days=40))
    old = ctrlrun.open_store(url, clock=past)
    old.reserve_effect("k", "act_1", 60)
    old.begin_execution("k", "act_1")
    old.fail_effect("k", "act_1", "declined")
    old.close()
    env = dict(os.environ)
    if pg.password:
        env["PGPASSWORD"] = pg.password
    session = subprocess.Popen(
        [
            _find_bin("psql"),
            "-h",
            pg.host,
            "-p",
            str(pg.port),
            "-U",
            pg.user,
            "-d",
            pg.db,
            "-v",
            "ON_ERROR_STOP=1",
            "-Atq",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    t = f'"{pg_schema}"'
    store = ctrlrun.open_store(url)
    pruned: list = []
    pruner = threading.Thread(
        target=lambda: pruned.append(store.prune(timedelta(days=30), ["failed"]))
    )
    try:
        assert session.stdin is not None and session.stdout is not None
        session.stdin.write(
            f"BEGIN; SELECT 'locked' FROM {t}.ctrlrun_effects "
            f"WHERE effect_key = 'k' FOR KEY SHARE;\n"
        )
        session.stdin.flush()
        assert session.stdout.readline().strip() == "locked"
        pruner.start()
        deadline = time.monotonic() + 30
        while (
            pg.psql(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND query LIKE '%FOR UPDATE OF e%'"
            )
            != "1"
        ):
            assert time.monotonic() < deadline, "the prune never waited for the row"
            time.sleep(0.05)
        now_us = int(time.time() * 1_000_000)
        day_us = 86_400 * 1_000_000
        session.stdin.write(
            f"INSERT INTO {t}.ctrlrun_approvals (request_id, action, args_digest, effect_key, "
            f"arguments, state, requested_at, ttl, expires_at, updated_at, last_event, "
            f"written_by, receipt_seq, receipt_hash) VALUES ('apr_race', 'x', 'd', 'k', '{{}}', "
            f"'pending', {now_us}, {day_us}, {now_us + day_us}, {now_us}, 'requested', "
            f"'test:1', 1, 'h'); COMMIT; SELECT 'committed';\n"
        )
        session.stdin.flush()
        assert session.stdout.readline().strip() == "committed"
        pruner.join(timeout=30)
        assert not pruner.is_alive()
        assert pruned == [0]
        assert store.get_effect("k") is not None
    finally:
        session.kill()
        session.wait()
        store.close()
