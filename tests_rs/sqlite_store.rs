//! What only the SQLite store does: opening files (paths, folders, schema versions, URL
//! options), a busy database, and a row written by another connection between the plain read
//! and the write lock. The contract both stores keep is in `store_contract.rs`.

use std::sync::Arc;

use crate::support::*;
use ctrlrun::error::DuplicateKind;
use ctrlrun::store::open_store;
use ctrlrun::{EffectRecord, EffectState, Error, Store, Transition};
use tempfile::TempDir;

// ---------------------------------------------------------------------------------------------
// opening
// ---------------------------------------------------------------------------------------------

#[test]
fn in_memory_and_malformed_urls_are_refused() {
    for url in [
        ":memory:",
        "sqlite://",
        "sqlite:///:memory:",
        "redis://x",
        "",
    ] {
        match open_store(url) {
            Err(Error::InvalidArgument(_)) => {}
            Err(other) => panic!("{url:?}: expected InvalidArgument, got {other:?}"),
            Ok(_) => panic!("{url:?}: expected InvalidArgument, got a store"),
        }
    }
}

#[test]
fn a_file_of_random_bytes_is_a_store_error_naming_the_path() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("garbage.db");
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let bytes: Vec<u8> = (0..8192)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    assert!(!bytes.starts_with(b"SQLite format 3"));
    std::fs::write(&path, &bytes).unwrap();
    let m = assert_store_error(open_store(&url_of(&path)));
    assert!(m.contains(&path.display().to_string()), "{m}");
}

#[test]
fn a_path_under_a_regular_file_is_a_store_error_naming_the_path() {
    let dir = TempDir::new().unwrap();
    let afile = dir.path().join("afile");
    std::fs::write(&afile, b"not a folder").unwrap();
    let path = afile.join("state.db");
    let m = assert_store_error(open_store(&url_of(&path)));
    assert!(m.contains(&path.display().to_string()), "{m}");
}

#[test]
fn a_directory_as_the_path_is_a_store_error() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("adir");
    std::fs::create_dir(&path).unwrap();
    let m = assert_store_error(open_store(&url_of(&path)));
    assert!(m.contains(&path.display().to_string()), "{m}");
}

#[test]
fn a_newer_schema_version_is_a_store_error() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("future.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE t (x INTEGER); PRAGMA user_version = 99;")
            .unwrap();
    }
    let m = assert_store_error(open_store(&url_of(&path)));
    assert!(m.contains("newer"), "{m}");
    assert!(m.contains("99"), "{m}");
}

#[test]
fn a_new_file_and_its_folder_are_created_and_reopened() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("nested/deeper/state.db");
    let s = open_store(&url_of(&path)).unwrap();
    assert!(path.is_file());
    assert!(s.describe().contains(&path.display().to_string()));
    s.reserve("k", A1, LEASE, false, Some(T0)).unwrap();
    drop(s);
    let again = open_store(&url_of(&path)).unwrap();
    assert_eq!(again.get("k").unwrap().unwrap().action_id, A1);
    let version: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, ctrlrun::store::sqlite::SCHEMA_VERSION);
}

/// What the store creates is its owner's only (the umask may take more away, never add); a
/// folder that exists keeps its mode. (tests_py/store/test_sqlite_file_modes.py sets the umask,
/// checks `file_mode` and the -wal and -shm files.)
#[test]
fn a_new_file_and_folder_have_no_group_or_other_bits_and_an_existing_folder_is_untouched() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    let dir = TempDir::new().unwrap();
    let made = dir.path().join("made").join("state.db");
    let store = open_store(&url_of(&made)).unwrap();
    store.reserve("k", A1, LEASE, false, Some(T0)).unwrap();
    assert_eq!(mode(&made) & 0o077, 0, "{:o}", mode(&made));
    assert_eq!(mode(made.parent().unwrap()) & 0o077, 0);
    let kept = dir.path().join("kept");
    std::fs::create_dir(&kept).unwrap();
    std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o755)).unwrap();
    open_store(&url_of(&kept.join("state.db"))).unwrap();
    assert_eq!(mode(&kept), 0o755);
    assert_eq!(mode(&kept.join("state.db")) & 0o077, 0);
}

#[test]
fn query_options_are_checked() {
    let dir = TempDir::new().unwrap();
    let base = url_of(&dir.path().join("state.db"));
    for q in [
        "?synchronous=normal",
        "?synchronous=full",
        "?busy_timeout=1",
        "?file_mode=0640",
    ] {
        let s = open_store(&format!("{base}{q}")).unwrap_or_else(|e| panic!("{q}: {e}"));
        let key = format!("k{q}");
        s.reserve(&key, A1, LEASE, false, Some(T0)).unwrap();
        assert!(s.get(&key).unwrap().is_some());
    }
    let parsed = ctrlrun::url::parse(&format!("{base}?synchronous=normal")).unwrap();
    assert!(
        matches!(
            parsed,
            ctrlrun::url::StoreUrl::Sqlite(ref o)
                if o.synchronous == ctrlrun::url::Synchronous::Normal
        ),
        "{parsed:?}"
    );
    for q in ["?synchronous=sometimes", "?bogus=1"] {
        match open_store(&format!("{base}{q}")) {
            Err(Error::InvalidArgument(m)) => {
                let word = q.trim_start_matches('?').split('=').next().unwrap();
                let named = if word == "bogus" {
                    "bogus"
                } else {
                    "sometimes"
                };
                assert!(m.contains(named), "{q}: {m}");
            }
            Err(other) => panic!("{q}: expected InvalidArgument, got {other:?}"),
            Ok(_) => panic!("{q}: expected InvalidArgument, got a store"),
        }
    }
}

#[test]
fn a_busy_database_at_begin_is_a_failed_write_and_nothing_changes() {
    let f = Fixture::new(Backend::Sqlite);
    let held = f.reserve("held", A1, T0).unwrap();
    let busy = open_store(&format!("{}?busy_timeout=0", url_of(&f.db()))).unwrap();
    let locker = rusqlite::Connection::open(f.db()).unwrap();
    locker.execute_batch("BEGIN IMMEDIATE").unwrap();
    match busy.reserve("k", A2, LEASE, false, Some(T0)) {
        Err(Error::StoreWriteFailed(m)) => assert!(m.contains("'k'"), "{m}"),
        other => panic!("expected StoreWriteFailed, got {other:?}"),
    }
    match busy.transition("held", A1, Some(1), &Transition::Begin, Some(T0 + 1)) {
        Err(Error::StoreWriteFailed(_)) => {}
        other => panic!("expected StoreWriteFailed, got {other:?}"),
    }
    // Readers are not blocked (WAL).
    assert_eq!(busy.get("held").unwrap(), Some(held.clone()));
    locker.execute_batch("ROLLBACK").unwrap();
    assert!(busy.get("k").unwrap().is_none(), "nothing was committed");
    assert_eq!(f.get("held"), held);
    // Once the lock is gone the same writes succeed (the failed write was safe to retry).
    busy.reserve("k", A2, LEASE, false, Some(T0)).unwrap();
    busy.transition("held", A1, Some(1), &Transition::Begin, Some(T0 + 1))
        .unwrap();
}

// ---------------------------------------------------------------------------------------------
// the reservation's plain read saw no row, but a row appears before the write lock is taken
// ---------------------------------------------------------------------------------------------

/// A store whose pooled connections, the first time they prepare `BEGIN`, let another
/// connection commit `row` first (as a second process would, between our read and our lock).
/// Also returns how many `INSERT` statements the store's connections prepared.
fn store_with_a_writer_before_begin(
    dir: &TempDir,
    row: EffectRecord,
) -> (
    ctrlrun::store::sqlite::SqliteStore,
    Arc<std::sync::atomic::AtomicUsize>,
) {
    use ctrlrun::store::sqlite::{ConnectionInit, SqliteStore};
    use rusqlite::hooks::{AuthAction, Authorization, TransactionOperation};
    use std::sync::atomic::{AtomicBool, Ordering};

    let url = url_of(&dir.path().join("state.db"));
    let ctrlrun::url::StoreUrl::Sqlite(opts) = ctrlrun::url::parse(&url).unwrap() else {
        panic!("a SQLite URL")
    };
    let writer = open_store(&url).unwrap(); // creates the schema
    drop(writer);
    let done = Arc::new(AtomicBool::new(false));
    let inserts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = inserts.clone();
    let path = dir.path().join("state.db");
    let init: ConnectionInit = Arc::new(move |conn| {
        let (done, path, row, counted) = (done.clone(), path.clone(), row.clone(), counted.clone());
        conn.authorizer(Some(move |ctx: rusqlite::hooks::AuthContext<'_>| {
            // (an insert into the effects table; its trigger's receipt is authorized with it)
            if let AuthAction::Insert {
                table_name: "ctrlrun_effects",
            } = ctx.action
            {
                counted.fetch_add(1, Ordering::SeqCst);
            }
            if let AuthAction::Transaction {
                operation: TransactionOperation::Begin,
            } = ctx.action
            {
                if !done.swap(true, Ordering::SeqCst) {
                    let other = rusqlite::Connection::open(&path).unwrap();
                    other
                        .execute(
                            "INSERT INTO ctrlrun_effects (effect_key, state, action_id, attempt, \
                             created_at, updated_at, lease_expires_at, attempt_token, \
                             last_event, receipt_seq, receipt_hash) \
                             VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6, ?7, 'reservation', 1, \
                             'another writer')",
                            rusqlite::params![
                                row.effect_key,
                                row.state.as_str(),
                                row.action_id,
                                row.attempt,
                                row.created_at,
                                row.lease_expires_at,
                                row.attempt_token
                            ],
                        )
                        .unwrap();
                }
            }
            Authorization::Allow
        }))
    });
    (SqliteStore::open_with(opts, Some(init)).unwrap(), inserts)
}

#[test]
fn a_row_committed_between_the_plain_read_and_the_write_lock_is_obeyed() {
    let dir = TempDir::new().unwrap();
    let holder = EffectRecord {
        effect_key: "k".into(),
        state: EffectState::Executing,
        action_id: A1.into(),
        attempt: 1,
        created_at: T0,
        updated_at: T0,
        lease_expires_at: Some(T0 + LEASE),
        result: None,
        error: None,
        resolved_by: None,
        attempt_token: Some("a".repeat(32)),
        action: None,
        holder: None,
        args_digest: None,
        arg_digests: None,
        approval_id: None,
    };
    let (store, inserts) = store_with_a_writer_before_begin(&dir, holder.clone());
    // our plain read finds nothing; the insert meets the holder's row and does nothing; the
    // row is read under the lock and the planner refuses: in progress
    assert_duplicate(
        store.reserve("k", A2, LEASE, true, Some(T0 + 1)),
        DuplicateKind::InProgress,
    );
    assert_eq!(store.get("k").unwrap().unwrap(), holder);
    // the insert was tried first (a refusal planned from a read under the lock inserts nothing)
    assert_eq!(inserts.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[test]
fn a_lapsed_row_committed_between_the_plain_read_and_the_write_lock_is_lapsed() {
    let dir = TempDir::new().unwrap();
    let stale = EffectRecord {
        effect_key: "k".into(),
        state: EffectState::Executing,
        action_id: A1.into(),
        attempt: 1,
        created_at: T0,
        updated_at: T0,
        lease_expires_at: Some(T0 + 10),
        result: None,
        error: None,
        resolved_by: None,
        attempt_token: Some("a".repeat(32)),
        action: None,
        holder: None,
        args_digest: None,
        arg_digests: None,
        approval_id: None,
    };
    let (store, _) = store_with_a_writer_before_begin(&dir, stale);
    assert_ambiguous(store.reserve("k", A2, LEASE, true, Some(T0 + LEASE)));
    assert_eq!(
        store.get("k").unwrap().unwrap().state,
        EffectState::Ambiguous
    );
}
