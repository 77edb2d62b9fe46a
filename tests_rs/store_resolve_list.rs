//! The store contract: resolution, listing and argument checks (see `store_contract`), every case
//! run on both backends.

use crate::support::*;
use ctrlrun::error::DuplicateKind;
use ctrlrun::store::retention::EffectFilter;
use ctrlrun::{EffectRecord, EffectState};

// ---------------------------------------------------------------------------------------------
// resolve
// ---------------------------------------------------------------------------------------------

fn ambiguous_row(f: &Fixture, key: &str) -> EffectRecord {
    f.reserve(key, A1, T0).unwrap();
    f.begin(key, A1, 1, T0 + 1);
    f.step(key, A1, 1, mark("connection reset"), T0 + 2)
        .unwrap()
}

fn resolve_ambiguous_as_committed_then_duplicates_are_refused(b: Backend) {
    let f = Fixture::new(b);
    ambiguous_row(&f, "k");
    let r = f
        .store
        .resolve("k", EffectState::Committed, "alice@ops", Some(T0 + 10))
        .unwrap();
    assert_eq!(r.state, EffectState::Committed);
    assert_eq!(r.resolved_by.as_deref(), Some("alice@ops"));
    assert_eq!(r.updated_at, T0 + 10);
    assert_eq!(r.lease_expires_at, None);
    let err = r.error.clone().unwrap();
    assert!(
        err.contains("connection reset") && err.contains("alice@ops"),
        "{err}"
    );
    assert_eq!(f.get("k"), r);
    let rec = assert_duplicate(f.reserve("k", A2, T0 + 11), DuplicateKind::Committed);
    assert_eq!(rec, r);
}

fn resolve_ambiguous_as_failed_then_the_next_attempt_is_granted(b: Backend) {
    let f = Fixture::new(b);
    ambiguous_row(&f, "k");
    let r = f
        .store
        .resolve("k", EffectState::Failed, "bob", Some(T0 + 10))
        .unwrap();
    assert_eq!(r.state, EffectState::Failed);
    assert_eq!(r.resolved_by.as_deref(), Some("bob"));
    let g = f.reserve("k", A2, T0 + 20).unwrap();
    assert_eq!(g.attempt, 2);
    assert_eq!(g.action_id, A2);
    assert_eq!(g.state, EffectState::Reserved);
    assert_eq!(g.resolved_by, None, "cleared by the renewal");
    assert_eq!(g.error, None);
    assert_eq!(g.created_at, T0);
    assert_eq!(f.get("k"), g);
}

fn resolve_refuses_a_committed_row_and_a_bad_resolver(b: Backend) {
    let f = Fixture::new(b);
    f.reserve("c", A1, T0).unwrap();
    f.begin("c", A1, 1, T0 + 1);
    let c = f.step("c", A1, 1, commit("1"), T0 + 2).unwrap();
    let m = assert_invalid(
        f.store
            .resolve("c", EffectState::Failed, "alice", Some(T0 + 3)),
    );
    assert!(m.contains("committed"), "{m}");
    assert_eq!(f.get("c"), c);

    let amb = ambiguous_row(&f, "a");
    for bad in ["alice\nbob", "\n", "", "  "] {
        assert_invalid(
            f.store
                .resolve("a", EffectState::Committed, bad, Some(T0 + 3)),
        );
    }
    assert_invalid(
        f.store
            .resolve("a", EffectState::Reserved, "alice", Some(T0 + 3)),
    );
    assert_eq!(f.get("a"), amb, "nothing written");
}

// ---------------------------------------------------------------------------------------------
// list
// ---------------------------------------------------------------------------------------------

fn a_held_key_whose_lease_lapsed_is_resolved_with_its_lapse(b: Backend) {
    let f = Fixture::new(b);
    for (key, begin) in [("r", false), ("x", true)] {
        f.reserve(key, A1, T0).unwrap();
        if begin {
            f.begin(key, A1, 1, T0 + 1);
        }
        let held = f.get(key);
        // live: refused, nothing written
        let m =
            assert_invalid(
                f.store
                    .resolve(key, EffectState::Failed, "ops:alice", Some(T0 + 2)),
            );
        assert!(m.contains("lease runs until") && m.contains(A1), "{m}");
        assert_eq!(f.get(key), held);
        // lapsed (the holder crashed): the lapse and the resolution in one write
        let late = T0 + LEASE + 1;
        let r = f
            .store
            .resolve(key, EffectState::Committed, "ops:alice", Some(late))
            .unwrap();
        assert_eq!(r.state, EffectState::Committed);
        assert_eq!((r.attempt, r.action_id.as_str()), (1, A1));
        assert_eq!((r.updated_at, r.lease_expires_at), (late, None));
        assert_eq!(r.resolved_by.as_deref(), Some("ops:alice"));
        let error = r.error.clone().unwrap();
        assert!(
            error.contains("lapsed") && error.contains(held.state.as_str()),
            "{error}"
        );
        assert!(
            error.ends_with("[resolved as committed by ops:alice]"),
            "{error}"
        );
        assert_eq!(f.get(key), r);
        assert_duplicate(f.reserve(key, A2, late + 1), DuplicateKind::Committed);
        // the holder, back late, keeps it committed and adds its result
        let c = f.step(key, A1, 1, commit("1"), late + 2).unwrap();
        assert_eq!(
            (c.state, c.result.as_deref()),
            (EffectState::Committed, Some("1"))
        );
        assert_eq!(c.resolved_by.as_deref(), Some("ops:alice"));
        assert_eq!(f.get(key), c);
    }
}

fn list_is_oldest_first_and_filters_by_state(b: Backend) {
    let f = Fixture::new(b);
    f.reserve("b", A1, T0).unwrap();
    f.reserve("a", A1, T0 + 1).unwrap();
    f.reserve("c", A1, T0 + 2).unwrap();
    let keys = |rows: Vec<EffectRecord>| -> Vec<String> {
        rows.into_iter().map(|r| r.effect_key).collect()
    };
    assert_eq!(
        keys(f.store.list(&EffectFilter::ALL).unwrap()),
        ["b", "a", "c"]
    );
    f.begin("a", A1, 1, T0 + 3);
    f.step("a", A1, 1, commit("1"), T0 + 4).unwrap();
    assert_eq!(
        keys(
            f.store
                .list(&EffectFilter::state(Some(EffectState::Committed)))
                .unwrap()
        ),
        ["a"]
    );
    assert_eq!(
        keys(
            f.store
                .list(&EffectFilter::state(Some(EffectState::Reserved)))
                .unwrap()
        ),
        ["b", "c"]
    );
    assert!(f
        .store
        .list(&EffectFilter::state(Some(EffectState::Failed)))
        .unwrap()
        .is_empty());
    let all = f.store.list(&EffectFilter::ALL).unwrap();
    assert_eq!(all.len(), 3);
    assert_eq!(all[1], f.get("a"));
}

// ---------------------------------------------------------------------------------------------
// argument checks on reserve
// ---------------------------------------------------------------------------------------------

fn reserve_refuses_bad_arguments_and_writes_nothing(b: Backend) {
    let f = Fixture::new(b);
    assert_invalid(f.store.reserve("", A1, LEASE, false, Some(T0)));
    assert_invalid(f.store.reserve("k", A1, 0, false, Some(T0)));
    assert_invalid(f.store.reserve("k", A1, -5, false, Some(T0)));
    assert_invalid(f.store.reserve("k", "", LEASE, false, Some(T0)));
    assert!(f.store.list(&EffectFilter::ALL).unwrap().is_empty());
}

fn keys_are_compared_byte_for_byte(b: Backend) {
    let f = Fixture::new(b);
    f.reserve("k", A1, T0).unwrap();
    // Neither trimmed nor case-folded: these are different effects.
    for other in ["k ", " k", "K"] {
        assert_eq!(f.reserve(other, A2, T0).unwrap().attempt, 1, "{other:?}");
    }
    assert_eq!(f.store.list(&EffectFilter::ALL).unwrap().len(), 4);
}

on_both_backends!(
    a_held_key_whose_lease_lapsed_is_resolved_with_its_lapse,
    resolve_ambiguous_as_committed_then_duplicates_are_refused,
    resolve_ambiguous_as_failed_then_the_next_attempt_is_granted,
    resolve_refuses_a_committed_row_and_a_bad_resolver,
    list_is_oldest_first_and_filters_by_state,
    reserve_refuses_bad_arguments_and_writes_nothing,
    keys_are_compared_byte_for_byte,
);
