//! The SQLite store's statements on the effects table and its row decoding (the tables and
//! their migrations are in [`super::schema`]).

use rusqlite::{params, params_from_iter, Connection, OptionalExtension, Row};

use crate::planner::{Expected, Transition};
use crate::receipt::Event;
use crate::record::{EffectRecord, Micros};
use crate::store::rows::{self, effect_columns, text, Value};

const SELECT_ONE: &str = concat!(
    "SELECT ",
    effect_columns!(),
    " FROM ctrlrun_effects WHERE effect_key = ?1"
);
/// The chain head a write sets (see [`crate::receipt`]): sequence number, previous hash and
/// hash of the receipt the trigger appends. `$seq` and `$prev` are the head the write replaces;
/// the other fields are the row written, in [`crate::receipt::Receipt::expected_hash`]'s order.
macro_rules! receipt_head {
    ($seq:literal, $prev:literal, $key:literal, $at:literal, $kind:literal, $action:literal,
     $action_id:literal, $attempt:literal, $state:literal, $digest:literal, $approval:literal,
     $actor:literal, $writer:literal) => {
        concat!(
            "receipt_seq = ",
            $seq,
            ", receipt_prev = ",
            $prev,
            ", receipt_hash = ctrlrun_receipt_hash('effect', ",
            $key,
            ", NULL, ",
            $seq,
            ", ",
            $prev,
            ", ",
            $at,
            ", ",
            $kind,
            ", ",
            $action,
            ", ",
            $action_id,
            ", ",
            $attempt,
            ", ",
            $state,
            ", ",
            $digest,
            ", ",
            $approval,
            ", ",
            $actor,
            ", ",
            $writer,
            ")"
        )
    };
}
const INSERT_ONE: &str = concat!(
    "INSERT INTO ctrlrun_effects (",
    effect_columns!(),
    ", last_event, written_by, receipt_seq, receipt_prev, receipt_hash) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, \
     1, NULL, ctrlrun_receipt_hash('effect', ?1, NULL, 1, NULL, ?6, ?17, ?12, ?3, ?4, ?2, ?14, \
     ?16, ?10, ?18)) ON CONFLICT (effect_key) DO NOTHING"
);
/// [`rows::effect_values`] of the row written (`?1` to `?16`), then the expected state, action
/// id and attempt, the event and the writing process.
const COMPARE_AND_SET: &str = concat!(
    "UPDATE ctrlrun_effects SET state = ?2, action_id = ?3, attempt = ?4, created_at = ?5, \
     updated_at = ?6, lease_expires_at = ?7, result = ?8, error = ?9, resolved_by = ?10, \
     attempt_token = ?11, action = ?12, holder = ?13, args_digest = ?14, \
     arg_digests = ?15, approval_id = ?16, last_event = ?20, written_by = ?21, ",
    receipt_head!(
        "COALESCE(receipt_seq, 0) + 1",
        "receipt_hash",
        "?1",
        "?6",
        "?20",
        "?12",
        "?3",
        "?4",
        "?2",
        "?14",
        "?16",
        "?10",
        "?21"
    ),
    " WHERE effect_key = ?1 AND state = ?17 AND action_id = ?18 AND attempt = ?19"
);
const TRANSITION: &str = concat!(
    "UPDATE ctrlrun_effects SET state = ?1, updated_at = ?2, \
     lease_expires_at = CASE WHEN ?3 THEN NULL ELSE lease_expires_at END, \
     result = ?4, error = ?5, last_event = ?12, written_by = ?13, ",
    receipt_head!(
        "COALESCE(receipt_seq, 0) + 1",
        "receipt_hash",
        "effect_key",
        "?2",
        "?12",
        "action",
        "action_id",
        "attempt",
        "?1",
        "args_digest",
        "approval_id",
        "resolved_by",
        "?13"
    ),
    " WHERE effect_key = ?6 AND action_id = ?7 AND (?8 IS NULL OR attempt = ?8) \
     AND state IN (?9, ?10, ?11)"
);

pub(super) fn read_record(row: &Row<'_>) -> rusqlite::Result<EffectRecord> {
    rows::effect(row, 0)
}

pub(super) fn select(conn: &Connection, key: &str) -> rusqlite::Result<Option<EffectRecord>> {
    conn.prepare_cached(SELECT_ONE)?
        .query_row([key], read_record)
        .optional()
}

/// Insert `r` unless the key has a row; the count of rows inserted (0 or 1).
pub(super) fn insert(conn: &Connection, r: &EffectRecord) -> rusqlite::Result<usize> {
    let writer = crate::env::holder();
    write_row(
        conn,
        INSERT_ONE,
        r,
        &[text(Event::Reservation.as_str()), text(&writer)],
    )
}

/// Run `sql` with [`rows::effect_values`] of `r`, then `more`.
fn write_row(
    conn: &Connection,
    sql: &str,
    r: &EffectRecord,
    more: &[Value<'_>],
) -> rusqlite::Result<usize> {
    let values = rows::effect_values(r);
    conn.prepare_cached(sql)?
        .execute(params_from_iter(values.iter().chain(more)))
}

/// Overwrite the whole row if it is still `expected`; returns the number of rows changed.
pub(super) fn compare_and_set(
    conn: &Connection,
    expected: &Expected,
    r: &EffectRecord,
    event: Event,
) -> rusqlite::Result<usize> {
    let writer = crate::env::holder();
    let more = rows::expected_values(expected, event, &writer);
    write_row(conn, COMPARE_AND_SET, r, &more)
}

/// A later transition as one conditional `UPDATE` binding the planner's
/// [`crate::planner::TransitionWrite`]; the row written is read back in the same
/// transaction. (`RETURNING` would build a temporary table on every execution, which costs more
/// than the indexed read.)
pub(super) fn transition_cas(
    conn: &Connection,
    key: &str,
    action_id: &str,
    attempt: Option<i64>,
    t: &Transition,
    now: Micros,
) -> rusqlite::Result<usize> {
    let w = t.write();
    let pick = |i: usize| w.from.get(i).unwrap_or(&w.from[0]).as_str();
    conn.prepare_cached(TRANSITION)?.execute(params![
        w.state.as_str(),
        now,
        w.clear_lease,
        w.result,
        w.error,
        key,
        action_id,
        attempt,
        pick(0),
        pick(1),
        pick(2),
        Event::of_transition(t).as_str(),
        crate::env::holder()
    ])
}

pub(super) fn set_synchronous(conn: &Connection, level: &str) -> rusqlite::Result<()> {
    let sql = if level == "FULL" {
        "PRAGMA synchronous = FULL"
    } else {
        "PRAGMA synchronous = NORMAL"
    };
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}
