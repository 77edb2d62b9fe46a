//! The SQLite store's handle: its file, its pool and its transactions.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::Connection;

use super::conn::{open_connection, open_error, open_pinned, Conn, ConnectionInit, Manager};
use super::files::create_folder;
use super::identity::{refuse_unsupported, FileId, Held};
use super::jobs::{Grouped, Job};
use super::schema::init_schema;
use super::sql::select;
use crate::env::now_micros;
use crate::error::{Error, Result};
use crate::record::{EffectRecord, Micros};
use crate::store::group::Group;
use crate::store::nowait;
use crate::store::pool::{Pool, Pooled};
use crate::store::posture::{PostureLine, Standing};
use crate::store::recovery::{reread_failed, Commit, Reread};
use crate::url::{SqliteOptions, Synchronous};

pub struct SqliteStore {
    pub(super) opts: SqliteOptions,
    pool: Arc<Pool<Manager>>,
    /// The database file as the store opened it, held open (see [`super::identity`]).
    held: Held,
    /// A commit made without waiting deferred the log's checkpoint (see `conn`).
    checkpoint_due: Arc<AtomicBool>,
    /// Group commit (the URL's `group_commit`): the writes in flight at once
    /// ([`crate::store::group`], [`super::batches`]).
    pub(super) writes: Group<Job, Grouped>,
}

impl SqliteStore {
    /// Open (creating if missing) the store file. The folder is created if needed (modes: see
    /// `files`).
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
        refuse_unsupported(&opts.path)?;
        if opts.path.is_dir() {
            return Err(open_error(&opts.path, "it is a directory, not a file"));
        }
        if let Some(parent) = opts.path.parent() {
            create_folder(parent, opts.file_mode).map_err(|e| {
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
        for line in posture(opts.synchronous) {
            if line.standing == Standing::Fail {
                log::warn!(
                    target: "ctrlrun.store",
                    "posture: {} of sqlite:///{}: {}",
                    line.check,
                    opts.path.display(),
                    line.detail
                );
            }
        }
        let checkpoint_due = Arc::new(AtomicBool::new(false));
        let pool = Arc::new(Pool::new(
            Manager {
                opts: opts.clone(),
                init,
                checkpoint_due: Arc::clone(&checkpoint_due),
            },
            8,
            opts.busy_timeout + Duration::from_secs(5),
        ));
        // No SQLite connection may stay open across a fork (see `store::fork`).
        let weak = Arc::downgrade(&pool);
        crate::store::fork::register(weak);
        let wait = opts.group_commit_wait;
        Ok(SqliteStore {
            opts,
            pool,
            held,
            checkpoint_due,
            writes: Group::new(wait),
        })
    }

    /// A commit made without waiting left the log due for a checkpoint (see `conn`).
    pub(super) fn checkpoint_due(&self) -> bool {
        self.checkpoint_due.load(Ordering::Acquire)
    }

    /// A pooled connection; inside [`nowait::run`], only an idle one (else `Error::WouldWait`).
    /// Failing to get one is `failed`'s error, given the reason.
    fn lend(&self, failed: impl FnOnce(String) -> Error) -> Result<Pooled<'_, Manager>> {
        let got = if nowait::must_not_wait() {
            Ok(self.pool.try_idle())
        } else {
            self.pool.get().map(Some)
        };
        got.transpose().ok_or(Error::WouldWait)?.map_err(|e| {
            failed(format!(
                "cannot get a connection to the SQLite store at {}: {e}",
                self.opts.path.display()
            ))
        })
    }

    /// A pooled connection for a write: failing to get one is a write's error.
    pub(super) fn conn(&self) -> Result<Pooled<'_, Manager>> {
        self.lend(|why| Error::StoreWriteFailed(format!("{why}; nothing was written")))
    }

    pub(super) fn failed(&self, what: &str, key: &str, e: impl std::fmt::Display) -> Error {
        Error::StoreWriteFailed(format!(
            "{what} for effect '{key}' failed in the SQLite store at {}: {e}; nothing was \
             committed, so the write may be retried",
            self.opts.path.display()
        ))
    }

    /// The path still names the file this store opened, and `conn` (the file a connection
    /// opened) is it: checked by every write transaction under the write lock (see
    /// [`super::identity`]).
    pub(super) fn check_identity(&self, conn: Option<FileId>) -> Result<()> {
        self.held.check(&self.opts.path, conn)
    }

    /// A fresh connection (not pooled) for a re-read, refused unless it has the store's file
    /// open: never re-read (or create) another file at the path.
    pub(super) fn fresh_conn(&self) -> Result<Connection> {
        let (conn, file) = open_pinned(&self.opts)?;
        self.check_identity(file)?;
        Ok(conn)
    }

    /// `BEGIN IMMEDIATE`, the file's identity check, `body`, `COMMIT`. Errors before `COMMIT`
    /// roll back and are failed writes; an error on `COMMIT` is reported as [`Commit::Unknown`].
    pub(super) fn txn<T>(
        &self,
        conn: &mut Conn,
        what: &str,
        key: &str,
        body: impl FnOnce(&Connection) -> Result<T>,
    ) -> Result<Commit<T>> {
        // Inside `nowait::run`, the write lock is asked for once, without the busy handler.
        let no_wait = nowait::must_not_wait();
        if no_wait && conn.conn.busy_timeout(Duration::ZERO).is_err() {
            conn.broken = true;
            return Err(Error::WouldWait);
        }
        let begun = conn
            .conn
            .prepare_cached("BEGIN IMMEDIATE")
            .and_then(|mut s| s.execute([]));
        if no_wait && conn.conn.busy_timeout(self.opts.busy_timeout).is_err() {
            conn.broken = true; // never hand out a connection left without its busy timeout
        }
        if let Err(e) = begun {
            if !conn.conn.is_autocommit() {
                let _ = conn.conn.execute_batch("ROLLBACK");
            }
            if no_wait && is_busy(&e) {
                return Err(Error::WouldWait);
            }
            return Err(self.failed(what, key, e));
        }
        nowait::began();
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
    pub(super) fn read_conn(&self) -> Result<Pooled<'_, Manager>> {
        self.lend(Error::Store)
    }

    pub(super) fn read(&self, key: &str) -> Result<Option<EffectRecord>> {
        let conn = self.read_conn()?;
        // A connection opened after the file was deleted or replaced (the pool's idle ones may
        // have been closed, before a fork) has another file open: refused, never read.
        if !self.held.opened_by(conn.file) {
            self.check_identity(conn.file)?;
        }
        select(&conn.conn, key).map_err(|e| {
            Error::Store(format!(
                "reading effect '{key}' from the SQLite store at {} failed: {e}",
                self.opts.path.display()
            ))
        })
    }
}

/// Another connection holds the lock asked for.
fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
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

/// The SQLite store's posture (see [`crate::store::posture`]): whether a commit is flushed, and
/// that one file on one host has no replica.
pub(super) fn posture(synchronous: Synchronous) -> Vec<PostureLine> {
    let durable = match synchronous {
        Synchronous::Full => PostureLine::new(
            "durable commits",
            Standing::Pass,
            "every commit that records an outcome or a reservation is flushed to disk \
             (synchronous=full)",
        ),
        Synchronous::Normal => PostureLine::new(
            "durable commits",
            Standing::Fail,
            "synchronous=normal: a power loss or an operating system crash can lose the last \
             commits, and a retry then runs their effects twice",
        ),
    };
    let replication = PostureLine::new(
        "replication",
        Standing::Info,
        "one file on this host: no replica (a copy restored from a backup lacks the writes \
         made since)",
    );
    vec![durable, replication]
}
