//! Receipts: one per committed write to an effect or an approval request, appended by the
//! database in the same transaction as the write (a trigger copies the written row), each
//! carrying the hash of the previous receipt of its chain.
//!
//! A chain is an effect key's writes (`effect`), or one approval request's events
//! (`approval`). The chain's head (its last sequence number and hash) lives on the effect's or
//! the request's own row and is computed by the write statement itself from the head it
//! replaces, so concurrent writers of one key are ordered by that row's lock and no single
//! global row is contended. This module holds the hash (the same one the statements compute:
//! SQLite calls [`hash_fields`] as a registered function, PostgreSQL runs the SQL function
//! `ctrlrun_receipt_hash` that the store's schema creates), the event names, and the
//! verification of chains.

use std::collections::HashMap;

use crate::approval::ApprovalState;
use crate::record::Micros;

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
    /// What the write was: see [`Event`] and [`approval_event`].
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

/// What a write to an effect is, as its receipt names it. The caller that plans the write
/// says which (never inferred from the rows: a late outcome over a resolved row looks like a
/// resolution).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A new attempt: the first, or one over a failed or expired attempt.
    Reservation,
    /// `reserved` -> `executing`.
    Begin,
    /// A live lease moved later.
    Extension,
    /// The holder's outcome.
    Outcome,
    /// A contender found the lease lapsed: `ambiguous`.
    Lapse,
    /// The holder's outcome after its lease lapsed.
    LateOutcome,
    /// A person settled the effect.
    Resolution,
    /// Retention removed the row: its chain's last receipt (a later reservation of the key
    /// starts a new chain).
    Prune,
}

impl Event {
    pub const fn as_str(self) -> &'static str {
        match self {
            Event::Reservation => "reservation",
            Event::Begin => "begin",
            Event::Extension => "extension",
            Event::Outcome => "outcome",
            Event::Lapse => "lapse",
            Event::LateOutcome => "late_outcome",
            Event::Resolution => "resolution",
            Event::Prune => "pruned",
        }
    }
}

/// What writing an approval request in `state` is, as a receipt names it.
/// The event of one grant of several a request needs (it stays `pending`).
pub const GRANTED_IN_PART: &str = "granted in part";

pub fn approval_event(state: ApprovalState) -> &'static str {
    match state {
        ApprovalState::Pending => "requested",
        ApprovalState::Granted => "granted",
        ApprovalState::Denied => "denied",
        ApprovalState::Used => "consumed",
        ApprovalState::Expired => "expired",
    }
}

/// The first thing wrong in a store's receipts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Broken {
    /// The receipt found wrong (none when what is wrong is a row, or a missing last receipt).
    pub receipt_id: Option<i64>,
    pub effect_key: String,
    /// What is wrong, naming the receipt and its chain.
    pub why: String,
}

/// What a verification found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verification {
    pub receipts: u64,
    pub chains: u64,
    pub broken: Option<Broken>,
}

/// How messages name a chain.
fn chain_label(r: &Receipt) -> String {
    match r.chain_id() {
        (true, id) => format!("approval request {id} (effect '{}')", r.effect_key),
        (false, key) => format!("effect '{key}'"),
    }
}

/// Check receipts (in `id` order) against their hashes and their chains, then each row's head
/// against its chain: a changed receipt fails its hash, a deleted or moved one breaks its
/// chain's sequence, a deleted last one (or a row changed outside ctrlrun) disagrees with its
/// row's head. The heads and the receipts must be read in one snapshot.
pub struct Verifier {
    /// Per chain: the last receipt's number and hash, and whether it is a `pruned` one.
    last: HashMap<(bool, String), (i64, String, bool)>,
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

    fn fail(&mut self, r: &Receipt, receipt_id: Option<i64>, why: String) {
        if self.broken.is_none() {
            self.broken = Some(Broken {
                receipt_id,
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
        let (id, label) = (r.id, chain_label(r));
        if r.expected_hash() != r.hash {
            let why = format!("receipt {id} of {label} does not match its hash: it was changed");
            return self.fail(r, Some(id), why);
        }
        let (is_approval, chain) = r.chain_id();
        let chain = (is_approval, chain.to_owned());
        let why = match (self.last.get(&chain), r.seq, &r.prev_hash) {
            // A chain starts, or starts again after its row was pruned.
            (None | Some((_, _, true)), 1, None) => None,
            (Some((seq, hash, _)), n, Some(prev)) if n == seq + 1 && prev == hash => None,
            (Some((seq, ..)), n, _) => Some(format!(
                "receipt {id} of {label} is number {n} of its chain but follows number {seq}: \
                 a receipt is missing, or receipts were reordered"
            )),
            (None, n, _) => Some(format!(
                "receipt {id} of {label} is number {n} of its chain, but no earlier receipt of \
                 it comes before it: one was deleted, or receipts were reordered"
            )),
        };
        if let Some(why) = why {
            return self.fail(r, Some(id), why);
        }
        let pruned = r.kind == Event::Prune.as_str();
        self.last.insert(chain, (r.seq, r.hash.clone(), pruned));
    }

    /// Compare each row's head with the last receipt of its chain, and finish. A head is its
    /// row as a receipt (`id` 0, `hash` the row's `receipt_hash`): its own hash also shows a
    /// row changed outside ctrlrun. A chain with no row must end with a `pruned` receipt: a
    /// row deleted any other way was deleted outside ctrlrun.
    pub fn finish(mut self, heads: impl IntoIterator<Item = Receipt>) -> Verification {
        let chains = self.last.len() as u64;
        let mut rowless = self.last.clone();
        for head in heads {
            let (is_approval, chain) = head.chain_id();
            rowless.remove(&(is_approval, chain.to_owned()));
            if self.is_broken() {
                break;
            }
            let label = chain_label(&head);
            let (is_approval, chain) = head.chain_id();
            let last = self
                .last
                .get(&(is_approval, chain.to_owned()))
                .map(|(s, h, _)| (s, h));
            let why = if head.expected_hash() != head.hash {
                format!(
                    "the row of {label} does not match its chain head: it was changed outside \
                     ctrlrun"
                )
            } else {
                match last {
                    Some((s, h)) if *s == head.seq && *h == head.hash => continue,
                    Some((s, _)) if *s < head.seq => format!(
                        "{label} has had {} writes, but its last receipt is number {s}: \
                         receipts were deleted",
                        head.seq
                    ),
                    Some(_) => format!(
                        "the row of {label} does not match the last receipt of its chain: the \
                         row or its receipts were changed"
                    ),
                    None => format!("{label} has had {} writes, but it has no receipt", head.seq),
                }
            };
            self.fail(&head, None, why);
        }
        let deleted = rowless.into_iter().filter(|(_, (.., pruned))| !pruned);
        if let Some(((is_approval, chain), (seq, ..))) = deleted.min() {
            let (what, key) = if is_approval {
                (format!("approval request {chain}"), String::new())
            } else {
                (format!("effect '{chain}'"), chain)
            };
            if self.broken.is_none() {
                self.broken = Some(Broken {
                    receipt_id: None,
                    effect_key: key,
                    why: format!(
                        "{what} has {seq} receipts but no row: the row was deleted outside \
                         ctrlrun (a prune leaves a last receipt, `pruned`)"
                    ),
                });
            }
        }
        Verification {
            receipts: self.receipts,
            chains,
            broken: self.broken,
        }
    }
}
