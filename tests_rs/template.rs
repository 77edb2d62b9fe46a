//! Effect-key templates: docs/spec.md §7 grammar and rendering.

use ctrlrun::{Error, Template};

fn parse(src: &str) -> Template {
    Template::parse(src).unwrap_or_else(|e| panic!("{src:?} should parse: {e}"))
}

/// Parse must fail with InvalidArgument naming the template, the character and its position.
fn refused(src: &str, ch: char, pos: usize) -> String {
    match Template::parse(src) {
        Err(Error::InvalidArgument(m)) => {
            assert!(m.contains(src), "{src:?}: message names the template: {m}");
            assert!(
                m.contains(&format!("{ch:?}")),
                "{src:?}: message names the character {ch:?}: {m}"
            );
            assert!(
                m.contains(&format!("position {pos}")),
                "{src:?}: message names position {pos}: {m}"
            );
            m
        }
        other => panic!("{src:?}: expected InvalidArgument, got {other:?}"),
    }
}

fn placeholders(t: &Template) -> Vec<&str> {
    t.placeholders().iter().map(String::as_str).collect()
}

fn effect_key_error(r: ctrlrun::Result<String>) -> String {
    match r {
        Err(Error::EffectKey(m)) => m,
        other => panic!("expected EffectKey, got {other:?}"),
    }
}

const NONE: [&str; 0] = [];

// ---------------------------------------------------------------------------------------------
// accepted forms
// ---------------------------------------------------------------------------------------------

#[test]
fn literal_only_template_is_a_literal_key() {
    let t = parse("refund:all");
    assert!(t.placeholders().is_empty());
    assert_eq!(t.source(), "refund:all");
    assert_eq!(t.render(&NONE).unwrap(), "refund:all");
}

#[test]
fn one_placeholder() {
    let t = parse("{payment_id}");
    assert_eq!(placeholders(&t), ["payment_id"]);
    assert_eq!(t.render(&["p_1"]).unwrap(), "p_1");
}

#[test]
fn text_around_a_placeholder() {
    let t = parse("refund:{payment_id}:v2");
    assert_eq!(placeholders(&t), ["payment_id"]);
    assert_eq!(t.render(&["txn_1"]).unwrap(), "refund:txn_1:v2");
}

#[test]
fn repeated_placeholder_is_one_name_and_one_value() {
    let t = parse("{a}-{b}-{a}");
    assert_eq!(placeholders(&t), ["a", "b"]);
    assert_eq!(t.render(&["x", "y"]).unwrap(), "x-y-x");
}

#[test]
fn several_placeholders_in_order_of_first_appearance() {
    let t = parse("mail:{to}/{subject}/{batch}");
    assert_eq!(placeholders(&t), ["to", "subject", "batch"]);
    assert_eq!(
        t.render(&["bob@example.com", "hello", "7"]).unwrap(),
        "mail:bob@example.com/hello/7"
    );
    // Adjacent placeholders with no literal between them.
    let t = parse("{x}{y}");
    assert_eq!(placeholders(&t), ["x", "y"]);
    assert_eq!(t.render(&["1", "2"]).unwrap(), "12");
}

#[test]
fn unicode_and_underscore_identifiers() {
    let t = parse("{café}");
    assert_eq!(placeholders(&t), ["café"]);
    assert_eq!(t.render(&["crème"]).unwrap(), "crème");
    let t = parse("k:{_x1}");
    assert_eq!(placeholders(&t), ["_x1"]);
    assert_eq!(t.render(&["v"]).unwrap(), "k:v");
    let t = parse("{_}{名前}");
    assert_eq!(placeholders(&t), ["_", "名前"]);
}

#[test]
fn literal_text_is_kept_verbatim() {
    // No normalisation or trimming of the literal parts.
    let t = parse("  a b\t:{k}:é  ");
    assert_eq!(t.render(&["v"]).unwrap(), "  a b\t:v:é  ");
}

// ---------------------------------------------------------------------------------------------
// refused forms
// ---------------------------------------------------------------------------------------------

#[test]
fn lone_opening_brace_is_refused() {
    refused("{", '{', 0);
}

#[test]
fn lone_closing_brace_is_refused() {
    refused("}", '}', 0);
}

#[test]
fn empty_placeholder_is_refused() {
    refused("{}", '{', 0);
    refused("key:{}", '{', 4);
}

#[test]
fn doubled_braces_are_not_escapes() {
    refused("{{x}}", '{', 1);
}

#[test]
fn attribute_access_is_refused() {
    refused("{a.b}", '.', 2);
}

#[test]
fn index_access_is_refused() {
    refused("{a[0]}", '[', 2);
}

#[test]
fn format_spec_is_refused() {
    refused("{a:>3}", ':', 2);
}

#[test]
fn conversion_is_refused() {
    refused("{a!r}", '!', 2);
}

#[test]
fn identifier_cannot_start_with_a_digit() {
    refused("{1a}", '1', 1);
}

#[test]
fn space_inside_a_placeholder_is_refused() {
    refused("{a b}", ' ', 2);
}

#[test]
fn stray_closing_brace_after_text_is_refused() {
    refused("x}", '}', 1);
    refused("{a}}", '}', 3);
}

#[test]
fn unclosed_placeholder_is_refused() {
    refused("{a", '{', 0);
    refused("key:{abc", '{', 4);
}

#[test]
fn position_counts_characters_not_bytes() {
    // 'é' is two bytes; the '.' is character 7 (byte 8).
    refused("café:{x.y}", '.', 7);
}

#[test]
fn empty_template_is_refused() {
    match Template::parse("") {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("empty"), "{m}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// rendering
// ---------------------------------------------------------------------------------------------

#[test]
fn render_uses_values_in_placeholder_order() {
    let t = parse("{b}:{a}:{b}");
    assert_eq!(placeholders(&t), ["b", "a"]);
    assert_eq!(t.render(&["B", "A"]).unwrap(), "B:A:B");
    let owned = vec!["B".to_string(), "A".to_string()];
    assert_eq!(t.render(&owned).unwrap(), "B:A:B");
}

#[test]
fn render_with_the_wrong_number_of_values_is_an_effect_key_error() {
    let t = parse("{a}:{b}");
    let m = effect_key_error(t.render(&["only"]));
    assert!(m.contains("{a}:{b}"), "names the template: {m}");
    assert!(
        m.contains('a') && m.contains('b'),
        "names the placeholders: {m}"
    );
    effect_key_error(t.render(&["1", "2", "3"]));
    effect_key_error(t.render(&NONE));
    effect_key_error(parse("literal").render(&["extra"]));
}

#[test]
fn render_with_an_empty_value_is_an_effect_key_error() {
    let t = parse("refund:{payment_id}:{n}");
    let m = effect_key_error(t.render(&["", "1"]));
    assert!(m.contains("payment_id"), "names the placeholder: {m}");
    let m = effect_key_error(t.render(&["p", ""]));
    assert!(m.contains("'n'"), "names the placeholder: {m}");
}
