//! The planner is the only source of row rules: on both backends, every row a store writes is
//! the row `ctrlrun::planner` planned for the row it found (the reservation's insert, renewal
//! and lapse, each transition, a lease extension and a resolution), and every refusal carries
//! the row the planner refused on.

use crate::support::*;
use ctrlrun::env::holder;
use ctrlrun::error::DuplicateKind;
use ctrlrun::planner::{
    plan_extension, plan_reservation, plan_resolution, Expected, Proposal, Refusal, ReservationPlan,
};
use ctrlrun::{EffectRecord, EffectState, Transition};

/// A row under `key` in `state`, held by A1 attempt 1 (lease from T0).
fn row_in(f: &Fixture, key: &str, state: EffectState) -> EffectRecord {
    f.reserve(key, A1, T0).unwrap();
    match state {
        EffectState::Reserved => {}
        EffectState::Executing => {
            f.begin(key, A1, 1, T0 + 1);
        }
        EffectState::Committed => {
            f.begin(key, A1, 1, T0 + 1);
            f.step(key, A1, 1, commit("1"), T0 + 2).unwrap();
        }
        EffectState::Failed => {
            f.step(key, A1, 1, fail("declined"), T0 + 2).unwrap();
        }
        EffectState::Ambiguous => {
            f.step(key, A1, 1, mark("lost"), T0 + 2).unwrap();
        }
    }
    f.get(key)
}

/// A2's reservation call on `key` with `token`, from this process (the store writes it as
/// the holder).
fn proposal<'a>(key: &'a str, begin: bool, token: &'a str, holder: &'a str) -> Proposal<'a> {
    Proposal {
        token,
        holder,
        ..Proposal::new(key, A2, LEASE, begin)
    }
}

const STATES: [EffectState; 5] = [
    EffectState::Reserved,
    EffectState::Executing,
    EffectState::Committed,
    EffectState::Failed,
    EffectState::Ambiguous,
];

fn every_reservation_writes_the_row_the_planner_plans(b: Backend) {
    let f = Fixture::new(b);
    for begin in [false, true] {
        let now = T0 + 10;
        // no row: the planned insert
        let key = format!("new:{begin}");
        let got = f.store.reserve(&key, A2, LEASE, begin, Some(now)).unwrap();
        let token = token_of(&got);
        assert_eq!(
            plan_reservation(None, &proposal(&key, begin, &token, &holder()), now),
            ReservationPlan::Insert(got.clone())
        );
        assert_eq!(f.get(&key), got);
        for state in STATES {
            for now in [T0 + 10, T0 + LEASE + 1] {
                let key = format!("{state}:{begin}:{now}");
                let before = row_in(&f, &key, state);
                let got = f.store.reserve(&key, A2, LEASE, begin, Some(now));
                let after = f.get(&key);
                // A granted row carries this call's new token; any other keeps the old one.
                let token = match &got {
                    Ok(granted) => {
                        assert_ne!(granted.attempt_token, before.attempt_token, "{key}");
                        token_of(granted)
                    }
                    Err(_) => token_of(&before),
                };
                let plan = plan_reservation(
                    Some(&before),
                    &proposal(&key, begin, &token, &holder()),
                    now,
                );
                match plan {
                    ReservationPlan::Renew { expected, record } => {
                        assert_eq!(expected, Expected::of(&before));
                        assert_eq!(got.unwrap(), record, "{key}");
                        assert_eq!(after, record, "{key}");
                    }
                    ReservationPlan::Lapse { record, .. } => {
                        let (refused_on, _) = assert_ambiguous(got);
                        assert_eq!(refused_on, record, "{key}");
                        assert_eq!(after, record, "the lapse was written: {key}");
                    }
                    ReservationPlan::Refuse(refusal) => {
                        let on = match refusal {
                            Refusal::Committed(r) => {
                                assert_duplicate(got, DuplicateKind::Committed);
                                r
                            }
                            Refusal::InProgress(r) => {
                                assert_duplicate(got, DuplicateKind::InProgress);
                                r
                            }
                            Refusal::Ambiguous(r) => {
                                assert_eq!(assert_ambiguous(got).0, r);
                                r
                            }
                            Refusal::Conflict(..) => panic!("no arguments, no conflict: {key}"),
                        };
                        assert_eq!(on, before, "{key}");
                        assert_eq!(after, before, "a refusal writes nothing: {key}");
                    }
                    ReservationPlan::Insert(_) => panic!("{key}: a row was there"),
                }
            }
        }
    }
}

fn every_transition_writes_the_row_the_planner_plans(b: Backend) {
    let f = Fixture::new(b);
    for t in [
        Transition::Begin,
        commit("{\"ok\":1}"),
        fail("no"),
        mark("?"),
    ] {
        for &state in t.from_states() {
            let key = format!("{}:{state}", t.name());
            let before = row_in(&f, &key, state);
            let now = T0 + 50;
            let got = f.step(&key, A1, 1, t.clone(), now).unwrap();
            assert_eq!(got, t.apply(&before, now), "{key}");
            assert_eq!(f.get(&key), got, "{key}");
            // the outcome write that does not read back writes the same row
            if t != Transition::Begin {
                let key = format!("{key}:unread");
                let before = row_in(&f, &key, state);
                f.store
                    .transition_unread(&key, A1, Some(1), &t, Some(now))
                    .unwrap();
                assert_eq!(f.get(&key), t.apply(&before, now), "{key}");
            }
        }
    }
}

fn extension_and_resolution_write_the_planners_rows(b: Backend) {
    let f = Fixture::new(b);
    let before = row_in(&f, "x", EffectState::Executing);
    let (until, now) = (T0 + 4 * LEASE, T0 + 60);
    let got = f
        .store
        .extend_lease("x", A1, Some(1), until, Some(now))
        .unwrap();
    let planned = plan_extension(Some(before), "x", A1, Some(1), until, now).unwrap();
    assert_eq!(got, planned);
    assert_eq!(f.get("x"), planned);

    for target in [EffectState::Committed, EffectState::Failed] {
        let key = format!("r:{target}");
        let before = row_in(&f, &key, EffectState::Ambiguous);
        let got = f
            .store
            .resolve(&key, target, "alice@ops", Some(now))
            .unwrap();
        let planned = plan_resolution(Some(before), &key, target, "alice@ops", now).unwrap();
        assert_eq!(got, planned);
        assert_eq!(f.get(&key), planned);
    }
}

on_both_backends!(
    every_reservation_writes_the_row_the_planner_plans,
    every_transition_writes_the_row_the_planner_plans,
    extension_and_resolution_write_the_planners_rows,
);
