//! The one error type of the core. Expected refusals (a duplicate, an ambiguous effect) are
//! errors here because they end the caller's attempt; the binding maps each variant to exactly
//! one Python exception class.

use crate::record::EffectRecord;

/// Which kind of duplicate refused a reservation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DuplicateKind {
    /// The effect already happened.
    Committed,
    /// Another attempt holds a live lease on the key.
    InProgress,
}

impl DuplicateKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DuplicateKind::Committed => "committed",
            DuplicateKind::InProgress => "in_progress",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Wiring errors and impossible transitions.
    #[error("{0}")]
    InvalidArgument(String),
    /// A template cannot be resolved into an effect key.
    #[error("{0}")]
    EffectKey(String),
    /// The key is committed, or held by another attempt under a live lease.
    #[error("{message}")]
    Duplicate {
        kind: DuplicateKind,
        record: Box<EffectRecord>,
        message: String,
    },
    /// A duplicate (`kind`) proposed by another action or with other arguments than the
    /// attempt that holds or held the key: `fields` names the arguments that differ.
    #[error("{message}")]
    Conflict {
        kind: DuplicateKind,
        record: Box<EffectRecord>,
        fields: Vec<String>,
        other_action: Option<String>,
        message: String,
    },
    /// The action needs an approval granted for its name and arguments, and none is there:
    /// nothing was written.
    #[error("{0}")]
    ApprovalNeeded(String),
    /// The key is `ambiguous` (possibly just now, because its lease lapsed).
    #[error("{message}")]
    Ambiguous {
        record: Box<EffectRecord>,
        message: String,
    },
    /// Nothing was committed; retrying the write is safe.
    #[error("{0}")]
    StoreWriteFailed(String),
    /// The outcome of a COMMIT is unknown and the re-read that should settle it failed.
    #[error("{0}")]
    StoreUnresolved(String),
    /// Any other store failure: cannot open, corrupt file, newer schema.
    #[error("{0}")]
    Store(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

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

    pub fn conflict(
        kind: DuplicateKind,
        record: EffectRecord,
        c: crate::planner::Conflict,
    ) -> Error {
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
