//! PostgreSQL store URLs: our own options (`schema`, `pool_size`, `timeout`,
//! `prepared_statements`, the accepted risks), libpq's TLS options (`sslmode`, `sslrootcert`,
//! `sslcert`, `sslkey`), the libpq values a store can use of `target_session_attrs` and
//! `load_balance_hosts`, and the user info checks; every other option goes to the driver.

use std::path::PathBuf;
use std::time::Duration;

use super::options::{
    PgRisks, PgTls, PostgresOptions, SslMode, StoreUrl, DEFAULT_PG_TIMEOUT, DEFAULT_POOL_SIZE,
    MAX_POOL_SIZE,
};
use super::redact::redact;
use crate::error::{Error, Result};

/// `postgresql://user@host:port/db?schema=NAME&pool_size=N&...`: pull out `schema` (default
/// `public`) and `pool_size` (default 16); the rest is the driver's connection URL. A schema
/// name is plain: letters, digits, `_`.
pub(super) fn parse_postgres(url: &str) -> Result<StoreUrl> {
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
    let mut prepared_statements = false;
    let mut group_commit = true;
    let mut group_commit_wait = super::options::DEFAULT_GROUP_COMMIT_WAIT;
    let mut tls = PgTls {
        mode: SslMode::Prefer,
        root_cert: None,
        cert: None,
        key: None,
    };
    let mut risks = PgRisks::default();
    let mut rest = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        // As the driver reads them: names and values percent-decoded (`connect_%74imeout`).
        let (raw_name, raw_value) = pair.split_once('=').unwrap_or((pair, ""));
        let name = percent_decode(raw_name);
        if !seen.insert(name.clone()) {
            return Err(Error::InvalidArgument(format!(
                "store URL {:?}: the option '{name}' is given twice; give it once",
                shown()
            )));
        }
        if name == "connect_timeout" {
            // The driver reads 0 or less as "no bound", which would then quietly become the
            // default: refused instead, as every other bound is.
            let v = percent_decode(raw_value);
            let digits = !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit());
            match v.parse::<u64>() {
                Ok(n) if digits && (1..=3600).contains(&n) => {
                    rest.push(pair);
                    continue;
                }
                _ => {
                    return Err(Error::InvalidArgument(format!(
                        "store URL {:?}: connect_timeout must be a whole number of seconds \
                         from 1 to 3600, got {v:?}",
                        shown()
                    )))
                }
            }
        }
        let refused =
            |why: String| Error::InvalidArgument(format!("store URL {:?}: {why}", shown()));
        if let Some(pass) = host_choice(&name, &percent_decode(raw_value)).map_err(refused)? {
            rest.push(pass);
            continue;
        }
        if let Some(accepted) = risk(&name, &percent_decode(raw_value)).map_err(refused)? {
            match name.as_str() {
                "crash_may_lose_commits" => risks.crash_may_lose_commits = accepted,
                _ => risks.failover_may_lose_commits = accepted,
            }
            continue;
        }
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
            // Named statements, prepared once per connection: for a connection that keeps its
            // server session (a direct one). Off unless asked for: behind a transaction pooler
            // a name could meet another client's statement (see src/store/postgres/sql.rs).
            Some(("prepared_statements", v)) => {
                prepared_statements = match percent_decode(v).as_str() {
                    "on" => true,
                    "off" => false,
                    _ => {
                        return Err(Error::InvalidArgument(format!(
                            "store URL {:?}: prepared_statements must be on or off, got {:?} \
                             (on only for a direct connection, never behind a transaction \
                             pooler)",
                            shown(),
                            percent_decode(v)
                        )))
                    }
                }
            }
            Some(("group_commit_wait", v)) => {
                group_commit_wait = super::options::group_commit_wait(&shown(), v)?;
            }
            Some(("group_commit", v)) => {
                group_commit = match percent_decode(v).as_str() {
                    "on" => true,
                    "off" => false,
                    _ => {
                        return Err(Error::InvalidArgument(format!(
                            "store URL {:?}: group_commit must be on or off, got {:?}",
                            shown(),
                            percent_decode(v)
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
    Ok(StoreUrl::Postgres(PostgresOptions {
        url,
        schema,
        pool_size,
        group_commit,
        group_commit_wait,
        timeout,
        tls,
        prepared_statements,
        risks,
    }))
}

/// libpq's `target_session_attrs` and `load_balance_hosts`, as the driver is to get them
/// (`Some`), or `None` for another option. A store writes every reservation, so a choice of
/// a server that refuses writes is refused here, naming the option; `primary` is
/// `read-write` (a standby is never writable, and a primary that refuses writes cannot hold a
/// reservation either).
fn host_choice(name: &str, value: &str) -> std::result::Result<Option<&'static str>, String> {
    match (name, value) {
        ("target_session_attrs", "any") => Ok(Some("target_session_attrs=any")),
        ("target_session_attrs", "read-write" | "primary") => {
            Ok(Some("target_session_attrs=read-write"))
        }
        ("target_session_attrs", v @ ("read-only" | "standby" | "prefer-standby")) => Err(format!(
            "target_session_attrs={v} would choose a server that refuses writes (a standby), \
             and a store writes every reservation; use read-write or primary (the server that \
             takes writes), or any"
        )),
        ("target_session_attrs", v) => Err(format!(
            "target_session_attrs must be any, read-write, primary, read-only, standby or \
             prefer-standby (libpq's values), got {v:?}"
        )),
        ("load_balance_hosts", "disable") => Ok(Some("load_balance_hosts=disable")),
        ("load_balance_hosts", "random") => Ok(Some("load_balance_hosts=random")),
        ("load_balance_hosts", v) => Err(format!(
            "load_balance_hosts must be disable or random (libpq's values), got {v:?}"
        )),
        _ => Ok(None),
    }
}

/// A risk the URL accepts by name (`Some(true)`), or `None` for another option; the only value
/// is `accept`, so that no option weakens the promise by accident.
fn risk(name: &str, value: &str) -> std::result::Result<Option<bool>, String> {
    if !matches!(name, "crash_may_lose_commits" | "failover_may_lose_commits") {
        return Ok(None);
    }
    match value {
        "accept" => Ok(Some(true)),
        v => Err(format!(
            "{name} takes only the value accept (leave it out to keep the guarantee), got {v:?}"
        )),
    }
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
