//! Making `fork()` safe around SQLite stores.
//!
//! SQLite keeps per-file state for the whole process (the lock bookkeeping, the shared-memory
//! index, and the mutexes guarding them). A child forked while a thread of the parent is inside
//! SQLite inherits those mutexes locked, and the first connection it opens to the same file
//! waits forever; a child forked while connections are merely open believes it holds file locks
//! that stayed with the parent. So before a fork ([`prepare`]): new SQLite store calls wait,
//! calls in flight finish, and every idle SQLite connection is closed, leaving SQLite nothing to
//! hand down. After it ([`release`]) calls go on; the parent reopens connections as it needs
//! them. A forked child starts with a fresh gate (see [`shared`]).
//!
//! The Python package calls these from `os.register_at_fork`; every SQLite store call made
//! through it holds a [`Pass`]. PostgreSQL stores need none: a child never uses its parent's
//! connections (the binding refuses an inherited store), and the server holds no state in the
//! client process.

use std::cell::Cell;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, Weak};

struct Gate {
    /// Forks being prepared (threads may fork concurrently): new calls wait while > 0.
    forking: usize,
    /// Store calls in flight (a thread's nested calls count once).
    inside: usize,
    /// Pools whose idle connections are closed before a fork.
    pools: Vec<Weak<dyn CloseIdle>>,
}

struct Shared {
    /// The process this gate belongs to: a forked child replaces it.
    pid: u32,
    gate: Mutex<Gate>,
    changed: Condvar,
}

impl PerProcess for Shared {
    fn pid(&self) -> u32 {
        self.pid
    }
}

/// Replaced by a fresh one in a forked child (a parent's thread may have held the old lock at
/// the instant of the fork, and the old one says a fork is in progress): see [`this_process`].
static SHARED: AtomicPtr<Shared> = AtomicPtr::new(std::ptr::null_mut());

/// A value kept once per process in a static slot.
pub(crate) trait PerProcess: Sync + 'static {
    /// The process that made it.
    fn pid(&self) -> u32;
}

/// This process's value in `slot`, made by `make(pid)` on first use and in a forked child,
/// whose parent's value is leaked, never freed (one of the parent's threads may have held its
/// lock at the instant of the fork), so references to a published value stay valid.
pub(crate) fn this_process<T: PerProcess>(
    slot: &'static AtomicPtr<T>,
    make: impl FnOnce(u32) -> T,
) -> &'static T {
    let pid = std::process::id();
    let p = slot.load(Ordering::Acquire);
    // SAFETY: a published value is never freed.
    if !p.is_null() && unsafe { (*p).pid() } == pid {
        return unsafe { &*p };
    }
    let fresh = Box::into_raw(Box::new(make(pid)));
    let p = match slot.compare_exchange(p, fresh, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => fresh,
        Err(theirs) => {
            // SAFETY: `fresh` came from Box::into_raw above and was never shared.
            drop(unsafe { Box::from_raw(fresh) });
            theirs
        }
    };
    // SAFETY: as above.
    unsafe { &*p }
}

thread_local! {
    /// Passes this thread holds (a logging handler run during a store call may call a store).
    static HELD: Cell<usize> = const { Cell::new(0) };
}

fn shared() -> &'static Shared {
    this_process(&SHARED, |pid| Shared {
        pid,
        gate: Mutex::new(Gate {
            forking: 0,
            inside: 0,
            pools: Vec::new(),
        }),
        changed: Condvar::new(),
    })
}

fn gate(s: &'static Shared) -> MutexGuard<'static, Gate> {
    s.gate.lock().unwrap_or_else(|e| e.into_inner())
}

/// A pool that can close its idle connections.
pub trait CloseIdle: Send + Sync {
    fn close_idle(&self);
}

/// Close `pool`'s idle connections before every fork while it lives.
pub fn register(pool: Weak<dyn CloseIdle>) {
    let mut g = gate(shared());
    g.pools.retain(|p| p.strong_count() > 0);
    g.pools.push(pool);
}

/// Held for the length of one store call; a fork waits for it.
pub struct Pass {
    /// The gate entered (`None` for a nested pass of the same thread).
    entered: Option<&'static Shared>,
}

impl Drop for Pass {
    fn drop(&mut self) {
        HELD.with(|h| h.set(h.get().saturating_sub(1)));
        if let Some(s) = self.entered {
            let mut g = gate(s);
            g.inside -= 1;
            if g.inside == 0 {
                s.changed.notify_all();
            }
        }
    }
}

/// Enter a store call; waits while a fork is being prepared, unless this thread already holds
/// a pass (then the outer one counts for both, and waiting would deadlock).
pub fn pass() -> Pass {
    let nested = HELD.with(|h| {
        let n = h.get();
        h.set(n + 1);
        n > 0
    });
    if nested {
        return Pass { entered: None };
    }
    let s = shared();
    let mut g = gate(s);
    while g.forking > 0 {
        g = s.changed.wait(g).unwrap_or_else(|e| e.into_inner());
    }
    g.inside += 1;
    Pass { entered: Some(s) }
}

/// [`pass`], or `None` at once where it would wait (a fork is being prepared): for a step that
/// must not wait ([`crate::store::nowait`]).
pub fn try_pass() -> Option<Pass> {
    if HELD.with(|h| h.get()) > 0 {
        return Some(pass()); // nested: never waits
    }
    let s = shared();
    let mut g = gate(s);
    if g.forking > 0 {
        return None;
    }
    g.inside += 1;
    HELD.with(|h| h.set(h.get() + 1));
    Some(Pass { entered: Some(s) })
}

/// Before `fork()`: hold off new calls, wait for those in flight (but not for the calling
/// thread's own, if it forks from inside a store call), close idle SQLite connections. Blocks
/// as long as the slowest call in flight (bounded by the store's busy timeout).
pub fn prepare() {
    let own = usize::from(HELD.with(Cell::get) > 0);
    let s = shared();
    let pools: Vec<_> = {
        let mut g = gate(s);
        g.forking += 1;
        while g.inside > own {
            g = s.changed.wait(g).unwrap_or_else(|e| e.into_inner());
        }
        g.pools.retain(|p| p.strong_count() > 0);
        g.pools.iter().filter_map(Weak::upgrade).collect()
    };
    for pool in pools {
        pool.close_idle();
    }
}

/// After `fork()`, in the parent: this fork's hold ends.
pub fn release() {
    let s = shared();
    let mut g = gate(s);
    g.forking = g.forking.saturating_sub(1);
    if g.forking == 0 {
        s.changed.notify_all();
    }
}

/// After `fork()`, in the child: a fresh gate (the child has no calls in flight and no pools of
/// its own; its parent's stores refuse use here), made now by [`shared`], which sees the new pid.
pub fn release_in_child() {
    HELD.with(|h| h.set(0));
    shared();
}
