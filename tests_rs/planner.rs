//! The pure planner (`ctrlrun::planner`): docs/spec.md §3 (reservation) and §4 (later transitions).

use ctrlrun::error::DuplicateKind;
use ctrlrun::planner::{
    plan_reservation, Expected, Proposal, Refusal, ReservationPlan, Transition,
};
use ctrlrun::{EffectRecord, EffectState, Error, Micros};

pub(crate) const KEY: &str = "refund:txn_1";
pub(crate) const HOLDER: &str = "act_00000000000000000000000000000001";
pub(crate) const CALLER: &str = "act_00000000000000000000000000000002";
pub(crate) const LEASE: Micros = 300_000_000; // 5 minutes
pub(crate) const T0: Micros = 1_800_000_000_000_000;
pub(crate) const TOKEN: &str = "0123456789abcdef0123456789abcdef";

/// A reservation call with the test's token.
pub(crate) fn proposal<'a>(
    key: &'a str,
    action_id: &'a str,
    lease: Micros,
    begin: bool,
) -> Proposal<'a> {
    Proposal {
        token: TOKEN,
        ..Proposal::new(key, action_id, lease, begin)
    }
}

/// A row as a backend would hold it, `state` under `HOLDER`, attempt 3, lease T0+LEASE.
pub(crate) fn row(state: EffectState) -> EffectRecord {
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

pub(crate) fn expect_invalid<T: std::fmt::Debug>(r: Result<T, Error>) -> String {
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

pub(crate) fn assert_lapse(existing: &EffectRecord, now: Micros) -> EffectRecord {
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

pub(crate) fn commit() -> Transition {
    Transition::Commit {
        result: Some("42".to_owned()),
    }
}
pub(crate) fn fail() -> Transition {
    Transition::Fail {
        error: "not executed".to_owned(),
    }
}
pub(crate) fn mark() -> Transition {
    Transition::MarkAmbiguous {
        error: "exploded".to_owned(),
    }
}
