"""The SQLite floor of _floor_worker.py (stdlib ``sqlite3``), and what both floors share: the
columns, the lease, the clock, the action id and the trivial executor."""

from __future__ import annotations

import os
import time

import _common
import _floor_receipts

COLUMNS = (
    "effect_key, state, action_id, attempt, created_at, updated_at, lease_expires_at, "
    "result, error, resolved_by"
)

LEASE_US = 5 * 60 * 1_000_000


def now_us() -> int:
    return time.time_ns() // 1000


def action_id() -> str:
    return "act_" + os.urandom(16).hex()


def executor(marks, key):
    if marks:
        _common.mark(marks, key)
    return 1


# -- SQLite ---------------------------------------------------------------------------------

SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS ctrlrun_effects (
    effect_key       TEXT    NOT NULL PRIMARY KEY,
    state            TEXT    NOT NULL CHECK (state IN
                         ('reserved', 'executing', 'committed', 'failed', 'ambiguous')),
    action_id        TEXT    NOT NULL,
    attempt          INTEGER NOT NULL CHECK (attempt >= 1),
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    lease_expires_at INTEGER,
    result           TEXT,
    error            TEXT,
    resolved_by      TEXT
) WITHOUT ROWID;
"""

SQ_INSERT_MIN = (
    "INSERT INTO ctrlrun_effects (effect_key, state, action_id, attempt, created_at, updated_at, "
    "lease_expires_at) VALUES (?1, 'reserved', ?2, 1, ?3, ?3, ?4) "
    "ON CONFLICT (effect_key) DO NOTHING"
)
SQ_OUTCOME_MIN = (
    "UPDATE ctrlrun_effects SET state = 'committed', updated_at = ?1, lease_expires_at = NULL, "
    "result = ?2 WHERE effect_key = ?3 AND action_id = ?4 AND attempt = 1 AND state = 'reserved'"
)
# ctrlrun's statements (src/store/sqlite/sql.rs: select, insert, transition_cas).
SQ_SELECT = f"SELECT {COLUMNS} FROM ctrlrun_effects WHERE effect_key = ?1"
SQ_INSERT = (
    f"INSERT INTO ctrlrun_effects ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
)
SQ_TRANSITION = (
    "UPDATE ctrlrun_effects SET state = ?1, updated_at = ?2, "
    "lease_expires_at = CASE WHEN ?3 THEN lease_expires_at ELSE NULL END, "
    "result = ?4, error = ?5 "
    "WHERE effect_key = ?6 AND action_id = ?7 AND (?8 IS NULL OR attempt = ?8) "
    "AND state IN (?9, ?10, ?11)"
)


def sqlite_open(cfg: dict):
    import sqlite3

    conn = sqlite3.connect(cfg["path"], isolation_level=None, timeout=30.0, check_same_thread=False)
    mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    assert mode.lower() == "wal", mode
    conn.execute(f"PRAGMA synchronous={cfg.get('synchronous', 'FULL')}")
    conn.executescript(
        _floor_receipts.SQLITE_SCHEMA if cfg.get("variant") == "receipts" else SQLITE_SCHEMA
    )
    return conn


def sqlite_txn(conn, body):
    conn.execute("BEGIN IMMEDIATE")
    try:
        value = body()
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return value


def sqlite_steps(conn, variant: str, key: str, marks=None):
    """A call of ``min`` or ``receipts`` as a generator of transaction bodies
    (``_floor_receipts.drive``)."""
    aid = action_id()
    if variant == "receipts":
        return _floor_receipts.sqlite_steps(conn, key, aid, lambda: executor(marks, key))
    assert variant == "min", variant

    def steps():
        now = now_us()
        won = (
            yield lambda: conn.execute(SQ_INSERT_MIN, (key, aid, now, now + LEASE_US)).rowcount == 1
        )
        if not won:
            return False
        result = executor(marks, key)
        yield lambda: conn.execute(SQ_OUTCOME_MIN, (now_us(), str(result), key, aid))
        return True

    return steps()


def sqlite_call(conn, variant: str, key: str, marks=None) -> bool:
    """One protected call on ``key``; False when the key was already taken."""
    if variant in ("min", "receipts"):
        return _floor_receipts.drive(
            sqlite_steps(conn, variant, key, marks), lambda body: sqlite_txn(conn, body)
        )
    aid = action_id()

    def reserve():
        if conn.execute(SQ_SELECT, (key,)).fetchone() is not None:
            return False
        now = now_us()
        conn.execute(
            SQ_INSERT, (key, "executing", aid, 1, now, now, now + LEASE_US, None, None, None)
        )
        return True

    if not sqlite_txn(conn, reserve):
        return False

    def transition(target, keeps_lease, result, from_states):
        def body():
            cur = conn.execute(
                SQ_TRANSITION,
                (target, now_us(), keeps_lease, result, None, key, aid, 1, *from_states),
            )
            assert cur.rowcount == 1
            rows = conn.execute(SQ_SELECT, (key,)).fetchall()  # the row written, read back
            assert len(rows) == 1

        sqlite_txn(conn, body)

    result = executor(marks, key)
    transition("committed", False, str(result), ("executing", "executing", "executing"))
    return True
