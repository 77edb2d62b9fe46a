//! The one mapping from core errors to Python exceptions: each variant builds its class from
//! `ctrlrun.errors` with its typed fields (`StoreUnresolved` its key and attempt). A refusal that found a row carries the core's row
//! (`EffectRow`) and the converter `ctrlrun.store.decode.record_from_core`, which turns it into
//! the exception's `.record` on first access (refusals are a hot path; most callers never look).

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyModule};

use super::records::EffectRow;
use crate::error::{DuplicateKind, Error};
use crate::record::EffectRecord;

static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
static DECODE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn build(py: Python<'_>, err: Error) -> PyResult<PyErr> {
    let errors = ERRORS.get_or_try_init(py, || -> PyResult<Py<PyModule>> {
        Ok(py.import("ctrlrun.errors")?.unbind())
    })?;
    let errors = errors.bind(py);
    let kwargs = PyDict::new(py);
    // Each class's fields, named as its Python constructor takes them.
    let (class, message, row, state): (_, String, Option<Box<EffectRecord>>, _) = match err {
        Error::InvalidArgument(m) => (intern!(py, "InvalidArgument"), m, None, None),
        Error::EffectKey(m) => (intern!(py, "EffectKeyError"), m, None, None),
        Error::ApprovalNeeded(m) => (intern!(py, "ApprovalNeeded"), m, None, None),
        Error::Denied(m) => (intern!(py, "ActionDenied"), m, None, None),
        Error::StoreWriteFailed(m) => (intern!(py, "StoreWriteFailed"), m, None, None),
        Error::Store(m) => (intern!(py, "StoreError"), m, None, None),
        Error::PermissionDenied(m) => (intern!(py, "StorePermissionDenied"), m, None, None),
        e @ Error::WouldWait => (intern!(py, "StoreWriteFailed"), e.to_string(), None, None),
        Error::StoreUnresolved {
            message,
            effect_key,
            action_id,
        } => {
            for (name, value) in [
                (intern!(py, "effect_key"), effect_key),
                (intern!(py, "action_id"), action_id),
            ] {
                kwargs.set_item(name, value)?;
            }
            (intern!(py, "StoreUnresolved"), message, None, None)
        }
        Error::LostWrite {
            message,
            effect_key,
            action_id,
            record,
            marked,
        } => {
            kwargs.set_item(intern!(py, "action_id"), action_id)?;
            kwargs.set_item(intern!(py, "marked"), marked)?;
            kwargs.set_item(intern!(py, "effect_key"), &effect_key)?;
            (intern!(py, "StoreLostWrite"), message, record, None)
        }
        Error::Duplicate {
            kind,
            record,
            message,
        } => (
            intern!(py, "DuplicateEffect"),
            message,
            Some(record),
            Some(kind),
        ),
        Error::Conflict {
            kind,
            record,
            fields,
            other_action,
            message,
        } => {
            kwargs.set_item(intern!(py, "fields"), fields)?;
            kwargs.set_item(intern!(py, "other_action"), other_action)?;
            (
                intern!(py, "EffectConflict"),
                message,
                Some(record),
                Some(kind),
            )
        }
        Error::Ambiguous { record, message } => {
            kwargs.set_item(intern!(py, "action_id"), &record.action_id)?;
            (intern!(py, "AmbiguousEffect"), message, Some(record), None)
        }
    };
    if let Some(kind) = state {
        let state = match kind {
            DuplicateKind::Committed => intern!(py, "committed"),
            DuplicateKind::InProgress => intern!(py, "in_progress"),
        };
        kwargs.set_item(intern!(py, "state"), state)?;
    }
    if let Some(record) = &row {
        kwargs.set_item(intern!(py, "effect_key"), &record.effect_key)?;
    }
    let exc = errors.getattr(class)?.call((message,), Some(&kwargs))?;
    if let Some(record) = row {
        let decode = DECODE.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
            Ok(py
                .import("ctrlrun.store.decode")?
                .getattr("record_from_core")?
                .unbind())
        })?;
        exc.setattr(intern!(py, "_row"), Py::new(py, EffectRow::from(*record))?)?;
        exc.setattr(intern!(py, "_decode"), decode.bind(py))?;
    }
    Ok(PyErr::from_value(exc))
}

pub fn to_py(py: Python<'_>, err: Error) -> PyErr {
    build(py, err).unwrap_or_else(|e| e)
}

pub trait IntoPyResult<T> {
    fn py_err(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for Result<T, Error> {
    fn py_err(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_py(py, e))
    }
}
