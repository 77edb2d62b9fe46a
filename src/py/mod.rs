//! `ctrlrun._core`: the thin PyO3 layer. It converts arguments, releases the GIL around every
//! store call, and maps core errors to Python exceptions in one place (`errors.rs`).

mod args;
#[cfg(unix)]
mod background;
mod errors;
mod fork;
mod logging;
mod records;
mod store;
mod template;

use pyo3::prelude::*;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    logging::install();
    m.add_class::<template::PyTemplate>()?;
    m.add_class::<store::PyStore>()?;
    m.add_class::<records::EffectRow>()?;
    m.add_class::<records::ApprovalRow>()?;
    m.add_class::<records::ReceiptRow>()?;
    m.add_class::<records::ReceiptCheckRow>()?;
    m.add_class::<records::Step>()?;
    m.add_function(wrap_pyfunction!(store::open_store, m)?)?;
    m.add_function(wrap_pyfunction!(store::drop_scratch_schema, m)?)?;
    m.add_function(wrap_pyfunction!(store::sqlite_path, m)?)?;
    m.add_function(wrap_pyfunction!(store::url_backend, m)?)?;
    m.add_function(wrap_pyfunction!(store::arg_digests, m)?)?;
    #[cfg(unix)]
    {
        m.add_class::<background::Completions>()?;
        m.add_function(wrap_pyfunction!(background::reserve_in_background, m)?)?;
        m.add_function(wrap_pyfunction!(background::transition_in_background, m)?)?;
        m.add_function(wrap_pyfunction!(background::finish_background, m)?)?;
    }
    m.add_function(wrap_pyfunction!(fork::before_fork, m)?)?;
    m.add_function(wrap_pyfunction!(fork::after_fork_in_parent, m)?)?;
    m.add_function(wrap_pyfunction!(fork::after_fork_in_child, m)?)?;
    m.add(
        "SCRATCH_SCHEMA_PREFIX",
        crate::store::postgres::SCRATCH_PREFIX,
    )?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
