//! The core's tests, one binary: each module is one part of the core (the store contract runs
//! on SQLite and on PostgreSQL; see `support`).

#[macro_use]
mod support;

mod approval_planner;
mod approval_store;
mod fork;
mod names;
mod names_store;
mod planned_rows;
mod planner;
mod planner_lost;
mod planner_settle;
mod planner_transitions;
mod pool;
mod receipts;
mod retention;
mod sqlite_identity;
mod sqlite_store;
mod sqlite_unknown_commit;
mod store_contract;
mod store_resolve_list;
mod store_threads;
mod template;
mod url;
