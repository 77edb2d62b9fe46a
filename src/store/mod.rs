//! The [`Store`] trait every backend implements. Stores only write: every decision comes
//! from [`crate::planner`].

pub(crate) mod api;
pub(crate) mod backend;
pub mod fork;
pub(crate) mod group;
mod lost;
pub mod nowait;
pub mod outcome;
pub(crate) mod oversight;
pub mod pool;
pub mod postgres;
pub mod posture;
mod recovery;
pub mod retention;
pub(crate) mod rows;
pub mod sqlite;

use std::sync::Arc;

use crate::error::Result;
use crate::url::{self, StoreUrl};

pub use crate::planner::Transition;
pub use api::{Approvals, Receipts, Retention, Store};
pub use backend::BackendKind;
pub use oversight::{ApprovalFilter, StorePolicy};
pub use retention::PruneBatch;

/// Open the store a URL names (see [`crate::url`]).
pub fn open_store(url: &str) -> Result<Arc<dyn Store>> {
    match url::parse(url)? {
        StoreUrl::Sqlite(opts) => Ok(Arc::new(sqlite::SqliteStore::open(opts)?)),
        StoreUrl::Postgres(opts) => Ok(Arc::new(postgres::PostgresStore::open(&opts)?)),
    }
}
