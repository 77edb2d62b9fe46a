//! One blocking PostgreSQL connection whose every wait is bounded.
//!
//! The driver is tokio-postgres. Each connection owns a current-thread tokio runtime (it starts
//! a thread only to look up a host name): the caller's thread drives the connection's I/O
//! inside `block_on`, so a round trip costs no thread hop (the synchronous `postgres` crate works the same way, but it
//! offers no bound on a statement: a server that accepts and never answers would block the
//! caller for ever). Here every exchange, the connection's start-up included, runs under
//! `tokio::time::timeout`; one that runs out is [`PgError::TimedOut`] and the connection is
//! never used again (its reply may still arrive).
//!
//! Our own small wrapper, not a pool crate: the store's pool (`store::pool`) must stay
//! fork-aware and lends each connection to one thread at a time, which is all this needs.

use std::future::Future;
use std::time::Duration;

use tokio::runtime::{Builder, Runtime};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Config, Row, Statement};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::hosts::host_label;

/// What a connection's start-up is called in a timeout.
const STARTUP: &str = "the connection's start-up";

/// A driver error, or a wait that ran past its bound.
#[derive(Debug)]
pub(crate) enum PgError {
    Driver(tokio_postgres::Error),
    /// No answer within the bound (`what` was waited for).
    TimedOut {
        what: &'static str,
        after: Duration,
    },
    /// The connection's runtime could not be made (out of file descriptors).
    Runtime(std::io::Error),
    /// Each of the URL's hosts failed, in the order tried: (`host:port`, why).
    Hosts(Vec<(String, PgError)>),
    /// The server does not know a statement this connection prepared (SQLSTATE 26000, with
    /// `prepared_statements=on`): the connection is not the session that prepared it. The
    /// server answered with an error, so nothing ran.
    NotPrepared(tokio_postgres::Error),
}

pub(crate) type PgResult<T> = std::result::Result<T, PgError>;

impl PgError {
    pub(crate) fn code(&self) -> Option<&SqlState> {
        match self {
            PgError::Driver(e) | PgError::NotPrepared(e) => e.code(),
            _ => None,
        }
    }

    /// The server's own message, when the server answered with an error.
    pub(crate) fn server_message(&self) -> Option<String> {
        match self {
            PgError::Driver(e) | PgError::NotPrepared(e) => {
                e.as_db_error().map(|d| d.message().to_owned())
            }
            _ => None,
        }
    }

    /// The connection is gone (closed by either side, or abandoned after a timeout).
    pub(crate) fn is_closed(&self) -> bool {
        match self {
            PgError::Driver(e) => e.is_closed(),
            PgError::TimedOut { .. } => true,
            PgError::Runtime(_) | PgError::Hosts(_) | PgError::NotPrepared(_) => false,
        }
    }

    /// One line saying what went wrong, with the driver's causes (never a password).
    pub(crate) fn describe(&self) -> String {
        match self {
            PgError::TimedOut { what, after } => format!(
                "no answer from the server to {what} within {} s (the URL's {})",
                after.as_secs_f64(),
                if *what == STARTUP {
                    "connect_timeout"
                } else {
                    "timeout"
                }
            ),
            PgError::Runtime(e) => format!("cannot start the connection's I/O driver: {e}"),
            PgError::Hosts(tried) => {
                let each: Vec<String> = tried
                    .iter()
                    .map(|(host, e)| format!("{host}: {}", e.describe()))
                    .collect();
                format!("no host could be used ({})", each.join("; "))
            }
            PgError::NotPrepared(e) => format!(
                "{} (SQLSTATE 26000): the URL sets prepared_statements=on, which is for a \
                 direct connection only; behind a transaction pooler remove it",
                e.as_db_error()
                    .map_or("a prepared statement is missing", |db| db.message())
            ),
            PgError::Driver(e) => match e.as_db_error() {
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
            },
        }
    }
}

impl std::fmt::Display for PgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

/// The parameters of one statement, with their types spelled out (an unnamed statement's Parse
/// carries them; a prepared one was prepared with them).
pub(crate) type Params<'a> = &'a [(&'a (dyn ToSql + Sync), Type)];

/// The values of `params` alone (a prepared statement knows their types).
fn values<'a>(params: Params<'a>) -> Vec<&'a (dyn ToSql + Sync)> {
    params.iter().map(|(v, _)| *v).collect()
}

/// What a statement answers with: every row (`Vec<Row>`), exactly one (`Row`) or at most one
/// (`Option<Row>`), each read by the driver's call of that kind, so that a count the statement
/// breaks is the driver's error. One method a kind serves unnamed and prepared statements alike.
pub(crate) trait Answer: Sized {
    fn unnamed<'a>(
        c: &'a tokio_postgres::Client,
        sql: &'a str,
        params: Params<'a>,
    ) -> impl Future<Output = Result<Self, tokio_postgres::Error>> + 'a;

    fn prepared<'a>(
        c: &'a tokio_postgres::Client,
        st: &'a Statement,
        values: &'a [&'a (dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<Self, tokio_postgres::Error>> + 'a;
}

/// Each kind of [`Answer`] with the driver's two calls that read it.
macro_rules! answer {
    ($kind:ty, $unnamed:ident, $prepared:ident) => {
        impl Answer for $kind {
            fn unnamed<'a>(
                c: &'a tokio_postgres::Client,
                sql: &'a str,
                params: Params<'a>,
            ) -> impl Future<Output = Result<Self, tokio_postgres::Error>> + 'a {
                c.$unnamed(sql, params)
            }

            fn prepared<'a>(
                c: &'a tokio_postgres::Client,
                st: &'a Statement,
                values: &'a [&'a (dyn ToSql + Sync)],
            ) -> impl Future<Output = Result<Self, tokio_postgres::Error>> + 'a {
                c.$prepared(st, values)
            }
        }
    };
}

answer!(Vec<Row>, query_typed, query);
answer!(Row, query_typed_one, query_one);
answer!(Option<Row>, query_typed_opt, query_opt);

/// The connection's runtime. Dropped, it shuts down without waiting: a host name lookup still
/// running on its blocking pool (the only threads it ever starts) must not stretch a bound.
struct Rt(Option<Runtime>);

impl std::ops::Deref for Rt {
    type Target = Runtime;
    fn deref(&self) -> &Runtime {
        self.0
            .as_ref()
            .expect("the runtime lives as long as its connection")
    }
}

impl Drop for Rt {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

pub(crate) struct Client {
    rt: Rt,
    inner: tokio_postgres::Client,
    timeout: Duration,
    /// A wait ran out: the connection is abandoned.
    timed_out: bool,
    /// The statements prepared on this connection (`prepared_statements=on`), by the slot the
    /// caller gives each (see `sql.rs`).
    prepared: [Option<Statement>; PREPARED_SLOTS],
    /// The port this connection was made to (a server answering on another says something
    /// sits between: [`super::posture`]).
    pub(crate) port: u16,
}

/// How many statements one connection keeps prepared at most.
pub(crate) const PREPARED_SLOTS: usize = 6;

impl Client {
    /// Connect to the first of `hosts` (one driver configuration per host of the URL, see
    /// [`super::hosts::one_per_host`]) that takes the connection, as libpq does: each host gets its own
    /// `connect_timeout`, so a host that accepts and then stalls cannot stop a failover to the
    /// next. `tls` is `None` for `sslmode=disable`.
    pub(crate) fn connect(
        hosts: &[Config],
        tls: Option<&MakeRustlsConnect>,
        connect_timeout: Duration,
        timeout: Duration,
    ) -> PgResult<Client> {
        let mut tried = Vec::new();
        for config in hosts {
            match Client::connect_one(config, tls, connect_timeout, timeout) {
                Ok(client) => return Ok(client),
                Err(e) if hosts.len() == 1 => return Err(e),
                Err(e) => tried.push((host_label(config), e)),
            }
        }
        Err(PgError::Hosts(tried))
    }

    fn connect_one(
        config: &Config,
        tls: Option<&MakeRustlsConnect>,
        connect_timeout: Duration,
        timeout: Duration,
    ) -> PgResult<Client> {
        let rt = Rt(Some(
            Builder::new_current_thread()
                .enable_io()
                .enable_time()
                .build()
                .map_err(PgError::Runtime)?,
        ));
        let timed_out = || PgError::TimedOut {
            what: STARTUP,
            after: connect_timeout,
        };
        // The connection's I/O runs whenever a caller's `block_on` drives this runtime.
        let inner = match tls {
            Some(tls) => match rt.block_on(async {
                tokio::time::timeout(connect_timeout, config.connect(tls.clone())).await
            }) {
                Ok(Ok((client, connection))) => {
                    rt.spawn(connection);
                    client
                }
                Ok(Err(e)) => return Err(PgError::Driver(e)),
                Err(_) => return Err(timed_out()),
            },
            None => match rt.block_on(async {
                tokio::time::timeout(connect_timeout, config.connect(tokio_postgres::NoTls)).await
            }) {
                Ok(Ok((client, connection))) => {
                    rt.spawn(connection);
                    client
                }
                Ok(Err(e)) => return Err(PgError::Driver(e)),
                Err(_) => return Err(timed_out()),
            },
        };
        Ok(Client {
            rt,
            inner,
            timeout,
            timed_out: false,
            prepared: Default::default(),
            port: config.get_ports().first().copied().unwrap_or(5432),
        })
    }

    /// The [`Answer`] (every row, the one row, or the row if any) of `sql`, unnamed.
    pub(crate) fn query_as<T: Answer>(&mut self, sql: &str, params: Params<'_>) -> PgResult<T> {
        self.run("a statement", |c| T::unnamed(c, sql, params))
    }

    pub(crate) fn query_typed(&mut self, sql: &str, params: Params<'_>) -> PgResult<Vec<Row>> {
        self.query_as(sql, params)
    }

    pub(crate) fn query_typed_one(&mut self, sql: &str, params: Params<'_>) -> PgResult<Row> {
        self.query_as(sql, params)
    }

    pub(crate) fn execute_typed(&mut self, sql: &str, params: Params<'_>) -> PgResult<u64> {
        self.run("a statement", |c| c.execute_typed(sql, params))
    }

    /// `sql` as a named statement of this connection, prepared (one round trip) the first time
    /// slot `slot` is asked for, with the types of `params`.
    pub(crate) fn statement(
        &mut self,
        slot: usize,
        sql: &str,
        params: Params<'_>,
    ) -> PgResult<Statement> {
        if let Some(st) = &self.prepared[slot] {
            return Ok(st.clone());
        }
        let types: Vec<Type> = params.iter().map(|(_, t)| t.clone()).collect();
        let st = self.run("a statement's preparation", |c| {
            c.prepare_typed(sql, &types)
        })?;
        self.prepared[slot] = Some(st.clone());
        Ok(st)
    }

    /// The [`Answer`] of the prepared statement `st` (from slot `slot`) with `params`.
    pub(crate) fn query_prepared<T: Answer>(
        &mut self,
        slot: usize,
        st: &Statement,
        params: Params<'_>,
    ) -> PgResult<T> {
        let values = values(params);
        let done = self.run("a statement", |c| T::prepared(c, st, &values));
        self.forget_after_error(slot, done)
    }

    /// After any error the slot is prepared again next time: a server that does not know the
    /// statement (SQLSTATE 26000: the connection is not the session that prepared it, as
    /// behind a transaction pooler) ran nothing, and one whose plan no longer fits (SQLSTATE
    /// 0A000 after a schema change) needs a new one.
    fn forget_after_error<T>(&mut self, slot: usize, done: PgResult<T>) -> PgResult<T> {
        match done {
            Ok(v) => Ok(v),
            Err(e) => {
                self.prepared[slot] = None;
                Err(match e {
                    PgError::Driver(d)
                        if d.code() == Some(&SqlState::INVALID_SQL_STATEMENT_NAME) =>
                    {
                        PgError::NotPrepared(d)
                    }
                    other => other,
                })
            }
        }
    }

    /// One simple query (several statements in one round trip); `what` names it in a timeout.
    pub(crate) fn batch_execute(&mut self, what: &'static str, sql: &str) -> PgResult<()> {
        self.run(what, |c| c.batch_execute(sql))
    }

    /// Drive `work` on the connection's runtime for at most the bound. A wait that runs out
    /// abandons the connection for good: its reply may still be on its way.
    fn run<'c, T, F>(
        &'c mut self,
        what: &'static str,
        work: impl FnOnce(&'c tokio_postgres::Client) -> F,
    ) -> PgResult<T>
    where
        F: std::future::Future<Output = Result<T, tokio_postgres::Error>> + 'c,
    {
        let timed_out = PgError::TimedOut {
            what,
            after: self.timeout,
        };
        if self.timed_out {
            return Err(timed_out);
        }
        let Client {
            rt,
            inner,
            timeout,
            timed_out: abandoned,
            ..
        } = self;
        let work = work(inner);
        // The timer is made inside `block_on`: it needs the runtime's context.
        match rt.block_on(async { tokio::time::timeout(*timeout, work).await }) {
            Ok(done) => done.map_err(PgError::Driver),
            Err(_) => {
                *abandoned = true;
                Err(timed_out)
            }
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.timed_out || self.inner.is_closed()
    }

    /// Whether the connection is still open, once its I/O driver has looked at the socket
    /// (one poll, no round trip): a session the server ended while the connection sat idle
    /// (its goodbye, or the socket closed) shows here before anything is sent on it.
    pub(crate) fn still_open(&mut self) -> bool {
        if self.is_closed() {
            return false;
        }
        // A yield lets the runtime poll its I/O driver (with no wait), which wakes the
        // connection's task if its socket has news; a second yield lets that task run.
        self.rt.block_on(async {
            tokio::task::yield_now().await;
            tokio::task::yield_now().await;
        });
        !self.is_closed()
    }
}
