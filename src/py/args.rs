//! The texts and numbers Python passes for a state (of an effect, of an approval) or the pauses of an outcome write, as the
//! core's values.

use std::time::Duration;

use crate::approval::ApprovalState;
use crate::error::Error;
use crate::record::EffectState;

pub(super) fn parse_state(state: &str) -> Result<EffectState, Error> {
    EffectState::parse(state).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "unknown effect state {state:?}; expected one of reserved, executing, committed, \
             failed, ambiguous"
        ))
    })
}

pub(super) fn parse_approval_state(state: &str) -> Result<ApprovalState, Error> {
    ApprovalState::parse(state).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "unknown approval state {state:?}; expected one of pending, granted, denied, used, \
             expired"
        ))
    })
}

/// The pauses (seconds) between the tries of an outcome write; a pause that is no duration
/// (negative, NaN) is none.
pub(super) fn parse_pauses(pauses: Vec<f64>) -> Vec<Duration> {
    pauses
        .into_iter()
        .map(|s| Duration::try_from_secs_f64(s).unwrap_or(Duration::ZERO))
        .collect()
}
