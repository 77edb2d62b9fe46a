//! After the decorator's outcome write was refused: whether the row says the store lost the
//! reservation it acknowledged ([`crate::planner::lost_write`]); then the key is marked
//! `ambiguous` for a person where the agent's duty can mark it, so that no blind retry runs the
//! effect once more.

use super::engine::{Engine, RowWrite};
use crate::error::Error;
use crate::planner::{self, Transition};
use crate::receipt::Event;
use crate::record::Micros;

/// `e`, the refusal of the outcome write `transition` of attempt `held` of `action_id` on
/// `key`, as the caller gets it: where the row, read again, says the store lost that attempt's
/// reservation, `Error::LostWrite` ([`settle_lost`]); else `e` as it is. A refusal is rare
/// on this path (a newer attempt, a person's resolution), so the read costs nothing on the
/// way every call takes.
pub(crate) fn after_refusal<S: Engine + ?Sized>(
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
fn settle_lost<S: Engine + ?Sized>(
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
    let plan = |found, n| planner::plan_lost_mark(found, &note, n);
    let marked = store.replace_row(RowWrite {
        what: "mark_lost_write",
        event: Event::Outcome,
        key: &effect_key,
        now: store.fixed_now(now),
        plan: &plan,
    });
    let (message, marked) = match marked {
        Ok(_) => {
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
