//! What group commit's batches carry (see [`super::group`], [`super::batches`]): one call's
//! write, and how its row fared.

use crate::receipt::Event;
use crate::record::EffectRecord;
use crate::store::group::Abandon;

/// How one call's row fared in its batch.
pub(super) enum Grouped {
    /// Written, and the batch's `COMMIT` returned: the row as written.
    Wrote(Box<EffectRecord>),
    /// Not written: a row is there, it is not in the state expected, or the store's policy asks
    /// more of the action; or nothing in the batch was (no connection, or the server refused
    /// the batch: one row it would refuse alone, a deadlock, a role without `EXECUTE` on the
    /// batch functions). The call goes alone, which writes it or says why not.
    NotWritten,
    /// The batch's `COMMIT` may or may not have landed (why): the call re-reads and decides.
    Unknown(String),
}

impl Abandon for Grouped {
    fn abandoned(why: &str) -> Grouped {
        Grouped::Unknown(why.to_owned())
    }
}

/// One reservation in a batch: the planner's row for a key with none (attempt 1, no outcome,
/// no resolver, no approval) and its lease's length.
pub(super) struct ReserveJob {
    pub(super) row: EffectRecord,
    pub(super) lease: Option<i64>,
}

/// One outcome in a batch: the single statement's parameters but the clock and the writer.
pub(super) struct OutcomeJob {
    pub(super) state: &'static str,
    pub(super) from: String,
    pub(super) clear_lease: bool,
    pub(super) result: Option<String>,
    pub(super) error: Option<String>,
    pub(super) key: String,
    pub(super) action_id: String,
    pub(super) attempt: Option<i64>,
    pub(super) event: Event,
}
