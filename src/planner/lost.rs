//! A write the store acknowledged, found gone (docs/spec.md §9). A holder that names its
//! attempt (the decorator always does) and finds its key with no row, or held by an earlier
//! attempt, or by another action under its own attempt number, has met a store that lost a
//! committed write: while a key's row exists its attempt numbers only grow, and only the
//! holder's reservation could have written that attempt. Such a store went back in time (a
//! failover to a standby that had not received the write, a restore from a backup, a commit
//! acknowledged before it was durable), or retention removed the key's settled row while the
//! holder still ran (a new row starts again at attempt 1). No refusal of the ordinary kind fits
//! either: the holder's executor ran, and another attempt may run or have run.

use crate::error::Error;
use crate::record::{EffectRecord, EffectState, Micros};

/// How the note of a lost-write mark begins ([`lost_note`]): a row whose error text holds it
/// was marked for a person, and a late outcome of its own holder keeps it `ambiguous`
/// ([`super::plan_mismatch`]).
const LOST_MARK: &str = "the store lost the acknowledged write of action ";

/// The note a lost-write mark adds to the row: attempt `action_id`'s executor `ran` (returned,
/// may have run).
pub fn lost_note(action_id: &str, ran: &str) -> String {
    format!("{LOST_MARK}{action_id}, whose executor {ran}: the effect may have happened twice")
}

/// Whether `row` carries a lost-write mark ([`plan_lost_mark`]).
pub fn marked_lost(row: &EffectRecord) -> bool {
    row.error.as_deref().is_some_and(|e| e.contains(LOST_MARK))
}

/// The error for a write `what` of attempt `attempt` of `action_id` on `key` that met `found`,
/// when `found` says the store lost that attempt's acknowledged write; `None` otherwise (and
/// always for a caller that does not name its attempt).
pub fn lost_write(
    found: Option<&EffectRecord>,
    key: &str,
    action_id: &str,
    attempt: Option<i64>,
    what: &str,
) -> Option<Error> {
    let attempt = attempt?;
    let there = match found {
        None => "the key has no row".to_owned(),
        Some(row)
            if row.attempt < attempt || (row.attempt == attempt && row.action_id != action_id) =>
        {
            format!(
                "the key holds attempt {} of action {} ({}) instead",
                row.attempt, row.action_id, row.state
            )
        }
        Some(_) => return None,
    };
    Some(Error::LostWrite {
        message: format!(
            "{what} for effect '{key}': the store no longer holds attempt {attempt} of action \
             {action_id}, which it acknowledged to this process: {there}. The store lost a \
             committed write (a failover to a standby that had not received it, a restore from \
             a backup, or a commit acknowledged before it was durable), or retention removed \
             the key's row while this attempt still ran; the effect may run, or have run, \
             twice, and a person must look at this key"
        ),
        effect_key: key.to_owned(),
        action_id: action_id.to_owned(),
        record: found.cloned().map(Box::new),
        marked: false,
    })
}

/// The row that marks `found` (the row a lost write met) `ambiguous` for a person, with `note`
/// added to its error text; `Err` (and nothing written) for any other row: none, a settled one
/// (`committed`: the effect happened; `failed` and none are recorded anew instead, see
/// `store::lost`), or one a person already resolved.
pub fn plan_lost_mark(
    found: Option<EffectRecord>,
    note: &str,
    now: Micros,
) -> crate::error::Result<EffectRecord> {
    let refuse = |why: &str| Err(Error::InvalidArgument(why.to_owned()));
    let Some(row) = found else {
        return refuse("the key has no row, and the agent's duty cannot write one born ambiguous");
    };
    let markable = matches!(row.state, EffectState::Reserved | EffectState::Executing)
        || (row.state == EffectState::Ambiguous && row.resolved_by.is_none());
    if !markable {
        return refuse(&format!(
            "the key is {}, which a lost-write mark leaves as it is",
            row.state
        ));
    }
    let error = match row.error.as_deref() {
        Some(e) if !e.is_empty() => format!("{e}; {note}"),
        _ => note.to_owned(),
    };
    Ok(EffectRecord {
        state: EffectState::Ambiguous,
        updated_at: now,
        lease_expires_at: None,
        error: Some(error),
        ..row
    })
}
