//! The stored row: [`EffectRecord`] and its [`EffectState`].

use crate::named::named_enum;

/// Microseconds since the Unix epoch, UTC. Every timestamp in the core uses this unit.
pub type Micros = i64;

named_enum! {
    /// Where an effect stands.
    pub enum EffectState {
        Reserved => "reserved",
        Executing => "executing",
        Committed => "committed",
        Failed => "failed",
        Ambiguous => "ambiguous",
    }
}

impl EffectState {
    /// `reserved` or `executing`: a state that a lease protects.
    pub fn is_held(self) -> bool {
        matches!(self, EffectState::Reserved | EffectState::Executing)
    }
}

/// One effect key's row. `result` holds JSON text as the binding serialised it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EffectRecord {
    pub effect_key: String,
    pub state: EffectState,
    pub action_id: String,
    pub attempt: i64,
    pub created_at: Micros,
    pub updated_at: Micros,
    pub lease_expires_at: Option<Micros>,
    pub result: Option<String>,
    pub error: Option<String>,
    pub resolved_by: Option<String>,
    /// Random per reservation call: the row of this attempt and no other, even when two
    /// attempts share an action id and a clock value. `None` on rows written before schema
    /// version 2.
    pub attempt_token: Option<String>,
    /// The current attempt's action name (`stripe.refund`), when the caller gave one.
    pub action: Option<String>,
    /// Who runs the current attempt: `host:pid` of the process that reserved it.
    pub holder: Option<String>,
    /// The digest of the attempt's canonical arguments, when the caller gave one.
    pub args_digest: Option<String>,
    /// Per argument: `name digest` lines, sorted by name (which arguments differ).
    pub arg_digests: Option<String>,
    /// The approval request this attempt consumed, if its action needed one.
    pub approval_id: Option<String>,
}

impl EffectRecord {
    /// A lease is live when the state is held, the expiry is set and `now <= expiry`
    /// (the boundary instant is still live).
    pub fn lease_live(&self, now: Micros) -> bool {
        self.state.is_held() && matches!(self.lease_expires_at, Some(exp) if now <= exp)
    }

    /// True when this row is the attempt `(action_id, attempt)`.
    pub fn is_attempt(&self, action_id: &str, attempt: Option<i64>) -> bool {
        self.action_id == action_id && attempt.is_none_or(|a| a == self.attempt)
    }
}
