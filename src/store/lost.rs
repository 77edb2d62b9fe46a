//! After the decorator's outcome write was refused: whether the row says the store lost the
//! reservation it acknowledged ([`crate::planner::lost_write`]); then the key is marked
//! `ambiguous` for a person where the agent's duty can mark it, so that no blind retry runs the
//! effect once more.

use super::backend::{Backend, RowWrite};
use super::recovery::TransitionCall;
use crate::error::Error;
use crate::planner::{self, Proposal, Transition};
use crate::receipt::Event;
use crate::record::{EffectState, Micros};

/// `e`, the refusal of the outcome write `transition` of attempt `held` of `action_id` on
/// `key`, as the caller gets it: where the row, read again, says the store lost that attempt's
/// reservation, `Error::LostWrite` ([`settle_lost`]); else `e` as it is. A refusal is rare
/// on this path (a newer attempt, a person's resolution), so the read costs nothing on the
/// way every call takes.
pub(crate) fn after_refusal<S: Backend + ?Sized>(
    store: &S,
    e: Error,
    (key, action_id, held): (&str, &str, i64),
    (transition, now): (&Transition, Option<Micros>),
) -> Error {
    let refusal = matches!(
        e,
        Error::Duplicate { .. }
            | Error::Conflict { .. }
            | Error::Ambiguous { .. }
            | Error::InvalidArgument(_)
    );
    if !refusal {
        return e;
    }
    let Ok(found) = store.read_row(key) else {
        return e; // the refusal stands; nothing more is known
    };
    match planner::lost_write(
        found.as_ref(),
        key,
        action_id,
        Some(held),
        transition.name(),
    ) {
        Some(lost) => settle_lost(store, lost, transition, now),
        None => e,
    }
}

/// A lost write met by an outcome write whose executor ran, or may have (`commit`,
/// `mark_ambiguous`), first marks the key `ambiguous` for a person, and says whether it did. A
/// lost `fail` reports an executor that did not run: it is only reported.
fn settle_lost<S: Backend + ?Sized>(
    store: &S,
    e: Error,
    transition: &Transition,
    now: Option<Micros>,
) -> Error {
    let Error::LostWrite {
        message,
        effect_key,
        action_id,
        record,
        ..
    } = e
    else {
        return e;
    };
    let ran = match transition {
        Transition::Commit { .. } => "returned",
        Transition::MarkAmbiguous { .. } => "may have run",
        Transition::Begin | Transition::Fail { .. } => {
            return Error::LostWrite {
                message,
                effect_key,
                action_id,
                record,
                marked: false,
            }
        }
    };
    let note = planner::lost_note(&action_id, ran);
    let now = store.fixed_now(now);
    // No row, or a failed one, would let the next call run the effect once more: the key is
    // recorded anew under this attempt's action and marked, two writes the agent's duty makes.
    let anew = record
        .as_ref()
        .is_none_or(|r| r.state == EffectState::Failed);
    let marked = if anew {
        record_anew(store, (&effect_key, &action_id), &note, now)
    } else {
        let plan = |found, n| planner::plan_lost_mark(found, &note, n);
        store
            .replace_row(RowWrite {
                what: "mark_lost_write",
                event: Event::Outcome,
                key: &effect_key,
                now,
                plan: &plan,
            })
            .map(|_| ())
    };
    let (message, marked) = match marked {
        Ok(()) => {
            log::error!(target: "ctrlrun.store", "lost_write_marked: '{effect_key}': {message}");
            (
                format!("{message}. The key is now ambiguous: a person resolves it"),
                true,
            )
        }
        Err(why) => {
            log::error!(target: "ctrlrun.store", "lost_write: '{effect_key}': {message}; not marked: {why}");
            (
                format!("{message}. The key could not be marked ambiguous ({why})"),
                false,
            )
        }
    };
    Error::LostWrite {
        message,
        effect_key,
        action_id,
        record,
        marked,
    }
}

/// A new attempt of `action_id` on `key` (no row, or a failed one), marked `ambiguous` with
/// `note` at once: the key then refuses a blind retry until a person resolves it.
fn record_anew<S: Backend + ?Sized>(
    store: &S,
    (key, action_id): (&str, &str),
    note: &str,
    now: Option<Micros>,
) -> crate::error::Result<()> {
    const HOLD: Micros = 60_000_000; // a minute: the mark follows at once
    let row = store.reserve_row(Proposal::new(key, action_id, HOLD, false), now)?;
    let mark = Transition::MarkAmbiguous {
        error: note.to_owned(),
    };
    let call = TransitionCall::new(key, action_id, Some(row.attempt), &mark, now)?;
    store.write_transition(&call, false).map(|_| ())
}
