"""The engine floors: what the database itself costs for the work ctrlrun does, with no ctrlrun.

Runs under bench/.floor-venv/bin/python (stdlib ``sqlite3``; ``psycopg`` 3 for PostgreSQL).

Variants of one protected call on a fresh key:

* ``min``  — the least any at-most-once engine must write: the reservation (BEGIN; INSERT … ON
  CONFLICT DO NOTHING; COMMIT) and the outcome (BEGIN; UPDATE; COMMIT): two durable commits.
* ``autocommit`` — the same two writes as ``min``, each one autocommit statement (no BEGIN or
  COMMIT: the statement commits by itself, just as durably): PostgreSQL only, the smallest
  correct protocol there (two round trips, two commits).
* ``same`` — ctrlrun's own schema and statements, as src/store/sqlite/ and
  src/store/postgres/ issue them for ``protect``: the reservation straight into ``executing``
  (SQLite: SELECT + INSERT; PostgreSQL: the one-statement CTE on the ``key_digest`` primary
  key), then the ``commit`` transition, an ``UPDATE`` (SQLite: then a ``SELECT`` of the row
  written; PostgreSQL: ``RETURNING``), each in its own transaction: two durable commits.
  Keep these in step with src/store/*.rs. (They predate receipts: ``receipts`` adds them.)
* ``receipts`` — ``min`` plus what the issues require ctrlrun to write besides: each write's
  receipt, chained per key, in the write's own transaction, and the indexes behind listing,
  retention and ``receipts KEY`` (see _floor_receipts.py): still two durable commits.

``read``: one SELECT by primary key per call (the duplicate path's floor).

With ``async`` set, ``min`` and ``receipts`` on SQLite and ``autocommit`` and ``receipts`` on
PostgreSQL are awaited on an asyncio loop instead (``_floor_async.py``).

Modes: sqlite_info, sqlite_latency, sqlite_read, sqlite_contend, pg_info, pg_latency, pg_read,
pg_contend, pg_stats, pg_drop.
"""

from __future__ import annotations

import sys

import _common
import _floor_async
import _floor_receipts
from _floor_sqlite import (
    COLUMNS,
    LEASE_US,
    SQ_SELECT,
    action_id,
    executor,
    now_us,
    sqlite_call,
    sqlite_open,
    sqlite_steps,
    sqlite_txn,
)

# -- PostgreSQL -----------------------------------------------------------------------------


def pg_schema_sql(schema: str, variant: str) -> str:
    """``min`` and ``autocommit``: the effect key is the primary key. ``same``: ctrlrun's table,
    whose primary key is the SHA-256 of the key (src/store/postgres/schema.rs, init_schema)."""
    key = (
        "effect_key       text   NOT NULL PRIMARY KEY,"
        if variant in ("min", "autocommit")
        else "key_digest       bytea  NOT NULL PRIMARY KEY,\n    effect_key       text   NOT NULL,"
    )
    return f"""
CREATE SCHEMA IF NOT EXISTS "{schema}";
CREATE TABLE IF NOT EXISTS "{schema}".ctrlrun_effects (
    {key}
    state            text   NOT NULL CHECK (state IN
        ('reserved', 'executing', 'committed', 'failed', 'ambiguous')),
    action_id        text   NOT NULL,
    attempt          bigint NOT NULL CHECK (attempt >= 1),
    created_at       bigint NOT NULL,
    updated_at       bigint NOT NULL,
    lease_expires_at bigint,
    result           text,
    error            text,
    resolved_by      text);
"""


class PgSql:
    def __init__(self, schema: str) -> None:
        t = f'"{schema}".ctrlrun_effects'
        now = "COALESCE(%(now)s::int8, (extract(epoch FROM clock_timestamp()) * 1000000)::int8)"
        self.insert_min = (
            f"INSERT INTO {t} (effect_key, state, action_id, attempt, created_at, updated_at, "
            f"lease_expires_at) VALUES (%(key)s, 'reserved', %(aid)s, 1, %(now)s, %(now)s, "
            f"%(until)s) ON CONFLICT (effect_key) DO NOTHING RETURNING {COLUMNS}"
        )
        self.outcome_min = (
            f"UPDATE {t} SET state = 'committed', updated_at = %(now)s, lease_expires_at = NULL, "
            f"result = %(result)s WHERE effect_key = %(key)s AND action_id = %(aid)s "
            f"AND attempt = 1 AND state = 'reserved'"
        )
        # ctrlrun's statements (src/store/postgres/sql.rs: Sql::select, Sql::insert,
        # Sql::transition), on its table keyed by the key's digest: the plain read that gives
        # the server's clock, then the planner's row inserted as it is.
        d = "sha256(convert_to(%(key)s::text, 'UTF8'))"
        e_cols = ", ".join(f"e.{c.strip()}" for c in COLUMNS.split(","))
        self.read = (
            f"SELECT {e_cols}, clock.n FROM (SELECT {now} AS n) clock "
            f"LEFT JOIN {t} e ON e.key_digest = {d} AND e.effect_key = %(key)s"
        )
        self.insert = (
            f"INSERT INTO {t} (key_digest, {COLUMNS}) VALUES ({d}, %(key)s, 'executing', "
            f"%(aid)s, 1, %(n)s, %(n)s, %(until)s, NULL, NULL, NULL) "
            f"ON CONFLICT (key_digest) DO NOTHING RETURNING {COLUMNS}"
        )
        self.transition = (
            f"UPDATE {t} SET state = %(target)s, updated_at = {now}, "
            f"lease_expires_at = CASE WHEN %(keeps)s THEN lease_expires_at ELSE NULL END, "
            f"result = %(result)s, error = %(error)s "
            f"WHERE key_digest = {d} AND effect_key = %(key)s AND action_id = %(aid)s "
            f"AND (%(attempt)s::int8 IS NULL OR attempt = %(attempt)s) "
            f"AND state = ANY(%(from)s::text[]) RETURNING {COLUMNS}"
        )
        self.select = f"SELECT {COLUMNS} FROM {t} WHERE effect_key = %(key)s"
        self.receipts = _floor_receipts.PgReceipts(schema)


class PgConns:
    """The connection every write uses (all durable, as in ctrlrun)."""

    def __init__(self, cfg: dict, create: bool) -> None:
        import psycopg

        # Through a transaction pooler a statement prepared on one server connection is not
        # there on the next: the floor then sends every statement unnamed (no prepare), as
        # ctrlrun does everywhere.
        unprepared = {} if PREPARE else {"prepare_threshold": None}
        self.durable = psycopg.connect(cfg["pg_url"], autocommit=True, **unprepared)
        if create:
            variant = cfg.get("variant", "min")
            self.durable.execute(
                _floor_receipts.pg_schema_sql(cfg["schema"])
                if variant == "receipts"
                else pg_schema_sql(cfg["schema"], variant)
            )
        # ctrlrun keeps every PostgreSQL write durable (the server can crash while the client
        # lives on), so the "same statements" variant uses the one durable connection too.

    def execute(self, *args, **kwargs):
        return self.durable.execute(*args, **kwargs)

    def close(self) -> None:
        self.durable.close()


PREPARE = True  # cfg "prepare": false for the floor through a transaction pooler


def pg_open(cfg: dict, create: bool = True):
    return PgConns(cfg, create), PgSql(cfg.get("schema", "public"))


def pg_txn(conn, body):
    conn.execute("BEGIN")
    try:
        value = body(conn)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return value


def first_row(cur):
    """The statement's first row, or None (also for a statement that returns no rows)."""
    return cur.fetchone() if cur.description is not None else None


def pg_steps(sql: PgSql, variant: str, key: str, marks=None):
    """A call of ``autocommit`` or ``receipts`` as a generator of autocommit statements
    ``(sql, params)`` (``_floor_receipts.drive``)."""
    aid = action_id()
    if variant == "receipts":
        return _floor_receipts.pg_steps(sql.receipts, key, aid, lambda: executor(marks, key))
    assert variant == "autocommit", variant

    def steps():
        now = now_us()
        row = yield sql.insert_min, {"key": key, "aid": aid, "now": now, "until": now + LEASE_US}
        if row is None:
            return False
        result = executor(marks, key)
        yield sql.outcome_min, {"now": now_us(), "result": str(result), "key": key, "aid": aid}
        return True

    return steps()


def pg_call(conns: PgConns, sql: PgSql, variant: str, key: str, marks=None) -> bool:
    conn = conns.durable
    if variant in ("autocommit", "receipts"):
        return _floor_receipts.drive(
            pg_steps(sql, variant, key, marks),
            lambda st: first_row(conn.execute(st[0], st[1], prepare=PREPARE)),
        )
    aid = action_id()
    if variant == "min":
        now = now_us()
        row = pg_txn(
            conn,
            lambda c: c.execute(
                sql.insert_min,
                {"key": key, "aid": aid, "now": now, "until": now + LEASE_US},
                prepare=PREPARE,
            ).fetchone(),
        )
        if row is None:
            return False
        result = executor(marks, key)
        pg_txn(
            conn,
            lambda c: c.execute(
                sql.outcome_min,
                {"now": now_us(), "result": str(result), "key": key, "aid": aid},
                prepare=PREPARE,
            ),
        )
        return True

    found = conn.execute(sql.read, {"key": key, "now": None}, prepare=PREPARE).fetchone()
    if found[0] is not None:
        return False
    n = found[-1]
    row = pg_txn(
        conn,
        lambda c: c.execute(
            sql.insert, {"key": key, "aid": aid, "n": n, "until": n + LEASE_US}, prepare=PREPARE
        ).fetchone(),
    )
    if row is None:
        return False

    def transition(on, target, keeps, result, from_states):
        params = {
            "target": target,
            "now": None,
            "keeps": keeps,
            "result": result,
            "error": None,
            "key": key,
            "aid": aid,
            "attempt": 1,
            "from": from_states,
        }
        rows = pg_txn(on, lambda c: c.execute(sql.transition, params, prepare=PREPARE).fetchall())
        assert len(rows) == 1

    result = executor(marks, key)
    transition(conn, "committed", False, str(result), ["executing"])
    return True


# -- modes ----------------------------------------------------------------------------------


def main() -> None:
    global PREPARE
    cfg = _common.config()
    mode = cfg["mode"]
    PREPARE = bool(cfg.get("prepare", True))
    prefix = cfg.get("prefix", "k")
    n = int(cfg.get("n", 0))
    warmup = int(cfg.get("warmup", 0))
    variant = cfg.get("variant", "min")
    marks = cfg.get("marks")

    if mode == "sqlite_info":
        import sqlite3

        _common.answer({"sqlite_version": sqlite3.sqlite_version, "python": sys.version.split()[0]})
    elif mode == "sqlite_latency" and cfg.get("async"):
        conn = sqlite_open(cfg)
        _common.answer(
            _floor_async.sqlite_latency(
                conn, sqlite_txn, lambda i: sqlite_steps(conn, variant, f"{prefix}{i}"), n, warmup
            )
        )
    elif mode == "sqlite_latency":
        conn = sqlite_open(cfg)
        _common.answer(
            _common.time_calls(lambda i: sqlite_call(conn, variant, f"{prefix}{i}"), n, warmup)
        )
    elif mode == "sqlite_read":
        conn = sqlite_open(cfg)
        for i in range(-warmup, n):  # committed rows to read (not timed)
            assert sqlite_call(conn, "min", f"{prefix}{i}")

        def read(i: int) -> None:
            assert conn.execute(SQ_SELECT, (f"{prefix}{i}",)).fetchone() is not None

        _common.answer(_common.time_calls(read, n, warmup))
    elif mode == "sqlite_init":
        sqlite_open(cfg).close()
        _common.answer({"ok": True})
    elif mode == "sqlite_contend":
        conn = sqlite_open(cfg)
        _common.answer(_common.contend(lambda k: sqlite_call(conn, variant, k, marks), cfg["keys"]))
    elif mode == "pg_info":
        conn, _ = pg_open(cfg, create=False)
        import psycopg

        show = {}
        for name in (
            "server_version",
            "synchronous_commit",
            "fsync",
            "wal_sync_method",
            "commit_delay",
            "shared_buffers",
            "full_page_writes",
        ):
            show[name] = conn.execute(f"SHOW {name}").fetchone()[0]
        show["psycopg"] = psycopg.__version__
        show["libpq"] = psycopg.pq.version()
        show["psycopg_impl"] = psycopg.pq.__impl__
        _common.answer(show)
    elif mode == "pg_latency" and cfg.get("async"):
        conn, sql = pg_open(cfg)  # makes the schema
        conn.close()
        _common.answer(
            _floor_async.pg_latency(
                cfg["pg_url"], PREPARE, lambda i: pg_steps(sql, variant, f"{prefix}{i}"), n, warmup
            )
        )
    elif mode == "pg_latency":
        conn, sql = pg_open(cfg)
        _common.answer(
            _common.time_calls(lambda i: pg_call(conn, sql, variant, f"{prefix}{i}"), n, warmup)
        )
    elif mode == "pg_read":
        conn, sql = pg_open(cfg)
        for i in range(-warmup, n):  # committed rows to read (not timed)
            assert pg_call(conn, sql, "min", f"{prefix}{i}")

        def read(i: int) -> None:
            row = conn.execute(sql.select, {"key": f"{prefix}{i}"}, prepare=PREPARE).fetchone()
            assert row is not None

        _common.answer(_common.time_calls(read, n, warmup))
    elif mode == "pg_init":
        pg_open(cfg)[0].close()
        _common.answer({"ok": True})
    elif mode == "pg_contend":
        conn, sql = pg_open(cfg, create=False)
        _common.answer(
            _common.contend(lambda k: pg_call(conn, sql, variant, k, marks), cfg["keys"])
        )
    elif mode == "pg_stats":
        conn, _ = pg_open(cfg, create=False)
        wal = conn.execute("SELECT wal_records, wal_write, wal_sync FROM pg_stat_wal").fetchone()
        xact = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
        _common.answer(
            {"wal_records": wal[0], "wal_write": wal[1], "wal_sync": wal[2], "xact_commit": xact[0]}
        )
    elif mode == "pg_drop":
        conn, _ = pg_open(cfg, create=False)
        for schema in cfg["schemas"]:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        _common.answer({"ok": True})
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
