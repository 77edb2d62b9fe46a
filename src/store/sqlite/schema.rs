//! The SQLite store's tables: version 1's, the migrations that bring a file to the version
//! this build writes, and the check at open.

use std::path::Path;

use rusqlite::Connection;

use super::conn::open_error;
use crate::error::{Error, Result};

/// The schema version this build writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = 8;

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
pub(super) const MIGRATIONS: [&str; 7] = [
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
    // 7 -> 8: the indexes behind the console's and `approvals list`'s pages (see
    // `oversight/listing.rs`): one state's requests in request order, every request newest
    // first, the live pending or granted ones by expiry, and one action's or one asker's in
    // order.
    "CREATE INDEX ctrlrun_approvals_state ON ctrlrun_approvals (state, requested_at, request_id);
     CREATE INDEX ctrlrun_approvals_time ON ctrlrun_approvals (requested_at, request_id);
     CREATE INDEX ctrlrun_approvals_expiry ON ctrlrun_approvals (state, expires_at);
     CREATE INDEX ctrlrun_approvals_action
         ON ctrlrun_approvals (action, requested_at, request_id);
     CREATE INDEX ctrlrun_approvals_asker
         ON ctrlrun_approvals (requested_by, requested_at, request_id);",
];

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

/// Create the table on a new file, bring an older one to [`SCHEMA_VERSION`] (one write
/// transaction), refuse a newer one.
pub(super) fn init_schema(conn: &Connection, path: &Path) -> Result<()> {
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|e| open_error(path, e))?;
    if version == SCHEMA_VERSION {
        return Ok(());
    }
    if version > SCHEMA_VERSION {
        return Err(Error::Store(format!(
            "the SQLite store at {} has schema version {version}, newer than this ctrlrun \
             understands ({SCHEMA_VERSION}); upgrade ctrlrun",
            path.display()
        )));
    }
    conn.execute_batch("BEGIN IMMEDIATE")
        .map_err(|e| open_error(path, e))?;
    let created = (|| -> rusqlite::Result<()> {
        // Read again under the write lock: another process may have got here first.
        let v: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if v == 0 {
            conn.execute_batch(SCHEMA)?; // version 1, then every step below
        }
        for step in MIGRATIONS.iter().skip((v - 1).max(0) as usize) {
            conn.execute_batch(step)?;
        }
        if v < SCHEMA_VERSION {
            conn.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        }
        conn.execute_batch("COMMIT")
    })();
    if let Err(e) = created {
        let _ = conn.execute_batch("ROLLBACK");
        return Err(open_error(path, e));
    }
    Ok(())
}
