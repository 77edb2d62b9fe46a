//! The SQLite store: one file, WAL, `synchronous=FULL` unless relaxed, `BEGIN IMMEDIATE`
//! around every read-plan-write, cached prepared statements, a busy timeout.
//!
//! Error classes (docs/spec.md §6): anything before `COMMIT` (including `SQLITE_BUSY` at `BEGIN`) is a
//! failed write: rolled back, `StoreWriteFailed`. An error on `COMMIT` is unknown: the row is
//! re-read on a fresh connection and decides; a failed re-read is `StoreUnresolved`.

mod cold;
mod conn;
mod identity;
mod retention;
mod sql;
mod writes;

use std::sync::Arc;
use std::time::Duration;

use rusqlite::Connection;

use crate::env::{holder, new_attempt_token, now_micros};
use crate::error::{Error, Result};
use crate::planner::{self, Expected, Proposal, ReservationPlan};
use crate::receipt::Event;
use crate::record::{EffectRecord, Micros};
use crate::store::engine::{Engine, RowPlan};
use crate::store::pool::{Pool, Pooled};
use crate::store::recovery::{reread_failed, Commit, Reread, Step, TransitionCall};
use crate::store::Backend;
use crate::url::SqliteOptions;
pub use conn::ConnectionInit;
use conn::{init_schema, open_connection, open_error, open_pinned, Conn, Manager};
use identity::{FileId, Held};
use sql::select;
pub use sql::SCHEMA_VERSION;

pub struct SqliteStore {
    opts: SqliteOptions,
    pool: Arc<Pool<Manager>>,
    /// The database file as the store opened it, held open (see [`identity`]).
    held: Held,
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
        let made = open_connection(&opts)?; // creates the file if there is none
        let held = Held::open(&opts.path)?;
        let (first, file) = open_pinned(&opts)?;
        drop(made);
        held.check(&opts.path, file)?; // the file the first connection sets up is the one held
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
        Ok(SqliteStore { opts, pool, held })
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

    /// The path still names the file this store opened, and `conn` (the file a connection
    /// opened) is it: checked by every write transaction under the write lock (see
    /// [`identity`]).
    fn check_identity(&self, conn: Option<FileId>) -> Result<()> {
        self.held.check(&self.opts.path, conn)
    }

    /// A fresh connection (not pooled) for a re-read, refused unless it has the store's file
    /// open: never re-read (or create) another file at the path.
    fn fresh_conn(&self) -> Result<Connection> {
        let (conn, file) = open_pinned(&self.opts)?;
        self.check_identity(file)?;
        Ok(conn)
    }

    /// `BEGIN IMMEDIATE`, the file's identity check, `body`, `COMMIT`. Errors before `COMMIT`
    /// roll back and are failed writes; an error on `COMMIT` is reported as [`Commit::Unknown`].
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
        let value = match self
            .check_identity(conn.file)
            .and_then(|_| body(&conn.conn))
        {
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
        let fresh = self
            .fresh_conn()
            .and_then(|c| select(&c, key).map_err(|e| Error::Store(e.to_string())));
        let found =
            fresh.map_err(|e| reread_failed(&self.store_name(), what, key, why, &e.to_string()))?;
        Ok((found, now_micros()))
    }

    fn store_name(&self) -> String {
        format!("the SQLite store at {}", self.opts.path.display())
    }

    fn failed_commit_may_land_later(&self) -> bool {
        false
    }
}

impl Engine for SqliteStore {
    fn location(&self) -> String {
        format!("sqlite:///{}", self.opts.path.display())
    }

    fn kind(&self) -> Backend {
        Backend::Sqlite
    }

    /// This host's clock: SQLite has no other.
    fn fixed_now(&self, now: Option<Micros>) -> Option<Micros> {
        Some(now.unwrap_or_else(now_micros))
    }

    fn reserve_row(&self, p: Proposal<'_>, now: Option<Micros>) -> Result<EffectRecord> {
        planner::check_request(p.key, p.action_id, p.lease)?;
        let now = now.unwrap_or_else(now_micros);
        planner::check_lease_end(now, p.lease)?;
        // A refusal needs no write: decide it from a plain read, without taking the write lock.
        // (A stale read only means the caller arrived a moment earlier; anything the planner
        // would grant or lapse is decided again under BEGIN IMMEDIATE below.)
        let seen = self.read(p.key)?;
        if let ReservationPlan::Refuse(refusal) = planner::plan_reservation(seen.as_ref(), &p, now)
        {
            return Err(refusal.into_error());
        }
        let (token, holder) = (new_attempt_token()?, holder()); // only for a call that may write
        let p = Proposal {
            token: &token,
            holder: &holder,
            ..p
        };
        match (p.needs_approval, p.action, p.args) {
            (true, Some(action), Some((digest, _))) => {
                // The grant is used in the reservation's own transaction, only by a write that
                // grants the key (a refusal or a lapse leaves it for the next call).
                let plan = |c: &Connection, found: Option<EffectRecord>| {
                    let plan = planner::plan_reservation(found.as_ref(), &p, now);
                    if !matches!(
                        plan,
                        ReservationPlan::Insert(_) | ReservationPlan::Renew { .. }
                    ) {
                        return Ok(Step::of_reservation(plan));
                    }
                    let used = cold::consume(self, c, (action, digest), p.key, p.action_id, now)?;
                    let with = Proposal {
                        approval_id: Some(&used.request_id),
                        ..p
                    };
                    let plan = planner::plan_reservation(found.as_ref(), &with, now);
                    Ok(Step::of_reservation(plan))
                };
                self.read_plan_write("reserve_effect", p.key, &plan, false, true)
            }
            (true, _, _) => Err(Error::InvalidArgument(
                "an action that needs approval is reserved with its action name and the digest \
                 of its arguments"
                    .into(),
            )),
            _ => {
                let plan = |_: &Connection, found: Option<EffectRecord>| {
                    let plan = planner::plan_reservation(found.as_ref(), &p, now);
                    Ok(Step::of_reservation(plan))
                };
                self.read_plan_write("reserve_effect", p.key, &plan, seen.is_none(), true)
            }
        }
    }

    fn write_transition(
        &self,
        call: &TransitionCall<'_>,
        read_back: bool,
    ) -> Result<Option<EffectRecord>> {
        self.transition_step(call, read_back, true)
    }

    fn replace_row(
        &self,
        (what, event): (&str, Event),
        key: &str,
        now: Option<Micros>,
        plan: &RowPlan<'_>,
    ) -> Result<EffectRecord> {
        let now = now.unwrap_or_else(now_micros);
        let plan = |_: &Connection, found: Option<EffectRecord>| {
            let expected = found.as_ref().map(Expected::of);
            Ok((expected, Step::wrote(plan(found, now)?, event)))
        };
        self.read_plan_write(what, key, &plan, false, true)
    }

    fn read_row(&self, key: &str) -> Result<Option<EffectRecord>> {
        self.read(key)
    }
}
