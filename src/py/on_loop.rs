//! The two hot store steps of an `async def` protected call (the reservation and the outcome
//! write), done on the event loop's own thread where they cannot wait, else queued for a core
//! thread exactly as `background.rs` does.
//!
//! Why: a hop to a core thread and back costs two wake-ups of the loop and, on a 2-core
//! machine, more than the write itself: on SQLite at `synchronous=NORMAL` a protected call
//! awaited took about 1.9x the time of a sync one (bench/README.md). There a write does no
//! fsync, so the only waits it can meet are a lock another writer holds, a pool with no idle
//! connection and a fork being prepared; [`crate::store::nowait`] asks for each once and
//! gives up before anything is written. Only then is the step queued: the loop never waits.
//! The GIL stays held: the step is short, and taking it back after releasing it could wait a
//! whole switch interval for another thread.
//!
//! It returns `None` when the step was queued (its end comes through `completions` under
//! `token`), else `(ok, value)` as `Completions.take` gives it.

use std::sync::Arc;

use pyo3::prelude::*;

use super::background::{queue_step, unpanicked, Completions};
use super::errors::{to_py, IntoPyResult};
use super::records::EffectRow;
use super::requests::Request;
use super::store::PyStore;
use crate::error::Error;
use crate::store::{fork, nowait, Store};

type Now = Option<(bool, Py<PyAny>)>;

/// `step` on this thread, if the store allows it and nothing makes it wait (`None` else).
fn without_waiting<T>(
    store: &Arc<dyn Store>,
    step: impl FnOnce(&dyn Store) -> Result<T, Error>,
) -> Option<Result<T, Error>> {
    if !store.writes_without_waiting() {
        return None;
    }
    let pass = if store.fork_sensitive() {
        Some(fork::try_pass()?)
    } else {
        None
    };
    let done = nowait::run(|| unpanicked(|| step(&**store)));
    drop(pass);
    done
}

fn answer<T>(
    py: Python<'_>,
    done: Result<T, Error>,
    value: impl FnOnce(T) -> PyResult<Py<PyAny>>,
) -> PyResult<Now> {
    Ok(Some(match done {
        Ok(v) => (true, value(v)?),
        Err(e) => (false, to_py(py, e).into_value(py).into_any()),
    }))
}

/// `request` (a `ReserveRequest` or an `OutcomeRequest`) done here when it need not wait,
/// else queued for a core thread. A first outcome try whose end is unknown is retried on a
/// core thread, and stays the answer unless a later one settles it (as
/// `crate::store::outcome` keeps it).
#[pyfunction]
pub fn step_soon(
    py: Python<'_>,
    store: &PyStore,
    completions: &Completions,
    token: u64,
    request: Request,
) -> PyResult<Now> {
    let store = store.get().py_err(py)?;
    let unknown = match &request {
        Request::Reserve(r) => match without_waiting(&store, |s| s.propose(r.proposal(), r.now_us))
        {
            Some(done) => {
                return answer(py, done, |row| {
                    Py::new(py, EffectRow::from(row)).map(Py::into_any)
                })
            }
            None => None,
        },
        Request::Outcome(o) => match without_waiting(&store, |s| o.write_once(s, o.now_us)) {
            Some(Err(e @ Error::StoreUnresolved { .. })) => Some(e),
            Some(done) => return answer(py, done, |()| Ok(py.None())),
            None => None,
        },
    };
    queue_step(store, completions, token, request, unknown).py_err(py)?;
    Ok(None)
}
