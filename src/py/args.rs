//! The texts Python passes for a transition or a state, as the core's values.

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
