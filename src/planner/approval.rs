//! The approval planners: asking (one request per action and arguments), a person's decision,
//! and the single use of a grant by a reservation.

use super::names::{check_name, same_person, COMPARED};
use super::rules::{breaks_a_line, format_micros, MAX_LEASE};
use crate::approval::{ApprovalAsk, ApprovalRecord, ApprovalState, ApproverRecord, MAX_APPROVERS};
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

/// Who `by` is in a refusal that found them recorded as `found` (who asked, who granted), and
/// how names are compared when the two are spelled differently.
fn spelled(by: &str, found: &str) -> (String, String) {
    if by == found {
        (by.to_owned(), String::new())
    } else {
        (
            format!("{by:?} is the same name as {found:?}, who"),
            format!(" ({COMPARED})"),
        )
    }
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
    if !(1..=MAX_APPROVERS).contains(&ask.approvals_needed) {
        return Err(Error::InvalidArgument(format!(
            "an action may require from 1 to {MAX_APPROVERS} approvers, got {}",
            ask.approvals_needed
        )));
    }
    if let Some(who) = ask.requested_by {
        check_name("requested_by", who)?;
    }
    if ask.args_digest.is_empty() {
        return Err(Error::InvalidArgument(
            "an approval request needs the digest of the call's arguments".into(),
        ));
    }
    let stale = match latest {
        Some(r) => match r.state_at(now) {
            // A request that needs fewer approvers than are asked for now (the store's policy
            // raised the number) is expired and asked anew.
            ApprovalState::Pending | ApprovalState::Granted
                if r.approvals_needed >= ask.approvals_needed =>
            {
                return Ok(RequestPlan::Stands(r))
            }
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
            requested_by: ask.requested_by.map(str::to_owned),
            approvals_needed: ask.approvals_needed,
            granted_by: Vec::new(),
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
    check_name("the decider (--by)", by)?;
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
    if grant {
        // The same person by another spelling ("Refund-Agent ", a fullwidth form) is refused
        // as that person is.
        if let Some(asked) = r.requested_by.as_deref().filter(|a| same_person(a, by)) {
            let (who, how) = spelled(by, asked);
            return Err(Error::InvalidArgument(format!(
                "{who} asked for approval request '{request_id}' and cannot grant it: a request \
                 is granted by someone other than who asked; nothing was written{how}"
            )));
        }
        if let Some(earlier) = r.granted_by.iter().find(|g| same_person(g, by)) {
            let (who, how) = spelled(by, earlier);
            return Err(Error::InvalidArgument(format!(
                "{who} already granted approval request '{request_id}'; it needs {} distinct \
                 approvers ({} so far), nothing was written{how}",
                r.approvals_needed,
                r.granted_by.len()
            )));
        }
    }
    let mut granted_by = r.granted_by.clone();
    if grant {
        granted_by.push(by.to_owned());
    }
    if grant && (granted_by.len() as i64) < r.approvals_needed {
        // One grant of several: the request stays pending, for its time, with who granted.
        return Ok(ApprovalRecord {
            decided_by: Some(by.to_owned()),
            note: note.map(str::to_owned),
            granted_by,
            ..r
        });
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
        granted_by,
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

/// An approver's name is a name [`check_name`] takes, with no space at either end (the name a
/// sign-in types and a grant records).
pub fn check_approver_name(name: &str) -> Result<()> {
    check_name("an approver's name", name)?;
    if name.trim() != name {
        return Err(Error::InvalidArgument(format!(
            "an approver's name has no space at either end, got {name:?}"
        )));
    }
    Ok(())
}

/// The account to write for `name` with `secret_hash`: a new one (`create`), or the account
/// `name` with a new secret. `accounts` is what the write read: every account when creating
/// (a new name is refused when one has it, or the same name by another spelling: two accounts
/// would be one person to the approval rules), the account `name` (if any) when not.
pub fn plan_approver(
    accounts: Vec<ApproverRecord>,
    name: &str,
    secret_hash: &str,
    create: bool,
    now: Micros,
) -> Result<ApproverRecord> {
    check_approver_name(name)?;
    if secret_hash.is_empty()
        || secret_hash.len() > 1000
        || secret_hash
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(Error::InvalidArgument(
            "an approver's secret hash is 1 to 1000 characters of text without spaces; nothing \
             was written"
                .into(),
        ));
    }
    if create {
        if let Some(twin) = accounts
            .iter()
            .find(|a| a.name != name && same_person(&a.name, name))
        {
            return Err(Error::InvalidArgument(format!(
                "an approver named {:?} already exists, and {name:?} is the same name \
                 ({COMPARED}): two accounts would be one person to the approval rules; nothing \
                 was written (use that account, or choose another name)",
                twin.name
            )));
        }
    }
    let found = accounts.into_iter().find(|a| a.name == name);
    match (found, create) {
        (Some(_), true) => Err(Error::InvalidArgument(format!(
            "an approver named {name:?} already exists; nothing was written (reset its secret \
             instead)"
        ))),
        (None, false) => Err(Error::InvalidArgument(format!(
            "no approver named {name:?} exists in this store; nothing was written"
        ))),
        (None, true) => Ok(ApproverRecord {
            name: name.to_owned(),
            secret_hash: secret_hash.to_owned(),
            created_at: now,
            updated_at: now,
        }),
        (Some(r), false) => Ok(ApproverRecord {
            secret_hash: secret_hash.to_owned(),
            updated_at: now,
            ..r
        }),
    }
}
