//! The PostgreSQL store's rows, decoded.

use tokio_postgres::Row;

use crate::error::{Error, Result};
use crate::record::{EffectRecord, EffectState, Micros};

fn state_of(text: &str) -> std::result::Result<EffectState, Error> {
    EffectState::parse(text)
        .ok_or_else(|| Error::Store(format!("the store holds an unknown effect state {text:?}")))
}

/// A row's columns, read without a panic on a type the store did not expect.
pub(super) trait Cols {
    fn text(&self, i: usize) -> Result<Option<String>>;
    fn int(&self, i: usize) -> Result<Option<i64>>;

    fn need<T>(&self, i: usize, value: Option<T>) -> Result<T> {
        value.ok_or_else(|| Error::Store(format!("the store returned no value in column {i}")))
    }
}

fn bad_column(i: usize, e: impl std::fmt::Display) -> Error {
    Error::Store(format!("the store returned an unreadable column {i}: {e}"))
}

impl Cols for Row {
    fn text(&self, i: usize) -> Result<Option<String>> {
        self.try_get(i).map_err(|e| bad_column(i, e))
    }
    fn int(&self, i: usize) -> Result<Option<i64>> {
        self.try_get(i).map_err(|e| bad_column(i, e))
    }
}

/// A row of `COLUMNS` starting at column `at`; `None` when the key column is NULL.
pub(super) fn read_record(row: &impl Cols, at: usize) -> Result<Option<EffectRecord>> {
    let Some(effect_key) = row.text(at)? else {
        return Ok(None);
    };
    let state = row.need(at + 1, row.text(at + 1)?)?;
    Ok(Some(EffectRecord {
        effect_key,
        state: state_of(&state)?,
        action_id: row.need(at + 2, row.text(at + 2)?)?,
        attempt: row.need(at + 3, row.int(at + 3)?)?,
        created_at: row.need(at + 4, row.int(at + 4)?)?,
        updated_at: row.need(at + 5, row.int(at + 5)?)?,
        lease_expires_at: row.int(at + 6)?,
        result: row.text(at + 7)?,
        error: row.text(at + 8)?,
        resolved_by: row.text(at + 9)?,
        attempt_token: row.text(at + 10)?,
        action: row.text(at + 11)?,
        holder: row.text(at + 12)?,
        args_digest: row.text(at + 13)?,
        arg_digests: row.text(at + 14)?,
        approval_id: row.text(at + 15)?,
    }))
}

/// What a key's read found: its record if any, and the server's clock (or the caller's `now`).
pub(super) type Found = (Option<EffectRecord>, Micros);

/// A row of the `select` statement.
pub(super) fn read_found(row: &impl Cols) -> Result<Found> {
    Ok((read_record(row, 0)?, row.need(16, row.int(16)?)?))
}

/// What the reservation statement did: inserted the row, or found the one there (with the
/// server's clock), or neither (a row committed by another writer after the statement began).
pub(super) enum Reserved {
    Inserted(EffectRecord),
    Found(EffectRecord, Micros),
    Neither,
}

/// What the reservation statement's rows say.
pub(super) fn read_reserved(rows: &[Row]) -> Result<Reserved> {
    let Some(row) = rows.first() else {
        return Ok(Reserved::Neither);
    };
    let record = row.need(1, read_record(row, 1)?)?;
    let inserted: bool = row.try_get(0).map_err(|e| bad_column(0, e))?;
    match inserted {
        true => Ok(Reserved::Inserted(record)),
        false => Ok(Reserved::Found(record, row.need(17, row.int(17)?)?)),
    }
}
