"""`prepared_statements=on`: a direct connection sends the hot calls (the read, the reservation,
the outcome) as named statements, each prepared once per connection; everything else, and every
statement without the option, stays unnamed. The option is for direct connections only; the
last test shows the common way it fails behind a transaction pooler (the server does not know
the name): nothing runs, and the error names it.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

import ctrlrun
from ctrlrun import DuplicateEffect, EffectState, NotExecuted, StoreWriteFailed
from tests_py.support.racing import executions, run_workers
from throwaway.pgbouncer import PgBouncer, pgbouncer_version
from throwaway.pgproxy import PgProxy

HOT = (b".ctrlrun_reserve($1", b".ctrlrun_transition($1", b".ctrlrun_select($1")


def prepared(url: str) -> str:
    return f"{url}&prepared_statements=on"


def test_the_hot_calls_are_prepared_once_per_connection_and_behave_as_unnamed_ones(pg, schemas):
    proxy = PgProxy(pg.host, pg.port)
    schema = schemas()
    runs: Counter = Counter()
    try:
        store = ctrlrun.open_store(
            prepared(pg.url(schema, host=proxy.host, port=proxy.port)) + "&pool_size=1"
        )

        @ctrlrun.protect("pay", effect="pay:{order}", store=store)
        def pay(order: str, fail: bool = False) -> str:
            runs[order] += 1
            if fail:
                raise NotExecuted("declined before anything was sent")
            return f"paid {order}"

        for i in range(10):
            assert pay(f"o{i}") == f"paid o{i}"
        with pytest.raises(DuplicateEffect):
            pay("o3")
        with pytest.raises(NotExecuted):
            pay("f", fail=True)
        assert pay("f") == "paid f"  # a failed attempt may run again
        assert store.get_effect("pay:o3").state is EffectState.COMMITTED
        assert store.get_effect("pay:f").attempt == 2

        @ctrlrun.protect("pay", effect="pay:{order}", store=store)
        async def apay(order: str) -> str:
            runs[order] += 1
            return f"paid {order}"

        async def awaited() -> None:
            assert await apay("a1") == "paid a1"
            with pytest.raises(DuplicateEffect):
                await apay("a1")
            with pytest.raises(DuplicateEffect):
                await apay("o1")

        asyncio.run(awaited())
        store.close()
    finally:
        proxy.close()
    assert runs == Counter({**{f"o{i}": 1 for i in range(10)}, "f": 2, "a1": 1})
    named = [(name, sql) for name, sql in proxy.parsed if name]
    # one connection in the pool: the reservation, the outcome and the read (the failed
    # attempt's retry reads its row in a transaction), each prepared once
    assert sorted(next(h for h in HOT if h in sql) for _, sql in named) == sorted(HOT)
    assert len({name for name, _ in named}) == 3
    unnamed_hot = [sql for name, sql in proxy.parsed if not name and any(h in sql for h in HOT)]
    assert unnamed_hot == []


def test_without_the_option_every_statement_goes_out_unnamed(pg, schemas):
    proxy = PgProxy(pg.host, pg.port)
    try:
        store = ctrlrun.open_store(pg.url(schemas(), host=proxy.host, port=proxy.port))

        @ctrlrun.protect("pay", effect="pay:{order}", store=store)
        def pay(order: str) -> str:
            return order

        for i in range(5):
            pay(f"o{i}")
        store.close()
    finally:
        proxy.close()
    reserves = [name for name, sql in proxy.parsed if HOT[0] in sql]
    assert reserves == [b""] * 5  # parsed again, unnamed, on every call


def test_processes_contending_with_prepared_statements_run_each_key_once(pg, schemas, tmp_path):
    schema = schemas()
    url = prepared(pg.url(schema))
    ctrlrun.open_store(url).close()
    keys = [f"k{i:03d}" for i in range(120)]
    marks = tmp_path / "marks"
    marks.mkdir()
    reports = run_workers(
        [{"url": url, "marks": str(marks), "keys": keys, "threads": 4} for _ in range(4)], tmp_path
    )
    assert [r["other"] for r in reports] == [[]] * 4
    assert executions(marks) == Counter({k: 1 for k in keys})
    assert sorted(k for r in reports for k in r["ran"]) == keys
    with ctrlrun.open_store(pg.url(schema)) as direct:
        assert {r.state for r in direct.list_effects()} == {EffectState.COMMITTED}


def test_behind_a_pooler_that_drops_named_statements_the_option_fails_closed(pg, schemas):
    """PgBouncer in transaction mode, resetting each server connection after every transaction
    (`DISCARD ALL`): a statement prepared in one exchange is gone in the next. The call is
    refused before its body runs, with an error that names the option; the key stays free, and
    the same pooler without the option runs the call once."""
    bouncer = PgBouncer(
        pg.host,
        pg.port,
        pg.user,
        pg.password,
        "transaction",
        settings="server_reset_query = DISCARD ALL\nserver_reset_query_always = 1\n"
        # from 1.21 PgBouncer can keep a client's named statements itself (on by default from
        # 1.24): off here, as in the poolers that cannot
        + ("max_prepared_statements = 0\n" if pgbouncer_version() >= (1, 21) else ""),
    )
    schema = schemas()
    runs: Counter = Counter()
    try:
        for url in (prepared(bouncer.url(schema=schema)), bouncer.url(schema=schema)):
            store = ctrlrun.open_store(url)

            @ctrlrun.protect("pay", effect="pay:{order}", store=store)
            def pay(order: str) -> str:
                runs[order] += 1
                return order

            if "prepared_statements=on" in url:
                with pytest.raises(StoreWriteFailed) as refused:
                    pay("o1")
                assert "prepared_statements=on" in str(refused.value)
                assert "transaction pooler" in str(refused.value)
                assert not pg.password or pg.password not in str(refused.value)
                assert runs == Counter()
                with ctrlrun.open_store(pg.url(schema)) as direct:
                    assert direct.get_effect("pay:o1") is None  # nothing was written
            else:
                assert pay("o1") == "o1"
            store.close()
    finally:
        bouncer.stop()
    assert runs == Counter({"o1": 1})
    with ctrlrun.open_store(pg.url(schema)) as direct:
        assert direct.get_effect("pay:o1").state is EffectState.COMMITTED


def test_a_statement_that_failed_is_prepared_again_and_the_call_then_runs_once(pg, schemas):
    """The reservation's function renamed away between two calls: the prepared reservation
    fails on the server (nothing ran, the call is refused before its body), and once the name
    is back the next call prepares the statement again rather than reusing the one that
    failed."""
    proxy = PgProxy(pg.host, pg.port)
    schema = schemas()
    runs: Counter = Counter()
    reserve = (
        f'"{schema}".ctrlrun_reserve('
        + ", ".join(["text"] * 3 + ["int8"] * 3 + ["text"] * 11)
        + ")"
    )
    try:
        store = ctrlrun.open_store(
            prepared(pg.url(schema, host=proxy.host, port=proxy.port)) + "&pool_size=1"
        )

        @ctrlrun.protect("pay", effect="pay:{order}", store=store)
        def pay(order: str) -> str:
            runs[order] += 1
            return order

        assert pay("o1") == "o1"
        pg.psql(f"ALTER FUNCTION {reserve} RENAME TO ctrlrun_reserve_away")
        with pytest.raises(StoreWriteFailed):
            pay("o2")
        pg.psql(
            f'ALTER FUNCTION "{schema}".ctrlrun_reserve_away{reserve[reserve.index("(") :]} RENAME TO ctrlrun_reserve'
        )
        assert pay("o2") == "o2"
        store.close()
    finally:
        proxy.close()
    assert runs == Counter({"o1": 1, "o2": 1})
    prepares = [name for name, sql in proxy.parsed if name and HOT[0] in sql]
    assert len(prepares) == 2 and len(set(prepares)) == 2  # prepared again, under a new name
