use std::sync::{Arc, RwLock};

use pyo3::prelude::*;

use super::convert::{int, opt, Int, Text};
use super::errors::IntoPyResult;
use super::records::EffectRow;
use super::requests::{OutcomeRequest, ReserveRequest};
use crate::error::Error;
use crate::record::{EffectState, Micros};
use crate::store::outcome::record_retrying;
use crate::store::retention::{self, EffectFilter, Prune};
use crate::store::{fork, BackendKind, Store};

/// A store handle. Every method releases the GIL while it talks to the database.
/// Timestamps are integer microseconds since the Unix epoch (UTC); `now_us=None` uses the
/// backend's clock.
#[pyclass(frozen, name = "Store", module = "ctrlrun._core")]
pub struct PyStore {
    inner: RwLock<Option<Arc<dyn Store>>>,
    description: String,
    /// Which database it writes to (`Store::backend`), kept for after `close()`.
    backend: BackendKind,
    /// The process that opened it: connections do not survive a `fork()`.
    pid: u32,
}

impl PyStore {
    pub(super) fn get(&self) -> Result<Arc<dyn Store>, Error> {
        if std::process::id() != self.pid {
            return Err(Error::InvalidArgument(format!(
                "the store {} was opened in another process (before a fork); its connections \
                 cannot be shared: open the store again in this process",
                self.description
            )));
        }
        self.inner
            .read()
            .ok()
            .and_then(|g| g.clone())
            .ok_or_else(|| {
                Error::InvalidArgument(format!("the store {} is closed", self.description))
            })
    }

    /// Run `call` on the store with the GIL released, behind the fork gate when the store
    /// needs it (SQLite: see `store::fork`), and convert its error.
    pub(super) fn call<T: Send>(
        &self,
        py: Python<'_>,
        call: impl FnOnce(&dyn Store) -> Result<T, Error> + Send,
    ) -> PyResult<T> {
        let store = self.get().py_err(py)?;
        py.detach(|| {
            let _pass = store.fork_sensitive().then(fork::pass);
            call(&*store)
        })
        .py_err(py)
    }
}

impl Drop for PyStore {
    fn drop(&mut self) {
        if std::process::id() != self.pid {
            // Inherited through fork(): closing would end the parent's sessions.
            if let Ok(mut g) = self.inner.write() {
                std::mem::forget(g.take());
            }
        }
    }
}

/// Open the store a URL names. Raises `InvalidArgument` for a bad URL and `StoreError` when the
/// store cannot be opened.
#[pyfunction]
pub fn open_store(py: Python<'_>, url: Text) -> PyResult<PyStore> {
    let store = py
        .detach(|| {
            let sqlite = matches!(crate::url::parse(&url), Ok(crate::url::StoreUrl::Sqlite(_)));
            let _pass = sqlite.then(fork::pass);
            crate::store::open_store(&url)
        })
        .py_err(py)?;
    let (description, backend) = (store.describe(), store.backend());
    Ok(PyStore {
        inner: RwLock::new(Some(store)),
        description,
        backend,
        pid: std::process::id(),
    })
}

/// `[(name, canonical JSON text)]` per argument -> (the digest of the whole, the per-argument
/// `name digest` lines): what a reservation writes for the same arguments.
#[pyfunction]
pub fn arg_digests(parts: Vec<(Text, Text)>) -> (String, String) {
    let mut parts: Vec<_> = parts.into_iter().map(|(n, v)| (n.0, v.0)).collect();
    crate::fingerprint::digests(&mut parts)
}

#[pymethods]
impl PyStore {
    #[getter]
    fn url(&self) -> &str {
        &self.description
    }

    /// `sqlite` or `postgres`: the database this store writes to.
    #[getter]
    fn backend(&self) -> &'static str {
        self.backend.as_str()
    }

    /// What the store's set-up does to the promise, as read at open: `(check, standing,
    /// detail)` per line, standing `pass`, `fail`, `not visible` or `info`.
    fn posture(&self, py: Python<'_>) -> PyResult<Vec<(&'static str, &'static str, String)>> {
        let store = self.get().py_err(py)?;
        Ok(store
            .posture()
            .into_iter()
            .map(|l| (l.check, l.standing.as_str(), l.detail))
            .collect())
    }

    /// Write `request` (see `ReserveRequest`): the row as the reservation left it.
    fn reserve(&self, py: Python<'_>, request: &ReserveRequest) -> PyResult<EffectRow> {
        let r = &request.0;
        self.call(py, |s| s.propose(r.proposal(), r.now_us))
            .map(EffectRow::from)
    }

    /// One try of `request` (see `OutcomeRequest`; its pauses are not used): the row as the
    /// write left it.
    fn transition(&self, py: Python<'_>, request: &OutcomeRequest) -> PyResult<EffectRow> {
        let o = &request.0;
        self.call(py, |s| {
            s.transition(&o.key, &o.action_id, o.attempt, &o.transition, o.now_us)
        })
        .map(EffectRow::from)
    }

    /// The decorator's outcome write: `request` (`transition_unread`), re-issued after each of
    /// its pauses while it fails as a write that did not land or whose end is unknown; after
    /// an unknown try, the error is that unknown (`crate::store::outcome`).
    fn record_outcome(&self, py: Python<'_>, request: &OutcomeRequest) -> PyResult<()> {
        let store = self.get().py_err(py)?;
        let o = &request.0;
        py.detach(|| {
            record_retrying(o.kind, &o.key, o.now_us, &o.pauses, None, |now| {
                let _pass = store.fork_sensitive().then(fork::pass);
                o.write_once(&*store, now)
            })
        })
        .py_err(py)
    }

    #[pyo3(signature = (key, action_id, attempt, until_us, now_us=None))]
    fn extend_lease(
        &self,
        py: Python<'_>,
        key: Text,
        action_id: Text,
        attempt: Option<Int<i64>>,
        until_us: Int<Micros>,
        now_us: Option<Int<Micros>>,
    ) -> PyResult<EffectRow> {
        let (attempt, now_us) = (int(&attempt), int(&now_us));
        self.call(py, |s| {
            s.extend_lease(&key, &action_id, attempt, until_us.0, now_us)
        })
        .map(EffectRow::from)
    }

    #[pyo3(signature = (key, state, resolver, now_us=None, note=None))]
    fn resolve(
        &self,
        py: Python<'_>,
        key: Text,
        state: EffectState,
        resolver: Text,
        now_us: Option<Int<Micros>>,
        note: Option<Text>,
    ) -> PyResult<EffectRow> {
        let now_us = int(&now_us);
        self.call(py, |s| {
            s.resolve_noted(&key, state, &resolver, opt(&note), now_us)
        })
        .map(EffectRow::from)
    }

    fn get_effect(&self, py: Python<'_>, key: Text) -> PyResult<Option<EffectRow>> {
        self.call(py, |s| s.get(&key))
            .map(|r| r.map(EffectRow::from))
    }

    /// The records the filters select, oldest first (or newest first); with `after`, the
    /// `(created_at_us, key)` of the last record of the page before; with `limit`, the first
    /// that many.
    #[pyo3(signature = (state=None, prefix=None, action=None, limit=None, after=None, newest_first=false))]
    #[allow(clippy::too_many_arguments)]
    fn list_effects(
        &self,
        py: Python<'_>,
        state: Option<EffectState>,
        prefix: Option<Text>,
        action: Option<Text>,
        limit: Option<Int<u64>>,
        after: Option<(Int<Micros>, Text)>,
        newest_first: bool,
    ) -> PyResult<Vec<EffectRow>> {
        let filter = EffectFilter {
            state,
            prefix: opt(&prefix),
            action: opt(&action),
            after: after.as_ref().map(|(at, key)| (at.0, key.0.as_str())),
            newest_first,
            limit: int(&limit),
        };
        self.call(py, |s| s.list(&filter))
            .map(|v| v.into_iter().map(EffectRow::from).collect())
    }

    /// Remove settled rows created and last written more than `older_than_us` ago (see
    /// `store::retention`), or with `dry_run` count them; the count. `progress(n)` hears the
    /// running count after each batch; an exception it raises, or a signal (Ctrl-C), stops the
    /// prune after the batch in flight and is raised.
    #[pyo3(signature = (older_than_us, states, drop_receipts=false, by=None, batch=Int(1000), dry_run=false, progress=None, now_us=None))]
    #[allow(clippy::too_many_arguments)]
    fn prune(
        &self,
        py: Python<'_>,
        older_than_us: Int<Micros>,
        states: Vec<EffectState>,
        drop_receipts: bool,
        by: Option<Text>,
        batch: Int<u32>,
        dry_run: bool,
        progress: Option<Py<PyAny>>,
        now_us: Option<Int<Micros>>,
    ) -> PyResult<u64> {
        let now_us = int(&now_us);
        let p = Prune {
            older_than: older_than_us.0,
            states,
            drop_receipts,
            by: opt(&by),
            batch: batch.0,
        };
        p.check().py_err(py)?;
        let now = self.call(py, |s| s.store_now(now_us))?;
        if dry_run {
            return self.call(py, |s| s.count_prunable(&p, Some(now)));
        }
        // One store call per batch (never one across the whole prune), so a fork or another
        // thread's calls wait for one short batch at most; the progress and signals are heard
        // between batches, with the GIL.
        retention::drive(
            &p,
            |state, after| self.call(py, |s| s.prune_batch(&p, state, after, Some(now))),
            |n| {
                if let Some(f) = &progress {
                    f.call1(py, (n,))?;
                }
                py.check_signals()?;
                Ok(true)
            },
        )
    }

    /// Release the store's connections. Later calls raise `InvalidArgument`.
    fn close(&self, py: Python<'_>) {
        let taken = self.inner.write().ok().and_then(|mut g| g.take());
        if std::process::id() != self.pid {
            // A child of a fork must not shut down connections that belong to its parent.
            std::mem::forget(taken);
            return;
        }
        py.detach(move || {
            let _pass = taken
                .as_ref()
                .filter(|s| s.fork_sensitive())
                .map(|_| fork::pass());
            drop(taken)
        });
    }

    #[getter]
    fn closed(&self) -> bool {
        self.inner.read().map(|g| g.is_none()).unwrap_or(true)
    }

    fn __repr__(&self) -> String {
        format!("<ctrlrun._core.Store {}>", self.description)
    }
}
