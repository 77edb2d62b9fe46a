//! What a backend supplies ([`Backend`]) for the [`Store`](super::Store) trait, which is
//! written once over it: the checks, the clock and the planner's calls of each method are the
//! same for both backends; only how a row is reserved, transitioned and replaced is the
//! backend's. [`BackendKind`] says which database a store is.

use super::posture::PostureLine;
use super::recovery::{Reread, TransitionCall};
use super::retention::{PruneBatch, PruneStep};
use crate::error::Result;
use crate::planner::{Proposal, Transition};
use crate::receipt::Event;
use crate::record::{EffectRecord, Micros};

/// Which database is behind a [`Store`](super::Store).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// One SQLite file on this host.
    Sqlite,
    /// A PostgreSQL database, shared by many hosts.
    Postgres,
}

impl BackendKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Sqlite => "sqlite",
            BackendKind::Postgres => "postgres",
        }
    }
}

/// A plan of a whole row from the row found and the clock.
pub type RowPlan<'a> = dyn Fn(Option<EffectRecord>, Micros) -> Result<EffectRecord> + 'a;

/// A whole-row write: `what` (for messages) of `key`'s row, written as `event`, planned by
/// `plan` at `now` (the caller's clock, else the store's).
#[derive(Clone, Copy)]
pub struct RowWrite<'a> {
    pub what: &'a str,
    pub event: Event,
    pub key: &'a str,
    pub now: Option<Micros>,
    pub plan: &'a RowPlan<'a>,
}

/// What a backend supplies; the rest of the [`Store`](super::Store) trait is written once over
/// it. Which backend it is: [`BackendKind`].
pub trait Backend: Reread + Send + Sync {
    /// [`Store::describe`](super::Store::describe).
    fn location(&self) -> String;

    /// [`Store::backend`](super::Store::backend).
    fn kind(&self) -> BackendKind;

    /// What the store's set-up does to the promise (see [`super::posture`]), as read at open.
    fn posture(&self) -> Vec<PostureLine>;

    /// The clock fixed before a write: this host's for a store that has no other (SQLite),
    /// else `now` as given (`None`: the server's, read by the write).
    fn fixed_now(&self, now: Option<Micros>) -> Option<Micros>;

    /// Refuse what a transition would write and this store cannot hold.
    fn check_transition(&self, _t: &Transition) -> Result<()> {
        Ok(())
    }

    /// [`Store::propose`](super::Store::propose).
    fn reserve_row(&self, p: Proposal<'_>, now: Option<Micros>) -> Result<EffectRecord>;

    /// A later transition; with `read_back` the row written comes back (a store may read it
    /// back anyway).
    fn write_transition(
        &self,
        call: &TransitionCall<'_>,
        read_back: bool,
    ) -> Result<Option<EffectRecord>>;

    /// Read the row, plan its replacement and write it as a compare-and-set.
    fn replace_row(&self, w: RowWrite<'_>) -> Result<EffectRecord>;

    /// [`crate::store::Retention::prune_batch`].
    fn prune_rows(&self, step: PruneStep<'_>) -> Result<PruneBatch>;

    /// [`Store::get`](super::Store::get).
    fn read_row(&self, key: &str) -> Result<Option<EffectRecord>>;

    /// Whether a reservation or an outcome write may be tried on a thread that must not wait
    /// ([`crate::store::nowait`]): true only where a write waits on nothing but locks it can
    /// ask for without waiting (SQLite at `synchronous=NORMAL`: no fsync on commit).
    fn writes_without_waiting(&self) -> bool {
        false
    }
}
