//! Store URLs (SPEC §8.3), following the SQLAlchemy convention for SQLite:
//! `sqlite:///relative/state.db` (relative to the working directory),
//! `sqlite:////abs/state.db` (absolute); a bare path is a SQLite file too.
//! Query options: `synchronous=full|normal`, `busy_timeout=<seconds>`.
//! PostgreSQL: `postgresql://user@host:port/db?schema=NAME` (schema default `public`); other
//! options go to the driver.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};

/// SQLite's `PRAGMA synchronous` level for the WAL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Synchronous {
    /// fsync the WAL on every commit: a committed reservation survives power loss (default).
    Full,
    /// fsync at checkpoints only: faster; the last commits can be lost on power loss.
    Normal,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SqliteOptions {
    pub path: PathBuf,
    pub synchronous: Synchronous,
    /// How long a writer waits for SQLite's write lock before the write fails.
    pub busy_timeout: Duration,
}

#[derive(Clone, Debug, PartialEq)]
pub enum StoreUrl {
    Sqlite(SqliteOptions),
    /// `url` is the driver's connection URL: without our own options (`schema`, `pool_size`,
    /// `timeout`) and the TLS ones, which `tls` holds.
    Postgres {
        url: String,
        schema: String,
        /// At most this many connections per store (per process): `pool_size`, default 16.
        pool_size: usize,
        /// The bound on every exchange with the server (`timeout`, seconds; default 30).
        timeout: Duration,
        tls: PgTls,
    },
}

/// libpq's `sslmode`, as libpq means it (`allow` is refused: it tries plaintext first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    /// Plaintext only.
    Disable,
    /// TLS when the server offers it (no certificate check), else plaintext (the default).
    Prefer,
    /// TLS or nothing; the certificate is checked against `sslrootcert` only if one is given.
    Require,
    /// TLS, and the server's certificate chain must lead to a root in `sslrootcert`.
    VerifyCa,
    /// As `VerifyCa`, and the certificate must name the host connected to.
    VerifyFull,
}

/// The TLS settings of a PostgreSQL URL (libpq's names and meanings).
#[derive(Clone, Debug, PartialEq)]
pub struct PgTls {
    pub mode: SslMode,
    /// `sslrootcert`: PEM file of trusted roots; `None`: `~/.postgresql/root.crt` for the
    /// verify modes, as libpq does.
    pub root_cert: Option<PathBuf>,
    /// `sslcert` / `sslkey`: a client certificate and its key (PEM), for servers that ask.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

/// The bound on each exchange with a PostgreSQL server unless the URL sets `timeout`.
pub const DEFAULT_PG_TIMEOUT: Duration = Duration::from_secs(30);

pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// Connections per PostgreSQL store unless the URL sets `pool_size`.
pub const DEFAULT_POOL_SIZE: usize = 16;
/// The largest `pool_size` accepted (a server's `max_connections` is far lower in practice).
pub const MAX_POOL_SIZE: usize = 1000;

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

fn memory_refused(url: &str) -> Error {
    Error::InvalidArgument(format!(
        "store URL {url:?} names an in-memory SQLite database, which cannot reserve an effect \
         across connections or processes; give a file path such as sqlite:///.ctrlrun/state.db"
    ))
}

/// Why a string without `://` is a malformed URL rather than a file path: it starts with a
/// scheme (`postgresql:/…`, `sqlite:x.db`, `redis:…`), or with a store's scheme name followed by
/// a slash (`postgresql//…`). `None`: a plain path. One-letter schemes are drive letters.
fn malformed_url(s: &str) -> Option<String> {
    let lower = s.to_ascii_lowercase();
    for known in ["postgresql", "postgres", "sqlite"] {
        if let Some(rest) = lower.strip_prefix(known) {
            if rest.starts_with(['/', ':']) {
                return Some(format!(
                    "starts with the scheme '{known}' but is missing the '://' after it"
                ));
            }
        }
    }
    let scheme_len = s
        .find(':')
        .filter(|&i| i >= 2)
        .filter(|_| s.as_bytes()[0].is_ascii_alphabetic())
        .filter(|&i| {
            s[..i]
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
        })?;
    Some(format!(
        "starts with a URL scheme ('{}:') but has no '://'",
        &s[..scheme_len]
    ))
}

/// Parse a store URL or a bare SQLite path.
pub fn parse(url: &str) -> Result<StoreUrl> {
    let shown = redact(url);
    let url_trim = url.trim();
    if url_trim.is_empty() {
        return Err(Error::InvalidArgument("store URL must not be empty".into()));
    }
    let (path, query) = match url_trim.split_once("://") {
        None => {
            // `host=db dbname=app`, `service=prod`, `host = db`: a libpq keyword string, never
            // a file name (each host would otherwise reserve in a file of its own).
            let first = url_trim.split(['=', ' ', '\t']).next().unwrap_or("");
            let after = url_trim[first.len()..].trim_start();
            let keyword = !first.is_empty()
                && first
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_')
                && after.starts_with('=');
            if keyword {
                return Err(Error::InvalidArgument(format!(
                    "store URL {shown:?} looks like a libpq keyword string; write it as \
                     postgresql://user:password@host:port/db (a bare path is a SQLite file)"
                )));
            }
            if (url_trim.starts_with("file:") || url_trim == ":memory:")
                && (url_trim.contains(":memory:") || url_trim.contains("mode=memory"))
            {
                return Err(memory_refused(&shown));
            }
            if let Some(why) = malformed_url(url_trim) {
                return Err(Error::InvalidArgument(format!(
                    "store URL {shown:?} {why}; it is refused rather than taken as a SQLite file                      path (each host would reserve in a file of its own). Write \
                     postgresql://user:password@host:port/db, sqlite:///relative/path.db or \
                     sqlite:////absolute/path.db"
                )));
            }
            (url_trim.to_owned(), None)
        }
        Some((scheme, rest)) => match scheme.to_ascii_lowercase().as_str() {
            "sqlite" => {
                let (p, q) = match rest.split_once('?') {
                    Some((p, q)) => (p, Some(q)),
                    None => (rest, None),
                };
                let Some(p) = p.strip_prefix('/') else {
                    return Err(Error::InvalidArgument(format!(
                        "store URL {shown:?}: a SQLite URL has no host; write sqlite:///relative/path.db \
                         or sqlite:////absolute/path.db"
                    )));
                };
                if p.is_empty() {
                    return Err(Error::InvalidArgument(format!(
                        "store URL {shown:?} has no file path (an in-memory database is refused); \
                         write sqlite:///relative/path.db or sqlite:////absolute/path.db"
                    )));
                }
                (p.to_owned(), q)
            }
            "postgresql" | "postgres" => return parse_postgres(url_trim),
            other => {
                return Err(Error::InvalidArgument(format!(
                    "unknown store URL scheme '{other}' in {shown:?}; expected sqlite:///path.db \
                     (or a bare file path) or postgresql://user@host:port/db"
                )))
            }
        },
    };
    if path == ":memory:" || path.starts_with("file::memory:") {
        return Err(memory_refused(&shown));
    }
    let mut opts = SqliteOptions {
        path: PathBuf::from(path),
        synchronous: Synchronous::Full,
        busy_timeout: DEFAULT_BUSY_TIMEOUT,
    };
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "synchronous" => {
                opts.synchronous = match v.to_ascii_lowercase().as_str() {
                    "full" => Synchronous::Full,
                    "normal" => Synchronous::Normal,
                    _ => {
                        return Err(Error::InvalidArgument(format!(
                            "store URL {shown:?}: synchronous must be 'full' or 'normal', got {v:?}"
                        )))
                    }
                }
            }
            "busy_timeout" => {
                let secs: f64 = v.parse().map_err(|_| {
                    Error::InvalidArgument(format!(
                        "store URL {shown:?}: busy_timeout must be a number of seconds, got {v:?}"
                    ))
                })?;
                if !(secs.is_finite() && (0.0..86_400.0).contains(&secs)) {
                    return Err(Error::InvalidArgument(format!(
                        "store URL {shown:?}: busy_timeout must be between 0 and 86400 seconds, got {v:?}"
                    )));
                }
                opts.busy_timeout = Duration::from_secs_f64(secs);
            }
            "mode" if v == "memory" => return Err(memory_refused(&shown)),
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "store URL {shown:?}: unknown option '{k}' (SQLite accepts synchronous and busy_timeout)"
                )))
            }
        }
    }
    Ok(StoreUrl::Sqlite(opts))
}

/// `postgresql://user@host:port/db?schema=NAME&pool_size=N&...`: pull out `schema` (default
/// `public`) and `pool_size` (default 16); the rest is the driver's connection URL. A schema
/// name is plain: letters, digits, `_`.
fn parse_postgres(url: &str) -> Result<StoreUrl> {
    let shown = || redact(url);
    check_userinfo(url).map_err(|why| {
        Error::InvalidArgument(format!(
            "store URL {:?}: {why}; write special characters of the user name and password \
             percent-encoded (%40 for @, %3F for ?, %2F for /, %23 for #)",
            shown()
        ))
    })?;
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, q),
        None => (url, ""),
    };
    let mut schema = String::from("public");
    let mut pool_size = DEFAULT_POOL_SIZE;
    let mut timeout = DEFAULT_PG_TIMEOUT;
    let mut tls = PgTls {
        mode: SslMode::Prefer,
        root_cert: None,
        cert: None,
        key: None,
    };
    let mut rest = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("schema", v)) => schema = v.to_owned(),
            Some(("pool_size", v)) => {
                let digits = !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit());
                pool_size = match v.parse::<usize>() {
                    Ok(n) if digits && (1..=MAX_POOL_SIZE).contains(&n) => n,
                    _ => {
                        return Err(Error::InvalidArgument(format!(
                            "store URL {:?}: pool_size must be a whole number of connections \
                             from 1 to {MAX_POOL_SIZE}, got {v:?}",
                            shown()
                        )))
                    }
                }
            }
            Some(("timeout", v)) => {
                timeout = match v.parse::<f64>() {
                    Ok(secs) if secs.is_finite() && (0.1..=3600.0).contains(&secs) => {
                        Duration::from_secs_f64(secs)
                    }
                    _ => {
                        return Err(Error::InvalidArgument(format!(
                            "store URL {:?}: timeout must be a number of seconds from 0.1 to \
                             3600 (the bound on every exchange with the server), got {v:?}",
                            shown()
                        )))
                    }
                }
            }
            Some(("sslmode", v)) => {
                tls.mode = match v {
                    "disable" => SslMode::Disable,
                    "prefer" => SslMode::Prefer,
                    "require" => SslMode::Require,
                    "verify-ca" => SslMode::VerifyCa,
                    "verify-full" => SslMode::VerifyFull,
                    _ => {
                        return Err(Error::InvalidArgument(format!(
                            "store URL {:?}: sslmode must be disable, prefer, require, verify-ca \
                             or verify-full, got {v:?}",
                            shown()
                        )))
                    }
                }
            }
            Some((name @ ("sslrootcert" | "sslcert" | "sslkey"), v)) => {
                if v.is_empty() {
                    return Err(Error::InvalidArgument(format!(
                        "store URL {:?}: {name} is empty; give the path of a PEM file",
                        shown()
                    )));
                }
                let path = Some(PathBuf::from(percent_decode(v)));
                match name {
                    "sslrootcert" => tls.root_cert = path,
                    "sslcert" => tls.cert = path,
                    _ => tls.key = path,
                }
            }
            _ => rest.push(pair),
        }
    }
    if tls.cert.is_some() != tls.key.is_some() {
        return Err(Error::InvalidArgument(format!(
            "store URL {:?}: sslcert and sslkey go together (a client certificate and its key)",
            shown()
        )));
    }
    if tls.mode == SslMode::Disable && (tls.root_cert.is_some() || tls.cert.is_some()) {
        return Err(Error::InvalidArgument(format!(
            "store URL {:?}: sslmode=disable with certificates given; remove them or choose a \
             TLS mode (require, verify-ca, verify-full)",
            shown()
        )));
    }
    let valid = !schema.is_empty()
        && schema.len() <= 63
        && schema
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !schema.starts_with(|c: char| c.is_ascii_digit());
    if !valid {
        return Err(Error::Store(format!(
            "PostgreSQL schema name {schema:?} is not allowed: use 1 to 63 ASCII letters, digits \
             and underscores, not starting with a digit (no quotes, semicolons or spaces)"
        )));
    }
    // The driver knows disable, prefer and require; the verify modes are require plus our
    // certificate checks.
    let driver_mode = match tls.mode {
        SslMode::Disable => "disable",
        SslMode::Prefer => "prefer",
        _ => "require",
    };
    rest.push(match driver_mode {
        "disable" => "sslmode=disable",
        "prefer" => "sslmode=prefer",
        _ => "sslmode=require",
    });
    let url = format!("{base}?{}", rest.join("&"));
    Ok(StoreUrl::Postgres {
        url,
        schema,
        pool_size,
        timeout,
        tls,
    })
}

/// A user name or password with an unescaped `@`, `?`, `/` or `#` would be split in the wrong
/// place: part of the password read as the host (and shown in messages), or the options read
/// from inside the password (an `sslmode=require` silently lost). Refused.
fn check_userinfo(url: &str) -> std::result::Result<(), &'static str> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let query_at = rest.find('?').unwrap_or(rest.len());
    let (before, query) = rest.split_at(query_at);
    if query.contains('@') || query[query.len().min(1)..].contains('?') || rest.contains('#') {
        return Err("an '@', '?' or '#' appears where only the password could hold it");
    }
    let ats = before.matches('@').count();
    if ats > 1 {
        return Err("the user info holds more than one '@'");
    }
    if let (Some(at), Some(slash)) = (before.rfind('@'), before.find('/')) {
        if slash < at {
            return Err("a '/' comes before the '@' that ends the user info");
        }
    }
    Ok(())
}

/// `%XX` escapes in a URL query value (a path with spaces), decoded; anything else as is.
fn percent_decode(v: &str) -> String {
    let bytes = v.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
