//! Approval requests in the SQLite store: their statements, and asking, deciding and reading,
//! each write under `BEGIN IMMEDIATE` with the planner's row. (A grant is consumed inside the
//! reservation's own transaction: see [`consume`].)

use rusqlite::{params, Connection, OptionalExtension, Row};

use super::SqliteStore;
use crate::approval::{new_request_id, ApprovalAsk, ApprovalRecord, ApprovalState};
use crate::env::{holder, now_micros};
use crate::error::{Error, Result};
use crate::planner::{self, RequestPlan};
use crate::receipt;
use crate::record::Micros;
use crate::store::recovery::Commit;
use crate::store::Approvals;

const COLUMNS: &str = "request_id, action, args_digest, effect_key, arguments, state, \
                       requested_at, ttl, expires_at, decided_at, decided_by, note, used_at, \
                       used_by";

fn read(row: &Row<'_>) -> rusqlite::Result<ApprovalRecord> {
    let state: String = row.get(5)?;
    let state = ApprovalState::parse(&state).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            5,
            rusqlite::types::Type::Text,
            format!("unknown approval state {state:?}").into(),
        )
    })?;
    Ok(ApprovalRecord {
        request_id: row.get(0)?,
        action: row.get(1)?,
        args_digest: row.get(2)?,
        effect_key: row.get(3)?,
        arguments: row.get(4)?,
        state,
        requested_at: row.get(6)?,
        ttl: row.get(7)?,
        expires_at: row.get(8)?,
        decided_at: row.get(9)?,
        decided_by: row.get(10)?,
        note: row.get(11)?,
        used_at: row.get(12)?,
        used_by: row.get(13)?,
    })
}

fn one(c: &Connection, filter: &str, args: &[&str]) -> rusqlite::Result<Option<ApprovalRecord>> {
    c.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM ctrlrun_approvals WHERE {filter}"
    ))?
    .query_row(rusqlite::params_from_iter(args), read)
    .optional()
}

fn by_id(c: &Connection, id: &str) -> rusqlite::Result<Option<ApprovalRecord>> {
    one(c, "request_id = ?1", &[id])
}

/// Insert the planner's new request `r`, written at `now`, with the first receipt of its chain.
fn insert(c: &Connection, r: &ApprovalRecord, now: Micros) -> rusqlite::Result<usize> {
    c.prepare_cached(&format!(
        "INSERT INTO ctrlrun_approvals ({COLUMNS}, updated_at, last_event, written_by, \
         receipt_seq, receipt_prev, receipt_hash) VALUES \
         (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, 1, NULL, \
         ctrlrun_receipt_hash('approval', ?4, ?1, 1, NULL, ?15, ?16, ?2, ?14, NULL, ?6, ?3, \
         ?1, ?11, ?17))"
    ))?
    .execute(params![
        r.request_id,
        r.action,
        r.args_digest,
        r.effect_key,
        r.arguments,
        r.state.as_str(),
        r.requested_at,
        r.ttl,
        r.expires_at,
        r.decided_at,
        r.decided_by,
        r.note,
        r.used_at,
        r.used_by,
        now,
        receipt::approval_event(r.state),
        holder()
    ])
}

/// Write the planner's `r` over the request if it is still in state `from` (at `now`, with the
/// next receipt of its chain): rows changed.
fn cas(
    c: &Connection,
    from: ApprovalState,
    r: &ApprovalRecord,
    now: Micros,
) -> rusqlite::Result<usize> {
    c.prepare_cached(
        "UPDATE ctrlrun_approvals SET state = ?1, expires_at = ?2, decided_at = ?3, \
         decided_by = ?4, note = ?5, used_at = ?6, used_by = ?7, updated_at = ?10, \
         last_event = ?11, written_by = ?12, receipt_seq = COALESCE(receipt_seq, 0) + 1, \
         receipt_prev = receipt_hash, receipt_hash = ctrlrun_receipt_hash('approval', \
         effect_key, request_id, COALESCE(receipt_seq, 0) + 1, receipt_hash, ?10, ?11, action, \
         ?7, NULL, ?1, args_digest, request_id, ?4, ?12) \
         WHERE request_id = ?8 AND state = ?9",
    )?
    .execute(params![
        r.state.as_str(),
        r.expires_at,
        r.decided_at,
        r.decided_by,
        r.note,
        r.used_at,
        r.used_by,
        r.request_id,
        from.as_str(),
        now,
        receipt::approval_event(r.state),
        holder()
    ])
}

/// Inside a reservation's transaction: the grant in force for `action`, `args_digest` and the
/// effect `key`, marked used by `action_id` (single use: the compare-and-set from `granted` must change the
/// row). [`Error::ApprovalNeeded`] when there is none; nothing is written then.
pub(super) fn consume(
    store: &SqliteStore,
    c: &Connection,
    (action, args_digest): (&str, &str),
    key: &str,
    action_id: &str,
    now: Micros,
) -> Result<ApprovalRecord> {
    let found = one(
        c,
        "action = ?1 AND args_digest = ?2 AND effect_key = ?3 AND state = 'granted'",
        &[action, args_digest, key],
    )
    .map_err(|e| store.failed("reserve_effect", key, e))?;
    let used = planner::plan_consume(found, action, action_id, now)?;
    if cas(c, ApprovalState::Granted, &used, now)
        .map_err(|e| store.failed("reserve_effect", key, e))?
        != 1
    {
        return Err(store.failed("reserve_effect", key, "the grant changed under us"));
    }
    Ok(used)
}

impl SqliteStore {
    fn approvals_read<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T> {
        let conn = self.read_conn()?;
        f(&conn.conn).map_err(|e| {
            Error::Store(format!(
                "reading approvals from the SQLite store at {} failed: {e}",
                self.opts.path.display()
            ))
        })
    }

    /// One approval write (`what`) under the write lock; after an unknown `COMMIT` the request
    /// is re-read on a fresh connection: `landed` says whether the row there is ours. (The
    /// re-read of a SQLite file is final: a `COMMIT` that failed in this process never lands.)
    fn approval_write(
        &self,
        what: &str,
        id: &str,
        body: impl FnOnce(&Connection) -> Result<ApprovalRecord>,
        landed: impl FnOnce(&ApprovalRecord, &ApprovalRecord) -> bool,
    ) -> Result<ApprovalRecord> {
        let mut conn = self.conn()?;
        match self.txn(&mut conn, what, id, body)? {
            Commit::Landed(r) => Ok(r),
            Commit::Unknown(r, why) => {
                let again = self.fresh_conn().and_then(|c| {
                    by_id(&c, &r.request_id).map_err(|e| Error::Store(e.to_string()))
                });
                match again {
                    Ok(Some(found)) if landed(&found, &r) => Ok(r),
                    Ok(_) => Err(self.failed(what, id, format!("its COMMIT failed ({why})"))),
                    Err(e) => Err(Error::StoreUnresolved(format!(
                        "the COMMIT of {what} for approval request '{id}' failed ({why}) and \
                         re-reading it failed ({e}); read the request to see whether it landed"
                    ))),
                }
            }
        }
    }
}

impl Approvals for SqliteStore {
    fn request_approval(
        &self,
        ask: &ApprovalAsk<'_>,
        now: Option<Micros>,
    ) -> Result<ApprovalRecord> {
        let now = now.unwrap_or_else(now_micros);
        let id = new_request_id()?;
        let body = |c: &Connection| -> Result<ApprovalRecord> {
            let fail = |e: rusqlite::Error| self.failed("request_approval", ask.action, e);
            let latest = one(
                c,
                "action = ?1 AND args_digest = ?2 AND effect_key = ?3 \
                 ORDER BY requested_at DESC LIMIT 1",
                &[ask.action, ask.args_digest, ask.effect_key],
            )
            .map_err(fail)?;
            match planner::plan_request(latest, ask, &id, now)? {
                RequestPlan::Stands(r) => Ok(r.at(now)),
                RequestPlan::Ask { expire, new } => {
                    if let Some((from, old)) = expire {
                        cas(c, from, &old, now).map_err(fail)?;
                    }
                    insert(c, &new, now).map_err(fail)?;
                    Ok(new)
                }
            }
        };
        // a request that stands wrote nothing; a new one landed if it is there
        let landed =
            |found: &ApprovalRecord, ours: &ApprovalRecord| found.request_id == ours.request_id;
        self.approval_write("request_approval", &id, body, landed)
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
        let now = now.unwrap_or_else(now_micros);
        let what = if grant {
            "grant_approval"
        } else {
            "deny_approval"
        };
        let body = |c: &Connection| -> Result<ApprovalRecord> {
            let fail = |e: rusqlite::Error| self.failed(what, id, e);
            let found = by_id(c, id).map_err(fail)?;
            let row = planner::plan_decision(found, id, grant, by, note, now)?;
            if cas(c, ApprovalState::Pending, &row, now).map_err(fail)? != 1 {
                return Err(self.failed(what, id, "the request changed under us"));
            }
            Ok(row)
        };
        self.approval_write(what, id, body, |found, ours| found == ours)
    }

    fn get_approval(&self, id: &str, now: Option<Micros>) -> Result<Option<ApprovalRecord>> {
        planner::check_request_id(id)?;
        let now = now.unwrap_or_else(now_micros);
        Ok(self.approvals_read(|c| by_id(c, id))?.map(|r| r.at(now)))
    }

    fn list_approvals(
        &self,
        state: Option<ApprovalState>,
        now: Option<Micros>,
    ) -> Result<Vec<ApprovalRecord>> {
        let now = now.unwrap_or_else(now_micros);
        let rows = self.approvals_read(|c| {
            let mut stmt = c.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM ctrlrun_approvals ORDER BY requested_at, request_id"
            ))?;
            let rows = stmt.query_map([], read)?;
            rows.collect::<rusqlite::Result<Vec<_>>>()
        })?;
        Ok(rows
            .into_iter()
            .map(|r| r.at(now))
            .filter(|r| state.is_none_or(|s| r.state == s))
            .collect())
    }
}
