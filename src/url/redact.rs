//! Hiding passwords in store URLs and libpq keyword strings, for messages and logs.

/// `url` with any password replaced by `***`, for messages. Errs towards hiding too much: the
/// user-info password runs from the first `:` after the scheme to the **last** `@` (a password
/// may hold an unescaped `@`), also in malformed URLs (`postgresql:/u:pw@h/db`, `u:pw@h`); a
/// `password=` keyword (any case, spaces around `=`, a quoted value) is hidden in URL query
/// strings and libpq keyword strings alike.
pub fn redact(url: &str) -> String {
    let mut out = url.to_owned();
    if let Some(at) = out.rfind('@') {
        let start = userinfo_start(&out[..at]);
        if let Some(colon) = out[start..at].find(':') {
            out.replace_range(start + colon + 1..at, "***");
        }
    }
    // `host=db password=…` (libpq keywords), not a URL's `?…&password=…`
    let keyword_form = !url.contains("://");
    let mut from = 0;
    while let Some(i) = out[from..].to_ascii_lowercase().find("password") {
        let mut pos = from + i + "password".len();
        let rest = &out[pos..];
        let eq = rest.len() - rest.trim_start().len();
        if !rest[eq..].starts_with('=') {
            from = pos;
            continue;
        }
        pos += eq + 1;
        pos += out[pos..].len() - out[pos..].trim_start().len();
        let end = if out[pos..].starts_with('\'') {
            // a quoted libpq value: up to the closing quote not escaped with a backslash
            let bytes = out.as_bytes();
            let mut j = pos + 1;
            while j < bytes.len() && !(bytes[j] == b'\'' && bytes[j - 1] != b'\\') {
                j += 1;
            }
            (j + 1).min(out.len())
        } else if keyword_form {
            // a libpq keyword value: up to whitespace not escaped with a backslash
            let bytes = out.as_bytes();
            let mut j = pos;
            while j < bytes.len()
                && !(bytes[j].is_ascii_whitespace() && (j == pos || bytes[j - 1] != b'\\'))
            {
                j += 1;
            }
            j
        } else {
            out[pos..]
                .find(|c: char| c == '&' || c.is_whitespace())
                .map_or(out.len(), |j| pos + j)
        };
        out.replace_range(pos..end, "***");
        from = pos + 3;
    }
    out
}

/// Where the user info of `head` (a URL up to its last `@`) starts: after `://`, after a
/// store's scheme and its slashes (`postgresql:/u:pw@…`, `postgresql//u:pw@…`), or at the
/// start (so `user:p:w@host` hides everything after `user:`).
fn userinfo_start(head: &str) -> usize {
    if let Some(i) = head.find("://") {
        return i + 3;
    }
    let lower = head.to_ascii_lowercase();
    for scheme in ["postgresql", "postgres", "sqlite"] {
        if let Some(rest) = lower.strip_prefix(scheme) {
            let rest = rest.strip_prefix(':').unwrap_or(rest);
            if rest.len() < lower.len() - scheme.len() || rest.starts_with('/') {
                return head.len() - rest.trim_start_matches('/').len();
            }
        }
    }
    0
}
