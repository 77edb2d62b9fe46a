//! The small transaction both backends give oversight: what it selects, inserts and
//! compare-and-sets ([`OversightTx`]), and how the store begins, commits and re-reads one
//! ([`OversightStore`]). The read-plan-write logic over them is written once, in this module's
//! siblings; only the statements' text stays with each backend.

use std::borrow::Cow;

use super::listing::ApprovalFilter;
use crate::approval::{ActionRule, ApprovalRecord, ApprovalState, ApproverRecord};
use crate::error::{Error, Result};
use crate::receipt::Receipt;
use crate::record::Micros;
use crate::store::backend::Backend;
use crate::store::recovery::Commit;
use crate::store::rows::Value;

/// What a call is and the key (or request) it is on, for messages: `("request_approval",
/// id)`.
pub(crate) type At<'a> = (&'a str, &'a str);

/// Which approval requests a select picks.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Pick<'a> {
    /// One request, by its id.
    Id(&'a str),
    /// The latest request for one call: `(action, args_digest, effect_key)`.
    Latest(&'a str, &'a str, &'a str),
    /// The grant in force for one call: `(action, args_digest, effect_key)`.
    Granted(&'a str, &'a str, &'a str),
    /// The requests a listing selects, states as of the given time.
    Listed(&'a ApprovalFilter<'a>, Micros),
}

impl<'a> Pick<'a> {
    /// What follows `FROM <table>`, its parameters written `?1`, `?2`, …, and their values.
    pub(crate) fn tail(&self) -> (Cow<'static, str>, Vec<Value<'a>>) {
        let texts = |t: &[&'a str]| t.iter().map(|t| Value::Text(Some(t))).collect();
        match *self {
            Pick::Id(id) => ("WHERE request_id = ?1".into(), texts(&[id])),
            Pick::Latest(action, digest, key) => (
                "WHERE action = ?1 AND args_digest = ?2 AND effect_key = ?3 \
                 ORDER BY requested_at DESC LIMIT 1"
                    .into(),
                texts(&[action, digest, key]),
            ),
            Pick::Granted(action, digest, key) => (
                "WHERE action = ?1 AND args_digest = ?2 AND effect_key = ?3 \
                 AND state = 'granted'"
                    .into(),
                texts(&[action, digest, key]),
            ),
            Pick::Listed(filter, now) => {
                let (tail, params) = filter.tail(now);
                (tail.into(), params)
            }
        }
    }
}

/// The statements of oversight, inside one transaction (or one read) of a backend.
pub(crate) trait OversightTx {
    type Err;

    /// The clock the transaction's writes use: `now` when given, else the store's.
    fn clock(&mut self, now: Option<Micros>) -> Result<Micros, Self::Err>;

    /// The approval requests `pick` selects, as stored.
    fn approvals(&mut self, pick: Pick<'_>) -> Result<Vec<ApprovalRecord>, Self::Err>;

    /// How many requests `filter` selects as of `now`, counting to `cap` at most.
    fn count_approvals(
        &mut self,
        filter: &ApprovalFilter<'_>,
        now: Micros,
        cap: u64,
    ) -> Result<u64, Self::Err>;

    /// Insert the planner's new request `r` (written at `now`) with the first receipt of its
    /// chain, unless another request for the same call is open: rows inserted.
    fn insert_approval(&mut self, r: &ApprovalRecord, now: Micros) -> Result<u64, Self::Err>;

    /// Write the planner's `r` over the request if it is still in state `from` (at `now`,
    /// with the next receipt of its chain): rows changed.
    fn cas_approval(
        &mut self,
        from: ApprovalState,
        r: &ApprovalRecord,
        now: Micros,
    ) -> Result<u64, Self::Err>;

    /// Hold the request `id` until the transaction ends, so that decisions on it are made one
    /// after another (a no-op where the transaction holds the whole store).
    fn lock_request(&mut self, id: &str) -> Result<(), Self::Err>;

    /// The store's policy: every action's rule by name, or `action`'s alone.
    fn rules(&mut self, action: Option<&str>) -> Result<Vec<ActionRule>, Self::Err>;

    /// Make `rules` the store's whole policy (written at `now`).
    fn replace_rules(&mut self, rules: &[ActionRule], now: Micros) -> Result<(), Self::Err>;

    /// The approver accounts, by name (only `name`'s when given).
    fn approvers(&mut self, name: Option<&str>) -> Result<Vec<ApproverRecord>, Self::Err>;

    /// Insert the account `r` unless its name has one (`create`), or else write its secret
    /// hash and update time over the account of that name: rows written.
    fn put_approver(&mut self, r: &ApproverRecord, create: bool) -> Result<u64, Self::Err>;

    /// Delete the account `name`: rows deleted.
    fn delete_approver(&mut self, name: &str) -> Result<u64, Self::Err>;

    /// Keep every other write of an account out until the transaction ends, so that a new
    /// account is checked against all the others (no two may be one person by another
    /// spelling) and no other is added meanwhile.
    fn hold_approvers(&mut self) -> Result<(), Self::Err>;

    /// Hold the effect row of `key` (if any) until the transaction ends, so that a prune
    /// cannot remove it under a request being made for it.
    fn hold_effect(&mut self, key: &str) -> Result<(), Self::Err>;

    /// The latest `limit` receipts (all when `None`) of `key` (of every key when `None`),
    /// newest first.
    fn latest_receipts(
        &mut self,
        key: Option<&str>,
        limit: Option<u64>,
    ) -> Result<Vec<Receipt>, Self::Err>;

    /// Every row's chain head (only `key`'s rows when given), as a receipt of the row (see
    /// [`crate::receipt::Verifier`]).
    fn receipt_heads(&mut self, key: Option<&str>) -> Result<Vec<Receipt>, Self::Err>;

    /// Up to `page` receipts with an id above `after` (from the first, whatever its id, when
    /// `None`: a receipt written by hand with id 0 or below is read too), in id order.
    fn receipts_after(
        &mut self,
        after: Option<i64>,
        page: usize,
    ) -> Result<Vec<Receipt>, Self::Err>;
}

/// A store as oversight uses it.
pub(crate) trait OversightStore: Backend {
    type Err;
    type Tx<'t>: OversightTx<Err = Self::Err>;

    /// Whether a verification stops reading receipts at the first broken one (the count of
    /// receipts it reports is then those read so far).
    const VERIFY_STOPS_AT_BREAK: bool;

    /// Refuse a text this store cannot hold (PostgreSQL's text holds no NUL).
    fn check_text(&self, _text: &str) -> Result<()> {
        Ok(())
    }

    /// `body` as one write transaction.
    fn write<T>(
        &self,
        at: At<'_>,
        body: impl FnOnce(&mut Self::Tx<'_>) -> Result<T>,
    ) -> Result<Commit<T>>;

    /// `body` as one read on a pooled connection (run again on the next one if the first had
    /// died idle).
    fn read<T>(
        &self,
        at: At<'_>,
        body: impl FnMut(&mut Self::Tx<'_>) -> Result<T, Self::Err>,
    ) -> Result<Result<T, Self::Err>>;

    /// `body` in one read-only snapshot.
    fn snapshot<T>(
        &self,
        body: impl FnOnce(&mut Self::Tx<'_>) -> Result<T, Self::Err>,
    ) -> Result<Result<T, Self::Err>>;

    /// `body` on a fresh connection (never a pooled one), as a re-read after an unknown
    /// `COMMIT` needs: a failure as text.
    fn fresh<T>(
        &self,
        body: impl FnOnce(&mut Self::Tx<'_>) -> Result<T, Self::Err>,
    ) -> std::result::Result<T, String>;

    /// A statement of write `what` on `key` failed: nothing was committed.
    fn write_failed(&self, what: &str, key: &str, e: Self::Err) -> Error;

    /// A read of `what` (`approvals`, `receipts`) failed.
    fn read_failed(&self, what: &str, e: Self::Err) -> Error;
}
