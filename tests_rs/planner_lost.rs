//! The pure planner's lost write: which rows met by a held attempt's outcome write say the store
//! lost that attempt's reservation, and which of them the agent may mark `ambiguous`.

use ctrlrun::planner::{lost_write, plan_lost_mark};
use ctrlrun::{EffectRecord, EffectState};

use crate::planner::*;

/// `row(state)` of `action_id`, attempt `attempt`.
fn held(action_id: &str, attempt: i64, state: EffectState) -> EffectRecord {
    EffectRecord {
        action_id: action_id.to_owned(),
        attempt,
        ..row(state)
    }
}

#[test]
fn only_a_row_the_held_attempt_cannot_have_become_is_a_lost_write() {
    use EffectState::*;
    let lost = |found: Option<&EffectRecord>, attempt| {
        lost_write(found, KEY, CALLER, attempt, "commit_effect").is_some()
    };
    assert!(lost(None, Some(1)));
    assert!(lost(Some(&held(HOLDER, 1, Executing)), Some(1)));
    assert!(lost(Some(&held(HOLDER, 2, Committed)), Some(3)));
    assert!(!lost(Some(&held(CALLER, 1, Ambiguous)), Some(1))); // lapsed: a late outcome
    assert!(!lost(Some(&held(HOLDER, 2, Executing)), Some(1))); // a newer attempt
    assert!(!lost(None, None)); // no attempt named: nothing was held
    assert!(!lost(Some(&held(HOLDER, 1, Executing)), None));
}

#[test]
fn a_mark_takes_a_held_or_ambiguous_row_and_keeps_its_history() {
    use EffectState::*;
    let marked = plan_lost_mark(Some(held(HOLDER, 1, Executing)), "lost", T0).unwrap();
    assert_eq!((marked.state, marked.lease_expires_at), (Ambiguous, None));
    assert_eq!(
        (marked.error.as_deref(), marked.updated_at),
        (Some("lost"), T0)
    );
    let noted = EffectRecord {
        error: Some("lapsed".into()),
        ..held(HOLDER, 1, Ambiguous)
    };
    let again = plan_lost_mark(Some(noted), "lost", T0).unwrap();
    assert_eq!(again.error.as_deref(), Some("lapsed; lost"));
    for state in [Committed, Failed] {
        assert!(plan_lost_mark(Some(held(HOLDER, 1, state)), "lost", T0).is_err());
    }
    let resolved = EffectRecord {
        resolved_by: Some("alice".into()),
        ..held(HOLDER, 1, Ambiguous)
    };
    assert!(plan_lost_mark(Some(resolved), "lost", T0).is_err());
    assert!(plan_lost_mark(None, "lost", T0).is_err());
}

#[test]
fn the_other_holders_late_commit_keeps_a_marked_row_for_the_person() {
    use ctrlrun::planner::{lost_note, plan_mismatch, Mismatch, Transition};
    let marked = plan_lost_mark(
        Some(held(HOLDER, 1, EffectState::Executing)),
        &lost_note(CALLER, "returned"),
        T0,
    )
    .unwrap();
    let commit = Transition::Commit {
        result: Some("7".into()),
    };
    let Mismatch::Late { row, .. } =
        plan_mismatch(Some(marked), KEY, HOLDER, Some(1), &commit, T0 + 1)
    else {
        panic!("a late outcome of the row's own attempt is written");
    };
    assert_eq!(
        (row.state, row.result.as_deref()),
        (EffectState::Ambiguous, Some("7"))
    );
    assert!(row
        .error
        .unwrap()
        .contains("a person resolves the lost write"));
}
