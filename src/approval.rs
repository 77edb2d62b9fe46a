//! An approval request: a person's yes or no to one action with one set of arguments, used at
//! most once ([`ApprovalRecord`] and its [`ApprovalState`]).

use crate::named::named_enum;
use crate::record::Micros;

named_enum! {
    /// Where an approval request stands.
    pub enum ApprovalState {
        /// Asked; nobody has decided yet.
        Pending => "pending",
        /// A person said yes: the next reservation of this action with these arguments uses it.
        Granted => "granted",
        /// A person said no.
        Denied => "denied",
        /// A reservation consumed the grant (single use).
        Used => "used",
        /// Nobody decided (or used the grant) in time.
        Expired => "expired",
    }
}

/// One approval request's row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApprovalRecord {
    /// `apr_` + 32 hex digits.
    pub request_id: String,
    pub action: String,
    /// The digest of the call's canonical arguments: the approval is bound to it.
    pub args_digest: String,
    pub effect_key: String,
    /// The canonical arguments as JSON text: what the approver is shown.
    pub arguments: String,
    /// As stored; see [`ApprovalRecord::state_at`] for the state with expiry applied.
    pub state: ApprovalState,
    pub requested_at: Micros,
    /// How long a request waits for a decision, and a decision lasts.
    pub ttl: Micros,
    /// A pending request, a grant or a denial stands until this instant (inclusive).
    pub expires_at: Micros,
    pub decided_at: Option<Micros>,
    pub decided_by: Option<String>,
    pub note: Option<String>,
    pub used_at: Option<Micros>,
    /// The action id of the attempt whose reservation consumed the grant.
    pub used_by: Option<String>,
    /// The principal that asked (the agent's name, as the decorator or gateway says it): it
    /// can never grant this request.
    pub requested_by: Option<String>,
    /// How many distinct people must grant it (1 to [`MAX_APPROVERS`]).
    pub approvals_needed: i64,
    /// Who granted it so far, in order; the request is `granted` once there are
    /// `approvals_needed` of them.
    pub granted_by: Vec<String>,
}

/// The most approvers an action may require.
pub const MAX_APPROVERS: i64 = 10;

impl ApprovalRecord {
    /// The state at `now`: a pending request or a grant past `expires_at` is expired.
    pub fn state_at(&self, now: Micros) -> ApprovalState {
        match self.state {
            ApprovalState::Pending | ApprovalState::Granted if now > self.expires_at => {
                ApprovalState::Expired
            }
            state => state,
        }
    }

    /// This record as read at `now` (its state with expiry applied).
    pub fn at(mut self, now: Micros) -> ApprovalRecord {
        self.state = self.state_at(now);
        self
    }
}

/// What a call of an action that needs approval asks for.
#[derive(Clone, Copy, Debug)]
pub struct ApprovalAsk<'a> {
    pub action: &'a str,
    pub args_digest: &'a str,
    pub effect_key: &'a str,
    pub arguments: &'a str,
    pub ttl: Micros,
    pub requested_by: Option<&'a str>,
    pub approvals_needed: i64,
}

/// A person who may decide approval requests and resolve effects in the console: the name a
/// grant records, and the hash of their secret (its format is the console's; the store keeps
/// it as text and never sees the secret).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApproverRecord {
    pub name: String,
    pub secret_hash: String,
    pub created_at: Micros,
    pub updated_at: Micros,
}

/// A new request id: `apr_` + 32 hex digits from the OS's random source.
pub fn new_request_id() -> crate::error::Result<String> {
    Ok(format!("apr_{}", crate::env::new_attempt_token()?))
}

named_enum! {
    /// What a store's policy says of an action (`ctrlrun policy apply`).
    pub enum Decision {
        /// Runs as the caller's own policy says.
        Allow => "allow",
        /// Runs only with a grant in force, of at least the rule's number of approvers.
        Approve => "approve",
        /// Never runs.
        Deny => "deny",
    }
}

/// One action's rule in a store's policy: a floor under every caller's own policy (a caller
/// may add requirements, never remove them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActionRule {
    pub action: String,
    pub decision: Decision,
    /// How many distinct people must grant a call of it (1 to [`MAX_APPROVERS`]).
    pub approvals: i64,
}
