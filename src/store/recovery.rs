//! After an unknown `COMMIT` (SPEC §6): the row is re-read on a fresh connection and decides.
//!
//! This module holds what both stores share: how a transaction ended ([`Commit`]), what a
//! write step wrote ([`Step`]), and the driver that settles a transition whose `COMMIT` failed
//! ([`settle_transition`]). Each backend supplies only how to re-read ([`Reread`]) and how to
//! re-issue its write. Every branch is logged on `ctrlrun.store` with its name.

use crate::error::{Error, Result};
use crate::planner::{self, AfterUnknown, Transition};
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
    pub(crate) outcome: Result<EffectRecord>,
}

/// What a backend supplies to recovery.
pub(crate) trait Reread {
    /// Re-read `key` on a fresh connection (never a pooled one): the row, and the store's
    /// clock. A failed re-read is `StoreUnresolved`.
    fn reread(&self, what: &str, key: &str, why: &str) -> Result<(Option<EffectRecord>, Micros)>;

    /// The store, as messages name it ("the SQLite store at …").
    fn store_name(&self) -> String;
}

/// The arguments of one transition, as its write and its recovery need them.
pub(crate) struct TransitionCall<'a> {
    pub(crate) key: &'a str,
    pub(crate) action_id: &'a str,
    pub(crate) attempt: Option<i64>,
    pub(crate) transition: &'a Transition,
    /// The caller's clock; `None`: the store's own (the re-read's).
    pub(crate) now: Option<Micros>,
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
            None => Err(Error::StoreUnresolved(format!(
                "the re-issued COMMIT of {what} for effect '{key}' in {} failed again ({why}); \
                 nothing more was written",
                store.store_name()
            ))),
        },
        AfterUnknown::Refuse(e) => {
            log::warn!(target: "ctrlrun.store", "reread_other: {what} '{key}'");
            Err(e)
        }
    }
}
