//! The approval planners and the reservation's conflict rule (`ctrlrun::planner`), pure.

use ctrlrun::approval::{ApprovalAsk, ApprovalRecord, ApprovalState};
use ctrlrun::error::DuplicateKind;
use ctrlrun::planner::{
    plan_consume, plan_decision, plan_request, plan_reservation, Proposal, Refusal, RequestPlan,
    ReservationPlan,
};
use ctrlrun::{EffectRecord, EffectState, Error, Micros};

const T0: Micros = 1_800_000_000_000_000;
const TTL: Micros = 900_000_000; // 15 minutes

fn ask() -> ApprovalAsk<'static> {
    ApprovalAsk {
        action: "acme.refund",
        args_digest: "sha256:aa",
        effect_key: "refund:pi_1",
        arguments: "{\"amount\":500}",
        ttl: TTL,
        requested_by: None,
        approvals_needed: 1,
    }
}

fn pending() -> ApprovalRecord {
    match plan_request(None, &ask(), "apr_1", T0).unwrap() {
        RequestPlan::Ask { expire: None, new } => new,
        other => panic!("a first ask writes a new request, got {other:?}"),
    }
}

#[test]
fn a_first_ask_writes_a_pending_request_that_stands_until_its_time_runs_out() {
    let p = pending();
    assert_eq!(
        (p.state, p.requested_at, p.expires_at),
        (ApprovalState::Pending, T0, T0 + TTL)
    );
    // asked again: the same request stands, nothing is written
    assert_eq!(
        plan_request(Some(p.clone()), &ask(), "apr_2", T0 + 5).unwrap(),
        RequestPlan::Stands(p.clone())
    );
    // past its time: it is expired (from pending) and a new one is asked
    match plan_request(Some(p.clone()), &ask(), "apr_2", T0 + TTL + 1).unwrap() {
        RequestPlan::Ask {
            expire: Some((from, old)),
            new,
        } => {
            assert_eq!(
                (from, old.state),
                (ApprovalState::Pending, ApprovalState::Expired)
            );
            assert_eq!(
                (new.request_id.as_str(), new.state),
                ("apr_2", ApprovalState::Pending)
            );
        }
        other => panic!("expected a new request, got {other:?}"),
    }
}

#[test]
fn a_decision_is_made_once_and_its_time_counts_from_the_decision() {
    let granted =
        plan_decision(Some(pending()), "apr_1", true, "alice", Some("ok"), T0 + 60).unwrap();
    assert_eq!(granted.state, ApprovalState::Granted);
    assert_eq!(granted.decided_by.as_deref(), Some("alice"));
    assert_eq!(granted.expires_at, T0 + 60 + TTL);
    let again = plan_decision(Some(granted.clone()), "apr_1", false, "bob", None, T0 + 61);
    assert!(matches!(&again, Err(Error::InvalidArgument(m)) if m.contains("already decided")));
    let late = plan_decision(Some(pending()), "apr_1", true, "alice", None, T0 + TTL + 1);
    assert!(matches!(&late, Err(Error::InvalidArgument(m)) if m.contains("expired")));
    let nobody = plan_decision(None, "apr_9", true, "alice", None, T0);
    assert!(matches!(&nobody, Err(Error::InvalidArgument(m)) if m.contains("apr_9")));
    for (by, note) in [("", None), ("a\nb", None), ("alice", Some("x\u{0}y"))] {
        let bad = plan_decision(Some(pending()), "apr_1", true, by, note, T0);
        assert!(
            matches!(bad, Err(Error::InvalidArgument(_))),
            "{by:?} {note:?}"
        );
    }
}

#[test]
fn a_grant_is_used_once_and_only_while_in_force() {
    let granted = plan_decision(Some(pending()), "apr_1", true, "alice", None, T0).unwrap();
    let used = plan_consume(Some(granted.clone()), "acme.refund", "act_1", T0 + 1).unwrap();
    assert_eq!(used.state, ApprovalState::Used);
    assert_eq!(used.used_by.as_deref(), Some("act_1"));
    for found in [
        None,
        Some(used),
        Some(pending()),
        Some(ApprovalRecord {
            state: ApprovalState::Denied,
            ..granted.clone()
        }),
    ] {
        assert!(matches!(
            plan_consume(found, "acme.refund", "act_2", T0 + 2),
            Err(Error::ApprovalNeeded(_))
        ));
    }
    // a grant past its time is not in force
    assert!(matches!(
        plan_consume(Some(granted), "acme.refund", "act_2", T0 + TTL + 1),
        Err(Error::ApprovalNeeded(_))
    ));
}

#[test]
fn a_denial_stands_for_its_time_then_the_call_asks_again() {
    let denied = plan_decision(Some(pending()), "apr_1", false, "bob", None, T0).unwrap();
    assert_eq!(
        plan_request(Some(denied.clone()), &ask(), "apr_2", T0 + TTL).unwrap(),
        RequestPlan::Stands(denied.clone())
    );
    match plan_request(Some(denied), &ask(), "apr_2", T0 + TTL + 1).unwrap() {
        RequestPlan::Ask { expire: None, new } => assert_eq!(new.request_id, "apr_2"),
        other => panic!("expected a new request, got {other:?}"),
    }
}

fn held(action: &str, digest: &str, lines: &str) -> EffectRecord {
    EffectRecord {
        effect_key: "refund:pi_1".into(),
        state: EffectState::Committed,
        action_id: "act_1".into(),
        attempt: 1,
        created_at: T0,
        updated_at: T0,
        lease_expires_at: None,
        result: Some("1".into()),
        error: None,
        resolved_by: None,
        attempt_token: Some("t".into()),
        action: Some(action.into()),
        holder: Some("h:1".into()),
        args_digest: Some(digest.into()),
        arg_digests: Some(lines.into()),
        approval_id: None,
    }
}

#[test]
fn a_duplicate_with_other_arguments_or_another_action_is_a_conflict() {
    let row = held(
        "acme.refund",
        "sha256:d1",
        "amount sha256:a1\npayment_id sha256:p1",
    );
    let proposal = |action, digest, lines| Proposal {
        action: Some(action),
        args: Some((digest, lines)),
        ..Proposal::new("refund:pi_1", "act_2", 60_000_000, true)
    };
    // the same arguments: the plain duplicate
    let same = proposal(
        "acme.refund",
        "sha256:d1",
        "amount sha256:a1\npayment_id sha256:p1",
    );
    assert!(matches!(
        plan_reservation(Some(&row), &same, T0 + 1),
        ReservationPlan::Refuse(Refusal::Committed(_))
    ));
    // another amount: a conflict naming it
    let more = proposal(
        "acme.refund",
        "sha256:d2",
        "amount sha256:a2\npayment_id sha256:p1",
    );
    match plan_reservation(Some(&row), &more, T0 + 1) {
        ReservationPlan::Refuse(Refusal::Conflict(DuplicateKind::Committed, _, c)) => {
            assert_eq!(c.fields, vec!["amount".to_owned()]);
            assert_eq!(c.other_action, None);
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    // another action: a conflict naming the holder's action
    let other = proposal(
        "acme.void",
        "sha256:d1",
        "amount sha256:a1\npayment_id sha256:p1",
    );
    match plan_reservation(Some(&row), &other, T0 + 1) {
        ReservationPlan::Refuse(Refusal::Conflict(_, _, c)) => {
            assert_eq!(c.other_action.as_deref(), Some("acme.refund"));
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    // an ambiguous row stays ambiguous whatever the proposal; a failed one is renewed
    let ambiguous = EffectRecord {
        state: EffectState::Ambiguous,
        ..row.clone()
    };
    assert!(matches!(
        plan_reservation(Some(&ambiguous), &more, T0 + 1),
        ReservationPlan::Refuse(Refusal::Ambiguous(_))
    ));
    let failed = EffectRecord {
        state: EffectState::Failed,
        ..row
    };
    match plan_reservation(Some(&failed), &more, T0 + 1) {
        ReservationPlan::Renew { record, .. } => {
            assert_eq!(record.args_digest.as_deref(), Some("sha256:d2"));
            assert_eq!(record.attempt, 2);
        }
        other => panic!("expected a renewal, got {other:?}"),
    }
}

#[test]
fn the_fingerprint_of_arguments_is_the_digest_of_their_canonical_json() {
    let mut parts = vec![
        ("payment_id".to_owned(), "\"pi_1\"".to_owned()),
        ("amount".to_owned(), "500".to_owned()),
    ];
    let (whole, lines) = ctrlrun::fingerprint::digests(&mut parts);
    assert_eq!(
        whole,
        ctrlrun::fingerprint::digest("{\"amount\":500,\"payment_id\":\"pi_1\"}")
    );
    // the value the Python tests compute with hashlib for the same text
    assert_eq!(
        whole,
        "sha256:19abd39052477232765e9f88444260caf22d211bfe08f5827637635c7709c1e6"
    );
    assert_eq!(
        lines,
        format!(
            "amount {}\npayment_id {}",
            ctrlrun::fingerprint::digest("500"),
            ctrlrun::fingerprint::digest("\"pi_1\"")
        )
    );
}
