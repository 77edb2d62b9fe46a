//! Group commit's batches (see [`super::group`]): the reservations, and the outcomes, that one
//! process makes at once, each batch one statement that commits by itself.
//!
//! A batch decides nothing the single statement would not. Its function writes every row the
//! single one would write on its first try (a key with no row whose action the store's policy
//! simply allows; an outcome whose row is in the state it expects) and answers, per row, the
//! row written or nothing. A row not written goes its own way afterwards, as alone (its own
//! read, the planner's refusal, the policy's check, a late outcome). A conflict on one row
//! never fails its neighbours: `ON CONFLICT DO NOTHING` skips it, and an `UPDATE` that matches
//! nothing writes nothing. Each row is written with its own receipt, chained to its own key.
//! Rows are written in the order of their keys' digests, so two batches that share keys wait
//! for each other in one order and cannot deadlock. (`unnest` of several arrays is the
//! parser's own form, which a schema-qualified name does not reach; the functions' pinned
//! `search_path` never looks in `pg_temp` for a function, so the bare name is the catalog's.)
//!
//! How a batch ended reaches every call in it: written rows landed with the `COMMIT`; an
//! error the server answered rolled back the whole batch, so nothing was written and each call
//! goes alone (one row the server refuses never fails its neighbours); a lost reply leaves each
//! row's commit unknown, and each call re-reads and decides alone ([`crate::store::recovery`]).

use tokio_postgres::types::Type;
use tokio_postgres::Row;

use super::client::{Client, PgError, PgResult};
use super::conn::rolled_back;
use super::jobs::{Grouped, OutcomeJob, ReserveJob};
use super::sql::{read_record, Sql, RESERVE_MANY, TRANSITION_MANY};
use super::store::PostgresStore;
use crate::env::holder;
use crate::record::EffectRecord;
use crate::store::recovery::Commit;

/// How a batch's rows fared, from its answer: each row's ordinal (from 1) and the row written,
/// or NULL columns.
pub(super) fn answers(n: usize, sent: Result<Vec<tokio_postgres::Row>, PgError>) -> Vec<Grouped> {
    match sent {
        Ok(rows) => {
            let mut out: Vec<Grouped> = (0..n).map(|_| Grouped::NotWritten).collect();
            for row in rows {
                let at: Option<i64> = row.try_get(0).ok();
                let slot = at
                    .and_then(|i| usize::try_from(i).ok())
                    .and_then(|i| i.checked_sub(1));
                match (slot.and_then(|i| out.get_mut(i)), read_record(&row, 1)) {
                    (Some(place), Ok(Some(record))) => *place = Grouped::Wrote(Box::new(record)),
                    (Some(_), Ok(None)) => {}
                    // A row that does not decode: its commit is known, its row is not; the
                    // re-read decides.
                    (Some(place), Err(e)) => *place = Grouped::Unknown(e.to_string()),
                    (None, _) => {}
                }
            }
            out
        }
        Err(e) if rolled_back(&e) => {
            log::warn!(
                target: "ctrlrun.store",
                "batch_refused_each_alone: a batch of {n} writes: {}",
                e.describe()
            );
            (0..n).map(|_| Grouped::NotWritten).collect()
        }
        Err(e) => {
            let why = e.describe();
            (0..n).map(|_| Grouped::Unknown(why.clone())).collect()
        }
    }
}

impl PostgresStore {
    /// Send a batch of reservations; an answer per job.
    pub(super) fn reserve_many(&self, jobs: Vec<ReserveJob>) -> Vec<Grouped> {
        let n = jobs.len();
        let sent = self.autocommit("reserve_effect", &jobs[0].row.effect_key, |c, sql| {
            Ok(Commit::Landed(sql.reserve_many(c, &jobs)))
        });
        match sent {
            Ok(Commit::Landed(answer)) | Ok(Commit::Unknown(answer, _)) => answers(n, answer),
            Err(_) => (0..n).map(|_| Grouped::NotWritten).collect(),
        }
    }

    /// Send a batch of outcomes; an answer per job.
    pub(super) fn transition_many(&self, jobs: Vec<OutcomeJob>) -> Vec<Grouped> {
        let n = jobs.len();
        let sent = self.autocommit("record_outcome", &jobs[0].key, |c, sql| {
            Ok(Commit::Landed(sql.transition_many(c, &jobs)))
        });
        match sent {
            Ok(Commit::Landed(answer)) | Ok(Commit::Unknown(answer, _)) => answers(n, answer),
            Err(_) => (0..n).map(|_| Grouped::NotWritten).collect(),
        }
    }
}

/// Group commit's batches (`batches.rs`): every row's answer, in the order of the jobs.
impl Sql {
    pub(super) fn reserve_many(&self, c: &mut Client, jobs: &[ReserveJob]) -> PgResult<Vec<Row>> {
        let col = |f: &dyn Fn(&EffectRecord) -> Option<&str>| -> Vec<Option<&str>> {
            jobs.iter().map(|j| f(&j.row)).collect()
        };
        let keys = col(&|r| Some(r.effect_key.as_str()));
        let states = col(&|r| Some(r.state.as_str()));
        let action_ids = col(&|r| Some(r.action_id.as_str()));
        let leases: Vec<Option<i64>> = jobs.iter().map(|j| j.lease).collect();
        let tokens = col(&|r| r.attempt_token.as_deref());
        let actions = col(&|r| r.action.as_deref());
        let holders = col(&|r| r.holder.as_deref());
        let args = col(&|r| r.args_digest.as_deref());
        let each_arg = col(&|r| r.arg_digests.as_deref());
        let writer = holder();
        let t = Type::TEXT_ARRAY;
        self.hot(
            c,
            RESERVE_MANY,
            &[
                (&keys, t.clone()),
                (&states, t.clone()),
                (&action_ids, t.clone()),
                (&leases, Type::INT8_ARRAY),
                (&tokens, t.clone()),
                (&actions, t.clone()),
                (&holders, t.clone()),
                (&args, t.clone()),
                (&each_arg, t),
                (&writer, Type::TEXT),
            ],
        )
    }

    pub(super) fn transition_many(
        &self,
        c: &mut Client,
        jobs: &[OutcomeJob],
    ) -> PgResult<Vec<Row>> {
        let text = |f: &dyn Fn(&OutcomeJob) -> Option<&str>| -> Vec<Option<&str>> {
            jobs.iter().map(f).collect()
        };
        let states = text(&|j| Some(j.state));
        let from = text(&|j| Some(j.from.as_str()));
        let clear: Vec<bool> = jobs.iter().map(|j| j.clear_lease).collect();
        let results = text(&|j| j.result.as_deref());
        let errors = text(&|j| j.error.as_deref());
        let keys = text(&|j| Some(j.key.as_str()));
        let action_ids = text(&|j| Some(j.action_id.as_str()));
        let attempts: Vec<Option<i64>> = jobs.iter().map(|j| j.attempt).collect();
        let events = text(&|j| Some(j.event.as_str()));
        let writer = holder();
        let t = Type::TEXT_ARRAY;
        self.hot(
            c,
            TRANSITION_MANY,
            &[
                (&states, t.clone()),
                (&from, t.clone()),
                (&clear, Type::BOOL_ARRAY),
                (&results, t.clone()),
                (&errors, t.clone()),
                (&keys, t.clone()),
                (&action_ids, t.clone()),
                (&attempts, Type::INT8_ARRAY),
                (&events, t),
                (&writer, Type::TEXT),
            ],
        )
    }
}
