//! The connection pool: bounded, waits, drops broken connections, frees a slot on a failed
//! connect. Connections here are plain counters; the stores' tests cover real databases.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use ctrlrun::store::pool::{GetError, Manage, Pool};

#[derive(Default)]
struct Counting {
    opened: AtomicUsize,
    closed: Arc<AtomicUsize>,
    fail_next: AtomicUsize,
}

struct FakeConn {
    id: usize,
    broken: bool,
    closed: Arc<AtomicUsize>,
}

impl Drop for FakeConn {
    fn drop(&mut self) {
        self.closed.fetch_add(1, Ordering::SeqCst);
    }
}

impl Manage for Counting {
    type Conn = FakeConn;
    type Error = String;

    fn connect(&self) -> Result<FakeConn, String> {
        if self
            .fail_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err("server said no".into());
        }
        Ok(FakeConn {
            id: self.opened.fetch_add(1, Ordering::SeqCst),
            broken: false,
            closed: self.closed.clone(),
        })
    }

    fn has_broken(&self, conn: &mut FakeConn) -> bool {
        conn.broken
    }
}

#[test]
fn an_idle_connection_is_reused() {
    let pool = Pool::new(Counting::default(), 4, Duration::from_secs(1));
    let first = pool.get().unwrap().id;
    let second = pool.get().unwrap().id;
    assert_eq!(first, second);
    assert_eq!(pool.manager().opened.load(Ordering::SeqCst), 1);
}

#[test]
fn never_more_than_max_open_and_waiters_get_returned_connections() {
    let pool = Arc::new(Pool::new(Counting::default(), 3, Duration::from_secs(10)));
    let in_use = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(Barrier::new(12));
    let threads: Vec<_> = (0..12)
        .map(|_| {
            let (pool, in_use, peak, start) =
                (pool.clone(), in_use.clone(), peak.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                for _ in 0..50 {
                    let _c = pool.get().unwrap();
                    let now = in_use.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_micros(200));
                    in_use.fetch_sub(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(peak.load(Ordering::SeqCst), 3);
    assert_eq!(pool.manager().opened.load(Ordering::SeqCst), 3);
}

#[test]
fn a_broken_connection_is_closed_not_reused() {
    let pool = Pool::new(Counting::default(), 1, Duration::from_secs(1));
    {
        let mut c = pool.get().unwrap();
        c.broken = true;
    }
    assert_eq!(pool.manager().closed.load(Ordering::SeqCst), 1);
    let c = pool.get().unwrap(); // the slot was freed: max 1 still lends one
    assert_eq!(c.id, 1);
}

#[test]
fn a_failed_connect_frees_its_slot_and_says_why() {
    let m = Counting::default();
    m.fail_next.store(1, Ordering::SeqCst);
    let pool = Pool::new(m, 1, Duration::from_millis(100));
    match pool.get() {
        Err(GetError::Connect(e)) => assert_eq!(e, "server said no"),
        Err(e) => panic!("expected a connect error, got {e}"),
        Ok(_) => panic!("expected a connect error"),
    }
    assert!(pool.get().is_ok());
}

#[test]
fn waiting_longer_than_the_wait_is_a_timeout_naming_the_limit() {
    let pool = Pool::new(Counting::default(), 2, Duration::from_millis(150));
    let _a = pool.get().unwrap();
    let _b = pool.get().unwrap();
    let t = Instant::now();
    let err = match pool.get() {
        Err(e) => e,
        Ok(_) => panic!("a third connection beyond max 2"),
    };
    assert!(t.elapsed() >= Duration::from_millis(150));
    assert!(matches!(err, GetError::Timeout { max: 2, .. }));
    assert!(
        err.to_string().contains("all 2 pooled connections"),
        "{err}"
    );
}

#[test]
fn dropping_the_pool_closes_idle_connections() {
    let pool = Pool::new(Counting::default(), 2, Duration::from_secs(1));
    let closed = pool.manager().closed.clone();
    {
        let _a = pool.get().unwrap();
        let _b = pool.get().unwrap();
    }
    assert_eq!(closed.load(Ordering::SeqCst), 0);
    drop(pool);
    assert_eq!(closed.load(Ordering::SeqCst), 2);
}

struct Panicking;

impl Manage for Panicking {
    type Conn = ();
    type Error = String;

    fn connect(&self) -> Result<(), String> {
        panic!("an init callback panicked");
    }

    fn has_broken(&self, _conn: &mut ()) -> bool {
        false
    }
}

#[test]
fn a_panic_while_connecting_gives_the_slot_back() {
    let pool = Pool::new(Panicking, 1, Duration::from_millis(50));
    for _ in 0..3 {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| pool.get().map(|_| ())));
        assert!(r.is_err(), "the panic propagates");
    }
    // had the slot leaked, this would be a Timeout, not another attempt to connect
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| pool.get().map(|_| ())));
    assert!(r.is_err());
}

/// A connection given back wakes a waiter at once: each waiter counts itself before it sleeps,
/// and a give-back wakes one only when some are counted (no lost wake-up). With one connection
/// and a 5 s wait, 4 threads taking it in turn 25 times each all get it; a lost wake-up would
/// leave a waiter asleep until its wait ran out.
#[test]
fn a_connection_given_back_wakes_a_waiter() {
    let pool = Arc::new(Pool::new(Counting::default(), 1, Duration::from_secs(5)));
    let start = Arc::new(Barrier::new(4));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (pool, start) = (pool.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                let mut slowest = Duration::ZERO;
                for _ in 0..25 {
                    let asked = Instant::now();
                    let _c = pool.get().expect("a connection within the wait");
                    slowest = slowest.max(asked.elapsed());
                    std::thread::sleep(Duration::from_micros(300));
                }
                slowest
            })
        })
        .collect();
    for t in threads {
        let slowest = t.join().unwrap();
        assert!(
            slowest < Duration::from_secs(4),
            "a waiter slept {slowest:?}"
        );
    }
    assert_eq!(pool.manager().opened.load(Ordering::SeqCst), 1);
}
