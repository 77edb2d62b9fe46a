//! The approval store contract, every case on SQLite and on PostgreSQL: asking, deciding, and
//! the single use of a grant in the reservation's own transaction.

use crate::support::*;
use ctrlrun::approval::{ApprovalAsk, ApprovalState};
use ctrlrun::error::DuplicateKind;
use ctrlrun::planner::Proposal;
use ctrlrun::store::ApprovalFilter;
use ctrlrun::{EffectState, Error};

const TTL: i64 = 900_000_000;
const DIGEST: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000001";

fn ask(key: &str) -> ApprovalAsk<'_> {
    ApprovalAsk {
        action: "acme.refund",
        args_digest: DIGEST,
        effect_key: key,
        arguments: "{\"amount\":500}",
        ttl: TTL,
        requested_by: None,
        approvals_needed: 1,
    }
}

fn approved<'a>(key: &'a str, action_id: &'a str) -> Proposal<'a> {
    Proposal {
        action: Some("acme.refund"),
        args: Some((DIGEST, "amount sha256:a")),
        needs_approval: true,
        ..Proposal::new(key, action_id, LEASE, true)
    }
}

fn asking_finds_one_request_and_a_grant_is_used_once(b: Backend) {
    let f = Fixture::new(b);
    // no grant: nothing is written
    let none = f.store.propose(approved("k", A1), Some(T0));
    assert!(matches!(none, Err(Error::ApprovalNeeded(_))), "{none:?}");
    assert_eq!(f.store.get("k").unwrap(), None);
    let first = f.store.request_approval(&ask("k"), Some(T0)).unwrap();
    assert_eq!(first.state, ApprovalState::Pending);
    assert!(first.request_id.starts_with("apr_") && first.request_id.len() == 36);
    let again = f.store.request_approval(&ask("k"), Some(T0 + 1)).unwrap();
    assert_eq!(
        again.request_id, first.request_id,
        "one open request per action and arguments"
    );
    let granted = f
        .store
        .decide_approval(&first.request_id, true, "alice", Some("ok"), Some(T0 + 2))
        .unwrap();
    assert_eq!(granted.state, ApprovalState::Granted);
    assert_eq!(
        f.store
            .get_approval(&first.request_id, Some(T0 + 3))
            .unwrap(),
        Some(granted)
    );
    // the reservation uses it, in its own transaction
    let row = f.store.propose(approved("k", A1), Some(T0 + 4)).unwrap();
    assert_eq!(row.state, EffectState::Executing);
    assert_eq!(row.approval_id.as_deref(), Some(first.request_id.as_str()));
    let used = f
        .store
        .get_approval(&first.request_id, Some(T0 + 5))
        .unwrap()
        .unwrap();
    assert_eq!(
        (used.state, used.used_by.as_deref()),
        (ApprovalState::Used, Some(A1))
    );
    // a second proposal meets the key (a plain duplicate, decided before any approval)
    assert_duplicate(
        f.store.propose(approved("k", A2), Some(T0 + 6)),
        DuplicateKind::InProgress,
    );
    // and after a failed run, a new approval is needed
    f.step("k", A1, 1, fail("declined"), T0 + 7).unwrap();
    let renewed = f.store.propose(approved("k", A2), Some(T0 + 8));
    assert!(
        matches!(renewed, Err(Error::ApprovalNeeded(_))),
        "{renewed:?}"
    );
    assert_eq!(f.get("k").state, EffectState::Failed);
}

fn a_refused_reservation_leaves_the_grant_unused(b: Backend) {
    let f = Fixture::new(b);
    f.store.reserve("k", A1, LEASE, true, Some(T0)).unwrap(); // held by another call
    let r = f.store.request_approval(&ask("k"), Some(T0)).unwrap();
    f.store
        .decide_approval(&r.request_id, true, "alice", None, Some(T0))
        .unwrap();
    assert_duplicate(
        f.store.propose(approved("k", A2), Some(T0 + 1)),
        DuplicateKind::InProgress,
    );
    let still = f
        .store
        .get_approval(&r.request_id, Some(T0 + 2))
        .unwrap()
        .unwrap();
    assert_eq!(still.state, ApprovalState::Granted);
}

fn decisions_are_made_once_and_expired_requests_are_refused(b: Backend) {
    let f = Fixture::new(b);
    let r = f.store.request_approval(&ask("k"), Some(T0)).unwrap();
    f.store
        .decide_approval(&r.request_id, false, "bob", Some("no"), Some(T0 + 1))
        .unwrap();
    let twice = f
        .store
        .decide_approval(&r.request_id, true, "alice", None, Some(T0 + 2));
    assert!(assert_invalid(twice).contains("already decided"));
    let denied = f
        .store
        .get_approval(&r.request_id, Some(T0 + 3))
        .unwrap()
        .unwrap();
    assert_eq!(
        (denied.state, denied.decided_by.as_deref()),
        (ApprovalState::Denied, Some("bob"))
    );
    // a request nobody decided in time
    let other = ApprovalAsk {
        args_digest: "sha256:2",
        ..ask("k2")
    };
    let late = f.store.request_approval(&other, Some(T0)).unwrap();
    let refused =
        f.store
            .decide_approval(&late.request_id, true, "alice", None, Some(T0 + TTL + 1));
    assert!(assert_invalid(refused).contains("expired"));
    let listed = f
        .store
        .list_approvals(
            &ApprovalFilter {
                states: &[ApprovalState::Expired],
                ..ApprovalFilter::default()
            },
            Some(T0 + TTL + 1),
        )
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].request_id, late.request_id);
    assert!(
        assert_invalid(f.store.decide_approval("apr_nope", true, "a", None, None))
            .contains("apr_nope")
    );
}

fn a_grant_is_bound_to_its_effect_key(b: Backend) {
    let f = Fixture::new(b);
    let r = f.store.request_approval(&ask("k1"), Some(T0)).unwrap();
    f.store
        .decide_approval(&r.request_id, true, "alice", None, Some(T0))
        .unwrap();
    // the same action and arguments on another key: no grant in force there
    let other = f.store.propose(approved("k2", A1), Some(T0 + 1));
    assert!(matches!(other, Err(Error::ApprovalNeeded(_))), "{other:?}");
    assert_eq!(f.store.get("k2").unwrap(), None);
    let mine = f.store.propose(approved("k1", A1), Some(T0 + 2)).unwrap();
    assert_eq!(mine.approval_id.as_deref(), Some(r.request_id.as_str()));
}

fn an_action_needing_two_approvers_is_granted_by_two_others_than_who_asked(b: Backend) {
    let f = Fixture::new(b);
    let two = ApprovalAsk {
        requested_by: Some("refund-agent"),
        approvals_needed: 2,
        ..ask("k")
    };
    let r = f.store.request_approval(&two, Some(T0)).unwrap();
    assert_eq!(
        (r.requested_by.as_deref(), r.approvals_needed),
        (Some("refund-agent"), 2)
    );
    let own = f
        .store
        .decide_approval(&r.request_id, true, "refund-agent", None, Some(T0 + 1));
    assert!(assert_invalid(own).contains("cannot grant"));
    let half = f
        .store
        .decide_approval(&r.request_id, true, "alice", Some("ok"), Some(T0 + 2))
        .unwrap();
    assert_eq!(
        (half.state, half.granted_by.clone()),
        (ApprovalState::Pending, vec!["alice".to_owned()])
    );
    // no grant in force yet, and alice cannot count twice
    let early = f.store.propose(approved("k", A1), Some(T0 + 3));
    assert!(matches!(early, Err(Error::ApprovalNeeded(_))), "{early:?}");
    let twice = f
        .store
        .decide_approval(&r.request_id, true, "alice", None, Some(T0 + 4));
    assert!(assert_invalid(twice).contains("already granted"));
    let full = f
        .store
        .decide_approval(&r.request_id, true, "bob", None, Some(T0 + 5))
        .unwrap();
    assert_eq!(full.state, ApprovalState::Granted);
    assert_eq!(full.granted_by, vec!["alice".to_owned(), "bob".to_owned()]);
    assert_eq!(
        f.store.get_approval(&r.request_id, Some(T0 + 6)).unwrap(),
        Some(full)
    );
    let kinds: Vec<String> = f
        .store
        .list_receipts(Some("k"), None)
        .unwrap()
        .into_iter()
        .map(|r| r.kind)
        .collect();
    assert_eq!(kinds, ["requested", "granted in part", "granted"]);
    assert!(f.store.verify_receipts().unwrap().broken.is_none());
    f.store.propose(approved("k", A1), Some(T0 + 7)).unwrap();
}

fn approver_accounts_are_added_reset_listed_and_removed(b: Backend) {
    let f = Fixture::new(b);
    let a = f
        .store
        .put_approver("alice", "scrypt$1", true, Some(T0))
        .unwrap();
    assert_eq!((a.created_at, a.updated_at), (T0, T0));
    let again = f
        .store
        .put_approver("alice", "scrypt$2", true, Some(T0 + 1));
    assert!(assert_invalid(again).contains("already exists"));
    let reset = f
        .store
        .put_approver("alice", "scrypt$3", false, Some(T0 + 2))
        .unwrap();
    assert_eq!(
        (
            reset.secret_hash.as_str(),
            reset.created_at,
            reset.updated_at
        ),
        ("scrypt$3", T0, T0 + 2)
    );
    let nobody = f.store.put_approver("bob", "scrypt$1", false, Some(T0));
    assert!(assert_invalid(nobody).contains("no approver"));
    for bad in [" alice", "", "a\nb"] {
        assert_invalid(f.store.put_approver(bad, "scrypt$1", true, None));
    }
    assert_invalid(f.store.put_approver("carol", "has space", true, None));
    f.store
        .put_approver("bob", "scrypt$1", true, Some(T0))
        .unwrap();
    let names: Vec<String> = f
        .store
        .list_approvers()
        .unwrap()
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(names, ["alice", "bob"]);
    assert_eq!(f.store.get_approver("alice").unwrap(), Some(reset));
    assert!(f.store.remove_approver("alice").unwrap());
    assert!(!f.store.remove_approver("alice").unwrap());
    assert_eq!(f.store.get_approver("alice").unwrap(), None);
}

on_both_backends!(
    an_action_needing_two_approvers_is_granted_by_two_others_than_who_asked,
    approver_accounts_are_added_reset_listed_and_removed,
    a_grant_is_bound_to_its_effect_key,
    asking_finds_one_request_and_a_grant_is_used_once,
    a_refused_reservation_leaves_the_grant_unused,
    decisions_are_made_once_and_expired_requests_are_refused,
);
