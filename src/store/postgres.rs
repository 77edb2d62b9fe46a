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
//! Failure classes (SPEC §6): an error before `COMMIT` rolls back and is `StoreWriteFailed`, as
//! is SQLSTATE 40001/40P01 anywhere. Any other error during `COMMIT` (connection lost, statement
//! timeout) is unknown: the row is re-read on a fresh connection and decides. A failed re-read
//! is `StoreUnresolved`. Each branch is logged on `ctrlrun.store` with its name.

use std::str::FromStr;
use std::time::Duration;

use postgres::error::SqlState;
use postgres::types::{ToSql, Type};
use postgres::{Client, Config, GenericClient, NoTls, Row, Transaction};

use crate::error::{Error, Result};
use crate::planner::{self, AfterUnknown, Expected, ReservationPlan, Transition};
use crate::record::{EffectRecord, EffectState, Micros};
use crate::store::pool::{Pool, Pooled};
use crate::store::Store;

/// The schema version this build writes (`ctrlrun_meta.schema_version`).
pub const SCHEMA_VERSION: i64 = 1;

const COLUMNS: &str = "effect_key, state, action_id, attempt, created_at, updated_at, \
                       lease_expires_at, result, error, resolved_by";

/// The row's index: the SHA-256 of the key's UTF-8 bytes. The primary key is this digest, not
/// the key, because a B-tree entry cannot exceed ~2.7 KB and keys may be longer; every lookup
/// also compares the key itself, byte for byte.
fn digest(param: usize) -> String {
    format!("sha256(convert_to(${param}::text, 'UTF8'))")
}

/// Microseconds since the epoch: the caller's `now` when given, else the server's clock.
fn now_expr(param: usize) -> String {
    format!("COALESCE(${param}::int8, (extract(epoch FROM clock_timestamp()) * 1000000)::int8)")
}

/// The statements, rendered once per store for its schema.
///
/// Every statement goes out **unnamed**, its Parse, Bind, Describe, Execute and Sync in one
/// exchange (`query_typed`, the parameter types given by us). Nothing is left on the server
/// connection, and nothing another client left there can run in its place: a connection pooler
/// in transaction mode (PgBouncer, RDS Proxy, pgcat, Supavisor) hands each transaction to
/// whichever server connection is free, so a statement prepared once per client connection
/// under a process-local name (`s7`) could meet another client's `s7`, run *that* statement
/// with our parameters, or be missing. The cost is that the server parses and plans each
/// statement on every call (tens of microseconds next to a commit's WAL flush); the round trips
/// are the same as for a prepared statement.
struct Sql {
    insert: String,
    select: String,
    cas: String,
    transition: String,
    list: String,
}

impl Sql {
    fn new(schema: &str) -> Sql {
        let t = format!("\"{schema}\".ctrlrun_effects");
        Sql {
            // The planner's row, bound as it is; a row already there wins (no row returned).
            // A plain INSERT … VALUES plans in microseconds, where a statement that also works
            // out the row (a CTE) costs the server a tenth of a millisecond on every call.
            insert: format!(
                "INSERT INTO {t} (key_digest, {COLUMNS}) \
                 VALUES ({d}, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
                 ON CONFLICT (key_digest) DO NOTHING RETURNING {COLUMNS}",
                d = digest(1)
            ),
            select: format!(
                "SELECT {cols}, clock.n FROM (SELECT {now} AS n) clock \
                 LEFT JOIN {t} e ON e.key_digest = {d} AND e.effect_key = $1",
                d = digest(1),
                cols = COLUMNS
                    .split(", ")
                    .map(|c| format!("e.{c}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                now = now_expr(2)
            ),
            cas: format!(
                "UPDATE {t} SET state = $1, action_id = $2, attempt = $3, created_at = $4, \
                 updated_at = $5, lease_expires_at = $6, result = $7, error = $8, \
                 resolved_by = $9 \
                 WHERE key_digest = {d} AND effect_key = $10 AND state = $11 \
                 AND action_id = $12 AND attempt = $13",
                d = digest(10)
            ),
            transition: format!(
                "UPDATE {t} SET state = $1, updated_at = {now}, \
                 lease_expires_at = CASE WHEN $3 THEN lease_expires_at ELSE NULL END, \
                 result = $4, error = $5 \
                 WHERE key_digest = {d} AND effect_key = $6 AND action_id = $7 \
                 AND ($8::int8 IS NULL OR attempt = $8) \
                 AND state = ANY($2::text[]) RETURNING {COLUMNS}",
                now = now_expr(9),
                d = digest(6)
            ),
            list: format!(
                "SELECT {COLUMNS} FROM {t} WHERE ($1::text IS NULL OR state = $1) \
                 ORDER BY created_at, effect_key"
            ),
        }
    }
}

type PgResult<T> = std::result::Result<T, postgres::Error>;

/// The statements' executions, each one unnamed exchange with its parameter types spelled out.
impl Sql {
    fn select_row(
        &self,
        c: &mut impl GenericClient,
        key: &str,
        now: Option<Micros>,
    ) -> PgResult<Row> {
        c.query_typed_one(&self.select, &[(&key, Type::TEXT), (&now, Type::INT8)])
    }

    /// Insert the planner's row `r` unless a row is there: the row inserted, or `None`.
    fn insert(&self, c: &mut impl GenericClient, r: &EffectRecord) -> PgResult<Option<Row>> {
        c.query_typed_opt(
            &self.insert,
            &[
                (&r.effect_key, Type::TEXT),
                (&r.state.as_str(), Type::TEXT),
                (&r.action_id, Type::TEXT),
                (&r.attempt, Type::INT8),
                (&r.created_at, Type::INT8),
                (&r.updated_at, Type::INT8),
                (&r.lease_expires_at, Type::INT8),
                (&r.result, Type::TEXT),
                (&r.error, Type::TEXT),
                (&r.resolved_by, Type::TEXT),
            ],
        )
    }

    /// The compare-and-set of the whole row `r` over `expected`: how many rows changed.
    fn cas(
        &self,
        c: &mut impl GenericClient,
        expected: &Expected,
        r: &EffectRecord,
    ) -> PgResult<u64> {
        c.execute_typed(
            &self.cas,
            &[
                (&r.state.as_str(), Type::TEXT),
                (&r.action_id, Type::TEXT),
                (&r.attempt, Type::INT8),
                (&r.created_at, Type::INT8),
                (&r.updated_at, Type::INT8),
                (&r.lease_expires_at, Type::INT8),
                (&r.result, Type::TEXT),
                (&r.error, Type::TEXT),
                (&r.resolved_by, Type::TEXT),
                (&r.effect_key, Type::TEXT),
                (&expected.state.as_str(), Type::TEXT),
                (&expected.action_id, Type::TEXT),
                (&expected.attempt, Type::INT8),
            ],
        )
    }

    fn transition_rows(
        &self,
        c: &mut impl GenericClient,
        t: &Transition,
        key: &str,
        action_id: &str,
        attempt: Option<i64>,
        now: Option<Micros>,
    ) -> PgResult<Vec<Row>> {
        let from: Vec<&str> = t.from_states().iter().map(|s| s.as_str()).collect();
        let (result, error) = t.payload();
        let params: [(&(dyn ToSql + Sync), Type); 9] = [
            (&t.target().as_str(), Type::TEXT),
            (&from, Type::TEXT_ARRAY),
            (&t.keeps_lease(), Type::BOOL),
            (&result, Type::TEXT),
            (&error, Type::TEXT),
            (&key, Type::TEXT),
            (&action_id, Type::TEXT),
            (&attempt, Type::INT8),
            (&now, Type::INT8),
        ];
        c.query_typed(&self.transition, &params)
    }

    fn list_rows(&self, c: &mut impl GenericClient, state: Option<&str>) -> PgResult<Vec<Row>> {
        c.query_typed(&self.list, &[(&state, Type::TEXT)])
    }
}

/// One pooled connection. It holds no prepared statement and no session setting.
pub struct Conn {
    client: Client,
    /// Set when the server ended this session; the pool then discards the connection.
    broken: bool,
}

struct Manager {
    config: Config,
}

impl Manager {
    fn connect_client(&self) -> PgResult<Conn> {
        Ok(Conn {
            client: self.config.connect(NoTls)?,
            broken: false,
        })
    }
}

impl super::pool::Manage for Manager {
    type Conn = Conn;
    type Error = String;

    fn connect(&self) -> std::result::Result<Conn, String> {
        self.connect_client().map_err(|e| describe_pg_error(&e))
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.broken || conn.client.is_closed()
    }
}

fn state_of(text: &str) -> std::result::Result<EffectState, Error> {
    EffectState::parse(text)
        .ok_or_else(|| Error::Store(format!("the store holds an unknown effect state {text:?}")))
}

/// A row of `COLUMNS` starting at column `at`; `None` when the key column is NULL.
fn read_record(row: &Row, at: usize) -> Result<Option<EffectRecord>> {
    let key: Option<String> = row.get(at);
    let Some(effect_key) = key else {
        return Ok(None);
    };
    let state: String = row.get(at + 1);
    Ok(Some(EffectRecord {
        effect_key,
        state: state_of(&state)?,
        action_id: row.get(at + 2),
        attempt: row.get(at + 3),
        created_at: row.get(at + 4),
        updated_at: row.get(at + 5),
        lease_expires_at: row.get(at + 6),
        result: row.get(at + 7),
        error: row.get(at + 8),
        resolved_by: row.get(at + 9),
    }))
}

/// What a key's read found: its record if any, and the server's clock (or the caller's `now`).
type Found = (Option<EffectRecord>, Micros);

/// A row of the `select` statement.
fn read_found(row: &Row) -> Result<Found> {
    Ok((read_record(row, 0)?, row.get(10)))
}

fn is_serialization(e: &postgres::Error) -> bool {
    matches!(
        e.code(),
        Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED
    )
}

/// The server ended the session (an administrator, a restart, a crash) or the socket is gone.
/// The client may not have noticed the closed socket yet when the server's goodbye arrives as
/// the answer to `BEGIN`, so `Client::is_closed` alone is not enough.
fn is_session_gone(e: &postgres::Error) -> bool {
    e.is_closed()
        || matches!(
            e.code(),
            Some(c) if *c == SqlState::ADMIN_SHUTDOWN
                || *c == SqlState::CRASH_SHUTDOWN
                || *c == SqlState::CANNOT_CONNECT_NOW
                || c.code().starts_with("08")
        )
}

fn describe_pg_error(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => {
            // "error connecting to server" alone does not say why: add the causes.
            let mut text = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(cause) = source {
                let more = cause.to_string();
                if !text.contains(&more) {
                    text = format!("{text}: {more}");
                }
                source = cause.source();
            }
            text
        }
    }
}

/// PostgreSQL `text` cannot hold NUL: refuse such a key before any write.
fn check_key(key: &str) -> Result<()> {
    if key.contains('\0') {
        return Err(Error::InvalidArgument(format!(
            "effect key {key:?} contains a NUL character, which PostgreSQL text cannot hold"
        )));
    }
    Ok(())
}

enum Commit<T> {
    Landed(T),
    Unknown(T, String),
}

struct Step {
    written: Option<EffectRecord>,
    outcome: Result<EffectRecord>,
}

pub struct PostgresStore {
    manager_config: Config,
    sql: std::sync::Arc<Sql>,
    description: String,
    pool: Pool<Manager>,
    /// How many dead pooled connections one call skips before it gives up: every pooled one
    /// and one more (after a restart or a failover, all of them may be dead).
    max_stale: usize,
}

impl PostgresStore {
    /// Connect, create the schema's tables if missing, check the recorded schema version.
    pub fn open(url: &str, schema: &str, pool_size: usize) -> Result<PostgresStore> {
        let mut config = Config::from_str(url).map_err(|e| {
            Error::Store(format!(
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
        let description = describe(&config, schema);
        let mut client = config.connect(NoTls).map_err(|e| {
            Error::Store(format!(
                "cannot connect to the PostgreSQL store {description}: {}",
                describe_pg_error(&e)
            ))
        })?;
        init_schema(&mut client, schema, &description)?;
        drop(client);
        let sql = std::sync::Arc::new(Sql::new(schema));
        // Waiting for a pooled connection, or for the server: the connect timeout bounds both.
        let timeout = config
            .get_connect_timeout()
            .copied()
            .unwrap_or(Duration::from_secs(10));
        let pool = Pool::new(
            Manager {
                config: config.clone(),
            },
            pool_size,
            timeout,
        );
        Ok(PostgresStore {
            manager_config: config,
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

    fn failed(&self, what: &str, key: &str, e: &postgres::Error) -> Error {
        Error::StoreWriteFailed(format!(
            "{what} for effect '{key}' failed in the PostgreSQL store {}: {}; nothing was \
             committed, so the write may be retried",
            self.description,
            describe_pg_error(e)
        ))
    }

    /// A read on a pooled connection; a connection whose session the server ended meanwhile is
    /// dropped and the read runs on the next one (a read changes nothing, so it is safe to repeat).
    fn read<T>(
        &self,
        what: &str,
        key: &str,
        mut body: impl FnMut(&mut Client, &Sql) -> PgResult<T>,
    ) -> Result<PgResult<T>> {
        let mut stale = 0;
        loop {
            let mut conn = self.conn(what, key)?;
            let Conn { client, broken } = &mut *conn;
            match body(client, &self.sql) {
                Err(e) if (client.is_closed() || is_session_gone(&e)) && stale < self.max_stale => {
                    *broken = true;
                    stale += 1;
                    log::warn!(target: "ctrlrun.store", "stale_connection_dropped: {what} '{key}'");
                }
                other => return Ok(other),
            }
        }
    }

    /// `BEGIN`, `body`, `COMMIT` on a pooled connection, classified as SPEC §6 says.
    ///
    /// A pooled connection the server has closed meanwhile (a restart, a failover, an idle
    /// reaper) fails at `BEGIN`, before anything was sent that could commit: it is dropped and
    /// the next one is tried, so dead idle connections never cost a caller its write.
    fn txn<T>(
        &self,
        what: &str,
        key: &str,
        body: impl FnOnce(&mut Transaction<'_>, &Sql) -> Result<T>,
    ) -> Result<Commit<T>> {
        let mut body = Some(body);
        let mut stale = 0;
        loop {
            let mut conn = self.conn(what, key)?;
            let Conn { client, broken } = &mut *conn;
            let begin_error = match client.transaction() {
                Ok(mut tx) => {
                    let body = body
                        .take()
                        .expect("the body runs once, after BEGIN succeeded");
                    let value = body(&mut tx, &self.sql)?; // dropping `tx` on error rolls back
                    return match tx.commit() {
                        Ok(()) => Ok(Commit::Landed(value)),
                        Err(e) if is_serialization(&e) => {
                            log::warn!(target: "ctrlrun.store", "commit_refused: {what} '{key}': {e}");
                            Err(self.failed(what, key, &e))
                        }
                        Err(e) => Ok(Commit::Unknown(value, describe_pg_error(&e))),
                    };
                }
                Err(e) => e,
            };
            if (client.is_closed() || is_session_gone(&begin_error)) && stale < self.max_stale {
                *broken = true;
                stale += 1;
                log::warn!(target: "ctrlrun.store", "stale_connection_dropped: {what} '{key}'");
                continue; // the pool discards it: `has_broken` sees it broken
            }
            return Err(self.failed(what, key, &begin_error));
        }
    }

    /// Re-read `key` on a fresh connection (never a pooled one) after an unknown `COMMIT`.
    fn reread(&self, what: &str, key: &str, why: &str) -> Result<(Option<EffectRecord>, Micros)> {
        let read = self
            .manager_config
            .connect(NoTls)
            .and_then(|mut client| self.sql.select_row(&mut client, key, None));
        match read {
            Ok(row) => read_found(&row),
            Err(e) => {
                log::error!(target: "ctrlrun.store", "reread_failed: {what} '{key}': {e}");
                Err(Error::StoreUnresolved(format!(
                    "the COMMIT of {what} for effect '{key}' in the PostgreSQL store {} may or may \
                     not have landed ({why}), and re-reading the row on a fresh connection failed \
                     ({}); nothing more was written and the executor was not run. The key may stay \
                     reserved until its lease lapses; then a person resolves it",
                    self.description,
                    describe_pg_error(&e)
                )))
            }
        }
    }

    fn select_in(
        &self,
        tx: &mut Transaction<'_>,
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
        tx: &mut Transaction<'_>,
        what: &str,
        expected: &Expected,
        r: &EffectRecord,
    ) -> Result<bool> {
        let n = self
            .sql
            .cas(tx, expected, r)
            .map_err(|e| self.failed(what, &r.effect_key, &e))?;
        Ok(n == 1)
    }

    /// One reservation transaction: plan from `first` (the plain read just made) or from a
    /// read in the transaction, write the plan, and re-read and re-plan when a concurrent
    /// writer got there first. Returns what was written (for the identity re-read).
    #[allow(clippy::too_many_arguments)]
    fn reserve_txn(
        &self,
        key: &str,
        action_id: &str,
        lease: Micros,
        begin: bool,
        now: Option<Micros>,
        first: Option<Found>,
    ) -> Result<Commit<Step>> {
        const WHAT: &str = "reserve_effect";
        self.txn(WHAT, key, |tx, sql| {
            let mut found = match first {
                Some(found) => found,
                None => self.select_in(tx, WHAT, key, now)?,
            };
            // A write that loses a race re-reads and re-plans; a few rounds at most.
            for _ in 0..4 {
                let (row, n) = found;
                let (written, outcome) = match planner::plan_reservation(
                    row.as_ref(),
                    key,
                    action_id,
                    lease,
                    n,
                    begin,
                ) {
                    ReservationPlan::Refuse(r) => {
                        return Ok(Step {
                            written: None,
                            outcome: Err(r.into_error()),
                        })
                    }
                    ReservationPlan::Insert(record) => {
                        let inserted = sql
                            .insert(tx, &record)
                            .map_err(|e| self.failed(WHAT, key, &e))?;
                        match inserted {
                            Some(row) => {
                                let rec = read_record(&row, 0)?.expect("RETURNING a row");
                                (Some(rec.clone()), Ok(rec))
                            }
                            None => (None, Ok(record)),
                        }
                    }
                    ReservationPlan::Renew { expected, record } => {
                        let won = self.write_cas(tx, WHAT, &expected, &record)?;
                        (won.then(|| record.clone()), Ok(record))
                    }
                    ReservationPlan::Lapse { expected, record } => {
                        let won = self.write_cas(tx, WHAT, &expected, &record)?;
                        (won.then(|| record.clone()), Err(Error::ambiguous(record)))
                    }
                };
                if written.is_some() {
                    return Ok(Step { written, outcome });
                }
                // Another writer's row is there now: read it (a new statement sees it under
                // READ COMMITTED) and plan again.
                found = self.select_in(tx, WHAT, key, now)?;
            }
            Err(Error::StoreWriteFailed(format!(
                "{WHAT} for effect '{key}': the row kept changing under concurrent writers; \
                 nothing was committed, so the write may be retried"
            )))
        })
    }

    /// Whole-row read-plan-write for extension and resolution (no lock: the compare-and-set
    /// on the row read decides).
    fn read_plan_write(
        &self,
        what: &str,
        key: &str,
        now: Option<Micros>,
        plan: &dyn Fn(Option<EffectRecord>, Micros) -> Result<EffectRecord>,
        may_retry: bool,
    ) -> Result<EffectRecord> {
        let committed = self.txn(what, key, |tx, _| {
            // A compare-and-set lost to a concurrent writer re-reads and re-plans: the planner
            // then refuses by what is there now (SPEC §4).
            for _ in 0..4 {
                let (found, n) = self.select_in(tx, what, key, now)?;
                let expected = found.as_ref().map(Expected::of);
                let record = plan(found, n)?;
                let expected = expected.expect("a plan that writes found a row");
                if self.write_cas(tx, what, &expected, &record)? {
                    return Ok(record);
                }
            }
            Err(Error::StoreWriteFailed(format!(
                "{what} for effect '{key}': the row kept changing under concurrent writers; \
                 nothing was committed, so the write may be retried"
            )))
        })?;
        match committed {
            Commit::Landed(r) => Ok(r),
            Commit::Unknown(written, why) => {
                log::warn!(target: "ctrlrun.store", "commit_unknown: {what} '{key}': {why}");
                let (found, _) = self.reread(what, key, &why)?;
                if found.as_ref() == Some(&written) {
                    log::warn!(target: "ctrlrun.store", "reread_identical_landed: {what} '{key}'");
                    return Ok(written);
                }
                if may_retry {
                    log::warn!(target: "ctrlrun.store", "reread_other_replan: {what} '{key}'");
                    return self.read_plan_write(what, key, now, plan, false);
                }
                Err(Error::StoreUnresolved(format!(
                    "the retried COMMIT of {what} for effect '{key}' in the PostgreSQL store {} \
                     failed again ({why}); nothing more was written",
                    self.description
                )))
            }
        }
    }

    /// A reservation; after an unknown `COMMIT`, the whole-row identity re-read decides: the
    /// row we wrote means it landed; no row means it did not, so the insert is retried once;
    /// any other row goes back to the planner.
    #[allow(clippy::too_many_arguments)]
    fn reserve_step(
        &self,
        key: &str,
        action_id: &str,
        lease: Micros,
        begin: bool,
        now: Option<Micros>,
        first: Option<Found>,
        may_retry: bool,
    ) -> Result<EffectRecord> {
        const WHAT: &str = "reserve_effect";
        let (step, why) = match self.reserve_txn(key, action_id, lease, begin, now, first)? {
            Commit::Landed(step) => return step.outcome,
            Commit::Unknown(step, why) => (step, why),
        };
        let Some(written) = step.written else {
            // Nothing was written, so nothing is unknown.
            return step.outcome;
        };
        log::warn!(target: "ctrlrun.store", "commit_unknown: {WHAT} '{key}': {why}");
        let (found, n) = self.reread(WHAT, key, &why)?;
        if found.as_ref() == Some(&written) {
            log::warn!(target: "ctrlrun.store", "reread_identical_landed: {WHAT} '{key}'");
            return step.outcome;
        }
        let unresolved = || {
            Error::StoreUnresolved(format!(
                "the retried reservation of effect '{key}' in the PostgreSQL store {} did not \
                 settle ({why}); nothing more was written and the executor was not run",
                self.description
            ))
        };
        match found {
            None if may_retry => {
                log::warn!(target: "ctrlrun.store", "reread_none_retry_insert: {WHAT} '{key}'");
                self.reserve_step(key, action_id, lease, begin, now, None, false)
            }
            None => Err(unresolved()),
            Some(row) => {
                log::warn!(target: "ctrlrun.store", "reread_other_replan: {WHAT} '{key}'");
                match planner::plan_reservation(
                    Some(&row),
                    key,
                    action_id,
                    lease,
                    now.unwrap_or(n),
                    begin,
                ) {
                    ReservationPlan::Refuse(r) => Err(r.into_error()),
                    _ if may_retry => {
                        self.reserve_step(key, action_id, lease, begin, now, None, false)
                    }
                    _ => Err(unresolved()),
                }
            }
        }
    }

    fn transition_step(
        &self,
        key: &str,
        action_id: &str,
        attempt: Option<i64>,
        t: &Transition,
        now: Option<Micros>,
        may_reissue: bool,
    ) -> Result<EffectRecord> {
        let what = t.name();
        let committed = self.txn(what, key, |tx, sql| {
            let rows = sql
                .transition_rows(tx, t, key, action_id, attempt, now)
                .map_err(|e| self.failed(what, key, &e))?;
            match rows.first() {
                Some(row) => Ok(Ok(read_record(row, 0)?.expect("RETURNING gives the row"))),
                None => {
                    let (found, n) = self.select_in(tx, what, key, now)?;
                    Ok(planner::settle_mismatch(
                        found, key, action_id, attempt, t, n,
                    ))
                }
            }
        })?;
        match committed {
            Commit::Landed(outcome) => outcome,
            Commit::Unknown(Err(e), _) => Err(e),
            Commit::Unknown(Ok(_), why) => {
                log::warn!(target: "ctrlrun.store", "commit_unknown: {what} '{key}': {why}");
                let (found, n) = self.reread(what, key, &why)?;
                match planner::settle_unknown_transition(
                    found,
                    key,
                    action_id,
                    attempt,
                    t,
                    now.unwrap_or(n),
                ) {
                    AfterUnknown::Landed(row) => {
                        log::warn!(target: "ctrlrun.store", "reread_landed: {what} '{key}'");
                        Ok(row)
                    }
                    AfterUnknown::Reissue if may_reissue => {
                        log::warn!(target: "ctrlrun.store", "reread_unchanged_reissue: {what} '{key}'");
                        self.transition_step(key, action_id, attempt, t, now, false)
                    }
                    AfterUnknown::Reissue => Err(Error::StoreUnresolved(format!(
                        "the re-issued COMMIT of {what} for effect '{key}' in the PostgreSQL store \
                         {} failed again ({why}); nothing more was written",
                        self.description
                    ))),
                    AfterUnknown::Refuse(e) => {
                        log::warn!(target: "ctrlrun.store", "reread_other: {what} '{key}'");
                        Err(e)
                    }
                }
            }
        }
    }
}

fn describe(config: &Config, schema: &str) -> String {
    use postgres::config::Host;
    let user = config.get_user().unwrap_or("");
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        Some(Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config.get_dbname().unwrap_or(user);
    format!("postgresql://{user}@{host}:{port}/{db}?schema={schema}")
}

fn init_schema(client: &mut Client, schema: &str, description: &str) -> Result<()> {
    let fail = |e: postgres::Error| {
        Error::Store(format!(
            "cannot set up the tables of the PostgreSQL store {description}: {}",
            describe_pg_error(&e)
        ))
    };
    let version_query =
        format!("SELECT value FROM \"{schema}\".ctrlrun_meta WHERE key = 'schema_version'");
    let read_version = |client: &mut Client| -> std::result::Result<Option<i64>, postgres::Error> {
        let rows = client.query_typed(&version_query, &[])?;
        Ok(rows
            .first()
            .and_then(|r| r.get::<_, String>(0).parse::<i64>().ok()))
    };
    let version = match read_version(client) {
        Ok(v) => v,
        Err(e)
            if matches!(e.code(), Some(c) if *c == SqlState::UNDEFINED_TABLE
                || *c == SqlState::INVALID_SCHEMA_NAME) =>
        {
            None
        }
        Err(e) => return Err(fail(e)),
    };
    let version = match version {
        Some(v) => v,
        None => {
            let ddl = format!(
                "CREATE SCHEMA IF NOT EXISTS \"{schema}\";
                 CREATE TABLE IF NOT EXISTS \"{schema}\".ctrlrun_effects (
                     key_digest       bytea  NOT NULL PRIMARY KEY,
                     effect_key       text   NOT NULL,
                     state            text   NOT NULL CHECK (state IN
                         ('reserved', 'executing', 'committed', 'failed', 'ambiguous')),
                     action_id        text   NOT NULL,
                     attempt          bigint NOT NULL CHECK (attempt >= 1),
                     created_at       bigint NOT NULL,
                     updated_at       bigint NOT NULL,
                     lease_expires_at bigint,
                     result           text,
                     error            text,
                     resolved_by      text);
                 COMMENT ON COLUMN \"{schema}\".ctrlrun_effects.created_at IS
                     'microseconds since the Unix epoch, UTC';
                 COMMENT ON COLUMN \"{schema}\".ctrlrun_effects.key_digest IS
                     'sha256 of effect_key (UTF-8): the unique index, for keys of any length';
                 CREATE TABLE IF NOT EXISTS \"{schema}\".ctrlrun_meta (
                     key text NOT NULL PRIMARY KEY, value text NOT NULL);
                 INSERT INTO \"{schema}\".ctrlrun_meta VALUES ('schema_version', '{SCHEMA_VERSION}')
                     ON CONFLICT (key) DO NOTHING;"
            );
            // Several processes may create the same schema at once; the loser of a catalog race
            // sees a unique violation and simply tries again.
            let mut tries = 0;
            loop {
                let created = client.transaction().and_then(|mut tx| {
                    tx.batch_execute(&ddl)?;
                    tx.commit()
                });
                match created {
                    Ok(()) => break,
                    Err(e)
                        if tries < 5
                            && matches!(e.code(), Some(c) if *c == SqlState::UNIQUE_VIOLATION
                                || *c == SqlState::DUPLICATE_SCHEMA
                                || *c == SqlState::DUPLICATE_TABLE
                                || *c == SqlState::T_R_SERIALIZATION_FAILURE) =>
                    {
                        tries += 1;
                        std::thread::sleep(Duration::from_millis(20 * tries));
                    }
                    Err(e) => return Err(fail(e)),
                }
            }
            read_version(client)
                .map_err(fail)?
                .unwrap_or(SCHEMA_VERSION)
        }
    };
    if version > SCHEMA_VERSION {
        return Err(Error::Store(format!(
            "the PostgreSQL store {description} has schema version {version}, newer than this \
             ctrlrun understands ({SCHEMA_VERSION}); upgrade ctrlrun"
        )));
    }
    Ok(())
}

impl Store for PostgresStore {
    fn describe(&self) -> String {
        self.description.clone()
    }

    fn reserve(
        &self,
        key: &str,
        action_id: &str,
        lease: Micros,
        begin: bool,
        now: Option<Micros>,
    ) -> Result<EffectRecord> {
        planner::check_request(key, action_id, lease)?;
        check_key(key)?;
        // A refusal needs no transaction: decide it from one plain read (one round trip
        // instead of BEGIN, statement, COMMIT). A stale read only means the caller arrived a
        // moment earlier; anything the planner would grant or lapse is decided again by the
        // reservation's own statement and compare-and-set below.
        let row = self
            .read("reserve_effect", key, |client, sql| {
                sql.select_row(client, key, now)
            })?
            .map_err(|e| self.failed("reserve_effect", key, &e))?;
        let (found, n) = read_found(&row)?;
        if let ReservationPlan::Refuse(refusal) =
            planner::plan_reservation(found.as_ref(), key, action_id, lease, n, begin)
        {
            return Err(refusal.into_error());
        }
        // The transaction plans from this read (its clock is the server's), so a fresh key
        // costs one INSERT; a row that appeared meanwhile makes the INSERT return nothing and
        // is read and planned again inside the transaction.
        self.reserve_step(key, action_id, lease, begin, now, Some((found, n)), true)
    }

    fn transition(
        &self,
        key: &str,
        action_id: &str,
        attempt: Option<i64>,
        transition: &Transition,
        now: Option<Micros>,
    ) -> Result<EffectRecord> {
        planner::check_action_id(action_id)?;
        self.transition_step(key, action_id, attempt, transition, now, true)
    }

    fn extend_lease(
        &self,
        key: &str,
        action_id: &str,
        attempt: Option<i64>,
        until: Micros,
        now: Option<Micros>,
    ) -> Result<EffectRecord> {
        planner::check_action_id(action_id)?;
        let plan = |found: Option<EffectRecord>, n: Micros| {
            planner::plan_extension(found, key, action_id, attempt, until, n)
        };
        self.read_plan_write("extend_lease", key, now, &plan, true)
    }

    fn resolve(
        &self,
        key: &str,
        target: EffectState,
        resolver: &str,
        now: Option<Micros>,
    ) -> Result<EffectRecord> {
        planner::check_resolver(resolver)?;
        let plan = |found: Option<EffectRecord>, n: Micros| {
            planner::plan_resolution(found, key, target, resolver, n)
        };
        self.read_plan_write("resolve_effect", key, now, &plan, true)
    }

    fn get(&self, key: &str) -> Result<Option<EffectRecord>> {
        let row = self
            .read("get_effect", key, |client, sql| {
                sql.select_row(client, key, None)
            })?
            .map_err(|e| {
                Error::Store(format!(
                    "reading effect '{key}' from the PostgreSQL store {} failed: {}",
                    self.description,
                    describe_pg_error(&e)
                ))
            })?;
        Ok(read_found(&row)?.0)
    }

    fn list(&self, state: Option<EffectState>) -> Result<Vec<EffectRecord>> {
        let state = state.map(EffectState::as_str);
        let rows = self
            .read("list_effects", "*", |client, sql| {
                sql.list_rows(client, state)
            })?
            .map_err(|e| {
                Error::Store(format!(
                    "listing effects in the PostgreSQL store {} failed: {}",
                    self.description,
                    describe_pg_error(&e)
                ))
            })?;
        rows.iter()
            .map(|r| read_record(r, 0).map(|o| o.expect("effect_key is NOT NULL")))
            .collect()
    }
}

/// Prefix of throwaway schemas (`ctrlrun verify`, the pytest plugin).
pub const SCRATCH_PREFIX: &str = "ctrlrun_scratch_";

/// Drop a throwaway schema made by `ctrlrun verify` or the pytest plugin. Refuses any schema whose name does not start
/// with [`SCRATCH_PREFIX`], so it can never drop the user's data.
pub fn drop_scratch_schema(url: &str) -> Result<()> {
    let crate::url::StoreUrl::Postgres { url, schema, .. } = crate::url::parse(url)? else {
        return Err(Error::InvalidArgument(
            "drop_scratch_schema takes a postgresql:// URL".into(),
        ));
    };
    if !schema.starts_with(SCRATCH_PREFIX) {
        return Err(Error::InvalidArgument(format!(
            "refusing to drop schema {schema:?}: only {SCRATCH_PREFIX}* scratch schemas are dropped"
        )));
    }
    let config = Config::from_str(&url)
        .map_err(|e| Error::Store(format!("cannot parse the PostgreSQL URL: {e}")))?;
    let description = describe(&config, &schema);
    let fail = |e: postgres::Error| {
        Error::Store(format!(
            "cannot drop the scratch schema of {description}: {}",
            describe_pg_error(&e)
        ))
    };
    let mut client = config.connect(NoTls).map_err(fail)?;
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
        .map_err(fail)
}
