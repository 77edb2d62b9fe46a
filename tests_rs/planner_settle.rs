//! The pure planner's lease extension, resolution, request checks, and begin folded into the
//! reservation.

use ctrlrun::error::DuplicateKind;
use ctrlrun::planner::{
    check_request, plan_extension, plan_reservation, plan_resolution, Expected, ReservationPlan,
    Transition,
};
use ctrlrun::{EffectRecord, EffectState, Error, Micros};

use crate::planner::*;

// ---------------------------------------------------------------------------------------------
// plan_extension
// ---------------------------------------------------------------------------------------------

#[test]
fn extension_needs_executing_under_the_same_attempt() {
    // reserved, our attempt: InvalidArgument naming executing.
    let m = expect_invalid(plan_extension(
        Some(row(EffectState::Reserved)),
        KEY,
        HOLDER,
        Some(3),
        T0 + LEASE + 10,
        T0,
    ));
    assert!(m.contains("requires executing"), "{m}");
    // executing, another action id under a live lease: in progress.
    match plan_extension(
        Some(row(EffectState::Executing)),
        KEY,
        CALLER,
        None,
        T0 + LEASE + 10,
        T0,
    ) {
        Err(Error::Duplicate { kind, .. }) => assert_eq!(kind, DuplicateKind::InProgress),
        other => panic!("expected Duplicate in_progress, got {other:?}"),
    }
    // executing, our action id but another attempt.
    assert!(plan_extension(
        Some(row(EffectState::Executing)),
        KEY,
        HOLDER,
        Some(4),
        T0 + LEASE + 10,
        T0
    )
    .is_err());
    // no row.
    let m = expect_invalid(plan_extension(None, KEY, HOLDER, Some(3), T0 + 1, T0));
    assert!(m.contains(KEY), "{m}");
}

#[test]
fn extension_of_a_lapsed_lease_is_refused() {
    let r = row(EffectState::Executing);
    let m = expect_invalid(plan_extension(
        Some(r),
        KEY,
        HOLDER,
        Some(3),
        T0 + 10 * LEASE,
        T0 + LEASE + 1,
    ));
    assert!(m.contains("lapsed"), "{m}");
}

#[test]
fn extension_to_an_earlier_expiry_is_refused() {
    let r = row(EffectState::Executing);
    let m = expect_invalid(plan_extension(
        Some(r),
        KEY,
        HOLDER,
        Some(3),
        T0 + LEASE - 1,
        T0,
    ));
    assert!(m.contains("earlier"), "{m}");
}

#[test]
fn extension_to_the_same_or_a_later_expiry_is_granted() {
    let r = row(EffectState::Executing);
    let same = plan_extension(Some(r.clone()), KEY, HOLDER, Some(3), T0 + LEASE, T0 + 5).unwrap();
    assert_eq!(same.lease_expires_at, Some(T0 + LEASE));
    assert_eq!(same.updated_at, T0 + 5);
    let later = plan_extension(Some(r.clone()), KEY, HOLDER, None, T0 + 2 * LEASE, T0 + 6).unwrap();
    assert_eq!(
        later,
        EffectRecord {
            lease_expires_at: Some(T0 + 2 * LEASE),
            updated_at: T0 + 6,
            ..r
        }
    );
}

// ---------------------------------------------------------------------------------------------
// plan_resolution
// ---------------------------------------------------------------------------------------------

#[test]
fn resolution_only_from_ambiguous() {
    for state in [
        EffectState::Reserved,
        EffectState::Executing,
        EffectState::Committed,
        EffectState::Failed,
    ] {
        let m = expect_invalid(plan_resolution(
            Some(row(state)),
            KEY,
            EffectState::Committed,
            "alice",
            T0,
        ));
        assert!(m.contains(state.as_str()), "{m}");
        assert!(m.contains(KEY), "{m}");
    }
    let m = expect_invalid(plan_resolution(None, KEY, EffectState::Failed, "alice", T0));
    assert!(m.contains(KEY), "{m}");
}

#[test]
fn resolution_target_must_be_committed_or_failed() {
    for target in [
        EffectState::Reserved,
        EffectState::Executing,
        EffectState::Ambiguous,
    ] {
        let m = expect_invalid(plan_resolution(
            Some(row(EffectState::Ambiguous)),
            KEY,
            target,
            "alice",
            T0,
        ));
        assert!(m.contains(target.as_str()), "{m}");
    }
}

#[test]
fn resolver_must_be_one_printable_line() {
    for bad in ["", "   ", "alice\nbob", "alice\r", "tab\there", "nul\0"] {
        expect_invalid(plan_resolution(
            Some(row(EffectState::Ambiguous)),
            KEY,
            EffectState::Committed,
            bad,
            T0,
        ));
    }
}

#[test]
fn resolution_annotates_the_error_and_sets_resolved_by() {
    let mut amb = row(EffectState::Ambiguous);
    amb.lease_expires_at = Some(T0 + LEASE); // even a stray lease is cleared
    for target in [EffectState::Committed, EffectState::Failed] {
        let out = plan_resolution(Some(amb.clone()), KEY, target, "alice@ops", T0 + 99).unwrap();
        assert_eq!(out.state, target);
        assert_eq!(out.resolved_by.as_deref(), Some("alice@ops"));
        assert_eq!(out.lease_expires_at, None);
        assert_eq!(out.updated_at, T0 + 99);
        let err = out.error.unwrap();
        assert!(err.starts_with("boom"), "keeps the old error: {err}");
        assert!(err.contains("alice@ops"), "{err}");
        assert!(err.contains(target.as_str()), "{err}");
        assert_eq!(out.action_id, HOLDER);
        assert_eq!(out.attempt, 3);
        assert_eq!(out.created_at, amb.created_at);
    }
    // No previous error: the note alone.
    let mut bare = row(EffectState::Ambiguous);
    bare.error = None;
    let out = plan_resolution(Some(bare), KEY, EffectState::Failed, "bob", T0).unwrap();
    let err = out.error.unwrap();
    assert!(err.contains("bob") && err.contains("failed"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// check_request
// ---------------------------------------------------------------------------------------------

#[test]
fn check_request_refuses_empty_key_and_non_positive_lease() {
    assert!(check_request(KEY, CALLER, 1).is_ok());
    match check_request("", CALLER, LEASE) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("key"), "{m}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    for lease in [0, -1, Micros::MIN] {
        match check_request(KEY, CALLER, lease) {
            Err(Error::InvalidArgument(m)) => assert!(m.contains("lease"), "{m}"),
            other => panic!("lease {lease}: expected InvalidArgument, got {other:?}"),
        }
    }
    for id in ["", "act_\n1"] {
        assert!(
            matches!(
                check_request(KEY, id, LEASE),
                Err(Error::InvalidArgument(_))
            ),
            "action id {id:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// begin folded into the reservation (the decorator's path)
// ---------------------------------------------------------------------------------------------

#[test]
fn with_begin_a_new_row_is_granted_executing_and_otherwise_alike() {
    let plain = plan_reservation(None, &proposal(KEY, CALLER, LEASE, false), T0);
    let folded = plan_reservation(None, &proposal(KEY, CALLER, LEASE, true), T0);
    let (ReservationPlan::Insert(a), ReservationPlan::Insert(b)) = (plain, folded) else {
        panic!("both insert");
    };
    assert_eq!(b.state, EffectState::Executing);
    assert_eq!(
        EffectRecord {
            state: EffectState::Reserved,
            ..b
        },
        a
    );
}

#[test]
fn with_begin_a_renewal_is_executing_and_refusals_and_lapses_are_unchanged() {
    let failed = row(EffectState::Failed);
    let ReservationPlan::Renew { record, .. } =
        plan_reservation(Some(&failed), &proposal(KEY, CALLER, LEASE, true), T0 + 42)
    else {
        panic!("expected Renew");
    };
    assert_eq!(record.state, EffectState::Executing);
    assert_eq!(record.attempt, failed.attempt + 1);
    for state in [
        EffectState::Committed,
        EffectState::Ambiguous,
        EffectState::Executing,
    ] {
        let existing = row(state);
        for now in [T0 + 1, T0 + 10 * LEASE] {
            assert_eq!(
                plan_reservation(Some(&existing), &proposal(KEY, CALLER, LEASE, true), now),
                plan_reservation(Some(&existing), &proposal(KEY, CALLER, LEASE, false), now),
                "{state:?} at {now}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// bounds: a lease of at most ten years, no instant past the year 9999, one printable line
// ---------------------------------------------------------------------------------------------

#[test]
fn leases_and_instants_stay_within_what_every_reader_can_show() {
    use ctrlrun::planner::{check_lease_end, END_OF_TIME, MAX_LEASE};
    assert!(check_request(KEY, CALLER, MAX_LEASE).is_ok());
    for lease in [MAX_LEASE + 1, i64::MAX] {
        expect_invalid(check_request(KEY, CALLER, lease));
    }
    assert!(check_lease_end(T0, MAX_LEASE).is_ok());
    assert!(check_lease_end(END_OF_TIME - LEASE - 1, LEASE).is_ok());
    assert!(
        check_lease_end(-1, LEASE).is_ok(),
        "before 1970 is a date too"
    );
    for (now, lease) in [
        (END_OF_TIME - LEASE, LEASE),
        (i64::MAX - 1, LEASE),
        (i64::MIN, LEASE),
    ] {
        let m = expect_invalid(check_lease_end(now, lease));
        assert!(m.contains("9999"), "{m}");
    }
    let r = row(EffectState::Executing);
    let m = expect_invalid(plan_extension(
        Some(r.clone()),
        KEY,
        HOLDER,
        Some(3),
        T0 + MAX_LEASE + 1,
        T0,
    ));
    assert!(m.contains("ten years"), "{m}");
    assert!(plan_extension(Some(r), KEY, HOLDER, Some(3), T0 + MAX_LEASE, T0).is_ok());
}

#[test]
fn line_and_paragraph_separators_are_not_one_printable_line() {
    for bad in ["act_a\u{2028}b", "act_a\u{2029}b", "act_\u{85}"] {
        expect_invalid(check_request(KEY, bad, LEASE));
    }
    for bad in ["ops\u{2028}x", "ops\u{2029}"] {
        expect_invalid(plan_resolution(
            Some(row(EffectState::Ambiguous)),
            KEY,
            EffectState::Failed,
            bad,
            T0,
        ));
    }
}

// ---------------------------------------------------------------------------------------------
// late outcomes: what an attempt learns after its lease lapsed is written while the row is its
// ---------------------------------------------------------------------------------------------

#[test]
fn late_outcomes_follow_the_table_and_keep_the_rows_history() {
    use ctrlrun::planner::{plan_mismatch, Mismatch};
    let lapsed = EffectRecord {
        error: Some("the lease lapsed".into()),
        lease_expires_at: None,
        ..row(EffectState::Ambiguous)
    };
    let by_person = |state: EffectState| EffectRecord {
        state,
        resolved_by: Some("ops:alice".into()),
        error: Some(format!(
            "the lease lapsed [resolved as {state} by ops:alice]"
        )),
        lease_expires_at: None,
        result: None,
        ..row(state)
    };
    let late = |found: &EffectRecord, t: Transition| match plan_mismatch(
        Some(found.clone()),
        KEY,
        HOLDER,
        Some(3),
        &t,
        T0 + 9,
    ) {
        Mismatch::Late { expected, row } => {
            assert_eq!(expected, Expected::of(found));
            assert_eq!((row.attempt, row.action_id.as_str()), (3, HOLDER));
            assert_eq!((row.updated_at, row.lease_expires_at), (T0 + 9, None));
            assert!(row
                .error
                .as_deref()
                .unwrap()
                .starts_with(found.error.as_deref().unwrap()));
            row
        }
        other => panic!("expected a late write, got {other:?}"),
    };
    let c = late(&lapsed, commit());
    assert_eq!(
        (c.state, c.result.as_deref()),
        (EffectState::Committed, Some("42"))
    );
    // a late report that nothing ran is noted; only a person moves the row to failed
    let f = late(&lapsed, fail());
    assert_eq!(f.state, EffectState::Ambiguous);
    assert!(f
        .error
        .unwrap()
        .ends_with("a person may resolve it as failed"));
    let m = late(&lapsed, mark());
    assert_eq!(m.state, EffectState::Ambiguous);
    assert!(m.error.unwrap().ends_with("then, late: exploded"));
    let over = late(&by_person(EffectState::Failed), commit());
    assert_eq!(over.state, EffectState::Committed);
    assert_eq!(over.resolved_by.as_deref(), Some("ops:alice"));
    assert!(over.error.unwrap().contains("overrules"));
    let gained = late(&by_person(EffectState::Committed), commit());
    assert_eq!(
        (gained.state, gained.result.is_some()),
        (EffectState::Committed, true)
    );
    // nothing late to write: another attempt's row, or a combination the table leaves alone
    for (found, t, attempt) in [
        (lapsed.clone(), commit(), Some(4)),
        (by_person(EffectState::Failed), mark(), Some(3)),
        (by_person(EffectState::Committed), fail(), Some(3)),
    ] {
        match plan_mismatch(Some(found), KEY, HOLDER, attempt, &t, T0 + 9) {
            Mismatch::Late { .. } => panic!("no late write for {t:?} on another row"),
            Mismatch::Landed(_) | Mismatch::Refuse(_) => {}
        }
    }
}
