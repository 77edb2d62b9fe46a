"""Durable whatever the defaults (issue 46, item 1): `synchronous_commit = off` set on the server,
on the role or in the URL does not make ctrlrun's commits skip the WAL flush (counted in
`pg_stat_wal.wal_sync`), unless the URL accepts the risk by name, which is warned of. The
same setting slipped in through the role without the URL's option is refused at open. The
`local` case, which only a synchronous standby tells apart from `on`, is in
test_pg_replication.py."""

from __future__ import annotations

import contextlib
import logging
import time

import pytest

import ctrlrun

SYNCED = "SELECT wal_sync FROM pg_stat_wal"
CALLS = 20


@contextlib.contextmanager
def commits_off(pg, where: str):
    """`synchronous_commit = off` set `where` (server, role, url) for the test's connections;
    yields the URL options that go with it."""
    undo = {
        "server": (
            "ALTER SYSTEM SET synchronous_commit = off",
            "ALTER SYSTEM RESET synchronous_commit",
        ),
        "role": (
            f'ALTER ROLE "{pg.user}" SET synchronous_commit = off',
            f'ALTER ROLE "{pg.user}" RESET synchronous_commit',
        ),
        "url": (None, None),
    }[where]
    if undo[0]:
        pg.psql(undo[0])
        pg.psql("SELECT pg_reload_conf()")
    try:
        yield "&options=-c%20synchronous_commit%3Doff" if where == "url" else ""
    finally:
        if undo[1]:
            pg.psql(undo[1])
            pg.psql("SELECT pg_reload_conf()")


def flushes_of_calls(pg, url: str) -> tuple:
    """WAL flushes during `CALLS` protected calls on a store opened with `url`, and its posture."""
    before = int(pg.psql(SYNCED))
    with ctrlrun.open_store(url) as store:
        posture = store.posture()

        @ctrlrun.protect("pay", effect="pay:{order}", store=store)
        def pay(order: str) -> str:
            return order

        for i in range(CALLS):
            pay(f"o{i}")
    time.sleep(1.0)  # the store's backends exit and report their WAL counters
    return int(pg.psql(SYNCED)) - before, posture


@pytest.mark.parametrize("where", ["server", "role", "url"])
def test_commits_wait_for_the_flush_whatever_sets_off(pg, pg_schema, where):
    with commits_off(pg, where) as options:
        flushed, posture = flushes_of_calls(pg, pg.url(pg_schema) + options)
    assert flushed >= 2 * CALLS  # the reservation's and the outcome's commits, each flushed
    check, standing, detail = posture[0]
    assert (check, standing) == ("durable commits", "pass")
    assert "a new session's own is off" in detail


def test_the_url_may_accept_lost_commits_by_name_and_is_warned(pg, pg_schema, caplog):
    caplog.set_level(logging.WARNING, logger="ctrlrun.store")
    with commits_off(pg, "server"):
        flushed, posture = flushes_of_calls(
            pg, pg.url(pg_schema) + "&crash_may_lose_commits=accept"
        )
    assert flushed < CALLS  # commits acknowledged before their flush: what the option costs
    assert posture[0][:2] == ("durable commits", "fail")
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        "crash_may_lose_commits=accept" in m and "synchronous_commit = off" in m for m in warned
    )


def test_the_role_cannot_weaken_commits_behind_the_urls_back(pg, pg_schema):
    pg.psql(f'ALTER ROLE "{pg.user}" SET ctrlrun.commit_durability = server')
    try:
        with pytest.raises(ctrlrun.StoreError) as info:
            ctrlrun.open_store(pg.url(pg_schema))
        assert "ctrlrun.commit_durability = server" in str(info.value)
        assert "crash_may_lose_commits=accept" in str(info.value)
        assert pg.password not in str(info.value)
    finally:
        pg.psql(f'ALTER ROLE "{pg.user}" RESET ctrlrun.commit_durability')


def test_every_write_keeps_working_under_a_serializable_default(pg, pg_schema):
    """`ctrlrun_durable()` opens every explicit transaction; pruning, which must run at READ
    COMMITTED, still gets it when the role's default isolation is another."""
    pg.psql(f'ALTER ROLE "{pg.user}" SET default_transaction_isolation = serializable')
    try:
        with ctrlrun.open_store(pg.url(pg_schema)) as store:

            @ctrlrun.protect("pay", effect="pay:{order}", store=store)
            def pay(order: str) -> str:
                return order

            pay("o1")
            act = "act_" + "3" * 32
            store.reserve_effect("pay:o2", act, 60)
            store.mark_ambiguous("pay:o2", act, "timed out")
            store.resolve_effect("pay:o2", "failed", "ops:test")
            assert store.prune(0.001) == 2
            assert store.list_effects() == []
    finally:
        pg.psql(f'ALTER ROLE "{pg.user}" RESET default_transaction_isolation')
