//! People's names in the store, every case on SQLite and on PostgreSQL: no two approver
//! accounts are one person by another spelling (also when their writes race), and a refused
//! name writes nothing.

use std::sync::{Arc, Barrier};

use crate::support::*;
use ctrlrun::Error;

fn names(f: &Fixture) -> Vec<String> {
    let accounts = f.store.list_approvers().unwrap();
    accounts.into_iter().map(|a| a.name).collect()
}

fn an_account_is_refused_when_another_has_its_name_by_another_spelling(b: Backend) {
    let f = Fixture::new(b);
    f.store
        .put_approver("alice", "scrypt$1", true, Some(T0))
        .unwrap();
    for twin in ["Alice", "ALICE", "ａｌｉｃｅ"] {
        let m = assert_invalid(f.store.put_approver(twin, "scrypt$2", true, Some(T0 + 1)));
        assert!(
            m.contains("an approver named \"alice\" already exists") && m.contains("same name"),
            "{m}"
        );
    }
    for bad in ["bob\u{202E}", "bob\u{200B}", "bob\u{7}"] {
        let m = assert_invalid(f.store.put_approver(bad, "scrypt$2", true, Some(T0 + 1)));
        assert!(m.contains("holds U+") && !m.contains(&bad[3..]), "{m:?}");
    }
    assert_eq!(names(&f), ["alice"], "a refused name wrote nothing");
    // the account keeps the name as typed; another name is another account
    f.store
        .put_approver("Bob", "scrypt$3", true, Some(T0 + 2))
        .unwrap();
    assert_eq!(names(&f), ["Bob", "alice"]);
}

/// Eight spellings of one name added at once, over many rounds: exactly one account each
/// round (on PostgreSQL two transactions that each read no twin would both insert, were the
/// accounts' writes not held off while one is checked).
fn spellings_of_one_name_added_at_once_make_one_account(b: Backend) {
    const SPELLINGS: [&str; 8] = [
        "carol", "Carol", "CAROL", "cArol", "caRol", "carOl", "caroL", "CaRoL",
    ];
    let f = Fixture::new(b);
    for round in 0..12 {
        let barrier = Arc::new(Barrier::new(SPELLINGS.len()));
        let handles: Vec<_> = SPELLINGS
            .iter()
            .map(|spelling| {
                let store = Arc::clone(&f.store);
                let barrier = Arc::clone(&barrier);
                let name = format!("{spelling}{round}");
                std::thread::spawn(move || {
                    barrier.wait();
                    store.put_approver(&name, "scrypt$1", true, None)
                })
            })
            .collect();
        let mut made = 0;
        for h in handles {
            match h.join().unwrap() {
                Ok(_) => made += 1,
                Err(Error::InvalidArgument(m)) => assert!(m.contains("same name"), "{m}"),
                Err(e) => panic!("round {round}: {e:?}"),
            }
        }
        assert_eq!(made, 1, "round {round}: {:?}", names(&f));
    }
    assert_eq!(names(&f).len(), 12);
}

on_both_backends!(
    an_account_is_refused_when_another_has_its_name_by_another_spelling,
    spellings_of_one_name_added_at_once_make_one_account,
);
