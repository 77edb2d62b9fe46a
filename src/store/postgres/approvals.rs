//! Approval requests in the PostgreSQL store: asking, deciding and reading, each write one
//! transaction with the planner's row; a grant is used inside the reservation's own
//! transaction ([`consume`]). Times are the server's clock unless the caller gives `now`.

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Row;

use super::client::{Client, PgError};
use super::sql::Sql;
use super::PostgresStore;
use crate::approval::{new_request_id, ApprovalAsk, ApprovalRecord, ApprovalState};
use crate::env::holder;
use crate::error::{Error, Result};
use crate::planner::{self, Proposal, RequestPlan};
use crate::receipt;
use crate::record::Micros;
use crate::store::recovery::Commit;
use crate::store::Approvals;

const COLUMNS: &str = "request_id, action, args_digest, effect_key, arguments, state, \
                       requested_at, ttl, expires_at, decided_at, decided_by, note, used_at, \
                       used_by";

const CLOCK: &str = "SELECT COALESCE($1::int8, \
                     (extract(epoch FROM pg_catalog.clock_timestamp()) * 1000000)::int8)";

fn read(row: &Row) -> Result<ApprovalRecord> {
    let state: String = row.get(5);
    let state = ApprovalState::parse(&state).ok_or_else(|| {
        Error::Store(format!(
            "the store holds an unknown approval state {state:?}"
        ))
    })?;
    Ok(ApprovalRecord {
        request_id: row.get(0),
        action: row.get(1),
        args_digest: row.get(2),
        effect_key: row.get(3),
        arguments: row.get(4),
        state,
        requested_at: row.get(6),
        ttl: row.get(7),
        expires_at: row.get(8),
        decided_at: row.get(9),
        decided_by: row.get(10),
        note: row.get(11),
        used_at: row.get(12),
        used_by: row.get(13),
    })
}

/// The requests `filter` selects, its `$n` bound to `args` (text) in order.
fn select(
    c: &mut Client,
    table: &str,
    filter: &str,
    args: &[&str],
) -> std::result::Result<Vec<Row>, PgError> {
    let params: Vec<(&(dyn ToSql + Sync), Type)> = args
        .iter()
        .map(|a| (a as &(dyn ToSql + Sync), Type::TEXT))
        .collect();
    c.query_typed(
        &format!("SELECT {COLUMNS} FROM {table} WHERE {filter}"),
        &params,
    )
}

fn first(rows: Vec<Row>) -> Result<Option<ApprovalRecord>> {
    rows.first().map(read).transpose()
}

/// Insert the planner's new request `r`, written at `now`, with the first receipt of its chain.
fn insert(
    c: &mut Client,
    sql: &Sql,
    r: &ApprovalRecord,
    now: Micros,
) -> std::result::Result<u64, PgError> {
    let (state, kind, writer) = (r.state.as_str(), receipt::approval_event(r.state), holder());
    c.execute_typed(
        &format!(
            "INSERT INTO {table} ({COLUMNS}, updated_at, last_event, written_by, receipt_seq, \
             receipt_prev, receipt_hash) VALUES \
             ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, 1, \
             NULL, {hash}('approval', $4, $1, '1', NULL, $15::text, $16, $2, $14, NULL, $6, $3, \
             $1, $11, $17)) ON CONFLICT DO NOTHING",
            table = sql.approvals,
            hash = sql.receipt_hash
        ),
        &[
            (&r.request_id, Type::TEXT),
            (&r.action, Type::TEXT),
            (&r.args_digest, Type::TEXT),
            (&r.effect_key, Type::TEXT),
            (&r.arguments, Type::TEXT),
            (&state, Type::TEXT),
            (&r.requested_at, Type::INT8),
            (&r.ttl, Type::INT8),
            (&r.expires_at, Type::INT8),
            (&r.decided_at, Type::INT8),
            (&r.decided_by, Type::TEXT),
            (&r.note, Type::TEXT),
            (&r.used_at, Type::INT8),
            (&r.used_by, Type::TEXT),
            (&now, Type::INT8),
            (&kind, Type::TEXT),
            (&writer, Type::TEXT),
        ],
    )
}

/// Write the planner's `r` over the request if it is still in state `from` (at `now`, with the
/// next receipt of its chain): rows changed.
fn cas(
    c: &mut Client,
    sql: &Sql,
    from: ApprovalState,
    r: &ApprovalRecord,
    now: Micros,
) -> std::result::Result<u64, PgError> {
    let (state, from) = (r.state.as_str(), from.as_str());
    let (kind, writer) = (receipt::approval_event(r.state), holder());
    c.execute_typed(
        &format!(
            "UPDATE {table} SET state = $1, expires_at = $2, decided_at = $3, decided_by = $4, \
             note = $5, used_at = $6, used_by = $7, updated_at = $10, last_event = $11, \
             written_by = $12, receipt_seq = COALESCE(receipt_seq, 0) + 1, \
             receipt_prev = receipt_hash, receipt_hash = {hash}('approval', effect_key, \
             request_id, (COALESCE(receipt_seq, 0) + 1)::text, receipt_hash, $10::text, $11, \
             action, $7, NULL, $1, args_digest, request_id, $4, $12) \
             WHERE request_id = $8 AND state = $9",
            table = sql.approvals,
            hash = sql.receipt_hash
        ),
        &[
            (&state, Type::TEXT),
            (&r.expires_at, Type::INT8),
            (&r.decided_at, Type::INT8),
            (&r.decided_by, Type::TEXT),
            (&r.note, Type::TEXT),
            (&r.used_at, Type::INT8),
            (&r.used_by, Type::TEXT),
            (&r.request_id, Type::TEXT),
            (&from, Type::TEXT),
            (&now, Type::INT8),
            (&kind, Type::TEXT),
            (&writer, Type::TEXT),
        ],
    )
}

/// Inside a reservation's transaction: the grant in force for the proposal's action and
/// arguments, planned as used by its attempt (written by [`mark_used`] after the reservation's
/// row). [`Error::ApprovalNeeded`] when there is none.
pub(super) fn grant_in_force(
    store: &PostgresStore,
    tx: &mut Client,
    p: &Proposal<'_>,
    now: Micros,
) -> Result<ApprovalRecord> {
    let (Some(action), Some((digest, _))) = (p.action, p.args) else {
        return Err(Error::InvalidArgument(
            "an action that needs approval is reserved with its action name and the digest of \
             its arguments"
                .into(),
        ));
    };
    let rows = select(
        tx,
        &store.sql.approvals,
        "action = $1 AND args_digest = $2 AND effect_key = $3 AND state = 'granted'",
        &[action, digest, p.key],
    )
    .map_err(|e| store.failed("reserve_effect", p.key, &e))?;
    planner::plan_consume(first(rows)?, action, p.action_id, now)
}

/// Mark the grant `used` (a compare-and-set from `granted`: single use). Another call that
/// used it first makes this one [`Error::ApprovalNeeded`], and its transaction rolls back.
pub(super) fn mark_used(
    store: &PostgresStore,
    tx: &mut Client,
    key: &str,
    used: &ApprovalRecord,
    now: Micros,
) -> Result<()> {
    let n = cas(tx, &store.sql, ApprovalState::Granted, used, now)
        .map_err(|e| store.failed("reserve_effect", key, &e))?;
    if n != 1 {
        return Err(Error::ApprovalNeeded(format!(
            "the approval of '{}' for these arguments was used by another call",
            used.action
        )));
    }
    Ok(())
}

impl PostgresStore {
    pub(super) fn clock(
        &self,
        c: &mut Client,
        now: Option<Micros>,
    ) -> std::result::Result<Micros, PgError> {
        Ok(c.query_typed_one(CLOCK, &[(&now, Type::INT8)])?.get(0))
    }

    /// One approval write (`what` on request `id`); after an unknown `COMMIT` the request is
    /// re-read on a fresh connection and `landed` says whether the row there is ours.
    fn approval_write(
        &self,
        what: &str,
        id: &str,
        body: impl FnOnce(&mut Client) -> Result<ApprovalRecord>,
        landed: impl FnOnce(&ApprovalRecord, &ApprovalRecord) -> bool,
    ) -> Result<ApprovalRecord> {
        let (ours, why) = match self.txn(what, id, |tx, _| body(tx))? {
            Commit::Landed(r) => return Ok(r),
            Commit::Unknown(r, why) => (r, why),
        };
        let table = &self.sql.approvals;
        let again = self
            .fresh
            .connect_client()
            .and_then(|mut c| select(&mut c, table, "request_id = $1", &[&ours.request_id]));
        match again
            .map_err(|e| e.describe())
            .and_then(|rows| first(rows).map_err(|e| e.to_string()))
        {
            Ok(Some(found)) if landed(&found, &ours) => Ok(ours),
            Ok(_) => Err(Error::StoreUnresolved(format!(
                "the COMMIT of {what} for approval request '{id}' failed ({why}) and a re-read \
                 did not find it written; it may still land. Read the request before deciding \
                 again"
            ))),
            Err(e) => Err(Error::StoreUnresolved(format!(
                "the COMMIT of {what} for approval request '{id}' failed ({why}) and re-reading \
                 it failed ({e}); read the request to see whether it landed"
            ))),
        }
    }

    fn approvals_read(
        &self,
        filter: &str,
        args: &[&str],
        now: Option<Micros>,
    ) -> Result<(Vec<ApprovalRecord>, Micros)> {
        let table = &self.sql.approvals;
        let found = self.read("approvals", "", |c, _| {
            let n = self.clock(c, now)?;
            Ok((select(c, table, filter, args)?, n))
        })?;
        let (rows, n) = found.map_err(|e| {
            Error::Store(format!(
                "reading approvals from the PostgreSQL store {} failed: {}",
                self.description,
                e.describe()
            ))
        })?;
        let records = rows.iter().map(read).collect::<Result<Vec<_>>>()?;
        Ok((records.into_iter().map(|r| r.at(n)).collect(), n))
    }
}

impl Approvals for PostgresStore {
    fn request_approval(
        &self,
        ask: &ApprovalAsk<'_>,
        now: Option<Micros>,
    ) -> Result<ApprovalRecord> {
        const WHAT: &str = "request_approval";
        let id = new_request_id()?;
        let table = &self.sql.approvals;
        let body = |tx: &mut Client| -> Result<ApprovalRecord> {
            let fail = |e: PgError| self.failed(WHAT, ask.action, &e);
            let now = self.clock(tx, now).map_err(fail)?;
            let rows = select(
                tx,
                table,
                "action = $1 AND args_digest = $2 AND effect_key = $3 \
                 ORDER BY requested_at DESC LIMIT 1",
                &[ask.action, ask.args_digest, ask.effect_key],
            )
            .map_err(fail)?;
            match planner::plan_request(first(rows)?, ask, &id, now)? {
                RequestPlan::Stands(r) => Ok(r.at(now)),
                RequestPlan::Ask { expire, new } => {
                    // Hold the key's effect row (if any) until this request commits: a prune
                    // that locked it first removes it before the request lands; one that comes
                    // after waits, then sees the request and keeps the row.
                    tx.query_typed(
                        &format!(
                            "SELECT 1 FROM {} WHERE key_digest = \
                             pg_catalog.sha256(pg_catalog.convert_to($1::text, 'UTF8')) \
                             AND effect_key = $1 FOR KEY SHARE",
                            self.sql.effects
                        ),
                        &[(&ask.effect_key, Type::TEXT)],
                    )
                    .map_err(fail)?;
                    if let Some((from, old)) = expire {
                        cas(tx, &self.sql, from, &old, now).map_err(fail)?;
                    }
                    if insert(tx, &self.sql, &new, now).map_err(fail)? == 1 {
                        return Ok(new);
                    }
                    // Another caller's request for the same action and arguments won the
                    // unique index (it waited for that caller to commit): that one stands.
                    let rows = select(
                        tx,
                        table,
                        "action = $1 AND args_digest = $2 AND effect_key = $3 \
                         ORDER BY requested_at DESC LIMIT 1",
                        &[ask.action, ask.args_digest, ask.effect_key],
                    )
                    .map_err(fail)?;
                    first(rows)?.map(|r| r.at(now)).ok_or_else(|| {
                        Error::StoreWriteFailed(format!(
                            "{WHAT} for '{}': the request changed meanwhile; nothing was \
                             committed, so the call may be retried",
                            ask.action
                        ))
                    })
                }
            }
        };
        let landed =
            |found: &ApprovalRecord, ours: &ApprovalRecord| found.request_id == ours.request_id;
        self.approval_write(WHAT, &id, body, landed)
    }

    fn decide_approval(
        &self,
        id: &str,
        grant: bool,
        by: &str,
        note: Option<&str>,
        now: Option<Micros>,
    ) -> Result<ApprovalRecord> {
        planner::check_request_id(id)?;
        let what = if grant {
            "grant_approval"
        } else {
            "deny_approval"
        };
        let table = &self.sql.approvals;
        let body = |tx: &mut Client| -> Result<ApprovalRecord> {
            let fail = |e: PgError| self.failed(what, id, &e);
            let now = self.clock(tx, now).map_err(fail)?;
            let rows = select(tx, table, "request_id = $1", &[id]).map_err(fail)?;
            let row = planner::plan_decision(first(rows)?, id, grant, by, note, now)?;
            if cas(tx, &self.sql, ApprovalState::Pending, &row, now).map_err(fail)? != 1 {
                // Another decision landed meanwhile: refuse by what is there now.
                let rows = select(tx, table, "request_id = $1", &[id]).map_err(fail)?;
                planner::plan_decision(first(rows)?, id, grant, by, note, now)?;
                return Err(Error::StoreWriteFailed(format!(
                    "{what} for approval request '{id}': the request changed meanwhile; nothing \
                     was committed, so the decision may be retried"
                )));
            }
            Ok(row)
        };
        self.approval_write(what, id, body, |found, ours| found == ours)
    }

    fn get_approval(&self, id: &str, now: Option<Micros>) -> Result<Option<ApprovalRecord>> {
        planner::check_request_id(id)?;
        let (rows, _) = self.approvals_read("request_id = $1", &[id], now)?;
        Ok(rows.into_iter().next())
    }

    fn list_approvals(
        &self,
        state: Option<ApprovalState>,
        now: Option<Micros>,
    ) -> Result<Vec<ApprovalRecord>> {
        let (rows, _) = self.approvals_read("true ORDER BY requested_at, request_id", &[], now)?;
        Ok(rows
            .into_iter()
            .filter(|r| state.is_none_or(|s| r.state == s))
            .collect())
    }
}
