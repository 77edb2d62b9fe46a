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
    kind: str = "latency"  # latency | dup | read | contention: what the table shows of it
    variant: str = "min"  # the floor's statements (min, same, receipts, autocommit)
    is_async: bool = False
    sync: str = ""  # SQLite: PRAGMA synchronous, shown as its durability
    prepare: Optional[bool] = None  # PostgreSQL floors: None = prepared unless via the pooler
    direct: bool = False  # PostgreSQL: straight to the server only, not via the pooler
    url_options: str = ""  # ctrlrun rows: more options of the store URL (``a=b&c=d``)


def per_sync(*rows: Row) -> List[Row]:
    """``rows`` once for each SQLite synchronous setting, all of them for FULL first."""
    return [replace(r, id=r.id.format(sync=s), sync=s) for s in SYNCS for r in rows]


# keyword arguments several rows share; PREP: a direct connection's option (never via a pooler)
ASYNC, DIRECT, PREP = (
    {"is_async": True},
    {"direct": True},
    {"direct": True, "url_options": PREPARED},
)
R, AU, F, C = {"variant": "receipts"}, {"variant": "autocommit"}, "floor", "contention"
UNPREP = {"prepare": False, "direct": True}
RECEIPTS, OFF = "2 txns + receipts, columns, indexes", "async (off the loop)"
SQLITE_ROWS: List[Row] = [
    *per_sync(
        Row("ctrlrun.sync.{sync}", "ctrlrun", "ctrlrun, sync"),
        Row("ctrlrun.async.{sync}", "ctrlrun", "ctrlrun, async", **ASYNC),
    ),
    Row("ref.sync.NORMAL", "original", "original {ref}, sync", sync="NORMAL"),
    Row(
        "ref.async.NORMAL", "original", "original {ref}, async (to_thread)", sync="NORMAL", **ASYNC
    ),
    *per_sync(
        Row("floor.min.{sync}", "floor", "floor: 2 txns (minimum)"),
        Row("floor.same.{sync}", "floor", "floor: ctrlrun's statements (2 txns)", variant="same"),
        Row("floor.receipts.{sync}", "floor", f"floor: {RECEIPTS}", **R),
        Row("floor.min.async.{sync}", F, f"floor: 2 txns (minimum), {OFF}", **ASYNC),
        Row("floor.receipts.async.{sync}", F, f"floor: {RECEIPTS}, {OFF}", **R, **ASYNC),
    ),
    Row("dup.ctrlrun", "ctrlrun", "duplicate: ctrlrun (committed key again)", "dup", sync="FULL"),
    Row("dup.ref", "original", "duplicate: original {ref}", "dup", sync="NORMAL"),
    Row("dup.floor", "floor", "floor: one indexed read", "read", sync="FULL"),
    *per_sync(
        Row("contend.ctrlrun.{sync}", "ctrlrun", "{c}, ctrlrun", "contention"),
        Row("contend.floor.min.{sync}", "floor", "{c}, floor 2 txns", "contention"),
        Row("contend.floor.same.{sync}", F, "{c}, floor ctrlrun's statements", C, "same"),
    ),
    Row("contend.ref.NORMAL", "original", "{c}, original {ref}", "contention", sync="NORMAL"),
]

# Straight to the server (``postgres``) or through PgBouncer in transaction mode (``pgbouncer``:
# no original, and the floors send every statement unnamed, since a prepared one would not be
# there on the next server connection). The pooler's report compares with the unprepared 2-txn
# floor only, hence the rows marked ``direct``.
AUTO = "floor: 2 autocommit statements"
AUTO_R = f"{AUTO} + receipts, columns, indexes"
POSTGRES_ROWS: List[Row] = [
    Row("ctrlrun.sync", "ctrlrun", "ctrlrun, sync"),
    Row("ctrlrun.async", "ctrlrun", "ctrlrun, async", **ASYNC),
    Row("ctrlrun.sync.prepared", "ctrlrun", f"ctrlrun, sync, {PREPARED}", **PREP),
    Row("ctrlrun.async.prepared", "ctrlrun", f"ctrlrun, async, {PREPARED}", **PREP, **ASYNC),
    Row("ref.sync", "original", "original {ref}, sync"),
    Row("ref.async", "original", "original {ref}, async (to_thread)", **ASYNC),
    Row("floor.min", "floor", "floor: 2 txns (minimum), {psycopg}"),
    Row("floor.auto", "floor", f"{AUTO}, {{psycopg}}", **AU),
    Row("floor.same", "floor", "floor: ctrlrun's statements (2 txns), {psycopg}", variant="same"),
    Row("floor.receipts", "floor", f"{AUTO_R}, {{psycopg}}", **R, **DIRECT),
    Row("floor.receipts.unprepared", F, f"{AUTO_R}, psycopg, unprepared", **R, **UNPREP),
    Row("floor.auto.async", "floor", f"{AUTO}, {{psycopg}} async", **AU, **ASYNC, **DIRECT),
    Row("floor.receipts.async", "floor", f"{AUTO_R}, {{psycopg}} async", **R, **ASYNC, **DIRECT),
    Row("dup.ctrlrun", "ctrlrun", "duplicate: ctrlrun (committed key again)", "dup"),
    Row("dup.ctrlrun.prepared", "ctrlrun", f"duplicate: ctrlrun, {PREPARED}", "dup", **PREP),
    Row("dup.ref", "original", "duplicate: original {ref}", "dup"),
    Row("dup.floor", "floor", "floor: one indexed read, {psycopg}", "read"),
    # what a read costs when it is parsed on every call, as ctrlrun's are
    Row("dup.floor.unprepared", F, "one indexed read, psycopg, unprepared", "read", **UNPREP),
    Row("contend.ctrlrun", "ctrlrun", "{c}, ctrlrun", "contention"),
    Row("contend.floor.min", "floor", "{c}, floor 2 txns", "contention"),
    Row("contend.floor.same", F, "{c}, floor ctrlrun's statements", C, "same", **DIRECT),
    Row("contend.ref", "original", "{c}, original {ref}", "contention"),
]
