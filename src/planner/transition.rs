//! The transitions a holder makes after its reservation (docs/spec.md §4), the write each one plans,
//! and how a write that matched nothing, or whose `COMMIT` was lost, is settled (docs/spec.md §6).

use super::lost::marked_lost;
use super::refusal::refuse_by_row;
use super::rules::Expected;
use crate::error::{Error, Result};
use crate::receipt::Event;
use crate::record::{EffectRecord, EffectState, Micros};

/// A later transition of docs/spec.md §4 made by the attempt that holds the key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transition {
    /// `reserved` -> `executing`, just before the executor's body starts.
    Begin,
    /// `executing` -> `committed`, with the executor's result as JSON text.
    Commit { result: Option<String> },
    /// `executing` (or `reserved`: the body never started) -> `failed`.
    Fail { error: String },
    /// `reserved`/`executing` -> `ambiguous` (on an `ambiguous` row of the same attempt, the
    /// error is added to the row's: see [`plan_mismatch`]).
    MarkAmbiguous { error: String },
}

impl Transition {
    pub fn name(&self) -> &'static str {
        match self {
            Transition::Begin => "begin_execution",
            Transition::Commit { .. } => "commit_effect",
            Transition::Fail { .. } => "fail_effect",
            Transition::MarkAmbiguous { .. } => "mark_ambiguous",
        }
    }

    /// What the write does, as a message says it to a person: "cannot {verb} effect 'k'".
    pub fn verb(&self) -> &'static str {
        match self {
            Transition::Begin => "begin",
            Transition::Commit { .. } => "commit",
            Transition::Fail { .. } => "fail",
            Transition::MarkAmbiguous { .. } => "mark as ambiguous",
        }
    }

    /// The states the compare-and-set accepts.
    pub fn from_states(&self) -> &'static [EffectState] {
        use EffectState::*;
        match self {
            Transition::Begin => &[Reserved],
            Transition::Commit { .. } => &[Executing],
            Transition::Fail { .. } => &[Executing, Reserved],
            Transition::MarkAmbiguous { .. } => &[Reserved, Executing],
        }
    }

    pub fn target(&self) -> EffectState {
        match self {
            Transition::Begin => EffectState::Executing,
            Transition::Commit { .. } => EffectState::Committed,
            Transition::Fail { .. } => EffectState::Failed,
            Transition::MarkAmbiguous { .. } => EffectState::Ambiguous,
        }
    }

    /// The write this transition plans: every column value the store binds.
    pub fn write(&self) -> TransitionWrite<'_> {
        let (result, error) = match self {
            Transition::Begin => (None, None),
            Transition::Commit { result } => (result.as_deref(), None),
            Transition::Fail { error } | Transition::MarkAmbiguous { error } => {
                (None, Some(error.as_str()))
            }
        };
        TransitionWrite {
            from: self.from_states(),
            state: self.target(),
            // begin keeps the reservation's lease; every outcome ends it
            clear_lease: !matches!(self, Transition::Begin),
            result,
            error,
        }
    }

    /// Whether this write must survive a crash of the machine that made it. `begin` need not:
    /// if a power cut loses it, the caller died with it, and the row is back to `reserved`
    /// under the same lease, which every contender treats exactly like `executing`. The next
    /// durable write of the same attempt makes it durable too (one log, written in order).
    /// This holds only where the database dies with its client (embedded SQLite); a server
    /// that can crash while its client lives (PostgreSQL) keeps every write durable, or the
    /// client's outcome write would find the row back at `reserved`.
    pub fn needs_durability_with_client(&self) -> bool {
        !matches!(self, Transition::Begin)
    }

    /// The row after this transition's write on `row` at `now`: the row the store's
    /// compare-and-set leaves (the store contract checks it against the rows written).
    pub fn apply(&self, row: &EffectRecord, now: Micros) -> EffectRecord {
        let w = self.write();
        EffectRecord {
            state: w.state,
            updated_at: now,
            lease_expires_at: if w.clear_lease {
                None
            } else {
                row.lease_expires_at
            },
            result: w.result.map(str::to_owned),
            error: w.error.map(str::to_owned),
            ..row.clone()
        }
    }
}

/// The compare-and-set a transition plans. The planner decides every value; the store's
/// `UPDATE` binds them and decides nothing: it sets these columns (and `updated_at` to the
/// call's `now`) on the row under the key, action id and attempt, if it is in one of `from`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransitionWrite<'a> {
    pub from: &'static [EffectState],
    pub state: EffectState,
    /// `true`: the lease column becomes NULL; `false`: it is left as it is.
    pub clear_lease: bool,
    pub result: Option<&'a str>,
    pub error: Option<&'a str>,
}

/// After a compare-and-set for `transition` matched no row, decide from the row found
/// (docs/spec.md §4 and §6): `Ok(row)` when the transition already landed for this attempt,
/// otherwise the error to raise.
pub fn settle_mismatch(
    found: Option<EffectRecord>,
    key: &str,
    action_id: &str,
    attempt: Option<i64>,
    transition: &Transition,
    now: Micros,
) -> Result<EffectRecord> {
    let Some(row) = found else {
        return Err(Error::InvalidArgument(format!(
            "no effect is recorded under key '{key}'"
        )));
    };
    if row.state == transition.target() && row.is_attempt(action_id, attempt) {
        return Ok(row);
    }
    Err(refuse_by_row(
        row,
        action_id,
        attempt,
        transition.verb(),
        transition.from_states(),
        now,
    ))
}

/// What a transition whose compare-and-set matched nothing does with the row it found.
#[derive(Debug)]
pub enum Mismatch {
    /// The transition had already landed for this attempt: nothing to write.
    Landed(EffectRecord),
    /// A late outcome: write `row` over `expected` (see [`plan_mismatch`]).
    Late {
        expected: Expected,
        row: EffectRecord,
    },
    /// Refuse by docs/spec.md §4's re-read rule.
    Refuse(Error),
}

/// After a compare-and-set for `transition` matched nothing, the row found decides.
///
/// An outcome that arrives late (the executor ran past its lease) is never lost while the row
/// still belongs to its attempt (same action id and attempt, no newer attempt since):
///
/// | the row | a return (`commit`) | `NotExecuted` (`fail`) | another exception (`mark_ambiguous`) |
/// | --- | --- | --- | --- |
/// | `ambiguous` (lapsed) | `committed` with the result | stays `ambiguous`, noted (a person resolves it) | stays `ambiguous` |
/// | `failed`, set by a person | `committed` with the result: the effect happened | - | - |
/// | `committed`, set by a person | stays `committed`, gains the result | - | - |
///
/// Each keeps the row's history in `error` and adds what came late. Anything else is the
/// re-read rule's: landed, or refused.
pub fn plan_mismatch(
    found: Option<EffectRecord>,
    key: &str,
    action_id: &str,
    attempt: Option<i64>,
    transition: &Transition,
    now: Micros,
) -> Mismatch {
    // Only for a caller that names its attempt (the decorator always does): an action id
    // alone could be reused by a later attempt through the Store API.
    if let (Some(row), Some(_)) = (&found, attempt) {
        if row.is_attempt(action_id, attempt) {
            if let Some(late) = late_outcome(row, transition, now) {
                return Mismatch::Late {
                    expected: Expected::of(row),
                    row: late,
                };
            }
        }
    }
    match settle_mismatch(found, key, action_id, attempt, transition, now) {
        Ok(row) => Mismatch::Landed(row),
        Err(e) => Mismatch::Refuse(e),
    }
}

/// The row a late outcome writes over `row` (of the same attempt), or `None`.
fn late_outcome(row: &EffectRecord, t: &Transition, now: Micros) -> Option<EffectRecord> {
    let w = t.write();
    let by_person = row.resolved_by.is_some();
    let noted = |what: String| match row.error.as_deref() {
        Some(e) if !e.is_empty() => Some(format!("{e}; {what}")),
        _ => Some(what),
    };
    let (state, result, error) = match (t, row.state) {
        // Marked for a person after another attempt's write was lost: this executor's effect
        // happened, and so may the lost attempt's; it stays for the person.
        (Transition::Commit { .. }, EffectState::Ambiguous) if !by_person && marked_lost(row) => (
            EffectState::Ambiguous,
            w.result.map(str::to_owned),
            noted(
                "then this attempt's executor returned: its effect happened; a person resolves \
                 the lost write"
                    .into(),
            ),
        ),
        (Transition::Commit { .. }, EffectState::Ambiguous) if !by_person => (
            EffectState::Committed,
            w.result.map(str::to_owned),
            noted("then the executor returned, late: the effect happened".into()),
        ),
        (Transition::Commit { .. }, EffectState::Failed) if by_person => (
            EffectState::Committed,
            w.result.map(str::to_owned),
            noted(
                "then the executor returned, late: the effect happened, which overrules \
                   the resolution as failed"
                    .into(),
            ),
        ),
        (Transition::Commit { .. }, EffectState::Committed)
            if by_person && row.result.is_none() =>
        {
            (
                EffectState::Committed,
                w.result.map(str::to_owned),
                noted("then the executor returned, late".into()),
            )
        }
        // Only a person moves an effect out of `ambiguous` to `failed` (a resolution, the
        // approver duty's: docs/roles.md): the late report is noted for them.
        (Transition::Fail { error }, EffectState::Ambiguous) if !by_person => (
            EffectState::Ambiguous,
            row.result.clone(),
            noted(format!(
                "then the executor reported, late, that it did not run: {error}; a person may \
                 resolve it as failed"
            )),
        ),
        (Transition::MarkAmbiguous { error }, EffectState::Ambiguous) if !by_person => (
            EffectState::Ambiguous,
            row.result.clone(),
            noted(format!("then, late: {error}")),
        ),
        _ => return None,
    };
    Some(EffectRecord {
        state,
        updated_at: now,
        lease_expires_at: None,
        result,
        error,
        ..row.clone()
    })
}

/// After an unknown `COMMIT` of a later transition, what the re-read row says (docs/spec.md §6).
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // a short-lived value, never stored in bulk
pub enum AfterUnknown {
    /// The transition landed (the row is in the target state under our attempt).
    Landed(EffectRecord),
    /// The row is still in a pre-state under our attempt: the `COMMIT` did not land; re-issue
    /// the same compare-and-set once.
    Reissue,
    /// Anything else: refuse by docs/spec.md §4's re-read rule.
    Refuse(Error),
}

pub fn settle_unknown_transition(
    found: Option<EffectRecord>,
    key: &str,
    action_id: &str,
    attempt: Option<i64>,
    transition: &Transition,
    now: Micros,
) -> AfterUnknown {
    match found {
        Some(row)
            if transition.from_states().contains(&row.state)
                && row.is_attempt(action_id, attempt) =>
        {
            AfterUnknown::Reissue
        }
        // a late outcome not yet written is written again; one written has landed
        other => match plan_mismatch(other, key, action_id, attempt, transition, now) {
            Mismatch::Landed(row) => AfterUnknown::Landed(row),
            Mismatch::Late { .. } => AfterUnknown::Reissue,
            Mismatch::Refuse(e) => AfterUnknown::Refuse(e),
        },
    }
}

impl Event {
    /// A holder's transition.
    pub fn of_transition(t: &Transition) -> Event {
        match t {
            Transition::Begin => Event::Begin,
            _ => Event::Outcome,
        }
    }
}
