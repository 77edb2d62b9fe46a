//! The store contract: racing threads, unusual keys, and begin folded into the reservation (see `store_contract`), every case
//! run on both backends.

use std::sync::{Arc, Barrier};

use crate::support::*;
use ctrlrun::error::DuplicateKind;
use ctrlrun::store::retention::EffectFilter;
use ctrlrun::{EffectRecord, EffectState, Error, Micros, Transition};

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
        Backend::Sqlite => ctrlrun::store::BackendKind::Sqlite,
        Backend::Postgres => ctrlrun::store::BackendKind::Postgres,
    };
    assert_eq!(f.store.backend(), want);
    assert_eq!(f.store.fork_sensitive(), b == Backend::Sqlite);
}

on_both_backends!(
    the_store_names_its_backend,
    eight_threads_racing_for_one_key_get_exactly_one_grant,
    eight_threads_over_the_same_hundred_keys_get_exactly_a_hundred_grants,
    eight_threads_renewing_one_failed_key_get_exactly_one_attempt_two,
    eight_threads_meeting_one_lapsed_lease_all_see_ambiguous_and_one_write_lands,
    unusual_keys_round_trip_byte_for_byte,
    reserve_with_begin_writes_executing_and_the_outcome_follows_directly,
    reserve_with_begin_renews_a_failed_row_as_executing_and_lapses_to_ambiguous,
    an_outcome_written_without_reading_back_lands_the_same_row_and_refuses_alike,
);
