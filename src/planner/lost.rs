//! A write the store acknowledged, found gone (docs/spec.md §6, "A lost write"). A holder that
//! names its attempt (the decorator always does) and finds its key with no row, or held by an
//! earlier attempt, or by another action under its own attempt number, has met a store that
//! lost a committed write: attempt numbers only grow, and only the holder's reservation could
//! have written that attempt. Such a store went back in time (a failover to a standby that had
//! not received the write, a restore from a backup, a commit acknowledged before it was
//! durable); no refusal of the ordinary kind fits it.

use crate::error::Error;
use crate::record::{EffectRecord, EffectState, Micros};

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
             a backup, or a commit acknowledged before it was durable), so the effect may run, \
             or have run, twice; a person must look at this key"
        ),
        effect_key: key.to_owned(),
        action_id: action_id.to_owned(),
        record: found.cloned().map(Box::new),
        marked: false,
    })
}

/// The row that marks `found` (the row a lost write met) `ambiguous` for a person, with `note`
/// added to its error text; `Err` (and nothing written) where the agent's duty cannot mark it:
/// no row (a row born `ambiguous` is not an agent's write), a settled row, or one a person
/// already resolved.
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
            "the key is {}, which only a person changes",
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

#[cfg(test)]
mod tests {
    use super::*;

    fn row(action_id: &str, attempt: i64, state: EffectState) -> EffectRecord {
        EffectRecord {
            effect_key: "k".into(),
            state,
            action_id: action_id.into(),
            attempt,
            created_at: 1,
            updated_at: 1,
            lease_expires_at: Some(100),
            result: None,
            error: None,
            resolved_by: None,
            attempt_token: None,
            action: None,
            holder: None,
            args_digest: None,
            arg_digests: None,
            approval_id: None,
        }
    }

    #[test]
    fn only_a_row_the_held_attempt_cannot_have_become_is_a_lost_write() {
        use EffectState::*;
        let lost = |found: Option<&EffectRecord>, attempt| {
            lost_write(found, "k", "mine", attempt, "commit_effect").is_some()
        };
        assert!(lost(None, Some(1)));
        assert!(lost(Some(&row("theirs", 1, Executing)), Some(1)));
        assert!(lost(Some(&row("theirs", 2, Committed)), Some(3)));
        assert!(!lost(Some(&row("mine", 1, Ambiguous)), Some(1))); // lapsed: a late outcome
        assert!(!lost(Some(&row("theirs", 2, Executing)), Some(1))); // a newer attempt
        assert!(!lost(None, None)); // no attempt named: nothing was held
        assert!(!lost(Some(&row("theirs", 1, Executing)), None));
    }

    #[test]
    fn a_mark_takes_a_held_or_ambiguous_row_and_keeps_its_history() {
        use EffectState::*;
        let marked = plan_lost_mark(Some(row("theirs", 1, Executing)), "lost", 5).unwrap();
        assert_eq!((marked.state, marked.lease_expires_at), (Ambiguous, None));
        assert_eq!(
            (marked.error.as_deref(), marked.updated_at),
            (Some("lost"), 5)
        );
        let noted = EffectRecord {
            error: Some("lapsed".into()),
            ..row("theirs", 1, Ambiguous)
        };
        let again = plan_lost_mark(Some(noted), "lost", 6).unwrap();
        assert_eq!(again.error.as_deref(), Some("lapsed; lost"));
        for state in [Committed, Failed] {
            assert!(plan_lost_mark(Some(row("theirs", 1, state)), "lost", 5).is_err());
        }
        let resolved = EffectRecord {
            resolved_by: Some("alice".into()),
            ..row("theirs", 1, Ambiguous)
        };
        assert!(plan_lost_mark(Some(resolved), "lost", 5).is_err());
        assert!(plan_lost_mark(None, "lost", 5).is_err());
    }
}
