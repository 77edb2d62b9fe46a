//! Receipts on both backends: one per committed write, in order, with the kinds the planner's
//! writes are; none for a refusal; chains that verify, for effects and approval requests.

use crate::support::*;
use ctrlrun::approval::ApprovalAsk;
use ctrlrun::planner::Proposal;
use ctrlrun::receipt::{hash_fields, Receipt};
use ctrlrun::EffectState;

fn kinds(rs: &[Receipt]) -> Vec<(String, String)> {
    rs.iter()
        .map(|r| (r.kind.clone(), r.state.clone()))
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(k, s)| (k.to_string(), s.to_string()))
        .collect()
}

fn every_write_has_one_receipt_and_a_refusal_none(b: Backend) {
    let f = Fixture::new(b);
    f.reserve("k", A1, T0).unwrap();
    f.begin("k", A1, 1, T0 + 1);
    f.store
        .extend_lease("k", A1, Some(1), T0 + 2 * LEASE, Some(T0 + 2))
        .unwrap();
    f.step("k", A1, 1, fail("card declined"), T0 + 3).unwrap();
    // a retry: a new attempt over the failed one
    f.reserve("k", A2, T0 + 4).unwrap();
    f.begin("k", A2, 2, T0 + 5);
    // a refusal writes nothing
    assert_duplicate(
        f.reserve("k", A1, T0 + 6),
        ctrlrun::error::DuplicateKind::InProgress,
    );
    // the lease lapses; a contender writes the lapse; a person resolves it
    let _ = f.reserve("k", A1, T0 + 5 + LEASE + 1);
    f.store
        .resolve("k", EffectState::Committed, "alice", Some(T0 + 2 * LEASE))
        .unwrap();
    let rs = f.store.list_receipts(Some("k"), None).unwrap();
    assert_eq!(
        kinds(&rs),
        pairs(&[
            ("reservation", "reserved"),
            ("begin", "executing"),
            ("extension", "executing"),
            ("outcome", "failed"),
            ("reservation", "reserved"),
            ("begin", "executing"),
            ("lapse", "ambiguous"),
            ("resolution", "committed"),
        ])
    );
    let seqs: Vec<i64> = rs.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, (1..=8).collect::<Vec<_>>());
    assert_eq!(rs[0].prev_hash, None);
    for pair in rs.windows(2) {
        assert_eq!(pair[1].prev_hash.as_deref(), Some(pair[0].hash.as_str()));
        assert!(pair[0].id < pair[1].id);
    }
    // what each receipt holds
    assert_eq!(rs[0].action_id.as_deref(), Some(A1));
    assert_eq!(rs[4].attempt, Some(2));
    assert_eq!(rs[7].actor.as_deref(), Some("alice"));
    let pid = format!(":{}", std::process::id());
    assert!(rs
        .iter()
        .all(|r| r.writer.as_deref().is_some_and(|w| w.ends_with(&pid))));
    let row = f.get("k");
    assert_eq!(rs[7].at, row.updated_at);
    // the stored hash is the one the fields give (each backend computes it in its statements)
    for r in &rs {
        assert_eq!(r.hash, r.expected_hash(), "receipt {}", r.id);
    }
    // the latest N, oldest first
    let last2 = f.store.list_receipts(Some("k"), Some(2)).unwrap();
    assert_eq!(last2, rs[6..].to_vec());
    let v = f.store.verify_receipts().unwrap();
    assert_eq!((v.receipts, v.chains, v.broken), (8, 1, None));
}

fn a_late_outcome_and_a_commit_have_receipts(b: Backend) {
    let f = Fixture::new(b);
    f.reserve("k", A1, T0).unwrap();
    f.begin("k", A1, 1, T0);
    let _ = f.reserve("k", A2, T0 + LEASE + 1); // lapses A1
                                                // A1's outcome arrives late and is recorded
    f.step("k", A1, 1, commit("{\"ok\":true}"), T0 + LEASE + 2)
        .unwrap();
    f.reserve("j", A1, T0).unwrap();
    f.begin("j", A1, 1, T0);
    f.step("j", A1, 1, commit("1"), T0 + 1).unwrap();
    let k = f.store.list_receipts(Some("k"), None).unwrap();
    assert_eq!(
        kinds(&k),
        pairs(&[
            ("reservation", "reserved"),
            ("begin", "executing"),
            ("lapse", "ambiguous"),
            ("late_outcome", "committed"),
        ])
    );
    let all = f.store.list_receipts(None, None).unwrap();
    assert_eq!(all.len(), 7);
    let v = f.store.verify_receipts().unwrap();
    assert_eq!((v.receipts, v.chains, v.broken), (7, 2, None));
}

fn approval_events_form_their_own_chain(b: Backend) {
    let f = Fixture::new(b);
    let digest = "sha256:00000000000000000000000000000000000000000000000000000000000000aa";
    let ask = ApprovalAsk {
        action: "acme.refund",
        args_digest: digest,
        effect_key: "refund:1",
        arguments: "{}",
        ttl: 60_000_000,
        requested_by: None,
        approvals_needed: 1,
    };
    let r = f.store.request_approval(&ask, Some(T0)).unwrap();
    f.store
        .decide_approval(&r.request_id, true, "bob", None, Some(T0 + 1))
        .unwrap();
    let p = Proposal {
        action: Some("acme.refund"),
        args: Some((digest, "")),
        needs_approval: true,
        ..Proposal::new("refund:1", A1, LEASE, true)
    };
    f.store.propose(p, Some(T0 + 2)).unwrap();
    let rs = f.store.list_receipts(Some("refund:1"), None).unwrap();
    let approval: Vec<&Receipt> = rs.iter().filter(|r| r.chain == "approval").collect();
    assert_eq!(
        approval.iter().map(|r| r.kind.as_str()).collect::<Vec<_>>(),
        ["requested", "granted", "consumed"]
    );
    assert!(approval
        .iter()
        .all(|r| r.request_id.as_deref() == Some(r.approval_id.as_deref().unwrap())));
    assert_eq!(approval[1].actor.as_deref(), Some("bob"));
    assert_eq!(approval[2].action_id.as_deref(), Some(A1));
    let effect: Vec<&Receipt> = rs.iter().filter(|r| r.chain == "effect").collect();
    assert_eq!(effect.len(), 1);
    assert_eq!(
        effect[0].approval_id.as_deref(),
        Some(r.request_id.as_str())
    );
    for r in &rs {
        assert_eq!(r.hash, r.expected_hash(), "receipt {}", r.id);
    }
    let v = f.store.verify_receipts().unwrap();
    assert_eq!((v.receipts, v.chains, v.broken), (4, 2, None));
}

fn an_expired_request_asked_again_records_its_expiry(b: Backend) {
    let f = Fixture::new(b);
    let ask = ApprovalAsk {
        action: "acme.refund",
        args_digest: "sha256:1",
        effect_key: "refund:2",
        arguments: "{}",
        ttl: 60_000_000,
        requested_by: None,
        approvals_needed: 1,
    };
    let old = f.store.request_approval(&ask, Some(T0)).unwrap();
    let new = f
        .store
        .request_approval(&ask, Some(T0 + 60_000_001))
        .unwrap();
    assert_ne!(old.request_id, new.request_id);
    let rs = f.store.list_receipts(Some("refund:2"), None).unwrap();
    let got: Vec<(&str, &str, i64)> = rs
        .iter()
        .map(|r| (r.request_id.as_deref().unwrap(), r.kind.as_str(), r.seq))
        .collect();
    assert_eq!(
        got,
        [
            (old.request_id.as_str(), "requested", 1),
            (old.request_id.as_str(), "expired", 2),
            (new.request_id.as_str(), "requested", 1),
        ]
    );
    assert_eq!(rs[1].at, T0 + 60_000_001);
    assert!(f.store.verify_receipts().unwrap().broken.is_none());
}

on_both_backends!(
    an_expired_request_asked_again_records_its_expiry,
    every_write_has_one_receipt_and_a_refusal_none,
    a_late_outcome_and_a_commit_have_receipts,
    approval_events_form_their_own_chain,
);

#[test]
fn the_hash_input_cannot_be_shifted_between_fields() {
    // absent, empty and moved text all differ
    let a = hash_fields(&[Some("ab"), Some("c")]);
    let b = hash_fields(&[Some("a"), Some("bc")]);
    let c = hash_fields(&[Some("abc"), None]);
    let d = hash_fields(&[Some("abc"), Some("")]);
    assert!(a != b && b != c && c != d && a != d);
    assert_eq!(a.len(), 64);
    // a known value: sha256("2:ab1:c")
    assert_eq!(
        a,
        "430fb1b4ac43316eca81fab27a1930ab8eff8fef6a1dc7903dce44bbc2790dc5"
    );
}
