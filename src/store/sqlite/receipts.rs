//! Reading and verifying receipts in the SQLite store (the triggers of schema version 4 write
//! them: see [`crate::receipt`]).

use rusqlite::{Connection, Row};

use super::SqliteStore;
use crate::error::{Error, Result};
use crate::receipt::{Head, Receipt, Verification, Verifier};
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

/// Every row's chain head, effects then approval requests.
fn heads(c: &Connection) -> rusqlite::Result<Vec<Head>> {
    let mut out = Vec::new();
    for (is_approval, sql) in [
        (
            false,
            "SELECT effect_key, receipt_seq, receipt_hash FROM ctrlrun_effects \
             WHERE receipt_hash IS NOT NULL",
        ),
        (
            true,
            "SELECT request_id, receipt_seq, receipt_hash FROM ctrlrun_approvals \
             WHERE receipt_hash IS NOT NULL",
        ),
    ] {
        let mut stmt = c.prepare(sql)?;
        let rows = stmt.query_map([], |r| Ok(((is_approval, r.get(0)?), r.get(1)?, r.get(2)?)))?;
        for row in rows {
            out.push(row?);
        }
    }
    Ok(out)
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
            let mut stmt = c.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM ctrlrun_receipts WHERE (?1 IS NULL OR effect_key = ?1) \
                 ORDER BY id DESC LIMIT ?2"
            ))?;
            let rows = stmt.query_map(rusqlite::params![key, limit], read)?;
            rows.collect::<rusqlite::Result<Vec<_>>>()
        })?;
        found.reverse();
        Ok(found)
    }

    fn verify_receipts(&self) -> Result<Verification> {
        self.receipts_read(|c| {
            let heads = heads(c)?; // first: receipts read after may only be newer
            let mut verifier = Verifier::new();
            let mut stmt = c.prepare(&format!(
                "SELECT {COLUMNS} FROM ctrlrun_receipts ORDER BY id"
            ))?;
            let mut rows = stmt.query([])?;
            while let Some(row) = rows.next()? {
                verifier.add(&read(row)?);
            }
            Ok(verifier.finish(heads))
        })
    }
}
