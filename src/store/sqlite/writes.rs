//! The store's writes under `BEGIN IMMEDIATE`, each settled by [`crate::store::recovery`]
//! after an unknown `COMMIT`.

use rusqlite::Connection;

use super::jobs::{Grouped, Job, OutcomeJob, ReserveJob};
use super::oversight;
use super::sql::{compare_and_set, insert, select, set_synchronous, transition_cas};
use super::store::SqliteStore;
use crate::env::{holder, new_attempt_token, now_micros};
use crate::error::{Error, Result};
use crate::planner::{self, Expected, Mismatch, Proposal, ReservationPlan};
use crate::receipt::Event;
use crate::record::{EffectRecord, Micros};
use crate::store::backend::{Backend, BackendKind, RowWrite};
use crate::store::group::Turn;
use crate::store::nowait;
use crate::store::posture::PostureLine;
use crate::store::recovery::{settle_transition, settle_write, Commit, Step, TransitionCall};
use crate::store::retention::{PruneBatch, PruneStep};
use crate::url::Synchronous;

/// A read-plan-write step's plan: from the row found (and the transaction's connection, for a
/// plan that reads more), the row it expects to replace and the step.
pub(super) type Plan<'a> =
    dyn Fn(&Connection, Option<EffectRecord>) -> Result<(Option<Expected>, Step)> + 'a;

impl SqliteStore {
    /// A read-plan-write step under `BEGIN IMMEDIATE`; after an unknown `COMMIT` the row is
    /// re-read: the row we wrote means it landed; anything else re-runs the step once (which
    /// re-reads and re-plans under the lock: an insert retried, an update re-issued, another
    /// row obeyed).
    /// `absent`: a plain read just found no row, so first try the plan for no row (an insert
    /// that does nothing if a row appeared meanwhile); only if it did nothing, read and plan.
    pub(super) fn read_plan_write(
        &self,
        what: &str,
        key: &str,
        plan: &Plan<'_>,
        absent: bool,
        may_retry: bool,
    ) -> Result<EffectRecord> {
        let mut conn = self.conn()?;
        let committed = self.txn(&mut conn, what, key, |c| {
            if absent {
                if let (None, step) = plan(c, None)? {
                    if let Some(row) = &step.written {
                        if insert(c, row).map_err(|e| self.failed(what, key, e))? == 1 {
                            return Ok(step);
                        }
                    }
                }
            }
            let found = select(c, key).map_err(|e| self.failed(what, key, e))?;
            let (expected, step) = plan(c, found)?;
            if let Some(row) = &step.written {
                let written = match &expected {
                    None => insert(c, row),
                    Some(exp) => compare_and_set(c, exp, row, step.event),
                }
                .map_err(|e| self.failed(what, key, e))?;
                if written != 1 {
                    return Err(self.failed(what, key, "the compare-and-set matched no row"));
                }
            }
            Ok(step)
        })?;
        drop(conn);
        // Re-running the step re-reads and re-plans under the write lock: no row retries the
        // insert, the unchanged row re-issues the update, another row is obeyed as planned.
        let retry = may_retry.then_some(|| self.read_plan_write(what, key, plan, false, false));
        settle_write(self, what, key, committed, |_, _| None, retry)
    }

    /// One transition under `BEGIN IMMEDIATE`, settled by [`settle_transition`]; with
    /// `read_back`, the row written is read back in the same transaction. With group commit, an
    /// outcome that arrives while another is in flight goes in the next batch; one alone (or a
    /// re-issue) goes at once.
    pub(super) fn transition_step(
        &self,
        call: &TransitionCall<'_>,
        read_back: bool,
        may_reissue: bool,
    ) -> Result<Option<EffectRecord>> {
        let Some(now) = call.now.filter(|_| may_reissue && self.grouping()) else {
            return self.transition_alone(call, read_back, may_reissue);
        };
        let job = Job::Outcome(OutcomeJob {
            key: call.key.to_owned(),
            action_id: call.action_id.to_owned(),
            attempt: call.attempt,
            transition: call.transition.clone(),
            now,
            read_back,
        });
        let committed = match self.writes.turn(job, |jobs| self.write_many(jobs)) {
            Turn::Alone(_, baton) => {
                let done = self.transition_alone(call, read_back, may_reissue);
                drop(baton);
                return done;
            }
            Turn::Batched(Grouped::NotWritten) => {
                return self.transition_alone(call, read_back, may_reissue)
            }
            Turn::Batched(Grouped::Wrote(row)) => Commit::Landed(Ok(row.map(|r| *r))),
            Turn::Batched(Grouped::Unknown(why)) => Commit::Unknown(Ok(None), why),
        };
        let reissue = Some(|| self.transition_alone(call, read_back, false));
        settle_transition(self, call, committed, reissue, Some)
    }

    /// Whether this call may go in a batch: the URL's `group_commit`, and never on a thread
    /// that must not wait (an event loop's, `nowait`), which would wait for the batch's sender.
    fn grouping(&self) -> bool {
        self.opts.group_commit && !nowait::must_not_wait()
    }

    /// A fresh key's reservation with group commit: alone at once, or in the next batch.
    fn reserve_grouped(&self, row: EffectRecord, plan: &Plan<'_>) -> Result<EffectRecord> {
        const WHAT: &str = "reserve_effect";
        let key = row.effect_key.clone();
        let job = Job::Reserve(ReserveJob { row: row.clone() });
        match self.writes.turn(job, |jobs| self.write_many(jobs)) {
            Turn::Alone(_, baton) => {
                let done = self.read_plan_write(WHAT, &key, plan, true, true);
                drop(baton);
                done
            }
            Turn::Batched(Grouped::Wrote(_)) => Ok(row),
            Turn::Batched(Grouped::NotWritten) => {
                self.read_plan_write(WHAT, &key, plan, true, true)
            }
            Turn::Batched(Grouped::Unknown(why)) => {
                let step = Step::wrote(row, Event::Reservation);
                let retry = Some(|| self.read_plan_write(WHAT, &key, plan, false, false));
                settle_write(
                    self,
                    WHAT,
                    &key,
                    Commit::Unknown(step, why),
                    |_, _| None,
                    retry,
                )
            }
        }
    }

    fn transition_alone(
        &self,
        call: &TransitionCall<'_>,
        read_back: bool,
        may_reissue: bool,
    ) -> Result<Option<EffectRecord>> {
        let (key, action_id, attempt, t) =
            (call.key, call.action_id, call.attempt, call.transition);
        let now = call
            .now
            .expect("SQLite transitions carry the caller's clock");
        let what = t.name();
        let mut conn = self.conn()?;
        // A write that need not survive a power cut that also kills this process (the planner
        // says which) skips the fsync; the next FULL commit syncs the log up to and past it.
        let relaxed =
            !t.needs_durability_with_client() && self.opts.synchronous == Synchronous::Full;
        if relaxed {
            set_synchronous(&conn.conn, "NORMAL").map_err(|e| self.failed(what, key, e))?;
        }
        let committed = self.txn(&mut conn, what, key, |c| {
            let changed = transition_cas(c, key, action_id, attempt, t, now)
                .map_err(|e| self.failed(what, key, e))?;
            if changed == 1 && !read_back {
                return Ok(Ok(None));
            }
            let found = select(c, key).map_err(|e| self.failed(what, key, e))?;
            if changed == 1 {
                return Ok(Ok(found));
            }
            Ok(
                match planner::plan_mismatch(found, key, action_id, attempt, t, now) {
                    Mismatch::Landed(row) => Ok(Some(row)),
                    Mismatch::Refuse(e) => Err(e),
                    Mismatch::Late { expected, row } => {
                        // A late outcome: a compare-and-set of the whole row, under the lock.
                        if compare_and_set(c, &expected, &row, Event::LateOutcome)
                            .map_err(|e| self.failed(what, key, e))?
                            != 1
                        {
                            return Err(self.failed(
                                what,
                                key,
                                "the compare-and-set matched no row",
                            ));
                        }
                        Ok(Some(row))
                    }
                },
            )
        });
        if relaxed && set_synchronous(&conn.conn, "FULL").is_err() {
            conn.broken = true; // never hand out a connection left at NORMAL
        }
        let committed = committed?;
        drop(conn);
        let reissue = may_reissue.then_some(|| self.transition_alone(call, read_back, false));
        settle_transition(self, call, committed, reissue, Some)
    }
}

impl Backend for SqliteStore {
    fn location(&self) -> String {
        format!("sqlite:///{}", self.opts.path.display())
    }

    fn kind(&self) -> BackendKind {
        BackendKind::Sqlite
    }

    fn posture(&self) -> Vec<PostureLine> {
        super::store::posture(self.opts.synchronous)
    }

    /// This host's clock: SQLite has no other.
    fn fixed_now(&self, now: Option<Micros>) -> Option<Micros> {
        Some(now.unwrap_or_else(now_micros))
    }

    fn reserve_row(&self, p: Proposal<'_>, now: Option<Micros>) -> Result<EffectRecord> {
        planner::check_request(p.key, p.action_id, p.lease)?;
        let now = now.unwrap_or_else(now_micros);
        planner::check_lease_end(now, p.lease)?;
        // A refusal needs no write: decide it from a plain read, without taking the write lock.
        // (A stale read only means the caller arrived a moment earlier; anything the planner
        // would grant or lapse is decided again under BEGIN IMMEDIATE below.)
        let seen = self.read(p.key)?;
        if let ReservationPlan::Refuse(refusal) = planner::plan_reservation(seen.as_ref(), &p, now)
        {
            return Err(refusal.into_error());
        }
        let (token, holder) = (new_attempt_token()?, holder()); // only for a call that may write
        let p = Proposal {
            token: &token,
            holder: &holder,
            ..p
        };
        match (p.needs_approval, p.action, p.args) {
            (true, Some(action), Some((digest, _))) => {
                // The grant is used in the reservation's own transaction, only by a write that
                // grants the key (a refusal or a lapse leaves it for the next call).
                let plan = |c: &Connection, found: Option<EffectRecord>| {
                    let plan = planner::plan_reservation(found.as_ref(), &p, now);
                    if !matches!(
                        plan,
                        ReservationPlan::Insert(_) | ReservationPlan::Renew { .. }
                    ) {
                        return Ok(Step::of_reservation(plan));
                    }
                    let used =
                        oversight::consume(self, c, (action, digest), p.key, p.action_id, now)?;
                    let with = Proposal {
                        approval_id: Some(&used.request_id),
                        ..p
                    };
                    let plan = planner::plan_reservation(found.as_ref(), &with, now);
                    Ok(Step::of_reservation(plan))
                };
                self.read_plan_write("reserve_effect", p.key, &plan, false, true)
            }
            (true, _, _) => Err(Error::InvalidArgument(
                "an action that needs approval is reserved with its action name and the digest \
                 of its arguments"
                    .into(),
            )),
            _ => {
                let plan = |c: &Connection, found: Option<EffectRecord>| {
                    let plan = planner::plan_reservation(found.as_ref(), &p, now);
                    if let (
                        Some(action),
                        ReservationPlan::Insert(_) | ReservationPlan::Renew { .. },
                    ) = (p.action, &plan)
                    {
                        oversight::check_unapproved(self, c, action, p.key)?;
                    }
                    Ok(Step::of_reservation(plan))
                };
                if seen.is_none() && self.grouping() {
                    if let ReservationPlan::Insert(row) = planner::plan_reservation(None, &p, now) {
                        return self.reserve_grouped(row, &plan);
                    }
                }
                self.read_plan_write("reserve_effect", p.key, &plan, seen.is_none(), true)
            }
        }
    }

    fn write_transition(
        &self,
        call: &TransitionCall<'_>,
        read_back: bool,
    ) -> Result<Option<EffectRecord>> {
        self.transition_step(call, read_back, true)
    }

    fn replace_row(&self, w: RowWrite<'_>) -> Result<EffectRecord> {
        let now = w.now.unwrap_or_else(now_micros);
        let plan = |_: &Connection, found: Option<EffectRecord>| {
            let expected = found.as_ref().map(Expected::of);
            Ok((expected, Step::wrote((w.plan)(found, now)?, w.event)))
        };
        self.read_plan_write(w.what, w.key, &plan, false, true)
    }

    fn prune_rows(&self, step: PruneStep<'_>) -> Result<PruneBatch> {
        self.prune_batch_in(step)
    }

    fn read_row(&self, key: &str) -> Result<Option<EffectRecord>> {
        self.read(key)
    }

    fn writes_without_waiting(&self) -> bool {
        self.opts.synchronous == Synchronous::Normal && !self.checkpoint_due()
    }
}
