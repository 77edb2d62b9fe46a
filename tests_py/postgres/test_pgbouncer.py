"""The PostgreSQL store behind a real PgBouncer (throwaway/pgbouncer.py), in transaction and
session mode, with the default store URL pointed at the pooler.

A transaction pooler hands each client transaction to whichever server connection is free, so
anything a client leaves on a server connection (a named prepared statement, a ``SET``) is met
by another client. The store must never run a statement it did not send itself in the same
exchange.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from datetime import timedelta

import pytest

import ctrlrun
from ctrlrun import DuplicateEffect, EffectState
from tests_py.support.racing import executions, run_workers
from throwaway.pgbouncer import PgBouncer, branches
from throwaway.pgproxy import PgProxy

STORE_LOG = "ctrlrun.store"
MODES = ["transaction", "session"]


@pytest.fixture(params=MODES)
def bouncer(request, pg):
    # Session mode ties a server connection to each client connection: the pool must hold them
    # all (processes x threads). Transaction mode shares three among every client.
    size = 3 if request.param == "transaction" else 40
    b = PgBouncer(pg.host, pg.port, pg.user, pg.password, request.param, pool_size=size)
    yield b
    b.stop()


def test_processes_on_two_schemas_through_the_pooler_run_each_key_once_in_its_own_schema(
    bouncer, schemas, pg, tmp_path
):
    keys = [f"k{i:03d}" for i in range(150)]
    before, x, y = schemas(), schemas(), schemas()
    for s in (before, x, y):
        ctrlrun.open_store(bouncer.url(schema=s)).close()

    # A process before them leaves whatever it leaves on the pooled server connections.
    marks = {s: tmp_path / s for s in (before, x, y)}
    for m in marks.values():
        m.mkdir()
    first = run_workers(
        [
            {
                "url": bouncer.url(schema=before),
                "marks": str(marks[before]),
                "keys": keys[:60],
                "threads": 4,
            }
        ],
        tmp_path,
    )
    assert first[0]["other"] == [] and sorted(first[0]["ran"]) == keys[:60]

    configs = [
        {"url": bouncer.url(schema=s), "marks": str(marks[s]), "keys": keys, "threads": 4, "tag": s}
        for s in (x, y, x, y)
    ]
    reports = run_workers(configs, tmp_path)

    assert [r["other"] for r in reports] == [[]] * 4  # no errors at all
    for s in (x, y):
        mine = [r for r, c in zip(reports, configs) if c["tag"] == s]
        assert executions(marks[s]) == Counter({k: 1 for k in keys}), s
        assert sorted(k for r in mine for k in r["ran"]) == keys
        with ctrlrun.open_store(pg.url(s)) as direct:  # what the schema really holds
            rows = direct.list_effects()
        assert sorted(r.effect_key for r in rows) == keys
        assert {r.state for r in rows} == {EffectState.COMMITTED}
        assert {r.result for r in rows} <= {r["pid"] for r in mine}  # written by its own side
    with ctrlrun.open_store(pg.url(before)) as direct:
        assert sorted(r.effect_key for r in direct.list_effects()) == keys[:60]


def test_the_store_sends_only_unnamed_statements_and_no_session_settings(pg, schemas, caplog):
    """What a pooler would relay, from open to close: every Parse is unnamed (sent with its
    Bind/Execute/Sync in one exchange), and the only simple queries are transaction control,
    with `SET LOCAL` alone, and the tables' DDL at open. The writes that commit by themselves
    set nothing either: `ctrlrun_durable()` sets `synchronous_commit` for their own
    transaction only (the next test shows that their commits are durable)."""
    caplog.set_level(logging.WARNING, logger=STORE_LOG)
    proxy = PgProxy(pg.host, pg.port)
    schema = schemas()
    try:
        store = ctrlrun.open_store(pg.url(schema, host=proxy.host, port=proxy.port))

        @ctrlrun.protect("pay", effect="pay:{order}", store=store)
        def pay(order: str) -> str:
            return order

        lost = proxy.arm(
            "drop_after", b"ctrlrun_reserve($1"
        )  # the re-read runs on a new connection
        pay("o1")
        assert lost.fired == 1 and "reread_identical_landed" in branches(caplog)
        with pytest.raises(DuplicateEffect):
            pay("o1")
        act = "act_" + "2" * 32
        store.reserve_effect("pay:o2", act, 60)
        store.begin_execution("pay:o2", act)
        store.extend_lease("pay:o2", act, timedelta(seconds=120))
        store.mark_ambiguous("pay:o2", act, "timed out")
        store.resolve_effect("pay:o2", "failed", "ops:test")
        store.get_effect("pay:o1")
        store.list_effects()
        store.close()
        assert len(proxy.parsed) > 10, "the proxy saw the store's statements"
        assert {name for name, _ in proxy.parsed} == {b""}
        begin = f'START TRANSACTION; SELECT "{schema}".ctrlrun_durable()'.encode()
        ddl = [q for q in proxy.simple if q.lstrip().startswith(b"CREATE SCHEMA IF NOT EXISTS")]
        # the new tables are brought to the current schema version in one transaction
        # the schema's functions, which set nothing themselves
        hot = [
            q
            for q in proxy.simple
            if q.lstrip().startswith(b"CREATE OR REPLACE FUNCTION")
            and b".ctrlrun_select(text, int8)" in q
        ]
        durable = [
            q
            for q in proxy.simple
            if q.lstrip().startswith(b"CREATE OR REPLACE FUNCTION")
            and b".ctrlrun_durable()" in q
            and q not in hot
        ]
        migration = [
            q
            for q in proxy.simple
            if q.lstrip().startswith(b"ALTER TABLE")
            or q.lstrip().startswith(b"CREATE INDEX IF NOT EXISTS ctrlrun_effects_")
            or q.lstrip().startswith(b"CREATE INDEX IF NOT EXISTS ctrlrun_approvals_")
            or b"ctrlrun_meta SET value" in q
            or (q.lstrip().startswith(b"CREATE TABLE IF NOT EXISTS") and b"ctrlrun_policy" in q)
        ]
        rest = [q for q in proxy.simple if q not in ddl and q not in migration + durable + hot]
        assert len(ddl) == 1 and b"SET " not in ddl[0].upper()
        assert len(migration) == 9 and not any(
            b"SET LOCAL" in q.upper() or b"SET SESSION" in q.upper() for q in migration
        )
        # the one SET LOCAL outside a BEGIN is inside the function's body
        assert len(durable) == 1 and durable[0].upper().count(b"SET ") == 3  # search_path x2
        # every function of the schema (schema version 9's duties: tests_py/roles, and version
        # 10's ctrlrun_durable), each with its search_path pinned; the only SET LOCALs are
        # ctrlrun_durable's own, for the calling transaction (docs/postgres.md), and the same
        # steps written out in the three hot writes and group commit's two (schema version 12)
        assert len(hot) == 1 and hot[0].count(b"SET search_path = pg_catalog, pg_temp") == 15
        body = hot[0].split(b"ctrlrun_durable()", 1)[1].split(b"$fn$;", 1)[0]
        assert body.upper().count(b"SET LOCAL") == 3
        assert hot[0].upper().count(b"SET LOCAL") == 6 * 3
        assert b"SET SESSION" not in hot[0].upper()
        migrating = b"START TRANSACTION; SET LOCAL synchronous_commit = on"  # durable DDL
        assert set(rest) == {begin, migrating, b"COMMIT"}, rest
    finally:
        proxy.close()


@pytest.mark.parametrize(
    "action,branch",
    [("drop_after", "reread_identical_landed"), ("drop_before", "reread_none_retry_insert")],
)
@pytest.mark.parametrize("pool_mode", MODES)
def test_a_server_connection_cut_at_commit_behind_the_pooler_runs_once(
    pg, schemas, caplog, pool_mode, action, branch
):
    """PgBouncer -> TCP proxy -> PostgreSQL: the proxy cuts the pooler's server connection at
    the reservation's COMMIT (after the server committed it, or before)."""
    caplog.set_level(logging.WARNING, logger=STORE_LOG)
    proxy = PgProxy(pg.host, pg.port)
    b = PgBouncer(proxy.host, proxy.port, pg.user, pg.password, pool_mode, pool_size=5)
    schema = schemas()
    runs = []
    try:
        with ctrlrun.open_store(b.url(schema=schema)) as store:

            @ctrlrun.protect("pay", effect="pay:{order}", store=store)
            def pay(order: str) -> str:
                runs.append(order)
                return "paid"

            rule = proxy.arm(action, b"ctrlrun_reserve($1")
            assert pay("o1") == "paid"
            assert rule.fired == 1
            with pytest.raises(DuplicateEffect):
                pay("o1")
        assert runs == ["o1"]
        assert branch in branches(caplog)
        with ctrlrun.open_store(pg.url(schema)) as direct:
            rec = direct.get_effect("pay:o1")
        assert rec.state is EffectState.COMMITTED and rec.attempt == 1
    finally:
        b.stop()
        proxy.close()


def test_a_server_connection_cut_before_the_reservation_is_settled_by_the_reread(
    pg, schemas, caplog
):
    proxy = PgProxy(pg.host, pg.port)
    b = PgBouncer(proxy.host, proxy.port, pg.user, pg.password, "transaction", pool_size=3)
    schema = schemas()
    runs = []
    try:
        with ctrlrun.open_store(b.url(schema=schema)) as store:

            @ctrlrun.protect("pay", effect="pay:{order}", store=store)
            def pay(order: str) -> str:
                runs.append(order)
                return "paid"

            # the reservation commits by itself, so a connection cut as it is sent leaves it
            # unknown: the re-read finds no row, and the insert is tried again
            caplog.set_level(logging.WARNING, logger=STORE_LOG)
            rule = proxy.arm("drop_before", b"ctrlrun_reserve($1", on="statement")
            assert pay("o1") == "paid"
            assert rule.fired == 1 and "reread_none_retry_insert" in branches(caplog)
            with pytest.raises(DuplicateEffect):
                pay("o1")
        assert runs == ["o1"]
    finally:
        b.stop()
        proxy.close()


@pytest.mark.parametrize("pool_mode", MODES)
def test_the_pooler_restarted_between_calls_and_during_one_costs_no_call(
    pg, schemas, pool_mode, caplog
):
    caplog.set_level(logging.WARNING, logger=STORE_LOG)
    b = PgBouncer(pg.host, pg.port, pg.user, pg.password, pool_mode, pool_size=20)
    schema = schemas()
    runs = []
    try:
        with ctrlrun.open_store(b.url(schema=schema)) as store:

            @ctrlrun.protect("pay", effect="pay:{order}", store=store)
            def pay(order: str, restart: bool = False) -> str:
                runs.append(order)
                if restart:  # while the executor runs: the outcome write meets a new pooler
                    b.restart()
                return "paid"

            assert pay("o1") == "paid"
            b.restart()
            assert pay("o2") == "paid"  # the pooled connections died with the old pooler
            assert pay("o3", restart=True) == "paid"
            for order in ("o1", "o2", "o3"):
                with pytest.raises(DuplicateEffect):
                    pay(order)
        assert runs == ["o1", "o2", "o3"]
        assert "stale_connection_dropped" in branches(caplog)
        with ctrlrun.open_store(pg.url(schema)) as direct:
            assert {r.state for r in direct.list_effects()} == {EffectState.COMMITTED}
    finally:
        b.stop()


def test_a_new_schema_is_created_through_a_transaction_pooler_which_the_posture_names(pg, schemas):
    b = PgBouncer(pg.host, pg.port, pg.user, pg.password, "transaction", pool_size=2)
    schema = f"t_{uuid.uuid4().hex[:16]}"
    try:
        with ctrlrun.open_store(b.url(schema=schema)) as store:
            store.reserve_effect("k", "act_" + "1" * 32, 60)
            pooler = dict(
                (check, (standing, detail)) for check, standing, detail in store.posture()
            )
        assert schema in pg.schemas()
        # the posture names the pooler in front (ctrlrun verify prints it)
        standing, detail = pooler["pooler"]
        assert standing == "info" and "pooler" in detail and "none seen" not in detail
    finally:
        pg.drop_schema(schema)
        b.stop()


def test_statement_mode_runs_one_statement_writes_and_refuses_transactions(pg, schemas):
    """A pooler that allows no transaction: the store cannot create its tables through it (at
    open). A protected call's writes each commit by themselves, so a call runs once and its
    duplicate is refused; a write that needs a transaction (a lease extension) fails closed
    and changes nothing."""
    b = PgBouncer(pg.host, pg.port, pg.user, pg.password, "statement", pool_size=3)
    fresh, made = schemas(), schemas()
    runs = []
    try:
        ctrlrun.open_store(pg.url(made)).close()  # tables made directly, not through the pooler
        with pytest.raises(ctrlrun.StoreError, match="cannot set up the tables"):
            ctrlrun.open_store(b.url(schema=fresh))
        with ctrlrun.open_store(b.url(schema=made)) as store:

            @ctrlrun.protect("pay", effect="pay:{order}", store=store)
            def pay(order: str) -> str:
                runs.append(order)
                return "paid"

            assert pay("o1") == "paid"
            with pytest.raises(DuplicateEffect):
                pay("o1")
            act = "act_" + "3" * 32
            held = store.reserve_effect("pay:o2", act, 60)
            with pytest.raises(
                ctrlrun.StoreWriteFailed, match="not allowed in statement pooling mode"
            ):
                store.extend_lease("pay:o2", act, timedelta(seconds=600))
        assert runs == ["o1"]
        with ctrlrun.open_store(pg.url(made)) as direct:
            assert direct.get_effect("pay:o1").state is EffectState.COMMITTED
            assert direct.get_effect("pay:o2") == held.record  # the extension changed nothing
    finally:
        b.stop()
