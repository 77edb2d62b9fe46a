//! People's names as the approval rules compare them (`ctrlrun::planner::name_key`) and what a
//! name may not hold (`check_name`), and the planners that use them, pure.

use ctrlrun::approval::{ApprovalAsk, ApprovalRecord, ApprovalState, ApproverRecord};
use ctrlrun::planner::{
    check_approver_name, check_name, name_key, plan_approver, plan_decision, plan_request,
    same_person, RequestPlan,
};
use ctrlrun::{Error, Micros};

const T0: Micros = 1_800_000_000_000_000;

fn refusal(r: ctrlrun::Result<()>) -> String {
    match r {
        Err(Error::InvalidArgument(m)) => m,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn a_name_is_compared_without_case_width_or_spaces_at_either_end() {
    for same in [
        "Refund-Agent",
        "refund-agent ",
        " REFUND-AGENT\t",
        "\u{a0}refund-agent\u{3000}", // no-break and ideographic spaces
        "ｒｅｆｕｎｄ－ａｇｅｎｔ",   // fullwidth, NFKC-equivalent
    ] {
        assert_eq!(name_key(same), "refund-agent", "{same:?}");
        assert!(same_person(same, "refund-agent"), "{same:?}");
    }
    // full case folding, not lowercasing: ß is ss, final sigma is sigma, the Kelvin sign is k
    assert!(same_person("Straße", "STRASSE"));
    assert!(same_person("ΣΑΣ", "σας"));
    assert!(same_person("\u{212a}elvin", "kelvin"));
    assert!(same_person("ﬁnn", "FINN")); // the ligature is two letters (NFKC)
                                         // a letter that folding leaves decomposed is the same as its precomposed spelling
    assert!(same_person("\u{0390}", "\u{03aa}\u{0301}"));
    assert!(same_person("e\u{0301}lodie", "\u{c9}LODIE"));
    // but a name is otherwise as typed: other letters and inner spaces count
    for (a, b) in [
        ("alice", "alicé"),
        ("alice smith", "alice  smith"),
        ("alice", "alice2"),
        ("ali", "alice"),
    ] {
        assert!(!same_person(a, b), "{a:?} {b:?}");
    }
    assert_eq!(name_key("Zoë O'Brien"), "zoë o'brien");
}

#[test]
fn the_comparison_form_is_its_own_comparison_form() {
    // Every character the check lets through: its key's key is its key, so whichever
    // spelling is stored, comparing it again gives the same answer.
    for c in (0..=0x10FFFFu32).filter_map(char::from_u32) {
        let s = c.to_string();
        if check_name("x", &s).is_err() {
            continue;
        }
        let key = name_key(&s);
        assert_eq!(name_key(&key), key, "U+{:04X}", c as u32);
    }
}

#[test]
fn control_bidi_and_invisible_characters_are_refused_by_code_point() {
    for (c, kind) in [
        ('\u{0007}', "a control character"),
        ('\u{0000}', "a control character"),
        ('\u{0085}', "a control character"),
        ('\u{202E}', "a bidirectional control"),
        ('\u{202A}', "a bidirectional control"),
        ('\u{200E}', "a bidirectional control"),
        ('\u{200F}', "a bidirectional control"),
        ('\u{061C}', "a bidirectional control"),
        ('\u{2066}', "a bidirectional control"),
        ('\u{2069}', "a bidirectional control"),
        ('\u{2028}', "a line or paragraph separator"),
        ('\u{200B}', "an invisible format character"),
        ('\u{200C}', "an invisible format character"),
        ('\u{200D}', "an invisible format character"),
        ('\u{2060}', "an invisible format character"),
        ('\u{FEFF}', "an invisible format character"),
        ('\u{00AD}', "an invisible format character"),
        ('\u{E0041}', "an invisible format character"),
        ('\u{110BD}', "an invisible format character"), // Cf beyond the BMP
    ] {
        let name = format!("refund{c}-agent");
        let m = refusal(check_name("requested_by", &name));
        let code = format!("U+{:04X}", c as u32);
        assert!(m.starts_with("requested_by \"refund\\u{"), "{m}");
        assert!(
            m.contains(&format!("holds {code} ({kind}) at character 7")),
            "{m}"
        );
        assert!(
            m.contains("nothing was written (type the name without it)"),
            "{m}"
        );
        assert!(!m.contains(c), "the refusal shows {code} raw: {m:?}");
        // an approver's name is refused alike
        let m = refusal(check_approver_name(&name));
        assert!(m.contains(&code) && !m.contains(c), "{m:?}");
    }
    // the first bad character is named; a quote in the name is escaped
    let m = refusal(check_name("the decider (--by)", "a\"b\u{200B}\u{202E}"));
    assert!(m.contains(r#""a\"b\u{200B}\u{202E}" holds U+200B"#), "{m}");
}

#[test]
fn an_empty_or_overlong_name_is_refused_and_letters_of_any_script_are_not() {
    for empty in ["", "   ", "\u{3000}", "\u{a0} "] {
        assert!(refusal(check_name("requested_by", empty)).contains("is empty"));
    }
    let long = "é".repeat(201);
    assert!(refusal(check_name("requested_by", &long)).contains("201 characters"));
    for fine in [
        "é".repeat(200).as_str(),
        "Zoë O'Brien",
        "李小龍",
        "مهدی",
        "cli:alice",
        "ｒｅｆｕｎｄ",
        "👩\u{1F3FD}",
    ] {
        check_name("requested_by", fine).unwrap_or_else(|e| panic!("{fine:?}: {e}"));
    }
    // an account's name also has no space at either end; a decider's may
    assert!(refusal(check_approver_name("alice ")).contains("no space at either end"));
    check_name("the decider (--by)", "alice ").unwrap();
}

fn ask(requested_by: Option<&str>, approvals_needed: i64) -> ApprovalAsk<'_> {
    ApprovalAsk {
        action: "acme.refund",
        args_digest: "sha256:aa",
        effect_key: "refund:pi_1",
        arguments: "{}",
        ttl: 900_000_000,
        requested_by,
        approvals_needed,
    }
}

fn pending(requested_by: Option<&str>, approvals_needed: i64) -> ApprovalRecord {
    match plan_request(None, &ask(requested_by, approvals_needed), "apr_1", T0).unwrap() {
        RequestPlan::Ask { new, .. } => new,
        other => panic!("{other:?}"),
    }
}

#[test]
fn who_asked_cannot_grant_by_another_spelling_of_their_name() {
    let asked = pending(Some("refund-agent"), 1);
    for by in [
        "Refund-Agent",
        "refund-agent ",
        "ｒｅｆｕｎｄ－ａｇｅｎｔ",
        "refund-agent",
    ] {
        let r = plan_decision(Some(asked.clone()), "apr_1", true, by, None, T0 + 1);
        let m = match r {
            Err(Error::InvalidArgument(m)) => m,
            other => panic!("{by:?} granted its own request: {other:?}"),
        };
        assert!(m.contains("cannot grant it"), "{m}");
        if by != "refund-agent" {
            assert!(m.contains("the same name as \"refund-agent\""), "{m}");
        }
    }
    // another person grants it, recorded under the name as typed
    let granted = plan_decision(Some(asked), "apr_1", true, "Alice ", None, T0 + 1).unwrap();
    assert_eq!(granted.decided_by.as_deref(), Some("Alice "));
    // a principal the check refuses is refused when it asks
    let m = match plan_request(None, &ask(Some("refund\u{202E}"), 1), "apr_2", T0) {
        Err(Error::InvalidArgument(m)) => m,
        other => panic!("{other:?}"),
    };
    assert!(m.contains("U+202E") && !m.contains('\u{202E}'), "{m}");
}

#[test]
fn two_approvers_are_two_people_however_they_spell_their_names() {
    let half = plan_decision(Some(pending(None, 2)), "apr_1", true, "alice", None, T0).unwrap();
    assert_eq!(
        (half.state, half.granted_by.clone()),
        (ApprovalState::Pending, vec!["alice".to_owned()])
    );
    for by in ["ALICE ", "Alice", "ａｌｉｃｅ", "alice"] {
        let r = plan_decision(Some(half.clone()), "apr_1", true, by, None, T0 + 1);
        let m = match r {
            Err(Error::InvalidArgument(m)) => m,
            other => panic!("{by:?} counted as a second approver: {other:?}"),
        };
        assert!(
            m.contains("already granted") && m.contains("(1 so far)"),
            "{m}"
        );
    }
    let full = plan_decision(Some(half), "apr_1", true, "Bob", None, T0 + 2).unwrap();
    assert_eq!(
        (full.state, full.granted_by),
        (
            ApprovalState::Granted,
            vec!["alice".to_owned(), "Bob".to_owned()]
        )
    );
}

#[test]
fn an_account_is_refused_when_another_has_its_name_by_another_spelling() {
    let alice = plan_approver(Vec::new(), "alice", "scrypt$1", true, T0).unwrap();
    for twin in ["Alice", "ALICE", "ａｌｉｃｅ"] {
        let r = plan_approver(vec![alice.clone()], twin, "scrypt$2", true, T0 + 1);
        let m = match r {
            Err(Error::InvalidArgument(m)) => m,
            other => panic!("{twin:?} made a second account: {other:?}"),
        };
        assert!(
            m.contains("an approver named \"alice\" already exists") && m.contains("same name"),
            "{m}"
        );
    }
    let bob = plan_approver(vec![alice.clone()], "Bob", "scrypt$2", true, T0 + 1).unwrap();
    assert_eq!(
        bob,
        ApproverRecord {
            name: "Bob".into(),
            secret_hash: "scrypt$2".into(),
            created_at: T0 + 1,
            updated_at: T0 + 1,
        }
    );
    // a reset names the account exactly as it is stored
    let reset = plan_approver(vec![alice], "alice", "scrypt$3", false, T0 + 2).unwrap();
    assert_eq!(reset.secret_hash, "scrypt$3");
}
