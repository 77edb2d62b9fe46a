//! A SQLite store file deleted or replaced under an open store is refused, on every platform's
//! file identity (src/store/sqlite/identity.rs): `make test-portable` runs these again built
//! with `--cfg ctrlrun_portable_identity`, the path of Unix systems without `O_PATH`, where
//! no descriptor is held and a reused inode number is told apart by the birth time.
//! (tests_py/store/test_sqlite_file_identity.py: the same with real OS processes.)

use crate::support::*;
use ctrlrun::store::open_store;
use tempfile::TempDir;

fn remove_store_files(folder: &std::path::Path) {
    for entry in std::fs::read_dir(folder).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
}

#[test]
fn a_deleted_store_file_is_refused_and_the_new_one_is_untouched() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("state.db");
    let old = open_store(&url_of(&path)).unwrap();
    old.reserve("a", A1, LEASE, false, Some(T0)).unwrap();
    remove_store_files(dir.path());
    let msg = assert_store_error(old.reserve("b", A2, LEASE, false, Some(T0)));
    assert!(msg.contains("deleted"), "{msg}");
    // A new store at the path: on ext4 its file often takes the freed inode number at once.
    let new = open_store(&url_of(&path)).unwrap();
    new.reserve("c", A1, LEASE, false, Some(T0)).unwrap();
    let msg = assert_store_error(old.reserve("b", A2, LEASE, false, Some(T0)));
    assert!(msg.contains("replaced by another file"), "{msg}");
    assert!(
        new.get("b").unwrap().is_none(),
        "the old store wrote into the new file"
    );
    assert_eq!(new.get("c").unwrap().unwrap().action_id, A1);
}

#[test]
fn a_store_file_replaced_by_a_copy_is_refused() {
    let dir = TempDir::new().unwrap();
    let folder = dir.path().join("state");
    let path = folder.join("state.db");
    let old = open_store(&url_of(&path)).unwrap();
    old.reserve("a", A1, LEASE, false, Some(T0)).unwrap();
    drop(open_store(&url_of(&path)).unwrap()); // a checkpoint: the copy holds row a
    let copy = dir.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    for entry in std::fs::read_dir(&folder).unwrap() {
        let from = entry.unwrap().path();
        std::fs::copy(&from, copy.join(from.file_name().unwrap())).unwrap();
    }
    std::fs::remove_dir_all(&folder).unwrap();
    std::fs::rename(&copy, &folder).unwrap();
    let msg = assert_store_error(old.reserve("b", A2, LEASE, false, Some(T0)));
    assert!(msg.contains("replaced by another file"), "{msg}");
    let new = open_store(&url_of(&path)).unwrap();
    assert!(new.get("b").unwrap().is_none());
    assert_eq!(new.get("a").unwrap().unwrap().action_id, A1);
}

/// With every pooled connection closed (as before a fork), nothing but the identity remembers
/// the old file; a new file at the path (ext4 hands it the freed inode number at once) is still
/// told apart: by the held descriptor on Linux, by the birth time on the portable path.
#[test]
fn a_file_recreated_while_the_store_held_no_connection_is_refused() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("state.db");
    let old = open_store(&url_of(&path)).unwrap();
    old.reserve("a", A1, LEASE, false, Some(T0)).unwrap();
    ctrlrun::store::fork::prepare(); // closes the idle connections of every pool
    ctrlrun::store::fork::release();
    remove_store_files(dir.path());
    std::thread::sleep(std::time::Duration::from_millis(50)); // past the clock's tick
    let new = open_store(&url_of(&path)).unwrap();
    new.reserve("c", A1, LEASE, false, Some(T0)).unwrap();
    let msg = assert_store_error(old.reserve("b", A2, LEASE, false, Some(T0)));
    assert!(msg.contains("replaced by another file"), "{msg}");
    assert!(new.get("b").unwrap().is_none());
}
