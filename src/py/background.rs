//! The store steps of `async def` protected calls (the reservation and the outcome write), run
//! on threads of the core's own that do the database work without the GIL (they take it only
//! to log), each finished step handed to its event loop through a [`Completions`] inbox that
//! wakes the loop once.
//!
//! Why not Python worker threads (`python/ctrlrun/call/io_threads.py`, still used for every other store
//! call of an async caller): such a worker needs the GIL to start the step and again to hand
//! it back, so it waits for whatever the event loop runs meanwhile. Behind the MCP gateway the
//! loop runs the SDK's own tasks after each hand-off, and a step spent about 160 µs waiting to
//! start and 90 µs to come back (measured on a 2-core machine), on top of its own work. Here
//! the loop thread converts the arguments, a core thread does the database work at once, and
//! the loop converts the answer when it wakes. No library offers a thread pool whose
//! completions wake an asyncio loop from Rust without the GIL, hence this module.
//!
//! Threads: at most [`MAX_THREADS`], started as needed, shared by every store and loop. At
//! exit the Python package calls [`finish_background`], which waits for the steps queued (an
//! outcome write is never cut off). A forked child starts with a fresh pool (the parent's
//! threads are not in it): the parent's pool is left as it was, never touched again. A child
//! that goes on running an event loop it inherited is not supported (its inbox is the
//! parent's: the child reads nothing from it).

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::AtomicPtr;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use pyo3::prelude::*;

use super::errors::to_py;
use super::records::EffectRow;
use super::requests::Request;
use crate::error::Error;
use crate::record::EffectRecord;
use crate::store::fork::{self, this_process, PerProcess};
use crate::store::outcome::record_retrying;
use crate::store::Store;

/// The most core threads running store steps at once; more steps wait in the queue.
pub const MAX_THREADS: usize = 16;

/// A finished step: the row a reservation wrote or met, or an outcome write's end.
pub(super) enum Done {
    Record(Result<Box<EffectRecord>, Error>),
    Unit(Result<(), Error>),
}

struct Inbox {
    done: VecDeque<(u64, Done)>,
    /// The end the threads write the wake-up byte to; `None` once the loop is closed.
    wake: Option<UnixStream>,
    /// A wake-up byte is unread: the next finished step need not write another.
    woken: bool,
}

fn inbox(m: &Mutex<Inbox>) -> MutexGuard<'_, Inbox> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One event loop's inbox of finished steps, and the socket its reader watches.
#[pyclass(frozen, module = "ctrlrun._core")]
pub struct Completions {
    inbox: Arc<Mutex<Inbox>>,
    reader: Mutex<Option<UnixStream>>,
    fd: i32,
    /// The process that made it: a forked child never touches its locks (a parent's thread
    /// may have held one at the instant of the fork).
    pid: u32,
}

#[pymethods]
impl Completions {
    #[new]
    fn new() -> PyResult<Self> {
        let made = UnixStream::pair().and_then(|(r, w)| {
            r.set_nonblocking(true)?;
            w.set_nonblocking(true)?; // a full buffer already holds a wake-up
            Ok((r, w))
        });
        let (reader, wake) = made.map_err(|e| {
            pyo3::exceptions::PyOSError::new_err(format!("cannot make a wake-up socket: {e}"))
        })?;
        Ok(Completions {
            pid: std::process::id(),
            fd: reader.as_raw_fd(),
            reader: Mutex::new(Some(reader)),
            inbox: Arc::new(Mutex::new(Inbox {
                done: VecDeque::new(),
                wake: Some(wake),
                woken: false,
            })),
        })
    }

    /// The descriptor the event loop watches for reading.
    fn fileno(&self) -> i32 {
        self.fd
    }

    /// On the loop: the steps finished since the last call, as `(token, ok, value)`: the
    /// record tuple (a reservation), `None` (an outcome write) or the exception instance.
    fn take(&self, py: Python<'_>) -> PyResult<Vec<(u64, bool, Py<PyAny>)>> {
        if std::process::id() != self.pid {
            return Ok(Vec::new());
        }
        let done = {
            let mut reader = self.reader.lock().unwrap_or_else(|e| e.into_inner());
            let mut inbox = inbox(&self.inbox);
            if let Some(r) = reader.as_mut() {
                let mut buf = [0u8; 256];
                while matches!(r.read(&mut buf), Ok(n) if n > 0) {}
            }
            inbox.woken = false;
            std::mem::take(&mut inbox.done)
        };
        let mut out = Vec::with_capacity(done.len());
        for (token, step) in done {
            let value = match step {
                Done::Record(Ok(r)) => Py::new(py, EffectRow::from(*r)).map(Py::into_any),
                Done::Record(Err(e)) | Done::Unit(Err(e)) => Err(to_py(py, e)),
                Done::Unit(Ok(())) => Ok(py.None()),
            };
            out.push(match value {
                Ok(v) => (token, true, v),
                Err(e) => (token, false, e.into_value(py).into_any()),
            });
        }
        Ok(out)
    }

    /// The loop is closed: later steps are dropped, and the sockets closed (under the lock
    /// the threads write under, so none writes to a reused descriptor number).
    fn close(&self) {
        if std::process::id() != self.pid {
            return; // inherited through fork(): the parent's to close
        }
        let mut reader = self.reader.lock().unwrap_or_else(|e| e.into_inner());
        let mut inbox = inbox(&self.inbox);
        inbox.wake = None;
        inbox.done.clear();
        *reader = None;
    }
}

impl Completions {
    /// What a thread calls with a finished step: queued for the loop, which is woken unless
    /// a wake-up is already waiting.
    pub(super) fn sender(&self) -> impl Fn(u64, Done) + Send + 'static {
        let shared = Arc::clone(&self.inbox);
        move |token, step| {
            let mut guard = inbox(&shared);
            let Inbox { done, wake, woken } = &mut *guard;
            let Some(w) = wake.as_mut() else {
                return; // the loop is closed: nobody waits for it
            };
            done.push_back((token, step));
            if !*woken {
                // Full: a wake-up is waiting already. Any other error leaves `woken` unset, so
                // the next step tries again.
                *woken = match w.write(&[0]) {
                    Ok(_) => true,
                    Err(e) => e.kind() == ErrorKind::WouldBlock,
                };
            }
        }
    }
}

type Job = Box<dyn FnOnce() + Send>;

struct Queue {
    jobs: VecDeque<Job>,
    threads: usize,
    idle: usize,
    /// Jobs queued, and jobs ended, since the pool began (what [`finish_background`] waits on).
    queued: u64,
    ended: u64,
    /// Callers of [`finish_background`] waiting: an ended job wakes them only when there are
    /// some (a `notify_all` is a `futex` system call even with nobody to wake).
    finishing: usize,
}

struct Pool {
    pid: u32,
    queue: Mutex<Queue>,
    /// A job was queued.
    more: Condvar,
    /// A job ended.
    ended: Condvar,
}

/// Replaced by a fresh one in a forked child, the old one leaked (a parent's thread may have
/// held its lock at the instant of the fork): `store::fork::this_process`.
static POOL: AtomicPtr<Pool> = AtomicPtr::new(std::ptr::null_mut());

fn pool() -> &'static Pool {
    this_process(&POOL, |pid| Pool {
        pid,
        queue: Mutex::new(Queue {
            jobs: VecDeque::new(),
            threads: 0,
            idle: 0,
            queued: 0,
            ended: 0,
            finishing: 0,
        }),
        more: Condvar::new(),
        ended: Condvar::new(),
    })
}

impl PerProcess for Pool {
    fn pid(&self) -> u32 {
        self.pid
    }
}

fn queue(p: &Pool) -> MutexGuard<'_, Queue> {
    p.queue.lock().unwrap_or_else(|e| e.into_inner())
}

/// Queue `job` for a core thread (a new one if none is idle and fewer than [`MAX_THREADS`]
/// run). An error only when no thread runs and none can be started.
fn submit(job: Job) -> Result<(), Error> {
    let p = pool();
    let mut q = queue(p);
    q.jobs.push_back(job);
    q.queued += 1;
    if q.idle >= q.jobs.len() || q.threads >= MAX_THREADS {
        p.more.notify_one();
        return Ok(());
    }
    let started = std::thread::Builder::new()
        .name(format!("ctrlrun-core-{}", q.threads + 1))
        .spawn(move || work(p));
    match started {
        Ok(_) => {
            q.threads += 1;
            Ok(())
        }
        Err(e) if q.threads == 0 => {
            q.jobs.pop_back();
            q.queued -= 1;
            Err(Error::Store(format!(
                "cannot start a thread for store calls: {e}"
            )))
        }
        Err(_) => Ok(()), // the running threads will get to it
    }
}

fn work(p: &'static Pool) {
    let mut q = queue(p);
    loop {
        if let Some(job) = q.jobs.pop_front() {
            drop(q);
            // A job sends its own answer, a panic included (see `step`); this only keeps the
            // thread and the count of ended jobs right whatever happens.
            let _ = std::panic::catch_unwind(AssertUnwindSafe(job));
            q = queue(p);
            q.ended += 1;
            if q.finishing > 0 {
                p.ended.notify_all();
            }
            continue;
        }
        q.idle += 1;
        q = p.more.wait(q).unwrap_or_else(|e| e.into_inner());
        q.idle -= 1;
    }
}

/// At exit (the Python package's hook, run before the interpreter finalizes): wait, with the
/// GIL released, until every step queued so far has ended. (The threads stay, parked.)
#[pyfunction]
pub fn finish_background(py: Python<'_>) {
    py.detach(|| {
        let p = pool();
        let mut q = queue(p);
        let target = q.queued;
        q.finishing += 1; // counted under the lock, so no job's end passes unseen
        while q.ended < target {
            q = p.ended.wait(q).unwrap_or_else(|e| e.into_inner());
        }
        q.finishing -= 1;
    });
}

/// Run one store call for a step: behind the fork gate when the store needs it (see
/// [`release`] for the reference it takes), a panic turned into an error for its caller.
fn step<T>(
    store: Arc<dyn Store>,
    call: impl FnOnce(&dyn Store) -> Result<T, Error>,
) -> Result<T, Error> {
    let pass = store.fork_sensitive().then(fork::pass);
    let done = unpanicked(|| call(&*store));
    drop(pass);
    release(store);
    done
}

/// `call`'s end, a panic turned into an error for its caller.
pub(super) fn unpanicked<T>(call: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
    std::panic::catch_unwind(AssertUnwindSafe(call)).unwrap_or_else(|p| {
        let why = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(Error::Store(format!("the store call panicked: {why}")))
    })
}

/// Drop a reference to `store` behind the fork gate: the last one closes a SQLite pool, which
/// a fork must not see half done.
fn release(store: Arc<dyn Store>) {
    let _pass = store.fork_sensitive().then(fork::pass);
    drop(store);
}

/// Queue `request` for a core thread; its end comes back through `completions` under
/// `token`. An outcome write is re-issued as `Store.record_outcome` does on the sync path
/// (`crate::store::outcome`), whether or not the event loop still runs; `unknown` is a try
/// already made whose end is unknown, which stays the answer unless a later one settles it.
pub(super) fn queue_step(
    store: Arc<dyn Store>,
    completions: &Completions,
    token: u64,
    request: Request,
    unknown: Option<Error>,
) -> Result<(), Error> {
    let send = completions.sender();
    submit(match request {
        Request::Reserve(r) => Box::new(move || {
            let done = step(store, |s| s.propose(r.proposal(), r.now_us));
            send(token, Done::Record(done.map(Box::new)));
        }),
        Request::Outcome(o) => Box::new(move || {
            let done = record_retrying(o.kind, &o.key, o.now_us, &o.pauses, unknown, |now| {
                step(Arc::clone(&store), |s| o.write_once(s, now))
            });
            release(store);
            send(token, Done::Unit(done));
        }),
    })
}
