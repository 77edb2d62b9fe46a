//! What a store URL names, without opening the store: its backend, a SQLite file's path;
//! and the drop of a throwaway PostgreSQL schema.

use pyo3::prelude::*;

use super::convert::Text;
use super::errors::IntoPyResult;
use crate::store::BackendKind;

/// `sqlite` or `postgres`: the database a store URL names. Raises `InvalidArgument` for a
/// malformed URL.
#[pyfunction]
pub fn url_backend(py: Python<'_>, url: Text) -> PyResult<&'static str> {
    Ok(match crate::url::parse(&url).py_err(py)? {
        crate::url::StoreUrl::Sqlite(_) => BackendKind::Sqlite,
        crate::url::StoreUrl::Postgres { .. } => BackendKind::Postgres,
    }
    .as_str())
}

/// The file a SQLite store URL names (made absolute against the working directory), or
/// `None` for a PostgreSQL URL. Raises `InvalidArgument` for a malformed URL.
#[pyfunction]
pub fn sqlite_path(py: Python<'_>, url: Text) -> PyResult<Option<std::path::PathBuf>> {
    match crate::url::parse(&url).py_err(py)? {
        crate::url::StoreUrl::Sqlite(opts) => Ok(Some(if opts.path.is_absolute() {
            opts.path
        } else {
            std::env::current_dir()
                .map(|d| d.join(&opts.path))
                .unwrap_or(opts.path)
        })),
        crate::url::StoreUrl::Postgres { .. } => Ok(None),
    }
}

/// Drop a `ctrlrun_scratch_*` schema (`ctrlrun verify`, the pytest plugin; refuses any other).
#[pyfunction]
pub fn drop_scratch_schema(py: Python<'_>, url: Text) -> PyResult<()> {
    py.detach(|| crate::store::postgres::drop_scratch_schema(&url))
        .py_err(py)
}

/// `ctrlrun store roles`: the statements that give `agent` and `approver` their duties on the
/// PostgreSQL store `url`; run on it after the checks unless `print_only`.
#[pyfunction]
#[pyo3(signature = (url, agent, approver, print_only))]
pub fn store_roles(
    py: Python<'_>,
    url: Text,
    agent: Text,
    approver: Text,
    print_only: bool,
) -> PyResult<String> {
    use crate::store::postgres::RolesMode;
    let mode = if print_only {
        RolesMode::Print
    } else {
        RolesMode::Apply
    };
    py.detach(|| crate::store::postgres::store_roles(&url, &agent, &approver, mode))
        .py_err(py)
}
