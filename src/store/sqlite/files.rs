//! What the SQLite store creates on disk, and with which modes.
//!
//! A store file holds every decision: whoever can write it can grant, deny and resolve, and add
//! console accounts (docs/concepts.md, "Who can write a SQLite store"). So what ctrlrun creates
//! is its owner's only unless the URL's `file_mode` says otherwise: the database file with that
//! mode (default 0600), a missing folder with it plus a search bit wherever it has a read bit
//! (0700). SQLite creates the `-wal` and `-shm` files with the database file's mode, by its own
//! rule (`findCreateFileMode`; tests_py/store/test_sqlite_file_modes.py holds it to that). The
//! process umask applies on top, so it can make these modes stricter, never looser. Nothing that
//! exists already is chmod-ed: its owner chose its mode.

use std::fs::{DirBuilder, OpenOptions};
use std::io::ErrorKind;
#[cfg(unix)]
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

#[cfg(unix)]
/// The mode of a folder created for a store file of mode `file_mode`: a search (x) bit
/// wherever it has a read bit (0600 gives 0700, 0640 gives 0750).
fn folder_mode(file_mode: u32) -> u32 {
    file_mode | ((file_mode & 0o444) >> 2)
}

/// Create `folder` and any missing folder above it, each with [`folder_mode`]; those that
/// exist are left as they are.
#[cfg_attr(not(unix), allow(unused_variables))]
pub(super) fn create_folder(folder: &Path, file_mode: u32) -> std::io::Result<()> {
    let mut builder = DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)] // elsewhere the SQLite store is refused before this (see `identity`)
    builder.mode(folder_mode(file_mode));
    builder.create(folder)
}

/// Create the database file, empty and of `file_mode`, when nothing is at `path` (SQLite takes
/// an empty file for a new database). A file made meanwhile by another process is left alone.
#[cfg_attr(not(unix), allow(unused_variables))]
pub(super) fn create_file(path: &Path, file_mode: u32) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        _ => return Ok(()), // there is something: SQLite opens it, or says why it cannot
    }
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    options.mode(file_mode);
    match options.open(path) {
        Err(e) if e.kind() != ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}
