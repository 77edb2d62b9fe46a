use pyo3::prelude::*;

use super::errors::IntoPyResult;
use crate::template::Template;

/// A parsed effect-key template. `Template(source)` raises `InvalidArgument` on a bad form.
#[pyclass(frozen, name = "Template", module = "ctrlrun._core")]
pub struct PyTemplate {
    inner: Template,
}

#[pymethods]
impl PyTemplate {
    #[new]
    fn new(py: Python<'_>, source: &str) -> PyResult<Self> {
        Ok(PyTemplate {
            inner: Template::parse(source).py_err(py)?,
        })
    }

    #[getter]
    fn source(&self) -> &str {
        self.inner.source()
    }

    /// Distinct placeholder names, in order of first appearance.
    #[getter]
    fn placeholders(&self) -> Vec<String> {
        self.inner.placeholders().to_vec()
    }

    /// Render from one text value per placeholder, in `placeholders` order.
    fn render(&self, py: Python<'_>, values: Vec<String>) -> PyResult<String> {
        self.inner.render(&values).py_err(py)
    }

    fn __repr__(&self) -> String {
        format!("Template({:?})", self.inner.source())
    }
}
