//! The store contract (docs/spec.md §3, §4, §8.3), every case run on both backends: a SQLite file in a
//! temp folder and a schema of its own on a PostgreSQL server. Time is moved with explicit
//! `now` values; nothing sleeps.

use std::sync::{Arc, Barrier};

use crate::support::*;
use ctrlrun::env::holder;
use ctrlrun::error::DuplicateKind;
use ctrlrun::store::retention::EffectFilter;
use ctrlrun::{EffectRecord, EffectState, Error, Micros, Transition};

// ---------------------------------------------------------------------------------------------
// the happy path and duplicates
// ---------------------------------------------------------------------------------------------

fn reserve_begin_commit_then_a_duplicate_is_refused(b: Backend) {
    let f = Fixture::new(b);
    let r = f.reserve("k", A1, T0).unwrap();
    assert_eq!(
        r,
        EffectRecord {
            effect_key: "k".into(),
            state: EffectState::Reserved,
            action_id: A1.into(),
            attempt: 1,
            created_at: T0,
            updated_at: T0,
            lease_expires_at: Some(T0 + LEASE),
            result: None,
            error: None,
            resolved_by: None,
            attempt_token: Some(token_of(&r)),
            action: None,
            holder: Some(holder()),
            args_digest: None,
            arg_digests: None,
            approval_id: None,
        }
    );
    assert_eq!(f.get("k"), r);

    let b = f.begin("k", A1, 1, T0 + 1);
    assert_eq!(b.state, EffectState::Executing);
    assert_eq!(
        b.lease_expires_at,
        Some(T0 + LEASE),
        "begin keeps the lease"
    );
    assert_eq!(b.updated_at, T0 + 1);
    assert_eq!(f.get("k"), b);

    let c = f
        .step("k", A1, 1, commit("{\"refund\":\"re_1\"}"), T0 + 2)
        .unwrap();
    assert_eq!(c.state, EffectState::Committed);
    assert_eq!(c.result.as_deref(), Some("{\"refund\":\"re_1\"}"));
    assert_eq!(c.lease_expires_at, None);
    assert_eq!(c.attempt, 1);
    assert_eq!(c.created_at, T0);
    assert_eq!(c.updated_at, T0 + 2);
    assert_eq!(f.get("k"), c);

    // Long after, by anyone: committed.
    for (id, now) in [(A2, T0 + 3), (A1, T0 + 100 * LEASE)] {
        let rec = assert_duplicate(f.reserve("k", id, now), DuplicateKind::Committed);
        assert_eq!(rec, c);
    }
    assert_eq!(f.get("k"), c, "a refused reservation writes nothing");
    assert!(f.store.get("other").unwrap().is_none());
}

fn live_lease_is_in_progress_even_for_the_same_action_id(b: Backend) {
    let f = Fixture::new(b);
    let held = f.reserve("k", A1, T0).unwrap();
    for id in [A2, A1] {
        let rec = assert_duplicate(f.reserve("k", id, T0 + 10), DuplicateKind::InProgress);
        assert_eq!(rec, held);
    }
    // The boundary instant is still live.
    assert_duplicate(f.reserve("k", A2, T0 + LEASE), DuplicateKind::InProgress);
    assert_eq!(f.get("k"), held, "row unchanged");

    let executing = f.begin("k", A1, 1, T0 + 20);
    for id in [A2, A1] {
        let rec = assert_duplicate(f.reserve("k", id, T0 + 30), DuplicateKind::InProgress);
        assert_eq!(rec, executing);
    }
    assert_eq!(f.get("k"), executing, "row unchanged");
}

fn failed_rows_are_renewed_with_the_next_attempt(b: Backend) {
    let f = Fixture::new(b);
    // from executing
    f.reserve("ex", A1, T0).unwrap();
    f.begin("ex", A1, 1, T0 + 1);
    let failed = f.step("ex", A1, 1, fail("card declined"), T0 + 2).unwrap();
    assert_eq!(failed.state, EffectState::Failed);
    assert_eq!(failed.error.as_deref(), Some("card declined"));
    assert_eq!(failed.lease_expires_at, None);
    assert_eq!(f.get("ex"), failed);
    // from reserved (the body never started)
    f.reserve("rs", A1, T0).unwrap();
    let failed = f.step("rs", A1, 1, fail("never started"), T0 + 2).unwrap();
    assert_eq!(failed.state, EffectState::Failed);
    assert_eq!(f.get("rs"), failed);

    for key in ["ex", "rs"] {
        let now = T0 + 1_000;
        let before = f.get(key);
        let r = f.reserve(key, A2, now).unwrap();
        assert_ne!(
            r.attempt_token, before.attempt_token,
            "a new attempt, a new token"
        );
        assert_eq!(
            r,
            EffectRecord {
                effect_key: key.into(),
                state: EffectState::Reserved,
                action_id: A2.into(),
                attempt: 2,
                created_at: T0,
                updated_at: now,
                lease_expires_at: Some(now + LEASE),
                result: None,
                error: None,
                resolved_by: None,
                attempt_token: Some(token_of(&r)),
                action: None,
                holder: Some(holder()),
                args_digest: None,
                arg_digests: None,
                approval_id: None,
            }
        );
        assert_eq!(f.get(key), r);
        // The renewed attempt runs to the end.
        f.begin(key, A2, 2, now + 1);
        let c = f.step(key, A2, 2, commit("1"), now + 2).unwrap();
        assert_eq!((c.state, c.attempt), (EffectState::Committed, 2));
    }
}

fn ambiguous_row_refuses_reservation_and_writes_nothing(b: Backend) {
    let f = Fixture::new(b);
    f.reserve("k", A1, T0).unwrap();
    f.begin("k", A1, 1, T0 + 1);
    let amb = f
        .step("k", A1, 1, mark("timeout talking to the bank"), T0 + 2)
        .unwrap();
    assert_eq!(amb.state, EffectState::Ambiguous);
    assert_eq!(amb.lease_expires_at, None);
    assert_eq!(amb.error.as_deref(), Some("timeout talking to the bank"));
    for (id, now) in [(A2, T0 + 3), (A1, T0 + 10 * LEASE)] {
        let (rec, msg) = assert_ambiguous(f.reserve("k", id, now));
        assert_eq!(rec, amb);
        assert!(msg.contains("'k'") && msg.contains(A1), "{msg}");
        assert!(msg.contains("timeout talking to the bank"), "{msg}");
    }
    assert_eq!(f.get("k"), amb, "nothing written");
    // mark_ambiguous also works straight from reserved.
    f.reserve("r", A1, T0).unwrap();
    let amb = f.step("r", A1, 1, mark("lost"), T0 + 1).unwrap();
    assert_eq!(amb.state, EffectState::Ambiguous);
}

// ---------------------------------------------------------------------------------------------
// the kept lapse write
// ---------------------------------------------------------------------------------------------

fn lapsed_lease_is_written_ambiguous_before_refusing_and_the_holder_is_shut_out(b: Backend) {
    for begin in [true, false] {
        let f = Fixture::new(b);
        let held = f.reserve("k", A1, T0).unwrap();
        let held_state = if begin {
            f.begin("k", A1, 1, T0 + 1).state
        } else {
            held.state
        };
        let late = T0 + LEASE + 1;
        let (rec, msg) = assert_ambiguous(f.reserve("k", A2, late));
        assert_eq!(rec.state, EffectState::Ambiguous);
        assert_eq!(rec.action_id, A1, "the holder is named, not the contender");
        assert!(msg.contains(A1), "{msg}");
        let lapse = rec.error.clone().expect("lapse error");
        assert!(lapse.contains("lapsed"), "{lapse}");
        assert!(lapse.contains(held_state.as_str()), "{lapse}");

        // The write was committed: a fresh read, and a second store on the same file, see it.
        let row = f.get("k");
        assert_eq!(row, rec);
        assert_eq!(row.updated_at, late);
        assert_eq!(row.lease_expires_at, None);
        assert_eq!(row.attempt, 1);
        assert_eq!(row.created_at, T0);
        let other = f.reopen();
        assert_eq!(other.get("k").unwrap(), Some(rec.clone()));

        // And the next contender is refused the same way, writing nothing.
        assert_ambiguous(other.reserve("k", A2, LEASE, false, Some(late + 10)));
        assert_eq!(f.get("k").updated_at, late);

        // The holder comes back late. A begin is refused (its lease is gone), but an outcome
        // is written while the row is still its attempt's (the late-outcome rule).
        if begin {
            let c = f.step("k", A1, 1, commit("\"done\""), late + 20).unwrap();
            assert_eq!(
                (c.state, c.result.as_deref()),
                (EffectState::Committed, Some("\"done\""))
            );
            assert!(c.error.as_deref().unwrap().starts_with(&lapse), "{c:?}");
            assert_eq!(f.get("k"), c);
            assert_duplicate(
                other.reserve("k", A2, LEASE, false, Some(late + 21)),
                DuplicateKind::Committed,
            );
        } else {
            let (r, _) = assert_ambiguous(f.step("k", A1, 1, Transition::Begin, late + 20));
            assert_eq!(r, rec);
            let failed = f.step("k", A1, 1, fail("nothing ran"), late + 21).unwrap();
            assert_eq!(failed.state, EffectState::Failed);
            assert!(failed
                .error
                .as_deref()
                .unwrap()
                .ends_with("did not run: nothing ran"));
            let renewed = other
                .reserve("k", A2, LEASE, false, Some(late + 22))
                .unwrap();
            assert_eq!(renewed.attempt, 2);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// transition refusals
// ---------------------------------------------------------------------------------------------

fn commit_from_reserved_is_refused_naming_the_states(b: Backend) {
    let f = Fixture::new(b);
    let held = f.reserve("k", A1, T0).unwrap();
    let m = assert_invalid(f.step("k", A1, 1, commit("1"), T0 + 1));
    assert!(m.contains("commit_effect"), "{m}");
    assert!(m.contains("'k'"), "{m}");
    assert!(m.contains("it is reserved"), "names the state found: {m}");
    assert!(
        m.contains("requires executing"),
        "names the state required: {m}"
    );
    assert_eq!(f.get("k"), held);
}

fn commit_by_another_action_under_a_live_lease_is_in_progress(b: Backend) {
    let f = Fixture::new(b);
    f.reserve("k", A1, T0).unwrap();
    let held = f.begin("k", A1, 1, T0 + 1);
    let rec = assert_duplicate(
        f.step("k", A2, 1, commit("1"), T0 + 2),
        DuplicateKind::InProgress,
    );
    assert_eq!(rec, held);
    assert_duplicate(
        f.store.transition("k", A2, None, &fail("x"), Some(T0 + 2)),
        DuplicateKind::InProgress,
    );
    assert_eq!(f.get("k"), held);
    // Once that lease lapsed, the same foreign write is simply invalid.
    let m = assert_invalid(f.step("k", A2, 1, commit("1"), T0 + LEASE + 1));
    assert!(m.contains("executing"), "{m}");
    assert_eq!(f.get("k"), held);
}

fn commit_with_the_wrong_attempt_is_refused(b: Backend) {
    let f = Fixture::new(b);
    f.reserve("k", A1, T0).unwrap();
    let held = f.begin("k", A1, 1, T0 + 1);
    // Same action id, attempt 2: another attempt's live lease.
    let rec = assert_duplicate(
        f.step("k", A1, 2, commit("1"), T0 + 2),
        DuplicateKind::InProgress,
    );
    assert_eq!(rec, held);
    // After the lease: InvalidArgument naming the attempt found.
    let m = assert_invalid(f.step("k", A1, 2, commit("1"), T0 + LEASE + 1));
    assert!(m.contains("attempt 1") && m.contains("attempt 2"), "{m}");
    assert_eq!(f.get("k"), held);
    // The right attempt still commits.
    let c = f.step("k", A1, 1, commit("1"), T0 + 3).unwrap();
    assert_eq!(c.state, EffectState::Committed);
}

fn transitions_on_a_missing_key_are_invalid(b: Backend) {
    let f = Fixture::new(b);
    for t in [Transition::Begin, commit("1"), fail("x"), mark("y")] {
        let m = assert_invalid(f.step("ghost", A1, 1, t.clone(), T0));
        assert!(m.contains("ghost"), "{}: {m}", t.name());
        assert!(m.contains(t.name()), "{m}");
    }
    assert_invalid(
        f.store
            .extend_lease("ghost", A1, Some(1), T0 + LEASE, Some(T0)),
    );
    assert_invalid(
        f.store
            .resolve("ghost", EffectState::Committed, "alice", Some(T0)),
    );
    assert!(
        f.store.get("ghost").unwrap().is_none(),
        "nothing was created"
    );
    assert!(f.store.list(&EffectFilter::ALL).unwrap().is_empty());
}

fn begin_twice_is_idempotent_for_the_same_attempt(b: Backend) {
    let f = Fixture::new(b);
    f.reserve("k", A1, T0).unwrap();
    let first = f.begin("k", A1, 1, T0 + 1);
    // settle_mismatch: the row is already in begin's target state under our attempt => landed.
    let second = f.begin("k", A1, 1, T0 + 2);
    assert_eq!(
        second, first,
        "the landed row is returned, nothing rewritten"
    );
    assert_eq!(second.state, EffectState::Executing);
    assert_eq!(f.get("k"), first);
    // But another attempt's begin is refused while the lease is live.
    assert_duplicate(
        f.step("k", A1, 2, Transition::Begin, T0 + 3),
        DuplicateKind::InProgress,
    );
    // A committed row: begin by the same attempt is a duplicate, not a landing.
    f.step("k", A1, 1, commit("1"), T0 + 4).unwrap();
    assert_duplicate(
        f.step("k", A1, 1, Transition::Begin, T0 + 5),
        DuplicateKind::Committed,
    );
}

fn a_repeated_commit_by_the_same_attempt_has_landed(b: Backend) {
    let f = Fixture::new(b);
    f.reserve("k", A1, T0).unwrap();
    f.begin("k", A1, 1, T0 + 1);
    let c = f.step("k", A1, 1, commit("\"first\""), T0 + 2).unwrap();
    let again = f.step("k", A1, 1, commit("\"first\""), T0 + 3).unwrap();
    assert_eq!(again, c);
    assert_eq!(f.get("k"), c);
}

fn transitions_validate_the_action_id(b: Backend) {
    let f = Fixture::new(b);
    f.reserve("k", A1, T0).unwrap();
    assert_invalid(f.step("k", "", 1, Transition::Begin, T0));
    assert_invalid(f.step("k", "act\n1", 1, Transition::Begin, T0));
    assert_eq!(f.get("k").state, EffectState::Reserved);
}

// ---------------------------------------------------------------------------------------------
// extend_lease
// ---------------------------------------------------------------------------------------------

fn extend_lease_while_live_moves_the_expiry(b: Backend) {
    let f = Fixture::new(b);
    f.reserve("k", A1, T0).unwrap();
    f.begin("k", A1, 1, T0 + 1);
    let until = T0 + 3 * LEASE;
    let r = f
        .store
        .extend_lease("k", A1, Some(1), until, Some(T0 + 2))
        .unwrap();
    assert_eq!(r.lease_expires_at, Some(until));
    assert_eq!(r.updated_at, T0 + 2);
    assert_eq!(r.state, EffectState::Executing);
    assert_eq!(f.get("k"), r);
    // The extended lease now protects the key past the old expiry.
    assert_duplicate(
        f.reserve("k", A2, T0 + 2 * LEASE),
        DuplicateKind::InProgress,
    );
    // Extending to the same instant is fine.
    let same = f
        .store
        .extend_lease("k", A1, Some(1), until, Some(T0 + 3))
        .unwrap();
    assert_eq!(same.lease_expires_at, Some(until));
}

fn extend_lease_after_lapse_is_refused(b: Backend) {
    let f = Fixture::new(b);
    f.reserve("k", A1, T0).unwrap();
    let held = f.begin("k", A1, 1, T0 + 1);
    let m = assert_invalid(f.store.extend_lease(
        "k",
        A1,
        Some(1),
        T0 + 10 * LEASE,
        Some(T0 + LEASE + 1),
    ));
    assert!(m.contains("lapsed"), "{m}");
    assert_eq!(f.get("k"), held, "nothing written");
}

fn extend_lease_to_an_earlier_expiry_is_refused(b: Backend) {
    let f = Fixture::new(b);
    f.reserve("k", A1, T0).unwrap();
    let held = f.begin("k", A1, 1, T0 + 1);
    let m = assert_invalid(
        f.store
            .extend_lease("k", A1, Some(1), T0 + LEASE - 1, Some(T0 + 2)),
    );
    assert!(m.contains("earlier"), "{m}");
    assert_eq!(f.get("k"), held);
}

fn extend_lease_needs_executing_and_the_holder(b: Backend) {
    let f = Fixture::new(b);
    let held = f.reserve("k", A1, T0).unwrap();
    let m = assert_invalid(
        f.store
            .extend_lease("k", A1, Some(1), T0 + 2 * LEASE, Some(T0 + 1)),
    );
    assert!(m.contains("requires executing"), "{m}");
    let held2 = f.begin("k", A1, 1, T0 + 1);
    assert_duplicate(
        f.store
            .extend_lease("k", A2, None, T0 + 2 * LEASE, Some(T0 + 2)),
        DuplicateKind::InProgress,
    );
    assert_ne!(held, held2);
    assert_eq!(f.get("k"), held2);
}

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

// ---------------------------------------------------------------------------------------------
// threads
// ---------------------------------------------------------------------------------------------

fn eight_threads_racing_for_one_key_get_exactly_one_grant(b: Backend) {
    let f = Fixture::new(b);
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let store = Arc::clone(&f.store);
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                let id = format!("act_{i:032x}");
                barrier.wait();
                (
                    id.clone(),
                    store.reserve("contended", &id, LEASE, false, Some(T0)),
                )
            })
        })
        .collect();
    let mut winners = Vec::new();
    for h in handles {
        let (id, r) = h.join().unwrap();
        match r {
            Ok(rec) => {
                assert_eq!(rec.action_id, id);
                winners.push(rec);
            }
            Err(Error::Duplicate {
                kind: DuplicateKind::InProgress,
                ..
            }) => {}
            Err(e) => panic!("unexpected error: {e:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one grant: {winners:?}");
    assert_eq!(f.get("contended"), winners[0]);
}

fn eight_threads_over_the_same_hundred_keys_get_exactly_a_hundred_grants(b: Backend) {
    let f = Fixture::new(b);
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8usize)
        .map(|i| {
            let store = Arc::clone(&f.store);
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                let id = format!("act_{i:032x}");
                barrier.wait();
                let mut granted = Vec::new();
                for j in 0..100usize {
                    // Each thread walks the keys from a different start.
                    let key = format!("key:{}", (j + i * 13) % 100);
                    match store.reserve(&key, &id, LEASE, false, Some(T0)) {
                        Ok(rec) => granted.push((key, rec)),
                        Err(Error::Duplicate {
                            kind: DuplicateKind::InProgress,
                            ..
                        }) => {}
                        Err(e) => panic!("unexpected error on {key}: {e:?}"),
                    }
                }
                granted
            })
        })
        .collect();
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.join().unwrap());
    }
    assert_eq!(all.len(), 100, "exactly one grant per key");
    let mut keys: Vec<&str> = all.iter().map(|(k, _)| k.as_str()).collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 100, "no key granted twice");
    for (key, rec) in &all {
        assert_eq!(&f.get(key), rec);
        assert_eq!(rec.attempt, 1);
    }
    assert_eq!(f.store.list(&EffectFilter::ALL).unwrap().len(), 100);
}

fn eight_threads_renewing_one_failed_key_get_exactly_one_attempt_two(b: Backend) {
    let f = Fixture::new(b);
    f.reserve("k", A1, T0).unwrap();
    f.step("k", A1, 1, fail("declined"), T0 + 1).unwrap();
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let store = Arc::clone(&f.store);
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                let id = format!("act_{i:032x}");
                barrier.wait();
                store.reserve("k", &id, LEASE, false, Some(T0 + 10))
            })
        })
        .collect();
    let mut grants = Vec::new();
    for h in handles {
        match h.join().unwrap() {
            Ok(rec) => grants.push(rec),
            Err(Error::Duplicate {
                kind: DuplicateKind::InProgress,
                record,
                ..
            }) => assert_eq!(record.attempt, 2),
            Err(e) => panic!("unexpected error: {e:?}"),
        }
    }
    assert_eq!(grants.len(), 1, "{grants:?}");
    assert_eq!(grants[0].attempt, 2);
    assert_eq!(f.get("k"), grants[0]);
}

fn eight_threads_meeting_one_lapsed_lease_all_see_ambiguous_and_one_write_lands(b: Backend) {
    let f = Fixture::new(b);
    f.reserve("k", A1, T0).unwrap();
    let late = T0 + LEASE + 1;
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8i64)
        .map(|i| {
            let store = Arc::clone(&f.store);
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                let id = format!("act_{i:032x}");
                barrier.wait();
                store.reserve("k", &id, LEASE, false, Some(late + i))
            })
        })
        .collect();
    let mut stamps = Vec::new();
    for h in handles {
        let (rec, _) = assert_ambiguous(h.join().unwrap());
        assert_eq!(rec.action_id, A1);
        stamps.push(rec.updated_at);
    }
    let row = f.get("k");
    assert_eq!(row.state, EffectState::Ambiguous);
    // Every refusal reports the one row that was written, whoever wrote it.
    assert!(stamps.iter().all(|s| *s == row.updated_at), "{stamps:?}");
}

fn unusual_keys_round_trip_byte_for_byte(b: Backend) {
    let f = Fixture::new(b);
    let long = "x".repeat(10_000);
    let mut keys = vec![
        "refund:txn_1",
        "caf\u{e9}",
        "cafe\u{301}", // the same word, decomposed: a different key
        "line\nbreak",
        "'; DROP TABLE ctrlrun_effects; --",
        "\u{1F4B8}",
        long.as_str(), // longer than a B-tree entry may be
    ];
    let with_nul = ["with\0nul", "with\0nul\0longer"];
    if b == Backend::Sqlite {
        keys.extend(with_nul);
    } else {
        // PostgreSQL text cannot hold NUL: refused before any write, naming why.
        for key in with_nul {
            let m = assert_invalid(f.reserve(key, A1, T0));
            assert!(m.contains("NUL"), "{m}");
        }
    }
    for (i, key) in keys.iter().enumerate() {
        let r = f.reserve(key, A1, T0 + i as Micros).unwrap();
        assert_eq!(r.effect_key, *key);
        assert_eq!(r.attempt, 1, "{key:?} is a new key");
    }
    for &key in &keys {
        let got = f.get(key);
        assert_eq!(got.effect_key, key, "{key:?}");
    }
    let listed: Vec<String> = f
        .store
        .list(&EffectFilter::ALL)
        .unwrap()
        .into_iter()
        .map(|r| r.effect_key)
        .collect();
    assert_eq!(listed, keys);
    assert!(f.store.get("with").unwrap().is_none());
    assert!(f.store.get(&"x".repeat(9_999)).unwrap().is_none());
}

// ---------------------------------------------------------------------------------------------
// begin folded into the reservation (the decorator's path): one write fewer, same guarantees
// ---------------------------------------------------------------------------------------------

fn reserve_with_begin_writes_executing_and_the_outcome_follows_directly(b: Backend) {
    let f = Fixture::new(b);
    let r = f.store.reserve("k", A1, LEASE, true, Some(T0)).unwrap();
    assert_eq!(r.state, EffectState::Executing);
    assert_eq!(r.lease_expires_at, Some(T0 + LEASE));
    assert_eq!(f.get("k"), r);
    // a contender meets it in progress, then it commits without a separate begin
    assert_duplicate(f.reserve("k", A2, T0 + 1), DuplicateKind::InProgress);
    let c = f.step("k", A1, 1, commit("\"ok\""), T0 + 2).unwrap();
    assert_eq!(c.state, EffectState::Committed);
    assert_duplicate(
        f.store.reserve("k", A2, LEASE, true, Some(T0 + 3)),
        DuplicateKind::Committed,
    );
}

fn reserve_with_begin_renews_a_failed_row_as_executing_and_lapses_to_ambiguous(b: Backend) {
    let f = Fixture::new(b);
    f.store.reserve("k", A1, LEASE, true, Some(T0)).unwrap();
    f.step("k", A1, 1, Transition::Fail { error: "no".into() }, T0 + 1)
        .unwrap();
    let r = f.store.reserve("k", A2, LEASE, true, Some(T0 + 2)).unwrap();
    assert_eq!((r.state, r.attempt), (EffectState::Executing, 2));
    // the holder vanishes: the next caller after the lease finds it ambiguous
    assert_ambiguous(
        f.store
            .reserve("k", A1, LEASE, true, Some(T0 + 2 + LEASE + 1)),
    );
    assert_eq!(f.get("k").state, EffectState::Ambiguous);
}

fn an_outcome_written_without_reading_back_lands_the_same_row_and_refuses_alike(b: Backend) {
    let f = Fixture::new(b);
    let other = Fixture::new(b);
    for fx in [&f, &other] {
        fx.store.reserve("k", A1, LEASE, true, Some(T0)).unwrap();
    }
    f.store
        .transition_unread("k", A1, Some(1), &commit("\"ok\""), Some(T0 + 5))
        .unwrap();
    let read_back = other.step("k", A1, 1, commit("\"ok\""), T0 + 5).unwrap();
    // the same row but for the two reservations' own tokens
    let untokened = |r: EffectRecord| EffectRecord {
        attempt_token: None,
        action: None,
        holder: None,
        args_digest: None,
        arg_digests: None,
        approval_id: None,
        ..r
    };
    assert_eq!(untokened(f.get("k")), untokened(read_back));
    // a second attempt's outcome on the committed row is refused the same way
    assert_duplicate(
        f.store
            .transition_unread("k", A2, Some(1), &commit("1"), Some(T0 + 6))
            .map(|_| f.get("k")),
        DuplicateKind::Committed,
    );
}

fn the_store_names_its_backend(b: Backend) {
    let f = Fixture::new(b);
    let want = match b {
        Backend::Sqlite => ctrlrun::store::Backend::Sqlite,
        Backend::Postgres => ctrlrun::store::Backend::Postgres,
    };
    assert_eq!(f.store.backend(), want);
    assert_eq!(f.store.fork_sensitive(), b == Backend::Sqlite);
}

on_both_backends!(
    the_store_names_its_backend,
    a_held_key_whose_lease_lapsed_is_resolved_with_its_lapse,
    ambiguous_row_refuses_reservation_and_writes_nothing,
    reserve_begin_commit_then_a_duplicate_is_refused,
    live_lease_is_in_progress_even_for_the_same_action_id,
    failed_rows_are_renewed_with_the_next_attempt,
    lapsed_lease_is_written_ambiguous_before_refusing_and_the_holder_is_shut_out,
    commit_from_reserved_is_refused_naming_the_states,
    commit_by_another_action_under_a_live_lease_is_in_progress,
    commit_with_the_wrong_attempt_is_refused,
    transitions_on_a_missing_key_are_invalid,
    begin_twice_is_idempotent_for_the_same_attempt,
    a_repeated_commit_by_the_same_attempt_has_landed,
    transitions_validate_the_action_id,
    extend_lease_while_live_moves_the_expiry,
    extend_lease_after_lapse_is_refused,
    extend_lease_to_an_earlier_expiry_is_refused,
    extend_lease_needs_executing_and_the_holder,
    resolve_ambiguous_as_committed_then_duplicates_are_refused,
    resolve_ambiguous_as_failed_then_the_next_attempt_is_granted,
    resolve_refuses_a_committed_row_and_a_bad_resolver,
    list_is_oldest_first_and_filters_by_state,
    reserve_refuses_bad_arguments_and_writes_nothing,
    keys_are_compared_byte_for_byte,
    eight_threads_racing_for_one_key_get_exactly_one_grant,
    eight_threads_over_the_same_hundred_keys_get_exactly_a_hundred_grants,
    eight_threads_renewing_one_failed_key_get_exactly_one_attempt_two,
    eight_threads_meeting_one_lapsed_lease_all_see_ambiguous_and_one_write_lands,
    unusual_keys_round_trip_byte_for_byte,
    reserve_with_begin_writes_executing_and_the_outcome_follows_directly,
    reserve_with_begin_renews_a_failed_row_as_executing_and_lapses_to_ambiguous,
    an_outcome_written_without_reading_back_lands_the_same_row_and_refuses_alike,
);
