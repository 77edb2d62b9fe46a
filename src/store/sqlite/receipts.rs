//! Reading and verifying receipts in the SQLite store (the triggers of schema version 4 write
//! them: see [`crate::receipt`]).

use rusqlite::{Connection, Row};

use super::SqliteStore;
use crate::error::{Error, Result};
use crate::receipt::{Receipt, Verification, Verifier};
use crate::store::Receipts;

const COLUMNS: &str = "id, chain, effect_key, request_id, seq, prev_hash, hash, at, kind, \
                       action, action_id, attempt, state, args_digest, approval_id, actor, writer";

fn read(row: &Row<'_>) -> rusqlite::Result<Receipt> {
    Ok(Receipt {
        id: row.get(0)?,
        chain: row.get(1)?,
        effect_key: row.get(2)?,
        request_id: row.get(3)?,
        seq: row.get(4)?,
        prev_hash: row.get(5)?,
        hash: row.get(6)?,
        at: row.get(7)?,
        kind: row.get(8)?,
        action: row.get(9)?,
        action_id: row.get(10)?,
        attempt: row.get(11)?,
        state: row.get(12)?,
        args_digest: row.get(13)?,
        approval_id: row.get(14)?,
        actor: row.get(15)?,
        writer: row.get(16)?,
    })
}

/// Every row's chain head, as a receipt of the row (see [`Verifier::finish`]).
const HEADS: &str = "SELECT 0, 'effect', effect_key, NULL, receipt_seq, receipt_prev, \
     receipt_hash, updated_at, last_event, action, action_id, attempt, state, args_digest, \
     approval_id, resolved_by, written_by FROM ctrlrun_effects WHERE receipt_hash IS NOT NULL \
     UNION ALL SELECT 0, 'approval', effect_key, request_id, receipt_seq, receipt_prev, \
     receipt_hash, updated_at, last_event, action, used_by, NULL, state, args_digest, \
     request_id, decided_by, written_by FROM ctrlrun_approvals WHERE receipt_hash IS NOT NULL";

/// The heads and every receipt, read in the snapshot of the caller's transaction.
fn verify_in(c: &Connection) -> rusqlite::Result<Verification> {
    let heads = c
        .prepare(HEADS)?
        .query_map([], read)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut verifier = Verifier::new();
    let mut stmt = c.prepare(&format!(
        "SELECT {COLUMNS} FROM ctrlrun_receipts ORDER BY id"
    ))?;
    let mut rows = stmt.query([])?;
    while let Some(row) = rows.next()? {
        verifier.add(&read(row)?);
    }
    Ok(verifier.finish(heads))
}

impl SqliteStore {
    fn receipts_read<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T> {
        let conn = self.read_conn()?;
        f(&conn.conn).map_err(|e| {
            Error::Store(format!(
                "reading receipts from the SQLite store at {} failed: {e}",
                self.opts.path.display()
            ))
        })
    }
}

impl Receipts for SqliteStore {
    fn list_receipts(&self, key: Option<&str>, limit: Option<u64>) -> Result<Vec<Receipt>> {
        let limit = limit.map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
        let mut found = self.receipts_read(|c| {
            let rows = match key {
                Some(key) => c
                    .prepare_cached(&format!(
                        "SELECT {COLUMNS} FROM ctrlrun_receipts WHERE effect_key = ?1 \
                         ORDER BY id DESC LIMIT ?2"
                    ))?
                    .query_map(rusqlite::params![key, limit], read)?
                    .collect::<rusqlite::Result<Vec<_>>>(),
                None => c
                    .prepare_cached(&format!(
                        "SELECT {COLUMNS} FROM ctrlrun_receipts ORDER BY id DESC LIMIT ?1"
                    ))?
                    .query_map([limit], read)?
                    .collect::<rusqlite::Result<Vec<_>>>(),
            };
            rows
        })?;
        found.reverse();
        Ok(found)
    }

    fn verify_receipts(&self) -> Result<Verification> {
        let mut conn = self.read_conn()?;
        // One read transaction: the heads and the receipts from one snapshot of the file.
        let read = (|| {
            conn.conn.execute_batch("BEGIN")?;
            let found = verify_in(&conn.conn);
            conn.conn.execute_batch("COMMIT")?;
            found
        })();
        if !conn.conn.is_autocommit() && conn.conn.execute_batch("ROLLBACK").is_err() {
            conn.broken = true;
        }
        read.map_err(|e| {
            Error::Store(format!(
                "reading receipts from the SQLite store at {} failed: {e}",
                self.opts.path.display()
            ))
        })
    }
}
