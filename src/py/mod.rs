//! `ctrlrun._core`: the thin PyO3 layer. It converts arguments, releases the GIL around every
//! store call, and maps core errors to Python exceptions in one place (`errors.rs`).

#[cfg(unix)]
mod background;
mod convert;
mod errors;
mod fork;
mod logging;
#[cfg(unix)]
mod on_loop;
mod oversight;
mod records;
mod requests;
mod store;
mod template;
mod urls;

use pyo3::prelude::*;

/// Add each class and function to the module `m`.
macro_rules! export {
    ($m:ident; classes $($class:ty),*; functions $($f:path),* $(,)?) => {
        $( $m.add_class::<$class>()?; )*
        $( $m.add_function(wrap_pyfunction!($f, $m)?)?; )*
    };
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    logging::install();
    export!(m;
        classes template::PyTemplate, store::PyStore, records::EffectRow, records::ApprovalRow,
            records::ReceiptRow, records::ReceiptCheckRow, records::Step, records::ApproverRow,
            requests::ReserveRequest, requests::OutcomeRequest, oversight::ApprovalQuery;
        functions store::open_store, urls::drop_scratch_schema, urls::store_roles, urls::sqlite_path,
            urls::url_backend, store::arg_digests, fork::before_fork, fork::after_fork_in_parent,
            fork::after_fork_in_child, oversight::check_name, oversight::check_approver_name,
    );
    #[cfg(unix)]
    export!(m;
        classes background::Completions;
        functions background::finish_background, on_loop::step_soon,
    );
    m.add(
        "SCRATCH_SCHEMA_PREFIX",
        crate::store::postgres::SCRATCH_PREFIX,
    )?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
