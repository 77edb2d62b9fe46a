"""The engine floors' worker (``_floor_sql.py`` has the variants, their tables and statements).

Runs under the interpreter of run.py for SQLite (stdlib ``sqlite3``) and under
bench/.floor-venv/bin/python for PostgreSQL (``psycopg`` 3). Modes: sqlite_info, sqlite_latency,
sqlite_read, sqlite_init, sqlite_contend, pg_info, pg_latency, pg_read, pg_init, pg_contend,
pg_stats, pg_drop. ``read`` is one ``SELECT`` by primary key per call (the duplicate path's
floor). With ``async`` set the calls are awaited one at a time on an asyncio loop that the store
never blocks (the rule ctrlrun's async path keeps): SQLite's blocking transactions run on one
dedicated thread (``run_in_executor``: a hand-off and a wake-up of the loop per transaction);
PostgreSQL uses psycopg's ``AsyncConnection``, whose socket I/O runs on the loop itself.
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
from concurrent.futures import ThreadPoolExecutor

import _common
import _floor_sql as fs


def executor(marks, key: str):
    """The protected call's body: records its execution (contention runs), returns 1."""
    return (lambda: _common.mark(marks, key) or 1) if marks else (lambda: 1)


class SqliteFloor:
    def __init__(self, cfg: dict, create: bool) -> None:
        self.conn = sqlite3.connect(
            cfg["path"], isolation_level=None, timeout=30.0, check_same_thread=False
        )
        assert self.conn.execute("PRAGMA journal_mode=WAL").fetchone()[0].lower() == "wal"
        self.conn.execute(f"PRAGMA synchronous={cfg.get('synchronous', 'FULL')}")
        if create:
            fs.sqlite_tables(self.conn, cfg["template"], cfg.get("variant", "min"))

    def txn(self, body):
        return fs.sqlite_txn(self.conn, body)

    def call(self, variant: str, key: str, marks=None) -> bool:
        return fs.drive(fs.sqlite_steps(self.conn, variant, key, executor(marks, key)), self.txn)

    def read(self, key: str) -> None:
        assert self.conn.execute(fs.SQ_SELECT, (key,)).fetchone() is not None

    async def async_latency(self, variant: str, keys, n: int, warmup: int) -> dict:
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="floor-io") as pool:

            async def step(body):
                return await loop.run_in_executor(pool, self.txn, body)

            async def call(i: int) -> None:
                steps = fs.sqlite_steps(self.conn, variant, keys(i), executor(None, ""))
                assert await fs.drive_async(steps, step)

            return await _common.time_calls_async(call, n, warmup)


class PgFloor:
    """One autocommit connection (every write durable, as in ctrlrun). Through a transaction
    pooler a statement prepared on one server connection is missing on the next, so with
    ``prepare`` false every statement is sent unnamed, as ctrlrun does."""

    def __init__(self, cfg: dict, create: bool) -> None:
        import psycopg

        self.cfg, self.prepare = cfg, bool(cfg.get("prepare", True))
        self.options = {} if self.prepare else {"prepare_threshold": None}
        self.conn = psycopg.connect(cfg["pg_url"], autocommit=True, **self.options)
        if create:
            schema, variant = cfg["schema"], cfg.get("variant", "min")
            self.conn.execute(fs.pg_tables_sql(schema, cfg["template"], variant))
        self.sql = fs.PgSql(cfg.get("schema", "public"))

    def step(self, st):
        """Send one step of ``pg_steps``; its first row or None."""
        sql, params, txn = st
        if txn:
            self.conn.execute("BEGIN")
        try:
            cur = self.conn.execute(sql, params, prepare=self.prepare)
            row = cur.fetchone() if cur.description is not None else None
        except BaseException:
            if txn:
                self.conn.execute("ROLLBACK")
            raise
        if txn:
            self.conn.execute("COMMIT")
        return row

    def call(self, variant: str, key: str, marks=None) -> bool:
        return fs.drive(fs.pg_steps(self.sql, variant, key, executor(marks, key)), self.step)

    def read(self, key: str) -> None:
        row = self.conn.execute(self.sql.select, {"key": key}, prepare=self.prepare).fetchone()
        assert row is not None

    async def async_latency(self, variant: str, keys, n: int, warmup: int) -> dict:
        import psycopg

        url = self.cfg["pg_url"]
        async with await psycopg.AsyncConnection.connect(
            url, autocommit=True, **self.options
        ) as conn:

            async def step(st):
                sql, params, txn = st
                if txn:
                    await conn.execute("BEGIN")
                cur = await conn.execute(sql, params, prepare=self.prepare)
                row = await cur.fetchone() if cur.description is not None else None
                if txn:
                    await conn.execute("COMMIT")
                return row

            async def call(i: int) -> None:
                steps = fs.pg_steps(self.sql, variant, keys(i), executor(None, ""))
                assert await fs.drive_async(steps, step)

            return await _common.time_calls_async(call, n, warmup)


def pg_admin(cfg: dict, kind: str) -> dict:
    import psycopg

    conn = psycopg.connect(cfg["pg_url"], autocommit=True)
    q = lambda sql: conn.execute(sql).fetchone()  # noqa: E731
    if kind == "info":
        names = "server_version synchronous_commit fsync wal_sync_method commit_delay"
        out = {
            name: q(f"SHOW {name}")[0]
            for name in f"{names} shared_buffers full_page_writes".split()
        }
        out.update(psycopg=psycopg.__version__, libpq=psycopg.pq.version())
        return {**out, "psycopg_impl": psycopg.pq.__impl__}
    if kind == "stats":
        wal = q("SELECT wal_records, wal_write, wal_sync FROM pg_stat_wal")
        xact = q("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
        return dict(zip(("wal_records", "wal_write", "wal_sync", "xact_commit"), (*wal, *xact)))
    for schema in cfg["schemas"]:  # drop
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    return {"ok": True}


def main() -> None:
    cfg = _common.config()
    variant, n, warmup = cfg.get("variant", "min"), int(cfg.get("n", 0)), int(cfg.get("warmup", 0))
    backend, kind = cfg["mode"].split("_", 1)
    key = lambda i: f"{cfg.get('prefix', 'k')}{i}"  # noqa: E731
    if cfg["mode"] == "sqlite_info":
        return _common.answer(
            {"sqlite_version": sqlite3.sqlite_version, "python": sys.version.split()[0]}
        )
    if kind in ("info", "stats", "drop"):
        return _common.answer(pg_admin(cfg, kind))
    floor = (SqliteFloor if backend == "sqlite" else PgFloor)(cfg, create=kind != "contend")
    if kind == "latency" and cfg.get("async"):
        result = asyncio.run(floor.async_latency(variant, key, n, warmup))
    elif kind == "latency":
        result = _common.time_calls(lambda i: floor.call(variant, key(i)), n, warmup)
    elif kind == "read":
        for i in range(-warmup, n):  # committed rows to read (not timed)
            assert floor.call("min", key(i))
        result = _common.time_calls(lambda i: floor.read(key(i)), n, warmup)
    elif kind == "contend":
        result = _common.contend(lambda k: floor.call(variant, k, cfg["marks"]), cfg["keys"])
    else:
        assert kind == "init", cfg["mode"]
        result = {"ok": True}
    _common.answer(result)


if __name__ == "__main__":
    main()
