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
    url = pg.url(pg_schema, host=proxy.host, port=proxy.port)
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


def test_a_batch_the_server_refuses_writes_nothing_and_tells_every_call(
    proxy, proxied, direct, pg, pg_schema
):
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
    keys = ["o8", "o9", "poison"]
    out, _ = behind_a_held_write(proxy, pay, RESERVE, keys)
    assert runs == ["first"]  # nothing in the batch ran
    for k in keys:
        assert isinstance(out[k], StoreWriteFailed), out[k]
        assert "nothing was committed" in str(out[k]) and f"pay:{k}" in str(out[k])
        assert direct.get_effect(f"pay:{k}") is None
    assert direct.verify_receipts().ok
    # and each may be retried: alone now, each is written
    assert pay("o8")["order"] == "o8"


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


def test_group_commit_takes_on_or_off(pg, pg_schema):
    with pytest.raises(InvalidArgument, match="group_commit must be on or off"):
        ctrlrun.open_store(pg.url(pg_schema) + "&group_commit=maybe")
