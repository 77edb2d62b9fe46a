//! The PostgreSQL store's statements and the decoding of its rows.

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Row;

use super::client::{Client, PgResult};

use crate::error::{Error, Result};
use crate::planner::{Expected, Transition};
use crate::receipt::Event;
use crate::record::{holder, EffectRecord, EffectState, Micros};

pub(super) const COLUMNS: &str = "effect_key, state, action_id, attempt, created_at, updated_at, \
                       lease_expires_at, result, error, resolved_by, attempt_token, action, \
                       holder, args_digest, arg_digests, approval_id";

/// The row's index: the SHA-256 of the key's UTF-8 bytes. The primary key is this digest, not
/// the key, because a B-tree entry cannot exceed ~2.7 KB and keys may be longer; every lookup
/// also compares the key itself, byte for byte. Functions are named with their schema, so a
/// `search_path` that a pooler carries over from another client cannot swap in its own.
fn digest(param: usize) -> String {
    format!("pg_catalog.sha256(pg_catalog.convert_to(${param}::text, 'UTF8'))")
}

/// Microseconds since the epoch: the caller's `now` when given, else the server's clock.
pub(super) fn now_expr(param: usize) -> String {
    format!(
        "COALESCE(${param}::int8, (extract(epoch FROM pg_catalog.clock_timestamp()) * 1000000)::int8)"
    )
}

/// `columns` (`a, b`) qualified with `alias` (`e.a, e.b`).
fn qualified(alias: &str, columns: &str) -> String {
    let each: Vec<String> = columns
        .split(", ")
        .map(|c| format!("{alias}.{c}"))
        .collect();
    each.join(", ")
}

/// The statements, rendered once per store for its schema.
///
/// Every statement goes out **unnamed**, its Parse, Bind, Describe, Execute and Sync in one
/// exchange (`query_typed`, the parameter types given by us). Nothing is left on the server
/// connection, and nothing another client left there can run in its place: a connection pooler
/// in transaction mode (PgBouncer, RDS Proxy, pgcat, Supavisor) hands each transaction to
/// whichever server connection is free, so a statement prepared once per client connection
/// under a process-local name (`s7`) could meet another client's `s7`, run *that* statement
/// with our parameters, or be missing. The cost is that the server parses and plans each
/// statement on every call (tens of microseconds next to a commit's WAL flush); the round trips
/// are the same as for a prepared statement.
pub(super) struct Sql {
    /// The approvals table, schema-qualified (its statements are in `approvals.rs`).
    pub(super) approvals: String,
    /// The receipts table and the function that hashes a receipt (see [`crate::receipt`]),
    /// schema-qualified.
    pub(super) receipts: String,
    pub(super) receipt_hash: String,
    pub(super) effects: String,
    insert: String,
    select: String,
    cas: String,
    transition: String,
}

impl Sql {
    pub(super) fn new(schema: &str) -> Sql {
        let t = format!("\"{schema}\".ctrlrun_effects");
        let hash = format!("\"{schema}\".ctrlrun_receipt_hash");
        // Each write sets the row's chain head from the head it replaces (in an UPDATE's SET
        // list a column is the old row's value); a trigger appends the written row as the
        // receipt. Fields in `Receipt::expected_hash`'s order.
        let head = |seq: &str, prev: &str, fields: [&str; 11]| {
            format!(
                "receipt_seq = {seq}, receipt_prev = {prev}, receipt_hash = {hash}('effect', \
                 {}, NULL, ({seq})::text, {prev}, {})",
                fields[0],
                fields[1..].join(", ")
            )
        };
        let at = "COALESCE($5::int8, \
                  (extract(epoch FROM pg_catalog.statement_timestamp()) * 1000000)::int8)";
        let seq = "COALESCE(receipt_seq, 0) + 1";
        let durable = format!("\"{schema}\".ctrlrun_durable");
        let insert_columns = format!(
            "key_digest, {COLUMNS}, last_event, written_by, receipt_seq, receipt_prev, \
             receipt_hash"
        );
        let values = format!(
            "{d}, $1, $2, $3, $4, {at}, {at}, {at} + $6::int8, $7, $8, $9, $10, $11, $12, $13, \
             $14, $15, $16, $17, 1, NULL, {hash}('effect', $1, NULL, '1', NULL, ({at})::text, \
             $16, $11, $3, $4::text, $2, $13, $15, $9, $17)",
            d = digest(1),
        );
        let e_columns = qualified("e", COLUMNS);
        let now9 = "COALESCE($9::int8, \
                    (extract(epoch FROM pg_catalog.statement_timestamp()) * 1000000)::int8)";
        Sql {
            approvals: format!("\"{schema}\".ctrlrun_approvals"),
            receipts: format!("\"{schema}\".ctrlrun_receipts"),
            receipt_hash: hash.clone(),
            effects: t.clone(),
            // The planner's row; a row already there wins (no row returned). Its times are
            // the server's clock when the INSERT runs (or the caller's `now`), the lease the
            // planner's length from there: planned from a read made before the transaction, a
            // wait for a connection or a pooler must not eat into the holder's lease.
            // A plain INSERT plans in microseconds, where a statement that also works out the
            // row or returns the one there (a CTE) costs the server about 0.3 ms on every call,
            // more than the plain read that decides a refusal. `ctrlrun_durable()` makes the
            // commit of an INSERT that commits by itself as durable as the server's own setting,
            // whatever a pooler's server connection carries over.
            insert: format!(
                "INSERT INTO {t} ({insert_columns}) SELECT {values} \
                 FROM (SELECT {durable}()) durable(ok) \
                 ON CONFLICT (key_digest) DO NOTHING RETURNING {COLUMNS}"
            ),
            select: format!(
                "SELECT {cols}, clock.n FROM (SELECT {now} AS n) clock \
                 LEFT JOIN {t} e ON e.key_digest = {d} AND e.effect_key = $1",
                d = digest(1),
                cols = e_columns,
                now = now_expr(2)
            ),
            cas: format!(
                "UPDATE {t} SET state = $1, action_id = $2, attempt = $3, created_at = $4, \
                 updated_at = $5, lease_expires_at = $6, result = $7, error = $8, \
                 resolved_by = $9, attempt_token = $14, action = $15, holder = $16, \
                 args_digest = $17, arg_digests = $18, approval_id = $19, last_event = $20, \
                 written_by = $21, {head} FROM (SELECT {durable}()) durable(ok) \
                 WHERE key_digest = {d} AND effect_key = $10 AND state = $11 \
                 AND action_id = $12 AND attempt = $13",
                d = digest(10),
                head = head(
                    seq,
                    "receipt_hash",
                    [
                        "$10", "$5::text", "$20", "$15", "$2", "$3::text", "$1", "$17", "$19",
                        "$9", "$21"
                    ]
                )
            ),
            // The time is the statement's (stable within it: the row and its receipt agree).
            transition: format!(
                "UPDATE {t} SET state = $1, updated_at = {now}, \
                 lease_expires_at = CASE WHEN $3 THEN NULL ELSE lease_expires_at END, \
                 result = $4, error = $5, last_event = $10, written_by = $11, {head} \
                 FROM (SELECT {durable}()) durable(ok) \
                 WHERE key_digest = {d} AND effect_key = $6 AND action_id = $7 \
                 AND ($8::int8 IS NULL OR attempt = $8) \
                 AND state = ANY($2::text[]) RETURNING {COLUMNS}",
                now = now9,
                d = digest(6),
                head = head(
                    seq,
                    "receipt_hash",
                    [
                        "effect_key",
                        &format!("({now9})::text"),
                        "$10",
                        "action",
                        "action_id",
                        "attempt::text",
                        "$1",
                        "args_digest",
                        "approval_id",
                        "resolved_by",
                        "$11"
                    ]
                )
            ),
        }
    }
}

/// The statements' executions, each one unnamed exchange with its parameter types spelled out.
impl Sql {
    pub(super) fn select_row(
        &self,
        c: &mut Client,
        key: &str,
        now: Option<Micros>,
    ) -> PgResult<Row> {
        c.query_typed_one(&self.select, &[(&key, Type::TEXT), (&now, Type::INT8)])
    }

    /// Insert the planner's row `r` unless a row is there: the row inserted, or `None`. The
    /// row's times are taken again at the INSERT (the caller's `now`, else the server's clock),
    /// its lease keeping the length the planner gave it.
    pub(super) fn insert(
        &self,
        c: &mut Client,
        r: &EffectRecord,
        now: Option<Micros>,
    ) -> PgResult<Option<Row>> {
        let lease = r.lease_expires_at.map(|until| until - r.created_at);
        c.query_typed_opt(
            &self.insert,
            &[
                (&r.effect_key, Type::TEXT),
                (&r.state.as_str(), Type::TEXT),
                (&r.action_id, Type::TEXT),
                (&r.attempt, Type::INT8),
                (&now, Type::INT8),
                (&lease, Type::INT8),
                (&r.result, Type::TEXT),
                (&r.error, Type::TEXT),
                (&r.resolved_by, Type::TEXT),
                (&r.attempt_token, Type::TEXT),
                (&r.action, Type::TEXT),
                (&r.holder, Type::TEXT),
                (&r.args_digest, Type::TEXT),
                (&r.arg_digests, Type::TEXT),
                (&r.approval_id, Type::TEXT),
                (&Event::Reservation.as_str(), Type::TEXT),
                (&holder(), Type::TEXT),
            ],
        )
    }

    /// The compare-and-set of the whole row `r` over `expected`: how many rows changed.
    pub(super) fn cas(
        &self,
        c: &mut Client,
        expected: &Expected,
        r: &EffectRecord,
        event: Event,
    ) -> PgResult<u64> {
        c.execute_typed(
            &self.cas,
            &[
                (&r.state.as_str(), Type::TEXT),
                (&r.action_id, Type::TEXT),
                (&r.attempt, Type::INT8),
                (&r.created_at, Type::INT8),
                (&r.updated_at, Type::INT8),
                (&r.lease_expires_at, Type::INT8),
                (&r.result, Type::TEXT),
                (&r.error, Type::TEXT),
                (&r.resolved_by, Type::TEXT),
                (&r.effect_key, Type::TEXT),
                (&expected.state.as_str(), Type::TEXT),
                (&expected.action_id, Type::TEXT),
                (&expected.attempt, Type::INT8),
                (&r.attempt_token, Type::TEXT),
                (&r.action, Type::TEXT),
                (&r.holder, Type::TEXT),
                (&r.args_digest, Type::TEXT),
                (&r.arg_digests, Type::TEXT),
                (&r.approval_id, Type::TEXT),
                (&event.as_str(), Type::TEXT),
                (&holder(), Type::TEXT),
            ],
        )
    }

    /// A later transition binding the planner's [`crate::planner::TransitionWrite`]: the row
    /// written, or none when the compare-and-set matched nothing.
    pub(super) fn transition_rows(
        &self,
        c: &mut Client,
        t: &Transition,
        key: &str,
        action_id: &str,
        attempt: Option<i64>,
        now: Option<Micros>,
    ) -> PgResult<Vec<Row>> {
        let w = t.write();
        let from: Vec<&str> = w.from.iter().map(|s| s.as_str()).collect();
        let (kind, writer) = (Event::of_transition(t).as_str(), holder());
        let params: [(&(dyn ToSql + Sync), Type); 11] = [
            (&w.state.as_str(), Type::TEXT),
            (&from, Type::TEXT_ARRAY),
            (&w.clear_lease, Type::BOOL),
            (&w.result, Type::TEXT),
            (&w.error, Type::TEXT),
            (&key, Type::TEXT),
            (&action_id, Type::TEXT),
            (&attempt, Type::INT8),
            (&now, Type::INT8),
            (&kind, Type::TEXT),
            (&writer, Type::TEXT),
        ];
        c.query_typed(&self.transition, &params)
    }
}

fn state_of(text: &str) -> std::result::Result<EffectState, Error> {
    EffectState::parse(text)
        .ok_or_else(|| Error::Store(format!("the store holds an unknown effect state {text:?}")))
}

/// A row of `COLUMNS` starting at column `at`; `None` when the key column is NULL.
pub(super) fn read_record(row: &Row, at: usize) -> Result<Option<EffectRecord>> {
    let key: Option<String> = row.get(at);
    let Some(effect_key) = key else {
        return Ok(None);
    };
    let state: String = row.get(at + 1);
    Ok(Some(EffectRecord {
        effect_key,
        state: state_of(&state)?,
        action_id: row.get(at + 2),
        attempt: row.get(at + 3),
        created_at: row.get(at + 4),
        updated_at: row.get(at + 5),
        lease_expires_at: row.get(at + 6),
        result: row.get(at + 7),
        error: row.get(at + 8),
        resolved_by: row.get(at + 9),
        attempt_token: row.get(at + 10),
        action: row.get(at + 11),
        holder: row.get(at + 12),
        args_digest: row.get(at + 13),
        arg_digests: row.get(at + 14),
        approval_id: row.get(at + 15),
    }))
}

/// What a key's read found: its record if any, and the server's clock (or the caller's `now`).
pub(super) type Found = (Option<EffectRecord>, Micros);

/// A row of the `select` statement.
pub(super) fn read_found(row: &Row) -> Result<Found> {
    Ok((read_record(row, 0)?, row.get(16)))
}
