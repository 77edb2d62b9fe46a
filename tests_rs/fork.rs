//! The fork gate (src/store/fork.rs). The gate is process-wide, so everything runs in one test,
//! in order.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use ctrlrun::store::fork::{self, CloseIdle};

const BLOCKED: Duration = Duration::from_millis(150);

/// Takes a pass on a new thread; the receiver hears once it got through.
fn pass_on_thread() -> (mpsc::Receiver<()>, thread::JoinHandle<()>) {
    let (tx, rx) = mpsc::channel();
    let t = thread::spawn(move || {
        let _p = fork::pass();
        tx.send(()).unwrap();
    });
    (rx, t)
}

struct Idle(AtomicUsize);

impl CloseIdle for Idle {
    fn close_idle(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn the_fork_gate() {
    // 1. While a fork is prepared, calls wait; after release they go on.
    fork::prepare();
    let (got, t) = pass_on_thread();
    assert!(
        got.recv_timeout(BLOCKED).is_err(),
        "a call entered during a fork"
    );
    fork::release();
    got.recv_timeout(Duration::from_secs(5)).unwrap();
    t.join().unwrap();

    // 2. Two forks prepared at once: the gate opens only after both are released.
    fork::prepare();
    fork::prepare();
    let (got, t) = pass_on_thread();
    fork::release();
    assert!(
        got.recv_timeout(BLOCKED).is_err(),
        "opened by the first release"
    );
    fork::release();
    got.recv_timeout(Duration::from_secs(5)).unwrap();
    t.join().unwrap();

    // 3. prepare waits for a call in flight; that call's own nested calls do not wait.
    let held = fork::pass();
    let prepared = Arc::new(AtomicBool::new(false));
    let p = prepared.clone();
    let forker = thread::spawn(move || {
        fork::prepare();
        p.store(true, Ordering::SeqCst);
    });
    thread::sleep(BLOCKED);
    assert!(
        !prepared.load(Ordering::SeqCst),
        "prepared with a call in flight"
    );
    let nested = fork::pass(); // would deadlock if it waited for the fork
    drop(nested);
    assert!(!prepared.load(Ordering::SeqCst));
    drop(held);
    forker.join().unwrap();
    assert!(prepared.load(Ordering::SeqCst));
    fork::release();

    // 4. A thread that forks from inside a call does not wait for itself.
    let held = fork::pass();
    fork::prepare();
    fork::release();
    drop(held);

    // 5. Registered pools have their idle connections closed before each fork, while alive.
    let pool = Arc::new(Idle(AtomicUsize::new(0)));
    let as_dyn: Arc<dyn CloseIdle> = pool.clone();
    fork::register(Arc::downgrade(&as_dyn));
    drop(as_dyn);
    fork::prepare();
    fork::release();
    assert_eq!(pool.0.load(Ordering::SeqCst), 1);
    drop(pool);
    fork::prepare(); // a dropped pool is skipped
    fork::release();
}
