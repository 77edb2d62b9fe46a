//! The store's policy (`ctrlrun policy apply`), as functions of a store: each rule crosses as
//! `(action, decision, approvals)`.

use pyo3::prelude::*;

use super::store::PyStore;
use crate::approval::{ActionRule, Decision};
use crate::error::Error;
use crate::py::errors::IntoPyResult;

/// Every action's rule in the store's policy, by name.
#[pyfunction]
pub fn store_policy(py: Python<'_>, store: &PyStore) -> PyResult<Vec<(String, String, i64)>> {
    let rules = store.call(py, |s| s.policy())?;
    Ok(rules
        .into_iter()
        .map(|r| (r.action, r.decision.as_str().to_owned(), r.approvals))
        .collect())
}

/// Make `rules` the store's whole policy, in one transaction.
#[pyfunction]
pub fn apply_store_policy(
    py: Python<'_>,
    store: &PyStore,
    rules: Vec<(String, String, i64)>,
) -> PyResult<()> {
    let mut parsed = Vec::with_capacity(rules.len());
    for (action, decision, approvals) in rules {
        let Some(decision) = Decision::parse(&decision) else {
            return Err(Error::InvalidArgument(format!(
                "action {action:?}: a store's policy decides allow, approve or deny, got \
                 {decision:?}"
            )))
            .py_err(py);
        };
        parsed.push(ActionRule {
            action,
            decision,
            approvals,
        });
    }
    store.call(py, |s| s.apply_policy(&parsed))
}
