//! The PostgreSQL store's posture (see [`crate::store::posture`]), read at open on the
//! connection that set up the schema: what a commit gets, who replicates it, and whether a
//! pooler sits in between. A primary that a failover could leave without acknowledged commits
//! is refused here unless the URL accepts that risk by name.
//!
//! Every write's own durability is not decided here: `ctrlrun_durable()` ([`super::functions`])
//! raises each write's `synchronous_commit` to at least `on` whatever the server, role,
//! database or URL says. This reads what it overrides, to say so.

use super::client::{Client, PgResult};
use crate::error::{Error, Result};
use crate::store::posture::{PostureLine, Standing};
use crate::url::PgRisks;

/// What the server said.
pub(super) struct Seen {
    /// `synchronous_commit` as a new session gets it (server, database, role, URL).
    synchronous_commit: String,
    /// `ctrlrun.commit_durability` as a new session gets it (`server`: as the server says).
    commit_durability: String,
    standby_names: String,
    in_recovery: bool,
    /// The port the server says it answers on (`None` over a Unix-domain socket).
    server_port: Option<i32>,
    /// The session of the first statement and of a later one.
    pids: (i32, i32),
    /// Each physical standby streaming from this server: its name and `sync_state`, `None`
    /// where this role may not see it.
    standbys: Vec<(String, Option<String>)>,
}

/// The settings and the standbys in one statement, so that a pooler in front of several
/// servers cannot answer them from different ones. A logical replication's sender (its slot is
/// logical), a base backup's, and the WAL archivers that stream under their default names
/// (`pg_receivewal`, `pg_basebackup -X stream`, Barman's `barman_receive_wal`) are no failover
/// target. A standby's name is visible to every role; its `sync_state` only with
/// `pg_read_all_stats` (`?` here otherwise).
const READ: &str = "SELECT pg_catalog.current_setting('synchronous_commit'), \
    COALESCE(pg_catalog.current_setting('ctrlrun.commit_durability', true), ''), \
    pg_catalog.current_setting('synchronous_standby_names'), pg_catalog.pg_is_in_recovery(), \
    pg_catalog.inet_server_port(), pg_catalog.pg_backend_pid(), \
    ARRAY(SELECT COALESCE(r.application_name, '') || E'\\t' || COALESCE(r.sync_state, '?') \
    FROM pg_catalog.pg_stat_replication r WHERE r.state IS DISTINCT FROM 'backup' \
    AND COALESCE(r.application_name, '') NOT IN \
    ('pg_receivewal', 'pg_basebackup', 'barman_receive_wal') \
    AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots s \
    WHERE s.active_pid = r.pid AND s.slot_type = 'logical') ORDER BY 1)";

pub(super) fn read(client: &mut Client) -> PgResult<Seen> {
    let row = client.query_typed_one(READ, &[])?;
    let later = client.query_typed_one("SELECT pg_catalog.pg_backend_pid()", &[])?;
    let standbys: Vec<String> = row.get(6);
    Ok(Seen {
        synchronous_commit: row.get(0),
        commit_durability: row.get(1),
        standby_names: row.get(2),
        in_recovery: row.get(3),
        server_port: row.get(4),
        pids: (row.get(5), later.get(0)),
        standbys: standbys
            .iter()
            .map(|s| {
                let (name, state) = s.rsplit_once('\t').unwrap_or((s, "?"));
                let state = (state != "?").then(|| state.to_owned());
                (name.to_owned(), state)
            })
            .collect(),
    })
}

/// The names `synchronous_standby_names` lists (`FIRST n (a, b)`, `ANY n (a, b)`, `n (a, b)`
/// or `a, b`; `*` matches any), unquoted.
fn listed(standby_names: &str) -> Vec<String> {
    let inner = match (standby_names.find('('), standby_names.rfind(')')) {
        (Some(a), Some(b)) if a < b => &standby_names[a + 1..b],
        _ => standby_names,
    };
    inner
        .split(',')
        .map(|n| n.trim().trim_matches('"').to_owned())
        .filter(|n| !n.is_empty())
        .collect()
}

/// The posture of what was `seen` through a connection made to `port`, with the risks the URL
/// accepts; a set-up that can lose an acknowledged write and was not accepted is refused
/// (`Error::Store`, naming the risk and the fix), an accepted one is warned of.
pub(super) fn judge(
    seen: &Seen,
    risks: PgRisks,
    port: u16,
    store: &str,
) -> Result<Vec<PostureLine>> {
    if seen.in_recovery {
        return Err(Error::Store(format!(
            "the server of the PostgreSQL store {store} is a standby (in recovery): it cannot \
             take a reservation; name the primary, or list every host with \
             target_session_attrs=read-write"
        )));
    }
    let (durable, waits) = durability(seen, risks, store)?;
    let replication = replication(seen, risks, waits, store)?;
    let lines = vec![durable, replication, pooler(seen, port)];
    for line in &lines {
        match line.standing {
            Standing::Fail => log::warn!(
                target: "ctrlrun.store",
                "posture: {} of {store}: {}", line.check, line.detail
            ),
            _ => log::debug!(
                target: "ctrlrun.store",
                "posture: {} of {store}: {} ({})", line.check, line.detail, line.standing.as_str()
            ),
        }
    }
    Ok(lines)
}

/// What a commit gets, and whether it waits for the synchronous standbys.
fn durability(seen: &Seen, risks: PgRisks, store: &str) -> Result<(PostureLine, bool)> {
    const CHECK: &str = "durable commits";
    let default = seen.synchronous_commit.as_str();
    let server_says = seen.commit_durability == "server";
    if server_says && !risks.crash_may_lose_commits {
        return Err(Error::Store(format!(
            "the PostgreSQL store {store}: the role or database sets \
             ctrlrun.commit_durability = server (commit as synchronous_commit says, now \
             {default}), which the URL does not accept; remove it (ALTER ROLE … RESET \
             ctrlrun.commit_durability) or add crash_may_lose_commits=accept to the URL"
        )));
    }
    let weak = matches!(default, "off" | "local");
    if server_says && (weak || default == "remote_write") {
        let line = PostureLine::new(
            CHECK,
            Standing::Fail,
            format!(
                "crash_may_lose_commits=accept: writes commit at the server's \
                 synchronous_commit = {default}, which acknowledges a commit before it is \
                 flushed everywhere it must be (here, or on the synchronous standbys): a crash \
                 can lose it, and a retry then runs the effect twice"
            ),
        );
        return Ok((line, !weak));
    }
    let mut detail = format!(
        "every write commits with synchronous_commit at least on (a new session's own is \
         {default})"
    );
    if risks.crash_may_lose_commits && !server_says {
        detail.push_str(
            "; crash_may_lose_commits=accept did not reach the server session (a pooler drops \
             start-up options), so commits stay durable",
        );
    }
    Ok((PostureLine::new(CHECK, Standing::Pass, detail), true))
}

/// Who replicates this server's commits: nobody, synchronous standbys (a failover to one keeps
/// every acknowledged commit), or an asynchronous one (refused unless accepted). `waits`:
/// commits wait for the synchronous standbys.
fn replication(seen: &Seen, risks: PgRisks, waits: bool, store: &str) -> Result<PostureLine> {
    const CHECK: &str = "replication";
    let names = seen.standby_names.trim();
    let listed = listed(names);
    // The server matches a name case-insensitively; a standby it does not list is
    // asynchronous, whatever this role may see of its state.
    let is_listed = |name: &str| {
        listed
            .iter()
            .any(|l| l == "*" || l.eq_ignore_ascii_case(name))
    };
    let state_of = |(name, state): &(String, Option<String>)| match state.as_deref() {
        Some(s) => s.to_owned(),
        None if !is_listed(name) => "async".to_owned(),
        None => "?".to_owned(),
    };
    let with = |wanted: &[&str]| -> Vec<String> {
        seen.standbys
            .iter()
            .filter(|s| wanted.contains(&state_of(s).as_str()))
            .map(|(name, _)| format!("{name:?}"))
            .collect()
    };
    let n = seen.standbys.len();
    let asynchronous = with(&["async"]);
    let risk = if !asynchronous.is_empty() {
        Some(format!(
            "standby {} streams from it asynchronously (not confirming commits)",
            asynchronous.join(", ")
        ))
    } else if n > 0 && !waits {
        Some(format!(
            "{n} standby(s) stream from it, but commits at this synchronous_commit do not wait \
             for them"
        ))
    } else {
        None
    };
    if let Some(risk) = risk {
        if !risks.failover_may_lose_commits {
            return Err(Error::Store(format!(
                "the PostgreSQL store {store}: {risk}. A failover to such a standby can lose \
                 a reservation the primary acknowledged, and the effect then runs twice. Make \
                 every standby synchronous (synchronous_standby_names), or accept the risk by \
                 adding failover_may_lose_commits=accept to the URL (docs/postgres.md, \
                 \"Durability and replication\")"
            )));
        }
        return Ok(PostureLine::new(
            CHECK,
            Standing::Fail,
            format!(
                "failover_may_lose_commits=accept: {risk}; a failover to it can lose \
                 acknowledged reservations"
            ),
        ));
    }
    let line = |standing, detail: String| Ok(PostureLine::new(CHECK, standing, detail));
    if n == 0 && names.is_empty() {
        return line(
            Standing::Pass,
            "no standby streams from this server (replication below PostgreSQL, as some \
             managed services keep it, is not visible from here)"
                .into(),
        );
    }
    if n == 0 {
        return line(
            Standing::Info,
            format!(
                "synchronous_standby_names is {names:?} but no standby is connected: every \
                 commit waits until one is (bounded by the URL's timeout)"
            ),
        );
    }
    let hidden = with(&["?"]);
    if !hidden.is_empty() {
        return line(
            Standing::NotVisible,
            format!(
                "standby {} streams from it and synchronous_standby_names ({names:?}) names it; \
                 whether it confirms each commit or only stands by is not visible to this role \
                 (pg_stat_replication's sync_state needs pg_read_all_stats or pg_monitor)",
                hidden.join(", ")
            ),
        );
    }
    let (sync, standing_by) = (with(&["sync"]), with(&["potential", "quorum"]));
    if standing_by.is_empty() {
        return line(
            Standing::Pass,
            format!(
                "synchronous: standby {} confirm each commit (synchronous_standby_names \
                 {names:?})",
                sync.join(", ")
            ),
        );
    }
    line(
        Standing::Info,
        format!(
            "synchronous_standby_names {names:?}: standby {} is potential or in a quorum, so \
             it may lack a commit another standby confirmed; a failover must promote a standby \
             that confirmed the last commit (your failover manager's choice)",
            standing_by.join(", ")
        ),
    )
}

/// Whether a pooler or proxy sits between the store and the server.
fn pooler(seen: &Seen, port: u16) -> PostureLine {
    const CHECK: &str = "pooler";
    if seen.pids.0 != seen.pids.1 {
        return PostureLine::new(
            CHECK,
            Standing::Info,
            "two statements ran in different server sessions: a transaction pooler is in front",
        );
    }
    match seen.server_port {
        Some(p) if p != i32::from(port) => PostureLine::new(
            CHECK,
            Standing::Info,
            format!(
                "connected to port {port}, the server answers on {p}: a pooler or proxy is in \
                 front"
            ),
        ),
        _ => PostureLine::new(CHECK, Standing::Info, "none seen"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(commit: &str, names: &str, standbys: &[(&str, Option<&str>)]) -> Seen {
        Seen {
            synchronous_commit: commit.into(),
            commit_durability: String::new(),
            standby_names: names.into(),
            in_recovery: false,
            server_port: Some(5432),
            pids: (7, 7),
            standbys: standbys
                .iter()
                .map(|(n, s)| (n.to_string(), s.map(str::to_owned)))
                .collect(),
        }
    }

    const NONE: PgRisks = PgRisks {
        crash_may_lose_commits: false,
        failover_may_lose_commits: false,
    };
    const BOTH: PgRisks = PgRisks {
        crash_may_lose_commits: true,
        failover_may_lose_commits: true,
    };

    fn standing(lines: &[PostureLine], check: &str) -> Standing {
        lines.iter().find(|l| l.check == check).unwrap().standing
    }

    #[test]
    fn an_asynchronous_standby_is_refused_unless_accepted() {
        for s in [
            seen("on", "", &[("s1", Some("async"))]),
            seen("on", "", &[("s1", None)]),
            seen(
                "on",
                "FIRST 1 (s1)",
                &[("s1", Some("sync")), ("s2", Some("async"))],
            ),
            // not listed: asynchronous, though this role cannot see its state
            seen("on", "FIRST 1 (s1)", &[("s1", None), ("s2", None)]),
        ] {
            let refused = judge(&s, NONE, 5432, "db").unwrap_err().to_string();
            assert!(
                refused.contains("failover_may_lose_commits=accept"),
                "{refused}"
            );
            let lines = judge(&s, BOTH, 5432, "db").unwrap();
            assert_eq!(standing(&lines, "replication"), Standing::Fail);
        }
    }

    #[test]
    fn synchronous_standing_by_none_and_not_visible_are_told_apart() {
        let replication = |s: &Seen| standing(&judge(s, NONE, 5432, "db").unwrap(), "replication");
        let sync = seen("off", "s1", &[("s1", Some("sync"))]);
        assert_eq!(replication(&sync), Standing::Pass);
        let lines = judge(&sync, NONE, 5432, "db").unwrap();
        assert_eq!(standing(&lines, "durable commits"), Standing::Pass);
        // matched as the server matches: case-insensitively, quoted, or by `*`
        assert_eq!(
            replication(&seen("on", "ANY 1 (\"S1\")", &[("s1", Some("sync"))])),
            Standing::Pass
        );
        let potential = seen(
            "on",
            "FIRST 1 (s1, s2)",
            &[("s1", Some("sync")), ("s2", Some("potential"))],
        );
        assert_eq!(replication(&potential), Standing::Info);
        let quorum = seen(
            "on",
            "ANY 1 (*)",
            &[("s1", Some("quorum")), ("s2", Some("quorum"))],
        );
        assert_eq!(replication(&quorum), Standing::Info);
        let hidden = seen("on", "s1", &[("s1", None)]);
        assert_eq!(replication(&hidden), Standing::NotVisible);
        let alone = seen("on", "", &[]);
        let lines = judge(&alone, NONE, 6432, "db").unwrap();
        assert_eq!(standing(&lines, "replication"), Standing::Pass);
        assert!(lines[2].detail.contains("pooler or proxy"));
    }

    #[test]
    fn commits_as_the_server_says_only_when_accepted() {
        let mut s = seen("off", "", &[]);
        s.commit_durability = "server".into();
        assert!(judge(&s, NONE, 5432, "db").is_err());
        let lines = judge(&s, BOTH, 5432, "db").unwrap();
        assert_eq!(standing(&lines, "durable commits"), Standing::Fail);
        // a synchronous standby is not waited for by a commit at `local`
        let mut s = seen("local", "s1", &[("s1", Some("sync"))]);
        s.commit_durability = "server".into();
        let accepting_crash_only = PgRisks {
            crash_may_lose_commits: true,
            failover_may_lose_commits: false,
        };
        assert!(judge(&s, accepting_crash_only, 5432, "db").is_err());
    }
}
