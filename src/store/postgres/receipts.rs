//! Reading and verifying receipts in the PostgreSQL store (the triggers of schema version 4
//! write them: see [`crate::receipt`]).

use tokio_postgres::types::Type;
use tokio_postgres::Row;

use super::client::{Client, PgResult};
use super::PostgresStore;
use crate::error::{Error, Result};
use crate::receipt::{Receipt, Verification, Verifier};
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
        key.map(super::check_key).transpose()?;
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
        let mut conn = self.conn("verify_receipts", "*")?;
        let sql = &self.sql;
        // One snapshot for the heads and every receipt; receipts read in pages by id, so a
        // large store is never held in memory at once.
        let mut run = || -> PgResult<Verification> {
            let c = &mut conn.client;
            c.batch_execute(
                "START TRANSACTION",
                "START TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY",
            )?;
            let heads = c.query_typed(
                &format!(
                    "SELECT 0::int8, 'effect', effect_key, NULL::text, receipt_seq, \
                     receipt_prev, receipt_hash, updated_at, last_event, action, action_id, \
                     attempt, state, args_digest, approval_id, resolved_by, written_by \
                     FROM {e} WHERE receipt_hash IS NOT NULL UNION ALL \
                     SELECT 0::int8, 'approval', effect_key, request_id, receipt_seq, \
                     receipt_prev, receipt_hash, updated_at, last_event, action, used_by, \
                     NULL::int8, state, args_digest, request_id, decided_by, written_by \
                     FROM {a} WHERE receipt_hash IS NOT NULL",
                    e = sql.effects,
                    a = sql.approvals
                ),
                &[],
            )?;
            let page = format!(
                "SELECT {COLUMNS} FROM {r} WHERE id > $1 ORDER BY id LIMIT 5000",
                r = sql.receipts
            );
            let mut verifier = Verifier::new();
            let mut after = 0i64;
            loop {
                let rows = c.query_typed(&page, &[(&after, Type::INT8)])?;
                for row in &rows {
                    let receipt = read(row);
                    after = receipt.id;
                    verifier.add(&receipt);
                }
                if rows.len() < 5000 || verifier.is_broken() {
                    break;
                }
            }
            c.batch_execute("COMMIT", "COMMIT")?;
            Ok(verifier.finish(heads.iter().map(read)))
        };
        let found = run();
        if found.is_err() {
            conn.broken = true; // it may be left inside the transaction
        }
        found.map_err(|e| {
            Error::Store(format!(
                "reading receipts from the PostgreSQL store {} failed: {}",
                self.description,
                e.describe()
            ))
        })
    }
}
