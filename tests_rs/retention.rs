//! Listing by filter and retention on both backends: what a filter selects and which index
//! serves it; what a prune removes, what it never removes, its batches, and the receipts it
//! leaves (the chain still verifies, and a key pruned and reserved again starts a new chain).

use crate::support::*;
use ctrlrun::approval::ApprovalAsk;
use ctrlrun::planner::Proposal;
use ctrlrun::store::retention::{prefix_end, EffectFilter, Prune};
use ctrlrun::{EffectState, Micros};

const DAY: Micros = 86_400_000_000;

fn keys(f: &Fixture, filter: EffectFilter<'_>) -> Vec<String> {
    let rows = f.store.list(&filter).unwrap();
    rows.into_iter().map(|r| r.effect_key).collect()
}

/// `key` reserved by `action` at `at` and settled by `t` a second later (or left reserved).
fn row(f: &Fixture, key: &str, action: &str, at: Micros, t: Option<ctrlrun::Transition>) {
    let mut p = Proposal::new(key, A1, LEASE, true);
    p.action = Some(action);
    let r = f.store.propose(p, Some(at)).unwrap();
    if let Some(t) = t {
        f.step(key, A1, r.attempt, t, at + 1_000_000).unwrap();
    }
}

fn prune_of(days: i64, states: &[EffectState]) -> Prune<'static> {
    Prune {
        older_than: days * DAY,
        states: states.to_vec(),
        drop_receipts: false,
        by: Some("ops"),
        batch: 1000,
    }
}

const SETTLED: [EffectState; 2] = [EffectState::Committed, EffectState::Failed];

fn filters_select_and_limit(b: Backend) {
    let f = Fixture::new(b);
    row(
        &f,
        "refund:pi_2",
        "stripe.refund",
        T0 + 2,
        Some(commit("{}")),
    );
    row(
        &f,
        "refund:pi_1",
        "stripe.refund",
        T0 + 1,
        Some(commit("{}")),
    );
    row(&f, "refunds:x", "stripe.refund", T0 + 3, Some(fail("no")));
    row(&f, "email:a%_", "send_email", T0 + 4, None);
    row(&f, "email:ü€😀", "send_email", T0 + 5, Some(commit("{}")));
    row(&f, "emaim", "send_email", T0 + 6, Some(commit("{}")));
    let by = |prefix| EffectFilter {
        prefix: Some(prefix),
        ..EffectFilter::ALL
    };
    assert_eq!(keys(&f, by("refund:")), ["refund:pi_1", "refund:pi_2"]);
    assert_eq!(
        keys(&f, by("refund")),
        ["refund:pi_1", "refund:pi_2", "refunds:x"]
    );
    // `%` and `_` are plain characters, not patterns.
    assert_eq!(keys(&f, by("email:a%")), ["email:a%_"]);
    assert!(keys(&f, by("email:a_")).is_empty());
    assert_eq!(keys(&f, by("email:ü€")), ["email:ü€😀"]);
    assert_eq!(keys(&f, by("email:")), ["email:a%_", "email:ü€😀"]);
    assert_eq!(keys(&f, by("")).len(), 6);
    assert!(keys(&f, by("zzz")).is_empty());
    let state = |s| EffectFilter::state(Some(s));
    assert_eq!(
        keys(&f, state(EffectState::Committed)),
        ["refund:pi_1", "refund:pi_2", "email:ü€😀", "emaim"]
    );
    assert_eq!(keys(&f, state(EffectState::Executing)), ["email:a%_"]);
    let action = EffectFilter {
        action: Some("send_email"),
        ..EffectFilter::ALL
    };
    assert_eq!(keys(&f, action), ["email:a%_", "email:ü€😀", "emaim"]);
    let all_three = EffectFilter {
        state: Some(EffectState::Committed),
        prefix: Some("email"),
        action: Some("send_email"),
        limit: Some(1),
        ..EffectFilter::ALL
    };
    assert_eq!(keys(&f, all_three), ["email:ü€😀"]);
    let first_two = EffectFilter {
        limit: Some(2),
        ..EffectFilter::ALL
    };
    assert_eq!(keys(&f, first_two), ["refund:pi_1", "refund:pi_2"]);
    let none = EffectFilter {
        action: Some("nope"),
        ..EffectFilter::ALL
    };
    assert!(keys(&f, none).is_empty());
}

/// A prefix longer than the characters PostgreSQL indexes still selects exactly.
fn a_long_prefix_selects_exactly(b: Backend) {
    let f = Fixture::new(b);
    let base = "k".repeat(300);
    row(&f, &format!("{base}a1"), "x", T0, None);
    row(&f, &format!("{base}b1"), "x", T0 + 1, None);
    let prefix = format!("{base}a");
    let found = keys(
        &f,
        EffectFilter {
            prefix: Some(&prefix),
            ..EffectFilter::ALL
        },
    );
    assert_eq!(found, [format!("{base}a1")]);
}

/// A state and a prefix are served by an index, not a scan of the table (an action narrows
/// what they select).
fn each_filter_is_served_by_an_index(b: Backend) {
    let f = Fixture::new(b);
    row(&f, "a:1", "x", T0, Some(commit("{}")));
    let filters = [
        EffectFilter::state(Some(EffectState::Ambiguous)),
        EffectFilter {
            prefix: Some("refund:"),
            ..EffectFilter::ALL
        },
        EffectFilter {
            state: Some(EffectState::Failed),
            action: Some("stripe.refund"),
            limit: Some(10),
            ..EffectFilter::ALL
        },
    ];
    for filter in filters {
        let plan = f.store.explain_list(&filter).unwrap();
        let indexed = match b {
            Backend::Sqlite => {
                plan.contains("USING INDEX ctrlrun_effects_")
                    || plan.contains("USING PRIMARY KEY (effect_key>? AND effect_key<?)")
            }
            Backend::Postgres => {
                plan.contains("Index Scan using ctrlrun_effects_")
                    || plan.contains("Bitmap Index Scan on ctrlrun_effects_")
            }
        };
        assert!(indexed, "{filter:?} is not served by an index:\n{plan}");
        assert!(!plan.contains("Seq Scan"), "{filter:?}:\n{plan}");
    }
}

fn prune_removes_only_old_settled_rows(b: Backend) {
    let f = Fixture::new(b);
    row(&f, "old-committed", "x", T0, Some(commit("{}")));
    row(&f, "old-failed", "x", T0, Some(fail("no")));
    row(&f, "old-ambiguous", "x", T0, Some(mark("unknown")));
    row(&f, "old-executing", "x", T0, None);
    let r = f.reserve("old-reserved", A1, T0).unwrap();
    assert_eq!(r.state, EffectState::Reserved);
    row(&f, "new-committed", "x", T0 + 20 * DAY, Some(commit("{}")));
    // Created long ago, settled recently: the last write counts.
    row(&f, "late", "x", T0, Some(mark("unknown")));
    f.store
        .resolve("late", EffectState::Committed, "ops", Some(T0 + 25 * DAY))
        .unwrap();
    let now = Some(T0 + 40 * DAY);
    let p = prune_of(30, &SETTLED);
    assert_eq!(f.store.count_prunable(&p, now).unwrap(), 2);
    assert_eq!(f.store.prune(&p, now, &mut |_| true).unwrap(), 2);
    let mut left = keys(&f, EffectFilter::ALL);
    left.sort();
    assert_eq!(
        left,
        [
            "late",
            "new-committed",
            "old-ambiguous",
            "old-executing",
            "old-reserved"
        ]
    );
    assert_eq!(f.store.prune(&p, now, &mut |_| true).unwrap(), 0);
    // Only the states asked for.
    row(&f, "c2", "x", T0, Some(commit("{}")));
    row(&f, "f2", "x", T0, Some(fail("no")));
    let failed_only = prune_of(30, &[EffectState::Failed]);
    assert_eq!(f.store.prune(&failed_only, now, &mut |_| true).unwrap(), 1);
    assert!(f.store.get("f2").unwrap().is_none());
    assert!(f.store.get("c2").unwrap().is_some());
    // A pruned key is forgotten: it runs again.
    let again = f.reserve("old-committed", A2, T0 + 41 * DAY).unwrap();
    assert_eq!((again.attempt, again.state), (1, EffectState::Reserved));
}

fn prune_refuses_what_it_must_never_do(b: Backend) {
    let f = Fixture::new(b);
    row(&f, "a", "x", T0, Some(mark("unknown")));
    let now = Some(T0 + 40 * DAY);
    for state in [
        EffectState::Ambiguous,
        EffectState::Reserved,
        EffectState::Executing,
    ] {
        let m = assert_invalid(f.store.prune(&prune_of(1, &[state]), now, &mut |_| true));
        assert!(m.contains("never pruned"), "{m}");
    }
    let m = assert_invalid(f.store.prune(&prune_of(0, &SETTLED), now, &mut |_| true));
    assert!(m.contains("positive"), "{m}");
    let m = assert_invalid(f.store.prune(&prune_of(1, &[]), now, &mut |_| true));
    assert!(m.contains("empty"), "{m}");
    let mut p = prune_of(1, &SETTLED);
    p.batch = 0;
    assert_invalid(f.store.prune(&p, now, &mut |_| true));
    assert_eq!(f.get("a").state, EffectState::Ambiguous);
}

fn an_open_approval_keeps_its_row(b: Backend) {
    let f = Fixture::new(b);
    row(&f, "k1", "x", T0, Some(fail("declined")));
    row(&f, "k2", "x", T0, Some(fail("declined")));
    let ask = |key| ApprovalAsk {
        action: "x",
        args_digest: "d",
        effect_key: key,
        arguments: "{}",
        ttl: 100 * DAY,
        requested_by: None,
        approvals_needed: 1,
    };
    f.store
        .request_approval(&ask("k1"), Some(T0 + 39 * DAY))
        .unwrap();
    let short = ApprovalAsk {
        ttl: DAY,
        ..ask("k2")
    };
    // k2's request ran out long ago: it no longer holds the row.
    f.store
        .request_approval(&short, Some(T0 + 2 * DAY))
        .unwrap();
    let now = Some(T0 + 40 * DAY);
    assert_eq!(
        f.store
            .prune(&prune_of(30, &SETTLED), now, &mut |_| true)
            .unwrap(),
        1
    );
    assert!(f.store.get("k1").unwrap().is_some());
    assert!(f.store.get("k2").unwrap().is_none());
}

fn prune_goes_in_batches(b: Backend) {
    let f = Fixture::new(b);
    for i in 0..25 {
        // Several rows share a creation time: the walk must still move on.
        row(&f, &format!("k{i:02}"), "x", T0 + i / 4, Some(commit("{}")));
    }
    row(&f, "amb", "x", T0, Some(mark("unknown")));
    let mut p = prune_of(30, &SETTLED);
    p.batch = 4;
    let mut heard = Vec::new();
    let now = Some(T0 + 40 * DAY);
    let removed = f
        .store
        .prune(&p, now, &mut |n| {
            heard.push(n);
            true
        })
        .unwrap();
    assert_eq!(removed, 25);
    assert!(heard.len() >= 7, "{heard:?}");
    assert_eq!(heard.last(), Some(&25));
    assert!(heard.windows(2).all(|w| w[0] <= w[1]), "{heard:?}");
    assert_eq!(keys(&f, EffectFilter::ALL), ["amb"]);
    // Stopped after a batch: what was removed stays removed, the rest stays.
    for i in 0..10 {
        row(&f, &format!("s{i}"), "x", T0, Some(commit("{}")));
    }
    let removed = f.store.prune(&p, now, &mut |_| false).unwrap();
    assert_eq!(removed, 4);
    assert_eq!(f.store.list(&EffectFilter::ALL).unwrap().len(), 7);
}

fn receipts_stay_and_the_chain_verifies(b: Backend) {
    let f = Fixture::new(b);
    row(&f, "k", "x", T0, Some(commit("{}")));
    row(&f, "gone", "x", T0, Some(commit("{}")));
    let now = Some(T0 + 40 * DAY);
    assert_eq!(
        f.store
            .prune(&prune_of(30, &SETTLED), now, &mut |_| true)
            .unwrap(),
        2
    );
    let chain = f.store.list_receipts(Some("k"), None).unwrap();
    let kinds: Vec<&str> = chain.iter().map(|r| r.kind.as_str()).collect();
    assert_eq!(kinds, ["reservation", "outcome", "pruned"]);
    let last = chain.last().unwrap();
    assert_eq!(
        (
            last.seq,
            last.actor.as_deref(),
            last.state.as_str(),
            last.at
        ),
        (3, Some("ops"), "committed", T0 + 40 * DAY)
    );
    assert_eq!(last.prev_hash.as_deref(), Some(chain[1].hash.as_str()));
    assert!(f.store.verify_receipts().unwrap().broken.is_none());
    // Reserved again: a new chain after the pruned one, and everything still verifies.
    let r = f
        .store
        .reserve("k", A2, LEASE, true, Some(T0 + 41 * DAY))
        .unwrap();
    f.step("k", A2, r.attempt, commit("{}"), T0 + 41 * DAY + 5)
        .unwrap();
    let chain = f.store.list_receipts(Some("k"), None).unwrap();
    let seqs: Vec<i64> = chain.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, [1, 2, 3, 1, 2]);
    let v = f.store.verify_receipts().unwrap();
    assert!(v.broken.is_none(), "{v:?}");
    // With drop_receipts the pruned effect's chain goes too.
    let mut p = prune_of(30, &SETTLED);
    p.drop_receipts = true;
    assert_eq!(
        f.store
            .prune(&p, Some(T0 + 80 * DAY), &mut |_| true)
            .unwrap(),
        1
    );
    assert!(f.store.list_receipts(Some("k"), None).unwrap().is_empty());
    assert!(f.store.verify_receipts().unwrap().broken.is_none());
}

fn prefix_end_is_the_next_text() {
    assert_eq!(prefix_end("ab").as_deref(), Some("ac"));
    assert_eq!(prefix_end("a\u{10FFFF}").as_deref(), Some("b"));
    assert_eq!(prefix_end("\u{D7FF}").as_deref(), Some("\u{E000}"));
    assert_eq!(prefix_end("\u{10FFFF}"), None);
    assert_eq!(prefix_end(""), None);
}

#[test]
fn the_end_of_a_prefix_range() {
    prefix_end_is_the_next_text();
}

/// A row deleted outside ctrlrun (no `pruned` receipt) breaks the verification.
#[test]
fn a_row_deleted_by_hand_is_found() {
    let f = Fixture::new(Backend::Sqlite);
    row(&f, "k", "x", T0, Some(commit("{}")));
    let conn = rusqlite::Connection::open(f.db()).unwrap();
    conn.execute("DELETE FROM ctrlrun_effects WHERE effect_key = 'k'", [])
        .unwrap();
    let broken = f.store.verify_receipts().unwrap().broken.expect("broken");
    assert_eq!(broken.effect_key, "k");
    assert!(broken.why.contains("no row"), "{}", broken.why);
}

on_both_backends!(
    filters_select_and_limit,
    a_long_prefix_selects_exactly,
    each_filter_is_served_by_an_index,
    prune_removes_only_old_settled_rows,
    prune_refuses_what_it_must_never_do,
    an_open_approval_keeps_its_row,
    prune_goes_in_batches,
    receipts_stay_and_the_chain_verifies,
);
