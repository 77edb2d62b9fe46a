//! Receipts: one per committed write to an effect or an approval request, appended by the
//! database in the same transaction as the write (a trigger copies the written row), each
//! carrying the hash of the previous receipt of its chain.
//!
//! A chain is an effect key's writes (`effect`), or one approval request's events
//! (`approval`). The chain's head (its last sequence number and hash) lives on the effect's or
//! the request's own row and is computed by the write statement itself from the head it
//! replaces, so concurrent writers of one key are ordered by that row's lock and no single
//! global row is contended. This module holds the hash (the same one the statements compute:
//! SQLite calls [`hash_fields`] as a registered function, PostgreSQL runs the SQL function in
//! [`PG_HASH_FUNCTION`]), the event names, and the verification of chains.

use std::collections::HashMap;

use crate::approval::ApprovalState;
use crate::planner::{Expected, Transition};
use crate::record::{EffectRecord, EffectState, Micros};

/// One receipt as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Receipt {
    /// Increasing in the order receipts were written.
    pub id: i64,
    /// `effect` or `approval`.
    pub chain: String,
    pub effect_key: String,
    /// The approval request of an `approval` chain.
    pub request_id: Option<String>,
    /// 1 for the first receipt of its chain.
    pub seq: i64,
    /// The previous receipt's hash (none for the first).
    pub prev_hash: Option<String>,
    pub hash: String,
    pub at: Micros,
    /// What the write was: see [`effect_event`] and [`approval_event`].
    pub kind: String,
    pub action: Option<String>,
    pub action_id: Option<String>,
    pub attempt: Option<i64>,
    /// The state written.
    pub state: String,
    pub args_digest: Option<String>,
    pub approval_id: Option<String>,
    /// Who decided: the resolver of an effect, the approver of a request.
    pub actor: Option<String>,
    /// The process that wrote it: `host:pid`.
    pub writer: Option<String>,
}

/// The number of fields the hash covers (the registered SQLite function's arity).
pub const HASHED_FIELDS: usize = 15;

/// SHA-256, as 64 lowercase hex digits, of the fields in order, each written as its UTF-8
/// length, `:` and its text, or `~` when absent (so no two field lists share a hash input).
pub fn hash_fields(fields: &[Option<&str>]) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for field in fields {
        match field {
            Some(text) => {
                ctx.update(text.len().to_string().as_bytes());
                ctx.update(b":");
                ctx.update(text.as_bytes());
            }
            None => ctx.update(b"~"),
        }
    }
    let mut out = String::with_capacity(64);
    for byte in ctx.finish().as_ref() {
        out.push(char::from(b"0123456789abcdef"[usize::from(byte >> 4)]));
        out.push(char::from(b"0123456789abcdef"[usize::from(byte & 15)]));
    }
    out
}

impl Receipt {
    /// The hash this receipt's fields give (what its `hash` must be).
    pub fn expected_hash(&self) -> String {
        let (seq, at) = (self.seq.to_string(), self.at.to_string());
        let attempt = self.attempt.map(|a| a.to_string());
        hash_fields(&[
            Some(&self.chain),
            Some(&self.effect_key),
            self.request_id.as_deref(),
            Some(&seq),
            self.prev_hash.as_deref(),
            Some(&at),
            Some(&self.kind),
            self.action.as_deref(),
            self.action_id.as_deref(),
            attempt.as_deref(),
            Some(&self.state),
            self.args_digest.as_deref(),
            self.approval_id.as_deref(),
            self.actor.as_deref(),
            self.writer.as_deref(),
        ])
    }

    /// The chain this receipt belongs to: the effect key's, or the approval request's.
    fn chain_id(&self) -> (bool, &str) {
        match &self.request_id {
            Some(id) if self.chain == "approval" => (true, id),
            _ => (false, &self.effect_key),
        }
    }
}

/// What a whole-row write of `row` over `expected` (none: an insert) is, as a receipt names it.
pub fn effect_event(expected: Option<&Expected>, row: &EffectRecord) -> &'static str {
    let Some(old) = expected else {
        return "reservation";
    };
    if old.action_id != row.action_id || old.attempt != row.attempt {
        "reservation" // a new attempt over a failed or expired one
    } else if row.resolved_by.is_some() && old.state != row.state {
        "resolution"
    } else if old.state.is_held() && row.state == EffectState::Ambiguous {
        "lapse"
    } else if old.state == EffectState::Ambiguous {
        "late_outcome"
    } else if old.state == row.state {
        "extension"
    } else {
        "outcome"
    }
}

/// What a holder's transition is, as a receipt names it.
pub fn transition_event(t: &Transition) -> &'static str {
    match t {
        Transition::Begin => "begin",
        _ => "outcome",
    }
}

/// What writing an approval request in `state` is, as a receipt names it.
pub fn approval_event(state: ApprovalState) -> &'static str {
    match state {
        ApprovalState::Pending => "requested",
        ApprovalState::Granted => "granted",
        ApprovalState::Denied => "denied",
        ApprovalState::Used => "consumed",
        ApprovalState::Expired => "expired",
    }
}

/// A chain's head as its row holds it: the chain (`true` for an approval request) and its
/// key or request id, the last sequence number and hash.
pub type Head = ((bool, String), i64, String);

/// The first thing wrong in a store's receipts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Broken {
    /// The receipt found wrong (for a missing last receipt, the last one there, if any).
    pub receipt_id: Option<i64>,
    pub effect_key: String,
    pub why: String,
}

/// What a verification found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verification {
    pub receipts: u64,
    pub chains: u64,
    pub broken: Option<Broken>,
}

/// Check receipts (in `id` order) against their hashes, their chains, and the heads their rows
/// hold: a changed receipt fails its hash, a deleted or reordered one breaks its chain's
/// sequence, a deleted last one disagrees with its row's head. A chain may start (at 1)
/// again after its row was pruned.
pub struct Verifier {
    last: HashMap<(bool, String), (i64, String, String)>,
    receipts: u64,
    broken: Option<Broken>,
}

impl Default for Verifier {
    fn default() -> Self {
        Self::new()
    }
}

impl Verifier {
    pub fn new() -> Verifier {
        Verifier {
            last: HashMap::new(),
            receipts: 0,
            broken: None,
        }
    }

    /// Whether something is wrong already (the rest need not be read).
    pub fn is_broken(&self) -> bool {
        self.broken.is_some()
    }

    fn fail(&mut self, r: &Receipt, why: String) {
        if self.broken.is_none() {
            self.broken = Some(Broken {
                receipt_id: Some(r.id),
                effect_key: r.effect_key.clone(),
                why,
            });
        }
    }

    /// The next receipt, in `id` order.
    pub fn add(&mut self, r: &Receipt) {
        self.receipts += 1;
        if self.is_broken() {
            return;
        }
        if r.expected_hash() != r.hash {
            return self.fail(
                r,
                format!("receipt {} does not match its hash: it was changed", r.id),
            );
        }
        let (is_approval, id) = r.chain_id();
        let chain = (is_approval, id.to_owned());
        match (self.last.get(&chain), r.seq, &r.prev_hash) {
            (_, 1, None) => {}
            (Some((seq, hash, _)), n, Some(prev)) if n == seq + 1 && prev == hash => {}
            (Some((seq, _, _)), n, _) => {
                return self.fail(
                    r,
                    format!(
                        "receipt {} (number {n} of its chain) follows number {seq}: a receipt \
                         is missing, or they were reordered",
                        r.id
                    ),
                )
            }
            (None, n, _) => {
                return self.fail(
                    r,
                    format!(
                        "receipt {} is number {n} of its chain, but no earlier receipt of it \
                         comes before it: one was deleted, or receipts were reordered",
                        r.id
                    ),
                )
            }
        }
        self.last
            .insert(chain, (r.seq, r.hash.clone(), r.effect_key.clone()));
    }

    /// Compare each row's head (read before the receipts) with the last receipt of its chain,
    /// and finish.
    pub fn finish(mut self, heads: impl IntoIterator<Item = Head>) -> Verification {
        let chains = self.last.len() as u64;
        if self.broken.is_none() {
            for ((is_approval, id), seq, hash) in heads {
                let last = self.last.get(&(is_approval, id.clone()));
                // (heads are read before receipts: a write since may have added receipts)
                if last.is_some_and(|(s, h, _)| *s > seq || (*s == seq && *h == hash)) {
                    continue;
                }
                let what = if is_approval {
                    format!("approval request {id}")
                } else {
                    format!("effect '{id}'")
                };
                let why = match last {
                    Some((s, _, _)) if *s < seq => format!(
                        "{what} has had {seq} writes, but its last receipt is number {s}: \
                         receipts were deleted"
                    ),
                    Some(_) => format!(
                        "{what}'s row does not match the last receipt of its chain: the row or \
                         its receipts were changed"
                    ),
                    None => format!("{what} has had {seq} writes, but it has no receipt"),
                };
                self.broken = Some(Broken {
                    receipt_id: None,
                    effect_key: last.map(|(_, _, k)| k.clone()).unwrap_or(id),
                    why,
                });
                break;
            }
        }
        Verification {
            receipts: self.receipts,
            chains,
            broken: self.broken,
        }
    }
}
