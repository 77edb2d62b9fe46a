//! Oversight: approval requests, approver accounts, the store's policy and receipts, written
//! once over a small transaction trait that both backends implement ([`tx`]); the columns and
//! row decoding they share are in [`crate::store::rows`].

mod approvals;
mod approvers;
mod listing;
mod policy;
mod receipts;
mod tx;

pub use listing::ApprovalFilter;
pub(crate) use policy::rule_of;
pub use policy::StorePolicy;
pub(crate) use tx::{At, OversightStore, OversightTx, Pick};
