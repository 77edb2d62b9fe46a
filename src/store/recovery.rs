//! After an unknown `COMMIT` (docs/spec.md §6): the row is re-read on a fresh connection and decides.
//!
//! This module holds what both stores share: how a transaction ended ([`Commit`]), what a
//! write step wrote ([`Step`]), and the driver that settles a transition whose `COMMIT` failed
//! ([`settle_transition`]). Each backend supplies only how to re-read ([`Reread`]) and how to
//! re-issue its write. Every branch is logged on `ctrlrun.store` with its name.

use crate::error::{Error, Result};
use crate::planner::{self, AfterUnknown, Expected, ReservationPlan, Transition};
use crate::receipt::Event;
use crate::record::{EffectRecord, Micros};

/// How a transaction ended.
pub(crate) enum Commit<T> {
    /// `COMMIT` succeeded.
    Landed(T),
    /// `COMMIT` itself failed (why): whether it landed is unknown.
    Unknown(T, String),
}

/// What a write step decided: the row it wrote (if any) and what to return once that write is
/// known to have landed.
pub(crate) struct Step {
    pub(crate) written: Option<EffectRecord>,
    /// What the write is, for its receipt.
    pub(crate) event: Event,
    pub(crate) outcome: Result<EffectRecord>,
    /// The server set the row's times as it wrote it, so `written` has the planner's times,
    /// not the row's: the row is then known by its attempt token, which only this write sets.
    pub(crate) timed_by_server: bool,
}

impl Step {
    /// `row` written and returned.
    pub(crate) fn wrote(row: EffectRecord, event: Event) -> Step {
        Step {
            written: Some(row.clone()),
            event,
            outcome: Ok(row),
            timed_by_server: false,
        }
    }

    /// Nothing written: refused with `error`.
    pub(crate) fn refused(error: Error) -> Step {
        Step {
            written: None,
            event: Event::Reservation,
            outcome: Err(error),
            timed_by_server: false,
        }
    }

    /// A reservation plan as a write: the row it expects to replace (`None`: an insert), and
    /// the step (a lapse writes its row, then refuses).
    pub(crate) fn of_reservation(plan: ReservationPlan) -> (Option<Expected>, Step) {
        match plan {
            ReservationPlan::Insert(row) => (None, Step::wrote(row, Event::Reservation)),
            ReservationPlan::Renew { expected, record } => {
                (Some(expected), Step::wrote(record, Event::Reservation))
            }
            ReservationPlan::Lapse { expected, record } => (
                Some(expected),
                Step {
                    written: Some(record.clone()),
                    event: Event::Lapse,
                    outcome: Err(Error::ambiguous(record)),
                    timed_by_server: false,
                },
            ),
            ReservationPlan::Refuse(refusal) => (None, Step::refused(refusal.into_error())),
        }
    }

    /// Whether `row` is the row this step wrote: equal to it, or, for a row timed by the
    /// server, the same attempt (action id, attempt token) in the same state.
    fn is_written(&self, row: &EffectRecord) -> bool {
        let Some(written) = &self.written else {
            return false;
        };
        row == written
            || (self.timed_by_server
                && written.attempt_token.is_some()
                && row.attempt_token == written.attempt_token
                && row.action_id == written.action_id
                && row.attempt == written.attempt
                && row.state == written.state)
    }
}

/// What a backend supplies to recovery.
pub trait Reread {
    /// Re-read `key` on a fresh connection (never a pooled one): the row, and the store's
    /// clock. A failed re-read is `StoreUnresolved`.
    fn reread(&self, what: &str, key: &str, why: &str) -> Result<(Option<EffectRecord>, Micros)>;

    /// The store, as messages name it ("the SQLite store at …").
    fn store_name(&self) -> String;

    /// Whether a `COMMIT` that failed may still land after a re-read that did not see it. Not
    /// for an embedded SQLite file (the failed `COMMIT` ended in this process: the re-read is
    /// final); a server may still be processing a `COMMIT` whose reply was lost.
    fn failed_commit_may_land_later(&self) -> bool;
}

/// The error for an unknown `COMMIT` whose re-read failed (`cause`): it says what the caller
/// needs next, which depends on the write: before the executor's body (the reservation,
/// begin) nothing ran; an outcome write comes after the body ran.
pub(crate) fn reread_failed(
    store_name: &str,
    what: &str,
    key: &str,
    why: &str,
    cause: &str,
) -> Error {
    log::error!(target: "ctrlrun.store", "reread_failed: {what} '{key}': {cause}");
    let next = match what {
        "reserve_effect" | "begin_execution" => {
            "nothing more was written and the executor was not run. The key may stay reserved \
             until its lease lapses; then a person resolves it"
        }
        "commit_effect" | "fail_effect" | "mark_ambiguous" => {
            "nothing more was written. This write records an outcome, so the executor has \
             already run; if the write did not land, the key turns ambiguous when its lease \
             lapses, and a person resolves it. Do not run it again blindly"
        }
        _ => "nothing more was written; read the effect to see whether the write landed",
    };
    Error::unresolved(format!(
        "the COMMIT of {what} for effect '{key}' in {store_name} may or may not have landed \
         ({why}), and re-reading the row on a fresh connection failed ({cause}); {next}"
    ))
}

/// The arguments of one transition, as its write and its recovery need them.
pub struct TransitionCall<'a> {
    pub(crate) key: &'a str,
    pub(crate) action_id: &'a str,
    pub(crate) attempt: Option<i64>,
    pub(crate) transition: &'a Transition,
    /// The caller's clock; `None`: the store's own (the re-read's).
    pub(crate) now: Option<Micros>,
}

impl<'a> TransitionCall<'a> {
    /// The call, once its action id is checked.
    pub(crate) fn new(
        key: &'a str,
        action_id: &'a str,
        attempt: Option<i64>,
        transition: &'a Transition,
        now: Option<Micros>,
    ) -> Result<TransitionCall<'a>> {
        planner::check_action_id(action_id)?;
        Ok(TransitionCall {
            key,
            action_id,
            attempt,
            transition,
            now,
        })
    }
}

/// Settle a transition from how its transaction ended. After an unknown `COMMIT` the re-read
/// decides: our write is there (`reread_landed`), the row is unchanged so the write is issued
/// once more (`reread_unchanged_reissue`, through `reissue`), or another writer's row refuses
/// it (`reread_other`). `landed` turns the re-read row into the caller's outcome.
pub(crate) fn settle_transition<T>(
    store: &impl Reread,
    call: &TransitionCall<'_>,
    committed: Commit<Result<T>>,
    reissue: Option<impl FnOnce() -> Result<T>>,
    landed: impl FnOnce(EffectRecord) -> T,
) -> Result<T> {
    let why = match committed {
        Commit::Landed(outcome) => return outcome,
        Commit::Unknown(Err(e), _) => return Err(e), // nothing was written: nothing unknown
        Commit::Unknown(Ok(_), why) => why,
    };
    let (what, key) = (call.transition.name(), call.key);
    log::warn!(target: "ctrlrun.store", "commit_unknown: {what} '{key}': {why}");
    let (found, n) = store.reread(what, key, &why)?;
    let settled = planner::settle_unknown_transition(
        found,
        key,
        call.action_id,
        call.attempt,
        call.transition,
        call.now.unwrap_or(n),
    );
    match settled {
        AfterUnknown::Landed(row) => {
            log::warn!(target: "ctrlrun.store", "reread_landed: {what} '{key}'");
            Ok(landed(row))
        }
        AfterUnknown::Reissue => match reissue {
            Some(again) => {
                log::warn!(target: "ctrlrun.store", "reread_unchanged_reissue: {what} '{key}'");
                again()
            }
            None => Err(failed_twice(store, "re-issued", what, key, &why)),
        },
        AfterUnknown::Refuse(e) => {
            log::warn!(target: "ctrlrun.store", "reread_other: {what} '{key}'");
            Err(e)
        }
    }
}

/// Settle a write that planned a whole row (a reservation, a lease extension, a resolution)
/// from how its transaction ended. After an unknown `COMMIT` the re-read decides: the row we
/// wrote means it landed (`reread_identical_landed`); no row (`reread_none_retry_insert`) or
/// another row (`reread_other_replan`) first asks `refusal` whether that row refuses the
/// write, then runs the step once more through `retry`, which reads and plans again. Without
/// a retry left, the write is unresolved.
pub(crate) fn settle_write(
    store: &impl Reread,
    what: &str,
    key: &str,
    committed: Commit<Step>,
    refusal: impl FnOnce(&EffectRecord, Micros) -> Option<Error>,
    retry: Option<impl FnOnce() -> Result<EffectRecord>>,
) -> Result<EffectRecord> {
    let (step, why) = match committed {
        Commit::Landed(step) => return step.outcome,
        Commit::Unknown(step, why) => (step, why),
    };
    if step.written.is_none() {
        return step.outcome; // nothing was written, so nothing is unknown
    }
    log::warn!(target: "ctrlrun.store", "commit_unknown: {what} '{key}': {why}");
    let (found, n) = store.reread(what, key, &why)?;
    if let Some(row) = found.as_ref().filter(|row| step.is_written(row)) {
        log::warn!(target: "ctrlrun.store", "reread_identical_landed: {what} '{key}'");
        return step.outcome.map(|_| row.clone()); // the row as the store holds it
    }
    let branch = match &found {
        None => "reread_none_retry_insert",
        Some(_) => "reread_other_replan",
    };
    log::warn!(target: "ctrlrun.store", "{branch}: {what} '{key}'");
    if let Some(refused) = found.as_ref().and_then(|row| refusal(row, n)) {
        return Err(refused);
    }
    match retry {
        Some(again) => match again() {
            // The retry met the very row the lost COMMIT wrote (it landed after the re-read):
            // ours, so the write landed.
            Err(Error::Duplicate { record, .. }) if step.is_written(&record) => {
                log::warn!(target: "ctrlrun.store", "retry_met_own_row: {what} '{key}'");
                step.outcome.map(|_| *record)
            }
            // Where the lost COMMIT may still land, a failed retry does not mean that nothing
            // was committed.
            Err(Error::StoreWriteFailed(m)) if store.failed_commit_may_land_later() => {
                Err(Error::unresolved(format!(
                    "the COMMIT of {what} for effect '{key}' in {} may or may not have landed \
                     ({why}), and the write tried again failed ({m}); nothing more was written \
                     and the executor was not run",
                    store.store_name()
                )))
            }
            other => other,
        },
        None => Err(failed_twice(store, "retried", what, key, &why)),
    }
}

/// The second `COMMIT` of a write failed too, after a re-read showed the first had not landed.
/// Where the re-read is final (SQLite), nothing was committed: a failed write, safe to retry
/// (a full disk, an I/O error). Where a lost `COMMIT` may still land, it is unresolved.
fn failed_twice(store: &impl Reread, again: &str, what: &str, key: &str, why: &str) -> Error {
    let name = store.store_name();
    if store.failed_commit_may_land_later() {
        Error::unresolved(format!(
            "the {again} COMMIT of {what} for effect '{key}' in {name} failed again ({why}); \
             nothing more was written"
        ))
    } else {
        Error::StoreWriteFailed(format!(
            "{what} for effect '{key}' failed in {name}: its COMMIT failed twice ({why}) and a \
             re-read showed it did not land; nothing was committed, so the write may be retried"
        ))
    }
}
