//! What listing by filter and retention ask of a store: [`EffectFilter`] and [`Prune`], their
//! checks, and the key range a prefix stands for. Each backend's `retention.rs` holds the
//! queries.
//!
//! Retention forgets: once a `committed` row is pruned, the next call with its key runs again.
//! So a prune only ever removes settled rows (`committed`, `failed`) whose creation and last
//! write are both older than the cut, never a row with an approval request still open for its
//! key, and never an `ambiguous`, `reserved` or `executing` one, whatever it is asked.

use crate::error::{Error, Result};
use crate::planner::breaks_a_line;
use crate::record::{EffectState, Micros};

/// What [`crate::store::Retention::list`] selects: every filter given must hold. Rows come
/// oldest first (creation time, then key) or newest first; with `after`, those after that point
/// of the order; with `limit`, the first that many.
#[derive(Clone, Copy, Debug, Default)]
pub struct EffectFilter<'a> {
    pub state: Option<EffectState>,
    /// Keys that start with this text.
    pub prefix: Option<&'a str>,
    /// The action name the row's attempt was written by.
    pub action: Option<&'a str>,
    /// After this `(created_at, effect_key)` in the listing's order: the last row of the page
    /// before.
    pub after: Option<(Micros, &'a str)>,
    /// Newest first (creation time, then key, both descending).
    pub newest_first: bool,
    pub limit: Option<u64>,
}

impl EffectFilter<'_> {
    /// Every row.
    pub const ALL: EffectFilter<'static> = EffectFilter {
        state: None,
        prefix: None,
        action: None,
        after: None,
        newest_first: false,
        limit: None,
    };

    /// Only the rows in `state`.
    pub fn state(state: Option<EffectState>) -> EffectFilter<'static> {
        EffectFilter {
            state,
            ..EffectFilter::ALL
        }
    }

    /// The order (`ORDER BY …`), and the comparison that keeps the rows after `after` in it.
    pub fn order(&self) -> (&'static str, &'static str) {
        if self.newest_first {
            ("ORDER BY created_at DESC, effect_key DESC", "<")
        } else {
            ("ORDER BY created_at, effect_key", ">")
        }
    }

    /// The limit as SQL wants it (`-1`: none).
    pub fn sql_limit(&self) -> i64 {
        self.limit
            .map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX))
    }
}

/// The states a prune may remove.
pub const PRUNABLE: [EffectState; 2] = [EffectState::Committed, EffectState::Failed];

/// The longest age a prune takes: a hundred years (far from overflow when subtracted from a
/// time in microseconds).
pub const MAX_AGE: Micros = 100 * 366 * 86_400 * 1_000_000;

/// The most rows one prune transaction removes, and the default.
pub const MAX_BATCH: u32 = 10_000;
pub const DEFAULT_BATCH: u32 = 1_000;

/// What [`crate::store::Retention::prune`] removes.
#[derive(Clone, Debug)]
pub struct Prune<'a> {
    /// Rows created and last written more than this many microseconds before now.
    pub older_than: Micros,
    /// A subset of [`PRUNABLE`].
    pub states: Vec<EffectState>,
    /// Delete the pruned effects' receipts too. Without it, each pruned row leaves a last
    /// receipt (`pruned`) on its chain, so the chain shows where it ends and why.
    pub drop_receipts: bool,
    /// Who prunes (written on the `pruned` receipts).
    pub by: Option<&'a str>,
    /// The most rows removed per transaction (each one short: a busy store is never locked
    /// for long).
    pub batch: u32,
}

impl Prune<'_> {
    /// Refuse what could remove more than a prune may, or could not end.
    pub fn check(&self) -> Result<()> {
        let bad = |why: String| Err(Error::InvalidArgument(format!("prune: {why}")));
        if self.older_than <= 0 {
            return bad(format!(
                "older_than must be a positive age (a row settled that long ago), got {} \
                 microseconds; nothing was pruned",
                self.older_than
            ));
        }
        if self.older_than > MAX_AGE {
            return bad(format!(
                "older_than must be at most a hundred years, got {} microseconds",
                self.older_than
            ));
        }
        if self.states.is_empty() {
            return bad("states is empty: name committed, failed or both".into());
        }
        if let Some(s) = self.states.iter().find(|s| !PRUNABLE.contains(s)) {
            return bad(format!(
                "{} rows are never pruned (only committed and failed ones are settled); \
                 nothing was pruned",
                s.as_str()
            ));
        }
        if (1..self.states.len()).any(|i| self.states[..i].contains(&self.states[i])) {
            return bad("states names the same state twice".into());
        }
        if self.batch == 0 || self.batch > MAX_BATCH {
            return bad(format!(
                "batch must be between 1 and {MAX_BATCH}, got {}",
                self.batch
            ));
        }
        if let Some(by) = self.by {
            if by.trim().is_empty() || by.chars().count() > 200 || by.chars().any(breaks_a_line) {
                return bad(format!(
                    "by must be one printable line of 1 to 200 characters naming who prunes, \
                     got {by:?}"
                ));
            }
        }
        Ok(())
    }
}

/// Where one prune batch stopped in a state's rows, in their order (creation time, then the
/// backend's tie-breaker: the key in SQLite, its digest in PostgreSQL).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    pub created_at: Micros,
    pub tie: Vec<u8>,
}

/// The smallest text greater than every text that starts with `prefix`, in code point order
/// (SQLite's `BINARY`, PostgreSQL's `"C"`): `prefix` with its last character moved one on.
/// `None` when every character is the last code point (or `prefix` is empty): no bound.
pub fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = match u32::from(last) + 1 {
            0xD800 => Some('\u{E000}'), // past the surrogates, which no text holds
            n => char::from_u32(n),
        };
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// The first `n` characters of `text` (PostgreSQL's `left(text, n)`).
pub fn first_chars(text: &str, n: usize) -> &str {
    match text.char_indices().nth(n) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

/// Walk every state of `p` batch by batch: `batch(state, after)` runs one transaction,
/// `progress(removed so far)` is told after each and stops the walk with `false`. The caller
/// fixes `now` for all batches, so rows created meanwhile are never reached and the walk ends.
pub fn drive<E>(
    p: &Prune<'_>,
    mut batch: impl FnMut(EffectState, Option<&Cursor>) -> std::result::Result<PruneBatch, E>,
    mut progress: impl FnMut(u64) -> std::result::Result<bool, E>,
) -> std::result::Result<u64, E> {
    let mut removed = 0;
    for &state in &p.states {
        let mut after: Option<Cursor> = None;
        loop {
            let done = batch(state, after.as_ref())?;
            removed += done.removed;
            if !progress(removed)? {
                return Ok(removed);
            }
            match done.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
    }
    Ok(removed)
}

/// What one prune transaction did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PruneBatch {
    pub removed: u64,
    /// Where the next batch starts; `None` when no row is left to look at.
    pub next: Option<Cursor>,
}

/// One prune transaction's arguments (see [`crate::store::Retention::prune_batch`]).
#[derive(Clone, Copy, Debug)]
pub struct PruneStep<'a> {
    pub prune: &'a Prune<'a>,
    pub state: EffectState,
    pub after: Option<&'a Cursor>,
    pub now: Option<Micros>,
}

/// A prune batch whose `COMMIT` failed in `store_name`.
pub(crate) fn batch_unknown(store_name: &str, why: &str) -> Error {
    Error::unresolved(format!(
        "pruning effects in {store_name}: the COMMIT failed ({why}), so this batch may or may \
         not be removed; running the prune again finishes it"
    ))
}
