//! The hooks `os.register_at_fork` runs around a `fork()` (see `store::fork`).

use pyo3::prelude::*;

use crate::store::fork;

/// `os.register_at_fork(before=...)`: wait for store calls in flight (holding off new ones)
/// and close idle SQLite connections, so the child inherits no SQLite state.
#[pyfunction]
pub fn before_fork(py: Python<'_>) {
    py.detach(fork::prepare);
}

/// `os.register_at_fork(after_in_parent=...)`: store calls go on.
#[pyfunction]
pub fn after_fork_in_parent() {
    fork::release();
}

/// `os.register_at_fork(after_in_child=...)`: a fresh gate for the child's own stores.
#[pyfunction]
pub fn after_fork_in_child() {
    fork::release_in_child();
}
