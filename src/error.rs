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
