use std::sync::{Arc, RwLock};

use pyo3::prelude::*;

use super::args::{parse_approval_state, parse_pauses, parse_state};
use super::errors::IntoPyResult;
use super::records::{ApprovalRow, EffectRow, ReceiptCheckRow, ReceiptRow, Step};
use crate::approval::ApprovalAsk;
use crate::error::Error;
use crate::planner::Proposal;
use crate::record::Micros;
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
pub fn open_store(py: Python<'_>, url: String) -> PyResult<PyStore> {
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
pub fn arg_digests(mut parts: Vec<(String, String)>) -> (String, String) {
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

    /// With `begin=True` a granted row is written `executing` at once (the caller runs the body
    /// right after), saving the separate begin write. `action` names the action, `args` is
    /// `[(name, canonical JSON text)]` per argument (their digests go on the row), and
    /// `approval=True` uses a granted approval for the action and arguments in the same
    /// transaction.
    #[pyo3(signature = (key, action_id, lease_us, now_us=None, begin=false, action=None, args=None, approval=false))]
    #[allow(clippy::too_many_arguments)]
    fn reserve(
        &self,
        py: Python<'_>,
        key: &str,
        action_id: &str,
        lease_us: Micros,
        now_us: Option<Micros>,
        begin: bool,
        action: Option<&str>,
        args: Option<Vec<(String, String)>>,
        approval: bool,
    ) -> PyResult<EffectRow> {
        let digests = args.map(|mut parts| crate::fingerprint::digests(&mut parts));
        let args = digests.as_ref().map(|(d, f)| (d.as_str(), f.as_str()));
        let proposal = Proposal {
            action,
            args,
            needs_approval: approval,
            ..Proposal::new(key, action_id, lease_us, begin)
        };
        self.call(py, |s| s.propose(proposal, now_us))
            .map(EffectRow::from)
    }

    /// Ask for an approval (see `Store.request_approval` in Rust): the request that stands, or
    /// a new pending one.
    #[pyo3(signature = (action, args_digest, effect_key, arguments, ttl_us, now_us=None, requested_by=None, approvals_needed=1))]
    #[allow(clippy::too_many_arguments)]
    fn request_approval(
        &self,
        py: Python<'_>,
        action: &str,
        args_digest: &str,
        effect_key: &str,
        arguments: &str,
        ttl_us: Micros,
        now_us: Option<Micros>,
        requested_by: Option<&str>,
        approvals_needed: i64,
    ) -> PyResult<ApprovalRow> {
        let ask = ApprovalAsk {
            action,
            args_digest,
            effect_key,
            arguments,
            ttl: ttl_us,
            requested_by,
            approvals_needed,
        };
        self.call(py, |s| s.ask_approval(&ask, now_us))
            .map(ApprovalRow::asked)
    }

    #[pyo3(signature = (request_id, grant, by, note=None, now_us=None))]
    fn decide_approval(
        &self,
        py: Python<'_>,
        request_id: &str,
        grant: bool,
        by: &str,
        note: Option<String>,
        now_us: Option<Micros>,
    ) -> PyResult<ApprovalRow> {
        self.call(py, |s| {
            s.decide_approval(request_id, grant, by, note.as_deref(), now_us)
        })
        .map(ApprovalRow::from)
    }

    #[pyo3(signature = (request_id, now_us=None))]
    fn get_approval(
        &self,
        py: Python<'_>,
        request_id: &str,
        now_us: Option<Micros>,
    ) -> PyResult<Option<ApprovalRow>> {
        self.call(py, |s| s.get_approval(request_id, now_us))
            .map(|r| r.map(ApprovalRow::from))
    }

    #[pyo3(signature = (state=None, now_us=None))]
    fn list_approvals(
        &self,
        py: Python<'_>,
        state: Option<String>,
        now_us: Option<Micros>,
    ) -> PyResult<Vec<ApprovalRow>> {
        let state = state
            .as_deref()
            .map(parse_approval_state)
            .transpose()
            .py_err(py)?;
        self.call(py, |s| s.list_approvals(state, now_us))
            .map(|v| v.into_iter().map(ApprovalRow::from).collect())
    }

    /// The receipts of `key` (or of every key), oldest first; with `limit`, the latest that many.
    #[pyo3(signature = (key=None, limit=None))]
    fn list_receipts(
        &self,
        py: Python<'_>,
        key: Option<&str>,
        limit: Option<u64>,
    ) -> PyResult<Vec<ReceiptRow>> {
        self.call(py, |s| s.list_receipts(key, limit))
            .map(|v| v.into_iter().map(ReceiptRow::from).collect())
    }

    /// What a check of every receipt chain (or of `key`'s alone) found.
    #[pyo3(signature = (key=None))]
    fn verify_receipts(&self, py: Python<'_>, key: Option<&str>) -> PyResult<ReceiptCheckRow> {
        self.call(py, |s| match key {
            None => s.verify_receipts(),
            Some(k) => s.verify_key_receipts(k),
        })
        .map(ReceiptCheckRow::from)
    }

    /// `step` with its payload: the result JSON of `COMMIT`, the error text of `FAIL` and
    /// `AMBIGUOUS`.
    #[pyo3(signature = (key, action_id, attempt, step, payload=None, now_us=None))]
    #[allow(clippy::too_many_arguments)]
    fn transition(
        &self,
        py: Python<'_>,
        key: &str,
        action_id: &str,
        attempt: Option<i64>,
        step: Step,
        payload: Option<String>,
        now_us: Option<Micros>,
    ) -> PyResult<EffectRow> {
        let t = step.with(payload);
        self.call(py, |s| s.transition(key, action_id, attempt, &t, now_us))
            .map(EffectRow::from)
    }

    /// The decorator's outcome write: `transition_unread`, re-issued after each of `pauses`
    /// (seconds) while it fails as a write that did not land or whose end is unknown; after
    /// an unknown try, the error is that unknown (`crate::store::outcome`).
    #[pyo3(signature = (pauses, key, action_id, attempt, step, payload=None, now_us=None))]
    #[allow(clippy::too_many_arguments)]
    fn record_outcome(
        &self,
        py: Python<'_>,
        pauses: Vec<f64>,
        key: &str,
        action_id: &str,
        attempt: Option<i64>,
        step: Step,
        payload: Option<String>,
        now_us: Option<Micros>,
    ) -> PyResult<()> {
        let store = self.get().py_err(py)?;
        let (t, pauses) = (step.with(payload), parse_pauses(pauses));
        py.detach(|| {
            record_retrying(step.as_str(), key, now_us, &pauses, None, |now| {
                let _pass = store.fork_sensitive().then(fork::pass);
                store.record_held_outcome(key, action_id, attempt, &t, now)
            })
        })
        .py_err(py)
    }

    #[pyo3(signature = (key, action_id, attempt, until_us, now_us=None))]
    fn extend_lease(
        &self,
        py: Python<'_>,
        key: &str,
        action_id: &str,
        attempt: Option<i64>,
        until_us: Micros,
        now_us: Option<Micros>,
    ) -> PyResult<EffectRow> {
        self.call(py, |s| {
            s.extend_lease(key, action_id, attempt, until_us, now_us)
        })
        .map(EffectRow::from)
    }

    #[pyo3(signature = (key, state, resolver, now_us=None, note=None))]
    fn resolve(
        &self,
        py: Python<'_>,
        key: &str,
        state: &str,
        resolver: &str,
        now_us: Option<Micros>,
        note: Option<&str>,
    ) -> PyResult<EffectRow> {
        let target = parse_state(state).py_err(py)?;
        self.call(py, |s| s.resolve_noted(key, target, resolver, note, now_us))
            .map(EffectRow::from)
    }

    fn get_effect(&self, py: Python<'_>, key: &str) -> PyResult<Option<EffectRow>> {
        self.call(py, |s| s.get(key))
            .map(|r| r.map(EffectRow::from))
    }

    /// The records the filters select, oldest first; with `limit`, the first that many.
    #[pyo3(signature = (state=None, prefix=None, action=None, limit=None))]
    fn list_effects(
        &self,
        py: Python<'_>,
        state: Option<&str>,
        prefix: Option<&str>,
        action: Option<&str>,
        limit: Option<u64>,
    ) -> PyResult<Vec<EffectRow>> {
        let state = state.map(parse_state).transpose().py_err(py)?;
        let filter = EffectFilter {
            state,
            prefix,
            action,
            limit,
        };
        self.call(py, |s| s.list(&filter))
            .map(|v| v.into_iter().map(EffectRow::from).collect())
    }

    /// Remove settled rows created and last written more than `older_than_us` ago (see
    /// `store::retention`), or with `dry_run` count them; the count. `progress(n)` hears the
    /// running count after each batch; an exception it raises, or a signal (Ctrl-C), stops the
    /// prune after the batch in flight and is raised.
    #[pyo3(signature = (older_than_us, states, drop_receipts=false, by=None, batch=1000, dry_run=false, progress=None, now_us=None))]
    #[allow(clippy::too_many_arguments)]
    fn prune(
        &self,
        py: Python<'_>,
        older_than_us: Micros,
        states: Vec<String>,
        drop_receipts: bool,
        by: Option<&str>,
        batch: u32,
        dry_run: bool,
        progress: Option<Py<PyAny>>,
        now_us: Option<Micros>,
    ) -> PyResult<u64> {
        let states = states
            .iter()
            .map(|s| parse_state(s))
            .collect::<Result<Vec<_>, _>>()
            .py_err(py)?;
        let p = Prune {
            older_than: older_than_us,
            states,
            drop_receipts,
            by,
            batch,
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
