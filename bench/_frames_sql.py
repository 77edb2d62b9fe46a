"""PROTOTYPE schema designs for ``bench.frames``: ctrlrun's own statements (src/store/sqlite/
sql.rs: ``INSERT_ONE``, ``TRANSITION``, the receipt triggers of schema version 4) run through
the stdlib's ``sqlite3`` on a schema copied from a file the extension created, with one part
of it replaced per design. ``ctrlrun_receipt_hash`` is registered here as SHA-256 over the
fields (the same length of output: only sizes matter to page counts).

* ``sql-v6``: the schema as it is (a check that these statements write what the extension
  writes);
* ``sql-a``: receipts ``WITHOUT ROWID``, primary key ``(effect_key, id)``, no
  ``ctrlrun_receipts_key``; ``id`` numbers a key's receipts (1, 2, …: the largest of the key's,
  found in the primary key, plus one), so no global order is kept;
* ``sql-b``: ``ctrlrun_effects_state`` partial: only ``reserved``, ``executing``,
  ``ambiguous``;
* ``sql-ab``: both;
* ``sql-c``: the receipts in the effect row's own B-tree: one ``WITHOUT ROWID`` table keyed
  ``(effect_key, n)``, ``n = 0`` the effect's row, ``n >= 1`` its receipts (so a write and its
  receipt share a leaf), the state index over the ``n = 0`` rows, non-terminal only; written
  by two plain statements per transaction (no trigger);
* ``sql-c-full``: as ``sql-c`` with the state index over every state (what ``effects list
  --state committed`` and retention use now);
* ``sql-narrow``: the schema as it is, with the hashes, digests, action ids and tokens bound
  as bytes instead of hex text (the rows' width, nothing else, changes).

Measured (``python -m bench.frames``, 500 calls after 2000, frames per call: reservation +
outcome): sql-v6 4.75 + 6.28 = 11.03 (the extension's exactly); sql-a 4.72 + 6.44 = 11.16;
sql-b 4.48 + 6.28 = 10.76; sql-ab 4.45 + 6.44 = 10.89; sql-c 5.01 + 3.66 = 8.67; sql-c-full
5.27 + 3.66 = 8.92; floor-min 2.65. A 300-byte receipt inserted at a random place in the key
order splits its leaf as often as the effect row does (2.35-2.57 pages per insert, a balance
rewriting up to 3 siblings and the parent), where the rowid table appends at its right edge
(1.08) and the 31-byte index entry rarely splits (1.31): clustering receipts by key costs
more than the index it saves.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import time
from typing import Callable, Dict, List, Optional, Tuple

LEASE_US = 5 * 60 * 1_000_000
HOLDER = f"{os.uname().nodename}:{os.getpid()}"
ARGS = "sha256:" + hashlib.sha256(b"args").hexdigest()

COLUMNS = (
    "effect_key, state, action_id, attempt, created_at, updated_at, lease_expires_at, "
    "result, error, resolved_by, attempt_token, action, holder, args_digest, arg_digests, "
    "approval_id"
)
INSERT_ONE = (
    f"INSERT INTO ctrlrun_effects ({COLUMNS}, last_event, written_by, receipt_seq, "
    "receipt_prev, receipt_hash) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, "
    "?13, ?14, ?15, ?16, ?17, ?18, 1, NULL, ctrlrun_receipt_hash('effect', ?1, NULL, 1, NULL, "
    "?6, ?17, ?12, ?3, ?4, ?2, ?14, ?16, ?10, ?18)) ON CONFLICT (effect_key) DO NOTHING"
)
TRANSITION = (
    "UPDATE ctrlrun_effects SET state = ?1, updated_at = ?2, "
    "lease_expires_at = CASE WHEN ?3 THEN NULL ELSE lease_expires_at END, "
    "result = ?4, error = ?5, last_event = ?12, written_by = ?13, "
    "receipt_seq = COALESCE(receipt_seq, 0) + 1, receipt_prev = receipt_hash, "
    "receipt_hash = ctrlrun_receipt_hash('effect', effect_key, NULL, "
    "COALESCE(receipt_seq, 0) + 1, receipt_hash, ?2, ?12, action, action_id, attempt, ?1, "
    "args_digest, approval_id, resolved_by, ?13) "
    "WHERE effect_key = ?6 AND action_id = ?7 AND (?8 IS NULL OR attempt = ?8) "
    "AND state IN (?9, ?10, ?11)"
)
RECEIPT_FIELDS = (
    "chain, effect_key, request_id, seq, prev_hash, hash, at, kind, action, action_id, "
    "attempt, state, args_digest, approval_id, actor, writer"
)
TRIGGER_VALUES = (
    "'effect', NEW.effect_key, NULL, NEW.receipt_seq, NEW.receipt_prev, NEW.receipt_hash, "
    "NEW.updated_at, NEW.last_event, NEW.action, NEW.action_id, NEW.attempt, NEW.state, "
    "NEW.args_digest, NEW.approval_id, NEW.resolved_by, NEW.written_by"
)
NON_TERMINAL = "state IN ('reserved', 'executing', 'ambiguous')"


def receipt_hash(*fields: object) -> str:
    text = "".join("~" if f is None else f"{len(str(f))}:{f}" for f in fields)
    return hashlib.sha256(text.encode()).hexdigest()


def receipt_hash_binary(*fields: object) -> bytes:
    """``receipt_hash`` as the 32 bytes of the digest, not 64 hex digits (design ``narrow``)."""
    text = "".join("~" if f is None else f"{len(str(f))}:{f}" for f in fields)
    return hashlib.sha256(text.encode()).digest()


def v6_schema(template: str) -> List[Tuple[str, str, str]]:
    """(type, name, sql) of every object of a new file of the extension's, in creation order."""
    if not os.path.exists(template):
        import ctrlrun

        ctrlrun.open_store(f"sqlite:///{template}").close()
    with sqlite3.connect(template) as c:
        return c.execute(
            "SELECT type, name, sql FROM sqlite_schema WHERE sql IS NOT NULL ORDER BY rowid"
        ).fetchall()


def receipts_clustered() -> Dict[str, Optional[str]]:
    """(a): receipts clustered by key, numbered per key, no separate index."""
    next_id = (
        "(SELECT COALESCE(max(id), 0) + 1 FROM ctrlrun_receipts WHERE effect_key = NEW.effect_key)"
    )
    trig = (
        "CREATE TRIGGER {name} AFTER {op} ON ctrlrun_effects WHEN {when} BEGIN "
        f"INSERT INTO ctrlrun_receipts (id, {RECEIPT_FIELDS}) VALUES ({next_id}, "
        f"{TRIGGER_VALUES}); END"
    )
    return {
        "ctrlrun_receipts": (
            "CREATE TABLE ctrlrun_receipts (id INTEGER NOT NULL, chain TEXT NOT NULL, "
            "effect_key TEXT NOT NULL, request_id TEXT, seq INTEGER NOT NULL, prev_hash TEXT, "
            "hash TEXT NOT NULL, at INTEGER NOT NULL, kind TEXT NOT NULL, action TEXT, "
            "action_id TEXT, attempt INTEGER, state TEXT NOT NULL, args_digest TEXT, "
            "approval_id TEXT, actor TEXT, writer TEXT, PRIMARY KEY (effect_key, id)) "
            "WITHOUT ROWID"
        ),
        "ctrlrun_receipts_key": None,
        "ctrlrun_effects_receipt_insert": trig.format(
            name="ctrlrun_effects_receipt_insert", op="INSERT", when="NEW.receipt_hash IS NOT NULL"
        ),
        "ctrlrun_effects_receipt_update": trig.format(
            name="ctrlrun_effects_receipt_update",
            op="UPDATE",
            when="NEW.receipt_hash IS NOT OLD.receipt_hash",
        ),
        # the approvals' triggers would number the same way; no protected call writes them
        "ctrlrun_approvals_receipt_insert": None,
        "ctrlrun_approvals_receipt_update": None,
    }


def state_partial() -> Dict[str, Optional[str]]:
    """(b): the state index over non-terminal rows only."""
    return {
        "ctrlrun_effects_state": (
            "CREATE INDEX ctrlrun_effects_state ON ctrlrun_effects (state, created_at) "
            f"WHERE {NON_TERMINAL}"
        )
    }


def open_triggered(path: str, sync: str, replace: Dict[str, Optional[str]], narrow: bool = False):
    template = os.path.join(os.path.dirname(path), "template-v6.db")
    objects = v6_schema(template)
    conn = sqlite3.connect(path, isolation_level=None, timeout=30.0)
    assert conn.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    conn.execute(f"PRAGMA synchronous={sync}")
    hasher = receipt_hash_binary if narrow else receipt_hash
    conn.create_function("ctrlrun_receipt_hash", 15, hasher, deterministic=True)
    conn.execute("BEGIN IMMEDIATE")
    for _, name, sql in objects:
        sql = replace.get(name, sql)
        if sql is not None:
            conn.execute(sql)
    conn.execute("COMMIT")
    return conn


def txn(conn, body):
    conn.execute("BEGIN IMMEDIATE")
    try:
        value = body()
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return value


def now_us() -> int:
    return time.time_ns() // 1000


def triggered_design(replace: Dict[str, Optional[str]], narrow: bool = False):
    """ctrlrun's reservation (SELECT, INSERT_ONE) and outcome (TRANSITION, SELECT). ``narrow``:
    the same statements and schema with the digests and ids bound as bytes (a hash 32 bytes,
    an action id and a token 16) instead of hex text: how much row width costs."""
    args_digest = hashlib.sha256(b"args").digest() if narrow else ARGS
    arg_digests = b"key " + args_digest if narrow else "key " + ARGS

    def open_design(path: str, sync: str):
        conn = open_triggered(path, sync, replace, narrow)

        def call(key: str, mark: Callable[[], None]) -> None:
            key = "bench:" + key
            aid = os.urandom(16) if narrow else "act_" + os.urandom(16).hex()

            def reserve():
                assert (
                    conn.execute(
                        f"SELECT {COLUMNS} FROM ctrlrun_effects WHERE effect_key = ?1", (key,)
                    ).fetchone()
                    is None
                )
                now = now_us()
                row = (key, "executing", aid, 1, now, now, now + LEASE_US, None, None, None)
                token = os.urandom(16) if narrow else os.urandom(16).hex()
                row += (token, "bench.effect", HOLDER, args_digest, arg_digests, None)
                assert conn.execute(INSERT_ONE, (*row, "reservation", HOLDER)).rowcount == 1

            txn(conn, reserve)
            mark()

            def outcome():
                args = ("committed", now_us(), True, "1", None, key, aid, 1)
                args += ("executing", "executing", "executing", "outcome", HOLDER)
                assert conn.execute(TRANSITION, args).rowcount == 1
                conn.execute(f"SELECT {COLUMNS} FROM ctrlrun_effects WHERE effect_key = ?1", (key,))

            txn(conn, outcome)

        return call, conn.close

    return open_design


# -- (c): the receipts in the effect row's B-tree ------------------------------------------

C_TABLE = """
CREATE TABLE ctrlrun_chain (
    effect_key TEXT NOT NULL, n INTEGER NOT NULL,   -- 0: the effect; 1, 2, ...: its receipts
    state TEXT NOT NULL, action_id TEXT, attempt INTEGER, created_at INTEGER, at INTEGER,
    lease_expires_at INTEGER, result TEXT, error TEXT, resolved_by TEXT, attempt_token TEXT,
    action TEXT, holder TEXT, args_digest TEXT, arg_digests TEXT, approval_id TEXT,
    kind TEXT, writer TEXT, seq INTEGER, prev_hash TEXT, hash TEXT, chain TEXT,
    request_id TEXT,
    PRIMARY KEY (effect_key, n)
) WITHOUT ROWID
"""
C_HEAD = (
    "INSERT INTO ctrlrun_chain (effect_key, n, state, action_id, attempt, created_at, at, "
    "lease_expires_at, attempt_token, action, holder, args_digest, arg_digests, kind, writer, "
    "seq, hash) VALUES (?1, 0, 'executing', ?2, 1, ?3, ?3, ?4, ?5, 'bench.effect', ?6, ?7, ?8, "
    "'reservation', ?6, 1, ?9) ON CONFLICT DO NOTHING"
)
C_RECEIPT = (
    "INSERT INTO ctrlrun_chain (effect_key, n, chain, seq, prev_hash, hash, at, kind, action, "
    "action_id, attempt, state, args_digest, writer) VALUES (?1, ?2, 'effect', ?2, ?3, ?4, ?5, "
    "?6, 'bench.effect', ?7, 1, ?8, ?9, ?10)"
)
C_OUTCOME = (
    "UPDATE ctrlrun_chain SET state = 'committed', at = ?1, lease_expires_at = NULL, "
    "result = ?2, kind = 'outcome', writer = ?3, seq = 2, prev_hash = ?4, hash = ?5 "
    "WHERE effect_key = ?6 AND n = 0 AND action_id = ?7 AND attempt = 1 AND state = 'executing'"
)


def chain_design(index_where: str):
    def open_design(path: str, sync: str):
        conn = sqlite3.connect(path, isolation_level=None, timeout=30.0)
        assert conn.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
        conn.execute(f"PRAGMA synchronous={sync}")
        conn.execute(C_TABLE)
        conn.execute(
            "CREATE INDEX ctrlrun_chain_state ON ctrlrun_chain (state, created_at) "
            f"WHERE {index_where}"
        )

        def call(key: str, mark: Callable[[], None]) -> None:
            key = "bench:" + key
            aid = "act_" + os.urandom(16).hex()
            now = now_us()
            first = receipt_hash(key, 1, None, "reservation", "executing", aid, now)

            def reserve():
                token = os.urandom(16).hex()
                head = (key, aid, now, now + LEASE_US, token, HOLDER, ARGS, "key " + ARGS, first)
                assert conn.execute(C_HEAD, head).rowcount == 1
                r = (key, 1, None, first, now, "reservation", aid, "executing", ARGS, HOLDER)
                conn.execute(C_RECEIPT, r)

            txn(conn, reserve)
            mark()

            def outcome():
                at = now_us()
                second = receipt_hash(key, 2, first, "outcome", "committed", aid, at)
                args = (at, "1", HOLDER, first, second, key, aid)
                assert conn.execute(C_OUTCOME, args).rowcount == 1
                r = (key, 2, first, second, at, "outcome", aid, "committed", ARGS, HOLDER)
                conn.execute(C_RECEIPT, r)

            txn(conn, outcome)

        return call, conn.close

    return open_design


DESIGNS = {
    "sql-v6": triggered_design({}),
    "sql-a": triggered_design(receipts_clustered()),
    "sql-b": triggered_design(state_partial()),
    "sql-ab": triggered_design({**receipts_clustered(), **state_partial()}),
    "sql-c": chain_design(f"n = 0 AND {NON_TERMINAL}"),
    "sql-c-full": chain_design("n = 0"),
    "sql-narrow": triggered_design({}, narrow=True),
}
