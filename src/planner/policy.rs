//! A store's policy (docs/roles.md): the rule of each action, a floor under every caller's own
//! policy. A caller may add requirements, never remove them.

use super::rules::breaks_a_line;
use crate::approval::{ActionRule, ApprovalRecord, Decision, MAX_APPROVERS};
use crate::error::{Error, Result};

/// A rule a store can hold: an action name on one printable line, 1 to [`MAX_APPROVERS`]
/// approvers; and no action named twice in `rules`.
pub fn check_rules(rules: &[ActionRule]) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    for r in rules {
        if r.action.trim().is_empty() || r.action.chars().any(breaks_a_line) {
            return Err(Error::InvalidArgument(format!(
                "a store's policy names each action on one printable line, got {:?}",
                r.action
            )));
        }
        if !(1..=MAX_APPROVERS).contains(&r.approvals) {
            return Err(Error::InvalidArgument(format!(
                "action {:?}: a store's policy requires from 1 to {MAX_APPROVERS} approvers, got \
                 {}",
                r.action, r.approvals
            )));
        }
        if !seen.insert(r.action.as_str()) {
            return Err(Error::InvalidArgument(format!(
                "action {:?} is named twice in the policy; nothing was written",
                r.action
            )));
        }
    }
    Ok(())
}

/// Whether a call of `action` must use a grant: the caller's own say (`asked`), or the store's
/// `rule` when it requires one. A rule that denies the action refuses it.
pub fn needs_approval(rule: Option<&ActionRule>, action: &str, asked: bool) -> Result<bool> {
    match rule.map(|r| r.decision) {
        Some(Decision::Deny) => Err(denied(action)),
        Some(Decision::Approve) => Ok(true),
        _ => Ok(asked),
    }
}

/// How many approvers a new request needs: the larger of the caller's and the store's.
pub fn approvals_needed(rule: Option<&ActionRule>, action: &str, asked: i64) -> Result<i64> {
    needs_approval(rule, action, false)?;
    Ok(match rule {
        Some(r) if r.decision == Decision::Approve => asked.max(r.approvals),
        _ => asked,
    })
}

/// A grant about to be used meets the store's rule: as many approvers as it requires now (a
/// rule raised after the request was made asks for a new one).
pub fn check_grant(rule: Option<&ActionRule>, grant: &ApprovalRecord) -> Result<()> {
    needs_approval(rule, &grant.action, false)?;
    match rule {
        Some(r)
            if r.decision == Decision::Approve && (grant.granted_by.len() as i64) < r.approvals =>
        {
            Err(Error::ApprovalNeeded(format!(
                "the store's policy requires {} approvers of '{}', and the grant in force has \
                 {}; a new request is needed",
                r.approvals,
                grant.action,
                grant.granted_by.len()
            )))
        }
        _ => Ok(()),
    }
}

fn denied(action: &str) -> Error {
    Error::Denied(format!(
        "action '{action}' is denied by the store's policy (ctrlrun policy apply); nothing was \
         reserved or run"
    ))
}
