//! A protected call's two store steps as owned values, so that either can go to a core
//! thread (`background.rs`) or be done on the event loop's own (`on_loop.rs`).

use std::time::Duration;

use crate::error::Error;
use crate::planner::{Proposal, Transition};
use crate::record::Micros;
use crate::store::Store;

/// A reservation's arguments, owned (to go to a core thread).
pub(super) struct Reserve {
    pub key: String,
    pub action_id: String,
    pub lease_us: Micros,
    pub now_us: Option<Micros>,
    pub begin: bool,
    pub action: Option<String>,
    /// The arguments' digest and fingerprint (`crate::fingerprint::digests`).
    pub digests: Option<(String, String)>,
    pub approval: bool,
}

impl Reserve {
    pub fn proposal(&self) -> Proposal<'_> {
        Proposal {
            action: self.action.as_deref(),
            args: self.digests.as_ref().map(|(d, f)| (d.as_str(), f.as_str())),
            needs_approval: self.approval,
            ..Proposal::new(&self.key, &self.action_id, self.lease_us, self.begin)
        }
    }
}

/// An outcome write's arguments, owned (to go to a core thread).
pub(super) struct Outcome {
    pub kind: &'static str,
    pub transition: Transition,
    pub pauses: Vec<Duration>,
    pub key: String,
    pub action_id: String,
    pub attempt: Option<i64>,
    pub now_us: Option<Micros>,
}

impl Outcome {
    pub fn write_once(&self, s: &dyn Store, now: Option<Micros>) -> Result<(), Error> {
        s.record_held_outcome(
            &self.key,
            &self.action_id,
            self.attempt,
            &self.transition,
            now,
        )
    }
}
