//! The pure planners: every backend asks these what to do and then only writes.
//! No I/O and no clock reads: `now` is always an argument.

use crate::error::{DuplicateKind, Error, Result};
use crate::record::{EffectRecord, EffectState, Micros};

mod approval;
mod reservation;
mod transition;
pub use approval::{
    check_note, check_request_id, plan_consume, plan_decision, plan_request, RequestPlan,
};
pub use reservation::{plan_reservation, Conflict, Proposal, Refusal, ReservationPlan};
pub use transition::{
    plan_mismatch, settle_mismatch, settle_unknown_transition, AfterUnknown, Mismatch, Transition,
    TransitionWrite,
};

/// The row a compare-and-set expects to find: `WHERE effect_key = .. AND state = .. AND
/// action_id = .. AND attempt = ..`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expected {
    pub state: EffectState,
    pub action_id: String,
    pub attempt: i64,
}

impl Expected {
    pub fn of(record: &EffectRecord) -> Expected {
        Expected {
            state: record.state,
            action_id: record.action_id.clone(),
            attempt: record.attempt,
        }
    }
}

/// Why a held row whose lease lapsed is `ambiguous`.
pub(crate) fn lapse_note(row: &EffectRecord) -> String {
    match row.lease_expires_at {
        Some(exp) => format!(
            "the lease of action {} (attempt {}) lapsed at {} while {}; \
             nobody knows whether it ran",
            row.action_id,
            row.attempt,
            format_micros(exp),
            row.state
        ),
        None => format!(
            "action {} (attempt {}) was {} without a lease; nobody knows whether it ran",
            row.action_id, row.attempt, row.state
        ),
    }
}

/// The longest lease (and the furthest an extension may reach past now): ten years, far past
/// any real call.
pub const MAX_LEASE: Micros = 10 * 366 * 86_400 * 1_000_000;

/// The first instant no record may hold (year 10000): every reader shows times as dates.
pub const END_OF_TIME: Micros = 253_402_300_800_000_000;

/// The earliest instant a record may hold (0001-01-01, the first a date can show).
pub const START_OF_TIME: Micros = -62_135_596_800_000_000;

/// A character that does not belong in one printable line: a control character, a Unicode
/// line or paragraph separator, or an invisible format character that would let a name shown
/// to a person read as another: the zero-width space, the bidirectional marks, overrides and
/// isolates, the invisible operators, the byte order mark, the interlinear annotation marks
/// and the tag characters. (The zero-width joiner and non-joiner stay: Persian and Indic
/// names and emoji sequences need them.)
pub(crate) fn breaks_a_line(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{00AD}' | '\u{061C}' | '\u{180E}'
        )
        || matches!(c, '\u{200B}' | '\u{200E}' | '\u{200F}' | '\u{FEFF}')
        || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{206F}')
        || matches!(c, '\u{FFF9}'..='\u{FFFB}' | '\u{E0000}'..='\u{E007F}')
}

/// The lease a reservation at `now` would write ends before [`END_OF_TIME`] (a clock set
/// near the year 9999 must not write a row nobody can read back).
pub fn check_lease_end(now: Micros, lease: Micros) -> Result<()> {
    match now.checked_add(lease) {
        Some(end) if (START_OF_TIME..END_OF_TIME).contains(&now) && end < END_OF_TIME => Ok(()),
        _ => Err(Error::InvalidArgument(format!(
            "a lease of {lease} µs from {} would end outside the years 1 to 9999; check the \
             store's clock",
            format_micros(now)
        ))),
    }
}

/// Check the arguments every reservation needs.
pub fn check_request(key: &str, action_id: &str, lease: Micros) -> Result<()> {
    if key.is_empty() {
        return Err(Error::InvalidArgument(
            "effect key must not be empty".into(),
        ));
    }
    check_action_id(action_id)?;
    if lease <= 0 || lease > MAX_LEASE {
        return Err(Error::InvalidArgument(format!(
            "lease must be > 0 microseconds and at most ten years ({MAX_LEASE}), got {lease}"
        )));
    }
    Ok(())
}

pub fn check_action_id(action_id: &str) -> Result<()> {
    if action_id.is_empty() || action_id.chars().any(breaks_a_line) {
        return Err(Error::InvalidArgument(format!(
            "action id must be non-empty printable text, got {action_id:?}"
        )));
    }
    Ok(())
}

/// SPEC §4's re-read rule for a write that matched nothing.
pub fn refuse_by_row(
    row: EffectRecord,
    action_id: &str,
    attempt: Option<i64>,
    what: &str,
    required: &[EffectState],
    now: Micros,
) -> Error {
    match row.state {
        EffectState::Ambiguous => Error::ambiguous(row),
        EffectState::Committed => Error::duplicate(DuplicateKind::Committed, row),
        _ if row.lease_live(now) && !row.is_attempt(action_id, attempt) => {
            Error::duplicate(DuplicateKind::InProgress, row)
        }
        _ => {
            let required: Vec<&str> = required.iter().map(|s| s.as_str()).collect();
            let want = match attempt {
                Some(a) => format!("action {action_id} attempt {a}"),
                None => format!("action {action_id}"),
            };
            Error::InvalidArgument(format!(
                "{what} refused for effect '{}': it is {} under action {} (attempt {}); \
                 {what} requires {} under {want}",
                row.effect_key,
                row.state,
                row.action_id,
                row.attempt,
                required.join(" or "),
            ))
        }
    }
}

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
    const WHAT: &str = "extend_lease";
    let Some(row) = row else {
        return Err(Error::InvalidArgument(format!(
            "{WHAT}: no effect is recorded under key '{key}'"
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
            "{WHAT} refused for effect '{key}': its lease lapsed at {}; a lapsed lease cannot be revived",
            format_micros(old)
        )));
    }
    if until > now.saturating_add(MAX_LEASE) {
        return Err(Error::InvalidArgument(format!(
            "{WHAT} refused for effect '{key}': the new expiry {} is more than ten years away \
             (leases are at most ten years)",
            format_micros(until)
        )));
    }
    if until < old {
        return Err(Error::InvalidArgument(format!(
            "{WHAT} refused for effect '{key}': the new expiry {} is earlier than the current {}",
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
    check_resolver(resolver)?;
    if !matches!(target, EffectState::Committed | EffectState::Failed) {
        return Err(Error::InvalidArgument(format!(
            "an ambiguous effect resolves to 'committed' or 'failed', not '{target}'"
        )));
    }
    let Some(row) = row else {
        return Err(Error::InvalidArgument(format!(
            "resolve_effect: no effect is recorded under key '{key}'"
        )));
    };
    // A held row whose lease lapsed is ambiguous already (its holder is gone, nobody knows
    // whether it ran): the lapse and the resolution are written together.
    let earlier = match row.state {
        EffectState::Ambiguous => row.error.clone().unwrap_or_default(),
        EffectState::Reserved | EffectState::Executing if !row.lease_live(now) => lapse_note(&row),
        EffectState::Reserved | EffectState::Executing => {
            return Err(Error::InvalidArgument(format!(
                "resolve_effect refused for effect '{key}': it is {} under action {} (attempt \
                 {}) and its lease runs until {}; the holder may still finish. Resolve it once \
                 the lease has lapsed",
                row.state,
                row.action_id,
                row.attempt,
                format_micros(row.lease_expires_at.unwrap_or(Micros::MIN))
            )))
        }
        _ => {
            return Err(Error::InvalidArgument(format!(
                "resolve_effect refused for effect '{key}': it is {}, and only an ambiguous \
                 effect (or a held one whose lease lapsed) is resolved by a person",
                row.state
            )))
        }
    };
    let note = format!("resolved as {target} by {resolver}");
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

/// A resolver is one printable line of text.
pub fn check_resolver(resolver: &str) -> Result<()> {
    if resolver.trim().is_empty() || resolver.chars().any(breaks_a_line) {
        return Err(Error::InvalidArgument(format!(
            "resolver must be one printable line naming who resolved the effect, got {resolver:?}"
        )));
    }
    Ok(())
}

/// `2026-11-29T21:37:27.123456Z` for messages; instants outside years 1970..=9999 (which the
/// formatter cannot show) as raw microseconds. Never panics.
pub fn format_micros(us: Micros) -> String {
    const YEAR_10000: Micros = 253_402_300_800_000_000;
    if !(0..YEAR_10000).contains(&us) {
        return format!("{us} µs since the Unix epoch");
    }
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_micros(us as u64);
    humantime::format_rfc3339_micros(t).to_string()
}
