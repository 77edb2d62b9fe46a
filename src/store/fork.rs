//! Making `fork()` safe around the stores.
//!
//! SQLite keeps per-file state for the whole process (the lock bookkeeping, the shared-memory
//! index, and the mutexes guarding them). A child forked while a thread of the parent is inside
//! SQLite inherits those mutexes locked, and the first connection it opens to the same file
//! waits forever; a child forked while connections are merely open believes it holds file locks
//! that stayed with the parent. So before a fork ([`prepare`]): new store calls wait, calls in
//! flight finish, and every idle SQLite connection is closed, leaving SQLite nothing to hand
//! down. After it ([`release`], in the parent and in the child) calls go on; the parent reopens
//! connections as it needs them.
//!
//! The Python package calls these from `os.register_at_fork`; every store call made through it
//! holds a [`Pass`].

use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, Weak};

struct Gate {
    /// A fork is being prepared: new calls wait.
    forking: bool,
    /// Store calls in flight.
    inside: usize,
    /// Pools whose idle connections are closed before a fork.
    pools: Vec<Weak<dyn CloseIdle>>,
}

struct Shared {
    gate: Mutex<Gate>,
    changed: Condvar,
}

impl Shared {
    fn new() -> *mut Shared {
        Box::into_raw(Box::new(Shared {
            gate: Mutex::new(Gate {
                forking: false,
                inside: 0,
                pools: Vec::new(),
            }),
            changed: Condvar::new(),
        }))
    }
}

/// Replaced by a fresh one in a forked child (a parent's thread may have held the old lock
/// at the instant of the fork); the old one is leaked, never freed, so references stay valid.
static SHARED: AtomicPtr<Shared> = AtomicPtr::new(std::ptr::null_mut());

fn shared() -> &'static Shared {
    let mut p = SHARED.load(Ordering::Acquire);
    if p.is_null() {
        let fresh = Shared::new();
        p = match SHARED.compare_exchange(
            std::ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => fresh,
            Err(theirs) => {
                // SAFETY: `fresh` came from Box::into_raw above and was never shared.
                drop(unsafe { Box::from_raw(fresh) });
                theirs
            }
        };
    }
    // SAFETY: a published `Shared` is never freed (see SHARED).
    unsafe { &*p }
}

fn gate() -> MutexGuard<'static, Gate> {
    shared().gate.lock().unwrap_or_else(|e| e.into_inner())
}

/// A pool that can close its idle connections.
pub trait CloseIdle: Send + Sync {
    fn close_idle(&self);
}

/// Close `pool`'s idle connections before every fork while it lives.
pub fn register(pool: Weak<dyn CloseIdle>) {
    let mut g = gate();
    g.pools.retain(|p| p.strong_count() > 0);
    g.pools.push(pool);
}

/// Held for the length of one store call; a fork waits for it.
pub struct Pass(());

impl Drop for Pass {
    fn drop(&mut self) {
        let mut g = gate();
        g.inside -= 1;
        if g.inside == 0 {
            shared().changed.notify_all();
        }
    }
}

/// Enter a store call (waits while a fork is being prepared).
pub fn pass() -> Pass {
    let mut g = gate();
    while g.forking {
        g = shared().changed.wait(g).unwrap_or_else(|e| e.into_inner());
    }
    g.inside += 1;
    Pass(())
}

/// Before `fork()`: hold off new calls, wait for those in flight, close idle SQLite
/// connections. Blocks as long as the slowest call in flight (bounded by the stores' timeouts).
pub fn prepare() {
    let pools: Vec<_> = {
        let mut g = gate();
        g.forking = true;
        while g.inside > 0 {
            g = shared().changed.wait(g).unwrap_or_else(|e| e.into_inner());
        }
        g.pools.retain(|p| p.strong_count() > 0);
        g.pools.iter().filter_map(Weak::upgrade).collect()
    };
    for pool in pools {
        pool.close_idle();
    }
}

/// After `fork()`, in the parent: store calls go on.
pub fn release() {
    let mut g = gate();
    g.forking = false;
    shared().changed.notify_all();
}

/// After `fork()`, in the child: a fresh gate (the child starts with no calls in flight and no
/// pools of its own; the parent's stores refuse use in the child).
pub fn release_in_child() {
    SHARED.store(Shared::new(), Ordering::Release);
}
