//! The one mapping from core errors to Python exceptions. The exception classes live in
//! `ctrlrun/errors.py`; `_from_core(kind, message, record)` builds the instance.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use crate::approval::ApprovalRecord;
use crate::error::Error;
use crate::record::EffectRecord;

/// A record as the tuple `ctrlrun._records.record_from_core` reads: the ten columns of
/// version 1, then (action, holder, args_digest, arg_digests, approval_id).
pub type RecordTuple = (
    String,
    &'static str,
    String,
    i64,
    i64,
    i64,
    Option<i64>,
    Option<String>,
    Option<String>,
    Option<String>,
    (
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
    ),
);

pub fn record_tuple(r: EffectRecord) -> RecordTuple {
    (
        r.effect_key,
        r.state.as_str(),
        r.action_id,
        r.attempt,
        r.created_at,
        r.updated_at,
        r.lease_expires_at,
        r.result,
        r.error,
        r.resolved_by,
        (
            r.action,
            r.holder,
            r.args_digest,
            r.arg_digests,
            r.approval_id,
        ),
    )
}

/// An approval request as the tuple `ctrlrun._approvals.approval_from_core` reads.
pub type ApprovalTuple = (
    String,
    String,
    String,
    String,
    String,
    &'static str,
    (
        i64,
        i64,
        i64,
        Option<i64>,
        Option<String>,
        Option<String>,
        Option<i64>,
        Option<String>,
    ),
);

pub fn approval_tuple(r: ApprovalRecord) -> ApprovalTuple {
    (
        r.request_id,
        r.action,
        r.args_digest,
        r.effect_key,
        r.arguments,
        r.state.as_str(),
        (
            r.requested_at,
            r.ttl,
            r.expires_at,
            r.decided_at,
            r.decided_by,
            r.note,
            r.used_at,
            r.used_by,
        ),
    )
}

/// A receipt: `(id, chain, effect_key, request_id, seq, prev_hash, hash, at, kind, state,
/// (action, action_id, attempt, args_digest, approval_id, actor, writer))`.
pub type ReceiptTuple = (
    i64,
    String,
    String,
    Option<String>,
    i64,
    Option<String>,
    String,
    i64,
    String,
    String,
    (
        Option<String>,
        Option<String>,
        Option<i64>,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
    ),
);

pub fn receipt_tuple(r: crate::receipt::Receipt) -> ReceiptTuple {
    (
        r.id,
        r.chain,
        r.effect_key,
        r.request_id,
        r.seq,
        r.prev_hash,
        r.hash,
        r.at,
        r.kind,
        r.state,
        (
            r.action,
            r.action_id,
            r.attempt,
            r.args_digest,
            r.approval_id,
            r.actor,
            r.writer,
        ),
    )
}

static FROM_CORE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

pub fn to_py(py: Python<'_>, err: Error) -> PyErr {
    let mut extra: Option<(Vec<String>, Option<String>)> = None;
    let (kind, message, record) = match err {
        Error::InvalidArgument(m) => ("InvalidArgument", m, None),
        Error::EffectKey(m) => ("EffectKeyError", m, None),
        Error::Duplicate {
            kind,
            record,
            message,
        } => (kind.as_str(), message, Some(record_tuple(*record))),
        Error::Conflict {
            kind,
            record,
            fields,
            other_action,
            message,
        } => {
            extra = Some((fields, other_action));
            (kind.as_str(), message, Some(record_tuple(*record)))
        }
        Error::ApprovalNeeded(m) => ("ApprovalNeeded", m, None),
        Error::Ambiguous { record, message } => {
            ("AmbiguousEffect", message, Some(record_tuple(*record)))
        }
        Error::StoreWriteFailed(m) => ("StoreWriteFailed", m, None),
        Error::StoreUnresolved(m) => ("StoreUnresolved", m, None),
        Error::Store(m) => ("StoreError", m, None),
    };
    let build = || -> PyResult<PyErr> {
        let f = FROM_CORE.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
            Ok(py.import("ctrlrun.errors")?.getattr("_from_core")?.unbind())
        })?;
        Ok(PyErr::from_value(
            f.bind(py).call1((kind, message, record, extra))?,
        ))
    };
    build().unwrap_or_else(|e| e)
}

pub trait IntoPyResult<T> {
    fn py_err(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for Result<T, Error> {
    fn py_err(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_py(py, e))
    }
}
