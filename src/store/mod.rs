//! The [`Store`] trait every backend implements. Stores only write: every decision comes
//! from [`crate::planner`].

pub mod postgres;
pub mod sqlite;

use std::sync::{Arc, Mutex};

use crate::error::Result;
use crate::record::{EffectRecord, EffectState, Micros};
use crate::url::{self, StoreUrl};

pub use crate::planner::Transition;

/// A durable table of effect records. Safe to share across threads.
///
/// `now` overrides the backend's clock (tests move time with it); `None` uses the backend's
/// clock. `attempt` narrows a compare-and-set to one attempt; the decorator always passes it.
pub trait Store: Send + Sync {
    /// The store's location for messages (never a password).
    fn describe(&self) -> String;

    /// Reserve `key` for the attempt `action_id` for `lease` microseconds (SPEC §3). Returns the
    /// granted row; a refusal is `Error::Duplicate` / `Error::Ambiguous`.
    fn reserve(
        &self,
        key: &str,
        action_id: &str,
        lease: Micros,
        now: Option<Micros>,
    ) -> Result<EffectRecord>;

    /// A later transition (SPEC §4) as a compare-and-set; returns the row written.
    fn transition(
        &self,
        key: &str,
        action_id: &str,
        attempt: Option<i64>,
        transition: &Transition,
        now: Option<Micros>,
    ) -> Result<EffectRecord>;

    /// Move a live lease of an `executing` attempt to `until` (not earlier than today's expiry).
    fn extend_lease(
        &self,
        key: &str,
        action_id: &str,
        attempt: Option<i64>,
        until: Micros,
        now: Option<Micros>,
    ) -> Result<EffectRecord>;

    /// A person settles an `ambiguous` effect as `committed` or `failed`.
    fn resolve(
        &self,
        key: &str,
        target: EffectState,
        resolver: &str,
        now: Option<Micros>,
    ) -> Result<EffectRecord>;

    fn get(&self, key: &str) -> Result<Option<EffectRecord>>;

    /// Every record (or those in `state`), oldest first.
    fn list(&self, state: Option<EffectState>) -> Result<Vec<EffectRecord>>;
}

/// Open the store a URL names (see [`crate::url`]).
pub fn open_store(url: &str) -> Result<Arc<dyn Store>> {
    match url::parse(url)? {
        StoreUrl::Sqlite(opts) => Ok(Arc::new(sqlite::SqliteStore::open(opts)?)),
        StoreUrl::Postgres { url, schema } => {
            Ok(Arc::new(postgres::PostgresStore::open(&url, &schema)?))
        }
    }
}

/// One small thread pool shared by the SQLite stores' connection pools (opening a local file
/// is quick), so opening a SQLite store spawns no threads; each PostgreSQL store has its own.
/// A forked child gets a new one: the parent's thread does not exist there.
pub(crate) fn pool_threads() -> Arc<scheduled_thread_pool::ScheduledThreadPool> {
    type Shared = (u32, Arc<scheduled_thread_pool::ScheduledThreadPool>);
    static THREADS: Mutex<Option<Shared>> = Mutex::new(None);
    let pid = std::process::id();
    let mut guard = THREADS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((owner, threads)) = guard.as_ref() {
        if *owner == pid {
            return threads.clone();
        }
    }
    let threads = Arc::new(
        scheduled_thread_pool::ScheduledThreadPool::builder()
            .num_threads(1)
            .thread_name_pattern("ctrlrun-pool-{}")
            .build(),
    );
    if let Some((_, inherited)) = guard.replace((pid, threads.clone())) {
        std::mem::forget(inherited); // its thread lives in the parent only
    }
    threads
}
