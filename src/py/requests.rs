//! A protected call's two store steps as requests built once in Python and read by every
//! path that does the write: `Store.reserve`/`Store.record_outcome` in line, a core thread
//! (`background.rs`) or the event loop's own (`on_loop.rs`). Their arguments are declared
//! here and nowhere else (as pydantic-core's `ArgsKwargs` carries a call's arguments in one
//! object); each is converted, and refused as `InvalidArgument`, when the request is made.
//! The owned values sit behind an `Arc` so that a core thread takes them without a copy, and
//! each class keeps a free list (as `ArgsKwargs` does): one of each is made per protected call.

use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;

use super::convert::{self, int, Int, Text};
use super::records::Step;
use crate::error::Error;
use crate::planner::{Proposal, Transition};
use crate::record::Micros;
use crate::store::Store;

/// A reservation's arguments, owned (to go to a core thread).
pub(super) struct Reserve {
    pub key: String,
    pub action_id: String,
    pub lease_us: Micros,
    pub now_us: Option<Micros>,
    pub begin: bool,
    pub action: Option<String>,
    /// The arguments' digest and fingerprint (`crate::fingerprint::digests`).
    pub digests: Option<(String, String)>,
    pub approval: bool,
}

impl Reserve {
    pub fn proposal(&self) -> Proposal<'_> {
        Proposal {
            action: self.action.as_deref(),
            args: self.digests.as_ref().map(|(d, f)| (d.as_str(), f.as_str())),
            needs_approval: self.approval,
            ..Proposal::new(&self.key, &self.action_id, self.lease_us, self.begin)
        }
    }
}

/// What `Store.reserve` writes: `key` for the attempt `action_id`, leased `lease_us` from
/// `now_us` (`None`: the backend's clock). With `begin` a granted row is written `executing`
/// at once (the caller runs the body right after). `action` names the action, `args` is
/// `[(name, canonical JSON text)]` per argument (their digests go on the row), and `approval`
/// uses a granted approval for the action and arguments in the same transaction.
#[pyclass(frozen, freelist = 64, module = "ctrlrun._core")]
pub struct ReserveRequest(pub(super) Arc<Reserve>);

#[pymethods]
impl ReserveRequest {
    #[new]
    #[pyo3(signature = (key, action_id, lease_us, now_us=None, begin=false, action=None, args=None, approval=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        key: Text,
        action_id: Text,
        lease_us: Int<Micros>,
        now_us: Option<Int<Micros>>,
        begin: bool,
        action: Option<Text>,
        args: Option<Vec<(Text, Text)>>,
        approval: bool,
    ) -> Self {
        let digests = args.map(|parts| {
            let mut parts: Vec<_> = parts.into_iter().map(|(n, v)| (n.0, v.0)).collect();
            crate::fingerprint::digests(&mut parts)
        });
        ReserveRequest(Arc::new(Reserve {
            key: key.0,
            action_id: action_id.0,
            lease_us: lease_us.0,
            now_us: int(&now_us),
            begin,
            action: action.map(|a| a.0),
            digests,
            approval,
        }))
    }
}

/// An outcome write's arguments, owned (to go to a core thread).
pub(super) struct Outcome {
    pub kind: &'static str,
    pub transition: Transition,
    pub pauses: Vec<Duration>,
    pub key: String,
    pub action_id: String,
    pub attempt: Option<i64>,
    pub now_us: Option<Micros>,
}

impl Outcome {
    /// One try of the write, at `now` (`crate::store::outcome` re-issues it).
    pub fn write_once(&self, s: &dyn Store, now: Option<Micros>) -> Result<(), Error> {
        s.record_held_outcome(
            &self.key,
            &self.action_id,
            self.attempt,
            &self.transition,
            now,
        )
    }
}

/// The transition `step` of the attempt `action_id` of `key` (narrowed to `attempt` when
/// given), with its payload: the result JSON of `COMMIT`, the error text of `FAIL` and
/// `AMBIGUOUS`. `Store.transition` makes one try; `Store.record_outcome` and the async paths
/// re-issue it after each of `pauses` (seconds) while it fails as a write that did not land
/// or whose end is unknown.
#[pyclass(frozen, freelist = 64, module = "ctrlrun._core")]
pub struct OutcomeRequest(pub(super) Arc<Outcome>);

#[pymethods]
impl OutcomeRequest {
    #[new]
    #[pyo3(signature = (key, action_id, attempt, step, payload=None, now_us=None, pauses=Vec::new()))]
    fn new(
        key: Text,
        action_id: Text,
        attempt: Option<Int<i64>>,
        step: Step,
        payload: Option<Text>,
        now_us: Option<Int<Micros>>,
        pauses: Vec<f64>,
    ) -> Self {
        OutcomeRequest(Arc::new(Outcome {
            kind: step.as_str(),
            transition: step.with(payload.map(|p| p.0)),
            pauses: convert::pauses(pauses),
            key: key.0,
            action_id: action_id.0,
            attempt: int(&attempt),
            now_us: int(&now_us),
        }))
    }
}

/// Either request, as the async paths take it (`on_loop::step_soon`).
pub(super) enum Request {
    Reserve(Arc<Reserve>),
    Outcome(Arc<Outcome>),
}

impl FromPyObject<'_, '_> for Request {
    type Error = PyErr;
    fn extract(obj: Borrowed<'_, '_, PyAny>) -> PyResult<Self> {
        if let Ok(r) = obj.cast::<ReserveRequest>() {
            return Ok(Request::Reserve(Arc::clone(&r.get().0)));
        }
        let o = obj.cast::<OutcomeRequest>()?;
        Ok(Request::Outcome(Arc::clone(&o.get().0)))
    }
}
