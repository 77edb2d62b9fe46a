//! Reading and verifying receipts in the PostgreSQL store (the triggers of schema version 4
//! write them: see [`crate::receipt`]).

use tokio_postgres::types::Type;
use tokio_postgres::Row;

use super::client::{Client, PgResult};
use super::PostgresStore;
use crate::error::{Error, Result};
use crate::receipt::{Head, Receipt, Verification, Verifier};
use crate::store::Receipts;

const COLUMNS: &str = "id, chain, effect_key, request_id, seq, prev_hash, hash, at, kind, \
                       action, action_id, attempt, state, args_digest, approval_id, actor, writer";

fn read(row: &Row) -> Receipt {
    Receipt {
        id: row.get(0),
        chain: row.get(1),
        effect_key: row.get(2),
        request_id: row.get(3),
        seq: row.get(4),
        prev_hash: row.get(5),
        hash: row.get(6),
        at: row.get(7),
        kind: row.get(8),
        action: row.get(9),
        action_id: row.get(10),
        attempt: row.get(11),
        state: row.get(12),
        args_digest: row.get(13),
        approval_id: row.get(14),
        actor: row.get(15),
        writer: row.get(16),
    }
}

impl PostgresStore {
    fn receipts_read<T>(
        &self,
        body: impl FnMut(&mut Client, &super::sql::Sql) -> PgResult<T>,
    ) -> Result<T> {
        self.read("receipts", "", body)?.map_err(|e| {
            Error::Store(format!(
                "reading receipts from the PostgreSQL store {} failed: {}",
                self.description,
                e.describe()
            ))
        })
    }
}

impl Receipts for PostgresStore {
    fn list_receipts(&self, key: Option<&str>, limit: Option<u64>) -> Result<Vec<Receipt>> {
        let limit = limit.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        let rows = self.receipts_read(|c, sql| {
            c.query_typed(
                &format!(
                    "SELECT {COLUMNS} FROM {r} WHERE $1::text IS NULL OR \
                     (key_digest = pg_catalog.sha256(pg_catalog.convert_to($1::text, 'UTF8')) \
                     AND effect_key = $1) ORDER BY id DESC LIMIT $2",
                    r = sql.receipts
                ),
                &[(&key, Type::TEXT), (&limit, Type::INT8)],
            )
        })?;
        Ok(rows.iter().rev().map(read).collect())
    }

    fn verify_receipts(&self) -> Result<Verification> {
        // The heads first: receipts read after them may only be newer.
        let heads = self.receipts_read(|c, sql| {
            c.query_typed(
                &format!(
                    "SELECT false, effect_key, receipt_seq, receipt_hash FROM {e} \
                     WHERE receipt_hash IS NOT NULL \
                     UNION ALL SELECT true, request_id, receipt_seq, receipt_hash FROM {a} \
                     WHERE receipt_hash IS NOT NULL",
                    e = sql.effects,
                    a = sql.approvals
                ),
                &[],
            )
        })?;
        let heads: Vec<Head> = heads
            .iter()
            .map(|r| ((r.get(0), r.get(1)), r.get(2), r.get(3)))
            .collect();
        let rows = self.receipts_read(|c, sql| {
            c.query_typed(
                &format!("SELECT {COLUMNS} FROM {r} ORDER BY id", r = sql.receipts),
                &[],
            )
        })?;
        let mut verifier = Verifier::new();
        for row in &rows {
            verifier.add(&read(row));
        }
        Ok(verifier.finish(heads))
    }
}
