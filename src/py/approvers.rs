//! The approver accounts, as functions of a store (`ctrlrun.Store`'s approver methods call
//! them): the same GIL release and error mapping as the store's own methods. Also the core's
//! checks of a person's name, for where Python declares one before any store sees it.

use pyo3::prelude::*;

use super::errors::IntoPyResult;
use super::records::ApproverRow;
use super::store::PyStore;
use crate::planner;
use crate::record::Micros;

/// Refuse `name` as `what` (`InvalidArgument`) unless the core records it as a person's or
/// an agent's name (`protect(requested_by=)`, the gateway's `--requested-by`).
#[pyfunction]
pub fn check_name(py: Python<'_>, what: &str, name: &str) -> PyResult<()> {
    planner::check_name(what, name).py_err(py)
}

/// Refuse `name` (`InvalidArgument`) unless an approver account may have it.
#[pyfunction]
pub fn check_approver_name(py: Python<'_>, name: &str) -> PyResult<()> {
    planner::check_approver_name(name).py_err(py)
}

/// Create the account `name` (`create`), or set the secret hash of the existing one.
#[pyfunction]
#[pyo3(signature = (store, name, secret_hash, create, now_us=None))]
pub fn put_approver(
    py: Python<'_>,
    store: &PyStore,
    name: &str,
    secret_hash: &str,
    create: bool,
    now_us: Option<Micros>,
) -> PyResult<ApproverRow> {
    store
        .call(py, |s| s.put_approver(name, secret_hash, create, now_us))
        .map(ApproverRow::from)
}

/// The account `name`, or None.
#[pyfunction]
pub fn get_approver(py: Python<'_>, store: &PyStore, name: &str) -> PyResult<Option<ApproverRow>> {
    store
        .call(py, |s| s.get_approver(name))
        .map(|r| r.map(ApproverRow::from))
}

/// Every account, by name.
#[pyfunction]
pub fn list_approvers(py: Python<'_>, store: &PyStore) -> PyResult<Vec<ApproverRow>> {
    store
        .call(py, |s| s.list_approvers())
        .map(|v| v.into_iter().map(ApproverRow::from).collect())
}

/// Delete the account `name`; whether there was one.
#[pyfunction]
pub fn remove_approver(py: Python<'_>, store: &PyStore, name: &str) -> PyResult<bool> {
    store.call(py, |s| s.remove_approver(name))
}
