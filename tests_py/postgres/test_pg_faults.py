"""PostgreSQL under faults, through a real TCP proxy that acts on COMMIT (docs/spec.md §6).

The two unknowns that must never be merged: a failure before COMMIT (nothing committed,
retry the write) and a failure during COMMIT (unknown: re-read on a fresh connection).
OS processes on two hosts and a client killed mid-COMMIT: test_pg_faults_processes.py.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import time
from datetime import timedelta

import pytest

import ctrlrun
from ctrlrun import DuplicateEffect, EffectState, NotExecuted, StoreUnresolved, StoreWriteFailed
from tests_py.conftest import MovableClock
from throwaway.pgserver import _find_bin

STORE_LOG = "ctrlrun.store"


@pytest.fixture(params=["unnamed", "prepared"])
def proxied(request, pg, pg_schema, proxy, direct):
    """The root conftest's store through ``proxy``, once as every URL sends its statements
    (unnamed) and once with ``prepared_statements=on``: each fault below must end the same."""
    url = pg.url(pg_schema, host=proxy.host, port=proxy.port)
    s = ctrlrun.open_store(url + ("&prepared_statements=on" if request.param == "prepared" else ""))
    yield s
    s.close()


def counted(store, runs, *, raise_not_executed=False):
    @ctrlrun.protect("pay", effect="pay:{order}", store=store)
    def pay(order: str) -> dict:
        runs.append(order)
        if raise_not_executed:
            raise NotExecuted("the gateway refused the request before sending it")
        return {"order": order, "n": len(runs)}

    return pay


def assert_receipts_agree(direct, key, kinds):
    """The key's receipts are exactly the writes that committed, and agree with its row."""
    assert [r.kind for r in direct.list_receipts(key)] == kinds
    assert direct.list_receipts(key)[-1].state == direct.get_effect(key).state.value
    check = direct.verify_receipts()
    assert check.ok, check


def branches(caplog):
    return [r.getMessage().split(":", 1)[0] for r in caplog.records if r.name == STORE_LOG]


# a. -------------------------------------------------------------------------------------
def test_reservation_commit_lost_after_it_landed_proceeds_once(proxy, proxied, direct, caplog):
    caplog.set_level(logging.WARNING, logger=STORE_LOG)
    runs: list = []
    pay = counted(proxied, runs)
    rule = proxy.arm("drop_after", b"ctrlrun_reserve($1")
    assert pay("o1") == {"order": "o1", "n": 1}
    assert rule.fired == 1
    assert runs == ["o1"]
    rec = direct.get_effect("pay:o1")
    assert rec.state is EffectState.COMMITTED and rec.attempt == 1
    assert "reread_identical_landed" in branches(caplog)
    assert_receipts_agree(direct, "pay:o1", ["reservation", "outcome"])


# b. -------------------------------------------------------------------------------------
def test_reservation_commit_lost_before_it_landed_retries_the_insert_once(
    proxy, proxied, direct, caplog
):
    caplog.set_level(logging.WARNING, logger=STORE_LOG)
    runs: list = []
    pay = counted(proxied, runs)
    rule = proxy.arm("drop_before", b"ctrlrun_reserve($1")
    assert pay("o2")["order"] == "o2"
    assert rule.fired == 1
    assert runs == ["o2"]
    rec = direct.get_effect("pay:o2")
    assert rec.state is EffectState.COMMITTED and rec.attempt == 1
    assert "reread_none_retry_insert" in branches(caplog)
    assert_receipts_agree(direct, "pay:o2", ["reservation", "outcome"])


# c. -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "action,branch", [("drop_after", "reread_landed"), ("drop_before", "reread_unchanged_reissue")]
)
def test_commit_transition_lost_is_recognised_or_reissued(
    proxy, proxied, direct, caplog, action, branch
):
    caplog.set_level(logging.WARNING, logger=STORE_LOG)
    runs: list = []
    pay = counted(proxied, runs)
    rule = proxy.arm(action, b"committed")
    assert pay("o3")["n"] == 1
    assert rule.fired == 1
    assert runs == ["o3"]
    rec = direct.get_effect("pay:o3")
    assert rec.state is EffectState.COMMITTED
    assert rec.result == {"order": "o3", "n": 1}
    assert branch in branches(caplog)
    assert_receipts_agree(direct, "pay:o3", ["reservation", "outcome"])


@pytest.mark.parametrize(
    "action,branch", [("drop_after", "reread_landed"), ("drop_before", "reread_unchanged_reissue")]
)
def test_fail_transition_lost_is_recognised_or_reissued(
    proxy, proxied, direct, caplog, action, branch
):
    caplog.set_level(logging.WARNING, logger=STORE_LOG)
    runs: list = []
    pay = counted(proxied, runs, raise_not_executed=True)
    rule = proxy.arm(action, b"failed")
    with pytest.raises(NotExecuted):
        pay("o4")
    assert rule.fired == 1
    assert runs == ["o4"]
    rec = direct.get_effect("pay:o4")
    assert rec.state is EffectState.FAILED
    assert "NotExecuted" in rec.error
    assert branch in branches(caplog)
    assert_receipts_agree(direct, "pay:o4", ["reservation", "outcome"])


# d. -------------------------------------------------------------------------------------
def test_shared_action_id_with_a_live_holder_is_in_progress_when_the_commit_is_lost(
    proxy, proxied, direct
):
    shared_id = "act_" + "5" * 32
    held = []
    # The holder reserves just before our reservation statement reaches the server, which
    # then finds its row; the statement's answer is lost.
    race = proxy.arm(
        "call",
        b"ctrlrun_reserve($1",
        on="statement",
        callback=lambda: held.append(direct.reserve_effect("pay:o5", shared_id, 60)),
    )
    rule = proxy.arm("drop_after", b"ctrlrun_reserve($1")
    with pytest.raises(DuplicateEffect) as info:
        proxied.reserve_effect("pay:o5", shared_id, 60)
    assert info.value.state == "in_progress"
    assert race.fired == 1 and rule.fired == 1
    (holder,) = held
    assert direct.get_effect("pay:o5") == holder.record  # untouched
    # The holder runs and commits: one execution.
    direct.begin_execution("pay:o5", holder.action_id, attempt=1)
    direct.commit_effect("pay:o5", holder.action_id, "done", attempt=1)
    assert direct.get_effect("pay:o5").state is EffectState.COMMITTED


def test_a_shared_action_id_and_clock_cannot_pass_for_our_own_row_after_a_lost_commit(
    proxy, proxied, direct, caplog
):
    # Two attempts share an action id and a clock value, so their rows agree in every column
    # but the per-attempt token. Ours is lost before its COMMIT reaches the server; the other
    # lands between that and our re-read. Our re-read must not take the other row for ours.
    caplog.set_level(logging.WARNING, logger=STORE_LOG)
    shared_id = "act_" + "6" * 32
    clock = MovableClock()  # frozen: both attempts write the same times
    ours, theirs = proxied.with_clock(clock), direct.with_clock(clock)
    held = []
    rule = proxy.arm("drop_before", b"ctrlrun_reserve($1")
    # a fresh key's reservation reads nothing first: the re-read is the first read
    race = proxy.arm(
        "call",
        b"ctrlrun_select($1",
        on="statement",
        callback=lambda: held.append(theirs.reserve_effect("pay:o6", shared_id, 60)),
    )
    with pytest.raises(DuplicateEffect) as info:
        ours.reserve_effect("pay:o6", shared_id, 60)
    assert info.value.state == "in_progress"
    assert rule.fired == 1 and race.fired == 1
    assert "reread_other_replan" in branches(caplog)
    (holder,) = held
    assert direct.get_effect("pay:o6") == holder.record  # the other attempt's row, untouched


# e. -------------------------------------------------------------------------------------
@pytest.mark.parametrize("action", ["drop_before", "drop_after"])
def test_lost_commit_and_a_failed_reread_is_unresolved_and_runs_nothing(
    proxy, proxied, direct, caplog, action
):
    caplog.set_level(logging.WARNING, logger=STORE_LOG)
    runs: list = []
    pay = counted(proxied, runs)
    rule = proxy.arm(action, b"ctrlrun_reserve($1", then_refuse=True)
    with pytest.raises(StoreUnresolved) as info:
        pay("o6")
    assert rule.fired == 1
    assert runs == []
    assert "re-read" in str(info.value) or "re-reading" in str(info.value)
    assert "the executor was not run" in str(info.value)
    assert info.value.effect_key == "pay:o6" and info.value.action_id.startswith("act_")
    rec = direct.get_effect("pay:o6")
    if rec is not None:
        assert rec.action_id == info.value.action_id  # the attempt to look for
    if action == "drop_before":
        assert rec is None  # nothing landed, nothing else was written
    else:
        # landed (the decorator reserves straight into executing), then left alone: the lease
        # lapses into ambiguous, since nobody can say whether the body ran
        assert rec.state is EffectState.EXECUTING
    assert "reread_failed" in branches(caplog)


@pytest.mark.parametrize("action", ["drop_before", "drop_after"])
def test_an_unresolved_outcome_write_says_the_executor_ran_and_names_the_attempt(
    proxy, proxied, direct, action
):
    """Through the Store API: the reservation's StoreUnresolved says nothing ran, an outcome
    write's says the executor has already run; both carry the key and the action id."""
    aid = "act_" + "7" * 32
    rule = proxy.arm(action, b"ctrlrun_reserve($1", then_refuse=True)
    with pytest.raises(StoreUnresolved) as info:
        proxied.reserve_effect("pay:u1", aid, 60)
    assert rule.fired == 1
    assert (info.value.effect_key, info.value.action_id) == ("pay:u1", aid)
    assert "the executor was not run" in str(info.value)

    direct.reserve_effect("pay:u2", aid, 60)
    direct.begin_execution("pay:u2", aid)
    proxy.refuse_new(False)  # the proxy lets new connections in again
    rule = proxy.arm(action, b"ctrlrun_transition($1", then_refuse=True)
    with pytest.raises(StoreUnresolved) as info:
        proxied.commit_effect("pay:u2", aid, "done")
    assert rule.fired == 1
    assert (info.value.effect_key, info.value.action_id) == ("pay:u2", aid)
    message = str(info.value)
    assert "the executor has already run" in message and "was not run" not in message
    expected = EffectState.COMMITTED if action == "drop_after" else EffectState.EXECUTING
    assert direct.get_effect("pay:u2").state is expected


# f. -------------------------------------------------------------------------------------
def test_connection_dropped_as_the_reservation_is_sent_is_settled_by_the_reread(
    proxy, proxied, direct, caplog
):
    # The reservation commits by itself: a connection lost as it goes out leaves it unknown,
    # the re-read finds no row, and the insert is tried again; the executor runs once.
    caplog.set_level(logging.WARNING, logger=STORE_LOG)
    runs: list = []
    pay = counted(proxied, runs)
    rule = proxy.arm("drop_before", b"ctrlrun_reserve($1", on="statement")
    assert pay("o7")["n"] == 1
    assert rule.fired == 1
    assert "reread_none_retry_insert" in branches(caplog)
    assert runs == ["o7"]
    assert direct.get_effect("pay:o7").state is EffectState.COMMITTED
    with pytest.raises(DuplicateEffect):
        pay("o7")


@contextlib.contextmanager
def uncommitted_insert(
    pg, pg_schema, key: str, state: str, lease_s: int, sleep: float, ending: str
):
    """Another session (psql) inserts a row for ``key`` and holds its transaction open for
    ``sleep`` seconds, then ends it with ``ending``; yields once the insert is held."""
    env = dict(os.environ, PGPASSWORD=pg.password or "")
    now_us = int(time.time() * 1e6)
    blocker = subprocess.Popen(
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
            "-Atqc",
            f'BEGIN; INSERT INTO "{pg_schema}".ctrlrun_effects (key_digest, effect_key, state, '
            f"action_id, attempt, created_at, updated_at, lease_expires_at, last_event, "
            f"receipt_seq, receipt_hash) VALUES "
            f"(sha256(convert_to('{key}', 'UTF8')), '{key}', '{state}', "
            f"'act_blocker', 1, {now_us}, {now_us}, {now_us + lease_s * 1_000_000}, 'reservation', "
            f"1, 'blocker'); "
            f"SELECT pg_sleep({sleep}); {ending};",
        ],
        env=env,
    )
    try:
        deadline = time.time() + 20  # wait until the blocker holds its uncommitted insert
        while (
            pg.psql(
                f"SELECT count(*) FROM pg_stat_activity WHERE query LIKE "
                f"'%pg_sleep({sleep})%' AND state = 'active' "
                f"AND pid <> pg_backend_pid()"
            )
            != "1"
        ):
            assert time.time() < deadline and blocker.poll() is None, "the blocker never started"
            time.sleep(0.05)
        yield blocker
    finally:
        if blocker.poll() is None:
            blocker.kill()


def test_statement_timeout_before_commit_is_a_failed_write(pg, pg_schema, direct):
    # Another session inserts the key and holds its transaction open: our INSERT waits on it
    # and hits statement_timeout, before any COMMIT.
    with uncommitted_insert(pg, pg_schema, "pay:o8", "reserved", 60, 2, "ROLLBACK") as blocker:
        url = pg.url(pg_schema) + "&options=-c%20statement_timeout%3D200"
        with ctrlrun.open_store(url) as s:
            with pytest.raises(StoreWriteFailed) as info:
                s.reserve_effect("pay:o8", "act_" + "8" * 32, 60)
            assert "statement timeout" in str(info.value)
            blocker.wait(timeout=30)
            assert direct.get_effect("pay:o8") is None
            granted = s.reserve_effect("pay:o8", "act_" + "8" * 32, 60)
            assert granted.attempt == 1


@pytest.mark.parametrize("ending", ["COMMIT", "ROLLBACK"])
def test_a_reservation_that_meets_an_uncommitted_insert_waits_for_its_outcome(
    pg, pg_schema, direct, ending
):
    """The reservation's insert meets another session's uncommitted row for the key: it waits
    for that transaction, then either finds the committed row (read afresh in the same
    statement: refused, the row untouched) or, the other rolled back, inserts its own."""
    with uncommitted_insert(pg, pg_schema, "pay:o10", "executing", 600, 1.5, ending) as blocker:
        started = time.monotonic()
        if ending == "COMMIT":
            with pytest.raises(DuplicateEffect) as info:
                direct.reserve_effect("pay:o10", "act_" + "a" * 32, 60)
            assert info.value.state == "in_progress"
            assert direct.get_effect("pay:o10").action_id == "act_blocker"
        else:
            granted = direct.reserve_effect("pay:o10", "act_" + "a" * 32, 60)
            assert granted.record.attempt == 1
            assert direct.get_effect("pay:o10").action_id == "act_" + "a" * 32
        assert time.monotonic() - started > 0.3  # it waited for the other transaction
        assert blocker.wait(timeout=30) == 0


def test_a_fresh_call_is_two_statements_that_commit_by_themselves(
    proxy, proxied, direct, pg, pg_schema
):
    runs: list = []
    pay = counted(proxied, runs)
    parsed, simple = len(proxy.parsed), len(proxy.simple)
    assert pay("o21") == {"order": "o21", "n": 1}
    sent = [sql for _, sql in proxy.parsed[parsed:]]
    assert len(sent) == 2, sent  # the reservation, the outcome: two round trips
    # each a call of the schema's function that holds the statement (its plan kept by the server)
    for text, name in zip(sent, [b"ctrlrun_reserve", b"ctrlrun_transition"]):
        assert text.startswith(b'SELECT * FROM "' + pg_schema.encode() + b'".' + name + b"($1")
    for name in ("ctrlrun_select", "ctrlrun_reserve", "ctrlrun_insert", "ctrlrun_transition"):
        body, config = pg.psql(
            f"SELECT prosrc, proconfig FROM pg_proc p JOIN pg_namespace n ON "
            f"n.oid = p.pronamespace WHERE n.nspname = '{pg_schema}' "
            f"AND p.proname = '{name}'"
        ).rsplit("|", 1)
        # the writes' functions make their commits durable (test_pgbouncer shows the effect):
        # ctrlrun_durable()'s steps, written out in each (schema version 12)
        assert name == "ctrlrun_select" or "SET LOCAL synchronous_commit TO DEFAULT" in body
        # the generic plan from the first call (not five custom ones first), and the
        # search_path another client may have left on a pooled session does not apply
        assert config == '{"search_path=pg_catalog, pg_temp",plan_cache_mode=force_generic_plan}'
    assert proxy.simple[simple:] == []  # no BEGIN, no COMMIT
    assert direct.get_effect("pay:o21").state is EffectState.COMMITTED


def test_a_refusal_is_one_statement_that_writes_nothing(proxy, proxied, direct, pg, pg_schema):
    runs: list = []
    pay = counted(proxied, runs)
    assert pay("o20") == {"order": "o20", "n": 1}
    before = direct.get_effect("pay:o20")
    receipts = len(direct.list_receipts("pay:o20"))
    xid = f"SELECT xmin FROM \"{pg_schema}\".ctrlrun_effects WHERE effect_key = 'pay:o20'"
    xmin = pg.psql(xid)
    parsed, bound = len(proxy.parsed), len(proxy.bound)
    for _ in range(3):
        with pytest.raises(DuplicateEffect) as info:
            pay("o20")
        assert info.value.state == "committed"
    assert len(proxy.bound) - bound == 3  # one statement, one round trip, per refusal
    # parsed each time unnamed, or prepared once before (prepared_statements=on)
    prepared = any(name for name, _ in proxy.parsed)  # the store sends named statements
    assert len(proxy.parsed) - parsed == (0 if prepared else 3)
    assert runs == ["o20"]
    # the conflicting INSERT wrote nothing: the row, its version and its receipts are as they were
    assert direct.get_effect("pay:o20") == before
    assert pg.psql(xid) == xmin
    assert len(direct.list_receipts("pay:o20")) == receipts


def test_a_slow_reservation_write_still_grants_the_whole_lease(proxy, proxied, direct):
    """The reservation is planned from a read made before its transaction; a wait between the
    two (a busy pool, a pooler queueing the transaction) must not eat the holder's lease: the
    lease counts from the INSERT."""
    stall = proxy.arm(
        "call", b"ctrlrun_reserve($1", on="statement", callback=lambda: time.sleep(2.5)
    )
    held = proxied.reserve_effect("pay:o9", "act_" + "9" * 32, 2)
    assert stall.fired == 1
    rec = held.record
    assert rec.lease_expires_at - rec.created_at == timedelta(seconds=2)
    with pytest.raises(DuplicateEffect) as info:  # live: in progress, not lapsed into ambiguous
        direct.reserve_effect("pay:o9", "act_" + "8" * 32, 60)
    assert info.value.state == "in_progress"
