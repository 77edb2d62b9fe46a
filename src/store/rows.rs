//! The columns both backends read, in one order, their decoding into records, and the values
//! the approval writes bind, in their statements' parameter order.

use crate::approval::{ActionRule, ApprovalRecord, ApprovalState, ApproverRecord, Decision};
use crate::planner::Expected;
use crate::receipt::{self, Event, Receipt};
use crate::record::{EffectRecord, EffectState, Micros};

/// An effect row's columns, in [`effect`]'s order (a macro, so statements built with
/// `concat!` stay compile-time literals: the hot path builds no SQL text).
macro_rules! effect_columns {
    () => {
        "effect_key, state, action_id, attempt, created_at, updated_at, lease_expires_at, \
         result, error, resolved_by, attempt_token, action, holder, args_digest, arg_digests, \
         approval_id"
    };
}
pub(crate) use effect_columns;

/// An effect row's columns, in [`effect`]'s order.
pub(crate) const EFFECT_COLUMNS: &str = effect_columns!();

/// An approval request's columns, in [`approval`]'s order.
pub(crate) const APPROVAL_COLUMNS: &str = "request_id, action, args_digest, effect_key, \
     arguments, state, requested_at, ttl, expires_at, decided_at, decided_by, note, used_at, \
     used_by, requested_by, approvals_needed, granted_by";

/// An approver account's columns, in [`approver`]'s order.
pub(crate) const APPROVER_COLUMNS: &str = "name, secret_hash, created_at, updated_at";

/// A receipt's columns, in [`receipt()`]'s order.
pub(crate) const RECEIPT_COLUMNS: &str = "id, chain, effect_key, request_id, seq, prev_hash, \
     hash, at, kind, action, action_id, attempt, state, args_digest, approval_id, actor, writer";

/// One row as a backend's driver reads it.
pub(crate) trait Cells {
    type Err;
    fn text(&self, i: usize) -> Result<String, Self::Err>;
    fn opt_text(&self, i: usize) -> Result<Option<String>, Self::Err>;
    fn int(&self, i: usize) -> Result<i64, Self::Err>;
    fn opt_int(&self, i: usize) -> Result<Option<i64>, Self::Err>;
    /// Column `i` holds a text that names no known value (`what`: `unknown … state "x"`).
    fn unknown(&self, i: usize, what: String) -> Self::Err;
}

/// Column `i` as the value it names (`what`: `effect state`), refused when it names none.
fn named<C: Cells, T>(
    row: &C,
    i: usize,
    what: &str,
    parse: fn(&str) -> Option<T>,
) -> Result<T, C::Err> {
    let text = row.text(i)?;
    parse(&text).ok_or_else(|| row.unknown(i, format!("unknown {what} {text:?}")))
}

/// A row of [`EFFECT_COLUMNS`] from column `at` on.
pub(crate) fn effect<C: Cells>(row: &C, at: usize) -> Result<EffectRecord, C::Err> {
    let state = named(row, at + 1, "effect state", EffectState::parse)?;
    Ok(EffectRecord {
        effect_key: row.text(at)?,
        state,
        action_id: row.text(at + 2)?,
        attempt: row.int(at + 3)?,
        created_at: row.int(at + 4)?,
        updated_at: row.int(at + 5)?,
        lease_expires_at: row.opt_int(at + 6)?,
        result: row.opt_text(at + 7)?,
        error: row.opt_text(at + 8)?,
        resolved_by: row.opt_text(at + 9)?,
        attempt_token: row.opt_text(at + 10)?,
        action: row.opt_text(at + 11)?,
        holder: row.opt_text(at + 12)?,
        args_digest: row.opt_text(at + 13)?,
        arg_digests: row.opt_text(at + 14)?,
        approval_id: row.opt_text(at + 15)?,
    })
}

/// A row of [`APPROVAL_COLUMNS`].
pub(crate) fn approval<C: Cells>(row: &C) -> Result<ApprovalRecord, C::Err> {
    let state = named(row, 5, "approval state", ApprovalState::parse)?;
    Ok(ApprovalRecord {
        request_id: row.text(0)?,
        action: row.text(1)?,
        args_digest: row.text(2)?,
        effect_key: row.text(3)?,
        arguments: row.text(4)?,
        state,
        requested_at: row.int(6)?,
        ttl: row.int(7)?,
        expires_at: row.int(8)?,
        decided_at: row.opt_int(9)?,
        decided_by: row.opt_text(10)?,
        note: row.opt_text(11)?,
        used_at: row.opt_int(12)?,
        used_by: row.opt_text(13)?,
        requested_by: row.opt_text(14)?,
        // A request written before version 6 of the schema needed one approver.
        approvals_needed: row.opt_int(15)?.unwrap_or(1),
        granted_by: row
            .opt_text(16)?
            .map(|t| t.split('\n').map(str::to_owned).collect())
            .unwrap_or_default(),
    })
}

/// The columns of a store's policy.
pub(crate) const RULE_COLUMNS: &str = "action, decision, approvals";

/// A row of [`RULE_COLUMNS`].
pub(crate) fn rule<C: Cells>(row: &C) -> Result<ActionRule, C::Err> {
    let decision = row.text(1)?;
    Ok(ActionRule {
        action: row.text(0)?,
        decision: Decision::parse(&decision)
            .ok_or_else(|| row.unknown(1, format!("unknown policy decision {decision:?}")))?,
        approvals: row.int(2)?,
    })
}

/// A row of [`APPROVER_COLUMNS`].
pub(crate) fn approver<C: Cells>(row: &C) -> Result<ApproverRecord, C::Err> {
    Ok(ApproverRecord {
        name: row.text(0)?,
        secret_hash: row.text(1)?,
        created_at: row.int(2)?,
        updated_at: row.int(3)?,
    })
}

/// A row of [`RECEIPT_COLUMNS`] (or a row's chain head read as a receipt).
pub(crate) fn receipt<C: Cells>(row: &C) -> Result<Receipt, C::Err> {
    Ok(Receipt {
        id: row.int(0)?,
        chain: row.text(1)?,
        effect_key: row.text(2)?,
        request_id: row.opt_text(3)?,
        seq: row.int(4)?,
        prev_hash: row.opt_text(5)?,
        hash: row.text(6)?,
        at: row.int(7)?,
        kind: row.text(8)?,
        action: row.opt_text(9)?,
        action_id: row.opt_text(10)?,
        attempt: row.opt_int(11)?,
        state: row.text(12)?,
        args_digest: row.opt_text(13)?,
        approval_id: row.opt_text(14)?,
        actor: row.opt_text(15)?,
        writer: row.opt_text(16)?,
    })
}

/// One bound value: text or an integer, either possibly NULL.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Value<'a> {
    Text(Option<&'a str>),
    Int(Option<i64>),
}

pub(crate) fn text(s: &str) -> Value<'_> {
    Value::Text(Some(s))
}

/// An effect row's values, in [`EFFECT_COLUMNS`]' order.
pub(crate) fn effect_values(r: &EffectRecord) -> [Value<'_>; 16] {
    [
        text(&r.effect_key),
        text(r.state.as_str()),
        text(&r.action_id),
        Value::Int(Some(r.attempt)),
        Value::Int(Some(r.created_at)),
        Value::Int(Some(r.updated_at)),
        Value::Int(r.lease_expires_at),
        Value::Text(r.result.as_deref()),
        Value::Text(r.error.as_deref()),
        Value::Text(r.resolved_by.as_deref()),
        Value::Text(r.attempt_token.as_deref()),
        Value::Text(r.action.as_deref()),
        Value::Text(r.holder.as_deref()),
        Value::Text(r.args_digest.as_deref()),
        Value::Text(r.arg_digests.as_deref()),
        Value::Text(r.approval_id.as_deref()),
    ]
}

/// What a compare-and-set of a whole row binds after [`effect_values`]: the row it expects
/// (state, action id, attempt), the event written and the writing process.
pub(crate) fn expected_values<'a>(
    e: &'a Expected,
    event: Event,
    writer: &'a str,
) -> [Value<'a>; 5] {
    [
        text(e.state.as_str()),
        text(&e.action_id),
        Value::Int(Some(e.attempt)),
        text(event.as_str()),
        text(writer),
    ]
}

/// The values of an approval request's `INSERT`: [`APPROVAL_COLUMNS`] up to `used_by`, the
/// time written, the receipt's event and the writing process, then `requested_by`,
/// `approvals_needed` and `granted_by`.
pub(crate) fn approval_insert<'a>(
    r: &'a ApprovalRecord,
    now: Micros,
    writer: &'a str,
    granted: Option<&'a str>,
) -> Vec<Value<'a>> {
    let mut values = vec![
        text(&r.request_id),
        text(&r.action),
        text(&r.args_digest),
        text(&r.effect_key),
        text(&r.arguments),
        text(r.state.as_str()),
        Value::Int(Some(r.requested_at)),
        Value::Int(Some(r.ttl)),
    ];
    values.extend(decided(r));
    values.extend(written(r, now, writer));
    values.extend([
        Value::Text(r.requested_by.as_deref()),
        Value::Int(Some(r.approvals_needed)),
        Value::Text(granted),
    ]);
    values
}

/// Who granted so far, one per line (a name is one line), or none: the `granted_by` text the
/// writes bind.
pub(crate) fn granted_text(r: &ApprovalRecord) -> Option<String> {
    (!r.granted_by.is_empty()).then(|| r.granted_by.join("\n"))
}

/// The values of an approval request's compare-and-set from state `from`: the fields a
/// decision or a use writes, the request and its expected state, the time written, the
/// receipt's event and the writing process, then `granted_by`.
pub(crate) fn approval_cas<'a>(
    from: ApprovalState,
    r: &'a ApprovalRecord,
    now: Micros,
    writer: &'a str,
    granted: Option<&'a str>,
) -> Vec<Value<'a>> {
    let mut values = vec![text(r.state.as_str())];
    values.extend(decided(r));
    values.extend([text(&r.request_id), text(from.as_str())]);
    values.extend(written(r, now, writer));
    values.push(Value::Text(granted));
    values
}

/// What a decision and a use set: from `expires_at` to `used_by`.
fn decided(r: &ApprovalRecord) -> [Value<'_>; 6] {
    [
        Value::Int(Some(r.expires_at)),
        Value::Int(r.decided_at),
        Value::Text(r.decided_by.as_deref()),
        Value::Text(r.note.as_deref()),
        Value::Int(r.used_at),
        Value::Text(r.used_by.as_deref()),
    ]
}

/// The time written, the receipt's event and the writing process.
fn written<'a>(r: &ApprovalRecord, now: Micros, writer: &'a str) -> [Value<'a>; 3] {
    [
        Value::Int(Some(now)),
        text(
            if r.state == ApprovalState::Pending && !r.granted_by.is_empty() {
                receipt::GRANTED_IN_PART
            } else {
                receipt::approval_event(r.state)
            },
        ),
        text(writer),
    ]
}
