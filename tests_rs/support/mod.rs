//! What the store tests share: the backends, a fixture with a fresh store on one, the
//! transitions by name and the assertions on refusals.
//!
//! PostgreSQL is the server named by `CTRLRUN_TEST_POSTGRES_URL`; `make test-rs` starts a
//! throwaway cluster and sets it (`python3 -m throwaway.pgserver -- cargo test`). Without it a
//! PostgreSQL test fails: it never skips.

#![allow(dead_code)]

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use ctrlrun::error::DuplicateKind;
use ctrlrun::store::open_store;
use ctrlrun::{EffectRecord, Error, Micros, Store, Transition};
use tempfile::TempDir;

pub const LEASE: Micros = 300_000_000; // 5 minutes
pub const T0: Micros = 1_800_000_000_000_000;
pub const A1: &str = "act_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa1";
pub const A2: &str = "act_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa2";
pub const PG_ENV: &str = "CTRLRUN_TEST_POSTGRES_URL";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

pub fn url_of(path: &Path) -> String {
    assert!(path.is_absolute());
    format!("sqlite:///{}", path.display())
}

/// The server's URL from the environment, without our own options.
pub fn pg_base_url() -> String {
    match std::env::var(PG_ENV) {
        Ok(url) if !url.is_empty() => url,
        _ => panic!(
            "{PG_ENV} is not set: the store contract runs on PostgreSQL too. Run `make test-rs` \
             (it starts a throwaway cluster), or set {PG_ENV}=postgresql://user@host:port/db"
        ),
    }
}

/// A fresh store: a new SQLite file, or a new schema on the PostgreSQL server (dropped with
/// the fixture).
pub struct Fixture {
    pub backend: Backend,
    pub url: String,
    pub store: Arc<dyn Store>,
    _dir: Option<TempDir>,
    schema: Option<String>,
}

static SCHEMAS: AtomicUsize = AtomicUsize::new(0);

impl Fixture {
    pub fn new(backend: Backend) -> Fixture {
        let (url, dir, schema) = match backend {
            Backend::Sqlite => {
                let dir = TempDir::new().unwrap();
                (url_of(&dir.path().join("state.db")), Some(dir), None)
            }
            Backend::Postgres => {
                let schema = format!(
                    "{}rs_{}_{}",
                    ctrlrun::store::postgres::SCRATCH_PREFIX,
                    std::process::id(),
                    SCHEMAS.fetch_add(1, Ordering::SeqCst)
                );
                let base = pg_base_url();
                let sep = if base.contains('?') { '&' } else { '?' };
                (format!("{base}{sep}schema={schema}"), None, Some(schema))
            }
        };
        let store = open_store(&url).unwrap_or_else(|e| panic!("open the {backend:?} store: {e}"));
        Fixture {
            backend,
            url,
            store,
            _dir: dir,
            schema,
        }
    }

    /// The SQLite file (a SQLite fixture only).
    pub fn db(&self) -> std::path::PathBuf {
        let dir = self._dir.as_ref().expect("a SQLite fixture");
        dir.path().join("state.db")
    }

    /// A second store on the same file or schema (another process's view).
    pub fn reopen(&self) -> Arc<dyn Store> {
        open_store(&self.url).unwrap()
    }

    pub fn get(&self, key: &str) -> EffectRecord {
        self.store
            .get(key)
            .unwrap()
            .unwrap_or_else(|| panic!("no row for {key}"))
    }

    pub fn reserve(
        &self,
        key: &str,
        action_id: &str,
        now: Micros,
    ) -> ctrlrun::Result<EffectRecord> {
        self.store.reserve(key, action_id, LEASE, false, Some(now))
    }

    pub fn step(
        &self,
        key: &str,
        action_id: &str,
        attempt: i64,
        t: Transition,
        now: Micros,
    ) -> ctrlrun::Result<EffectRecord> {
        self.store
            .transition(key, action_id, Some(attempt), &t, Some(now))
    }

    pub fn begin(&self, key: &str, action_id: &str, attempt: i64, now: Micros) -> EffectRecord {
        self.step(key, action_id, attempt, Transition::Begin, now)
            .unwrap_or_else(|e| panic!("begin {key}: {e}"))
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if self.schema.is_some() {
            // Best effort: the cluster is a throwaway one, but a given server is kept tidy.
            let _ = ctrlrun::store::postgres::drop_scratch_schema(&self.url);
        }
    }
}

pub fn commit(result: &str) -> Transition {
    Transition::Commit {
        result: Some(result.to_owned()),
    }
}

pub fn fail(error: &str) -> Transition {
    Transition::Fail {
        error: error.to_owned(),
    }
}

pub fn mark(error: &str) -> Transition {
    Transition::MarkAmbiguous {
        error: error.to_owned(),
    }
}

#[track_caller]
pub fn assert_duplicate(r: ctrlrun::Result<EffectRecord>, want: DuplicateKind) -> EffectRecord {
    match r {
        Err(Error::Duplicate { kind, record, .. }) => {
            assert_eq!(kind, want);
            *record
        }
        other => panic!("expected Duplicate {}, got {other:?}", want.as_str()),
    }
}

#[track_caller]
pub fn assert_ambiguous(r: ctrlrun::Result<EffectRecord>) -> (EffectRecord, String) {
    match r {
        Err(Error::Ambiguous { record, message }) => (*record, message),
        other => panic!("expected Ambiguous, got {other:?}"),
    }
}

#[track_caller]
pub fn assert_invalid<T: std::fmt::Debug>(r: ctrlrun::Result<T>) -> String {
    match r {
        Err(Error::InvalidArgument(m)) => m,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[track_caller]
pub fn assert_store_error<T>(r: ctrlrun::Result<T>) -> String {
    match r {
        Err(Error::Store(m)) => m,
        Err(other) => panic!("expected Error::Store, got {other:?}"),
        Ok(_) => panic!("expected Error::Store, got Ok"),
    }
}

/// Each case, once per backend: `on_both_backends!(case_a, case_b)` defines the tests
/// `sqlite::case_a`, `postgres::case_a`, … calling `case_a(Backend::…)`.
#[macro_export]
macro_rules! on_both_backends {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $( #[test] fn $case() { super::$case($crate::support::Backend::Sqlite) } )*
        }
        mod postgres {
            $( #[test] fn $case() { super::$case($crate::support::Backend::Postgres) } )*
        }
    };
}

/// The attempt token of a row a reservation granted: 32 lowercase hex digits.
pub fn token_of(r: &EffectRecord) -> String {
    let token = r
        .attempt_token
        .clone()
        .expect("a granted row carries an attempt token");
    assert!(
        token.len() == 32
            && token
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "{token:?}"
    );
    token
}
