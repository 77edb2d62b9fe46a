//! The PostgreSQL store: many hosts, one database.
//!
//! The reservation is the primary-key index plus compare-and-set: `INSERT … ON CONFLICT
//! (key_digest) DO NOTHING` with the returned row checked, and `UPDATE … WHERE key AND state AND
//! action_id AND attempt` with the row count checked, under the default isolation level. The
//! primary key is the SHA-256 of the effect key (a B-tree entry cannot hold a long key); every
//! statement also compares the key itself, so the key stays opaque and exact. No advisory locks, no `SERIALIZABLE`, no `SELECT … FOR UPDATE`; nothing is held across
//! the executor. Lease decisions use the server's clock (`clock_timestamp()`) unless the caller
//! passes `now`.
//!
//! Failure classes (docs/spec.md §6): an error before `COMMIT` rolls back and is `StoreWriteFailed`, as
//! is SQLSTATE 40001/40P01 anywhere. Any other error during `COMMIT` (connection lost, statement
//! timeout) is unknown: the row is re-read on a fresh connection and decides. A failed re-read
//! is `StoreUnresolved`. Each branch is logged on `ctrlrun.store` with its name.

mod client;
mod cold;
mod conn;
mod retention;
mod schema;
mod sql;
mod statements;
mod tls;
mod writes;

use std::str::FromStr;
use std::time::Duration;

use tokio_postgres::Config;

use crate::error::{Error, Result};
use crate::planner::{self, Expected, Proposal, Transition};
use crate::receipt::Event;
use crate::record::{EffectRecord, Micros};
use crate::store::engine::{Engine, RowPlan};
use crate::store::pool::{Pool, Pooled};
use crate::store::recovery::{reread_failed, Commit, Reread, TransitionCall};
use crate::store::Backend;
use crate::url::{PgTls, SslMode};
use client::{one_per_host, Client, PgError, PgResult};
use conn::{describe, is_serialization, is_session_gone, Conn, Manager, Txn};
use schema::init_schema;
pub use schema::{drop_scratch_schema, SCHEMA_VERSION, SCRATCH_PREFIX};
use sql::{read_found, Sql};

/// PostgreSQL `text` cannot hold NUL: refuse such a key before any write.
fn check_key(key: &str) -> Result<()> {
    if key.contains('\0') {
        return Err(Error::InvalidArgument(format!(
            "effect key {key:?} contains a NUL character, which PostgreSQL text cannot hold"
        )));
    }
    Ok(())
}

/// The same for the texts a transition writes (the server would refuse them on every try, so
/// they must not come back as a write that "may be retried").
fn check_transition_text(t: &Transition) -> Result<()> {
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
    fresh: Manager,
    sql: std::sync::Arc<Sql>,
    description: String,
    pool: Pool<Manager>,
    /// How many dead pooled connections one call skips before it gives up: every pooled one
    /// and one more (after a restart or a failover, all of them may be dead).
    max_stale: usize,
}

impl PostgresStore {
    /// How connections to the URL's servers are made: the driver's settings with our
    /// defaults (`connect_timeout` 10 s, `application_name` ctrlrun, TCP keepalives), the TLS
    /// connector, and the bound on every exchange.
    pub(crate) fn connector_for(url: &str, timeout: Duration, tls: &PgTls) -> Result<Manager> {
        let mut config = Config::from_str(url).map_err(|e| {
            Error::InvalidArgument(format!(
                "cannot parse the PostgreSQL URL (password not shown): {e}"
            ))
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        if config.get_application_name().is_none() {
            config.application_name("ctrlrun");
        }
        config.keepalives_idle(Duration::from_secs(30));
        let connect_timeout = config
            .get_connect_timeout()
            .copied()
            .unwrap_or(Duration::from_secs(10));
        if connect_timeout > Duration::from_secs(3600) || connect_timeout.is_zero() {
            return Err(Error::InvalidArgument(format!(
                "connect_timeout must be from 1 to 3600 seconds, got {} s",
                connect_timeout.as_secs()
            )));
        }
        // TLS is never used over a Unix-domain socket (libpq's rule): `prefer` means plaintext
        // there, and a mode that insists on TLS is refused rather than quietly ignored.
        let hosts = config.get_hosts();
        let unix_only = !hosts.is_empty()
            && hosts
                .iter()
                .all(|h| matches!(h, tokio_postgres::config::Host::Unix(_)));
        let mode = match tls.mode {
            SslMode::Prefer if unix_only => SslMode::Disable,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull if unix_only => {
                return Err(Error::InvalidArgument(
                    "the URL names only Unix-domain sockets, over which TLS is not used; use \
                     sslmode=disable (or prefer), or a TCP host for TLS"
                        .into(),
                ))
            }
            mode => mode,
        };
        // The driver's own TLS mode follows ours, whatever the URL text said (defence in
        // depth: an option lost in a malformed URL must not turn `require` into `prefer`).
        config.ssl_mode(match mode {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            _ => tokio_postgres::config::SslMode::Require,
        });
        let connector = match mode {
            SslMode::Disable => None,
            _ => Some(tls::connector(tls)?),
        };
        Ok(Manager {
            tls: connector,
            hosts: one_per_host(&config),
            config,
            connect_timeout,
            timeout,
        })
    }

    /// Connect, create the schema's tables if missing, check the recorded schema version.
    pub fn open(
        url: &str,
        schema: &str,
        pool_size: usize,
        timeout: Duration,
        tls: &PgTls,
    ) -> Result<PostgresStore> {
        let fresh = Self::connector_for(url, timeout, tls)?;
        let description = describe(&fresh.config, schema);
        let mut client = fresh.connect_client().map_err(|e| {
            Error::Store(format!(
                "cannot connect to the PostgreSQL store {description}: {}",
                e.describe()
            ))
        })?;
        init_schema(&mut client, schema, &description)?;
        drop(client);
        let sql = std::sync::Arc::new(Sql::new(schema));
        // Waiting for a pooled connection, or for the server: the connect timeout bounds both.
        let pool = Pool::new(fresh.clone(), pool_size, fresh.connect_timeout);
        Ok(PostgresStore {
            fresh,
            sql,
            description,
            pool,
            max_stale: pool_size + 1,
        })
    }

    fn conn(&self, what: &str, key: &str) -> Result<Pooled<'_, Manager>> {
        self.pool.get().map_err(|e| {
            Error::StoreWriteFailed(format!(
                "{what} for effect '{key}': cannot get a connection to the PostgreSQL store {}: \
                 {e}; nothing was written, so the write may be retried",
                self.description
            ))
        })
    }

    fn failed(&self, what: &str, key: &str, e: &PgError) -> Error {
        Error::StoreWriteFailed(format!(
            "{what} for effect '{key}' failed in the PostgreSQL store {}: {}; nothing was \
             committed, so the write may be retried",
            self.description,
            e.describe()
        ))
    }

    /// A read on a pooled connection; a connection whose session the server ended while it
    /// sat idle in the pool is dropped and the read runs on the next one (a read changes
    /// nothing, so it is safe to repeat).
    fn read<T>(
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
    fn died_idle(
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
    fn txn<T>(
        &self,
        what: &str,
        key: &str,
        body: impl FnOnce(&mut Client, &Sql) -> Result<T>,
    ) -> Result<Commit<T>> {
        let mut body = Some(body);
        let mut stale = 0;
        loop {
            let mut conn = self.conn(what, key)?;
            let begin_error = match Txn::begin(&mut conn) {
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

    fn select_in(
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

    fn write_cas(
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

impl Engine for PostgresStore {
    fn location(&self) -> String {
        self.description.clone()
    }

    fn kind(&self) -> Backend {
        Backend::Postgres
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
        self.transition_step(call, true).map(Some)
    }

    fn replace_row(
        &self,
        what: (&str, Event),
        key: &str,
        now: Option<Micros>,
        plan: &RowPlan<'_>,
    ) -> Result<EffectRecord> {
        self.read_plan_write(what, key, now, plan, true)
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
