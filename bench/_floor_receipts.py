"""The engine floor of what ctrlrun is required to write, receipts included (variant
``receipts`` of ``_floor_worker``).

The issues require a receipt for every write to an effect, in the transaction of that write,
chained per key, and the indexes behind ``effects list --state`` / ``--prefix``, retention and
``receipts KEY``. So the least any engine can do for one protected call with those
requirements is, in two durable commits:

* the reservation: the row (with its chain head: seq, previous and own hash) inserted if the
  key is free, and its receipt appended;
* the outcome: the compare-and-set of the row (moving its chain head), and its receipt
  appended.

Written the cheapest way each engine allows: the hashes are computed here (ctrlrun computes
them in the database, so a changed receipt cannot come from a client that skipped the hash);
on SQLite two plain statements per transaction (no triggers); on PostgreSQL one autocommit
statement per write (a data-modifying CTE appends the receipt), so each write is one round
trip and one commit. The tables, columns, constraints and indexes are ctrlrun's
(src/store/sqlite/sql.rs, src/store/postgres/schema.rs; on PostgreSQL the row's primary key is
the SHA-256 of its key); keep them in step. So this floor measures receipts together with the
columns and indexes the other issues added, not receipts alone.
"""

from __future__ import annotations

import hashlib
import os
import time

LEASE_US = 5 * 60 * 1_000_000
WRITER = f"{os.uname().nodename}:{os.getpid()}"
ARGS = "sha256:" + hashlib.sha256(b'{"key":"k"}').hexdigest()


def _now() -> int:
    return time.time_ns() // 1000


def _hash(*fields: object) -> str:
    text = "".join("~" if f is None else f"{len(str(f))}:{f}" for f in fields)
    return hashlib.sha256(text.encode()).hexdigest()


# -- SQLite ---------------------------------------------------------------------------------

SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS ctrlrun_effects (
    effect_key TEXT NOT NULL PRIMARY KEY,
    state TEXT NOT NULL CHECK (state IN
        ('reserved', 'executing', 'committed', 'failed', 'ambiguous')),
    action_id TEXT NOT NULL,
    attempt INTEGER NOT NULL CHECK (attempt >= 1), created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    lease_expires_at INTEGER, result TEXT, error TEXT, resolved_by TEXT, attempt_token TEXT,
    action TEXT, holder TEXT, args_digest TEXT, arg_digests TEXT, approval_id TEXT,
    last_event TEXT, written_by TEXT, receipt_seq INTEGER, receipt_prev TEXT, receipt_hash TEXT
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS ctrlrun_effects_state ON ctrlrun_effects (state, created_at);
CREATE TABLE IF NOT EXISTS ctrlrun_receipts (
    id INTEGER NOT NULL PRIMARY KEY, chain TEXT NOT NULL, effect_key TEXT NOT NULL,
    request_id TEXT, seq INTEGER NOT NULL, prev_hash TEXT, hash TEXT NOT NULL,
    at INTEGER NOT NULL, kind TEXT NOT NULL, action TEXT, action_id TEXT, attempt INTEGER,
    state TEXT NOT NULL, args_digest TEXT, approval_id TEXT, actor TEXT, writer TEXT);
CREATE INDEX IF NOT EXISTS ctrlrun_receipts_key ON ctrlrun_receipts (effect_key, id);
"""

_SQ_INSERT = (
    "INSERT INTO ctrlrun_effects (effect_key, state, action_id, attempt, created_at, "
    "updated_at, lease_expires_at, attempt_token, action, holder, args_digest, arg_digests, "
    "last_event, written_by, receipt_seq, receipt_hash) VALUES (?1, 'executing', ?2, 1, ?3, ?3, "
    "?4, ?5, 'bench.effect', ?6, ?7, ?8, 'reservation', ?6, 1, ?9) "
    "ON CONFLICT (effect_key) DO NOTHING"
)
_SQ_OUTCOME = (
    "UPDATE ctrlrun_effects SET state = 'committed', updated_at = ?1, lease_expires_at = NULL, "
    "result = ?2, last_event = 'outcome', written_by = ?3, receipt_seq = 2, receipt_prev = ?4, "
    "receipt_hash = ?5 WHERE effect_key = ?6 AND action_id = ?7 AND attempt = 1 "
    "AND state = 'executing'"
)
_SQ_RECEIPT = (
    "INSERT INTO ctrlrun_receipts (chain, effect_key, seq, prev_hash, hash, at, kind, action, "
    "action_id, attempt, state, args_digest, writer) VALUES ('effect', ?1, ?2, ?3, ?4, ?5, ?6, "
    "'bench.effect', ?7, 1, ?8, ?9, ?10)"
)


def drive(steps, step):
    """Run a call written as a generator of steps (``sqlite_steps``, ``pg_steps``): each
    yielded step is done by ``step(it)``, whose value is sent back; returns the generator's
    value (whether the key was won)."""
    value = None
    try:
        while True:
            value = step(steps.send(value))
    except StopIteration as done:
        return done.value


async def drive_async(steps, step):
    """As :func:`drive`, awaiting ``step(it)``."""
    value = None
    try:
        while True:
            value = await step(steps.send(value))
    except StopIteration as done:
        return done.value


def sqlite_steps(conn, key: str, aid: str, run):
    """One protected call on a fresh ``key``: yields the body of each transaction (to run in
    one ``BEGIN IMMEDIATE`` transaction, its value sent back); returns False when the key was
    taken. ``run()`` is the executor."""
    now = _now()
    first = _hash(key, 1, None, "reservation", "executing", aid, now)

    def reserve() -> bool:
        token = os.urandom(16).hex()
        if (
            conn.execute(
                _SQ_INSERT,
                (key, aid, now, now + LEASE_US, token, WRITER, ARGS, "key " + ARGS, first),
            ).rowcount
            != 1
        ):
            return False
        conn.execute(
            _SQ_RECEIPT, (key, 1, None, first, now, "reservation", aid, "executing", ARGS, WRITER)
        )
        return True

    if not (yield reserve):
        return False
    result = str(run())

    def outcome() -> None:
        at = _now()
        second = _hash(key, 2, first, "outcome", "committed", aid, at)
        assert (
            conn.execute(_SQ_OUTCOME, (at, result, WRITER, first, second, key, aid)).rowcount == 1
        )
        conn.execute(
            _SQ_RECEIPT, (key, 2, first, second, at, "outcome", aid, "committed", ARGS, WRITER)
        )

    yield outcome
    return True


# -- PostgreSQL -----------------------------------------------------------------------------


def pg_schema_sql(schema: str) -> str:
    """ctrlrun's tables: the row's primary key is the SHA-256 of its key (a B-tree entry cannot
    hold every key), computed by the server; receipts are found by it too."""
    s = f'"{schema}"'
    return f"""
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.ctrlrun_effects (
    key_digest bytea NOT NULL PRIMARY KEY, effect_key text NOT NULL,
    state text NOT NULL CHECK (state IN
        ('reserved', 'executing', 'committed', 'failed', 'ambiguous')),
    action_id text NOT NULL, attempt bigint NOT NULL CHECK (attempt >= 1),
    created_at bigint NOT NULL, updated_at bigint NOT NULL,
    lease_expires_at bigint, result text, error text, resolved_by text, attempt_token text,
    action text, holder text, args_digest text, arg_digests text, approval_id text,
    last_event text, written_by text, receipt_seq bigint, receipt_prev text, receipt_hash text);
CREATE INDEX IF NOT EXISTS ctrlrun_effects_state ON {s}.ctrlrun_effects (state, created_at);
CREATE INDEX IF NOT EXISTS ctrlrun_effects_prefix
    ON {s}.ctrlrun_effects ((left(effect_key, 200) COLLATE "C"));
CREATE TABLE IF NOT EXISTS {s}.ctrlrun_receipts (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, key_digest bytea NOT NULL,
    chain text NOT NULL, effect_key text NOT NULL, request_id text, seq bigint NOT NULL,
    prev_hash text, hash text NOT NULL, at bigint NOT NULL, kind text NOT NULL, action text,
    action_id text, attempt bigint, state text NOT NULL, args_digest text, approval_id text,
    actor text, writer text);
CREATE INDEX IF NOT EXISTS ctrlrun_receipts_key ON {s}.ctrlrun_receipts (key_digest, id);
"""


class PgReceipts:
    """The two statements, each one autocommit round trip that writes the row and appends its
    receipt (a data-modifying CTE: both or neither)."""

    def __init__(self, schema: str) -> None:
        t, r = f'"{schema}".ctrlrun_effects', f'"{schema}".ctrlrun_receipts'
        digest = "sha256(convert_to(%(key)s::text, 'UTF8'))"
        receipt = (
            f"INSERT INTO {r} (key_digest, effect_key, chain, seq, prev_hash, hash, at, "
            f"kind, action, action_id, attempt, state, args_digest, writer) SELECT "
            f"key_digest, effect_key, 'effect', receipt_seq, receipt_prev, receipt_hash, "
            f"updated_at, last_event, action, action_id, attempt, state, args_digest, "
            f"written_by FROM w RETURNING 1"
        )
        self.reserve = (
            f"WITH w AS (INSERT INTO {t} (key_digest, effect_key, state, action_id, attempt, "
            f"created_at, updated_at, lease_expires_at, attempt_token, action, holder, "
            f"args_digest, arg_digests, last_event, written_by, receipt_seq, receipt_hash) VALUES "
            f"({digest}, %(key)s, 'executing', %(aid)s, 1, %(now)s, %(now)s, %(until)s, "
            f"%(token)s, 'bench.effect', %(writer)s, %(args)s, %(fields)s, 'reservation', "
            f"%(writer)s, 1, %(hash)s) ON CONFLICT (key_digest) DO NOTHING RETURNING *) {receipt}"
        )
        self.outcome = (
            f"WITH w AS (UPDATE {t} SET state = 'committed', updated_at = %(now)s, "
            f"lease_expires_at = NULL, result = %(result)s, last_event = 'outcome', "
            f"written_by = %(writer)s, receipt_seq = 2, receipt_prev = %(prev)s, "
            f"receipt_hash = %(hash)s WHERE key_digest = {digest} AND effect_key = %(key)s "
            f"AND action_id = %(aid)s AND attempt = 1 AND state = 'executing' RETURNING *) "
            f"{receipt}"
        )


def pg_steps(sql: PgReceipts, key: str, aid: str, run):
    """One protected call on a fresh ``key``: yields each autocommit statement as
    ``(sql, params)`` (its first row, or None, sent back); returns False when it was taken."""
    now = _now()
    first = _hash(key, 1, None, "reservation", "executing", aid, now)
    row = yield (
        sql.reserve,
        {
            "key": key,
            "aid": aid,
            "now": now,
            "until": now + LEASE_US,
            "token": os.urandom(16).hex(),
            "writer": WRITER,
            "args": ARGS,
            "fields": "key " + ARGS,
            "hash": first,
        },
    )
    if row is None:
        return False
    result = str(run())
    at = _now()
    second = _hash(key, 2, first, "outcome", "committed", aid, at)
    row = yield (
        sql.outcome,
        {
            "now": at,
            "result": result,
            "writer": WRITER,
            "prev": first,
            "hash": second,
            "key": key,
            "aid": aid,
        },
    )
    assert row is not None
    return True
