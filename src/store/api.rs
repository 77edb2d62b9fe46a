//! The traits every store implements: [`Store`] (effects), [`Approvals`], [`Receipts`] and
//! [`Retention`]. [`Store`] is written once over what a backend supplies ([`Backend`]).

use super::backend::{Backend, BackendKind, RowPlan, RowWrite};
use super::oversight::{ApprovalFilter, StorePolicy};
use super::recovery::TransitionCall;
use super::retention::{self, Cursor, EffectFilter, Prune, PruneBatch, PruneStep};
use crate::approval::{ApprovalAsk, ApprovalRecord, ApproverRecord};
use crate::error::Result;
use crate::planner::{self, Proposal, Transition};
use crate::receipt::{Event, Receipt, Verification};
use crate::record::{EffectRecord, EffectState, Micros};

/// Approval requests, kept in the same database as the effects (written once for both
/// backends, in `oversight/approvals.rs`, over each backend's `oversight.rs`).
pub trait Approvals {
    /// Ask for an approval of `ask`: the request that stands for its action and arguments
    /// (pending, granted, or denied), or a new pending one.
    fn request_approval(
        &self,
        ask: &ApprovalAsk<'_>,
        now: Option<Micros>,
    ) -> Result<ApprovalRecord> {
        self.ask_approval(ask, now).map(|(r, _)| r)
    }

    /// [`Approvals::request_approval`], and whether this call wrote the request (a new one)
    /// rather than found it standing.
    fn ask_approval(
        &self,
        ask: &ApprovalAsk<'_>,
        now: Option<Micros>,
    ) -> Result<(ApprovalRecord, bool)>;

    /// A person grants or denies a pending request.
    fn decide_approval(
        &self,
        request_id: &str,
        grant: bool,
        by: &str,
        note: Option<&str>,
        now: Option<Micros>,
    ) -> Result<ApprovalRecord>;

    /// One request, its state as of `now` (a pending request or a grant past its time is
    /// `expired`).
    fn get_approval(&self, request_id: &str, now: Option<Micros>)
        -> Result<Option<ApprovalRecord>>;

    /// The requests `filter` selects, states as of the store's clock (or `now`), in its order.
    fn list_approvals(
        &self,
        filter: &ApprovalFilter<'_>,
        now: Option<Micros>,
    ) -> Result<Vec<ApprovalRecord>>;

    /// How many requests `filter` selects (its `after` too, not its `limit`), counting to
    /// `cap` at most.
    fn count_approvals(
        &self,
        filter: &ApprovalFilter<'_>,
        cap: u64,
        now: Option<Micros>,
    ) -> Result<u64>;
}

/// The accounts of the people who decide in the console (see [`ApproverRecord`]), kept in the
/// same database (written once for both backends, in `oversight/approvers.rs`).
pub trait Approvers {
    /// Create the account `name` (`create`; refused when it exists), or set the secret hash of
    /// the existing one.
    fn put_approver(
        &self,
        name: &str,
        secret_hash: &str,
        create: bool,
        now: Option<Micros>,
    ) -> Result<ApproverRecord>;

    /// The account `name`, if there is one.
    fn get_approver(&self, name: &str) -> Result<Option<ApproverRecord>>;

    /// Every account, by name.
    fn list_approvers(&self) -> Result<Vec<ApproverRecord>>;

    /// Delete the account `name`; whether there was one.
    fn remove_approver(&self, name: &str) -> Result<bool>;
}

/// Receipts: one per committed write, chained per effect key and per approval request (read and
/// verified once for both backends, in `oversight/receipts.rs`; see [`crate::receipt`]).
pub trait Receipts {
    /// The receipts of `key` (or of every key), oldest first; with `limit`, the latest that
    /// many.
    fn list_receipts(&self, key: Option<&str>, limit: Option<u64>) -> Result<Vec<Receipt>>;

    /// Check every chain: each receipt's hash, each chain's order, each row's head.
    fn verify_receipts(&self) -> Result<Verification>;

    /// [`Receipts::verify_receipts`] for the chains of one key only (its effect's and its
    /// approval requests'), reading that key's receipts and rows alone.
    fn verify_key_receipts(&self, key: &str) -> Result<Verification>;
}

/// Listing by filter and retention (each backend implements it in its `retention.rs`; see
/// [`super::retention`]).
pub trait Retention: Backend {
    /// The records `filter` selects, oldest first, served by the store's indexes (no scan of
    /// the whole table for a state, a prefix or an action).
    fn list(&self, filter: &EffectFilter<'_>) -> Result<Vec<EffectRecord>>;

    /// The database's plan for [`Store::list`], to check which index serves a filter (tests).
    #[doc(hidden)]
    fn explain_list(&self, filter: &EffectFilter<'_>) -> Result<String>;

    /// One bounded transaction of [`Retention::prune`]: up to `p.batch` rows in `state` after
    /// `after` (from the first when `None`), in order, are looked at and those still prunable removed.
    fn prune_batch(
        &self,
        p: &Prune<'_>,
        state: EffectState,
        after: Option<&Cursor>,
        now: Option<Micros>,
    ) -> Result<PruneBatch> {
        let prune = p;
        self.prune_rows(PruneStep {
            prune,
            state,
            after,
            now,
        })
    }

    /// How many rows [`Retention::prune`] would remove now (a dry run).
    fn count_prunable(&self, p: &Prune<'_>, now: Option<Micros>) -> Result<u64>;

    /// The store's clock: the database server's for PostgreSQL (`now` when given).
    fn store_now(&self, now: Option<Micros>) -> Result<Micros>;

    /// Remove the settled rows `p` names, batch after batch (see [`super::retention`]), all against
    /// one `now` (the store's clock, read once); the count removed. `progress` hears the
    /// running count after each batch and stops the prune by returning `false` (what was
    /// removed stays removed).
    fn prune(
        &self,
        p: &Prune<'_>,
        now: Option<Micros>,
        progress: &mut dyn FnMut(u64) -> bool,
    ) -> Result<u64> {
        p.check()?;
        let now = self.store_now(now)?;
        retention::drive(
            p,
            |state, after| self.prune_batch(p, state, after, Some(now)),
            |n| Ok(progress(n)),
        )
    }
}

/// A durable table of effect records. Safe to share across threads.
///
/// `now` overrides the backend's clock (tests move time with it); `None` uses the backend's
/// clock. `attempt` narrows a compare-and-set to one attempt; the decorator always passes it.
pub trait Store: Approvals + Approvers + Receipts + Retention + StorePolicy + Backend {
    /// The store's location for messages (never a password).
    fn describe(&self) -> String {
        self.location()
    }

    /// Which database this store writes to.
    fn backend(&self) -> BackendKind {
        self.kind()
    }

    /// Whether a `fork()` must wait for this store's calls and close its idle connections
    /// first (see [`super::fork`]): SQLite keeps per-file state for the whole process.
    fn fork_sensitive(&self) -> bool {
        self.backend() == BackendKind::Sqlite
    }

    /// Reserve `key` for the attempt `action_id` for `lease` microseconds (docs/spec.md §3). Returns the
    /// granted row; a refusal is `Error::Duplicate` / `Error::Ambiguous`. With `begin` the granted
    /// row is written `executing` (the body starts right after; see
    /// [`crate::planner::plan_reservation`]), else `reserved`.
    fn reserve(
        &self,
        key: &str,
        action_id: &str,
        lease: Micros,
        begin: bool,
        now: Option<Micros>,
    ) -> Result<EffectRecord> {
        self.propose(Proposal::new(key, action_id, lease, begin), now)
    }

    /// [`Store::reserve`] with everything a caller may say: the action's name, the digests of
    /// its arguments (a duplicate with other arguments is `Error::Conflict`), and whether a
    /// granted approval must be used in the same transaction (`Error::ApprovalNeeded` when
    /// none is in force). The store sets the attempt token and the holder.
    fn propose(&self, proposal: Proposal<'_>, now: Option<Micros>) -> Result<EffectRecord> {
        let (key, action_id) = (proposal.key, proposal.action_id);
        self.reserve_row(proposal, now)
            .map_err(|e| e.naming(key, Some(action_id)))
    }

    /// A later transition (docs/spec.md §4) as a compare-and-set; returns the row written.
    fn transition(
        &self,
        key: &str,
        action_id: &str,
        attempt: Option<i64>,
        transition: &Transition,
        now: Option<Micros>,
    ) -> Result<EffectRecord> {
        let row = checked_transition(self, (key, action_id, attempt), transition, now, true)?;
        Ok(row.expect("a transition that landed reads its row back"))
    }

    /// [`Store::transition`] for a caller that does not need the row back (the decorator's
    /// outcome write): a store may skip reading it.
    fn transition_unread(
        &self,
        key: &str,
        action_id: &str,
        attempt: Option<i64>,
        transition: &Transition,
        now: Option<Micros>,
    ) -> Result<()> {
        checked_transition(self, (key, action_id, attempt), transition, now, false).map(|_| ())
    }

    /// The decorator's outcome write ([`Store::transition_unread`]) of the attempt it holds:
    /// the store acknowledged its reservation to this process, so a refusal whose row says
    /// that reservation is gone is `Error::LostWrite`, and the key is marked `ambiguous` for a
    /// person where it can be ([`super::lost`]). `attempt` `None`: no such check.
    fn record_held_outcome(
        &self,
        key: &str,
        action_id: &str,
        attempt: Option<i64>,
        transition: &Transition,
        now: Option<Micros>,
    ) -> Result<()> {
        self.transition_unread(key, action_id, attempt, transition, now)
            .map_err(|e| match attempt {
                Some(held) => {
                    super::lost::after_refusal(self, e, (key, action_id, held), (transition, now))
                }
                None => e,
            })
    }

    /// Move a live lease of an `executing` attempt to `until` (not earlier than today's expiry).
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
        replace_planned(self, what, (key, Some(action_id)), now, &plan)
    }

    /// A person settles an `ambiguous` effect as `committed` or `failed`.
    fn resolve(
        &self,
        key: &str,
        target: EffectState,
        resolver: &str,
        now: Option<Micros>,
    ) -> Result<EffectRecord> {
        self.resolve_noted(key, target, resolver, None, now)
    }

    /// [`Store::resolve`], with the person's note (why) kept in the row's error text.
    fn resolve_noted(
        &self,
        key: &str,
        target: EffectState,
        resolver: &str,
        note: Option<&str>,
        now: Option<Micros>,
    ) -> Result<EffectRecord> {
        planner::check_resolver(resolver)?;
        if let Some(note) = note {
            planner::check_note(note)?;
        }
        let plan = |found: Option<EffectRecord>, n: Micros| {
            planner::plan_resolution_noted(found, key, target, (resolver, note), n)
        };
        let what = ("resolve_effect", Event::Resolution);
        replace_planned(self, what, (key, None), now, &plan)
    }

    fn get(&self, key: &str) -> Result<Option<EffectRecord>> {
        self.read_row(key).map_err(|e| e.naming(key, None))
    }
}

impl<S: Backend + Approvals + Approvers + Receipts + Retention + StorePolicy> Store for S {}

/// A holder's transition of `key` (checked, then written; the row read back when `read`), its
/// error naming the key and the attempt.
fn checked_transition<S: Backend + ?Sized>(
    store: &S,
    (key, action_id, attempt): (&str, &str, Option<i64>),
    transition: &Transition,
    now: Option<Micros>,
    read: bool,
) -> Result<Option<EffectRecord>> {
    store.check_transition(transition)?;
    let call = TransitionCall::new(key, action_id, attempt, transition, store.fixed_now(now))?;
    store
        .write_transition(&call, read)
        .map_err(|e| e.naming(key, Some(action_id)))
}

/// A person's or a holder's whole-row write of `key` (`what` for messages, written as the
/// event), planned by `plan` at the caller's `now` (else the store's clock); its error names
/// the key and the action id, if any.
fn replace_planned<S: Backend + ?Sized>(
    store: &S,
    (what, event): (&str, Event),
    (key, action_id): (&str, Option<&str>),
    now: Option<Micros>,
    plan: &RowPlan<'_>,
) -> Result<EffectRecord> {
    let now = store.fixed_now(now);
    store
        .replace_row(RowWrite {
            what,
            event,
            key,
            now,
            plan,
        })
        .map_err(|e| e.naming(key, action_id))
}
