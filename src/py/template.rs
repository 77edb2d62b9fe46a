use pyo3::prelude::*;
use pyo3::types::PyString;

use super::convert::Text;
use super::errors::IntoPyResult;
use crate::error::Error;
use crate::template::Template;

/// A parsed effect-key template. `Template(source)` raises `InvalidArgument` on a bad form.
#[pyclass(frozen, name = "Template", module = "ctrlrun._core")]
pub struct PyTemplate {
    inner: Template,
}

#[pymethods]
impl PyTemplate {
    #[new]
    fn new(py: Python<'_>, source: Text) -> PyResult<Self> {
        Ok(PyTemplate {
            inner: Template::parse(&source).py_err(py)?,
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

    /// Render from one text value per placeholder, in `placeholders` order. A value with a
    /// lone surrogate makes no key a store can keep: `EffectKeyError`.
    fn render(&self, py: Python<'_>, values: Vec<Bound<'_, PyString>>) -> PyResult<String> {
        let texts: Option<Vec<String>> = values
            .iter()
            .map(|v| v.to_cow().ok().map(|c| c.into_owned()))
            .collect();
        let Some(texts) = texts else {
            return Err(Error::EffectKey(format!(
                "effect template {}: a value holds a lone surrogate, which no store can keep \
                 as text",
                PyString::new(py, self.inner.source()).repr()?
            )))
            .py_err(py);
        };
        self.inner.render(&texts).py_err(py)
    }

    fn __repr__(&self) -> String {
        format!("Template({:?})", self.inner.source())
    }
}
