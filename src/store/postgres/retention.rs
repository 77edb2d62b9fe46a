//! Listing by filter and pruning in the PostgreSQL store (see [`crate::store::retention`]).
//!
//! Schema version 6's indexes serve them: `(state, created_at)` a state's rows in order (and a
//! prune's walk through them); `(left(effect_key, 200) COLLATE "C")` a key prefix, as a range
//! in byte order (which is code point order) rechecked with `starts_with`. Keys are indexed by
//! their first 200 characters because a B-tree entry cannot exceed ~2.7 KB and keys may be
//! longer (the primary key is the key's digest for the same reason).
//! `ctrlrun_approvals_open_key` finds an open approval request of a key. An action name, or a
//! limit alone, has no index of its own (each index costs every protected call): it narrows
//! what the others select, or reads the table.

use tokio_postgres::types::{ToSql, Type};

use super::client::{Client, PgError};
use super::sql::{now_expr, read_record, COLUMNS};
use super::store::{check_key, PostgresStore};
use crate::env::holder;
use crate::error::{Error, Result};
use crate::record::{EffectRecord, Micros};
use crate::store::api::Retention;
use crate::store::recovery::{Commit, Reread};
use crate::store::retention::PruneBatch;
use crate::store::retention::{
    batch_unknown, first_chars, prefix_end, Cursor, EffectFilter, Prune, PruneStep,
};

/// How many leading characters of a key the prefix index holds.
const INDEXED_CHARS: usize = 200;

/// A listing's statement: its text parameters in order, then the limit.
struct ListQuery {
    sql: String,
    texts: Vec<String>,
    limit: Option<i64>,
}

impl ListQuery {
    fn params(&self) -> Vec<(&(dyn ToSql + Sync), Type)> {
        let texts = self
            .texts
            .iter()
            .map(|t| (t as &(dyn ToSql + Sync), Type::TEXT));
        let limit = (&self.limit as &(dyn ToSql + Sync), Type::INT8);
        texts.chain(std::iter::once(limit)).collect()
    }
}

/// The listing `f` asks for from table `t`.
fn list_query(f: &EffectFilter<'_>, t: &str) -> Result<ListQuery> {
    f.prefix.map(check_key).transpose()?;
    f.action.map(check_key).transpose()?;
    let mut clauses: Vec<String> = Vec::new();
    let mut texts: Vec<String> = Vec::new();
    let mut param = |text: String, clause: &dyn Fn(usize) -> String| {
        texts.push(text);
        clauses.push(clause(texts.len()));
    };
    if let Some(state) = f.state {
        param(state.as_str().into(), &|n| format!("state = ${n}::text"));
    }
    if let Some(prefix) = f.prefix {
        let low = first_chars(prefix, INDEXED_CHARS);
        let indexed = "pg_catalog.left(effect_key, 200) COLLATE \"C\"";
        param(low.into(), &|n| format!("{indexed} >= ${n}::text"));
        if let Some(end) = prefix_end(low) {
            param(end, &|n| format!("{indexed} < ${n}::text"));
        }
        param(prefix.into(), &|n| {
            format!("pg_catalog.starts_with(effect_key, ${n}::text)")
        });
    }
    if let Some(action) = f.action {
        param(action.into(), &|n| format!("action = ${n}::text"));
    }
    let (order, after) = f.order();
    if let Some((at, key)) = f.after {
        check_key(key)?;
        // The time as text, cast back by the server: one list of text parameters.
        param(at.to_string(), &|n| {
            format!("created_at {after}= ${n}::int8")
        });
        param(key.into(), &|k| {
            format!(
                "(created_at, effect_key) {after} (${}::int8, ${k}::text)",
                k - 1
            )
        });
    }
    let filter = if clauses.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", clauses.join(" AND "))
    };
    let limit = f.limit.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
    let sql = format!(
        "SELECT {COLUMNS} FROM {t} {filter} {order} LIMIT ${}::int8",
        texts.len() + 1
    );
    Ok(ListQuery { sql, texts, limit })
}

/// A row of the effects table (as `e`) that a prune may remove at `clock.now`: settled in
/// `$2`, created and last written more than `$3` microseconds before, no approval request for
/// its key pending or granted.
fn prunable(approvals: &str) -> String {
    format!(
        "e.state = ANY($2::text[]) AND e.created_at < clock.now - $3::int8 \
         AND e.updated_at < clock.now - $3::int8 AND NOT EXISTS (SELECT 1 FROM {approvals} a \
         WHERE pg_catalog.left(a.effect_key, 200) = pg_catalog.left(e.effect_key, 200) \
         AND a.effect_key = e.effect_key AND a.state IN ('pending', 'granted') \
         AND a.expires_at >= clock.now)"
    )
}

impl PostgresStore {
    fn retention_error(&self, what: &str, e: &PgError) -> Error {
        Error::Store(format!(
            "{what} in the PostgreSQL store {} failed: {}",
            self.description,
            e.describe()
        ))
    }
}

impl Retention for PostgresStore {
    fn list(&self, f: &EffectFilter<'_>) -> Result<Vec<EffectRecord>> {
        let q = list_query(f, &self.sql.effects)?;
        let params = q.params();
        let rows = self
            .read("list_effects", "*", |c, _| c.query_typed(&q.sql, &params))?
            .map_err(|e| self.retention_error("listing effects", &e))?;
        rows.iter()
            .map(|r| read_record(r, 0).map(|o| o.expect("effect_key is NOT NULL")))
            .collect()
    }

    /// The server's plan for [`Retention::list`] with sequential scans switched
    /// off for it (on a small table a scan is cheaper, so this shows which index would serve
    /// the listing on a large one), one line per step.
    fn explain_list(&self, f: &EffectFilter<'_>) -> Result<String> {
        let q = list_query(f, &self.sql.effects)?;
        let params = q.params();
        let lines = self
            .read("explain_list", "*", |c, _| {
                c.batch_execute("BEGIN", "BEGIN; SET LOCAL enable_seqscan = off")?;
                let plan = c.query_typed(&format!("EXPLAIN {}", q.sql), &params);
                c.batch_execute("ROLLBACK", "ROLLBACK")?;
                plan
            })?
            .map_err(|e| self.retention_error("explaining a listing", &e))?;
        Ok(lines
            .iter()
            .map(|r| r.get::<_, String>(0))
            .collect::<Vec<_>>()
            .join("\n"))
    }

    /// The server's clock (or `now`).
    fn store_now(&self, now: Option<Micros>) -> Result<Micros> {
        self.read("clock", "*", |c, _| self.clock(c, now))?
            .map_err(|e| self.retention_error("reading the server's clock", &e))
    }

    fn count_prunable(&self, p: &Prune<'_>, now: Option<Micros>) -> Result<u64> {
        let sql = format!(
            "WITH clock AS (SELECT {now} AS now) \
             SELECT count(*) FROM {t} e, clock WHERE {prunable}",
            now = now_expr(1),
            t = self.sql.effects,
            prunable = prunable(&self.sql.approvals),
        );
        let states: Vec<&str> = p.states.iter().map(|s| s.as_str()).collect();
        let row = self
            .read("count_prunable", "*", |c, _| {
                c.query_typed_one(
                    &sql,
                    &[
                        (&now, Type::INT8),
                        (&states, Type::TEXT_ARRAY),
                        (&p.older_than, Type::INT8),
                    ],
                )
            })?
            .map_err(|e| self.retention_error("counting effects to prune", &e))?;
        Ok(row.get::<_, i64>(0) as u64)
    }
}

impl PostgresStore {
    /// One batch, one transaction at READ COMMITTED: the first statement walks the next rows
    /// in order (the cursor) and locks those that are settled and old enough; the second,
    /// with a snapshot taken after those locks, deletes the ones with no open approval request
    /// and writes their `pruned` receipts (or deletes their chains). A request being made for
    /// one of them holds its row (`FOR KEY SHARE`), so it either commits before the lock,
    /// and the delete sees it, or waits for the prune and finds no row.
    pub(super) fn prune_batch_in(&self, step: PruneStep<'_>) -> Result<PruneBatch> {
        let (p, state, after, now) = (step.prune, step.state, step.after, step.now);
        let (t, a, r) = (&self.sql.effects, &self.sql.approvals, &self.sql.receipts);
        let lock = format!(
            "WITH clock AS (SELECT {now} AS now), \
             picked AS (SELECT e.key_digest, e.created_at FROM {t} e, clock \
                 WHERE e.state = ($2::text[])[1] AND e.created_at < clock.now - $3::int8 \
                 AND ($4::int8 IS NULL OR (e.created_at >= $4::int8 \
                     AND (e.created_at > $4::int8 OR e.key_digest > $5::bytea))) \
                 ORDER BY e.created_at, e.key_digest LIMIT $6::int8), \
             locked AS (SELECT e.key_digest FROM {t} e, clock \
                 WHERE e.key_digest IN (SELECT key_digest FROM picked) \
                 AND e.state = ($2::text[])[1] AND e.created_at < clock.now - $3::int8 \
                 AND e.updated_at < clock.now - $3::int8 FOR UPDATE OF e) \
             SELECT (SELECT count(*) FROM picked), last.created_at, last.key_digest, \
                 (SELECT COALESCE(array_agg(key_digest), '{{}}') FROM locked) \
             FROM (SELECT 1) one LEFT JOIN (SELECT created_at, key_digest FROM picked \
                 ORDER BY created_at DESC, key_digest DESC LIMIT 1) last ON true",
            now = now_expr(1),
        );
        let delete = format!(
            "WITH clock AS (SELECT {now} AS now), \
             gone AS (DELETE FROM {t} e USING clock \
                 WHERE e.key_digest = ANY($4::bytea[]) AND {prunable} \
                 RETURNING e.key_digest, e.effect_key, COALESCE(e.receipt_seq, 0) + 1 AS seq, \
                 e.receipt_hash, e.action, e.action_id, e.attempt, e.state, e.args_digest, \
                 e.approval_id, clock.now), \
             kept AS (INSERT INTO {r} (key_digest, chain, effect_key, request_id, seq, \
                 prev_hash, hash, at, kind, action, action_id, attempt, state, args_digest, \
                 approval_id, actor, writer) \
                 SELECT g.key_digest, 'effect', g.effect_key, NULL, g.seq, g.receipt_hash, \
                 {hash}('effect', g.effect_key, NULL, g.seq::text, g.receipt_hash, \
                     g.now::text, 'pruned', g.action, g.action_id, g.attempt::text, g.state, \
                     g.args_digest, g.approval_id, $6::text, $7::text), \
                 g.now, 'pruned', g.action, g.action_id, g.attempt, g.state, g.args_digest, \
                 g.approval_id, $6::text, $7::text FROM gone g WHERE NOT $5::bool), \
             dropped AS (DELETE FROM {r} WHERE $5::bool AND chain = 'effect' \
                 AND key_digest IN (SELECT key_digest FROM gone)) \
             SELECT count(*) FROM gone",
            now = now_expr(1),
            prunable = prunable(a),
            hash = self.sql.receipt_hash,
        );
        let states = vec![state.as_str().to_owned()];
        let (from, tie) = match after {
            Some(c) => (Some(c.created_at), c.tie.clone()),
            None => (None, Vec::new()),
        };
        let batch = i64::from(p.batch);
        let writer = holder();
        let body = |c: &mut Client, _: &super::sql::Sql| -> Result<PruneBatch> {
            let fail = |e: PgError| self.retention_error("pruning effects", &e);
            let row = c
                .query_typed_one(
                    &lock,
                    &[
                        (&now, Type::INT8),
                        (&states, Type::TEXT_ARRAY),
                        (&p.older_than, Type::INT8),
                        (&from, Type::INT8),
                        (&tie, Type::BYTEA),
                        (&batch, Type::INT8),
                    ],
                )
                .map_err(fail)?;
            let looked: i64 = row.get(0);
            let next = match (looked == batch, row.get(1), row.get(2)) {
                (true, Some(created_at), Some(tie)) => Some(Cursor { created_at, tie }),
                _ => None,
            };
            let locked: Vec<Vec<u8>> = row.get(3);
            if locked.is_empty() {
                return Ok(PruneBatch { removed: 0, next });
            }
            let removed: i64 = c
                .query_typed_one(
                    &delete,
                    &[
                        (&now, Type::INT8),
                        (&states, Type::TEXT_ARRAY),
                        (&p.older_than, Type::INT8),
                        (&locked, Type::BYTEA_ARRAY),
                        (&p.drop_receipts, Type::BOOL),
                        (&p.by, Type::TEXT),
                        (&writer, Type::TEXT),
                    ],
                )
                .map_err(fail)?
                .get(0);
            Ok(PruneBatch {
                removed: removed as u64,
                next,
            })
        };
        match self.txn_from(&self.sql.begin_read_committed, ("prune", "*"), body)? {
            Commit::Landed(done) => Ok(done),
            Commit::Unknown(_, why) => Err(batch_unknown(&self.store_name(), &why)),
        }
    }
}
