//! Asking, deciding and reading approval requests, written once for both backends: each write
//! one transaction with the planner's row. (A grant is used inside the reservation's own
//! transaction, which stays with each backend.)

use super::listing::ApprovalFilter;
use super::policy::rule_of;
use super::tx::{OversightStore, OversightTx, Pick};
use crate::approval::{new_request_id, ApprovalAsk, ApprovalRecord, ApprovalState};
use crate::error::{Error, Result};
use crate::planner::{self, RequestPlan};
use crate::record::Micros;
use crate::store::api::Approvals;
use crate::store::recovery::Commit;

/// The first of `rows`.
fn first(rows: Vec<ApprovalRecord>) -> Option<ApprovalRecord> {
    rows.into_iter().next()
}

impl<S: OversightStore> Approvals for S {
    fn ask_approval(
        &self,
        ask: &ApprovalAsk<'_>,
        now: Option<Micros>,
    ) -> Result<(ApprovalRecord, bool)> {
        request(self, ask, now)
    }

    fn decide_approval(
        &self,
        id: &str,
        grant: bool,
        by: &str,
        note: Option<&str>,
        now: Option<Micros>,
    ) -> Result<ApprovalRecord> {
        decide(self, id, (grant, by, note), now)
    }

    fn get_approval(&self, id: &str, now: Option<Micros>) -> Result<Option<ApprovalRecord>> {
        planner::check_request_id(id)?;
        Ok(first(read(self, |_| Pick::Id(id), now)?))
    }

    fn list_approvals(
        &self,
        filter: &ApprovalFilter<'_>,
        now: Option<Micros>,
    ) -> Result<Vec<ApprovalRecord>> {
        check_filter(self, filter)?;
        read(self, |n| Pick::Listed(filter, n), now)
    }

    fn count_approvals(
        &self,
        filter: &ApprovalFilter<'_>,
        cap: u64,
        now: Option<Micros>,
    ) -> Result<u64> {
        check_filter(self, filter)?;
        let fixed = self.fixed_now(now);
        self.read(("approvals", ""), |tx| {
            let n = tx.clock(fixed)?;
            tx.count_approvals(filter, n, cap)
        })?
        .map_err(|e| self.read_failed("approvals", e))
    }
}

/// The request that stands for `ask`, or a new one; and whether it is new (written by this
/// call).
fn request<S: OversightStore>(
    s: &S,
    ask: &ApprovalAsk<'_>,
    now: Option<Micros>,
) -> Result<(ApprovalRecord, bool)> {
    const WHAT: &str = "request_approval";
    let created = std::cell::Cell::new(false);
    let fixed = s.fixed_now(now);
    let id = new_request_id()?;
    let call = Pick::Latest(ask.action, ask.args_digest, ask.effect_key);
    let body = |tx: &mut S::Tx<'_>| -> Result<ApprovalRecord> {
        let fail = |e| s.write_failed(WHAT, ask.action, e);
        let now = tx.clock(fixed).map_err(fail)?;
        // The store's policy may require more approvers than the caller asks for, or deny.
        let rule = rule_of(tx, ask.action).map_err(fail)?;
        let ask = &ApprovalAsk {
            approvals_needed: planner::approvals_needed(
                rule.as_ref(),
                ask.action,
                ask.approvals_needed,
            )?,
            ..*ask
        };
        let latest = first(tx.approvals(call).map_err(fail)?);
        match planner::plan_request(latest, ask, &id, now)? {
            RequestPlan::Stands(r) => Ok(r.at(now)),
            RequestPlan::Ask { expire, new } => {
                // Hold the key's effect row (if any) until this request commits: a prune
                // that locked it first removes it before the request lands; one that comes
                // after waits, then sees the request and keeps the row.
                tx.hold_effect(ask.effect_key).map_err(fail)?;
                if let Some((from, old)) = expire {
                    tx.cas_approval(from, &old, now).map_err(fail)?;
                }
                if tx.insert_approval(&new, now).map_err(fail)? == 1 {
                    created.set(true);
                    return Ok(new);
                }
                // Another caller's request for the same action and arguments won the unique
                // index (it waited for that caller to commit): that one stands.
                let won = first(tx.approvals(call).map_err(fail)?);
                won.map(|r| r.at(now)).ok_or_else(|| {
                    Error::StoreWriteFailed(format!(
                        "{WHAT} for '{}': the request changed meanwhile; nothing was \
                         committed, so the call may be retried",
                        ask.action
                    ))
                })
            }
        }
    };
    // a request that stands wrote nothing; a new one landed if it is there
    let landed =
        |found: &ApprovalRecord, ours: &ApprovalRecord| found.request_id == ours.request_id;
    let found = write(s, WHAT, &id, body, landed)?;
    Ok((found, created.get()))
}

/// A person's decision `(grant, by, note)` on the pending request `id`.
fn decide<S: OversightStore>(
    s: &S,
    id: &str,
    (grant, by, note): (bool, &str, Option<&str>),
    now: Option<Micros>,
) -> Result<ApprovalRecord> {
    planner::check_request_id(id)?;
    let fixed = s.fixed_now(now);
    let what = if grant {
        "grant_approval"
    } else {
        "deny_approval"
    };
    let body = |tx: &mut S::Tx<'_>| -> Result<ApprovalRecord> {
        let fail = |e| s.write_failed(what, id, e);
        let now = tx.clock(fixed).map_err(fail)?;
        // Concurrent decisions wait here, so each reads the grants recorded before it.
        tx.lock_request(id).map_err(fail)?;
        let found = first(tx.approvals(Pick::Id(id)).map_err(fail)?);
        let row = planner::plan_decision(found, id, grant, by, note, now)?;
        if tx
            .cas_approval(ApprovalState::Pending, &row, now)
            .map_err(fail)?
            != 1
        {
            // Another decision landed meanwhile: refuse by what is there now.
            let found = first(tx.approvals(Pick::Id(id)).map_err(fail)?);
            planner::plan_decision(found, id, grant, by, note, now)?;
            return Err(Error::StoreWriteFailed(format!(
                "{what} for approval request '{id}': the request changed meanwhile; nothing \
                 was committed, so the decision may be retried"
            )));
        }
        Ok(row)
    };
    write(s, what, id, body, |found, ours| found == ours)
}

/// The requests `pick` selects at the store's clock (or `now`), each in its state then.
fn read<'a, S: OversightStore>(
    s: &S,
    pick: impl Fn(Micros) -> Pick<'a>,
    now: Option<Micros>,
) -> Result<Vec<ApprovalRecord>> {
    let fixed = s.fixed_now(now);
    let found = s.read(("approvals", ""), |tx| {
        let n = tx.clock(fixed)?;
        Ok((tx.approvals(pick(n))?, n))
    })?;
    let (rows, n) = found.map_err(|e| s.read_failed("approvals", e))?;
    Ok(rows.into_iter().map(|r| r.at(n)).collect())
}

/// Refuse a filter's text no listing can match, and a cursor's request id of the wrong form.
fn check_filter<S: OversightStore>(_s: &S, f: &ApprovalFilter<'_>) -> Result<()> {
    let texts = [
        ("action", f.action),
        ("prefix", f.prefix),
        ("requested_by", f.requested_by),
    ];
    for (name, text) in texts {
        if text.is_some_and(|t| t.contains('\0')) {
            // No stored name or key holds one on PostgreSQL, and SQLite's `length()` stops
            // at it, so such a filter could never match as asked.
            return Err(Error::InvalidArgument(format!(
                "the {name} filter holds a NUL character, which no listing can match"
            )));
        }
    }
    if let Some((_, id)) = f.after {
        planner::check_request_id(id).map_err(|_| {
            Error::InvalidArgument(format!(
                "after: {id:?} is not an approval request's id (apr_ and 32 hex digits): the \
                 cursor is not one of a listed request's"
            ))
        })?;
    }
    Ok(())
}

/// One approval write (`what` on request `id`); after an unknown `COMMIT` the request is
/// re-read on a fresh connection and `landed` says whether the row there is ours. Where a
/// failed `COMMIT` cannot land later (SQLite), a re-read that does not find it means nothing
/// was committed.
fn write<S: OversightStore>(
    s: &S,
    what: &str,
    id: &str,
    body: impl FnOnce(&mut S::Tx<'_>) -> Result<ApprovalRecord>,
    landed: impl FnOnce(&ApprovalRecord, &ApprovalRecord) -> bool,
) -> Result<ApprovalRecord> {
    let (ours, why) = match s.write((what, id), body)? {
        Commit::Landed(r) => return Ok(r),
        Commit::Unknown(r, why) => (r, why),
    };
    match s.fresh(|tx| tx.approvals(Pick::Id(&ours.request_id))) {
        Ok(rows) => match first(rows) {
            Some(found) if landed(&found, &ours) => Ok(ours),
            _ if s.failed_commit_may_land_later() => Err(Error::unresolved(format!(
                "the COMMIT of {what} for approval request '{id}' failed ({why}) and a re-read \
                 did not find it written; it may still land. Read the request before deciding \
                 again"
            ))),
            _ => Err(Error::StoreWriteFailed(format!(
                "{what} for effect '{id}' failed in {}: its COMMIT failed ({why}); nothing was \
                 committed, so the write may be retried",
                s.store_name()
            ))),
        },
        Err(e) => Err(Error::unresolved(format!(
            "the COMMIT of {what} for approval request '{id}' failed ({why}) and re-reading \
             it failed ({e}); read the request to see whether it landed"
        ))),
    }
}
