//! The SQLite store: one file, WAL, `synchronous=FULL` unless relaxed, `BEGIN IMMEDIATE`
//! around every read-plan-write, cached prepared statements, a busy timeout.
//!
//! Error classes (SPEC §6): anything before `COMMIT` (including `SQLITE_BUSY` at `BEGIN`) is a
//! failed write: rolled back, `StoreWriteFailed`. An error on `COMMIT` is unknown: the row is
//! re-read on a fresh connection and decides; a failed re-read is `StoreUnresolved`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rusqlite::{params, Connection, OpenFlags, OptionalExtension, Row};

use crate::error::{Error, Result};
use crate::planner::{self, Expected, ReservationPlan, Transition};
use crate::record::{now_micros, EffectRecord, EffectState, Micros};
use crate::store::pool::{Pool, Pooled};
use crate::store::recovery::{
    settle_transition, settle_write, Commit, Reread, Step, TransitionCall,
};
use crate::store::Store;
use crate::url::{SqliteOptions, Synchronous};

/// The schema version this build writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = 1;

/// The columns in [`read_record`]'s order (a macro, so statements are compile-time literals:
/// the hot path builds no SQL text).
macro_rules! columns {
    () => {
        "effect_key, state, action_id, attempt, created_at, updated_at, \
         lease_expires_at, result, error, resolved_by"
    };
}
const COLUMNS: &str = columns!();
const SELECT_ONE: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM ctrlrun_effects WHERE effect_key = ?1"
);
const INSERT_ONE: &str = concat!(
    "INSERT INTO ctrlrun_effects (",
    columns!(),
    ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) ON CONFLICT (effect_key) DO NOTHING"
);

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS ctrlrun_effects (
    effect_key       TEXT    NOT NULL PRIMARY KEY,
    state            TEXT    NOT NULL CHECK (state IN
                         ('reserved', 'executing', 'committed', 'failed', 'ambiguous')),
    action_id        TEXT    NOT NULL,
    attempt          INTEGER NOT NULL CHECK (attempt >= 1),
    created_at       INTEGER NOT NULL,  -- microseconds since the Unix epoch, UTC
    updated_at       INTEGER NOT NULL,
    lease_expires_at INTEGER,
    result           TEXT,              -- JSON
    error            TEXT,
    resolved_by      TEXT
) WITHOUT ROWID;
";

/// One pooled connection; `broken` after an unknown `COMMIT` so the pool drops it.
pub struct Conn {
    conn: Connection,
    broken: bool,
}

/// Runs on every pooled connection after it is set up (see [`SqliteStore::open_with`]).
pub type ConnectionInit = Arc<dyn Fn(&mut Connection) -> rusqlite::Result<()> + Send + Sync>;

struct Manager {
    opts: SqliteOptions,
    init: Option<ConnectionInit>,
}

impl super::pool::Manage for Manager {
    type Conn = Conn;
    type Error = Error;

    fn connect(&self) -> Result<Conn> {
        let mut conn = open_connection(&self.opts)?;
        if let Some(init) = &self.init {
            init(&mut conn).map_err(|e| open_error(&self.opts.path, e))?;
        }
        Ok(Conn {
            conn,
            broken: false,
        })
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.broken
    }
}

fn open_error(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Store(format!(
        "cannot open the SQLite store at {}: {e}",
        path.display()
    ))
}

fn open_connection(opts: &SqliteOptions) -> Result<Connection> {
    let path = &opts.path;
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| open_error(path, e))?;
    conn.busy_timeout(opts.busy_timeout)
        .map_err(|e| open_error(path, e))?;
    conn.set_prepared_statement_cache_capacity(32);
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .map_err(|e| open_error(path, e))?;
    if !mode.eq_ignore_ascii_case("wal") {
        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(|e| open_error(path, e))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(open_error(
                path,
                format!("the file system refused WAL mode (journal_mode is {mode})"),
            ));
        }
    }
    let sync = match opts.synchronous {
        Synchronous::Full => "FULL",
        Synchronous::Normal => "NORMAL",
    };
    conn.pragma_update(None, "synchronous", sync)
        .map_err(|e| open_error(path, e))?;
    Ok(conn)
}

/// Create the table on a new file, check the version on an existing one.
fn init_schema(conn: &Connection, path: &Path) -> Result<()> {
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|e| open_error(path, e))?;
    if version == SCHEMA_VERSION {
        return Ok(());
    }
    if version > SCHEMA_VERSION {
        return Err(Error::Store(format!(
            "the SQLite store at {} has schema version {version}, newer than this ctrlrun \
             understands ({SCHEMA_VERSION}); upgrade ctrlrun",
            path.display()
        )));
    }
    conn.execute_batch("BEGIN IMMEDIATE")
        .map_err(|e| open_error(path, e))?;
    let created = (|| -> rusqlite::Result<()> {
        let v: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if v == 0 {
            conn.execute_batch(SCHEMA)?;
            conn.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        }
        conn.execute_batch("COMMIT")
    })();
    if let Err(e) = created {
        let _ = conn.execute_batch("ROLLBACK");
        return Err(open_error(path, e));
    }
    Ok(())
}

fn read_record(row: &Row<'_>) -> rusqlite::Result<EffectRecord> {
    let state: String = row.get(1)?;
    let state = EffectState::parse(&state).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            1,
            rusqlite::types::Type::Text,
            format!("unknown effect state {state:?}").into(),
        )
    })?;
    Ok(EffectRecord {
        effect_key: row.get(0)?,
        state,
        action_id: row.get(2)?,
        attempt: row.get(3)?,
        created_at: row.get(4)?,
        updated_at: row.get(5)?,
        lease_expires_at: row.get(6)?,
        result: row.get(7)?,
        error: row.get(8)?,
        resolved_by: row.get(9)?,
    })
}

fn select(conn: &Connection, key: &str) -> rusqlite::Result<Option<EffectRecord>> {
    conn.prepare_cached(SELECT_ONE)?
        .query_row([key], read_record)
        .optional()
}

/// Insert `r` unless the key has a row; the count of rows inserted (0 or 1).
fn insert(conn: &Connection, r: &EffectRecord) -> rusqlite::Result<usize> {
    conn.prepare_cached(INSERT_ONE)?.execute(params![
        r.effect_key,
        r.state.as_str(),
        r.action_id,
        r.attempt,
        r.created_at,
        r.updated_at,
        r.lease_expires_at,
        r.result,
        r.error,
        r.resolved_by
    ])
}

/// Overwrite the whole row if it is still `expected`; returns the number of rows changed.
fn compare_and_set(
    conn: &Connection,
    expected: &Expected,
    r: &EffectRecord,
) -> rusqlite::Result<usize> {
    conn.prepare_cached(
        "UPDATE ctrlrun_effects SET state = ?1, action_id = ?2, attempt = ?3, created_at = ?4, \
         updated_at = ?5, lease_expires_at = ?6, result = ?7, error = ?8, resolved_by = ?9 \
         WHERE effect_key = ?10 AND state = ?11 AND action_id = ?12 AND attempt = ?13",
    )?
    .execute(params![
        r.state.as_str(),
        r.action_id,
        r.attempt,
        r.created_at,
        r.updated_at,
        r.lease_expires_at,
        r.result,
        r.error,
        r.resolved_by,
        r.effect_key,
        expected.state.as_str(),
        expected.action_id,
        expected.attempt
    ])
}

/// A later transition as one conditional `UPDATE`; the row written is read back in the same
/// transaction. (`RETURNING` would build a temporary table on every execution, which costs more
/// than the indexed read.)
fn transition_cas(
    conn: &Connection,
    key: &str,
    action_id: &str,
    attempt: Option<i64>,
    t: &Transition,
    now: Micros,
) -> rusqlite::Result<usize> {
    let from = t.from_states();
    let (result, error) = t.payload();
    let pick = |i: usize| from.get(i).unwrap_or(&from[0]).as_str();
    conn.prepare_cached(
        "UPDATE ctrlrun_effects SET state = ?1, updated_at = ?2, \
             lease_expires_at = CASE WHEN ?3 THEN lease_expires_at ELSE NULL END, \
             result = ?4, error = ?5 \
             WHERE effect_key = ?6 AND action_id = ?7 AND (?8 IS NULL OR attempt = ?8) \
             AND state IN (?9, ?10, ?11)",
    )?
    .execute(params![
        t.target().as_str(),
        now,
        t.keeps_lease(),
        result,
        error,
        key,
        action_id,
        attempt,
        pick(0),
        pick(1),
        pick(2)
    ])
}

fn set_synchronous(conn: &Connection, level: &str) -> rusqlite::Result<()> {
    let sql = if level == "FULL" {
        "PRAGMA synchronous = FULL"
    } else {
        "PRAGMA synchronous = NORMAL"
    };
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

pub struct SqliteStore {
    opts: SqliteOptions,
    pool: Arc<Pool<Manager>>,
}

impl SqliteStore {
    /// Open (creating if missing) the store file. The folder is created if needed.
    pub fn open(opts: SqliteOptions) -> Result<SqliteStore> {
        SqliteStore::open_with(opts, None)
    }

    /// [`SqliteStore::open`], running `init` on every pooled connection (to load an extension,
    /// set a pragma, or install a hook). The fresh connection that re-reads a row after an
    /// unknown `COMMIT` does not run it.
    pub fn open_with(mut opts: SqliteOptions, init: Option<ConnectionInit>) -> Result<SqliteStore> {
        if opts.path.is_relative() {
            let cwd = std::env::current_dir().map_err(|e| open_error(&opts.path, e))?;
            opts.path = cwd.join(&opts.path);
        }
        if opts.path.is_dir() {
            return Err(open_error(&opts.path, "it is a directory, not a file"));
        }
        if let Some(parent) = opts.path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| {
                open_error(
                    &opts.path,
                    format!("cannot create folder {}: {e}", parent.display()),
                )
            })?;
        }
        let first = open_connection(&opts)?;
        init_schema(&first, &opts.path)?;
        drop(first);
        let pool = Arc::new(Pool::new(
            Manager {
                opts: opts.clone(),
                init,
            },
            8,
            opts.busy_timeout + Duration::from_secs(5),
        ));
        // No SQLite connection may stay open across a fork (see `store::fork`).
        let weak = Arc::downgrade(&pool);
        super::fork::register(weak);
        Ok(SqliteStore { opts, pool })
    }

    pub fn path(&self) -> &Path {
        &self.opts.path
    }

    fn conn(&self) -> Result<Pooled<'_, Manager>> {
        self.pool.get().map_err(|e| {
            Error::StoreWriteFailed(format!(
                "cannot get a connection to the SQLite store at {}: {e}; nothing was written",
                self.opts.path.display()
            ))
        })
    }

    fn failed(&self, what: &str, key: &str, e: impl std::fmt::Display) -> Error {
        Error::StoreWriteFailed(format!(
            "{what} for effect '{key}' failed in the SQLite store at {}: {e}; nothing was \
             committed, so the write may be retried",
            self.opts.path.display()
        ))
    }

    /// `BEGIN IMMEDIATE`, `body`, `COMMIT`. Errors before `COMMIT` roll back and are failed
    /// writes; an error on `COMMIT` is reported as [`Commit::Unknown`].
    fn txn<T>(
        &self,
        conn: &mut Conn,
        what: &str,
        key: &str,
        body: impl FnOnce(&Connection) -> Result<T>,
    ) -> Result<Commit<T>> {
        let begun = conn
            .conn
            .prepare_cached("BEGIN IMMEDIATE")
            .and_then(|mut s| s.execute([]));
        if let Err(e) = begun {
            if !conn.conn.is_autocommit() {
                let _ = conn.conn.execute_batch("ROLLBACK");
            }
            return Err(self.failed(what, key, e));
        }
        let value = match body(&conn.conn) {
            Ok(v) => v,
            Err(e) => {
                if conn.conn.execute_batch("ROLLBACK").is_err() {
                    conn.broken = true;
                }
                return Err(e);
            }
        };
        match conn
            .conn
            .prepare_cached("COMMIT")
            .and_then(|mut s| s.execute([]))
        {
            Ok(_) => Ok(Commit::Landed(value)),
            Err(e) => {
                if !conn.conn.is_autocommit() {
                    let _ = conn.conn.execute_batch("ROLLBACK");
                }
                conn.broken = true;
                Ok(Commit::Unknown(value, e.to_string()))
            }
        }
    }

    /// A read-plan-write step under `BEGIN IMMEDIATE`; after an unknown `COMMIT` the row is
    /// re-read: the row we wrote means it landed; anything else re-runs the step once (which
    /// re-reads and re-plans under the lock: an insert retried, an update re-issued, another
    /// row obeyed).
    /// `absent`: a plain read just found no row, so first try the plan for no row (an insert
    /// that does nothing if a row appeared meanwhile); only if it did nothing, read and plan.
    fn read_plan_write(
        &self,
        what: &str,
        key: &str,
        plan: &dyn Fn(Option<EffectRecord>) -> Result<(Option<Expected>, Step)>,
        absent: bool,
        may_retry: bool,
    ) -> Result<EffectRecord> {
        let mut conn = self.conn()?;
        let committed = self.txn(&mut conn, what, key, |c| {
            if absent {
                if let (None, step) = plan(None)? {
                    if let Some(row) = &step.written {
                        if insert(c, row).map_err(|e| self.failed(what, key, e))? == 1 {
                            return Ok(step);
                        }
                    }
                }
            }
            let found = select(c, key).map_err(|e| self.failed(what, key, e))?;
            let (expected, step) = plan(found)?;
            if let Some(row) = &step.written {
                let written = match &expected {
                    None => insert(c, row),
                    Some(exp) => compare_and_set(c, exp, row),
                }
                .map_err(|e| self.failed(what, key, e))?;
                if written != 1 {
                    return Err(self.failed(what, key, "the compare-and-set matched no row"));
                }
            }
            Ok(step)
        })?;
        drop(conn);
        // Re-running the step re-reads and re-plans under the write lock: no row retries the
        // insert, the unchanged row re-issues the update, another row is obeyed as planned.
        let retry = may_retry.then_some(|| self.read_plan_write(what, key, plan, false, false));
        settle_write(self, what, key, committed, |_, _| None, retry)
    }

    /// One transition under `BEGIN IMMEDIATE`, settled by [`settle_transition`]; with
    /// `read_back`, the row written is read back in the same transaction.
    fn transition_step(
        &self,
        call: &TransitionCall<'_>,
        read_back: bool,
        may_reissue: bool,
    ) -> Result<Option<EffectRecord>> {
        let (key, action_id, attempt, t) =
            (call.key, call.action_id, call.attempt, call.transition);
        let now = call
            .now
            .expect("SQLite transitions carry the caller's clock");
        let what = t.name();
        let mut conn = self.conn()?;
        // A write that need not survive a power cut that also kills this process (the planner
        // says which) skips the fsync; the next FULL commit syncs the log up to and past it.
        let relaxed =
            !t.needs_durability_with_client() && self.opts.synchronous == Synchronous::Full;
        if relaxed {
            set_synchronous(&conn.conn, "NORMAL").map_err(|e| self.failed(what, key, e))?;
        }
        let committed = self.txn(&mut conn, what, key, |c| {
            let changed = transition_cas(c, key, action_id, attempt, t, now)
                .map_err(|e| self.failed(what, key, e))?;
            if changed == 1 && !read_back {
                return Ok(Ok(None));
            }
            let found = select(c, key).map_err(|e| self.failed(what, key, e))?;
            if changed == 1 {
                return Ok(Ok(found));
            }
            Ok(planner::settle_mismatch(found, key, action_id, attempt, t, now).map(Some))
        });
        if relaxed && set_synchronous(&conn.conn, "FULL").is_err() {
            conn.broken = true; // never hand out a connection left at NORMAL
        }
        let committed = committed?;
        drop(conn);
        let reissue = may_reissue.then_some(|| self.transition_step(call, read_back, false));
        settle_transition(self, call, committed, reissue, Some)
    }

    /// A pooled connection for a read: failing to get one is a store error, not a write's.
    fn read_conn(&self) -> Result<Pooled<'_, Manager>> {
        self.pool.get().map_err(|e| {
            Error::Store(format!(
                "cannot get a connection to the SQLite store at {}: {e}",
                self.opts.path.display()
            ))
        })
    }

    fn read(&self, key: &str) -> Result<Option<EffectRecord>> {
        let conn = self.read_conn()?;
        select(&conn.conn, key).map_err(|e| {
            Error::Store(format!(
                "reading effect '{key}' from the SQLite store at {} failed: {e}",
                self.opts.path.display()
            ))
        })
    }
}

impl Reread for SqliteStore {
    /// The row and this host's clock: SQLite has no other.
    fn reread(&self, what: &str, key: &str, why: &str) -> Result<(Option<EffectRecord>, Micros)> {
        let fresh = open_connection(&self.opts)
            .and_then(|c| select(&c, key).map_err(|e| Error::Store(e.to_string())));
        let found = fresh.map_err(|e| {
            log::error!(target: "ctrlrun.store", "reread_failed: {what} '{key}': {e}");
            Error::StoreUnresolved(format!(
                "the COMMIT of {what} for effect '{key}' in the SQLite store at {} may or may not \
                 have landed ({why}), and re-reading the row failed ({e}); nothing more was \
                 written and the executor was not run. The key stays reserved until its lease \
                 lapses; then a person resolves it",
                self.opts.path.display()
            ))
        })?;
        Ok((found, now_micros()))
    }

    fn store_name(&self) -> String {
        format!("the SQLite store at {}", self.opts.path.display())
    }
}

impl Store for SqliteStore {
    fn describe(&self) -> String {
        format!("sqlite:///{}", self.opts.path.display())
    }

    fn fork_sensitive(&self) -> bool {
        true
    }

    fn transition_unread(
        &self,
        key: &str,
        action_id: &str,
        attempt: Option<i64>,
        transition: &Transition,
        now: Option<Micros>,
    ) -> Result<()> {
        planner::check_action_id(action_id)?;
        let call = TransitionCall {
            key,
            action_id,
            attempt,
            transition,
            now: Some(now.unwrap_or_else(now_micros)),
        };
        self.transition_step(&call, false, true).map(|_| ())
    }

    fn reserve(
        &self,
        key: &str,
        action_id: &str,
        lease: Micros,
        begin: bool,
        now: Option<Micros>,
    ) -> Result<EffectRecord> {
        planner::check_request(key, action_id, lease)?;
        let now = now.unwrap_or_else(now_micros);
        // A refusal needs no write: decide it from a plain read, without taking the write lock.
        // (A stale read only means the caller arrived a moment earlier; anything the planner
        // would grant or lapse is decided again under BEGIN IMMEDIATE below.)
        let seen = self.read(key)?;
        if let ReservationPlan::Refuse(refusal) =
            planner::plan_reservation(seen.as_ref(), key, action_id, lease, now, begin)
        {
            return Err(refusal.into_error());
        }
        let plan = |found: Option<EffectRecord>| {
            Ok(
                match planner::plan_reservation(found.as_ref(), key, action_id, lease, now, begin) {
                    ReservationPlan::Insert(row) => (
                        None,
                        Step {
                            written: Some(row.clone()),
                            outcome: Ok(row),
                        },
                    ),
                    ReservationPlan::Renew { expected, record } => (
                        Some(expected),
                        Step {
                            written: Some(record.clone()),
                            outcome: Ok(record),
                        },
                    ),
                    ReservationPlan::Lapse { expected, record } => (
                        Some(expected),
                        Step {
                            written: Some(record.clone()),
                            outcome: Err(Error::ambiguous(record)),
                        },
                    ),
                    ReservationPlan::Refuse(refusal) => (
                        None,
                        Step {
                            written: None,
                            outcome: Err(refusal.into_error()),
                        },
                    ),
                },
            )
        };
        self.read_plan_write("reserve_effect", key, &plan, seen.is_none(), true)
    }

    fn transition(
        &self,
        key: &str,
        action_id: &str,
        attempt: Option<i64>,
        transition: &Transition,
        now: Option<Micros>,
    ) -> Result<EffectRecord> {
        planner::check_action_id(action_id)?;
        let call = TransitionCall {
            key,
            action_id,
            attempt,
            transition,
            now: Some(now.unwrap_or_else(now_micros)),
        };
        self.transition_step(&call, true, true)
            .map(|row| row.expect("a transition that landed reads its row back"))
    }

    fn extend_lease(
        &self,
        key: &str,
        action_id: &str,
        attempt: Option<i64>,
        until: Micros,
        now: Option<Micros>,
    ) -> Result<EffectRecord> {
        planner::check_action_id(action_id)?;
        let now = now.unwrap_or_else(now_micros);
        let plan = |found: Option<EffectRecord>| {
            let expected = found.as_ref().map(Expected::of);
            let row = planner::plan_extension(found, key, action_id, attempt, until, now)?;
            Ok((
                expected,
                Step {
                    written: Some(row.clone()),
                    outcome: Ok(row),
                },
            ))
        };
        self.read_plan_write("extend_lease", key, &plan, false, true)
    }

    fn resolve(
        &self,
        key: &str,
        target: EffectState,
        resolver: &str,
        now: Option<Micros>,
    ) -> Result<EffectRecord> {
        planner::check_resolver(resolver)?;
        let now = now.unwrap_or_else(now_micros);
        let plan = |found: Option<EffectRecord>| {
            let expected = found.as_ref().map(Expected::of);
            let row = planner::plan_resolution(found, key, target, resolver, now)?;
            Ok((
                expected,
                Step {
                    written: Some(row.clone()),
                    outcome: Ok(row),
                },
            ))
        };
        self.read_plan_write("resolve_effect", key, &plan, false, true)
    }

    fn get(&self, key: &str) -> Result<Option<EffectRecord>> {
        self.read(key)
    }

    fn list(&self, state: Option<EffectState>) -> Result<Vec<EffectRecord>> {
        let conn = self.read_conn()?;
        let read = || -> rusqlite::Result<Vec<EffectRecord>> {
            let mut stmt = conn.conn.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM ctrlrun_effects WHERE (?1 IS NULL OR state = ?1) \
                 ORDER BY created_at, effect_key"
            ))?;
            let rows = stmt.query_map([state.map(EffectState::as_str)], read_record)?;
            rows.collect()
        };
        read().map_err(|e| {
            Error::Store(format!(
                "listing effects in the SQLite store at {} failed: {e}",
                self.opts.path.display()
            ))
        })
    }
}
