//! One pooled SQLite connection and how it is opened.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rusqlite::{Connection, OpenFlags};

use super::files::create_file;
use super::identity::{path_id, FileId};
use crate::error::{Error, Result};
use crate::url::{SqliteOptions, Synchronous};

/// One pooled connection; `broken` after an unknown `COMMIT` so the pool drops it; `file`:
/// the database file it has open (`None`: unknown, so it never writes; see `identity`).
pub struct Conn {
    pub(super) conn: Connection,
    pub(super) broken: bool,
    pub(super) file: Option<FileId>,
}

/// Runs on every pooled connection after it is set up (see [`super::SqliteStore::open_with`]).
pub type ConnectionInit = Arc<dyn Fn(&mut Connection) -> rusqlite::Result<()> + Send + Sync>;

pub(super) struct Manager {
    pub(super) opts: SqliteOptions,
    pub(super) init: Option<ConnectionInit>,
    /// A commit made the log due for a checkpoint that it deferred (see [`defer_checkpoints`]).
    pub(super) checkpoint_due: Arc<AtomicBool>,
}

/// SQLite's own threshold for an automatic checkpoint (`wal_autocheckpoint`'s default).
const AUTOCHECKPOINT_PAGES: i32 = 1000;

/// The log's automatic checkpoint, as SQLite's own (a passive one once a commit leaves
/// [`AUTOCHECKPOINT_PAGES`] pages in the log), except for a commit made on a thread that
/// must not wait ([`crate::store::nowait`]): a checkpoint writes the database file and
/// syncs it, so that commit only marks it `due`, and while it is due no write is made on
/// such a thread ([`crate::store::backend::Backend::writes_without_waiting`]): the next one is
/// made on a thread that may wait, and its commit runs the checkpoint. Deferring it to a
/// job that ran beside the loop's writes let the log grow without end: a log restarts only
/// when a write begins with every frame checkpointed, which a checkpoint racing new commits
/// never leaves. Its errors are ignored, as SQLite's own hook ignores them: the commit has
/// landed whatever the checkpoint meets.
fn defer_checkpoints(conn: &mut Connection, due: Arc<AtomicBool>) -> rusqlite::Result<()> {
    conn.wal_hook(Some(move |wal: &mut rusqlite::hooks::Wal, pages: i32| {
        if crate::store::nowait::on_loop() {
            if pages >= AUTOCHECKPOINT_PAGES {
                due.store(true, Ordering::Release);
            }
        } else {
            if pages >= AUTOCHECKPOINT_PAGES {
                let _ = wal.checkpoint();
            }
            due.store(false, Ordering::Release); // this commit saw to the log
        }
        Ok(())
    }))
}

impl crate::store::pool::Manage for Manager {
    type Conn = Conn;
    type Error = Error;

    fn connect(&self) -> Result<Conn> {
        let (mut conn, file) = open_pinned(&self.opts)?;
        defer_checkpoints(&mut conn, Arc::clone(&self.checkpoint_due))
            .map_err(|e| open_error(&self.opts.path, e))?;
        if let Some(init) = &self.init {
            init(&mut conn).map_err(|e| open_error(&self.opts.path, e))?;
        }
        Ok(Conn {
            conn,
            broken: false,
            file,
        })
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.broken
    }
}

pub(super) fn open_error(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Store(format!(
        "cannot open the SQLite store at {}: {e}",
        path.display()
    ))
}

/// A new connection (see `identity`) to the store file, and the file it has open: the one the path named just
/// before and just after the open, or `None` when they differ (the file changed meanwhile).
pub(super) fn open_pinned(opts: &SqliteOptions) -> Result<(Connection, Option<FileId>)> {
    let before = path_id(&opts.path).ok();
    let conn = open_connection(opts)?;
    let after = path_id(&opts.path).ok();
    let file = before.filter(|_| before == after);
    Ok((conn, file))
}

pub(super) fn open_connection(opts: &SqliteOptions) -> Result<Connection> {
    let path = &opts.path;
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    create_file(path, opts.file_mode)
        .map_err(|e| open_error(path, format!("cannot create the file: {e}")))?;
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
    register_receipt_hash(&conn).map_err(|e| open_error(path, e))?;
    Ok(conn)
}

/// `ctrlrun_receipt_hash(...)`, which the write statements call to set a row's chain head:
/// [`crate::receipt::hash_fields`] over its arguments (integers as decimal text).
fn register_receipt_hash(conn: &Connection) -> rusqlite::Result<()> {
    use rusqlite::functions::FunctionFlags;
    use rusqlite::types::ValueRef;
    conn.create_scalar_function(
        "ctrlrun_receipt_hash",
        crate::receipt::HASHED_FIELDS as i32,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        |ctx| {
            let mut texts: Vec<Option<String>> = Vec::with_capacity(ctx.len());
            for i in 0..ctx.len() {
                texts.push(match ctx.get_raw(i) {
                    ValueRef::Null => None,
                    ValueRef::Integer(n) => Some(n.to_string()),
                    ValueRef::Text(t) => Some(String::from_utf8_lossy(t).into_owned()),
                    other => {
                        return Err(rusqlite::Error::UserFunctionError(
                            format!("a receipt field of type {:?}", other.data_type()).into(),
                        ))
                    }
                });
            }
            let fields: Vec<Option<&str>> = texts.iter().map(|t| t.as_deref()).collect();
            Ok(crate::receipt::hash_fields(&fields))
        },
    )
}
