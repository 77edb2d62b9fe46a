"""The rows of the benchmark's table, as data: every measurement ``bench.run`` makes, in the order
it makes and reports them. ``bench.plan`` turns each row into a runnable ``Spec``.

A row's ``label`` may name ``{ref}`` (the original product's version), ``{psycopg}`` ("psycopg",
or "psycopg, unprepared" through the pooler) and ``{c}`` (the contention workload); ``per_sync``
repeats rows for SQLite's FULL and NORMAL, with ``{sync}`` in their id.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import List, Optional

SYNCS = ("FULL", "NORMAL")
PG_DURABILITY = "sync_commit=on"
PREPARED = "prepared_statements=on"


@dataclass(frozen=True)
class Row:
    id: str
    who: str  # ctrlrun | original | floor: which worker measures it
    label: str
    kind: str  # latency | dup | read | contention: what the table shows of it
    mode: str = ""  # the worker's mode (contention rows: none, the worker runs init+contend)
    variant: str = "min"  # the floor's statements (min, same, receipts, autocommit)
    is_async: bool = False
    sync: str = ""  # SQLite: PRAGMA synchronous, shown as its durability
    prepare: Optional[bool] = None  # PostgreSQL floors: None = prepared unless via the pooler
    direct: bool = False  # PostgreSQL: straight to the server only, not via the pooler
    url_options: str = ""  # ctrlrun rows: more options of the store URL (``a=b&c=d``)


def per_sync(*rows: Row) -> List[Row]:
    """``rows`` once for each SQLite synchronous setting, all of them for FULL first."""
    return [replace(r, id=r.id.format(sync=s), sync=s) for s in SYNCS for r in rows]


SQLITE_ROWS: List[Row] = [
    *per_sync(
        Row("ctrlrun.sync.{sync}", "ctrlrun", "ctrlrun, sync", "latency", "latency"),
        Row(
            "ctrlrun.async.{sync}", "ctrlrun", "ctrlrun, async", "latency", "latency", is_async=True
        ),
    ),
    Row("ref.sync.NORMAL", "original", "original {ref}, sync", "latency", "latency", sync="NORMAL"),
    Row(
        "ref.async.NORMAL",
        "original",
        "original {ref}, async (to_thread)",
        "latency",
        "latency",
        is_async=True,
        sync="NORMAL",
    ),
    *per_sync(
        Row(
            "floor.min.{sync}",
            "floor",
            "floor: 2 txns (minimum)",
            "latency",
            "sqlite_latency",
            "min",
        ),
        Row(
            "floor.same.{sync}",
            "floor",
            "floor: ctrlrun's statements (2 txns)",
            "latency",
            "sqlite_latency",
            "same",
        ),
        Row(
            "floor.receipts.{sync}",
            "floor",
            "floor: 2 txns + receipts, columns, indexes",
            "latency",
            "sqlite_latency",
            "receipts",
        ),
        Row(
            "floor.min.async.{sync}",
            "floor",
            "floor: 2 txns (minimum), async (off the loop)",
            "latency",
            "sqlite_latency",
            "min",
            is_async=True,
        ),
        Row(
            "floor.receipts.async.{sync}",
            "floor",
            "floor: 2 txns + receipts, columns, indexes, async (off the loop)",
            "latency",
            "sqlite_latency",
            "receipts",
            is_async=True,
        ),
    ),
    Row(
        "dup.ctrlrun",
        "ctrlrun",
        "duplicate: ctrlrun (committed key again)",
        "dup",
        "dup",
        sync="FULL",
    ),
    Row("dup.ref", "original", "duplicate: original {ref}", "dup", "dup", sync="NORMAL"),
    Row("dup.floor", "floor", "floor: one indexed read", "read", "sqlite_read", sync="FULL"),
    *per_sync(
        Row("contend.ctrlrun.{sync}", "ctrlrun", "{c}, ctrlrun", "contention"),
        Row("contend.floor.min.{sync}", "floor", "{c}, floor 2 txns", "contention", variant="min"),
        Row(
            "contend.floor.same.{sync}",
            "floor",
            "{c}, floor ctrlrun's statements",
            "contention",
            variant="same",
        ),
    ),
    Row("contend.ref.NORMAL", "original", "{c}, original {ref}", "contention", sync="NORMAL"),
]

# Straight to the server (``postgres``) or through PgBouncer in transaction mode (``pgbouncer``:
# no original, and the floors send every statement unnamed, since a prepared one would not be
# there on the next server connection). The pooler's report compares with the unprepared 2-txn
# floor only, hence the rows marked ``direct``.
POSTGRES_ROWS: List[Row] = [
    Row("ctrlrun.sync", "ctrlrun", "ctrlrun, sync", "latency", "latency"),
    Row("ctrlrun.async", "ctrlrun", "ctrlrun, async", "latency", "latency", is_async=True),
    # a direct connection may prepare its statements (never behind a transaction pooler)
    Row(
        "ctrlrun.sync.prepared",
        "ctrlrun",
        "ctrlrun, sync, prepared_statements=on",
        "latency",
        "latency",
        direct=True,
        url_options=PREPARED,
    ),
    Row(
        "ctrlrun.async.prepared",
        "ctrlrun",
        "ctrlrun, async, prepared_statements=on",
        "latency",
        "latency",
        is_async=True,
        direct=True,
        url_options=PREPARED,
    ),
    Row("ref.sync", "original", "original {ref}, sync", "latency", "latency"),
    Row(
        "ref.async",
        "original",
        "original {ref}, async (to_thread)",
        "latency",
        "latency",
        is_async=True,
    ),
    Row("floor.min", "floor", "floor: 2 txns (minimum), {psycopg}", "latency", "pg_latency", "min"),
    Row(
        "floor.auto",
        "floor",
        "floor: 2 autocommit statements, {psycopg}",
        "latency",
        "pg_latency",
        "autocommit",
    ),
    Row(
        "floor.same",
        "floor",
        "floor: ctrlrun's statements (2 txns), {psycopg}",
        "latency",
        "pg_latency",
        "same",
    ),
    Row(
        "floor.receipts",
        "floor",
        "floor: 2 autocommit statements + receipts, columns, indexes, {psycopg}",
        "latency",
        "pg_latency",
        "receipts",
        direct=True,
    ),
    Row(
        "floor.receipts.unprepared",
        "floor",
        "floor: 2 autocommit statements + receipts, columns, indexes, psycopg, unprepared",
        "latency",
        "pg_latency",
        "receipts",
        prepare=False,
        direct=True,
    ),
    Row(
        "floor.auto.async",
        "floor",
        "floor: 2 autocommit statements, {psycopg} async",
        "latency",
        "pg_latency",
        "autocommit",
        is_async=True,
        direct=True,
    ),
    Row(
        "floor.receipts.async",
        "floor",
        "floor: 2 autocommit statements + receipts, columns, indexes, {psycopg} async",
        "latency",
        "pg_latency",
        "receipts",
        is_async=True,
        direct=True,
    ),
    Row("dup.ctrlrun", "ctrlrun", "duplicate: ctrlrun (committed key again)", "dup", "dup"),
    Row(
        "dup.ctrlrun.prepared",
        "ctrlrun",
        "duplicate: ctrlrun, prepared_statements=on",
        "dup",
        "dup",
        direct=True,
        url_options=PREPARED,
    ),
    Row("dup.ref", "original", "duplicate: original {ref}", "dup", "dup"),
    Row("dup.floor", "floor", "floor: one indexed read, {psycopg}", "read", "pg_read"),
    # what a read costs when it is parsed on every call, as ctrlrun's are
    Row(
        "dup.floor.unprepared",
        "floor",
        "one indexed read, psycopg, unprepared",
        "read",
        "pg_read",
        prepare=False,
        direct=True,
    ),
    Row("contend.ctrlrun", "ctrlrun", "{c}, ctrlrun", "contention"),
    Row("contend.floor.min", "floor", "{c}, floor 2 txns", "contention", variant="min"),
    Row(
        "contend.floor.same",
        "floor",
        "{c}, floor ctrlrun's statements",
        "contention",
        variant="same",
        direct=True,
    ),
    Row("contend.ref", "original", "{c}, original {ref}", "contention"),
]
