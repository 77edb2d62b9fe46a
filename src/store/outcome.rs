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
pub fn record_retrying(
    kind: &str,
    key: &str,
    now: Option<Micros>,
    pauses: &[Duration],
    mut write: impl FnMut(Option<Micros>) -> Result<()>,
) -> Result<()> {
    let started = Instant::now();
    let mut unknown: Option<Error> = None;
    let mut pauses = pauses.iter();
    loop {
        let at = now.map(|n| {
            n.saturating_add(i64::try_from(started.elapsed().as_micros()).unwrap_or(i64::MAX))
        });
        let failed = match write(at) {
            Ok(()) => return Ok(()),
            Err(e @ (Error::StoreWriteFailed(_) | Error::StoreUnresolved(_))) => e,
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
        if unknown.is_none() && matches!(failed, Error::StoreUnresolved(_)) {
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
        Error::Duplicate { .. } | Error::Conflict { .. } | Error::Ambiguous { .. }
    )
}
