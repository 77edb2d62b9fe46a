//! What crosses into Python: the rows a store returns as frozen, named objects (read by one
//! converter each in `ctrlrun.store`), and the kind of transition Python asks for as an enum.

use pyo3::prelude::*;

use crate::approval::{ApprovalRecord, ApproverRecord};
use crate::planner::Transition;
use crate::receipt::Receipt;
use crate::receipt::Verification as ReceiptCheck;
use crate::record::EffectRecord;

/// One effect row as stored (times in microseconds since the epoch, UTC); converted by
/// `ctrlrun.store.decode.record_from_core`.
#[pyclass(frozen, get_all, name = "EffectRow", module = "ctrlrun._core")]
pub struct EffectRow {
    effect_key: String,
    state: &'static str,
    action_id: String,
    attempt: i64,
    created_at: i64,
    updated_at: i64,
    lease_expires_at: Option<i64>,
    result: Option<String>,
    error: Option<String>,
    resolved_by: Option<String>,
    action: Option<String>,
    holder: Option<String>,
    args_digest: Option<String>,
    arg_digests: Option<String>,
    approval_id: Option<String>,
}

impl From<EffectRecord> for EffectRow {
    fn from(r: EffectRecord) -> Self {
        EffectRow {
            effect_key: r.effect_key,
            state: r.state.as_str(),
            action_id: r.action_id,
            attempt: r.attempt,
            created_at: r.created_at,
            updated_at: r.updated_at,
            lease_expires_at: r.lease_expires_at,
            result: r.result,
            error: r.error,
            resolved_by: r.resolved_by,
            action: r.action,
            holder: r.holder,
            args_digest: r.args_digest,
            arg_digests: r.arg_digests,
            approval_id: r.approval_id,
        }
    }
}

/// One approval request as stored; converted by `ctrlrun.store.approvals.approval_from_core`.
#[pyclass(frozen, get_all, name = "ApprovalRow", module = "ctrlrun._core")]
pub struct ApprovalRow {
    request_id: String,
    action: String,
    args_digest: String,
    effect_key: String,
    arguments: String,
    state: &'static str,
    requested_at: i64,
    ttl: i64,
    expires_at: i64,
    decided_at: Option<i64>,
    decided_by: Option<String>,
    note: Option<String>,
    used_at: Option<i64>,
    used_by: Option<String>,
    requested_by: Option<String>,
    approvals_needed: i64,
    granted_by: Vec<String>,
    /// Whether the call that returned it wrote it (a new request); only `request_approval`
    /// says so, every read gives false.
    created: bool,
}

impl From<ApprovalRecord> for ApprovalRow {
    fn from(r: ApprovalRecord) -> Self {
        ApprovalRow {
            request_id: r.request_id,
            action: r.action,
            args_digest: r.args_digest,
            effect_key: r.effect_key,
            arguments: r.arguments,
            state: r.state.as_str(),
            requested_at: r.requested_at,
            ttl: r.ttl,
            expires_at: r.expires_at,
            decided_at: r.decided_at,
            decided_by: r.decided_by,
            note: r.note,
            used_at: r.used_at,
            used_by: r.used_by,
            requested_by: r.requested_by,
            approvals_needed: r.approvals_needed,
            granted_by: r.granted_by,
            created: false,
        }
    }
}

impl ApprovalRow {
    /// The row `request_approval` returns: `created` when it wrote the request.
    pub(super) fn asked((r, created): (ApprovalRecord, bool)) -> Self {
        ApprovalRow {
            created,
            ..ApprovalRow::from(r)
        }
    }
}

/// One approver account as stored (times in microseconds since the epoch, UTC).
#[pyclass(frozen, get_all, name = "ApproverRow", module = "ctrlrun._core")]
pub struct ApproverRow {
    name: String,
    secret_hash: String,
    created_at: i64,
    updated_at: i64,
}

impl From<ApproverRecord> for ApproverRow {
    fn from(r: ApproverRecord) -> Self {
        ApproverRow {
            name: r.name,
            secret_hash: r.secret_hash,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

/// One receipt as stored; converted by `ctrlrun.store.receipts.receipt_from_core`.
#[pyclass(frozen, get_all, name = "ReceiptRow", module = "ctrlrun._core")]
pub struct ReceiptRow {
    id: i64,
    chain: String,
    effect_key: String,
    request_id: Option<String>,
    seq: i64,
    prev_hash: Option<String>,
    hash: String,
    at: i64,
    kind: String,
    state: String,
    action: Option<String>,
    action_id: Option<String>,
    attempt: Option<i64>,
    args_digest: Option<String>,
    approval_id: Option<String>,
    actor: Option<String>,
    writer: Option<String>,
}

impl From<Receipt> for ReceiptRow {
    fn from(r: Receipt) -> Self {
        ReceiptRow {
            id: r.id,
            chain: r.chain,
            effect_key: r.effect_key,
            request_id: r.request_id,
            seq: r.seq,
            prev_hash: r.prev_hash,
            hash: r.hash,
            at: r.at,
            kind: r.kind,
            state: r.state,
            action: r.action,
            action_id: r.action_id,
            attempt: r.attempt,
            args_digest: r.args_digest,
            approval_id: r.approval_id,
            actor: r.actor,
            writer: r.writer,
        }
    }
}

/// What a check of every receipt chain found: counts, and the first broken receipt if any.
#[pyclass(frozen, get_all, name = "ReceiptCheckRow", module = "ctrlrun._core")]
pub struct ReceiptCheckRow {
    receipts: u64,
    chains: u64,
    /// The first broken receipt's id (`None` when a chain is missing its start).
    broken_id: Option<i64>,
    broken_key: Option<String>,
    broken_why: Option<String>,
}

impl From<ReceiptCheck> for ReceiptCheckRow {
    fn from(v: ReceiptCheck) -> Self {
        let (broken_id, broken_key, broken_why) = match v.broken {
            Some(b) => (b.receipt_id, Some(b.effect_key), Some(b.why)),
            None => (None, None, None),
        };
        ReceiptCheckRow {
            receipts: v.receipts,
            chains: v.chains,
            broken_id,
            broken_key,
            broken_why,
        }
    }
}

/// The outcome (or start) an attempt records: the kind of a transition, with its payload
/// passed beside it (the result JSON of `COMMIT`, the error text of `FAIL` and `AMBIGUOUS`).
#[pyclass(
    eq,
    eq_int,
    hash,
    frozen,
    from_py_object,
    name = "Step",
    module = "ctrlrun._core"
)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    #[pyo3(name = "BEGIN")]
    Begin,
    #[pyo3(name = "COMMIT")]
    Commit,
    #[pyo3(name = "FAIL")]
    Fail,
    #[pyo3(name = "AMBIGUOUS")]
    Ambiguous,
}

impl Step {
    /// The word logs use for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Begin => "begin",
            Step::Commit => "commit",
            Step::Fail => "fail",
            Step::Ambiguous => "ambiguous",
        }
    }

    /// This step with its payload as the core's [`Transition`].
    pub fn with(self, payload: Option<String>) -> Transition {
        match self {
            Step::Begin => Transition::Begin,
            Step::Commit => Transition::Commit { result: payload },
            Step::Fail => Transition::Fail {
                error: payload.unwrap_or_default(),
            },
            Step::Ambiguous => Transition::MarkAmbiguous {
                error: payload.unwrap_or_default(),
            },
        }
    }
}
