//! The PostgreSQL store's handle: its pool, its reads and its transactions.

use tokio_postgres::error::SqlState;

use super::client::{Client, PgError, PgResult};
use super::conn::{describe, is_serialization, is_session_gone, Conn, Manager, Txn};
use super::jobs::{Grouped, OutcomeJob, ReserveJob};
use super::schema::init_schema;
use super::sql::{read_found, Sql};
use crate::error::{Error, Result};
use crate::planner::{self, Expected, Proposal, Transition};
use crate::receipt::Event;
use crate::record::{EffectRecord, Micros};
use crate::store::backend::{Backend, BackendKind, RowWrite};
use crate::store::group::Group;
use crate::store::pool::{Pool, Pooled};
use crate::store::posture::PostureLine;
use crate::store::recovery::{reread_failed, Commit, Reread, TransitionCall};
use crate::store::retention::{PruneBatch, PruneStep};
use crate::url::PostgresOptions;

/// PostgreSQL `text` cannot hold NUL: refuse such a key before any write.
pub(super) fn check_key(key: &str) -> Result<()> {
    if key.contains('\0') {
        return Err(Error::InvalidArgument(format!(
            "effect key {key:?} contains a NUL character, which PostgreSQL text cannot hold"
        )));
    }
    Ok(())
}

/// The same for the texts a transition writes (the server would refuse them on every try, so
/// they must not come back as a write that "may be retried").
pub(super) fn check_transition_text(t: &Transition) -> Result<()> {
    let w = t.write();
    for (what, text) in [("result", w.result), ("error", w.error)] {
        if text.is_some_and(|v| v.contains('\0')) {
            return Err(Error::InvalidArgument(format!(
                "{}: the {what} text contains a NUL character, which PostgreSQL text cannot \
                 hold; nothing was written",
                t.name()
            )));
        }
    }
    Ok(())
}

pub struct PostgresStore {
    /// How a fresh, unpooled connection is made (the re-read after an unknown `COMMIT`).
    pub(super) fresh: Manager,
    pub(super) sql: std::sync::Arc<Sql>,
    pub(super) description: String,
    pool: Pool<Manager>,
    /// How many dead pooled connections one call skips before it gives up: every pooled one
    /// and one more (after a restart or a failover, all of them may be dead).
    pub(super) max_stale: usize,
    /// What the server's set-up does to the promise, read at open ([`super::posture`]).
    posture: Vec<PostureLine>,
    /// Group commit (the URL's `group_commit`, on unless off): the reservations, and the
    /// outcomes, in flight at once ([`super::group`], [`super::batches`]).
    pub(super) group_commit: bool,
    pub(super) reservations: Group<ReserveJob, Grouped>,
    pub(super) outcomes: Group<OutcomeJob, Grouped>,
}

impl PostgresStore {
    /// Connect, create the schema's tables if missing, check the recorded schema version, and
    /// read the server's posture (refused when it can lose an acknowledged write and `risks`
    /// does not accept that).
    pub fn open(opts: &PostgresOptions) -> Result<PostgresStore> {
        let (schema, pool_size) = (opts.schema.as_str(), opts.pool_size);
        let mut fresh = Manager::for_url(&opts.url, opts.timeout, &opts.tls)?;
        if opts.risks.crash_may_lose_commits {
            fresh.commit_as_the_server_says();
        }
        let description = describe(&fresh.config, schema);
        let mut client = fresh.connect_client().map_err(|e| {
            Error::Store(format!(
                "cannot connect to the PostgreSQL store {description}: {}",
                e.describe()
            ))
        })?;
        // The posture first: a server refused for it gets no table, no migration.
        let seen = super::posture::read(&mut client).map_err(|e| {
            Error::Store(format!(
                "cannot read the replication and durability settings of the PostgreSQL store \
                 {description}: {}",
                e.describe()
            ))
        })?;
        let posture = super::posture::judge(&seen, opts.risks, client.port, &description)?;
        init_schema(&mut client, schema, &description)?;
        drop(client);
        let sql = std::sync::Arc::new(Sql::new(schema, opts.prepared_statements));
        // Waiting for a pooled connection, or for the server: the connect timeout bounds both.
        let pool = Pool::new(fresh.clone(), pool_size, fresh.connect_timeout);
        Ok(PostgresStore {
            fresh,
            sql,
            description,
            pool,
            max_stale: pool_size + 1,
            posture,
            group_commit: opts.group_commit,
            reservations: Group::new(opts.group_commit_wait),
            outcomes: Group::new(opts.group_commit_wait),
        })
    }

    pub(super) fn conn(&self, what: &str, key: &str) -> Result<Pooled<'_, Manager>> {
        self.pool.get().map_err(|e| {
            Error::StoreWriteFailed(format!(
                "{what} for effect '{key}': cannot get a connection to the PostgreSQL store {}: \
                 {e}; nothing was written, so the write may be retried",
                self.description
            ))
        })
    }

    pub(super) fn failed(&self, what: &str, key: &str, e: &PgError) -> Error {
        if let Some(denied) = self.denied((what, &format!("{what} for '{key}'")), e) {
            return denied;
        }
        // The store's policy refused a new attempt (the server's guard, `duties`).
        let policy = |code: &str| e.code() == Some(&SqlState::from_code(code));
        let said = || e.server_message().unwrap_or_else(|| e.describe());
        if policy(super::duties::POLICY_DENIES) {
            return Error::Denied(said());
        }
        if policy(super::duties::POLICY_NEEDS_GRANT) {
            return Error::ApprovalNeeded(said());
        }
        Error::StoreWriteFailed(format!(
            "{what} for effect '{key}' failed in the PostgreSQL store {}: {}; nothing was \
             committed, so the write may be retried",
            self.description,
            e.describe()
        ))
    }

    /// The server refused `what` (`doing`, for the message) for want of a privilege (SQLSTATE
    /// 42501): which duty it needs (`super::duties`). Nothing was written.
    pub(super) fn denied(&self, (what, doing): (&str, &str), e: &PgError) -> Option<Error> {
        (e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE)).then(|| {
            Error::PermissionDenied(format!(
                "{doing} was refused by the server of the PostgreSQL store {}: {}; nothing was \
                 written. {}",
                self.description,
                e.describe(),
                super::duties::needed_by(what)
            ))
        })
    }

    /// A read on a pooled connection; a connection whose session the server ended while it
    /// sat idle in the pool is dropped and the read runs on the next one (a read changes
    /// nothing, so it is safe to repeat).
    pub(super) fn read<T>(
        &self,
        what: &str,
        key: &str,
        mut body: impl FnMut(&mut Client, &Sql) -> PgResult<T>,
    ) -> Result<PgResult<T>> {
        let mut stale = 0;
        loop {
            let mut conn = self.conn(what, key)?;
            match body(&mut conn.client, &self.sql) {
                Err(e) if self.died_idle(&mut conn, &e, &mut stale, what, key) => {}
                other => {
                    conn.used = true;
                    return Ok(other);
                }
            }
        }
    }

    /// Whether `e` says that `conn`, taken from the pool, had died while idle there (a restart,
    /// a failover, an idle reaper, a pooler restarted): then it is marked broken, the pool
    /// discards it, and the caller tries the next one. A connection opened for this call that
    /// fails is no stale one: the server is failing now, and the call stops.
    pub(super) fn died_idle(
        &self,
        conn: &mut Conn,
        e: &PgError,
        stale: &mut usize,
        what: &str,
        key: &str,
    ) -> bool {
        let gone = conn.client.is_closed() || is_session_gone(e);
        if gone {
            conn.broken = true;
        }
        // A wait that ran out is a server that is slow or silent now, not a connection that
        // died idle: trying the next one would multiply the bound.
        let timed_out = matches!(e, PgError::TimedOut { .. });
        if !(gone && !timed_out && conn.used && *stale < self.max_stale) {
            return false;
        }
        *stale += 1;
        log::warn!(target: "ctrlrun.store", "stale_connection_dropped: {what} '{key}'");
        true
    }

    /// `START TRANSACTION`, `body`, `COMMIT` on a pooled connection, classified as docs/spec.md §6 says.
    ///
    /// A pooled connection that died idle fails at `START TRANSACTION`, before anything was
    /// sent that could commit: it is dropped and the next one is tried, so dead idle
    /// connections never cost a caller its write.
    pub(super) fn txn<T>(
        &self,
        what: &str,
        key: &str,
        body: impl FnOnce(&mut Client, &Sql) -> Result<T>,
    ) -> Result<Commit<T>> {
        self.txn_from(&self.sql.begin, (what, key), body)
    }

    /// [`PostgresStore::txn`] started by `begin` (one of [`Sql`]'s, each with
    /// `ctrlrun_durable()`).
    pub(super) fn txn_from<T>(
        &self,
        begin: &str,
        (what, key): (&str, &str),
        body: impl FnOnce(&mut Client, &Sql) -> Result<T>,
    ) -> Result<Commit<T>> {
        let mut body = Some(body);
        let mut stale = 0;
        loop {
            let mut conn = self.conn(what, key)?;
            let begin_error = match Txn::begin(&mut conn, begin) {
                Ok(mut tx) => {
                    let body = body
                        .take()
                        .expect("the body runs once, after BEGIN succeeded");
                    let value = body(tx.client(), &self.sql)?; // dropping `tx` rolls back
                    return match tx.commit() {
                        Ok(()) => Ok(Commit::Landed(value)),
                        Err(e) if is_serialization(&e) => {
                            log::warn!(target: "ctrlrun.store", "commit_refused: {what} '{key}': {e}");
                            Err(self.failed(what, key, &e))
                        }
                        Err(e) => Ok(Commit::Unknown(value, e.describe())),
                    };
                }
                Err(e) => e,
            };
            if !self.died_idle(&mut conn, &begin_error, &mut stale, what, key) {
                return Err(self.failed(what, key, &begin_error));
            }
        }
    }

    pub(super) fn select_in(
        &self,
        tx: &mut Client,
        what: &str,
        key: &str,
        now: Option<Micros>,
    ) -> Result<(Option<EffectRecord>, Micros)> {
        let row = self
            .sql
            .select_row(tx, key, now)
            .map_err(|e| self.failed(what, key, &e))?;
        read_found(&row)
    }

    pub(super) fn write_cas(
        &self,
        tx: &mut Client,
        what: &str,
        (expected, event): (&Expected, Event),
        r: &EffectRecord,
    ) -> Result<bool> {
        let n = self
            .sql
            .cas(tx, expected, r, event)
            .map_err(|e| self.failed(what, &r.effect_key, &e))?;
        Ok(n == 1)
    }
}

impl Reread for PostgresStore {
    fn reread(&self, what: &str, key: &str, why: &str) -> Result<(Option<EffectRecord>, Micros)> {
        let read = self
            .fresh
            .connect_client()
            .and_then(|mut client| self.sql.select_row(&mut client, key, None));
        match read {
            Ok(row) => read_found(&row),
            Err(e) => Err(reread_failed(
                &self.store_name(),
                what,
                key,
                why,
                &e.describe(),
            )),
        }
    }

    fn store_name(&self) -> String {
        format!("the PostgreSQL store {}", self.description)
    }

    fn failed_commit_may_land_later(&self) -> bool {
        true
    }
}

impl Backend for PostgresStore {
    fn location(&self) -> String {
        self.description.clone()
    }

    fn kind(&self) -> BackendKind {
        BackendKind::Postgres
    }

    fn posture(&self) -> Vec<PostureLine> {
        self.posture.clone()
    }

    /// `now` as given: the server's clock is read by each write.
    fn fixed_now(&self, now: Option<Micros>) -> Option<Micros> {
        now
    }

    fn check_transition(&self, t: &Transition) -> Result<()> {
        check_transition_text(t)
    }

    fn reserve_row(&self, proposal: Proposal<'_>, now: Option<Micros>) -> Result<EffectRecord> {
        planner::check_request(proposal.key, proposal.action_id, proposal.lease)?;
        check_key(proposal.key)?;
        self.reserve_from_a_read(proposal, now)
    }

    /// The row written always comes back: the transition's statement returns it.
    fn write_transition(
        &self,
        call: &TransitionCall<'_>,
        _read_back: bool,
    ) -> Result<Option<EffectRecord>> {
        // Refused before any write, so that it never reaches a batch as a row the server refuses.
        check_key(call.key)?;
        self.transition_step(call, true).map(Some)
    }

    fn replace_row(&self, w: RowWrite<'_>) -> Result<EffectRecord> {
        self.read_plan_write((w.what, w.event), w.key, w.now, w.plan, true)
    }

    fn prune_rows(&self, step: PruneStep<'_>) -> Result<PruneBatch> {
        self.prune_batch_in(step)
    }

    fn read_row(&self, key: &str) -> Result<Option<EffectRecord>> {
        if key.contains('\0') {
            return Ok(None); // no row can hold it (see `check_key`): nothing to ask the server
        }
        let row = self
            .read("get_effect", key, |client, sql| {
                sql.select_row(client, key, None)
            })?
            .map_err(|e| {
                Error::Store(format!(
                    "reading effect '{key}' from the PostgreSQL store {} failed: {}",
                    self.description,
                    e.describe()
                ))
            })?;
        Ok(read_found(&row)?.0)
    }
}
