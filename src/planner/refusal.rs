//! The refusals the planners decide and the messages that say them: a duplicate, a conflict,
//! an ambiguous effect, and a write that matched nothing.

use super::rules::format_micros;
use crate::error::{DuplicateKind, Error};
use crate::record::{EffectRecord, EffectState, Micros};

/// How a duplicate proposal differs from the attempt that holds or held the key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// The arguments whose digests differ (names only, never values), sorted.
    pub fields: Vec<String>,
    /// The holder's action name, when a different action proposes the key.
    pub other_action: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    Committed(EffectRecord),
    InProgress(EffectRecord),
    Ambiguous(EffectRecord),
    /// A duplicate (`kind`) whose proposal names another action or other arguments.
    Conflict(DuplicateKind, EffectRecord, Conflict),
}

impl Refusal {
    pub fn into_error(self) -> Error {
        match self {
            Refusal::Committed(r) => Error::duplicate(DuplicateKind::Committed, r),
            Refusal::InProgress(r) => Error::duplicate(DuplicateKind::InProgress, r),
            Refusal::Ambiguous(r) => Error::ambiguous(r),
            Refusal::Conflict(kind, r, c) => Error::conflict(kind, r, c),
        }
    }
}

impl Error {
    pub fn duplicate(kind: DuplicateKind, record: EffectRecord) -> Error {
        let message = match kind {
            DuplicateKind::Committed => format!(
                "effect '{}' is already committed (attempt {}, action {}); refusing to run it again",
                record.effect_key, record.attempt, record.action_id
            ),
            DuplicateKind::InProgress => format!(
                "effect '{}' is in progress: action {} (attempt {}) holds a live lease; refusing a second execution",
                record.effect_key, record.action_id, record.attempt
            ),
        };
        Error::Duplicate {
            kind,
            record: Box::new(record),
            message,
        }
    }

    pub fn conflict(kind: DuplicateKind, record: EffectRecord, c: Conflict) -> Error {
        let (key, attempt) = (&record.effect_key, record.attempt);
        let held = match kind {
            DuplicateKind::Committed => format!("is already committed (attempt {attempt})"),
            DuplicateKind::InProgress => format!("is in progress (attempt {attempt})"),
        };
        let message = match &c.other_action {
            Some(theirs) => format!(
                "effect '{key}' {held} under the action '{theirs}', and another action proposes \
                 the same key: a conflict; refusing it"
            ),
            None if c.fields.is_empty() => {
                format!("effect '{key}' {held} with other arguments: a conflict; refusing it")
            }
            None => {
                let names: Vec<String> = c.fields.iter().map(|f| format!("'{f}'")).collect();
                let which = match names.len() {
                    1 => format!("the argument {} differs", names[0]),
                    _ => format!("the arguments {} differ", names.join(", ")),
                };
                format!(
                    "effect '{key}' {held} with other arguments ({which}): a conflict; refusing it"
                )
            }
        };
        Error::Conflict {
            kind,
            record: Box::new(record),
            fields: c.fields,
            other_action: c.other_action,
            message,
        }
    }

    pub fn ambiguous(record: EffectRecord) -> Error {
        let why = record.error.as_deref().unwrap_or("outcome unknown");
        let message = format!(
            "effect '{}' is ambiguous (held by action {}, attempt {}): {}. A blind retry is refused; \
             check the remote system, then resolve it as committed or failed \
             (store.resolve_effect or `ctrlrun resolve`)",
            record.effect_key, record.action_id, record.attempt, why
        );
        Error::Ambiguous {
            record: Box::new(record),
            message,
        }
    }
}

/// Why a held row whose lease lapsed is `ambiguous`.
pub(crate) fn lapse_note(row: &EffectRecord) -> String {
    match row.lease_expires_at {
        Some(exp) => format!(
            "the lease of action {} (attempt {}) lapsed at {} while {}; \
             nobody knows whether it ran",
            row.action_id,
            row.attempt,
            format_micros(exp),
            row.state
        ),
        None => format!(
            "action {} (attempt {}) was {} without a lease; nobody knows whether it ran",
            row.action_id, row.attempt, row.state
        ),
    }
}

/// docs/spec.md §4's re-read rule for a write that matched nothing.
pub fn refuse_by_row(
    row: EffectRecord,
    action_id: &str,
    attempt: Option<i64>,
    what: &str,
    required: &[EffectState],
    now: Micros,
) -> Error {
    match row.state {
        EffectState::Ambiguous => Error::ambiguous(row),
        EffectState::Committed => Error::duplicate(DuplicateKind::Committed, row),
        _ if row.lease_live(now) && !row.is_attempt(action_id, attempt) => {
            Error::duplicate(DuplicateKind::InProgress, row)
        }
        _ => {
            let required: Vec<&str> = required.iter().map(|s| s.as_str()).collect();
            let want = match attempt {
                Some(a) => format!("action {action_id} attempt {a}"),
                None => format!("action {action_id}"),
            };
            Error::InvalidArgument(format!(
                "cannot {what} effect '{}': it is {} under action {} (attempt {}); that \
                 requires {} under {want}",
                row.effect_key,
                row.state,
                row.action_id,
                row.attempt,
                required.join(" or "),
            ))
        }
    }
}
