"""The engine floors: what the database itself costs for one protected call on a fresh key, with
no ctrlrun, each variant two durable commits (bench/README.md's rows say what each writes):
``min`` (the reservation ``INSERT … ON CONFLICT DO NOTHING``, then the compare-and-set
``UPDATE``, each its own transaction), ``autocommit`` (PostgreSQL: the same, each statement
committing by itself), ``same`` (ctrlrun's statements before receipts: a reference), and
``receipts`` (``min`` plus each write's receipt, chained per key, hashed here). Their tables are
copied from a store ctrlrun made (the ``template``), without its triggers.

Standard library only: the workers import this by bare name in their own venvs, bench.frames
and bench._pgbench as ``bench._floor_sql``.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import time

LEASE_US = 5 * 60 * 1_000_000
WRITER = f"{os.uname().nodename}:{os.getpid()}"
ARGS = "sha256:" + hashlib.sha256(b'{"key":"k"}').hexdigest()
COLUMNS = """effect_key, state, action_id, attempt, created_at, updated_at, lease_expires_at,
    result, error, resolved_by"""


def now_us() -> int:
    return time.time_ns() // 1000


def action_id() -> str:
    return "act_" + os.urandom(16).hex()


def chain_hash(*fields: object) -> str:
    text = "".join("~" if f is None else f"{len(str(f))}:{f}" for f in fields)
    return hashlib.sha256(text.encode()).hexdigest()


def tables(variant: str) -> tuple:
    return ("ctrlrun_effects", "ctrlrun_receipts")[: 2 if variant == "receipts" else 1]


def drive(steps, step):
    """Run a call written as a generator of steps: each yielded step is done by ``step(it)``,
    whose value is sent back; returns the generator's value (whether the key was won)."""
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


# -- SQLite ---------------------------------------------------------------------------------


def sqlite_tables(conn, template: str, variant: str) -> None:
    """Create the variant's tables (and, for ``receipts``, their indexes) as the template has
    them."""
    names = tables(variant)
    index = "index" if variant == "receipts" else "table"
    with sqlite3.connect(f"file:{template}?mode=ro", uri=True) as t:
        ddl = t.execute(
            f"SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND type IN ('table', ?)"
            f" AND tbl_name IN ({', '.join('?' * len(names))}) ORDER BY type DESC, rowid",
            (index, *names),
        ).fetchall()
    assert len(ddl) >= len(names), (template, ddl)
    conn.executescript(";\n".join(sql for (sql,) in ddl) + ";")


def sqlite_txn(conn, body):
    conn.execute("BEGIN IMMEDIATE")
    try:
        value = body()
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return value


SQ_INSERT_MIN = """INSERT INTO ctrlrun_effects (effect_key, state, action_id, attempt, created_at,
    updated_at, lease_expires_at) VALUES (?1, 'reserved', ?2, 1, ?3, ?3, ?4)
    ON CONFLICT (effect_key) DO NOTHING"""
SQ_OUTCOME_MIN = """UPDATE ctrlrun_effects SET state = 'committed', updated_at = ?1,
    lease_expires_at = NULL, result = ?2 WHERE effect_key = ?3 AND action_id = ?4 AND attempt = 1
    AND state = 'reserved'"""
SQ_SELECT = f"SELECT {COLUMNS} FROM ctrlrun_effects WHERE effect_key = ?1"
SQ_INSERT = (
    f"INSERT INTO ctrlrun_effects ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
)
SQ_TRANSITION = """UPDATE ctrlrun_effects SET state = ?1, updated_at = ?2, lease_expires_at =
    CASE WHEN ?3 THEN lease_expires_at ELSE NULL END, result = ?4, error = ?5 WHERE effect_key = ?6
    AND action_id = ?7 AND (?8 IS NULL OR attempt = ?8) AND state IN (?9, ?10, ?11)"""
SQ_INSERT_R = """INSERT INTO ctrlrun_effects (effect_key, state, action_id, attempt, created_at,
    updated_at, lease_expires_at, attempt_token, action, holder, args_digest, arg_digests,
    last_event, written_by, receipt_seq, receipt_hash) VALUES (?1, 'executing', ?2, 1, ?3, ?3, ?4,
    ?5, 'bench.effect', ?6, ?7, ?8, 'reservation', ?6, 1, ?9) ON CONFLICT (effect_key) DO NOTHING"""
SQ_OUTCOME_R = """UPDATE ctrlrun_effects SET state = 'committed', updated_at = ?1,
    lease_expires_at = NULL, result = ?2, last_event = 'outcome', written_by = ?3, receipt_seq = 2,
    receipt_prev = ?4, receipt_hash = ?5 WHERE effect_key = ?6 AND action_id = ?7 AND attempt = 1
    AND state = 'executing'"""
SQ_RECEIPT = """INSERT INTO ctrlrun_receipts (chain, effect_key, seq, prev_hash, hash, at, kind,
    action, action_id, attempt, state, args_digest, writer) VALUES ('effect', ?1, ?2, ?3, ?4, ?5,
    ?6, 'bench.effect', ?7, 1, ?8, ?9, ?10)"""


def sqlite_steps(conn, variant: str, key: str, run):
    """One call on ``key`` as a generator of transaction bodies (each run in its own ``BEGIN
    IMMEDIATE … COMMIT``, its value sent back); returns False when the key was taken. ``run()``
    is the executor."""
    aid, now, q = action_id(), now_us(), conn.execute
    first = chain_hash(key, 1, None, "reservation", "executing", aid, now)

    def reserve() -> bool:
        if variant == "min":
            return q(SQ_INSERT_MIN, (key, aid, now, now + LEASE_US)).rowcount == 1
        if variant == "same":
            if q(SQ_SELECT, (key,)).fetchone() is not None:
                return False
            q(SQ_INSERT, (key, "executing", aid, 1, now, now, now + LEASE_US, None, None, None))
            return True
        row = (key, aid, now, now + LEASE_US, os.urandom(16).hex(), WRITER, ARGS, "key " + ARGS)
        if q(SQ_INSERT_R, (*row, first)).rowcount != 1:
            return False
        q(SQ_RECEIPT, (key, 1, None, first, now, "reservation", aid, "executing", ARGS, WRITER))
        return True

    if not (yield reserve):
        return False
    result = str(run())

    def outcome() -> None:
        at = now_us()
        if variant == "min":
            q(SQ_OUTCOME_MIN, (at, result, key, aid))
        elif variant == "same":
            args = ("committed", at, False, result, None, key, aid, 1, *("executing",) * 3)
            assert q(SQ_TRANSITION, args).rowcount == 1
            assert len(q(SQ_SELECT, (key,)).fetchall()) == 1  # the row written, read back
        else:
            second = chain_hash(key, 2, first, "outcome", "committed", aid, at)
            assert q(SQ_OUTCOME_R, (at, result, WRITER, first, second, key, aid)).rowcount == 1
            q(SQ_RECEIPT, (key, 2, first, second, at, "outcome", aid, "committed", ARGS, WRITER))

    yield outcome
    return True


# -- PostgreSQL -----------------------------------------------------------------------------


def pg_tables_sql(schema: str, template: str, variant: str) -> str:
    """The variant's tables in ``schema`` as ctrlrun made them in ``template`` (columns,
    constraints and, for ``receipts``, every index; the others keep the primary key alone)."""
    s, t = f'"{schema}"', f'"{template}"'
    out = f"CREATE SCHEMA IF NOT EXISTS {s};"
    if variant == "receipts":
        return out + "".join(
            f" CREATE TABLE {s}.{n} (LIKE {t}.{n} INCLUDING ALL);" for n in tables(variant)
        )
    return f"""{out} CREATE TABLE {s}.ctrlrun_effects (LIKE {t}.ctrlrun_effects INCLUDING ALL
        EXCLUDING INDEXES); DO $$ BEGIN EXECUTE 'ALTER TABLE {s}.ctrlrun_effects ADD ' ||
        (SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE contype = 'p' AND
        conrelid = '{t}.ctrlrun_effects'::regclass); END $$;"""


class PgSql:
    """The statements of every variant on ``schema``'s tables, whose primary key is the SHA-256
    of the effect key (src/store/postgres/schema.rs)."""

    def __init__(self, schema: str) -> None:
        t, r = f'"{schema}".ctrlrun_effects', f'"{schema}".ctrlrun_receipts'
        d = "sha256(convert_to(%(key)s::text, 'UTF8'))"
        by_key = f"key_digest = {d} AND effect_key = %(key)s"
        now = "COALESCE(%(now)s::int8, (extract(epoch FROM clock_timestamp()) * 1000000)::int8)"
        self.insert_min = f"""INSERT INTO {t} (key_digest, effect_key, state, action_id, attempt,
            created_at, updated_at, lease_expires_at) VALUES ({d}, %(key)s, 'reserved', %(aid)s, 1,
            %(now)s, %(now)s, %(until)s) ON CONFLICT (key_digest) DO NOTHING RETURNING {COLUMNS}"""
        self.outcome_min = f"""UPDATE {t} SET state = 'committed', updated_at = %(now)s,
            lease_expires_at = NULL, result = %(result)s WHERE {by_key} AND action_id = %(aid)s
            AND attempt = 1 AND state = 'reserved'"""
        self.select = f"SELECT {COLUMNS} FROM {t} WHERE {by_key}"
        e_cols = ", ".join(f"e.{c.strip()}" for c in COLUMNS.split(","))
        self.read = f"""SELECT {e_cols}, clock.n FROM (SELECT {now} AS n) clock
            LEFT JOIN {t} e ON e.key_digest = {d} AND e.effect_key = %(key)s"""
        self.insert = f"""INSERT INTO {t} (key_digest, {COLUMNS}) VALUES ({d}, %(key)s, 'executing',
            %(aid)s, 1, %(n)s, %(n)s, %(until)s, NULL, NULL, NULL)
            ON CONFLICT (key_digest) DO NOTHING RETURNING {COLUMNS}"""
        self.transition = f"""UPDATE {t} SET state = %(target)s, updated_at = {now},
            lease_expires_at = CASE WHEN %(keeps)s THEN lease_expires_at ELSE NULL END,
            result = %(result)s, error = %(error)s WHERE {by_key} AND action_id = %(aid)s
            AND (%(attempt)s::int8 IS NULL OR attempt = %(attempt)s)
            AND state = ANY(%(from)s::text[]) RETURNING {COLUMNS}"""
        receipt = f"""INSERT INTO {r} (key_digest, effect_key, chain, seq, prev_hash, hash, at,
            kind, action, action_id, attempt, state, args_digest, writer) SELECT key_digest,
            effect_key, 'effect', receipt_seq, receipt_prev, receipt_hash, updated_at, last_event,
            action, action_id, attempt, state, args_digest, written_by FROM w RETURNING 1"""
        self.reserve = f"""WITH w AS (INSERT INTO {t} (key_digest, effect_key, state, action_id,
            attempt, created_at, updated_at, lease_expires_at, attempt_token, action, holder,
            args_digest, arg_digests, last_event, written_by, receipt_seq, receipt_hash) VALUES
            ({d}, %(key)s, 'executing', %(aid)s, 1, %(now)s, %(now)s, %(until)s, %(token)s,
            'bench.effect', %(writer)s, %(args)s, %(fields)s, 'reservation', %(writer)s, 1,
            %(hash)s) ON CONFLICT (key_digest) DO NOTHING RETURNING *) {receipt}"""
        self.outcome = f"""WITH w AS (UPDATE {t} SET state = 'committed', updated_at = %(now)s,
            lease_expires_at = NULL, result = %(result)s, last_event = 'outcome',
            written_by = %(writer)s, receipt_seq = 2, receipt_prev = %(prev)s,
            receipt_hash = %(hash)s WHERE {by_key} AND action_id = %(aid)s AND attempt = 1
            AND state = 'executing' RETURNING *) {receipt}"""


def pg_steps(sql: PgSql, variant: str, key: str, run):
    """One call on ``key`` as a generator of statements ``(sql, params, in_txn)`` (each sent
    alone, or in its own ``BEGIN … COMMIT``; its first row or None sent back); returns False
    when the key was taken."""
    aid, now = action_id(), now_us()
    if variant in ("min", "autocommit"):
        txn = variant == "min"
        values = {"key": key, "aid": aid, "now": now, "until": now + LEASE_US}
        if (yield sql.insert_min, values, txn) is None:
            return False
        result = str(run())
        yield sql.outcome_min, {"now": now_us(), "result": result, "key": key, "aid": aid}, txn
    elif variant == "same":
        found = yield sql.read, {"key": key, "now": None}, False
        if found[0] is not None:
            return False
        n = found[-1]
        if (
            yield sql.insert, {"key": key, "aid": aid, "n": n, "until": n + LEASE_US}, True
        ) is None:
            return False
        result = str(run())
        outcome = {"target": "committed", "now": None, "keeps": False, "result": result}
        outcome.update({"error": None, "key": key, "aid": aid, "attempt": 1, "from": ["executing"]})
        assert (yield sql.transition, outcome, True) is not None
    else:
        first = chain_hash(key, 1, None, "reservation", "executing", aid, now)
        values = {"key": key, "aid": aid, "now": now, "until": now + LEASE_US, "hash": first}
        values.update(token=os.urandom(16).hex(), writer=WRITER, args=ARGS, fields="key " + ARGS)
        if (yield sql.reserve, values, False) is None:
            return False
        result, at = str(run()), now_us()
        second = chain_hash(key, 2, first, "outcome", "committed", aid, at)
        values = {"now": at, "result": result, "writer": WRITER, "prev": first, "hash": second}
        assert (yield sql.outcome, {**values, "key": key, "aid": aid}, False) is not None
    return True
