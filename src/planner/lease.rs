//! Lease extension and a person's resolution: each plans the row to write from the row found.

use super::refusal::{lapse_note, refuse_by_row};
use super::rules::{check_resolver, format_micros, MAX_LEASE};
use crate::error::{Error, Result};
use crate::record::{EffectRecord, EffectState, Micros};

/// Lease extension: `executing`, the same attempt, the lease still live, and the new expiry
/// not earlier than the old one. Returns the row to write.
pub fn plan_extension(
    row: Option<EffectRecord>,
    key: &str,
    action_id: &str,
    attempt: Option<i64>,
    until: Micros,
    now: Micros,
) -> Result<EffectRecord> {
    const WHAT: &str = "extend the lease of";
    let Some(row) = row else {
        return Err(Error::InvalidArgument(format!(
            "no effect is recorded under key '{key}'"
        )));
    };
    if row.state != EffectState::Executing || !row.is_attempt(action_id, attempt) {
        return Err(refuse_by_row(
            row,
            action_id,
            attempt,
            WHAT,
            &[EffectState::Executing],
            now,
        ));
    }
    let old = row.lease_expires_at.unwrap_or(Micros::MIN);
    if !row.lease_live(now) {
        return Err(Error::InvalidArgument(format!(
            "the lease of effect '{key}' cannot be extended: it lapsed at {}; a lapsed lease \
             cannot be revived",
            format_micros(old)
        )));
    }
    if until > now.saturating_add(MAX_LEASE) {
        return Err(Error::InvalidArgument(format!(
            "the lease of effect '{key}' cannot be extended: the new expiry {} is more than ten years away \
             (leases are at most ten years)",
            format_micros(until)
        )));
    }
    if until < old {
        return Err(Error::InvalidArgument(format!(
            "the lease of effect '{key}' cannot be extended: the new expiry {} is earlier than the current {}",
            format_micros(until),
            format_micros(old)
        )));
    }
    Ok(EffectRecord {
        lease_expires_at: Some(until),
        updated_at: now,
        ..row
    })
}

/// A person settles an `ambiguous` effect, or a held one whose lease lapsed, as `committed`
/// or `failed`.
pub fn plan_resolution(
    row: Option<EffectRecord>,
    key: &str,
    target: EffectState,
    resolver: &str,
    now: Micros,
) -> Result<EffectRecord> {
    plan_resolution_noted(row, key, target, (resolver, None), now)
}

/// [`plan_resolution`] by `(resolver, note)`: the note (why) follows the resolution in the
/// row's error text.
pub fn plan_resolution_noted(
    row: Option<EffectRecord>,
    key: &str,
    target: EffectState,
    (resolver, why): (&str, Option<&str>),
    now: Micros,
) -> Result<EffectRecord> {
    check_resolver(resolver)?;
    if !matches!(target, EffectState::Committed | EffectState::Failed) {
        return Err(Error::InvalidArgument(format!(
            "an ambiguous effect resolves to 'committed' or 'failed', not '{target}'"
        )));
    }
    let Some(row) = row else {
        return Err(Error::InvalidArgument(format!(
            "no effect is recorded under key '{key}'"
        )));
    };
    // A held row whose lease lapsed is ambiguous already (its holder is gone, nobody knows
    // whether it ran): the lapse and the resolution are written together.
    let earlier = match row.state {
        EffectState::Ambiguous => row.error.clone().unwrap_or_default(),
        EffectState::Reserved | EffectState::Executing if !row.lease_live(now) => lapse_note(&row),
        EffectState::Reserved | EffectState::Executing => {
            return Err(Error::InvalidArgument(format!(
                "effect '{key}' cannot be resolved yet: it is {} under action {} (attempt {}) \
                 and its lease runs until {}; the holder may still finish. Resolve it once the \
                 lease has lapsed",
                row.state,
                row.action_id,
                row.attempt,
                format_micros(row.lease_expires_at.unwrap_or(Micros::MIN))
            )))
        }
        _ => {
            return Err(Error::InvalidArgument(format!(
                "effect '{key}' cannot be resolved: it is {}, and only an ambiguous effect (or a \
                 held one whose lease lapsed) is resolved by a person",
                row.state
            )))
        }
    };
    let note = match why {
        Some(why) if !why.is_empty() => format!("resolved as {target} by {resolver}: {why}"),
        _ => format!("resolved as {target} by {resolver}"),
    };
    let error = if earlier.is_empty() {
        note
    } else {
        format!("{earlier} [{note}]")
    };
    Ok(EffectRecord {
        state: target,
        updated_at: now,
        lease_expires_at: None,
        error: Some(error),
        resolved_by: Some(resolver.to_owned()),
        ..row
    })
}
