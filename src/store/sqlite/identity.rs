//! Which file a SQLite store writes to.
//!
//! A store file deleted or replaced under a running process (a deploy that recreates the state
//! folder, a restore from a backup, a cleanup job) would let this process write into the old
//! file while new processes reserve in the new one: the same key could run twice. So the store
//! records which file it opened ([`Held`]), and every write transaction checks, under the write
//! lock, that the path still names that file and that the connection writing has that same
//! file open.
//!
//! A file is named by its (device, inode), and a number can be handed to a new file once the
//! old one is freed (ext4 reuses a freed inode number at once). How each platform rules that
//! out (`pin` below):
//! - Linux: the store holds an `O_PATH` descriptor on the file for its whole life. It keeps the
//!   inode allocated, so no other file can carry its number, even while a store whose pooled
//!   connections were all closed (they are, before a fork) holds the old file by nothing else.
//!   An `O_PATH` descriptor is no open file for I/O, so closing it leaves alone the POSIX locks
//!   that SQLite's connections of this process hold on the file; closing an ordinary
//!   descriptor would release them all, under another store's open transaction.
//! - Other Unix systems (macOS, FreeBSD, OpenBSD): macOS has no `O_PATH`, and an ordinary
//!   descriptor would drop SQLite's locks when closed (FreeBSD's `O_PATH` is not relied on
//!   either). There the identity also carries the file's birth time: a new file given a freed
//!   inode number is told apart by when it was made, at the file system's timestamp resolution.
//!   APFS never reuses a file id at all; on a file system that does (UFS, ZFS), a file deleted
//!   and recreated at the same inode within one tick of its clock, while the store had no
//!   connection open, would compare equal. A file system that keeps no birth time (macOS
//!   reports the epoch, FreeBSD -1; NetBSD's std has none) is refused at open.
//! - Windows: refused at open (`refuse_unsupported`): std gives no stable file index to name a
//!   file by, and a guard that cannot tell one file from another is no guard.
//!
//! SQLite does not give out the descriptor of a connection's own file (only an internal struct,
//! through `SQLITE_FCNTL_FILE_POINTER`), so a connection's file is pinned as it opens: the path
//! names the held file just before and just after `sqlite3_open`, and the held file's identity
//! cannot have been swapped out and back in between. A connection opened otherwise is marked
//! unknown and refused.
//!
//! The build flag `--cfg ctrlrun_portable_identity` takes the other-Unix path on Linux, so that
//! path is compiled and tested here (`make test-portable`).

use std::path::Path;

use crate::error::{Error, Result};

pub(super) use pin::{path_id, FileId};

#[cfg(all(
    any(target_os = "linux", target_os = "android"),
    not(ctrlrun_portable_identity)
))]
mod pin {
    use std::fs::{File, OpenOptions};
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    use std::path::Path;

    /// A file's (device, inode); the held descriptor keeps the inode from being reused.
    pub type FileId = (u64, u64);

    pub fn path_id(path: &Path) -> std::io::Result<FileId> {
        let meta = std::fs::metadata(path)?;
        Ok((meta.dev(), meta.ino()))
    }

    /// An `O_PATH` descriptor on the file: it pins the inode and answers `fstat` (see above).
    pub fn hold(path: &Path) -> std::io::Result<(Option<File>, FileId)> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
            .open(path)?;
        let meta = file.metadata()?;
        Ok((Some(file), (meta.dev(), meta.ino())))
    }
}

#[cfg(all(
    unix,
    any(
        not(any(target_os = "linux", target_os = "android")),
        ctrlrun_portable_identity
    )
))]
mod pin {
    use std::fs::File;
    use std::os::unix::fs::MetadataExt;
    use std::path::Path;
    use std::time::UNIX_EPOCH;

    /// A file's (device, inode, birth time in nanoseconds since the epoch): nothing is held
    /// open, so the birth time tells a new file with a reused inode number from the old one.
    pub type FileId = (u64, u64, u128);

    pub fn path_id(path: &Path) -> std::io::Result<FileId> {
        let meta = std::fs::metadata(path)?;
        // A file system that keeps no birth time fails here (or reports the epoch, or before
        // it), and the store refuses to open rather than compare inode numbers alone.
        let no_birth_time = || {
            std::io::Error::other(
                "its file system keeps no birth time, so a replaced file could not be told \
                 apart; keep the store on the system's own disk (APFS, UFS, ZFS)",
            )
        };
        let born = meta
            .created()
            .map_err(|_| no_birth_time())?
            .duration_since(UNIX_EPOCH)
            .map_err(|_| no_birth_time())?;
        if born.is_zero() {
            return Err(no_birth_time());
        }
        Ok((meta.dev(), meta.ino(), born.as_nanos()))
    }

    /// Nothing to hold: closing any descriptor on the file would drop SQLite's POSIX locks.
    pub fn hold(path: &Path) -> std::io::Result<(Option<File>, FileId)> {
        Ok((None, path_id(path)?))
    }
}

#[cfg(not(unix))]
mod pin {
    use std::fs::File;
    use std::path::Path;

    pub type FileId = ();

    fn unsupported() -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::Unsupported, super::UNSUPPORTED)
    }

    pub fn path_id(_path: &Path) -> std::io::Result<FileId> {
        Err(unsupported())
    }

    pub fn hold(_path: &Path) -> std::io::Result<(Option<File>, FileId)> {
        Err(unsupported())
    }
}

#[cfg_attr(unix, allow(dead_code))]
const UNSUPPORTED: &str = "the SQLite store is not available on this platform: ctrlrun cannot \
     tell which file it writes to (std gives no stable file index here), and without that a \
     replaced store file could let a key run twice. Use a PostgreSQL store \
     (CTRLRUN_STORE=postgresql://...), or run under WSL";

/// Refuse a SQLite store, before anything is created on disk, on a platform with no file
/// identity (see above).
pub(super) fn refuse_unsupported(path: &Path) -> Result<()> {
    if cfg!(unix) {
        return Ok(());
    }
    Err(Error::InvalidArgument(format!(
        "cannot open the SQLite store at {}: {UNSUPPORTED}",
        path.display()
    )))
}

/// The database file as the store opened it, held (where the platform can) for the store's life.
pub(super) struct Held {
    /// Never read: holding it keeps the inode allocated, so its number names no other file.
    _pin: Option<std::fs::File>,
    id: FileId,
}

impl Held {
    /// Hold the file the path names now (SQLite has just opened or created it).
    pub(super) fn open(path: &Path) -> Result<Held> {
        let (pin, id) = pin::hold(path).map_err(|e| {
            Error::Store(format!(
                "cannot open the SQLite store at {}: {e}",
                path.display()
            ))
        })?;
        Ok(Held { _pin: pin, id })
    }

    /// Refuse unless the path still names the held file and the connection about to write
    /// (`conn`: the file it opened) has it open. One `stat` of the path: a path that names the
    /// held identity names the held file (see above), which is therefore still linked.
    /// Whether a connection that opened `conn` has the store's file open (no `stat` of the path:
    /// the check a read makes, which writes nothing).
    pub(super) fn opened_by(&self, conn: Option<FileId>) -> bool {
        conn == Some(self.id)
    }

    pub(super) fn check(&self, path: &Path, conn: Option<FileId>) -> Result<()> {
        let what = match path_id(path) {
            Ok(id) if id == self.id && conn == Some(self.id) => return Ok(()),
            // The path names the file again, but this connection opened another one
            // (the path named something else while it opened).
            Ok(id) if id == self.id => {
                "replaced by another file while this store opened a connection".to_owned()
            }
            Ok(_) => "replaced by another file".to_owned(),
            Err(e) => format!("deleted ({e})"),
        };
        Err(Error::Store(format!(
            "the SQLite store file at {} was {what} since this store opened it; refusing to \
             write, since other processes may now reserve in a different file. Nothing was \
             written. Open the store again (or restart the process) once the file is where it \
             belongs",
            path.display()
        )))
    }
}
