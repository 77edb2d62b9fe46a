//! The cold paths (approvals, receipts), written once over a small transaction trait that
//! both backends implement ([`tx`]), and the columns and row decoding they share ([`rows`]).

mod approvals;
mod approvers;
mod policy;
mod receipts;
pub(crate) mod rows;
mod tx;

pub(crate) use policy::rule_of;
pub use policy::StorePolicy;
pub(crate) use tx::{At, ColdStore, ColdTx, Pick};
