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
    /// The store's policy denies the action: nothing was written.
    #[error("{0}")]
    Denied(String),
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
    /// `effect_key` and `action_id` name the write's key and attempt (set by the store's
    /// entry points: [`Error::naming`]); `None` where the write had none.
    #[error("{message}")]
    StoreUnresolved {
        message: String,
        effect_key: Option<String>,
        action_id: Option<String>,
    },
    /// A holder's write found that the store lost a write it had acknowledged to this
    /// process (see [`crate::planner::lost_write`]); `marked`: the key was then marked
    /// `ambiguous` for a person. `record` is the row the write met.
    #[error("{message}")]
    LostWrite {
        message: String,
        effect_key: String,
        action_id: String,
        record: Option<Box<EffectRecord>>,
        marked: bool,
    },
    /// The database server refused the write or read for want of a privilege (SQLSTATE
    /// 42501): this role lacks the duty it needs (docs/roles.md). Nothing was written.
    #[error("{0}")]
    PermissionDenied(String),
    /// Any other store failure: cannot open, corrupt file, newer schema.
    #[error("{0}")]
    Store(String),
    /// A step run without waiting ([`crate::store::nowait`]) would have had to wait; nothing
    /// was written. Never reaches a caller: the step is handed to a thread instead.
    #[error("the store step would have had to wait; nothing was written")]
    WouldWait,
}

impl Error {
    /// A [`Error::StoreUnresolved`] whose key and attempt the caller fills in
    /// ([`Error::naming`]).
    pub fn unresolved(message: String) -> Error {
        Error::StoreUnresolved {
            message,
            effect_key: None,
            action_id: None,
        }
    }

    /// This error, with a `StoreUnresolved`'s key and attempt named where they are not yet.
    pub fn naming(self, key: &str, action_id: Option<&str>) -> Error {
        match self {
            Error::StoreUnresolved {
                message,
                effect_key,
                action_id: id,
            } => Error::StoreUnresolved {
                message,
                effect_key: effect_key.or_else(|| Some(key.to_owned())),
                action_id: id.or_else(|| action_id.map(str::to_owned)),
            },
            other => other,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
