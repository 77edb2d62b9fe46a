//! The texts and numbers Python passes for a transition, a state or the pauses of an outcome
//! write, as the core's values.

use std::time::Duration;

use crate::error::Error;
use crate::planner::Transition;
use crate::record::EffectState;

/// `kind` and `payload` as a [`Transition`].
pub(super) fn parse_transition(kind: &str, payload: Option<String>) -> Result<Transition, Error> {
    let text = || payload.clone().unwrap_or_default();
    Ok(match kind {
        "begin" => Transition::Begin,
        "commit" => Transition::Commit {
            result: payload.clone(),
        },
        "fail" => Transition::Fail { error: text() },
        "ambiguous" => Transition::MarkAmbiguous { error: text() },
        other => {
            return Err(Error::InvalidArgument(format!(
                "unknown transition {other:?}"
            )))
        }
    })
}

pub(super) fn parse_state(state: &str) -> Result<EffectState, Error> {
    EffectState::parse(state).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "unknown effect state {state:?}; expected one of reserved, executing, committed, \
             failed, ambiguous"
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
