//! Group commit on SQLite (see [`crate::store::group`]): the reservations, and the outcomes, that
//! one process makes at once share one `BEGIN IMMEDIATE … COMMIT`, and so, at `synchronous=full`,
//! one fsync instead of one each.
//!
//! A batch writes each row exactly as the call's own transaction would on its first try: a key
//! with no row whose action the store's policy simply allows (the same check, the same `INSERT`),
//! an outcome whose row is in the state it expects (the same compare-and-set). A row it does not
//! write (a row is there, the policy asks more, the row is not in the state expected) is left
//! untouched and its call then goes alone, as without grouping; its neighbours are written. An
//! error of the file (a full disk) rolls the whole batch back, and each call goes alone and meets
//! the error itself. A `COMMIT` that fails leaves the written rows unknown: each call re-reads its
//! own row and decides (`crate::store::recovery`), as alone.

use rusqlite::Connection;

use super::jobs::{Grouped, Job, OutcomeJob};
use super::oversight;
use super::sql::{insert, select, set_synchronous, transition_cas};
use super::store::SqliteStore;
use crate::error::Result;
use crate::record::EffectRecord;
use crate::store::recovery::Commit;
use crate::url::Synchronous;

impl SqliteStore {
    /// Write a batch in one transaction; an answer per job.
    pub(super) fn write_many(&self, jobs: Vec<Job>) -> Vec<Grouped> {
        let written = |c: &Connection| -> Result<Vec<Option<Option<Box<EffectRecord>>>>> {
            let mut out = Vec::with_capacity(jobs.len());
            for job in &jobs {
                out.push(match job {
                    Job::Reserve(j) => self.reserve_one(c, &j.row)?,
                    Job::Outcome(j) => self.transition_one(c, j)?,
                });
            }
            Ok(out)
        };
        // A batch commits as durably as its most demanding write (see `transition_step`).
        let durable = jobs.iter().any(|j| match j {
            Job::Reserve(_) => true,
            Job::Outcome(o) => o.transition.needs_durability_with_client(),
        });
        let key = match &jobs[0] {
            Job::Reserve(j) => &j.row.effect_key,
            Job::Outcome(j) => &j.key,
        };
        self.write_batch((key, "a batch of writes"), jobs.len(), durable, written)
    }

    /// A reservation as its own transaction's first try writes it: `Some(None)` when written.
    /// The policy's check is a read: a refusal writes nothing, and the call meets it again
    /// alone. An error of the `INSERT` ends the whole batch.
    fn reserve_one(
        &self,
        c: &Connection,
        row: &EffectRecord,
    ) -> Result<Option<Option<Box<EffectRecord>>>> {
        let allowed = match &row.action {
            Some(action) => oversight::check_unapproved(self, c, action, &row.effect_key).is_ok(),
            None => true,
        };
        let key = &row.effect_key;
        let wrote =
            allowed && insert(c, row).map_err(|e| self.failed("reserve_effect", key, e))? == 1;
        Ok(wrote.then_some(None))
    }

    /// An outcome's compare-and-set: `Some(row read back, if asked)` when written.
    fn transition_one(
        &self,
        c: &Connection,
        j: &OutcomeJob,
    ) -> Result<Option<Option<Box<EffectRecord>>>> {
        let what = j.transition.name();
        let changed = transition_cas(c, &j.key, &j.action_id, j.attempt, &j.transition, j.now)
            .map_err(|e| self.failed(what, &j.key, e))?;
        Ok(match (changed, j.read_back) {
            (1, true) => Some(
                select(c, &j.key)
                    .map_err(|e| self.failed(what, &j.key, e))?
                    .map(Box::new),
            ),
            (1, false) => Some(None),
            _ => None,
        })
    }

    /// One transaction running `write` (per job: `Some(row read back)` when written), then
    /// each job's answer.
    fn write_batch(
        &self,
        (key, what): (&str, &str),
        n: usize,
        durable: bool,
        write: impl FnOnce(&Connection) -> Result<Vec<Option<Option<Box<EffectRecord>>>>>,
    ) -> Vec<Grouped> {
        // Nothing written: every call goes alone (and meets what stopped the batch itself).
        let alone = || (0..n).map(|_| Grouped::NotWritten).collect();
        let Ok(mut conn) = self.conn() else {
            return alone();
        };
        let relaxed = !durable && self.opts.synchronous == Synchronous::Full;
        if relaxed && set_synchronous(&conn.conn, "NORMAL").is_err() {
            conn.broken = true;
            return alone();
        }
        let committed = self.txn(&mut conn, what, key, write);
        if relaxed && set_synchronous(&conn.conn, "FULL").is_err() {
            conn.broken = true; // never hand out a connection left at NORMAL
        }
        let each = |wrote: Vec<Option<Option<Box<EffectRecord>>>>, unknown: Option<String>| {
            wrote
                .into_iter()
                .map(|w| match (w, &unknown) {
                    (None, _) => Grouped::NotWritten,
                    (Some(row), None) => Grouped::Wrote(row),
                    (Some(_), Some(why)) => Grouped::Unknown(why.clone()),
                })
                .collect()
        };
        match committed {
            Ok(Commit::Landed(wrote)) => each(wrote, None),
            Ok(Commit::Unknown(wrote, why)) => each(wrote, Some(why)),
            // Rolled back: nothing in the batch was written.
            Err(_) => alone(),
        }
    }
}
