//! The SQLite store: one file, WAL, `synchronous=FULL` unless relaxed, `BEGIN IMMEDIATE`
//! around every read-plan-write, cached prepared statements, a busy timeout.
//!
//! Error classes (docs/spec.md §6): anything before `COMMIT` (including `SQLITE_BUSY` at `BEGIN`) is a
//! failed write: rolled back, `StoreWriteFailed`. An error on `COMMIT` is unknown: the row is
//! re-read on a fresh connection and decides; a failed re-read is `StoreUnresolved`.

mod batches;
mod conn;
mod files;
mod identity;
mod jobs;
mod oversight;
mod retention;
mod schema;
mod sql;
mod store;
mod writes;

pub use conn::ConnectionInit;
pub use schema::SCHEMA_VERSION;
pub use store::SqliteStore;
