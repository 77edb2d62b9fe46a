"""What another client leaves on a pooled server connection (settings, a search path), a server
gone behind the pooler, and an outcome write the pooler never sent: the PostgreSQL store behind
a real PgBouncer (throwaway/pgbouncer.py)."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import time

import pytest

import ctrlrun
from ctrlrun import DuplicateEffect, EffectState
from throwaway.pgbouncer import PgBouncer, branches
from throwaway.pgproxy import PgProxy
from throwaway.pgserver import _find_bin

STORE_LOG = "ctrlrun.store"
MODES = ["transaction", "session"]


def _psql(pg, host: str, port: int, sql: str) -> str:
    env = dict(os.environ, PGPASSWORD=pg.password or "")
    out = subprocess.run(
        [
            _find_bin("psql"),
            "-h",
            host,
            "-p",
            str(port),
            "-U",
            pg.user,
            "-d",
            pg.db,
            "-v",
            "ON_ERROR_STOP=1",
            "-Atqc",
            sql,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_a_setting_another_client_left_on_the_server_connection_does_not_weaken_commits(
    pg, schemas
):
    """Transaction mode does not reset server connections: another client's
    `SET synchronous_commit = off` stays on the one server connection ctrlrun then gets. Our
    commits must still wait for the WAL flush (counted in pg_stat_wal.wal_sync)."""
    b = PgBouncer(pg.host, pg.port, pg.user, pg.password, "transaction", pool_size=1)
    schema = schemas()
    try:
        _psql(pg, b.host, b.port, "SET synchronous_commit = off")
        assert _psql(pg, b.host, b.port, "SHOW synchronous_commit") == "off"  # it leaked
        synced = "SELECT wal_sync FROM pg_stat_wal"
        before = int(pg.psql(synced))
        with ctrlrun.open_store(b.url(schema=schema)) as store:

            @ctrlrun.protect("pay", effect="pay:{order}", store=store)
            def pay(order: str) -> str:
                return order

            for i in range(20):
                pay(f"o{i}")
        b.kill()  # its server connection's backend exits and reports its WAL counters
        time.sleep(1.0)
        assert int(pg.psql(synced)) - before >= 40  # two durable commits per call
    finally:
        b.stop()


@contextlib.contextmanager
def bouncer_behind_proxy(pg, query_wait_timeout: int):
    """PgBouncer (transaction mode, 3 server connections) reaching the server through the fault
    proxy, so a test can take the server away from the pooler."""
    proxy = PgProxy(pg.host, pg.port)
    b = PgBouncer(
        proxy.host,
        proxy.port,
        pg.user,
        pg.password,
        "transaction",
        pool_size=3,
        query_wait_timeout=query_wait_timeout,
    )
    try:
        yield proxy, b
    finally:
        b.stop()
        proxy.close()


def test_a_server_gone_behind_the_pooler_fails_the_call_without_a_connection_storm(
    pg, schemas, caplog
):
    """Only connections that died idle in the pool are skipped; once a connection opened for
    this call fails too, the call stops (it does not open `pool_size` more)."""
    caplog.set_level(logging.WARNING, logger=STORE_LOG)
    schema = schemas()
    with bouncer_behind_proxy(pg, query_wait_timeout=3) as (proxy, b):
        with ctrlrun.open_store(b.url(schema=schema) + "&pool_size=50") as store:
            store.reserve_effect("k0", "act_" + "1" * 32, 60)  # one pooled connection, used
            proxy.refuse_new()
            proxy.drop_all()  # the server is gone for the pooler
            with pytest.raises(ctrlrun.StoreWriteFailed, match="nothing was committed"):
                store.reserve_effect("k1", "act_" + "2" * 32, 60)
    assert branches(caplog).count("stale_connection_dropped") <= 1


def test_an_outcome_write_the_pooler_never_sent_is_a_failed_write_not_an_unknown_one(
    pg, schemas, caplog
):
    """The server goes away while the body runs. The outcome write (one statement that commits
    by itself) waits in PgBouncer's queue for a server connection until `query_wait_timeout`:
    PgBouncer never gave it to a server, so it surely did not commit. The store says so
    (nothing committed, so the write is retried) instead of calling it unknown; once the
    retries run out the call says the body ran and its outcome was not recorded."""
    caplog.set_level(logging.WARNING, logger=STORE_LOG)
    schema = schemas()
    with bouncer_behind_proxy(pg, query_wait_timeout=2) as (proxy, b):
        with ctrlrun.open_store(b.url(schema=schema)) as store:

            @ctrlrun.protect("pay", effect="pay:{order}", store=store)
            def pay(order: str) -> str:
                proxy.refuse_new()
                proxy.drop_all()  # the server is gone for the pooler while the body runs
                return order

            with pytest.raises(ctrlrun.StoreError) as info:
                pay("o1")
            assert "has already run" in str(info.value)
            assert "nothing was committed" in str(info.value)
    assert "commit_unknown" not in branches(caplog)
    retries = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert any("query_wait_timeout" in m for m in retries), retries
    with ctrlrun.open_store(pg.url(schema)) as direct:
        assert direct.get_effect("pay:o1").state is EffectState.EXECUTING  # not recorded


def test_a_search_path_another_client_left_cannot_swap_the_stores_functions(pg, schemas):
    """Another client leaves `search_path = evil, pg_catalog` on the shared server connection,
    with an `evil.sha256` that answers something else every time. The store names its functions
    with their schema, so the key's index stays the key's digest and the retry is refused."""
    b = PgBouncer(pg.host, pg.port, pg.user, pg.password, "transaction", pool_size=1)
    schema, evil = schemas(), schemas()
    runs = []
    try:
        pg.psql(
            f'CREATE SCHEMA "{evil}"; CREATE FUNCTION "{evil}".sha256(bytea) RETURNS bytea '
            f"LANGUAGE sql VOLATILE AS $$ SELECT decode(md5(random()::text), 'hex') $$"
        )
        ctrlrun.open_store(pg.url(schema)).close()
        _psql(pg, b.host, b.port, f'SET search_path = "{evil}", pg_catalog')
        assert _psql(pg, b.host, b.port, "SHOW search_path").startswith(evil)  # it leaked
        with ctrlrun.open_store(b.url(schema=schema)) as store:

            @ctrlrun.protect("pay", effect="pay:{order}", store=store)
            def pay(order: str) -> str:
                runs.append(order)
                return order

            pay("o1")
            with pytest.raises(DuplicateEffect):
                pay("o1")
        assert runs == ["o1"]
    finally:
        b.stop()
