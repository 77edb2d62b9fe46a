//! The reservation planner (docs/spec.md §3): what a proposal for a key does, given the row found.

use super::refusal::{lapse_note, Conflict, Refusal};
use super::rules::Expected;
use crate::error::DuplicateKind;
use crate::record::{EffectRecord, EffectState, Micros};

/// What a caller proposes for a key: one reservation call.
#[derive(Clone, Copy, Debug)]
pub struct Proposal<'a> {
    pub key: &'a str,
    pub action_id: &'a str,
    /// The lease's length.
    pub lease: Micros,
    /// Write a granted row as `executing` (see [`plan_reservation`]).
    pub begin: bool,
    /// This call's attempt token ([`crate::env::new_attempt_token`]), written on the row
    /// it grants. The store sets it.
    pub token: &'a str,
    /// `host:pid` of the caller ([`crate::env::holder`]). The store sets it.
    pub holder: &'a str,
    /// The action's name (`stripe.refund`), if the caller has one.
    pub action: Option<&'a str>,
    /// The digest of the canonical arguments, and the per-argument `name digest` lines.
    pub args: Option<(&'a str, &'a str)>,
    /// The action needs an approval granted for its name and arguments, consumed with the
    /// reservation.
    pub needs_approval: bool,
    /// The granted approval this reservation consumes (the store sets it after finding one).
    pub approval_id: Option<&'a str>,
}

impl<'a> Proposal<'a> {
    /// A plain proposal: no action name, arguments or approval.
    pub fn new(key: &'a str, action_id: &'a str, lease: Micros, begin: bool) -> Proposal<'a> {
        Proposal {
            key,
            action_id,
            lease,
            begin,
            token: "",
            holder: "",
            action: None,
            args: None,
            needs_approval: false,
            approval_id: None,
        }
    }

    /// The row this proposal writes when granted over `previous` (a `failed` row) or on a new
    /// key.
    fn granted_row(&self, previous: Option<&EffectRecord>, now: Micros) -> EffectRecord {
        let own = |s: Option<&str>| s.map(str::to_owned);
        EffectRecord {
            effect_key: self.key.to_owned(),
            state: if self.begin {
                EffectState::Executing
            } else {
                EffectState::Reserved
            },
            action_id: self.action_id.to_owned(),
            attempt: previous.map_or(1, |r| r.attempt + 1),
            created_at: previous.map_or(now, |r| r.created_at),
            updated_at: now,
            lease_expires_at: Some(now.saturating_add(self.lease)),
            result: None,
            error: None,
            resolved_by: None,
            attempt_token: Some(self.token.to_owned()),
            action: own(self.action),
            holder: Some(self.holder.to_owned()).filter(|h| !h.is_empty()),
            args_digest: own(self.args.map(|a| a.0)),
            arg_digests: own(self.args.map(|a| a.1)),
            approval_id: own(self.approval_id),
        }
    }
}

/// What a reservation must do, decided from the row found (docs/spec.md §3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReservationPlan {
    /// No row: insert this one (attempt 1).
    Insert(EffectRecord),
    /// `failed`: overwrite with this row (attempt + 1) if the row is still `expected`.
    Renew {
        expected: Expected,
        record: EffectRecord,
    },
    /// A held row whose lease lapsed: write this `ambiguous` row, commit it, then refuse.
    Lapse {
        expected: Expected,
        record: EffectRecord,
    },
    /// Refuse and write nothing.
    Refuse(Refusal),
}

/// The names whose digests differ between two sets of `name digest` lines.
fn differing(theirs: &str, ours: &str) -> Vec<String> {
    let parse = |text: &str| -> std::collections::BTreeMap<String, String> {
        text.lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(n, d)| (n.to_owned(), d.to_owned()))
            .collect()
    };
    let (a, b) = (parse(theirs), parse(ours));
    let mut names: Vec<String> = a
        .keys()
        .chain(b.keys())
        .filter(|n| a.get(*n) != b.get(*n))
        .cloned()
        .collect();
    names.sort();
    names.dedup();
    names
}

/// A duplicate of `row` (`kind`) as this proposal meets it: a conflict when the proposal names
/// another action, or arguments whose digest differs from the row's; else the plain duplicate.
fn duplicate(kind: DuplicateKind, row: &EffectRecord, p: &Proposal<'_>) -> Refusal {
    let other_action = match (row.action.as_deref(), p.action) {
        (Some(theirs), Some(ours)) if theirs != ours => Some(theirs.to_owned()),
        _ => None,
    };
    let fields = match (row.args_digest.as_deref(), p.args) {
        (Some(theirs), Some((ours, lines))) if other_action.is_none() && theirs != ours => {
            differing(row.arg_digests.as_deref().unwrap_or(""), lines)
        }
        _ => Vec::new(),
    };
    let args_differ = matches!((row.args_digest.as_deref(), p.args),
        (Some(theirs), Some((ours, _))) if theirs != ours);
    if other_action.is_none() && !args_differ {
        return match kind {
            DuplicateKind::Committed => Refusal::Committed(row.clone()),
            DuplicateKind::InProgress => Refusal::InProgress(row.clone()),
        };
    }
    Refusal::Conflict(
        kind,
        row.clone(),
        Conflict {
            fields,
            other_action,
        },
    )
}

/// The one reservation planner (docs/spec.md §3), checked in the table's order.
///
/// `begin`: the caller starts the executor's body right after this write (the decorator), so a
/// granted row is written as `executing` at once: the begin transition folded into the
/// reservation, one durable write fewer. Without it (the `Store` API) a granted row is
/// `reserved` and the caller writes begin itself. Contenders treat both alike (docs/spec.md §3), and
/// both lapse to `ambiguous`.
///
/// A duplicate whose proposal names a different action, or arguments whose digest differs, is a
/// conflict ([`Refusal::Conflict`]); an `ambiguous` row is refused as ambiguous whatever the
/// proposal, and a `failed` row is renewed with the new proposal's arguments.
pub fn plan_reservation(
    existing: Option<&EffectRecord>,
    p: &Proposal<'_>,
    now: Micros,
) -> ReservationPlan {
    let Some(row) = existing else {
        return ReservationPlan::Insert(p.granted_row(None, now));
    };
    match row.state {
        EffectState::Committed => {
            ReservationPlan::Refuse(duplicate(DuplicateKind::Committed, row, p))
        }
        EffectState::Ambiguous => ReservationPlan::Refuse(Refusal::Ambiguous(row.clone())),
        EffectState::Failed => ReservationPlan::Renew {
            expected: Expected::of(row),
            record: p.granted_row(Some(row), now),
        },
        EffectState::Reserved | EffectState::Executing => {
            if row.lease_live(now) {
                // Whatever the caller's action id: ids name attempts, not processes.
                ReservationPlan::Refuse(duplicate(DuplicateKind::InProgress, row, p))
            } else {
                ReservationPlan::Lapse {
                    expected: Expected::of(row),
                    record: EffectRecord {
                        state: EffectState::Ambiguous,
                        updated_at: now,
                        lease_expires_at: None,
                        error: Some(lapse_note(row)),
                        ..row.clone()
                    },
                }
            }
        }
    }
}
