//! Which file a SQLite store writes to.
//!
//! A store file deleted or replaced under a running process (a deploy that recreates the state
//! folder, a restore from a backup, a cleanup job) would let this process write into the old
//! file while new processes reserve in the new one: the same key could run twice. So the store
//! holds a descriptor on the database file from the moment it opens it ([`Held`]), and every
//! write transaction checks, under the write lock, that the path still names that open file
//! and that the connection writing has that same file open.
//!
//! The descriptor matters: a (device, inode) pair remembered as numbers can be handed to a new
//! file once the old one is freed (ext4 reuses a freed inode number at once), and a store whose
//! pooled connections were all closed (they are, before a fork) holds the old file by nothing
//! else. A held descriptor keeps the inode allocated, so no other file can carry its number.
//!
//! SQLite does not give out the descriptor of a connection's own file (only an internal struct,
//! through `SQLITE_FCNTL_FILE_POINTER`), so a connection's file is pinned as it opens: the path
//! names the held file just before and just after `sqlite3_open`, and the held file's inode
//! cannot have been swapped out and back in between. A connection opened otherwise is marked
//! unknown and refused.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use crate::error::{Error, Result};

/// A file's (device, inode).
pub(super) type FileId = (u64, u64);

pub(super) fn path_id(path: &Path) -> std::io::Result<FileId> {
    let meta = std::fs::metadata(path)?;
    Ok((meta.dev(), meta.ino()))
}

/// The database file as the store opened it, held open for the store's life.
pub(super) struct Held {
    /// Never read: holding it keeps the inode allocated, so its number names no other file.
    _pin: File,
    id: FileId,
}

impl Held {
    /// Hold the file the path names now (SQLite has just opened or created it).
    ///
    /// The descriptor is `O_PATH`: it pins the inode and answers `fstat`, but it is no open
    /// file for I/O, so closing it (when the store is dropped) leaves alone the POSIX locks
    /// that SQLite's connections of this process hold on the file. Closing an ordinary
    /// descriptor would release them all, under another store's open transaction.
    pub(super) fn open(path: &Path) -> Result<Held> {
        let cannot = |e: std::io::Error| {
            Error::Store(format!(
                "cannot open the SQLite store at {}: {e}",
                path.display()
            ))
        };
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
            .open(path)
            .map_err(cannot)?;
        let meta = file.metadata().map_err(cannot)?;
        Ok(Held {
            _pin: file,
            id: (meta.dev(), meta.ino()),
        })
    }

    /// Refuse unless the path still names the held file and the connection about to write
    /// (`conn`: the file it opened) has it open. One `stat` of the path: since the held
    /// descriptor keeps the inode allocated, no other file can carry its (device, inode), so a
    /// path that names it names the held file, which is therefore still linked (no `fstat` of
    /// the descriptor is needed to say so).
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
