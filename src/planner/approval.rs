//! The approval planners: asking (one request per action and arguments), a person's decision,
//! and the single use of a grant by a reservation.

use super::rules::{breaks_a_line, format_micros, MAX_LEASE};
use crate::approval::{ApprovalAsk, ApprovalRecord, ApprovalState};
use crate::error::{Error, Result};
use crate::record::Micros;

/// What asking for an approval does, given the latest request for the same action and
/// arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // a short-lived value, never stored in bulk
pub enum RequestPlan {
    /// That request stands (pending, granted, or denied within its time): write nothing.
    Stands(ApprovalRecord),
    /// Write `new` (pending); first mark `expire` (a pending request or a grant whose time ran
    /// out, with the state it is stored in) expired.
    Ask {
        expire: Option<(ApprovalState, ApprovalRecord)>,
        new: ApprovalRecord,
    },
}

/// One printable line naming who decided, or who asks.
fn check_person(what: &str, name: &str) -> Result<()> {
    if name.trim().is_empty() || name.chars().any(breaks_a_line) || name.chars().count() > 200 {
        return Err(Error::InvalidArgument(format!(
            "{what} must be one printable line of at most 200 characters naming a person, got \
             {name:?}"
        )));
    }
    Ok(())
}

/// A request id is `apr_` + 32 lowercase hex digits; anything else names no request.
pub fn check_request_id(id: &str) -> Result<()> {
    let hex = id.strip_prefix("apr_").unwrap_or("");
    if hex.len() != 32 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(Error::InvalidArgument(format!(
            "{id:?} is not an approval request id (apr_ and 32 hex digits); nothing was written"
        )));
    }
    Ok(())
}

/// An action name is one printable line.
fn check_action(action: &str) -> Result<()> {
    if action.trim().is_empty() || action.chars().any(breaks_a_line) {
        return Err(Error::InvalidArgument(format!(
            "an action name must be one printable line, got {action:?}"
        )));
    }
    Ok(())
}

/// A note is printable text on one line, at most 2,000 characters.
pub fn check_note(note: &str) -> Result<()> {
    if note.chars().any(breaks_a_line) || note.chars().count() > 2000 {
        return Err(Error::InvalidArgument(
            "an approval note must be one printable line of at most 2000 characters (no control \
             characters)"
                .into(),
        ));
    }
    Ok(())
}

/// Plan the request for `ask` from the latest request for the same action and arguments.
pub fn plan_request(
    latest: Option<ApprovalRecord>,
    ask: &ApprovalAsk<'_>,
    request_id: &str,
    now: Micros,
) -> Result<RequestPlan> {
    check_action(ask.action)?;
    if !(1..=MAX_LEASE).contains(&ask.ttl) {
        return Err(Error::InvalidArgument(format!(
            "an approval's time to live must be more than 0 and at most ten years, got {} us",
            ask.ttl
        )));
    }
    if ask.args_digest.is_empty() {
        return Err(Error::InvalidArgument(
            "an approval request needs the digest of the call's arguments".into(),
        ));
    }
    let stale = match latest {
        Some(r) => match r.state_at(now) {
            ApprovalState::Pending | ApprovalState::Granted => return Ok(RequestPlan::Stands(r)),
            ApprovalState::Denied if now <= r.expires_at => return Ok(RequestPlan::Stands(r)),
            _ if matches!(r.state, ApprovalState::Pending | ApprovalState::Granted) => Some(r),
            _ => None,
        },
        None => None,
    };
    Ok(RequestPlan::Ask {
        expire: stale.map(|r| {
            (
                r.state,
                ApprovalRecord {
                    state: ApprovalState::Expired,
                    ..r
                },
            )
        }),
        new: ApprovalRecord {
            request_id: request_id.to_owned(),
            action: ask.action.to_owned(),
            args_digest: ask.args_digest.to_owned(),
            effect_key: ask.effect_key.to_owned(),
            arguments: ask.arguments.to_owned(),
            state: ApprovalState::Pending,
            requested_at: now,
            ttl: ask.ttl,
            expires_at: now.saturating_add(ask.ttl),
            decided_at: None,
            decided_by: None,
            note: None,
            used_at: None,
            used_by: None,
        },
    })
}

/// A person grants (`grant`) or denies the pending request `found`; returns the row to write.
/// The decision stands for the request's time to live from now.
pub fn plan_decision(
    found: Option<ApprovalRecord>,
    request_id: &str,
    grant: bool,
    by: &str,
    note: Option<&str>,
    now: Micros,
) -> Result<ApprovalRecord> {
    check_person("the decider (--by)", by)?;
    if let Some(note) = note {
        check_note(note)?;
    }
    let Some(r) = found else {
        return Err(Error::InvalidArgument(format!(
            "no approval request '{request_id}' is recorded in this store"
        )));
    };
    match r.state_at(now) {
        ApprovalState::Pending => {}
        ApprovalState::Expired if r.decided_at.is_none() => {
            return Err(Error::InvalidArgument(format!(
                "approval request '{request_id}' expired at {} without a decision; nothing was \
                 written. The agent's next call asks again",
                format_micros(r.expires_at)
            )))
        }
        state => {
            return Err(Error::InvalidArgument(format!(
                "approval request '{request_id}' is already decided ({state}, by {} at {}); a \
                 request is decided once, nothing was written",
                r.decided_by.as_deref().unwrap_or("?"),
                r.decided_at.map_or_else(|| "?".into(), format_micros)
            )))
        }
    }
    Ok(ApprovalRecord {
        state: if grant {
            ApprovalState::Granted
        } else {
            ApprovalState::Denied
        },
        decided_at: Some(now),
        decided_by: Some(by.to_owned()),
        note: note.map(str::to_owned),
        expires_at: now.saturating_add(r.ttl),
        ..r
    })
}

/// A reservation of `action` by the attempt `action_id` uses the grant `found` (the granted
/// request for its action and arguments, if any): returns the used row to write, or
/// [`Error::ApprovalNeeded`] when there is no grant in force.
pub fn plan_consume(
    found: Option<ApprovalRecord>,
    action: &str,
    action_id: &str,
    now: Micros,
) -> Result<ApprovalRecord> {
    match found {
        Some(r) if r.state_at(now) == ApprovalState::Granted => Ok(ApprovalRecord {
            state: ApprovalState::Used,
            used_at: Some(now),
            used_by: Some(action_id.to_owned()),
            ..r
        }),
        _ => Err(Error::ApprovalNeeded(format!(
            "the action '{action}' needs an approval granted for these arguments, and none is in \
             force"
        ))),
    }
}
