//! What group commit's batches carry on SQLite (see [`super::batches`]): one call's write, and
//! how its row fared.

use crate::planner::Transition;
use crate::record::{EffectRecord, Micros};
use crate::store::group::Abandon;

/// How one call's row fared in its batch.
pub(super) enum Grouped {
    /// Written and committed (the row read back, for an outcome that asked for it).
    Wrote(Option<Box<EffectRecord>>),
    /// Not written: the call goes alone.
    NotWritten,
    /// Written, and the `COMMIT` failed (why): the call re-reads and decides.
    Unknown(String),
}

impl Abandon for Grouped {
    fn abandoned(why: &str) -> Grouped {
        Grouped::Unknown(why.to_owned())
    }
}

/// One reservation in a batch: the planner's row for a key that had none.
pub(super) struct ReserveJob {
    pub(super) row: EffectRecord,
}

/// One write in a batch: SQLite takes one writer at a time, so reservations and outcomes go
/// in the same batches (two groups would make their batches wait on each other's lock).
pub(super) enum Job {
    Reserve(ReserveJob),
    Outcome(OutcomeJob),
}

/// One outcome in a batch.
pub(super) struct OutcomeJob {
    pub(super) key: String,
    pub(super) action_id: String,
    pub(super) attempt: Option<i64>,
    pub(super) transition: Transition,
    pub(super) now: Micros,
    pub(super) read_back: bool,
}
