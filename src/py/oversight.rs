//! The store handle's methods for what people oversee: approval requests and their
//! decisions, receipts, approver accounts and the store's policy (the effect methods are in
//! `store.rs`). Also the core's checks of a person's name, for where Python declares one
//! before any store sees it.

use pyo3::prelude::*;

use super::convert::{int, opt, text, Int, Text};
use super::errors::IntoPyResult;
use super::records::{ApprovalRow, ApproverRow, ReceiptCheckRow, ReceiptRow};
use super::store::PyStore;
use crate::approval::{ActionRule, ApprovalAsk, ApprovalState, Decision};
use crate::planner;
use crate::record::Micros;
use crate::store::ApprovalFilter;

/// Which approval requests `Store.list_approvals` and `Store.count_approvals` select (see
/// [`ApprovalFilter`]): `after` is the `(requested_at_us, request_id)` of the last request of
/// the page before.
#[pyclass(frozen, module = "ctrlrun._core")]
pub struct ApprovalQuery {
    states: Vec<ApprovalState>,
    action: Option<String>,
    prefix: Option<String>,
    requested_by: Option<String>,
    after: Option<(Micros, String)>,
    newest_first: bool,
    limit: Option<u64>,
}

#[pymethods]
impl ApprovalQuery {
    #[new]
    #[pyo3(signature = (states=Vec::new(), action=None, prefix=None, requested_by=None, after=None, newest_first=false, limit=None))]
    fn new(
        states: Vec<ApprovalState>,
        action: Option<Text>,
        prefix: Option<Text>,
        requested_by: Option<Text>,
        after: Option<(Int<Micros>, Text)>,
        newest_first: bool,
        limit: Option<Int<u64>>,
    ) -> Self {
        ApprovalQuery {
            states,
            action: action.map(|t| t.0),
            prefix: prefix.map(|t| t.0),
            requested_by: requested_by.map(|t| t.0),
            after: after.map(|(at, id)| (at.0, id.0)),
            newest_first,
            limit: int(&limit),
        }
    }
}

impl ApprovalQuery {
    fn filter(&self) -> ApprovalFilter<'_> {
        ApprovalFilter {
            states: &self.states,
            action: self.action.as_deref(),
            prefix: self.prefix.as_deref(),
            requested_by: self.requested_by.as_deref(),
            after: self.after.as_ref().map(|(at, id)| (*at, id.as_str())),
            newest_first: self.newest_first,
            limit: self.limit,
        }
    }
}

/// `name`, refused as `what` (`InvalidArgument`) unless the core records it as a person's or
/// an agent's name (`protect(requested_by=)`, the gateway's `--requested-by`).
#[pyfunction]
pub fn check_name(py: Python<'_>, what: Text, name: &Bound<'_, PyAny>) -> PyResult<String> {
    let name = text(name, &what)?;
    planner::check_name(&what, &name).py_err(py)?;
    Ok(name)
}

/// `name`, refused (`InvalidArgument`) unless an approver account may have it.
#[pyfunction]
pub fn check_approver_name(py: Python<'_>, name: &Bound<'_, PyAny>) -> PyResult<String> {
    let name = text(name, "an approver's name")?;
    planner::check_approver_name(&name).py_err(py)?;
    Ok(name)
}

#[pymethods]
impl PyStore {
    /// Ask for an approval (see `Store.request_approval` in Rust): the request that stands, or
    /// a new pending one.
    #[pyo3(signature = (action, args_digest, effect_key, arguments, ttl_us, now_us=None, requested_by=None, approvals_needed=Int(1)))]
    #[allow(clippy::too_many_arguments)]
    fn request_approval(
        &self,
        py: Python<'_>,
        action: Text,
        args_digest: Text,
        effect_key: Text,
        arguments: Text,
        ttl_us: Int<Micros>,
        now_us: Option<Int<Micros>>,
        requested_by: Option<Text>,
        approvals_needed: Int<i64>,
    ) -> PyResult<ApprovalRow> {
        let ask = ApprovalAsk {
            action: &action,
            args_digest: &args_digest,
            effect_key: &effect_key,
            arguments: &arguments,
            ttl: ttl_us.0,
            requested_by: opt(&requested_by),
            approvals_needed: approvals_needed.0,
        };
        let now_us = int(&now_us);
        self.call(py, |s| s.ask_approval(&ask, now_us))
            .map(ApprovalRow::asked)
    }

    #[pyo3(signature = (request_id, grant, by, note=None, now_us=None))]
    fn decide_approval(
        &self,
        py: Python<'_>,
        request_id: Text,
        grant: bool,
        by: Text,
        note: Option<Text>,
        now_us: Option<Int<Micros>>,
    ) -> PyResult<ApprovalRow> {
        let now_us = int(&now_us);
        self.call(py, |s| {
            s.decide_approval(&request_id, grant, &by, opt(&note), now_us)
        })
        .map(ApprovalRow::from)
    }

    #[pyo3(signature = (request_id, now_us=None))]
    fn get_approval(
        &self,
        py: Python<'_>,
        request_id: Text,
        now_us: Option<Int<Micros>>,
    ) -> PyResult<Option<ApprovalRow>> {
        let now_us = int(&now_us);
        self.call(py, |s| s.get_approval(&request_id, now_us))
            .map(|r| r.map(ApprovalRow::from))
    }

    /// The requests `query` selects, in its order.
    #[pyo3(signature = (query, now_us=None))]
    fn list_approvals(
        &self,
        py: Python<'_>,
        query: &ApprovalQuery,
        now_us: Option<Int<Micros>>,
    ) -> PyResult<Vec<ApprovalRow>> {
        let now_us = int(&now_us);
        self.call(py, |s| s.list_approvals(&query.filter(), now_us))
            .map(|v| v.into_iter().map(ApprovalRow::from).collect())
    }

    /// How many requests `query` selects (its `limit` aside), counting to `cap` at most.
    #[pyo3(signature = (query, cap, now_us=None))]
    fn count_approvals(
        &self,
        py: Python<'_>,
        query: &ApprovalQuery,
        cap: Int<u64>,
        now_us: Option<Int<Micros>>,
    ) -> PyResult<u64> {
        let now_us = int(&now_us);
        self.call(py, |s| s.count_approvals(&query.filter(), cap.0, now_us))
    }

    /// The receipts of `key` (or of every key), oldest first; with `limit`, the latest that many.
    #[pyo3(signature = (key=None, limit=None))]
    fn list_receipts(
        &self,
        py: Python<'_>,
        key: Option<Text>,
        limit: Option<Int<u64>>,
    ) -> PyResult<Vec<ReceiptRow>> {
        let limit = int(&limit);
        self.call(py, |s| s.list_receipts(opt(&key), limit))
            .map(|v| v.into_iter().map(ReceiptRow::from).collect())
    }

    /// What a check of every receipt chain (or of `key`'s alone) found.
    #[pyo3(signature = (key=None))]
    fn verify_receipts(&self, py: Python<'_>, key: Option<Text>) -> PyResult<ReceiptCheckRow> {
        self.call(py, |s| match opt(&key) {
            None => s.verify_receipts(),
            Some(k) => s.verify_key_receipts(k),
        })
        .map(ReceiptCheckRow::from)
    }

    /// Create the account `name` (`create`), or set the secret hash of the existing one.
    #[pyo3(signature = (name, secret_hash, create, now_us=None))]
    fn put_approver(
        &self,
        py: Python<'_>,
        name: Text,
        secret_hash: Text,
        create: bool,
        now_us: Option<Int<Micros>>,
    ) -> PyResult<ApproverRow> {
        let now_us = int(&now_us);
        self.call(py, |s| s.put_approver(&name, &secret_hash, create, now_us))
            .map(ApproverRow::from)
    }

    /// The account `name`, or None.
    fn get_approver(&self, py: Python<'_>, name: Text) -> PyResult<Option<ApproverRow>> {
        self.call(py, |s| s.get_approver(&name))
            .map(|r| r.map(ApproverRow::from))
    }

    /// Every account, by name.
    fn list_approvers(&self, py: Python<'_>) -> PyResult<Vec<ApproverRow>> {
        self.call(py, |s| s.list_approvers())
            .map(|v| v.into_iter().map(ApproverRow::from).collect())
    }

    /// Delete the account `name`; whether there was one.
    fn remove_approver(&self, py: Python<'_>, name: Text) -> PyResult<bool> {
        self.call(py, |s| s.remove_approver(&name))
    }

    /// Every action's rule in the store's policy, by name: `(action, decision, approvals)`.
    fn policy(&self, py: Python<'_>) -> PyResult<Vec<(String, &'static str, i64)>> {
        let rules = self.call(py, |s| s.policy())?;
        Ok(rules
            .into_iter()
            .map(|r| (r.action, r.decision.as_str(), r.approvals))
            .collect())
    }

    /// Make `rules`, each `(action, decision, approvals)`, the store's whole policy, in one
    /// transaction.
    fn apply_policy(&self, py: Python<'_>, rules: Vec<(Text, Decision, Int<i64>)>) -> PyResult<()> {
        let rules: Vec<_> = rules
            .into_iter()
            .map(|(action, decision, approvals)| ActionRule {
                action: action.0,
                decision,
                approvals: approvals.0,
            })
            .collect();
        self.call(py, |s| s.apply_policy(&rules))
    }
}
