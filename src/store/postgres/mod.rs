//! The PostgreSQL store: many hosts, one database.
//!
//! The reservation is the primary-key index plus compare-and-set: `INSERT … ON CONFLICT
//! (key_digest) DO NOTHING` with the returned row checked, and `UPDATE … WHERE key AND state AND
//! action_id AND attempt` with the row count checked, under the default isolation level. The
//! primary key is the SHA-256 of the effect key (a B-tree entry cannot hold a long key); every
//! statement also compares the key itself, so the key stays opaque and exact. No advisory locks, no `SERIALIZABLE`, no `SELECT … FOR UPDATE`; nothing is held across
//! the executor. Lease decisions use the server's clock (`clock_timestamp()`) unless the caller
//! passes `now`.
//!
//! Failure classes (docs/spec.md §6): an error before `COMMIT` rolls back and is `StoreWriteFailed`, as
//! is SQLSTATE 40001/40P01 anywhere. Any other error during `COMMIT` (connection lost, statement
//! timeout) is unknown: the row is re-read on a fresh connection and decides. A failed re-read
//! is `StoreUnresolved`. Each branch is logged on `ctrlrun.store` with its name.

mod batches;
mod client;
mod conn;
mod duties;
mod functions;
mod hosts;
mod jobs;
mod oversight;
mod posture;
mod retention;
mod roles;
mod schema;
mod sql;
mod statements;
mod store;
mod tls;
mod writes;

pub use duties::Duty;
pub use roles::{grants, quote_ident, store_roles, RolesMode};
pub use schema::{drop_scratch_schema, SCHEMA_VERSION, SCRATCH_PREFIX};
pub use store::PostgresStore;
