//! Store steps run on a thread that must never wait: an asyncio event loop's.
//!
//! On SQLite at `synchronous=NORMAL` a write transaction does no fsync, so the only things it
//! can wait on are a lock another writer holds, a pooled connection that is lent out, and a
//! fork being prepared. Inside [`run`] the store never waits for any of them: it asks once
//! (`busy_timeout` 0, the pool's idle connections only, the fork gate's open state only) and,
//! when it would have to wait, gives up with [`Error::WouldWait`] before anything is written,
//! so the caller hands the step to a thread that may wait (`src/py/on_loop.rs`). A WAL
//! checkpoint that a commit inside [`run`] makes due is deferred (see
//! [`crate::store::sqlite`]): its fsyncs run on a thread.
//!
//! Only the first write transaction's lock is asked for without waiting. Once it is held, what
//! follows in the same step (the re-read that settles an unknown `COMMIT`, a re-issued write)
//! waits as it would anywhere else: after a `COMMIT` the step must reach its end here, never
//! be handed over half settled.

use std::cell::Cell;

use crate::error::{Error, Result};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// Not inside [`run`]: wait as usual.
    Off,
    /// Inside [`run`], before the first write transaction holds its lock: never wait.
    Fresh,
    /// Inside [`run`], after that: wait as usual (no checkpoint, though).
    Begun,
}

thread_local! {
    static SCOPE: Cell<Scope> = const { Cell::new(Scope::Off) };
}

/// Run `step` on this thread without waiting: `None` when it would have had to wait, or when
/// it failed before anything was committed (a thread may do it again, from the start).
pub fn run<T>(step: impl FnOnce() -> Result<T>) -> Option<Result<T>> {
    let outer = SCOPE.with(|s| s.replace(Scope::Fresh));
    let done = step();
    SCOPE.with(|s| s.set(outer));
    match done {
        Err(Error::WouldWait | Error::StoreWriteFailed(_)) => None,
        other => Some(other),
    }
}

/// Whether the step this thread runs must not wait (for a lock, a connection, a fork).
pub fn must_not_wait() -> bool {
    SCOPE.with(|s| s.get() == Scope::Fresh)
}

/// Whether this thread runs a step inside [`run`] (a commit defers its checkpoint).
pub fn on_loop() -> bool {
    SCOPE.with(|s| s.get() != Scope::Off)
}

/// The first write transaction holds its lock: from here on the step waits as usual.
pub fn began() {
    SCOPE.with(|s| {
        if s.get() == Scope::Fresh {
            s.set(Scope::Begun);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_that_would_wait_or_wrote_nothing_is_handed_over_and_the_scope_ends() {
        assert!(run(|| -> Result<()> { Err(Error::WouldWait) }).is_none());
        assert!(run(|| -> Result<()> { Err(Error::StoreWriteFailed("x".into())) }).is_none());
        let refused = run(|| -> Result<()> { Err(Error::Store("corrupt".into())) });
        assert!(matches!(refused, Some(Err(Error::Store(_)))));
        assert!(!must_not_wait() && !on_loop());
    }

    #[test]
    fn only_the_first_lock_is_asked_for_without_waiting() {
        let seen = run(|| {
            let fresh = must_not_wait();
            began();
            Ok((fresh, must_not_wait(), on_loop()))
        });
        assert!(matches!(seen, Some(Ok((true, false, true)))));
    }
}
