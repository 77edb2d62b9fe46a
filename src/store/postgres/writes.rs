//! The store's writes: the reservation and the later transitions, each a transaction with its
//! re-read after an unknown `COMMIT`.

use super::sql::{read_record, Found};
use super::PostgresStore;
use crate::error::{Error, Result};
use crate::planner::{self, Expected, Mismatch, ReservationPlan};
use crate::record::{EffectRecord, Micros};
use crate::store::recovery::{settle_transition, settle_write, Commit, Step, TransitionCall};

impl PostgresStore {
    /// One reservation transaction: plan from `first` (the plain read just made) or from a
    /// read in the transaction, write the plan, and re-read and re-plan when a concurrent
    /// writer got there first. Returns what was written (for the identity re-read).
    #[allow(clippy::too_many_arguments)]
    fn reserve_txn(
        &self,
        key: &str,
        action_id: &str,
        lease: Micros,
        begin: bool,
        now: Option<Micros>,
        first: Option<Found>,
    ) -> Result<Commit<Step>> {
        const WHAT: &str = "reserve_effect";
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
                let (written, outcome) = match planner::plan_reservation(
                    row.as_ref(),
                    key,
                    action_id,
                    lease,
                    n,
                    begin,
                ) {
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
                        let won = self.write_cas(tx, WHAT, &expected, &record)?;
                        (won.then(|| record.clone()), Ok(record))
                    }
                    ReservationPlan::Lapse { expected, record } => {
                        let won = self.write_cas(tx, WHAT, &expected, &record)?;
                        (won.then(|| record.clone()), Err(Error::ambiguous(record)))
                    }
                };
                if written.is_some() {
                    return Ok(Step { written, outcome });
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
        what: &str,
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
                if self.write_cas(tx, what, &expected, &record)? {
                    return Ok(Step::wrote(record));
                }
            }
            Err(Error::StoreWriteFailed(format!(
                "{what} for effect '{key}': the row kept changing under concurrent writers; \
                 nothing was committed, so the write may be retried"
            )))
        })?;
        let retry = may_retry.then_some(|| self.read_plan_write(what, key, now, plan, false));
        settle_write(self, what, key, committed, |_, _| None, retry)
    }

    /// A reservation; after an unknown `COMMIT`, the whole-row identity re-read decides: the
    /// row we wrote means it landed; no row means it did not, so the insert is retried once;
    /// any other row goes back to the planner.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn reserve_step(
        &self,
        key: &str,
        action_id: &str,
        lease: Micros,
        begin: bool,
        now: Option<Micros>,
        first: Option<Found>,
        may_retry: bool,
    ) -> Result<EffectRecord> {
        const WHAT: &str = "reserve_effect";
        let committed = self.reserve_txn(key, action_id, lease, begin, now, first)?;
        let refusal = |row: &EffectRecord, n: Micros| match planner::plan_reservation(
            Some(row),
            key,
            action_id,
            lease,
            now.unwrap_or(n),
            begin,
        ) {
            ReservationPlan::Refuse(r) => Some(r.into_error()),
            _ => None,
        };
        let retry = may_retry
            .then_some(|| self.reserve_step(key, action_id, lease, begin, now, None, false));
        settle_write(self, WHAT, key, committed, refusal, retry)
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
                                if !self.write_cas(tx, what, &expected, &row)? {
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
