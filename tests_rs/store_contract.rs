//! The store contract (docs/spec.md §3, §4, §8.3), every case run on both backends: a SQLite file in a
//! temp folder and a schema of its own on a PostgreSQL server. Time is moved with explicit
//! `now` values; nothing sleeps.

use crate::support::*;
use ctrlrun::env::holder;
use ctrlrun::error::DuplicateKind;
use ctrlrun::store::retention::EffectFilter;
use ctrlrun::{EffectRecord, EffectState, Transition};

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
            // A late report that nothing ran is noted on the row, which stays ambiguous: only
            // a person moves it to failed (docs/roles.md), and a retry is refused till then.
            let noted = f.step("k", A1, 1, fail("nothing ran"), late + 21).unwrap();
            assert_eq!(noted.state, EffectState::Ambiguous);
            assert!(noted
                .error
                .as_deref()
                .unwrap()
                .contains("did not run: nothing ran"));
            assert_ambiguous(other.reserve("k", A2, LEASE, false, Some(late + 22)));
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
    assert!(m.contains("cannot commit effect 'k'"), "{m}");
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
        assert_eq!(m, "no effect is recorded under key 'ghost'", "{}", t.name());
    }
    let extend = f
        .store
        .extend_lease("ghost", A1, Some(1), T0 + LEASE, Some(T0));
    let resolve = f
        .store
        .resolve("ghost", EffectState::Committed, "alice", Some(T0));
    for m in [assert_invalid(extend), assert_invalid(resolve)] {
        assert_eq!(m, "no effect is recorded under key 'ghost'");
    }
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

on_both_backends!(
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
);
