//! Store URLs (docs/spec.md §8.3), following the SQLAlchemy convention for SQLite:
//! `sqlite:///relative/state.db` (relative to the working directory),
//! `sqlite:////abs/state.db` (absolute); a bare path is a SQLite file too.
//! Query options: `synchronous=full|normal`, `busy_timeout=<seconds>`, `file_mode=<octal>`
//! (the mode of a file and folder the store creates; default 0600), `group_commit=on|off`,
//! `group_commit_wait=<seconds>`.
//! PostgreSQL: `postgresql://user@host:port/db?schema=NAME` (schema default `public`); other
//! options go to the driver.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};

mod options;
mod postgres;
mod redact;
pub use options::{
    PgRisks, PgTls, PostgresOptions, SqliteOptions, SslMode, StoreUrl, Synchronous,
    DEFAULT_BUSY_TIMEOUT, DEFAULT_FILE_MODE, DEFAULT_GROUP_COMMIT_WAIT, DEFAULT_PG_TIMEOUT,
    DEFAULT_POOL_SIZE, MAX_POOL_SIZE,
};
use postgres::parse_postgres;
pub use redact::redact;

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

/// `file_mode`: octal permission bits (`0600`, `640`) that leave the owner read and write.
fn file_mode(shown: &str, v: &str) -> Result<u32> {
    let mode = (!v.is_empty() && v.bytes().all(|b| (b'0'..=b'7').contains(&b)))
        .then(|| u32::from_str_radix(v, 8).unwrap_or(u32::MAX)) // too long: out of range
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "store URL {shown:?}: file_mode must be an octal mode such as 0600 or 0640, \
                 got {v:?}"
            ))
        })?;
    if !(0o600..=0o777).contains(&mode) {
        return Err(Error::InvalidArgument(format!(
            "store URL {shown:?}: file_mode must be from 0600 to 0777 (the owner reads and \
             writes the store; no setuid, setgid or sticky bit), got {v:?}"
        )));
    }
    Ok(mode)
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
                    "store URL {shown:?} {why}; it is refused rather than taken as a SQLite file \
                     path (each host would reserve in a file of its own). Write \
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
        file_mode: DEFAULT_FILE_MODE,
        group_commit: true,
        group_commit_wait: options::DEFAULT_GROUP_COMMIT_WAIT,
    };
    let mut seen = std::collections::HashSet::new();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if !seen.insert(k) {
            return Err(Error::InvalidArgument(format!(
                "store URL {shown:?}: the option '{k}' is given twice; give it once"
            )));
        }
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
            "file_mode" => opts.file_mode = file_mode(&shown, v)?,
            "group_commit_wait" => opts.group_commit_wait = options::group_commit_wait(&shown, v)?,
            "group_commit" => {
                opts.group_commit = match v {
                    "on" => true,
                    "off" => false,
                    _ => {
                        return Err(Error::InvalidArgument(format!(
                            "store URL {shown:?}: group_commit must be on or off, got {v:?}"
                        )))
                    }
                }
            }
            "mode" if v == "memory" => return Err(memory_refused(&shown)),
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "store URL {shown:?}: unknown option '{k}' (SQLite accepts synchronous, \
                     busy_timeout, file_mode, group_commit and group_commit_wait)"
                )))
            }
        }
    }
    Ok(StoreUrl::Sqlite(opts))
}
