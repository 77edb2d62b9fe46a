//! Listing by filter and pruning in the SQLite store (see [`crate::store::retention`]).
//!
//! Schema version 5's indexes serve them: `(state, created_at)` a state's rows in order (and a
//! prune's walk through them); the primary key a prefix, as the range `prefix <= key <
//! prefix_end(prefix)` (`BINARY` order is UTF-8 byte order, which is code point order);
//! `ctrlrun_approvals_open_key` an open approval request of a key. An action name, or a limit
//! alone, has no index of its own (each index costs every protected call): it narrows what
//! the others select, or reads the table.

use rusqlite::types::Value;
use rusqlite::{params, Connection};

use super::sql::read_record;
use super::store::SqliteStore;
use crate::env::{holder, now_micros};
use crate::error::{Error, Result};
use crate::record::{EffectRecord, EffectState, Micros};
use crate::store::api::Retention;
use crate::store::recovery::{Commit, Reread};
use crate::store::retention::PruneBatch;
use crate::store::retention::{batch_unknown, prefix_end, Cursor, EffectFilter, Prune, PruneStep};
use crate::store::rows::EFFECT_COLUMNS;

/// The listing `f` asks for and its parameters.
fn list_query(f: &EffectFilter<'_>) -> (String, Vec<Value>) {
    let mut clauses: Vec<&str> = Vec::new();
    let mut values: Vec<Value> = Vec::new();
    if let Some(state) = f.state {
        clauses.push("state = ?");
        values.push(Value::Text(state.as_str().into()));
    }
    if let Some(prefix) = f.prefix {
        clauses.push("effect_key >= ?");
        values.push(Value::Text(prefix.into()));
        if let Some(end) = prefix_end(prefix) {
            clauses.push("effect_key < ?");
            values.push(Value::Text(end));
        }
    }
    if let Some(action) = f.action {
        clauses.push("action = ?");
        values.push(Value::Text(action.into()));
    }
    let (order, after) = f.order();
    let page = format!("(created_at, effect_key) {after} (?, ?)");
    if let Some((at, key)) = f.after {
        clauses.push(&page);
        values.push(Value::Integer(at));
        values.push(Value::Text(key.into()));
    }
    let filter = if clauses.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", clauses.join(" AND "))
    };
    values.push(Value::Integer(f.sql_limit()));
    let sql = format!("SELECT {EFFECT_COLUMNS} FROM ctrlrun_effects {filter} {order} LIMIT ?");
    (sql, values)
}

/// A row of `ctrlrun_effects` (as `e`) that a prune may remove: settled in `?2`, created and
/// last written before `?3`, no approval request for its key pending or granted at `?4`.
const PRUNABLE: &str = "e.state = ?2 AND e.created_at < ?3 AND e.updated_at < ?3 \
     AND NOT EXISTS (SELECT 1 FROM ctrlrun_approvals a WHERE a.effect_key = e.effect_key \
     AND a.state IN ('pending', 'granted') AND a.expires_at >= ?4)";

/// Each pruned row's last receipt, `pruned`, continuing its chain (fields in
/// `Receipt::expected_hash`'s order); `?5` is who prunes, `?6` the writing process.
fn pruned_receipt() -> String {
    format!(
        "INSERT INTO ctrlrun_receipts (chain, effect_key, request_id, seq, prev_hash, hash, at, \
         kind, action, action_id, attempt, state, args_digest, approval_id, actor, writer) \
         SELECT 'effect', e.effect_key, NULL, COALESCE(e.receipt_seq, 0) + 1, e.receipt_hash, \
         ctrlrun_receipt_hash('effect', e.effect_key, NULL, COALESCE(e.receipt_seq, 0) + 1, \
         e.receipt_hash, ?4, 'pruned', e.action, e.action_id, e.attempt, e.state, \
         e.args_digest, e.approval_id, ?5, ?6), ?4, 'pruned', e.action, e.action_id, e.attempt, \
         e.state, e.args_digest, e.approval_id, ?5, ?6 \
         FROM ctrlrun_effects e WHERE e.effect_key = ?1 AND {PRUNABLE}"
    )
}

impl SqliteStore {
    fn retention_error(&self, what: &str, e: impl std::fmt::Display) -> Error {
        Error::Store(format!(
            "{what} in the SQLite store at {} failed: {e}",
            self.opts.path.display()
        ))
    }
}

impl Retention for SqliteStore {
    /// This host's clock: SQLite has no other.
    fn store_now(&self, now: Option<Micros>) -> Result<Micros> {
        Ok(now.unwrap_or_else(now_micros))
    }

    fn list(&self, f: &EffectFilter<'_>) -> Result<Vec<EffectRecord>> {
        let (sql, values) = list_query(f);
        let conn = self.read_conn()?;
        let read = || -> rusqlite::Result<Vec<EffectRecord>> {
            let mut stmt = conn.conn.prepare_cached(&sql)?;
            let rows = stmt.query_map(rusqlite::params_from_iter(values.iter()), read_record)?;
            rows.collect()
        };
        read().map_err(|e| self.retention_error("listing effects", e))
    }

    /// SQLite's plan for [`Retention::list`], one step per line.
    fn explain_list(&self, f: &EffectFilter<'_>) -> Result<String> {
        let (sql, values) = list_query(f);
        let conn = self.read_conn()?;
        let read = || -> rusqlite::Result<Vec<String>> {
            let mut stmt = conn.conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))?;
            let rows = stmt.query_map(rusqlite::params_from_iter(values.iter()), |r| r.get(3))?;
            rows.collect()
        };
        let steps = read().map_err(|e| self.retention_error("explaining a listing", e))?;
        Ok(steps.join("\n"))
    }

    fn count_prunable(&self, p: &Prune<'_>, now: Option<Micros>) -> Result<u64> {
        let now = now.unwrap_or_else(now_micros);
        let cut = now.saturating_sub(p.older_than);
        let conn = self.read_conn()?;
        let mut total = 0u64;
        for state in &p.states {
            let n: i64 = conn
                .conn
                .prepare_cached(&format!(
                    "SELECT count(*) FROM ctrlrun_effects e WHERE ?1 IS NULL AND {PRUNABLE}"
                ))
                .and_then(|mut s| {
                    s.query_row(params![None::<String>, state.as_str(), cut, now], |r| {
                        r.get(0)
                    })
                })
                .map_err(|e| self.retention_error("counting effects to prune", e))?;
            total += n as u64;
        }
        Ok(total)
    }
}

/// Up to `batch` rows in `state` created before `cut`, after `after` in the index's order:
/// their keys and creation times.
fn candidates(
    c: &Connection,
    state: EffectState,
    cut: Micros,
    after: Option<&Cursor>,
    batch: u32,
) -> rusqlite::Result<Vec<(String, Micros)>> {
    let (from, tie) = match after {
        Some(a) => (a.created_at, String::from_utf8_lossy(&a.tie).into_owned()),
        None => (Micros::MIN, String::new()),
    };
    let mut stmt = c.prepare_cached(
        "SELECT effect_key, created_at FROM ctrlrun_effects WHERE state = ?1 \
         AND created_at < ?2 AND created_at >= ?3 AND (created_at > ?3 OR effect_key > ?4) \
         ORDER BY created_at, effect_key LIMIT ?5",
    )?;
    let rows = stmt.query_map(
        params![state.as_str(), cut, from, tie, i64::from(batch)],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    rows.collect()
}

/// Remove `key` if it is still prunable, with its last receipt or its whole chain; 1 when
/// removed.
fn remove(
    c: &Connection,
    p: &Prune<'_>,
    key: &str,
    state: EffectState,
    cut: Micros,
    now: Micros,
) -> rusqlite::Result<u64> {
    if !p.drop_receipts {
        c.prepare_cached(&pruned_receipt())?.execute(params![
            key,
            state.as_str(),
            cut,
            now,
            p.by,
            holder()
        ])?;
    }
    let removed = c
        .prepare_cached(&format!(
            "DELETE FROM ctrlrun_effects AS e WHERE e.effect_key = ?1 AND {PRUNABLE}"
        ))?
        .execute(params![key, state.as_str(), cut, now])?;
    if removed == 1 && p.drop_receipts {
        c.prepare_cached(
            "DELETE FROM ctrlrun_receipts WHERE effect_key = ?1 AND chain = 'effect'",
        )?
        .execute([key])?;
    }
    Ok(removed as u64)
}

impl SqliteStore {
    pub(super) fn prune_batch_in(&self, step: PruneStep<'_>) -> Result<PruneBatch> {
        let (p, state, after, now) = (step.prune, step.state, step.after, step.now);
        let now = now.unwrap_or_else(now_micros);
        let cut = now.saturating_sub(p.older_than);
        let mut conn = self.conn()?;
        let body = |c: &Connection| -> Result<PruneBatch> {
            let looked = candidates(c, state, cut, after, p.batch)
                .map_err(|e| self.retention_error("finding effects to prune", e))?;
            let mut removed = 0;
            for (key, _) in &looked {
                removed += remove(c, p, key, state, cut, now)
                    .map_err(|e| self.retention_error("pruning an effect", e))?;
            }
            let next = (looked.len() == p.batch as usize)
                .then(|| looked.last())
                .flatten()
                .map(|(key, created_at)| Cursor {
                    created_at: *created_at,
                    tie: key.clone().into_bytes(),
                });
            Ok(PruneBatch { removed, next })
        };
        match self.txn(&mut conn, "prune", "*", body)? {
            Commit::Landed(batch) => Ok(batch),
            Commit::Unknown(_, why) => Err(batch_unknown(&self.store_name(), &why)),
        }
    }
}
