//! The store's writes: the reservation and the later transitions, each a transaction with its
//! re-read after an unknown `COMMIT`.

use super::approvals;
use super::sql::{read_found, read_record, Found};
use super::PostgresStore;
use crate::error::{Error, Result};
use crate::planner::{self, Expected, Mismatch, Proposal, ReservationPlan};
use crate::receipt::Event;
use crate::record::{holder, new_attempt_token, EffectRecord, EffectState, Micros};
use crate::store::recovery::{settle_transition, settle_write, Commit, Step, TransitionCall};

impl PostgresStore {
    /// A reservation: a refusal decided from one plain read, anything else written by
    /// [`PostgresStore::reserve_step`] with a new attempt token.
    pub(super) fn reserve_from_a_read(
        &self,
        proposal: Proposal<'_>,
        now: Option<Micros>,
    ) -> Result<EffectRecord> {
        let (key, lease) = (proposal.key, proposal.lease);
        // A refusal needs no transaction: decide it from one plain read (one round trip
        // instead of BEGIN, statement, COMMIT). A stale read only means the caller arrived a
        // moment earlier; a grant is written by an INSERT that yields to any row there, a
        // renewal or a lapse by a compare-and-set on a row read again in the transaction.
        let row = self
            .read("reserve_effect", key, |client, sql| {
                sql.select_row(client, key, now)
            })?
            .map_err(|e| self.failed("reserve_effect", key, &e))?;
        let (found, n) = read_found(&row)?;
        planner::check_lease_end(n, lease)?;
        if let ReservationPlan::Refuse(refusal) =
            planner::plan_reservation(found.as_ref(), &proposal, n)
        {
            return Err(refusal.into_error());
        }
        let (token, holder) = (new_attempt_token()?, holder()); // only for a call that may write
        let proposal = Proposal {
            token: &token,
            holder: &holder,
            ..proposal
        };
        // A fresh key costs one INSERT planned from this read; a row that appeared meanwhile
        // makes the INSERT return nothing and is read and planned again in the transaction.
        self.reserve_step(&proposal, now, Some((found, n)), true)
    }

    /// One reservation transaction: plan from `first` (the plain read just made) or from a
    /// read in the transaction, write the plan, and re-read and re-plan when a concurrent
    /// writer got there first. Returns what was written (for the identity re-read).
    fn reserve_txn(
        &self,
        proposal: &Proposal<'_>,
        now: Option<Micros>,
        first: Option<Found>,
    ) -> Result<Commit<Step>> {
        const WHAT: &str = "reserve_effect";
        let key = proposal.key;
        self.txn(WHAT, key, |tx, sql| {
            // The plain read made just before is enough to plan an INSERT (which takes its
            // times again); a row to renew or lapse is read again here, so its new lease counts
            // from now.
            let mut found = match first {
                Some(found) if found.0.is_none() => found,
                _ => self.select_in(tx, WHAT, key, now)?,
            };
            // A write that loses a race re-reads and re-plans; a few rounds at most.
            for _ in 0..4 {
                let (row, n) = found;
                let mut plan = planner::plan_reservation(row.as_ref(), proposal, n);
                // An action that needs approval writes its row with the grant in force, and
                // marks the grant used after that write (the key's unique index orders
                // contenders first: a loser waits on the winner's row and is refused by it).
                let mut grant = None;
                if let (true, ReservationPlan::Insert(_) | ReservationPlan::Renew { .. }) =
                    (proposal.needs_approval, &plan)
                {
                    let used = match approvals::grant_in_force(self, tx, proposal, n) {
                        Ok(used) => used,
                        Err(needed) => {
                            // A winner may have used the grant and written the key meanwhile:
                            // its row refuses this call, which then asks nobody again.
                            let (now_row, n) = self.select_in(tx, WHAT, key, now)?;
                            if let ReservationPlan::Refuse(r) =
                                planner::plan_reservation(now_row.as_ref(), proposal, n)
                            {
                                return Ok(Step::refused(r.into_error()));
                            }
                            return Err(needed);
                        }
                    };
                    let with = Proposal {
                        approval_id: Some(&used.request_id),
                        ..*proposal
                    };
                    plan = planner::plan_reservation(row.as_ref(), &with, n);
                    grant = Some(used);
                }
                let (written, outcome) = match plan {
                    ReservationPlan::Refuse(r) => return Ok(Step::refused(r.into_error())),
                    ReservationPlan::Insert(record) => {
                        let inserted = sql
                            .insert(tx, &record, now)
                            .map_err(|e| self.failed(WHAT, key, &e))?;
                        match inserted {
                            Some(row) => {
                                let rec = read_record(&row, 0)?.expect("RETURNING a row");
                                (Some(rec.clone()), Ok(rec))
                            }
                            None => (None, Ok(record)),
                        }
                    }
                    ReservationPlan::Renew { expected, record } => {
                        let won =
                            self.write_cas(tx, WHAT, (&expected, Event::Reservation), &record)?;
                        (won.then(|| record.clone()), Ok(record))
                    }
                    ReservationPlan::Lapse { expected, record } => {
                        let won = self.write_cas(tx, WHAT, (&expected, Event::Lapse), &record)?;
                        (won.then(|| record.clone()), Err(Error::ambiguous(record)))
                    }
                };
                if written.is_some() {
                    if let Some(used) = &grant {
                        approvals::mark_used(self, tx, key, used, n)?; // an error rolls back
                    }
                    let event = match written.as_ref().map(|r| r.state) {
                        Some(EffectState::Ambiguous) => Event::Lapse, // a lapse's row
                        _ => Event::Reservation,
                    };
                    return Ok(Step {
                        written,
                        event,
                        outcome,
                    });
                }
                // Another writer's row is there now: read it (a new statement sees it under
                // READ COMMITTED) and plan again.
                found = self.select_in(tx, WHAT, key, now)?;
            }
            Err(Error::StoreWriteFailed(format!(
                "{WHAT} for effect '{key}': the row kept changing under concurrent writers; \
                 nothing was committed, so the write may be retried"
            )))
        })
    }

    /// Whole-row read-plan-write for extension and resolution (no lock: the compare-and-set
    /// on the row read decides).
    pub(super) fn read_plan_write(
        &self,
        (what, event): (&str, Event),
        key: &str,
        now: Option<Micros>,
        plan: &dyn Fn(Option<EffectRecord>, Micros) -> Result<EffectRecord>,
        may_retry: bool,
    ) -> Result<EffectRecord> {
        let committed = self.txn(what, key, |tx, _| {
            // A compare-and-set lost to a concurrent writer re-reads and re-plans: the planner
            // then refuses by what is there now (SPEC §4).
            for _ in 0..4 {
                let (found, n) = self.select_in(tx, what, key, now)?;
                let expected = found.as_ref().map(Expected::of);
                let record = plan(found, n)?;
                let expected = expected.expect("a plan that writes found a row");
                if self.write_cas(tx, what, (&expected, event), &record)? {
                    return Ok(Step::wrote(record, event));
                }
            }
            Err(Error::StoreWriteFailed(format!(
                "{what} for effect '{key}': the row kept changing under concurrent writers; \
                 nothing was committed, so the write may be retried"
            )))
        })?;
        let retry =
            may_retry.then_some(|| self.read_plan_write((what, event), key, now, plan, false));
        settle_write(self, what, key, committed, |_, _| None, retry)
    }

    /// A reservation; after an unknown `COMMIT`, the whole-row identity re-read decides: the
    /// row we wrote means it landed; no row means it did not, so the insert is retried once;
    /// any other row goes back to the planner.
    pub(super) fn reserve_step(
        &self,
        proposal: &Proposal<'_>,
        now: Option<Micros>,
        first: Option<Found>,
        may_retry: bool,
    ) -> Result<EffectRecord> {
        const WHAT: &str = "reserve_effect";
        let committed = self.reserve_txn(proposal, now, first)?;
        let refusal = |row: &EffectRecord, n: Micros| match planner::plan_reservation(
            Some(row),
            proposal,
            now.unwrap_or(n),
        ) {
            ReservationPlan::Refuse(r) => Some(r.into_error()),
            _ => None,
        };
        let retry = may_retry.then_some(|| self.reserve_step(proposal, now, None, false));
        settle_write(self, WHAT, proposal.key, committed, refusal, retry)
    }

    pub(super) fn transition_step(
        &self,
        call: &TransitionCall<'_>,
        may_reissue: bool,
    ) -> Result<EffectRecord> {
        let (key, action_id, attempt, t, now) = (
            call.key,
            call.action_id,
            call.attempt,
            call.transition,
            call.now,
        );
        let what = t.name();
        let committed = self.txn(what, key, |tx, sql| {
            let rows = sql
                .transition_rows(tx, t, key, action_id, attempt, now)
                .map_err(|e| self.failed(what, key, &e))?;
            match rows.first() {
                Some(row) => Ok(Ok(read_record(row, 0)?.expect("RETURNING gives the row"))),
                None => {
                    let (found, n) = self.select_in(tx, what, key, now)?;
                    Ok(
                        match planner::plan_mismatch(found, key, action_id, attempt, t, n) {
                            Mismatch::Landed(row) => Ok(row),
                            Mismatch::Refuse(e) => Err(e),
                            // A late outcome: a compare-and-set of the whole row; one that
                            // loses to a concurrent writer fails and may be retried.
                            Mismatch::Late { expected, row } => {
                                let late = (&expected, Event::LateOutcome);
                                if !self.write_cas(tx, what, late, &row)? {
                                    return Err(Error::StoreWriteFailed(format!(
                                        "{what} for effect '{key}': the row changed while its \
                                         late outcome was written; nothing was committed, so \
                                         the write may be retried"
                                    )));
                                }
                                Ok(row)
                            }
                        },
                    )
                }
            }
        })?;
        let reissue = may_reissue.then_some(|| self.transition_step(call, false));
        settle_transition(self, call, committed, reissue, |row| row)
    }
}
