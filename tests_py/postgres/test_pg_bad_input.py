"""PostgreSQL: errors that name the problem and leak no password; keys that round-trip."""

from __future__ import annotations

import pytest

import ctrlrun
from ctrlrun import EffectState, StoreError
from tests_py.support.stores import SCHEMA_VERSION
from throwaway.pgserver import free_port


def test_unreachable_server_is_a_store_error(pg):
    url = f"postgresql://{pg.user}:hunter2-secret@127.0.0.1:{free_port()}/{pg.db}"
    with pytest.raises(StoreError) as info:
        ctrlrun.open_store(url)
    msg = str(info.value)
    assert "cannot connect" in msg
    assert "hunter2-secret" not in msg


def test_wrong_password_is_a_store_error_that_leaks_nothing(pg):
    url = f"postgresql://{pg.user}:wrong-secret-123@{pg.host}:{pg.port}/{pg.db}"
    with pytest.raises(StoreError) as info:
        ctrlrun.open_store(url)
    msg = str(info.value)
    assert "password authentication failed" in msg
    assert "wrong-secret-123" not in msg
    assert "postgresql://postgres@" in msg  # names the server, without the password


def test_missing_database_is_a_store_error(pg):
    url = pg.url().rsplit("/", 1)[0] + "/no_such_db_ctrlrun"
    with pytest.raises(StoreError) as info:
        ctrlrun.open_store(url)
    assert 'database "no_such_db_ctrlrun" does not exist' in str(info.value)
    if pg.password:
        assert pg.password not in str(info.value)


@pytest.mark.parametrize("schema", ['a"b', "x;DROP TABLE y", "sp ace", "1abc", "", "x" * 64])
def test_schema_names_with_quotes_or_semicolons_are_refused(pg, schema):
    before = pg.schemas()
    with pytest.raises(StoreError) as info:
        ctrlrun.open_store(pg.url() + "?schema=" + schema)
    assert "schema name" in str(info.value)
    # Nothing was created: other workers make their own schemas meanwhile, so only the name
    # asked for, or a piece of it (what an injected statement or PostgreSQL's folding and
    # truncation would make), is looked for.
    created = pg.schemas() - before
    assert not {name for name in created if name in schema or name in schema.lower()}


def test_a_newer_schema_version_is_refused(pg, pg_schema):
    ctrlrun.open_store(pg.url(pg_schema)).close()
    pg.psql(f"UPDATE \"{pg_schema}\".ctrlrun_meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(StoreError) as info:
        ctrlrun.open_store(pg.url(pg_schema))
    assert "newer" in str(info.value) and "99" in str(info.value)


def test_tables_are_created_with_a_recorded_schema_version(pg, pg_schema):
    ctrlrun.open_store(pg.url(pg_schema)).close()
    assert pg.psql(f'SELECT value FROM "{pg_schema}".ctrlrun_meta') == str(
        SCHEMA_VERSION["postgres"]
    )
    ctrlrun.open_store(pg.url(pg_schema)).close()  # reopening is fine


@pytest.mark.parametrize(
    "key",
    [
        "refund:'; DROP TABLE ctrlrun_effects; --",
        'quote"double',
        "back\\slash\\x00\\n",
        "\x01\x02\x7f\u0080\u00ff binary-looking \ufffd",
        "émoji 🧾 ключ",
        "k" * 10_240,
        "".join(
            chr(0x21 + (i * 7919) % 0x5E) + chr(0x400 + (i * 104729) % 0x100) for i in range(5_120)
        ),  # ~15 KB that does not compress
    ],
)
def test_effect_keys_round_trip_exactly(store, second_store, key, backend):
    """On both backends: a PostgreSQL index entry cannot hold a long key, so the store indexes
    its digest and still compares the key byte for byte."""
    runs = []

    @ctrlrun.protect("k", effect="{value}", store=store)
    def act(value: str) -> str:
        runs.append(value)
        return value

    assert act(key) == key
    with pytest.raises(ctrlrun.DuplicateEffect):
        act(key)
    rec = second_store.get_effect(key)
    assert rec.effect_key == key
    assert rec.state is EffectState.COMMITTED
    assert rec.result == key
    assert [r.effect_key for r in second_store.list_effects()] == [key]
    assert runs == [key]


def test_a_key_with_nul_is_refused_on_postgres_before_any_write(pg, pg_schema):
    with ctrlrun.open_store(pg.url(pg_schema)) as s:
        with pytest.raises(ctrlrun.InvalidArgument, match="NUL"):
            s.reserve_effect("a\x00b", "act_" + "0" * 32, 60)
        assert s.list_effects() == []
        assert s.get_effect("a\x00b") is None  # no row can hold it: nothing to ask the server


def test_an_error_text_with_nul_is_invalid_on_postgres_not_a_retryable_failure(pg, pg_schema):
    """The server refuses NUL in text on every try: that is bad input, not a write that "may be
    retried" and fails the same way forever."""
    aid = "act_" + "6" * 32
    with ctrlrun.open_store(pg.url(pg_schema)) as s:
        s.reserve_effect("nul:1", aid, 60)
        before = s.begin_execution("nul:1", aid)
        for write in (
            lambda: s.fail_effect("nul:1", aid, "card\x00declined"),
            lambda: s.mark_ambiguous("nul:1", aid, "\x00"),
        ):
            with pytest.raises(ctrlrun.InvalidArgument, match="NUL"):
                write()
        assert s.get_effect("nul:1") == before
        assert s.fail_effect("nul:1", aid, "card declined").state is EffectState.FAILED


def test_url_errors_never_show_the_password():
    for url in [
        "postgresql+psycopg://app:s3cr3t-pw@db:5432/x",
        "sqlite:///x.db?bogus=1&password=s3cr3t-pw",
    ]:
        with pytest.raises(ctrlrun.InvalidArgument) as info:
            ctrlrun.open_store(url)
        assert "s3cr3t-pw" not in str(info.value)
        assert "***" in str(info.value)


def test_a_libpq_keyword_string_is_not_taken_for_a_sqlite_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ctrlrun.InvalidArgument, match="postgresql://"):
        ctrlrun.open_store("host=db user=app password=s3cr3t-pw dbname=prod")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value", ["0", "-1", "+5", " 5", "abc", "1001", "", "1.5", "9" * 30])
def test_a_pool_size_out_of_range_is_refused_before_anything_is_opened(pg, value):
    schema = pg.new_schema()  # its own name: other workers' tests make schemas meanwhile
    url = pg.url().replace("@", ":pool-secret-9@") if not pg.password else pg.url()
    with pytest.raises(ctrlrun.InvalidArgument) as info:
        ctrlrun.open_store(f"{url}?schema={schema}&pool_size={value}")
    msg = str(info.value)
    assert f'pool_size must be a whole number of connections from 1 to 1000, got "{value}"' in msg
    assert "pool-secret-9" not in msg and (not pg.password or pg.password not in msg)
    assert schema not in pg.schemas()


def test_pool_size_caps_the_connections_one_store_opens(pg, pg_schema):
    import threading

    app = "ctrlrun_pool_" + pg_schema
    store = ctrlrun.open_store(f"{pg.url(pg_schema)}&pool_size=2&application_name={app}")
    barrier = threading.Barrier(8)

    @ctrlrun.protect("pool", effect="pool:{n}", store=store)
    def work(n: str) -> str:
        return n

    def hammer(t: int) -> None:
        barrier.wait(timeout=30)
        for i in range(25):
            work(f"{t}-{i}")

    threads = [threading.Thread(target=hammer, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    try:
        assert len(store.list_effects()) == 200
        opened = int(
            pg.psql(f"SELECT count(*) FROM pg_stat_activity WHERE application_name = '{app}'")
        )
        assert 1 <= opened <= 2
    finally:
        store.close()
