//! docs/spec.md §6 on SQLite: an error on COMMIT is an unknown outcome, settled by re-reading the row
//! on a fresh connection. The failure is real: a commit hook on the store's pooled connections
//! turns the next N commits into rollbacks (SQLite then reports an error on COMMIT), while the
//! fresh re-read connection has no hook.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use ctrlrun::store::sqlite::{ConnectionInit, SqliteStore};
use ctrlrun::url::{parse, StoreUrl};
use ctrlrun::{EffectState, Error, Store, Transition};

const LEASE: i64 = 60_000_000;
const T0: i64 = 1_800_000_000_000_000;

fn open(dir: &tempfile::TempDir) -> (SqliteStore, Arc<AtomicUsize>) {
    let url = format!("sqlite:///{}", dir.path().join("state.db").display());
    let StoreUrl::Sqlite(opts) = parse(&url).unwrap() else {
        panic!("a SQLite URL")
    };
    let fail_next = Arc::new(AtomicUsize::new(0));
    let counter = fail_next.clone();
    let init: ConnectionInit = Arc::new(move |conn| {
        let counter = counter.clone();
        conn.commit_hook(Some(move || {
            // true = roll this commit back
            counter
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        }))
    });
    (SqliteStore::open_with(opts, Some(init)).unwrap(), fail_next)
}

fn aid(c: char) -> String {
    format!("act_{}", c.to_string().repeat(32))
}

#[test]
fn reservation_commit_that_did_not_land_is_retried_once() {
    let dir = tempfile::tempdir().unwrap();
    let (store, fail_next) = open(&dir);
    fail_next.store(1, Ordering::SeqCst);
    let granted = store
        .reserve("k", &aid('a'), LEASE, false, Some(T0))
        .unwrap();
    assert_eq!(
        fail_next.load(Ordering::SeqCst),
        0,
        "the first COMMIT was refused"
    );
    assert_eq!(granted.attempt, 1);
    let row = store.get("k").unwrap().unwrap();
    assert_eq!(row, granted);
    assert_eq!(row.state, EffectState::Reserved);
}

#[test]
fn reservation_commit_failing_twice_is_a_failed_write_and_writes_nothing() {
    // The re-read of a SQLite file is final: a COMMIT that failed in this process never lands
    // later, so after two failed COMMITs that did not land the write failed (safe to retry),
    // as for a full disk.
    let dir = tempfile::tempdir().unwrap();
    let (store, fail_next) = open(&dir);
    fail_next.store(2, Ordering::SeqCst);
    let err = store
        .reserve("k", &aid('a'), LEASE, false, Some(T0))
        .unwrap_err();
    match &err {
        Error::StoreWriteFailed(m) => assert!(m.contains("did not land"), "{m}"),
        other => panic!("expected StoreWriteFailed, got {other:?}"),
    }
    assert_eq!(store.get("k").unwrap(), None);
}

#[test]
fn transition_commit_that_did_not_land_is_reissued() {
    let dir = tempfile::tempdir().unwrap();
    let (store, fail_next) = open(&dir);
    let r = store
        .reserve("k", &aid('a'), LEASE, false, Some(T0))
        .unwrap();
    fail_next.store(1, Ordering::SeqCst);
    let row = store
        .transition(
            "k",
            &aid('a'),
            Some(r.attempt),
            &Transition::Begin,
            Some(T0 + 1),
        )
        .unwrap();
    assert_eq!(fail_next.load(Ordering::SeqCst), 0);
    assert_eq!(row.state, EffectState::Executing);
    assert_eq!(
        store.get("k").unwrap().unwrap().state,
        EffectState::Executing
    );
}

#[test]
fn transition_commit_failing_twice_is_a_failed_write_and_the_row_is_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let (store, fail_next) = open(&dir);
    let r = store
        .reserve("k", &aid('a'), LEASE, false, Some(T0))
        .unwrap();
    store
        .transition("k", &aid('a'), Some(1), &Transition::Begin, Some(T0 + 1))
        .unwrap();
    let before = store.get("k").unwrap().unwrap();
    fail_next.store(2, Ordering::SeqCst);
    let commit = Transition::Commit {
        result: Some("1".into()),
    };
    let err = store
        .transition("k", &aid('a'), Some(r.attempt), &commit, Some(T0 + 2))
        .unwrap_err();
    assert!(matches!(err, Error::StoreWriteFailed(_)), "{err:?}");
    assert_eq!(store.get("k").unwrap().unwrap(), before);
}

#[test]
fn a_lapse_write_that_did_not_land_is_retried_and_then_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let (store, fail_next) = open(&dir);
    store
        .reserve("k", &aid('a'), LEASE, false, Some(T0))
        .unwrap();
    fail_next.store(1, Ordering::SeqCst);
    let err = store
        .reserve("k", &aid('b'), LEASE, false, Some(T0 + LEASE + 1))
        .unwrap_err();
    assert!(matches!(err, Error::Ambiguous { .. }), "{err:?}");
    assert_eq!(fail_next.load(Ordering::SeqCst), 0);
    let row = store.get("k").unwrap().unwrap();
    assert_eq!(row.state, EffectState::Ambiguous);
    assert_eq!(row.action_id, aid('a'));
}
