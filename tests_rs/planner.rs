//! The pure planner (`ctrlrun::planner`): docs/spec.md §3 (reservation) and §4 (later transitions).

use ctrlrun::error::DuplicateKind;
use ctrlrun::planner::{
    check_request, plan_extension, plan_reservation, plan_resolution, settle_mismatch, Expected,
    Proposal, Refusal, ReservationPlan, Transition,
};
use ctrlrun::{EffectRecord, EffectState, Error, Micros};

const KEY: &str = "refund:txn_1";
const HOLDER: &str = "act_00000000000000000000000000000001";
const CALLER: &str = "act_00000000000000000000000000000002";
const LEASE: Micros = 300_000_000; // 5 minutes
const T0: Micros = 1_800_000_000_000_000;
const TOKEN: &str = "0123456789abcdef0123456789abcdef";

/// A reservation call with the test's token.
fn proposal<'a>(key: &'a str, action_id: &'a str, lease: Micros, begin: bool) -> Proposal<'a> {
    Proposal {
        token: TOKEN,
        ..Proposal::new(key, action_id, lease, begin)
    }
}

/// A row as a backend would hold it, `state` under `HOLDER`, attempt 3, lease T0+LEASE.
fn row(state: EffectState) -> EffectRecord {
    EffectRecord {
        effect_key: KEY.to_owned(),
        state,
        action_id: HOLDER.to_owned(),
        attempt: 3,
        created_at: T0 - 1_000_000,
        updated_at: T0,
        lease_expires_at: if state.is_held() {
            Some(T0 + LEASE)
        } else {
            None
        },
        result: if state == EffectState::Committed {
            Some("{\"ok\":true}".to_owned())
        } else {
            None
        },
        error: match state {
            EffectState::Failed | EffectState::Ambiguous => Some("boom".to_owned()),
            _ => None,
        },
        resolved_by: None,
        attempt_token: Some("f".repeat(32)),
        action: None,
        holder: None,
        args_digest: None,
        arg_digests: None,
        approval_id: None,
    }
}

fn expect_invalid<T: std::fmt::Debug>(r: Result<T, Error>) -> String {
    match r {
        Err(Error::InvalidArgument(m)) => m,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// plan_reservation: every row of the docs/spec.md §3 table
// ---------------------------------------------------------------------------------------------

#[test]
fn no_row_inserts_attempt_one_reserved_with_lease() {
    let plan = plan_reservation(None, &proposal(KEY, CALLER, LEASE, false), T0);
    let ReservationPlan::Insert(r) = plan else {
        panic!("expected Insert, got {plan:?}");
    };
    assert_eq!(
        r,
        EffectRecord {
            effect_key: KEY.to_owned(),
            state: EffectState::Reserved,
            action_id: CALLER.to_owned(),
            attempt: 1,
            created_at: T0,
            updated_at: T0,
            lease_expires_at: Some(T0 + LEASE),
            result: None,
            error: None,
            resolved_by: None,
            attempt_token: Some(TOKEN.to_owned()),
            action: None,
            holder: None,
            args_digest: None,
            arg_digests: None,
            approval_id: None,
        }
    );
}

#[test]
fn committed_row_is_refused_as_committed() {
    let existing = row(EffectState::Committed);
    let plan = plan_reservation(
        Some(&existing),
        &proposal(KEY, CALLER, LEASE, false),
        T0 + 5,
    );
    assert_eq!(plan, ReservationPlan::Refuse(Refusal::Committed(existing)));
}

#[test]
fn ambiguous_row_is_refused_as_ambiguous() {
    let existing = row(EffectState::Ambiguous);
    let plan = plan_reservation(
        Some(&existing),
        &proposal(KEY, CALLER, LEASE, false),
        T0 + 5,
    );
    assert_eq!(plan, ReservationPlan::Refuse(Refusal::Ambiguous(existing)));
}

#[test]
fn failed_row_is_renewed_with_next_attempt() {
    let mut existing = row(EffectState::Failed);
    existing.result = Some("\"stale\"".to_owned());
    existing.resolved_by = Some("alice".to_owned());
    let now = T0 + 42;
    let plan = plan_reservation(Some(&existing), &proposal(KEY, CALLER, LEASE, false), now);
    let ReservationPlan::Renew { expected, record } = plan else {
        panic!("expected Renew, got {plan:?}");
    };
    assert_eq!(
        expected,
        Expected {
            state: EffectState::Failed,
            action_id: HOLDER.to_owned(),
            attempt: 3,
        }
    );
    assert_eq!(expected, Expected::of(&existing));
    assert_eq!(
        record,
        EffectRecord {
            effect_key: KEY.to_owned(),
            state: EffectState::Reserved,
            action_id: CALLER.to_owned(),
            attempt: 4,
            created_at: existing.created_at,
            updated_at: now,
            lease_expires_at: Some(now + LEASE),
            result: None,
            error: None,
            resolved_by: None,
            attempt_token: Some(TOKEN.to_owned()),
            action: None,
            holder: None,
            args_digest: None,
            arg_digests: None,
            approval_id: None,
        }
    );
}

#[test]
fn live_lease_is_in_progress_for_any_caller() {
    for state in [EffectState::Reserved, EffectState::Executing] {
        let existing = row(state);
        for caller in [CALLER, HOLDER] {
            let plan = plan_reservation(
                Some(&existing),
                &proposal(KEY, caller, LEASE, false),
                T0 + 1,
            );
            assert_eq!(
                plan,
                ReservationPlan::Refuse(Refusal::InProgress(existing.clone())),
                "state {state}, caller {caller}"
            );
        }
    }
}

fn assert_lapse(existing: &EffectRecord, now: Micros) -> EffectRecord {
    let plan = plan_reservation(Some(existing), &proposal(KEY, CALLER, LEASE, false), now);
    let ReservationPlan::Lapse { expected, record } = plan else {
        panic!("expected Lapse for {existing:?} at {now}, got {plan:?}");
    };
    assert_eq!(expected, Expected::of(existing));
    assert_eq!(record.state, EffectState::Ambiguous);
    assert_eq!(record.lease_expires_at, None);
    assert_eq!(record.updated_at, now);
    // Everything else is the holder's row, untouched: the holder is still named.
    assert_eq!(record.effect_key, existing.effect_key);
    assert_eq!(record.action_id, HOLDER);
    assert_eq!(record.attempt, existing.attempt);
    assert_eq!(record.created_at, existing.created_at);
    assert_eq!(record.result, existing.result);
    assert_eq!(record.resolved_by, existing.resolved_by);
    let err = record.error.clone().expect("a lapse writes an error");
    assert!(err.contains(HOLDER), "lapse error names the holder: {err}");
    assert!(
        err.contains("lease"),
        "lapse error talks about the lease: {err}"
    );
    record
}

#[test]
fn lapsed_lease_is_written_ambiguous() {
    for state in [EffectState::Reserved, EffectState::Executing] {
        let existing = row(state);
        let record = assert_lapse(&existing, T0 + LEASE + 1_000_000);
        let err = record.error.unwrap();
        assert!(err.contains("lapsed"), "error says the lease lapsed: {err}");
        assert!(err.contains(state.as_str()), "error names the state: {err}");
    }
}

#[test]
fn missing_lease_on_a_held_row_is_written_ambiguous() {
    for state in [EffectState::Reserved, EffectState::Executing] {
        let mut existing = row(state);
        existing.lease_expires_at = None;
        // Even "before" the would-be expiry: no lease is never live.
        let record = assert_lapse(&existing, T0);
        let err = record.error.unwrap();
        assert!(err.contains(state.as_str()), "error names the state: {err}");
    }
}

#[test]
fn lease_boundary_instant_is_live_and_one_micro_later_is_lapsed() {
    let existing = row(EffectState::Executing);
    let exp = existing.lease_expires_at.unwrap();
    assert_eq!(
        plan_reservation(Some(&existing), &proposal(KEY, CALLER, LEASE, false), exp),
        ReservationPlan::Refuse(Refusal::InProgress(existing.clone()))
    );
    assert!(matches!(
        plan_reservation(
            Some(&existing),
            &proposal(KEY, CALLER, LEASE, false),
            exp + 1
        ),
        ReservationPlan::Lapse { .. }
    ));
    assert!(existing.lease_live(exp));
    assert!(!existing.lease_live(exp + 1));
}

// ---------------------------------------------------------------------------------------------
// Refusal::into_error
// ---------------------------------------------------------------------------------------------

#[test]
fn refusal_committed_becomes_duplicate_committed() {
    let r = row(EffectState::Committed);
    match Refusal::Committed(r.clone()).into_error() {
        Error::Duplicate {
            kind,
            record,
            message,
        } => {
            assert_eq!(kind, DuplicateKind::Committed);
            assert_eq!(kind.as_str(), "committed");
            assert_eq!(*record, r);
            assert!(message.contains(KEY), "{message}");
            assert!(message.contains("committed"), "{message}");
            assert!(message.contains(HOLDER), "{message}");
        }
        other => panic!("expected Duplicate, got {other:?}"),
    }
}

#[test]
fn refusal_in_progress_becomes_duplicate_in_progress() {
    let r = row(EffectState::Executing);
    let e = Refusal::InProgress(r.clone()).into_error();
    let shown = e.to_string();
    match e {
        Error::Duplicate {
            kind,
            record,
            message,
        } => {
            assert_eq!(kind, DuplicateKind::InProgress);
            assert_eq!(kind.as_str(), "in_progress");
            assert_eq!(*record, r);
            assert_eq!(shown, message);
            assert!(message.contains(KEY), "{message}");
            assert!(message.contains("in progress"), "{message}");
            assert!(message.contains(HOLDER), "{message}");
        }
        other => panic!("expected Duplicate, got {other:?}"),
    }
}

#[test]
fn refusal_ambiguous_becomes_ambiguous_with_how_to_resolve() {
    let r = row(EffectState::Ambiguous);
    match Refusal::Ambiguous(r.clone()).into_error() {
        Error::Ambiguous { record, message } => {
            assert_eq!(*record, r);
            assert!(message.contains(KEY), "{message}");
            assert!(message.contains("ambiguous"), "{message}");
            assert!(message.contains(HOLDER), "{message}");
            assert!(
                message.contains("boom"),
                "the stored error is shown: {message}"
            );
            assert!(
                message.contains("resolve"),
                "says how to resolve: {message}"
            );
        }
        other => panic!("expected Ambiguous, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Transitions
// ---------------------------------------------------------------------------------------------

fn commit() -> Transition {
    Transition::Commit {
        result: Some("42".to_owned()),
    }
}
fn fail() -> Transition {
    Transition::Fail {
        error: "not executed".to_owned(),
    }
}
fn mark() -> Transition {
    Transition::MarkAmbiguous {
        error: "exploded".to_owned(),
    }
}

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
    assert!(m.contains("commit_effect"), "{m}");
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
    assert!(m.contains("begin_execution"), "{m}");
}

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
    assert_eq!(late(&lapsed, fail()).state, EffectState::Failed);
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
