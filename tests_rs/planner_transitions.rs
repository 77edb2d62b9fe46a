//! The pure planner's later transitions (docs/spec.md §4): what each writes and how a
//! compare-and-set that matched nothing is settled.

use ctrlrun::error::DuplicateKind;
use ctrlrun::planner::{settle_mismatch, Transition};
use ctrlrun::{EffectRecord, EffectState, Error};

use crate::planner::*;

// ---------------------------------------------------------------------------------------------
// Transitions
// ---------------------------------------------------------------------------------------------

#[test]
fn transition_from_states_and_targets_follow_the_spec_table() {
    use EffectState::*;
    assert_eq!(Transition::Begin.from_states(), &[Reserved]);
    assert_eq!(Transition::Begin.target(), Executing);
    assert_eq!(commit().from_states(), &[Executing]);
    assert_eq!(commit().target(), Committed);
    let mut f = fail().from_states().to_vec();
    f.sort_by_key(|s| s.as_str());
    assert_eq!(f, vec![Executing, Reserved]);
    assert_eq!(fail().target(), Failed);
    let mut m = mark().from_states().to_vec();
    m.sort_by_key(|s| s.as_str());
    // an ambiguous row of the same attempt takes a late error through plan_mismatch
    assert_eq!(m, vec![Executing, Reserved]);
    assert_eq!(mark().target(), Ambiguous);
}

#[test]
fn begin_apply_keeps_the_lease() {
    let r = row(EffectState::Reserved);
    let out = Transition::Begin.apply(&r, T0 + 7);
    assert_eq!(
        out,
        EffectRecord {
            state: EffectState::Executing,
            updated_at: T0 + 7,
            ..r.clone()
        }
    );
    assert_eq!(out.lease_expires_at, Some(T0 + LEASE));
}

#[test]
fn commit_apply_stores_result_and_clears_lease() {
    let r = row(EffectState::Executing);
    let out = commit().apply(&r, T0 + 9);
    assert_eq!(out.state, EffectState::Committed);
    assert_eq!(out.result.as_deref(), Some("42"));
    assert_eq!(out.error, None);
    assert_eq!(out.lease_expires_at, None);
    assert_eq!(out.updated_at, T0 + 9);
    assert_eq!(out.action_id, r.action_id);
    assert_eq!(out.attempt, r.attempt);
    assert_eq!(out.created_at, r.created_at);
}

#[test]
fn fail_and_mark_apply_store_error_and_clear_lease() {
    let r = row(EffectState::Executing);
    let f = fail().apply(&r, T0 + 1);
    assert_eq!(f.state, EffectState::Failed);
    assert_eq!(f.error.as_deref(), Some("not executed"));
    assert_eq!(f.result, None);
    assert_eq!(f.lease_expires_at, None);
    let m = mark().apply(&r, T0 + 2);
    assert_eq!(m.state, EffectState::Ambiguous);
    assert_eq!(m.error.as_deref(), Some("exploded"));
    assert_eq!(m.lease_expires_at, None);
    assert_eq!(m.updated_at, T0 + 2);
}

#[test]
fn settle_mismatch_without_row_is_invalid_argument() {
    let m = expect_invalid(settle_mismatch(None, KEY, HOLDER, Some(3), &commit(), T0));
    assert!(m.contains(KEY), "{m}");
    assert!(m.contains("no effect is recorded under key"), "{m}");
    assert!(
        !m.contains("commit_effect"),
        "names no internal function: {m}"
    );
}

#[test]
fn settle_mismatch_target_under_our_attempt_has_landed() {
    let landed = commit().apply(&row(EffectState::Executing), T0 + 1);
    let got = settle_mismatch(
        Some(landed.clone()),
        KEY,
        HOLDER,
        Some(3),
        &commit(),
        T0 + 2,
    )
    .expect("landed");
    assert_eq!(got, landed);
    // With no attempt given, the action id alone decides.
    assert!(settle_mismatch(Some(landed.clone()), KEY, HOLDER, None, &commit(), T0).is_ok());
    // Begin twice: the row is already executing under our attempt.
    let executing = row(EffectState::Executing);
    assert_eq!(
        settle_mismatch(
            Some(executing.clone()),
            KEY,
            HOLDER,
            Some(3),
            &Transition::Begin,
            T0
        )
        .unwrap(),
        executing
    );
}

#[test]
fn settle_mismatch_committed_under_another_attempt_is_duplicate_committed() {
    let mut committed = row(EffectState::Committed);
    committed.attempt = 2;
    match settle_mismatch(Some(committed), KEY, HOLDER, Some(3), &commit(), T0) {
        Err(Error::Duplicate { kind, .. }) => assert_eq!(kind, DuplicateKind::Committed),
        other => panic!("expected Duplicate committed, got {other:?}"),
    }
    let committed = row(EffectState::Committed);
    match settle_mismatch(Some(committed), KEY, CALLER, None, &fail(), T0) {
        Err(Error::Duplicate { kind, .. }) => assert_eq!(kind, DuplicateKind::Committed),
        other => panic!("expected Duplicate committed, got {other:?}"),
    }
}

#[test]
fn settle_mismatch_ambiguous_is_ambiguous() {
    let amb = row(EffectState::Ambiguous);
    for t in [Transition::Begin, commit(), fail()] {
        match settle_mismatch(Some(amb.clone()), KEY, HOLDER, Some(3), &t, T0) {
            Err(Error::Ambiguous { record, .. }) => assert_eq!(*record, amb),
            other => panic!("{}: expected Ambiguous, got {other:?}", t.name()),
        }
    }
}

#[test]
fn settle_mismatch_another_attempts_live_lease_is_in_progress() {
    let held = row(EffectState::Executing);
    // Another action id.
    match settle_mismatch(Some(held.clone()), KEY, CALLER, None, &commit(), T0) {
        Err(Error::Duplicate { kind, .. }) => assert_eq!(kind, DuplicateKind::InProgress),
        other => panic!("expected Duplicate in_progress, got {other:?}"),
    }
    // Same action id, another attempt.
    match settle_mismatch(Some(held), KEY, HOLDER, Some(2), &commit(), T0) {
        Err(Error::Duplicate { kind, .. }) => assert_eq!(kind, DuplicateKind::InProgress),
        other => panic!("expected Duplicate in_progress, got {other:?}"),
    }
}

#[test]
fn settle_mismatch_anything_else_names_found_and_required_state() {
    // Our own attempt, but still reserved: commit needs executing.
    let m = expect_invalid(settle_mismatch(
        Some(row(EffectState::Reserved)),
        KEY,
        HOLDER,
        Some(3),
        &commit(),
        T0,
    ));
    assert!(m.contains(KEY), "{m}");
    assert!(m.contains("it is reserved"), "names the found state: {m}");
    assert!(
        m.contains("requires executing"),
        "names the required state: {m}"
    );
    // Another attempt whose lease lapsed is not "in progress".
    let m = expect_invalid(settle_mismatch(
        Some(row(EffectState::Executing)),
        KEY,
        CALLER,
        None,
        &Transition::Begin,
        T0 + LEASE + 1,
    ));
    assert!(m.contains("executing"), "{m}");
    assert!(m.contains("requires reserved"), "{m}");
    // A failed row cannot begin.
    let m = expect_invalid(settle_mismatch(
        Some(row(EffectState::Failed)),
        KEY,
        HOLDER,
        Some(3),
        &Transition::Begin,
        T0,
    ));
    assert!(m.contains("it is failed"), "{m}");
    assert!(m.contains("cannot begin effect"), "{m}");
    assert!(
        !m.contains("begin_execution"),
        "names no internal function: {m}"
    );
}
