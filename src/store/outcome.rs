//! Recording a protected call's outcome after its body ran: one compare-and-set, re-issued
//! while it fails as a write that did not land or whose end is unknown (re-issuing a
//! compare-and-set is safe). Both drivers use this one loop: the sync decorator on the
//! caller's thread, the async one on a core thread.
//!
//! The rule it keeps: once any try's fate is unknown (`StoreUnresolved`: its `COMMIT` may have
//! landed), the call's final error is that unknown, never a later try's "nothing was
//! written". A later try that cannot reach the store proves nothing about the earlier one.

use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::record::Micros;

/// Try `write` (given the caller's clock moved on by the time spent, if there is one) until it
/// succeeds, is refused, or the `pauses` run out; each retry is logged. Returns the write's
/// end; after tries that all failed, the first unknown one if there was any, else the last.
/// `unknown`: a try made before this call whose end is unknown (it counts as the first).
pub fn record_retrying(
    kind: &str,
    key: &str,
    now: Option<Micros>,
    pauses: &[Duration],
    mut unknown: Option<Error>,
    mut write: impl FnMut(Option<Micros>) -> Result<()>,
) -> Result<()> {
    let started = Instant::now();
    let mut pauses = pauses.iter();
    loop {
        let at = now.map(|n| {
            n.saturating_add(i64::try_from(started.elapsed().as_micros()).unwrap_or(i64::MAX))
        });
        let failed = match write(at) {
            Ok(()) => return Ok(()),
            Err(e @ (Error::StoreWriteFailed(_) | Error::StoreUnresolved { .. })) => e,
            // Not to be re-issued (a closed store, a broken clock): after an unknown try the
            // unknown is still the answer, unless the row itself refuses the write.
            Err(e) => {
                return Err(match unknown {
                    Some(u) if !refuses(&e) => u,
                    _ => e,
                })
            }
        };
        let Some(pause) = pauses.next() else {
            log::warn!(target: "ctrlrun", "ctrlrun: recording {kind} for '{key}' failed ({failed}); no tries left");
            return Err(unknown.unwrap_or(failed));
        };
        log::warn!(target: "ctrlrun", "ctrlrun: recording {kind} for '{key}' failed ({failed}); retrying");
        if unknown.is_none() && matches!(failed, Error::StoreUnresolved { .. }) {
            unknown = Some(failed);
        }
        std::thread::sleep(*pause);
    }
}

/// A refusal that comes from the row itself (another attempt holds it, or it is settled): the
/// store's answer, which a caller is told as it is, even after an unknown try.
fn refuses(e: &Error) -> bool {
    matches!(
        e,
        Error::Duplicate { .. }
            | Error::Conflict { .. }
            | Error::Ambiguous { .. }
            | Error::LostWrite { .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(tries: Vec<Result<()>>) -> (Result<()>, usize) {
        let mut tries = tries.into_iter();
        let mut made = 0;
        let pauses = [Duration::ZERO; 3];
        let done = record_retrying("commit", "k", Some(0), &pauses, None, |_| {
            made += 1;
            tries.next().expect("no more tries than pauses + 1")
        });
        (done, made)
    }

    fn unknown() -> Result<()> {
        Err(Error::unresolved("the first try may have landed".into()))
    }

    fn unsent() -> Result<()> {
        Err(Error::StoreWriteFailed("nothing was written".into()))
    }

    #[test]
    fn an_unknown_try_is_the_answer_whatever_the_later_tries_met() {
        let (done, made) = run(vec![unknown(), unsent(), unsent(), unsent()]);
        assert_eq!(made, 4);
        assert!(
            matches!(done, Err(Error::StoreUnresolved { message: m, .. }) if m.contains("may have landed"))
        );
        let closed = Err(Error::InvalidArgument("the store is closed".into()));
        let (done, made) = run(vec![unsent(), unknown(), closed]);
        assert_eq!(made, 3);
        assert!(matches!(done, Err(Error::StoreUnresolved { .. })));
    }

    #[test]
    fn tries_that_never_reached_the_store_end_in_the_last_failure() {
        let (done, made) = run(vec![unsent(), unsent(), unsent(), unsent()]);
        assert_eq!(made, 4);
        assert!(matches!(done, Err(Error::StoreWriteFailed(_))));
    }

    #[test]
    fn a_later_success_or_a_refusal_by_the_row_is_the_answer() {
        let (done, made) = run(vec![unknown(), Ok(())]);
        assert!(done.is_ok() && made == 2);
        let refused = Err(Error::Store("not a refusal by the row".into()));
        let (done, _) = run(vec![unsent(), refused]);
        assert!(matches!(done, Err(Error::Store(_))));
    }
}
