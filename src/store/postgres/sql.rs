//! How the PostgreSQL store sends its statements (their text is in `statements.rs`), and the
//! decoding of its rows.

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Row;

use super::client::{Answer, Client, Params, PgError, PgResult, PREPARED_SLOTS};

use crate::env::holder;
use crate::error::Result;
use crate::planner::{Expected, Transition};
use crate::receipt::Event;
use crate::record::{EffectRecord, Micros};
use crate::store::rows::{self, Value};

use super::duties::{ASK_PARAMS, CAS_PARAMS, REQUEST_CAS_PARAMS};
use super::statements::{
    call, INSERT_PARAMS, RESERVE_MANY_PARAMS, SELECT_PARAMS, TRANSITION_MANY_PARAMS,
    TRANSITION_PARAMS,
};
pub(super) use super::statements::{now_expr, COLUMNS};

/// The statements, rendered once per store for its schema.
///
/// Every statement goes out **unnamed**, its Parse, Bind, Describe, Execute and Sync in one
/// exchange (`query_typed`, the parameter types given by us). Nothing is left on the server
/// connection, and nothing another client left there can run in its place: a connection pooler
/// in transaction mode (PgBouncer, RDS Proxy, pgcat, Supavisor) hands each transaction to
/// whichever server connection is free, so a statement prepared once per client connection
/// under a process-local name (`s7`) could meet another client's `s7`, run *that* statement
/// with our parameters, or be missing.
///
/// An unnamed statement is parsed and planned on every call, and ctrlrun's are costly to plan
/// (about 0.1-0.25 ms each, more than the row's work). So the three every protected call sends
/// (the read, the reservation's `INSERT`, the outcome's `UPDATE`) live in PL/pgSQL functions of
/// the store's schema ([`super::functions`], schema version 7): PL/pgSQL keeps a statement's plan
/// for the server session, whichever client a pooler gives that session to, and the call that
/// goes out unnamed (`SELECT * FROM s.ctrlrun_select($1, $2)`) is cheap to plan. The values
/// still travel as bound parameters, never in a statement's text.
///
/// With `prepared_statements=on` in the URL (for a direct connection only) those four calls
/// (`ctrlrun_select`, `ctrlrun_insert`, `ctrlrun_reserve`, `ctrlrun_transition`) are named
/// statements instead, each prepared on a connection the first time it sends it: the server
/// then skips their parse and plan (about 0.1 ms each; `bench/README.md`). The names are the
/// driver's (`s0`, `s1`, … per process), which is why the option is never for a transaction
/// pooler. A server that does not know the name (SQLSTATE 26000: the connection is not the
/// session that prepared it) ran nothing; the error names the option
/// ([`super::client::PgError::NotPrepared`]).
pub(super) struct Sql {
    /// How every explicit transaction starts, in one simple query (one round trip): with
    /// `ctrlrun_durable()`, which commits it at least as `synchronous_commit = on` whatever the
    /// server, role, URL, or a pooler's server connection left by another client says.
    pub(super) begin: String,
    /// The same at `READ COMMITTED` whatever the default isolation (pruning: each batch sees
    /// what other transactions committed while it waited on a row). The isolation must be set
    /// before the first query, so it is `START TRANSACTION`'s own.
    pub(super) begin_read_committed: String,
    /// The approvals table, schema-qualified (its statements are in `oversight.rs`).
    pub(super) approvals: String,
    /// The approver accounts, schema-qualified.
    pub(super) approvers: String,
    /// The store's policy, schema-qualified.
    pub(super) policy: String,
    /// The receipts table and the function that hashes a receipt (see [`crate::receipt`]),
    /// schema-qualified.
    pub(super) receipt_hash: String,
    pub(super) receipts: String,
    pub(super) effects: String,
    /// The hot calls, by their slot among a connection's prepared statements.
    hot: [String; PREPARED_SLOTS],
    /// The agent's whole-row compare-and-set, and a person's resolution (`duties`).
    cas: String,
    resolve: String,
    /// The approval request's writes (`duties`): asking, expiring or using, deciding; the
    /// locks of a request and of an effect row.
    pub(super) ask: String,
    pub(super) settle_request: String,
    pub(super) decide: String,
    pub(super) lock_request: String,
    pub(super) hold_effect: String,
    /// `prepared_statements=on`: the calls above go out as named statements.
    prepared: bool,
}

/// Each hot call's slot among a connection's prepared statements.
const SELECT: usize = 0;
const INSERT: usize = 1;
const RESERVE: usize = 2;
const TRANSITION: usize = 3;
pub(super) const RESERVE_MANY: usize = 4;
pub(super) const TRANSITION_MANY: usize = 5;

impl Sql {
    pub(super) fn new(schema: &str, prepared: bool) -> Sql {
        Sql {
            begin: format!("START TRANSACTION; SELECT \"{schema}\".ctrlrun_durable()"),
            begin_read_committed: format!(
                "START TRANSACTION ISOLATION LEVEL READ COMMITTED; \
                 SELECT \"{schema}\".ctrlrun_durable()"
            ),
            approvals: format!("\"{schema}\".ctrlrun_approvals"),
            approvers: format!("\"{schema}\".ctrlrun_approvers"),
            policy: format!("\"{schema}\".ctrlrun_policy"),
            receipts: format!("\"{schema}\".ctrlrun_receipts"),
            receipt_hash: format!("\"{schema}\".ctrlrun_receipt_hash"),
            effects: format!("\"{schema}\".ctrlrun_effects"),
            // In slot order: SELECT, INSERT, RESERVE, TRANSITION, and group commit's two.
            hot: [
                call(schema, "ctrlrun_select", SELECT_PARAMS),
                call(schema, "ctrlrun_insert", INSERT_PARAMS),
                call(schema, "ctrlrun_reserve", INSERT_PARAMS),
                call(schema, "ctrlrun_transition", TRANSITION_PARAMS),
                call(schema, "ctrlrun_reserve_many", RESERVE_MANY_PARAMS),
                call(schema, "ctrlrun_transition_many", TRANSITION_MANY_PARAMS),
            ],
            cas: call(schema, "ctrlrun_cas", CAS_PARAMS),
            resolve: call(schema, "ctrlrun_resolve", CAS_PARAMS),
            ask: call(schema, "ctrlrun_ask", ASK_PARAMS),
            settle_request: call(schema, "ctrlrun_settle_request", REQUEST_CAS_PARAMS),
            decide: call(schema, "ctrlrun_decide", REQUEST_CAS_PARAMS),
            lock_request: call(schema, "ctrlrun_lock_request", "text"),
            hold_effect: call(schema, "ctrlrun_hold_effect", "text"),
            prepared,
        }
    }

    /// The answer (every row, the one row, or the row if any: [`Answer`]) of the hot call in
    /// slot `slot`, named or unnamed as the URL says.
    pub(super) fn hot<T: Answer>(
        &self,
        c: &mut Client,
        slot: usize,
        params: Params<'_>,
    ) -> PgResult<T> {
        let sql = &self.hot[slot];
        if !self.prepared {
            return c.query_as(sql, params);
        }
        let st = c.statement(slot, sql, params)?;
        c.query_prepared(slot, &st, params)
    }
}

/// The statements' executions, each one exchange with its parameter types spelled out.
impl Sql {
    pub(super) fn select_row(
        &self,
        c: &mut Client,
        key: &str,
        now: Option<Micros>,
    ) -> PgResult<Row> {
        self.hot(c, SELECT, &[(&key, Type::TEXT), (&now, Type::INT8)])
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
        let args = InsertArgs::of(r, now);
        self.hot(c, INSERT, &args.params(r))
    }

    /// [`Sql::insert`] of a key's first row, or, when a row is there, that row read afresh:
    /// `(true, the row inserted)` or `(false, what the read found)`.
    pub(super) fn reserve(
        &self,
        c: &mut Client,
        r: &EffectRecord,
        now: Option<Micros>,
    ) -> PgResult<(bool, Row)> {
        let args = InsertArgs::of(r, now);
        let row: Row = self.hot(c, RESERVE, &args.params(r))?;
        // A column that does not decode is the driver's error (the call's commit is then
        // unknown, and the re-read decides), never a panic.
        let inserted = row.try_get(17).map_err(PgError::Driver)?;
        Ok((inserted, row))
    }

    /// The compare-and-set of the whole row `r` over `expected`: how many rows changed. A
    /// resolution is a person's (the approver duty's function), anything else the agent's.
    pub(super) fn cas(
        &self,
        c: &mut Client,
        expected: &Expected,
        r: &EffectRecord,
        event: Event,
    ) -> PgResult<u64> {
        let writer = holder();
        let mut values = rows::effect_values(r).to_vec();
        values.extend(rows::expected_values(expected, event, &writer));
        let sql = if event == Event::Resolution {
            &self.resolve
        } else {
            &self.cas
        };
        counted(c, sql, &typed(&values))
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
        self.hot(c, TRANSITION, &params)
    }
}

/// What the `INSERT` writes as the row's last event.
const RESERVATION_EVENT: &str = Event::Reservation.as_str();

/// What the `INSERT` of a row binds besides the row's own fields.
struct InsertArgs {
    state: &'static str,
    now: Option<Micros>,
    lease: Option<Micros>,
    writer: String,
}

impl InsertArgs {
    fn of(r: &EffectRecord, now: Option<Micros>) -> InsertArgs {
        InsertArgs {
            state: r.state.as_str(),
            now,
            lease: r.lease_expires_at.map(|until| until - r.created_at),
            writer: holder(),
        }
    }

    /// The parameters of the `INSERT` of row `r` (see [`super::statements::Statements::new`]).
    fn params<'a>(&'a self, r: &'a EffectRecord) -> [(&'a (dyn ToSql + Sync), Type); 17] {
        let (state, now, lease, writer) = (&self.state, &self.now, &self.lease, &self.writer);
        [
            (&r.effect_key, Type::TEXT),
            (state, Type::TEXT),
            (&r.action_id, Type::TEXT),
            (&r.attempt, Type::INT8),
            (now, Type::INT8),
            (lease, Type::INT8),
            (&r.result, Type::TEXT),
            (&r.error, Type::TEXT),
            (&r.resolved_by, Type::TEXT),
            (&r.attempt_token, Type::TEXT),
            (&r.action, Type::TEXT),
            (&r.holder, Type::TEXT),
            (&r.args_digest, Type::TEXT),
            (&r.arg_digests, Type::TEXT),
            (&r.approval_id, Type::TEXT),
            (&RESERVATION_EVENT, Type::TEXT),
            (writer, Type::TEXT),
        ]
    }
}

/// A row of the effect columns starting at column `at`; `None` when the key column is NULL.
pub(super) fn read_record(row: &Row, at: usize) -> Result<Option<EffectRecord>> {
    let key: Option<String> = row.get(at);
    if key.is_none() {
        return Ok(None);
    }
    rows::effect(row, at).map(Some)
}

/// What a key's read found: its record if any, and the server's clock (or the caller's `now`).
pub(super) type Found = (Option<EffectRecord>, Micros);

/// A row of the `select` statement.
pub(super) fn read_found(row: &Row) -> Result<Found> {
    Ok((read_record(row, 0)?, row.get(16)))
}

/// The row count a write function returns (`duties`).
pub(super) fn counted(c: &mut Client, sql: &str, params: Params<'_>) -> PgResult<u64> {
    let n: i64 = c.query_typed_one(sql, params)?.get(0);
    Ok(u64::try_from(n).unwrap_or(0))
}

/// The values bound with their types.
pub(super) fn typed<'a>(values: &'a [Value<'a>]) -> Vec<(&'a (dyn ToSql + Sync), Type)> {
    let pair = |v: &'a Value<'a>| -> (&'a (dyn ToSql + Sync), Type) {
        match v {
            Value::Text(t) => (t, Type::TEXT),
            Value::Int(i) => (i, Type::INT8),
        }
    };
    values.iter().map(pair).collect()
}
