//! The SQLite store's schema, statements and row decoding.

use rusqlite::{params, params_from_iter, Connection, OptionalExtension, Row};

use crate::planner::{Expected, Transition};
use crate::receipt::Event;
use crate::record::{EffectRecord, Micros};
use crate::store::cold::rows::{self, effect_columns, text, Value};

/// The schema version this build writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = 7;

/// The triggers that refuse a write to `$table` that sets no receipt (schema version 4).
macro_rules! guard_triggers {
    ($table:literal) => {
        concat!(
            "CREATE TRIGGER ",
            $table,
            "_receipt_required_insert BEFORE INSERT ON ",
            $table,
            " WHEN NEW.receipt_hash IS NULL BEGIN SELECT RAISE(ABORT, 'ctrlrun: this write sets \
             no receipt: the process runs a ctrlrun older than the store schema (version 4); \
             restart it with the current ctrlrun'); END;
             CREATE TRIGGER ",
            $table,
            "_receipt_required_update BEFORE UPDATE ON ",
            $table,
            " WHEN NEW.receipt_seq IS OLD.receipt_seq BEGIN SELECT RAISE(ABORT, 'ctrlrun: this \
             write sets no receipt: the process runs a ctrlrun older than the store schema \
             (version 4); restart it with the current ctrlrun'); END;"
        )
    };
}

/// The triggers that append a written row of `$table` to `ctrlrun_receipts` (its `$values`).
macro_rules! receipt_triggers {
    ($table:literal, $values:literal) => {
        concat!(
            "CREATE TRIGGER ", $table, "_receipt_insert AFTER INSERT ON ", $table,
            " WHEN NEW.receipt_hash IS NOT NULL BEGIN INSERT INTO ctrlrun_receipts (chain, \
             effect_key, request_id, seq, prev_hash, hash, at, kind, action, action_id, attempt, \
             state, args_digest, approval_id, actor, writer) VALUES (", $values, "); END;
             CREATE TRIGGER ", $table, "_receipt_update AFTER UPDATE ON ", $table,
            " WHEN NEW.receipt_hash IS NOT OLD.receipt_hash BEGIN INSERT INTO ctrlrun_receipts \
             (chain, effect_key, request_id, seq, prev_hash, hash, at, kind, action, action_id, \
             attempt, state, args_digest, approval_id, actor, writer) VALUES (", $values, "); END;"
        )
    };
}

/// How each older version is brought to the next (`MIGRATIONS[v - 1]` takes version `v` to
/// `v + 1`), all in the transaction that also writes the new version. A new file gets
/// [`SCHEMA`] (version 1) and then every step.
pub(super) const MIGRATIONS: [&str; 6] = [
    // 1 -> 2: the per-attempt token (rows written before keep NULL).
    "ALTER TABLE ctrlrun_effects ADD COLUMN attempt_token TEXT;",
    // 2 -> 3: who holds a key and with which arguments; approvals.
    "ALTER TABLE ctrlrun_effects ADD COLUMN action TEXT;
     ALTER TABLE ctrlrun_effects ADD COLUMN holder TEXT;         -- host:pid
     ALTER TABLE ctrlrun_effects ADD COLUMN args_digest TEXT;
     ALTER TABLE ctrlrun_effects ADD COLUMN arg_digests TEXT;    -- 'name digest' lines
     ALTER TABLE ctrlrun_effects ADD COLUMN approval_id TEXT;
     CREATE TABLE ctrlrun_approvals (
         request_id   TEXT    NOT NULL PRIMARY KEY,
         action       TEXT    NOT NULL,
         args_digest  TEXT    NOT NULL,
         effect_key   TEXT    NOT NULL,
         arguments    TEXT    NOT NULL,   -- JSON: what the approver is shown
         state        TEXT    NOT NULL CHECK (state IN
                          ('pending', 'granted', 'denied', 'used', 'expired')),
         requested_at INTEGER NOT NULL,
         ttl          INTEGER NOT NULL,
         expires_at   INTEGER NOT NULL,
         decided_at   INTEGER,
         decided_by   TEXT,
         note         TEXT,
         used_at      INTEGER,
         used_by      TEXT
     ) WITHOUT ROWID;
     CREATE UNIQUE INDEX ctrlrun_approvals_open
         ON ctrlrun_approvals (action, args_digest, effect_key)
         WHERE state IN ('pending', 'granted');
     CREATE INDEX ctrlrun_approvals_call
         ON ctrlrun_approvals (action, args_digest, effect_key, requested_at);",
    // 3 -> 4: receipts. Each write statement sets its row's chain head (`receipt_*`, hashed by
    // the registered `ctrlrun_receipt_hash`); the AFTER triggers append the written row as a
    // receipt in the same statement, so a receipt exists exactly when its write committed. The
    // BEFORE triggers refuse a write that sets no receipt (a process still running an older
    // ctrlrun after the upgrade), rather than let it leave a gap nobody would see.
    concat!(
        "ALTER TABLE ctrlrun_effects ADD COLUMN last_event TEXT;
         ALTER TABLE ctrlrun_effects ADD COLUMN written_by TEXT;
         ALTER TABLE ctrlrun_effects ADD COLUMN receipt_seq INTEGER;
         ALTER TABLE ctrlrun_effects ADD COLUMN receipt_prev TEXT;
         ALTER TABLE ctrlrun_effects ADD COLUMN receipt_hash TEXT;
         ALTER TABLE ctrlrun_approvals ADD COLUMN updated_at INTEGER;
         ALTER TABLE ctrlrun_approvals ADD COLUMN last_event TEXT;
         ALTER TABLE ctrlrun_approvals ADD COLUMN written_by TEXT;
         ALTER TABLE ctrlrun_approvals ADD COLUMN receipt_seq INTEGER;
         ALTER TABLE ctrlrun_approvals ADD COLUMN receipt_prev TEXT;
         ALTER TABLE ctrlrun_approvals ADD COLUMN receipt_hash TEXT;
         CREATE TABLE ctrlrun_receipts (
             id          INTEGER NOT NULL PRIMARY KEY,
             chain       TEXT    NOT NULL,   -- 'effect' or 'approval'
             effect_key  TEXT    NOT NULL,
             request_id  TEXT,
             seq         INTEGER NOT NULL,
             prev_hash   TEXT,
             hash        TEXT    NOT NULL,
             at          INTEGER NOT NULL,
             kind        TEXT    NOT NULL,
             action      TEXT,
             action_id   TEXT,
             attempt     INTEGER,
             state       TEXT    NOT NULL,
             args_digest TEXT,
             approval_id TEXT,
             actor       TEXT,
             writer      TEXT
         );
         CREATE INDEX ctrlrun_receipts_key ON ctrlrun_receipts (effect_key, id);",
        guard_triggers!("ctrlrun_effects"),
        guard_triggers!("ctrlrun_approvals"),
        receipt_triggers!(
            "ctrlrun_effects",
            "'effect', NEW.effect_key, NULL, NEW.receipt_seq, NEW.receipt_prev, NEW.receipt_hash, \
             NEW.updated_at, NEW.last_event, NEW.action, NEW.action_id, NEW.attempt, NEW.state, \
             NEW.args_digest, NEW.approval_id, NEW.resolved_by, NEW.written_by"
        ),
        receipt_triggers!(
            "ctrlrun_approvals",
            "'approval', NEW.effect_key, NEW.request_id, NEW.receipt_seq, NEW.receipt_prev, \
             NEW.receipt_hash, NEW.updated_at, NEW.last_event, NEW.action, NEW.used_by, NULL, \
             NEW.state, NEW.args_digest, NEW.request_id, NEW.decided_by, NEW.written_by"
        ),
    ),
    // 4 -> 5: the index behind `effects list --state` and retention (see `retention.rs`). The
    // primary key already serves a key prefix. Only the state is indexed: each index costs every
    // protected call's writes, so `--action` and `--limit` alone are not.
    "CREATE INDEX ctrlrun_effects_state ON ctrlrun_effects (state, created_at);
     CREATE INDEX ctrlrun_approvals_open_key ON ctrlrun_approvals (effect_key)
         WHERE state IN ('pending', 'granted');",
    // 5 -> 6: who asked for a request, how many distinct people must grant it and who did;
    // the accounts of the people who decide in the console.
    "ALTER TABLE ctrlrun_approvals ADD COLUMN requested_by TEXT;
     ALTER TABLE ctrlrun_approvals ADD COLUMN approvals_needed INTEGER;
     ALTER TABLE ctrlrun_approvals ADD COLUMN granted_by TEXT;   -- one name per line
     CREATE TABLE ctrlrun_approvers (
         name        TEXT    NOT NULL PRIMARY KEY,
         secret_hash TEXT    NOT NULL,
         created_at  INTEGER NOT NULL,
         updated_at  INTEGER NOT NULL
     ) WITHOUT ROWID;",
    // 6 -> 7: the store's policy (`ctrlrun policy apply`): each action's rule, a floor under
    // every caller's own policy.
    "CREATE TABLE ctrlrun_policy (
         action     TEXT    NOT NULL PRIMARY KEY,
         decision   TEXT    NOT NULL CHECK (decision IN ('allow', 'approve', 'deny')),
         approvals  INTEGER NOT NULL CHECK (approvals BETWEEN 1 AND 10),
         updated_at INTEGER NOT NULL
     ) WITHOUT ROWID;",
];

const SELECT_ONE: &str = concat!(
    "SELECT ",
    effect_columns!(),
    " FROM ctrlrun_effects WHERE effect_key = ?1"
);
/// The chain head a write sets (see [`crate::receipt`]): sequence number, previous hash and
/// hash of the receipt the trigger appends. `$seq` and `$prev` are the head the write replaces;
/// the other fields are the row written, in [`crate::receipt::Receipt::expected_hash`]'s order.
macro_rules! receipt_head {
    ($seq:literal, $prev:literal, $key:literal, $at:literal, $kind:literal, $action:literal,
     $action_id:literal, $attempt:literal, $state:literal, $digest:literal, $approval:literal,
     $actor:literal, $writer:literal) => {
        concat!(
            "receipt_seq = ",
            $seq,
            ", receipt_prev = ",
            $prev,
            ", receipt_hash = ctrlrun_receipt_hash('effect', ",
            $key,
            ", NULL, ",
            $seq,
            ", ",
            $prev,
            ", ",
            $at,
            ", ",
            $kind,
            ", ",
            $action,
            ", ",
            $action_id,
            ", ",
            $attempt,
            ", ",
            $state,
            ", ",
            $digest,
            ", ",
            $approval,
            ", ",
            $actor,
            ", ",
            $writer,
            ")"
        )
    };
}
const INSERT_ONE: &str = concat!(
    "INSERT INTO ctrlrun_effects (",
    effect_columns!(),
    ", last_event, written_by, receipt_seq, receipt_prev, receipt_hash) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, \
     1, NULL, ctrlrun_receipt_hash('effect', ?1, NULL, 1, NULL, ?6, ?17, ?12, ?3, ?4, ?2, ?14, \
     ?16, ?10, ?18)) ON CONFLICT (effect_key) DO NOTHING"
);
/// [`rows::effect_values`] of the row written (`?1` to `?16`), then the expected state, action
/// id and attempt, the event and the writing process.
const COMPARE_AND_SET: &str = concat!(
    "UPDATE ctrlrun_effects SET state = ?2, action_id = ?3, attempt = ?4, created_at = ?5, \
     updated_at = ?6, lease_expires_at = ?7, result = ?8, error = ?9, resolved_by = ?10, \
     attempt_token = ?11, action = ?12, holder = ?13, args_digest = ?14, \
     arg_digests = ?15, approval_id = ?16, last_event = ?20, written_by = ?21, ",
    receipt_head!(
        "COALESCE(receipt_seq, 0) + 1",
        "receipt_hash",
        "?1",
        "?6",
        "?20",
        "?12",
        "?3",
        "?4",
        "?2",
        "?14",
        "?16",
        "?10",
        "?21"
    ),
    " WHERE effect_key = ?1 AND state = ?17 AND action_id = ?18 AND attempt = ?19"
);
const TRANSITION: &str = concat!(
    "UPDATE ctrlrun_effects SET state = ?1, updated_at = ?2, \
     lease_expires_at = CASE WHEN ?3 THEN NULL ELSE lease_expires_at END, \
     result = ?4, error = ?5, last_event = ?12, written_by = ?13, ",
    receipt_head!(
        "COALESCE(receipt_seq, 0) + 1",
        "receipt_hash",
        "effect_key",
        "?2",
        "?12",
        "action",
        "action_id",
        "attempt",
        "?1",
        "args_digest",
        "approval_id",
        "resolved_by",
        "?13"
    ),
    " WHERE effect_key = ?6 AND action_id = ?7 AND (?8 IS NULL OR attempt = ?8) \
     AND state IN (?9, ?10, ?11)"
);

/// Version 1's table; [`MIGRATIONS`] bring it to [`SCHEMA_VERSION`].
pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS ctrlrun_effects (
    effect_key       TEXT    NOT NULL PRIMARY KEY,
    state            TEXT    NOT NULL CHECK (state IN
                         ('reserved', 'executing', 'committed', 'failed', 'ambiguous')),
    action_id        TEXT    NOT NULL,
    attempt          INTEGER NOT NULL CHECK (attempt >= 1),
    created_at       INTEGER NOT NULL,  -- microseconds since the Unix epoch, UTC
    updated_at       INTEGER NOT NULL,
    lease_expires_at INTEGER,
    result           TEXT,              -- JSON
    error            TEXT,
    resolved_by      TEXT
) WITHOUT ROWID;
";

pub(super) fn read_record(row: &Row<'_>) -> rusqlite::Result<EffectRecord> {
    rows::effect(row, 0)
}

pub(super) fn select(conn: &Connection, key: &str) -> rusqlite::Result<Option<EffectRecord>> {
    conn.prepare_cached(SELECT_ONE)?
        .query_row([key], read_record)
        .optional()
}

/// Insert `r` unless the key has a row; the count of rows inserted (0 or 1).
pub(super) fn insert(conn: &Connection, r: &EffectRecord) -> rusqlite::Result<usize> {
    let writer = crate::env::holder();
    write_row(
        conn,
        INSERT_ONE,
        r,
        &[text(Event::Reservation.as_str()), text(&writer)],
    )
}

/// Run `sql` with [`rows::effect_values`] of `r`, then `more`.
fn write_row(
    conn: &Connection,
    sql: &str,
    r: &EffectRecord,
    more: &[Value<'_>],
) -> rusqlite::Result<usize> {
    let values = rows::effect_values(r);
    conn.prepare_cached(sql)?
        .execute(params_from_iter(values.iter().chain(more)))
}

/// Overwrite the whole row if it is still `expected`; returns the number of rows changed.
pub(super) fn compare_and_set(
    conn: &Connection,
    expected: &Expected,
    r: &EffectRecord,
    event: Event,
) -> rusqlite::Result<usize> {
    let writer = crate::env::holder();
    let more = rows::expected_values(expected, event, &writer);
    write_row(conn, COMPARE_AND_SET, r, &more)
}

/// A later transition as one conditional `UPDATE` binding the planner's
/// [`crate::planner::TransitionWrite`]; the row written is read back in the same
/// transaction. (`RETURNING` would build a temporary table on every execution, which costs more
/// than the indexed read.)
pub(super) fn transition_cas(
    conn: &Connection,
    key: &str,
    action_id: &str,
    attempt: Option<i64>,
    t: &Transition,
    now: Micros,
) -> rusqlite::Result<usize> {
    let w = t.write();
    let pick = |i: usize| w.from.get(i).unwrap_or(&w.from[0]).as_str();
    conn.prepare_cached(TRANSITION)?.execute(params![
        w.state.as_str(),
        now,
        w.clear_lease,
        w.result,
        w.error,
        key,
        action_id,
        attempt,
        pick(0),
        pick(1),
        pick(2),
        Event::of_transition(t).as_str(),
        crate::env::holder()
    ])
}

pub(super) fn set_synchronous(conn: &Connection, level: &str) -> rusqlite::Result<()> {
    let sql = if level == "FULL" {
        "PRAGMA synchronous = FULL"
    } else {
        "PRAGMA synchronous = NORMAL"
    };
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}
