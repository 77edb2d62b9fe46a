//! A small, fork-safe connection pool: a bounded set of open connections behind one
//! `std::sync::Mutex` and `Condvar`, with no background threads.
//!
//! Why not `r2d2`: its pool and its scheduler park threads in `parking_lot`'s process-global
//! table of waiters, which lives on in a `fork()`ed child while the parked threads do not; the
//! child reuses their stacks, and the first contended lock in the child that hashes to the same
//! slot follows a dangling pointer (a segfault seen in prefork servers' workers). `std`'s locks
//! keep no global state, and this pool starts no threads, so a forked child opening its own
//! store is safe.
//!
//! A connection is opened on the caller's thread when none is idle and fewer than `max` are
//! open (the driver's connect timeout bounds it); otherwise the caller waits up to `wait` for
//! one to come back. A connection its manager reports broken on return is closed, not reused.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How a store opens its connections and tells a broken one.
pub trait Manage: Send + Sync {
    type Conn: Send;
    type Error: fmt::Display;

    fn connect(&self) -> Result<Self::Conn, Self::Error>;

    /// Checked when a connection comes back: `true` closes it instead of keeping it.
    fn has_broken(&self, conn: &mut Self::Conn) -> bool;
}

/// Why [`Pool::get`] gave no connection.
#[derive(Debug)]
pub enum GetError {
    /// Opening a new connection failed: the driver's message.
    Connect(String),
    /// All `max` connections stayed in use for the whole wait.
    Timeout { waited: Duration, max: usize },
}

impl fmt::Display for GetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GetError::Connect(e) => f.write_str(e),
            GetError::Timeout { waited, max } => write!(
                f,
                "all {max} pooled connections stayed in use for {:.1} s",
                waited.as_secs_f64()
            ),
        }
    }
}

struct Slots<C> {
    idle: Vec<C>,
    /// Connections open now, idle or lent out.
    open: usize,
    /// Callers of `get` waiting for a connection to come back: a connection given back wakes
    /// one only when there is one (a `notify_one` is a `futex` system call even with nobody
    /// to wake, and one is made on every call's return of its connection).
    waiting: usize,
}

pub struct Pool<M: Manage> {
    manager: M,
    max: usize,
    wait: Duration,
    slots: Mutex<Slots<M::Conn>>,
    returned: Condvar,
}

impl<M: Manage> Pool<M> {
    /// A pool of at most `max` connections (at least 1); `get` waits up to `wait` for one.
    pub fn new(manager: M, max: usize, wait: Duration) -> Pool<M> {
        Pool {
            manager,
            max: max.max(1),
            wait,
            slots: Mutex::new(Slots {
                idle: Vec::new(),
                open: 0,
                waiting: 0,
            }),
            returned: Condvar::new(),
        }
    }

    pub fn manager(&self) -> &M {
        &self.manager
    }

    fn lock(&self) -> MutexGuard<'_, Slots<M::Conn>> {
        // A panic while holding the lock leaves the counts consistent (no user code runs
        // under it), so a poisoned lock is still usable.
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An idle connection, a new one, or (all `max` lent out) the first one returned within
    /// the wait.
    pub fn get(&self) -> Result<Pooled<'_, M>, GetError> {
        let mut deadline = None;
        let mut slots = self.lock();
        loop {
            if let Some(conn) = slots.idle.pop() {
                return Ok(self.lend(conn));
            }
            if slots.open < self.max {
                slots.open += 1;
                drop(slots);
                // The slot is given back unless a connection fills it (also on a panic).
                let slot = Slot(self);
                let conn = self
                    .manager
                    .connect()
                    .map_err(|e| GetError::Connect(e.to_string()))?;
                std::mem::forget(slot);
                return Ok(self.lend(conn));
            }
            let now = Instant::now();
            let until = *deadline.get_or_insert(now + self.wait);
            if now >= until {
                return Err(GetError::Timeout {
                    waited: self.wait,
                    max: self.max,
                });
            }
            slots.waiting += 1;
            slots = self
                .returned
                .wait_timeout(slots, until - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
            slots.waiting -= 1;
        }
    }

    /// An idle connection, or `None` at once (never opens one, never waits): for a step that
    /// must not wait ([`crate::store::nowait`]).
    pub fn try_idle(&self) -> Option<Pooled<'_, M>> {
        let conn = self.lock().idle.pop()?;
        Some(self.lend(conn))
    }

    fn lend(&self, conn: M::Conn) -> Pooled<'_, M> {
        Pooled {
            pool: self,
            conn: Some(conn),
        }
    }

    /// Close every idle connection now (lent ones come back as usual).
    pub fn close_idle(&self) {
        let idle = {
            let mut slots = self.lock();
            let idle = std::mem::take(&mut slots.idle);
            slots.open -= idle.len();
            idle
        };
        drop(idle); // closed outside the lock
        self.returned.notify_all();
    }

    fn give_back(&self, mut conn: M::Conn) {
        let waiting = if self.manager.has_broken(&mut conn) {
            drop(conn); // closed outside the lock: closing may talk to the server
            let mut slots = self.lock();
            slots.open -= 1;
            slots.waiting
        } else {
            let mut slots = self.lock();
            slots.idle.push(conn);
            slots.waiting
        };
        // A waiter counted itself under the lock before it slept (releasing the lock), so
        // one that could take this connection is seen here.
        if waiting > 0 {
            self.returned.notify_one();
        }
    }
}

impl<M: Manage> super::fork::CloseIdle for Pool<M> {
    fn close_idle(&self) {
        Pool::close_idle(self)
    }
}

/// A reserved but unfilled slot: dropping it gives the slot back and wakes a waiter.
struct Slot<'a, M: Manage>(&'a Pool<M>);

impl<M: Manage> Drop for Slot<'_, M> {
    fn drop(&mut self) {
        self.0.lock().open -= 1;
        self.0.returned.notify_one();
    }
}

/// A connection lent by a [`Pool`]; it goes back (or is closed, if broken) when dropped.
pub struct Pooled<'a, M: Manage> {
    pool: &'a Pool<M>,
    conn: Option<M::Conn>,
}

impl<M: Manage> Deref for Pooled<'_, M> {
    type Target = M::Conn;

    fn deref(&self) -> &M::Conn {
        self.conn.as_ref().expect("a lent connection until dropped")
    }
}

impl<M: Manage> DerefMut for Pooled<'_, M> {
    fn deref_mut(&mut self) -> &mut M::Conn {
        self.conn.as_mut().expect("a lent connection until dropped")
    }
}

impl<M: Manage> Drop for Pooled<'_, M> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.pool.give_back(conn);
        }
    }
}
