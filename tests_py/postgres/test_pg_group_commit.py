"""Group commit on PostgreSQL (issue 51): calls one process makes while its write is in flight
go together in the next write, one statement and one commit, and every rule still holds per
row. The write in flight is held at its COMMIT by the real TCP proxy (throwaway/pgproxy.py)
while the others queue behind it; then the batch meets the fault."""

from __future__ import annotations

import logging
import threading
import time

import pytest

import ctrlrun
from ctrlrun import DuplicateEffect, EffectState, InvalidArgument, StoreWriteFailed
from tests_py.postgres.test_pg_faults import assert_receipts_agree, branches, counted

STORE_LOG = "ctrlrun.store"
RESERVE, OUTCOME = b"ctrlrun_reserve($1", b"ctrlrun_transition($1"
MANY = {RESERVE: b"ctrlrun_reserve_many($1", OUTCOME: b"ctrlrun_transition_many($1"}


@pytest.fixture(params=["unnamed", "prepared"])
def proxied(request, pg, pg_schema, proxy, direct):
    # the calls queued behind the held write wait for it, however long it is held
    url = pg.url(pg_schema, host=proxy.host, port=proxy.port) + "&group_commit_wait=30"
    s = ctrlrun.open_store(url + ("&prepared_statements=on" if request.param == "prepared" else ""))
    yield s
    s.close()


def behind_a_held_write(proxy, pay, step: bytes, keys, arm_batch=None):
    """Call ``pay("first")`` and hold its ``step`` (the reservation or the outcome) at its
    COMMIT; call ``pay`` on each of ``keys`` in a thread of its own, so that they queue behind
    it; arm the batch's rule (``arm_batch(match)``), release, and return each key's result
    or exception, and the rule."""
    hold = proxy.arm("hold", step)
    first = threading.Thread(target=pay, args=("first",))
    first.start()
    assert hold.wait_fired(), "the first call's write reached the proxy"
    out: dict = {}

    def call(key: str) -> None:
        try:
            out[key] = pay(key)
        except Exception as e:
            out[key] = e

    threads = [threading.Thread(target=call, args=(k,)) for k in keys]
    for t in threads:
        t.start()
    time.sleep(0.5)  # each has reached its turn and queued behind the held write
    rule = arm_batch(MANY[step]) if arm_batch else None
    hold.release()
    for t in [first, *threads]:
        t.join(timeout=60)
    return out, rule


@pytest.mark.parametrize(
    "step,action,branch",
    [
        (RESERVE, "drop_after", "reread_identical_landed"),
        (RESERVE, "drop_before", "reread_none_retry_insert"),
        (OUTCOME, "drop_after", "reread_landed"),
        (OUTCOME, "drop_before", "reread_unchanged_reissue"),
    ],
)
def test_a_batch_whose_commit_reply_is_lost_is_settled_row_by_row(
    proxy, proxied, direct, caplog, step, action, branch
):
    caplog.set_level(logging.WARNING, logger=STORE_LOG)
    runs: list = []
    pay = counted(proxied, runs)
    keys = ["o1", "o2", "o3", "o4"]
    out, rule = behind_a_held_write(proxy, pay, step, keys, lambda m: proxy.arm(action, m))
    assert rule.fired == 1  # the four went as one batch
    assert sorted(runs) == sorted(["first", *keys])  # each ran once
    assert all(out[k]["order"] == k for k in keys)
    assert branches(caplog).count(branch) == 4  # each row re-read and decided alone
    for k in ["first", *keys]:
        assert direct.get_effect(f"pay:{k}").state is EffectState.COMMITTED
        assert_receipts_agree(direct, f"pay:{k}", ["reservation", "outcome"])


def test_a_row_the_server_refuses_fails_no_neighbour_in_its_batch(
    proxy, proxied, direct, pg, pg_schema, caplog
):
    caplog.set_level(logging.WARNING, logger=STORE_LOG)
    # a row the server refuses (the owner's trigger stands in for any error it answers with)
    pg.psql(
        f'CREATE FUNCTION "{pg_schema}".refuse() RETURNS trigger LANGUAGE plpgsql AS $$ '
        "BEGIN RAISE EXCEPTION 'refused by the test'; END $$; "
        f'CREATE TRIGGER refuse BEFORE INSERT ON "{pg_schema}".ctrlrun_effects FOR EACH ROW '
        "WHEN (NEW.effect_key = 'pay:poison') EXECUTE FUNCTION "
        f'"{pg_schema}".refuse()'
    )
    runs: list = []
    pay = counted(proxied, runs)
    out, _ = behind_a_held_write(proxy, pay, RESERVE, ["o8", "o9", "poison"])
    # the batch wrote nothing; each call then went alone: its neighbours were written
    assert branches(caplog).count("batch_refused_each_alone") == 1
    assert sorted(runs) == ["first", "o8", "o9"]
    assert out["o8"]["order"] == "o8" and out["o9"]["order"] == "o9"
    assert isinstance(out["poison"], StoreWriteFailed), out["poison"]
    assert "nothing was committed" in str(out["poison"])
    assert direct.get_effect("pay:poison") is None
    assert direct.verify_receipts().ok


def test_an_outcome_with_a_nul_key_is_refused_before_any_batch(proxy, proxied, direct):
    act = "act_" + "b" * 32
    for k in ("g:first", "g:1", "g:2"):
        proxied.reserve_effect(k, act, 60)
        proxied.begin_execution(k, act)
    hold = proxy.arm("hold", OUTCOME)
    out: dict = {}

    def commit(k: str) -> None:
        try:
            out[k] = proxied.commit_effect(k, act, {"ok": k}).state
        except Exception as e:
            out[k] = e

    first = threading.Thread(target=commit, args=("g:first",))
    first.start()
    assert hold.wait_fired()
    threads = [threading.Thread(target=commit, args=(k,)) for k in ("g:1", "g:2", "g:\x00bad")]
    for t in threads:
        t.start()
    time.sleep(0.5)
    hold.release()
    for t in [first, *threads]:
        t.join(timeout=60)
    assert [out[k] for k in ("g:first", "g:1", "g:2")] == [EffectState.COMMITTED] * 3
    assert isinstance(out["g:\x00bad"], InvalidArgument)


def test_a_store_call_made_while_this_thread_holds_the_write_in_flight_goes_alone(
    proxy, proxied, direct
):
    """A logging handler on ``ctrlrun.store`` that calls the store while its thread's write is
    in flight: it must not queue behind its own thread."""
    nested: list = []

    class Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "stale_connection_dropped" in record.getMessage() and not nested:
                nested.append(proxied.reserve_effect("h:nested", "act_" + "c" * 32, 60).record)

    handler, log = Handler(), logging.getLogger(STORE_LOG)
    log.addHandler(handler)
    log.setLevel(logging.WARNING)
    try:
        proxied.reserve_effect("h:0", "act_" + "c" * 32, 60)  # a pooled connection, now idle
        proxy.drop_all()  # it dies idle: the next write notices it and logs, in flight
        time.sleep(0.3)
        done = threading.Event()
        call = threading.Thread(
            target=lambda: (proxied.reserve_effect("h:1", "act_" + "c" * 32, 60), done.set()),
            daemon=True,
        )
        call.start()
        assert done.wait(15), f"the call never returned; nested: {nested}"
        assert nested and nested[0].effect_key == "h:nested"
    finally:
        log.removeHandler(handler)


def test_a_write_stuck_on_a_row_lock_does_not_hold_up_the_calls_behind_it(pg, pg_schema, direct):
    act = "act_" + "d" * 32
    store = ctrlrun.open_store(pg.url(pg_schema))
    try:
        for k in ("x:locked", "y:free"):
            store.reserve_effect(k, act, 60)
            store.begin_execution(k, act)
        # another session holds x's row for 3 s (an operator's transaction, a slow writer)
        locker = threading.Thread(
            target=pg.psql,
            args=(
                f'BEGIN; SELECT 1 FROM "{pg_schema}".ctrlrun_effects '
                "WHERE effect_key = 'x:locked' FOR UPDATE; SELECT pg_sleep(3); COMMIT;",
            ),
        )
        locker.start()
        time.sleep(0.5)
        stuck = threading.Thread(target=lambda: store.commit_effect("x:locked", act, 1))
        stuck.start()
        time.sleep(0.3)  # its outcome is in flight, waiting for the row
        started = time.monotonic()
        assert store.commit_effect("y:free", act, 2).state is EffectState.COMMITTED
        assert time.monotonic() - started < 1.5  # queued a moment, then alone
        stuck.join(timeout=30)
        locker.join(timeout=30)
        assert direct.get_effect("x:locked").state is EffectState.COMMITTED
    finally:
        store.close()


def test_a_conflict_in_a_batch_fails_no_neighbour(proxy, proxied, direct):
    runs: list = []
    pay = counted(proxied, runs)
    calls = ["same", "same", "other"]
    hold = proxy.arm("hold", RESERVE)
    first = threading.Thread(target=pay, args=("first",))
    first.start()
    assert hold.wait_fired()
    out: list = []

    def call(key: str) -> None:
        try:
            out.append(pay(key)["order"])
        except DuplicateEffect:
            out.append("refused")

    threads = [threading.Thread(target=call, args=(k,)) for k in calls]
    for t in threads:
        t.start()
    time.sleep(0.5)
    hold.release()
    for t in [first, *threads]:
        t.join(timeout=60)
    assert sorted(out) == ["other", "refused", "same"]
    assert sorted(runs) == ["first", "other", "same"]
    assert direct.verify_receipts().ok


def test_group_commit_off_sends_each_write_alone(proxy, pg, pg_schema, direct):
    url = pg.url(pg_schema, host=proxy.host, port=proxy.port) + "&group_commit=off"
    store = ctrlrun.open_store(url)
    try:
        runs: list = []
        pay = counted(store, runs)
        out, _ = behind_a_held_write(proxy, pay, RESERVE, ["a1", "a2", "a3"])
        assert sorted(runs) == ["a1", "a2", "a3", "first"]
        assert [out[k]["order"] for k in ("a1", "a2", "a3")] == ["a1", "a2", "a3"]
        assert not any(b"_many(" in sql for _, sql in proxy.parsed)
    finally:
        store.close()


def test_group_commit_takes_on_or_off_and_a_wait_in_seconds(pg, pg_schema):
    with pytest.raises(InvalidArgument, match="group_commit must be on or off"):
        ctrlrun.open_store(pg.url(pg_schema) + "&group_commit=maybe")
    for wait in ("0", "61", "soon", "nan"):
        with pytest.raises(InvalidArgument, match="group_commit_wait must be a number of seconds"):
            ctrlrun.open_store(pg.url(pg_schema) + f"&group_commit_wait={wait}")
