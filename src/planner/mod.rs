//! The pure planners: every backend asks these what to do and then only writes.
//! No I/O and no clock reads: `now` is always an argument.

mod approval;
mod lease;
mod lost;
mod names;
mod policy;
mod refusal;
mod reservation;
mod rules;
mod transition;
pub use approval::{
    check_approver_name, check_note, check_request_id, plan_approver, plan_consume, plan_decision,
    plan_request, RequestPlan,
};
pub use lease::{plan_extension, plan_resolution, plan_resolution_noted};
pub use lost::{lost_note, lost_write, marked_lost, plan_lost_mark};
pub use names::{check_name, name_key, same_person, MAX_NAME_CHARS};
pub use policy::{approvals_needed, check_grant, check_rules, needs_approval};
pub use refusal::{refuse_by_row, Conflict, Refusal};
pub use reservation::{plan_reservation, Proposal, ReservationPlan};
pub(crate) use rules::breaks_a_line;
pub use rules::{
    check_action_id, check_lease_end, check_request, check_resolver, format_micros, Expected,
    END_OF_TIME, MAX_LEASE, START_OF_TIME,
};
pub use transition::{
    plan_mismatch, settle_mismatch, settle_unknown_transition, AfterUnknown, Mismatch, Transition,
    TransitionWrite,
};
