//! What a backend supplies ([`Engine`]) for the [`Store`] trait, which is written once over
//! it: the checks, the clock and the planner's calls of each method are the same for both
//! backends; only how a row is reserved, transitioned and replaced is the backend's.

use super::recovery::{Reread, TransitionCall};
use super::{Backend, Retention, Store};
use crate::error::Result;
use crate::planner::{self, Proposal, Transition};
use crate::receipt::Event;
use crate::record::{EffectRecord, EffectState, Micros};

/// A plan of a whole row from the row found and the clock.
pub(crate) type RowPlan<'a> = dyn Fn(Option<EffectRecord>, Micros) -> Result<EffectRecord> + 'a;

pub(crate) trait Engine: Reread + Send + Sync {
    /// [`Store::describe`].
    fn location(&self) -> String;

    /// [`Store::backend`].
    fn kind(&self) -> Backend;

    /// The clock fixed before a write: this host's for a store that has no other (SQLite),
    /// else `now` as given (`None`: the server's, read by the write).
    fn fixed_now(&self, now: Option<Micros>) -> Option<Micros>;

    /// Refuse what a transition would write and this store cannot hold.
    fn check_transition(&self, _t: &Transition) -> Result<()> {
        Ok(())
    }

    /// [`Store::propose`].
    fn reserve_row(&self, p: Proposal<'_>, now: Option<Micros>) -> Result<EffectRecord>;

    /// A later transition; with `read_back` the row written comes back (a store may read it
    /// back anyway).
    fn write_transition(
        &self,
        call: &TransitionCall<'_>,
        read_back: bool,
    ) -> Result<Option<EffectRecord>>;

    /// Read `key`'s row, plan its replacement (`what`, written as `event`) and write it as a
    /// compare-and-set.
    fn replace_row(
        &self,
        what: (&str, Event),
        key: &str,
        now: Option<Micros>,
        plan: &RowPlan<'_>,
    ) -> Result<EffectRecord>;

    /// [`Store::get`].
    fn read_row(&self, key: &str) -> Result<Option<EffectRecord>>;
}

impl<S: Engine + super::Approvals + super::Receipts + Retention> Store for S {
    fn describe(&self) -> String {
        self.location()
    }

    fn backend(&self) -> Backend {
        self.kind()
    }

    fn propose(&self, proposal: Proposal<'_>, now: Option<Micros>) -> Result<EffectRecord> {
        self.reserve_row(proposal, now)
    }

    fn transition(
        &self,
        key: &str,
        action_id: &str,
        attempt: Option<i64>,
        transition: &Transition,
        now: Option<Micros>,
    ) -> Result<EffectRecord> {
        self.check_transition(transition)?;
        let call = TransitionCall::new(key, action_id, attempt, transition, self.fixed_now(now))?;
        let row = self.write_transition(&call, true)?;
        Ok(row.expect("a transition that landed reads its row back"))
    }

    fn transition_unread(
        &self,
        key: &str,
        action_id: &str,
        attempt: Option<i64>,
        transition: &Transition,
        now: Option<Micros>,
    ) -> Result<()> {
        self.check_transition(transition)?;
        let call = TransitionCall::new(key, action_id, attempt, transition, self.fixed_now(now))?;
        self.write_transition(&call, false).map(|_| ())
    }

    fn extend_lease(
        &self,
        key: &str,
        action_id: &str,
        attempt: Option<i64>,
        until: Micros,
        now: Option<Micros>,
    ) -> Result<EffectRecord> {
        planner::check_action_id(action_id)?;
        let plan = |found: Option<EffectRecord>, n: Micros| {
            planner::plan_extension(found, key, action_id, attempt, until, n)
        };
        let what = ("extend_lease", Event::Extension);
        self.replace_row(what, key, self.fixed_now(now), &plan)
    }

    fn resolve(
        &self,
        key: &str,
        target: EffectState,
        resolver: &str,
        now: Option<Micros>,
    ) -> Result<EffectRecord> {
        planner::check_resolver(resolver)?;
        let plan = |found: Option<EffectRecord>, n: Micros| {
            planner::plan_resolution(found, key, target, resolver, n)
        };
        let what = ("resolve_effect", Event::Resolution);
        self.replace_row(what, key, self.fixed_now(now), &plan)
    }

    fn get(&self, key: &str) -> Result<Option<EffectRecord>> {
        self.read_row(key)
    }
}
