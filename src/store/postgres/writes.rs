//! The store's writes: the reservation and the later transitions, each a transaction with its
//! re-read after an unknown `COMMIT`.

use super::client::{Client, PgError};
use super::conn::rolled_back;
use super::jobs::{Grouped, OutcomeJob, ReserveJob};
use super::oversight;
use super::sql::{read_found, read_record, Found, Sql};
use super::store::PostgresStore;
use crate::env::{holder, new_attempt_token};
use crate::error::{Error, Result};
use crate::planner::{self, Expected, Mismatch, Proposal, ReservationPlan};
use crate::receipt::Event;
use crate::record::{EffectRecord, EffectState, Micros};
use crate::store::group::Turn;
use crate::store::recovery::{settle_transition, settle_write, Commit, Step, TransitionCall};

impl PostgresStore {
    /// A reservation in as few round trips as it can: one statement that commits by itself (no
    /// `BEGIN`, no `COMMIT`; `ctrlrun_reserve`, see [`Sql`]). When the key has a row, it is read
    /// and returned for the planner, which refuses from it (a refusal writes nothing); else the
    /// planner's row for a key with none is inserted. An action that needs an approval (its
    /// grant is used in the reservation's transaction) is decided from a plain read first; it,
    /// a renewal and a lapse go to the reservation transaction, which reads again.
    pub(super) fn reserve_from_a_read(
        &self,
        proposal: Proposal<'_>,
        now: Option<Micros>,
    ) -> Result<EffectRecord> {
        const WHAT: &str = "reserve_effect";
        let key = proposal.key;
        if proposal.needs_approval {
            let row = self
                .read(WHAT, key, |client, sql| sql.select_row(client, key, now))?
                .map_err(|e| self.failed(WHAT, key, &e))?;
            let (found, n) = read_found(&row)?;
            planner::check_lease_end(n, proposal.lease)?;
            if let ReservationPlan::Refuse(refusal) =
                planner::plan_reservation(found.as_ref(), &proposal, n)
            {
                return Err(refusal.into_error());
            }
            let (token, holder) = (new_attempt_token()?, holder());
            let proposal = Proposal {
                token: &token,
                holder: &holder,
                ..proposal
            };
            return self.reserve_step(&proposal, now, Some((found, n)), true);
        }
        // The row a key with none gets; its times are the server's, taken by the INSERT.
        let local = now.unwrap_or_else(crate::env::now_micros);
        planner::check_lease_end(local, proposal.lease)?;
        let (token, holder) = (new_attempt_token()?, holder());
        let proposal = Proposal {
            token: &token,
            holder: &holder,
            ..proposal
        };
        let ReservationPlan::Insert(row) = planner::plan_reservation(None, &proposal, local) else {
            return Err(Error::Store(format!(
                "{WHAT} for effect '{key}': the planner refused a key with no row"
            )));
        };
        let alone = || {
            self.autocommit(WHAT, key, |c, sql| match sql.reserve(c, &row, now) {
                Ok(reserved) => Ok(Commit::Landed(Some(reserved))),
                Err(e) => self.unsettled(WHAT, key, &e, None),
            })
        };
        // With group commit, a reservation that arrives while another is in flight goes in
        // the next batch ([`super::batches`]); one alone goes at once.
        let reserved = if !self.group_commit || now.is_some() {
            alone()
        } else {
            let lease = row.lease_expires_at.map(|until| until - row.created_at);
            let job = ReserveJob {
                row: row.clone(),
                lease,
            };
            match self.reservations.turn(job, |jobs| self.reserve_many(jobs)) {
                Turn::Alone(_, baton) => {
                    let reserved = alone();
                    drop(baton);
                    reserved
                }
                Turn::Batched(Grouped::Wrote(record)) => return Ok(*record),
                Turn::Batched(Grouped::NotWritten) => alone(),
                Turn::Batched(Grouped::Unknown(why)) => Ok(Commit::Unknown(None, why)),
            }
        };
        let answer = match reserved? {
            Commit::Landed(answer) => answer,
            Commit::Unknown(_, why) => {
                let step = Step {
                    timed_by_server: true,
                    ..Step::wrote(row, Event::Reservation)
                };
                return self.settle_reservation(&proposal, now, Commit::Unknown(step, why), true);
            }
        };
        let (inserted, answer) = answer.ok_or_else(|| {
            Error::Store(format!(
                "{WHAT} for effect '{key}': the reservation returned no row"
            ))
        })?;
        if inserted {
            return Ok(read_record(&answer, 0)?.expect("RETURNING a row"));
        }
        // A row is there: the planner refuses from it, or (a renewal, a lapse, a row gone
        // since) the reservation transaction reads and plans again.
        let (found, n) = read_found(&answer)?;
        planner::check_lease_end(n, proposal.lease)?; // by the server's clock, as the writes
        if let ReservationPlan::Refuse(refusal) =
            planner::plan_reservation(found.as_ref(), &proposal, n)
        {
            return Err(refusal.into_error());
        }
        self.reserve_step(&proposal, now, None, true)
    }

    /// Statements that commit by themselves, on a pooled connection. One that died idle in
    /// the pool is noticed before anything is sent on it (the driver looks at its socket once,
    /// no round trip) and the next is tried.
    pub(super) fn autocommit<T>(
        &self,
        what: &str,
        key: &str,
        body: impl FnOnce(&mut Client, &Sql) -> Result<Commit<T>>,
    ) -> Result<Commit<T>> {
        let mut stale = 0;
        loop {
            let mut conn = self.conn(what, key)?;
            if conn.used && !conn.client.still_open() {
                conn.broken = true;
                stale += 1;
                if stale > self.max_stale {
                    return Err(Error::StoreWriteFailed(format!(
                        "{what} for effect '{key}': every pooled connection to the PostgreSQL \
                         store {} had closed; nothing was sent, so the write may be retried",
                        self.description
                    )));
                }
                log::warn!(target: "ctrlrun.store", "stale_connection_dropped: {what} '{key}'");
                continue;
            }
            conn.used = true;
            return body(&mut conn.client, &self.sql);
        }
    }

    /// A write statement that commits by itself failed with `e`: an error the server answered
    /// rolled it back (a failed write, safe to retry); anything else (the connection lost or
    /// the wait run out after it was sent) leaves its commit unknown, like a lost `COMMIT`.
    fn unsettled<T>(&self, what: &str, key: &str, e: &PgError, value: T) -> Result<Commit<T>> {
        if rolled_back(e) {
            Err(self.failed(what, key, e))
        } else {
            Ok(Commit::Unknown(value, e.describe()))
        }
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
                    let used = match oversight::grant_in_force(self, tx, proposal, n) {
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
                        oversight::mark_used(self, tx, key, used, n)?; // an error rolls back
                    }
                    let event = match written.as_ref().map(|r| r.state) {
                        Some(EffectState::Ambiguous) => Event::Lapse, // a lapse's row
                        _ => Event::Reservation,
                    };
                    return Ok(Step {
                        written,
                        event,
                        outcome,
                        timed_by_server: false,
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
            // then refuses by what is there now (docs/spec.md §4).
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
        let committed = self.reserve_txn(proposal, now, first)?;
        self.settle_reservation(proposal, now, committed, may_retry)
    }

    /// Settle a reservation from how its write ended (see [`settle_write`]); the retry is the
    /// reservation transaction.
    fn settle_reservation(
        &self,
        proposal: &Proposal<'_>,
        now: Option<Micros>,
        committed: Commit<Step>,
        may_retry: bool,
    ) -> Result<EffectRecord> {
        let refusal = |row: &EffectRecord, n: Micros| match planner::plan_reservation(
            Some(row),
            proposal,
            now.unwrap_or(n),
        ) {
            ReservationPlan::Refuse(r) => Some(r.into_error()),
            _ => None,
        };
        let retry = may_retry.then_some(|| self.reserve_step(proposal, now, None, false));
        settle_write(
            self,
            "reserve_effect",
            proposal.key,
            committed,
            refusal,
            retry,
        )
    }

    /// A transition in one statement that commits by itself (one round trip); when it matches
    /// no row, the row is read and the planner says whether it had landed, is refused, or is a
    /// late outcome written by a compare-and-set of the whole row.
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
        let alone = || {
            self.autocommit(what, key, |c, sql| {
                let rows = match sql.transition_rows(c, t, key, action_id, attempt, now) {
                    Ok(rows) => rows,
                    Err(e) => return self.unsettled(what, key, &e, Ok(None)),
                };
                if let Some(row) = rows.first() {
                    return Ok(Commit::Landed(read_record(row, 0)));
                }
                let (found, n) = self.select_in(c, what, key, now)?;
                Ok(
                    match planner::plan_mismatch(found, key, action_id, attempt, t, n) {
                        Mismatch::Landed(row) => Commit::Landed(Ok(Some(row))),
                        Mismatch::Refuse(e) => Commit::Landed(Err(e)),
                        // A late outcome: a compare-and-set of the whole row; one that loses to a
                        // concurrent writer fails and may be retried.
                        Mismatch::Late { expected, row } => {
                            match sql.cas(c, &expected, &row, Event::LateOutcome) {
                                Ok(1) => Commit::Landed(Ok(Some(row))),
                                Ok(_) => {
                                    return Err(Error::StoreWriteFailed(format!(
                                    "{what} for effect '{key}': the row changed while its late \
                                     outcome was written; nothing was committed, so the write \
                                     may be retried"
                                )))
                                }
                                Err(e) => return self.unsettled(what, key, &e, Ok(Some(row))),
                            }
                        }
                    },
                )
            })
        };
        // With group commit, an outcome that arrives while another is in flight goes in the
        // next batch ([`super::batches`]); one alone goes at once. A re-issue goes alone.
        let committed = if !self.group_commit || now.is_some() || !may_reissue {
            alone()?
        } else {
            let w = t.write();
            let from: Vec<&str> = w.from.iter().map(|s| s.as_str()).collect();
            let job = OutcomeJob {
                state: w.state.as_str(),
                from: from.join(","),
                clear_lease: w.clear_lease,
                result: w.result.map(str::to_owned),
                error: w.error.map(str::to_owned),
                key: key.to_owned(),
                action_id: action_id.to_owned(),
                attempt,
                event: Event::of_transition(t),
            };
            match self.outcomes.turn(job, |jobs| self.transition_many(jobs)) {
                Turn::Alone(_, baton) => {
                    let committed = alone();
                    drop(baton);
                    committed?
                }
                Turn::Batched(Grouped::Wrote(record)) => Commit::Landed(Ok(Some(*record))),
                Turn::Batched(Grouped::NotWritten) => alone()?,
                Turn::Batched(Grouped::Unknown(why)) => Commit::Unknown(Ok(None), why),
            }
        };
        let reissue = may_reissue.then_some(|| self.transition_step(call, false).map(Some));
        settle_transition(self, call, committed, reissue, Some)?.ok_or_else(|| {
            Error::Store(format!(
                "{what} for effect '{key}': the row written was not returned"
            ))
        })
    }
}
