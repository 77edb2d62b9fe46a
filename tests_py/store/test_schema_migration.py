"""A store written by an older ctrlrun (schema version 1, before the per-attempt token, the
holder, the argument digests and approvals) is brought to the current version when opened, on
both backends: its rows stay readable and keep their meaning, new reservations carry the new
columns, and processes opening it at once migrate it once.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

import ctrlrun
from ctrlrun import DuplicateEffect, EffectState
from tests_py.support.stores import SCHEMA_VERSION as CURRENT
from tests_py.support.stores import sqlite_url

NEW_COLUMNS = [
    "attempt_token",
    "action",
    "holder",
    "args_digest",
    "arg_digests",
    "approval_id",
    "last_event",
    "written_by",
    "receipt_seq",
    "receipt_prev",
    "receipt_hash",
]
# PostgreSQL's 12: the receipt sequence number the hot write's statement appended itself
NEW_COLUMNS_OF = {"sqlite": NEW_COLUMNS, "postgres": [*NEW_COLUMNS, "receipt_kept"]}
T0 = 1_700_000_000_000_000  # microseconds (2023)
V1_COLUMNS = (
    "effect_key, state, action_id, attempt, created_at, updated_at, "
    "lease_expires_at, result, error, resolved_by"
)
V1_ROWS = [  # a settled effect and a held one whose lease lapsed long ago
    (
        "refund:done",
        "committed",
        "act_" + "1" * 32,
        1,
        T0,
        T0 + 5,
        None,
        '{"ok": true}',
        None,
        None,
    ),
    ("refund:held", "executing", "act_" + "2" * 32, 1, T0, T0, T0 + 60_000_000, None, None, None),
]


def _values(row) -> str:
    return ", ".join(
        "NULL" if v is None else (f"'{v}'" if isinstance(v, str) else str(v)) for v in row
    )


def make_v1_sqlite(path) -> str:
    db = sqlite3.connect(path)
    db.executescript(
        textwrap.dedent("""
        PRAGMA journal_mode = WAL;
        CREATE TABLE ctrlrun_effects (
            effect_key TEXT NOT NULL PRIMARY KEY,
            state TEXT NOT NULL CHECK (state IN
                ('reserved', 'executing', 'committed', 'failed', 'ambiguous')),
            action_id TEXT NOT NULL, attempt INTEGER NOT NULL CHECK (attempt >= 1),
            created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,
            lease_expires_at INTEGER, result TEXT, error TEXT, resolved_by TEXT
        ) WITHOUT ROWID;
        PRAGMA user_version = 1;
    """)
    )
    for row in V1_ROWS:
        db.execute(f"INSERT INTO ctrlrun_effects ({V1_COLUMNS}) VALUES ({_values(row)})")
    db.commit()
    db.close()
    return sqlite_url(path)


def make_v1_postgres(pg, schema) -> str:
    t = f'"{schema}".ctrlrun_effects'
    rows = "; ".join(
        f"INSERT INTO {t} (key_digest, {V1_COLUMNS}) VALUES "
        f"(sha256(convert_to('{row[0]}', 'UTF8')), {_values(row)})"
        for row in V1_ROWS
    )
    pg.psql(
        textwrap.dedent(f"""
        CREATE SCHEMA "{schema}";
        CREATE TABLE {t} (
            key_digest bytea NOT NULL PRIMARY KEY, effect_key text NOT NULL,
            state text NOT NULL CHECK (state IN
                ('reserved', 'executing', 'committed', 'failed', 'ambiguous')),
            action_id text NOT NULL, attempt bigint NOT NULL CHECK (attempt >= 1),
            created_at bigint NOT NULL, updated_at bigint NOT NULL,
            lease_expires_at bigint, result text, error text, resolved_by text);
        CREATE TABLE "{schema}".ctrlrun_meta (key text NOT NULL PRIMARY KEY,
                                              value text NOT NULL);
        INSERT INTO "{schema}".ctrlrun_meta VALUES ('schema_version', '1');
        {rows};
    """)
    )
    return pg.url(schema)


@pytest.fixture
def v1_store(backend, tmp_path, request):
    """A version-1 store with ``V1_ROWS``; yields its URL and a reader of its version."""
    if backend == "sqlite":
        path = tmp_path / "state.db"
        url = make_v1_sqlite(path)

        def version():
            return sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0]

        def columns():
            return [
                r[1] for r in sqlite3.connect(path).execute("PRAGMA table_info(ctrlrun_effects)")
            ]
    else:
        pg = request.getfixturevalue("pg")
        schema = request.getfixturevalue("pg_schema")
        url = make_v1_postgres(pg, schema)

        def version():
            return int(
                pg.psql(f"SELECT value FROM \"{schema}\".ctrlrun_meta WHERE key = 'schema_version'")
            )

        def columns():
            return pg.psql(
                "SELECT column_name FROM information_schema.columns WHERE "
                f"table_schema = '{schema}' AND table_name = 'ctrlrun_effects' "
                "ORDER BY ordinal_position"
            ).split()

    return url, version, columns


def test_a_version_1_store_is_migrated_and_its_rows_keep_their_meaning(v1_store, backend):
    url, version, columns = v1_store
    assert version() == 1
    store = ctrlrun.open_store(url)
    try:
        assert version() == CURRENT[backend]
        assert columns()[-len(NEW_COLUMNS_OF[backend]) :] == NEW_COLUMNS_OF[backend]
        done = store.get_effect("refund:done")
        assert done.state is EffectState.COMMITTED and done.result == {"ok": True}
        with pytest.raises(DuplicateEffect) as info:
            store.reserve_effect("refund:done", "act_" + "3" * 32, 60)
        assert info.value.state == "committed"
        # the old held row lapsed long ago: the next caller finds it ambiguous, as before
        with pytest.raises(ctrlrun.AmbiguousEffect):
            store.reserve_effect("refund:held", "act_" + "3" * 32, 60)
        # a new key runs the whole protocol on the migrated table
        grant = store.reserve_effect("refund:new", "act_" + "4" * 32, 60)
        store.begin_execution("refund:new", grant.action_id, attempt=1)
        assert store.commit_effect("refund:new", grant.action_id, 7, attempt=1).result == 7
        assert done.holder is None and grant.record.holder.endswith(f":{os.getpid()}")
        assert store.list_approvals() == []
        # the accounts table and who asks (version 6 on SQLite, 8 on PostgreSQL)
        assert store.add_approver("alice", "scrypt$x").name == "alice"
        assert [a.name for a in store.list_approvers()] == ["alice"]
        # rows written before receipts have none; the new key's writes start its chain
        assert store.list_receipts("refund:done") == []
        assert [r.kind for r in store.list_receipts("refund:new")] == [
            "reservation",
            "begin",
            "outcome",
        ]
        assert store.verify_receipts().ok
    finally:
        store.close()
    # opening it again changes nothing
    again = ctrlrun.open_store(url)
    assert version() == CURRENT[backend] and again.get_effect("refund:new").result == 7
    again.close()


OPENER = textwrap.dedent("""
    import sys, time
    import ctrlrun
    url, start, n = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    time.sleep(max(0.0, start - time.time()))
    store = ctrlrun.open_store(url)
    store.reserve_effect("race:" + n, "act_" + n.rjust(32, "0"), 60)
    print("ok")
""")


def test_processes_opening_a_version_1_store_at_once_migrate_it_once(v1_store, tmp_path, backend):
    url, version, columns = v1_store
    start = time.time() + 1.5
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPENER, url, repr(start), str(i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=str(tmp_path),
        )
        for i in range(6)
    ]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0 and out.strip() == "ok", err[-2000:]
    assert version() == CURRENT[backend]
    assert columns()[-len(NEW_COLUMNS_OF[backend]) :] == NEW_COLUMNS_OF[backend]
    store = ctrlrun.open_store(url)
    try:
        assert sorted(
            r.effect_key for r in store.list_effects() if r.effect_key.startswith("race:")
        ) == [f"race:{i}" for i in range(6)]
    finally:
        store.close()
