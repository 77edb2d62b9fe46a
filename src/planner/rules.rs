//! The limits and checks every planner applies, the row a compare-and-set expects, and how
//! messages show an instant.

use crate::error::{Error, Result};
use crate::record::{EffectRecord, EffectState, Micros};

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
