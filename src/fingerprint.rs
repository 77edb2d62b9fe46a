//! The digests of a call's arguments: from each argument's canonical JSON text (made by the
//! binding, `python/ctrlrun/call/fingerprint.py`), a `sha256:` digest per argument and one of the whole,
//! which is the digest of the canonical JSON object of all of them (keys sorted). One place
//! computes them, for the reservation's row and for an approval request alike.

/// `sha256:` + 64 lowercase hex digits of the UTF-8 bytes of `text`.
pub fn digest(text: &str) -> String {
    let hash = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    let mut out = String::with_capacity(71);
    out.push_str("sha256:");
    for byte in hash.as_ref() {
        out.push(char::from(b"0123456789abcdef"[usize::from(byte >> 4)]));
        out.push(char::from(b"0123456789abcdef"[usize::from(byte & 15)]));
    }
    out
}

/// `name` as a JSON string, as Python's `json.dumps(name, ensure_ascii=False)` writes it.
fn json_quote(name: &str, out: &mut String) {
    out.push('"');
    for c in name.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// From `(name, canonical JSON text)` per argument: the digest of the whole and the
/// per-argument `name digest` lines, both in name order.
pub fn digests(parts: &mut [(String, String)]) -> (String, String) {
    parts.sort_by(|a, b| a.0.cmp(&b.0));
    let mut whole = String::from("{");
    let mut lines = String::new();
    for (i, (name, text)) in parts.iter().enumerate() {
        if i > 0 {
            whole.push(',');
            lines.push('\n');
        }
        json_quote(name, &mut whole);
        whole.push(':');
        whole.push_str(text);
        lines.push_str(name);
        lines.push(' ');
        lines.push_str(&digest(text));
    }
    whole.push('}');
    (digest(&whole), lines)
}
