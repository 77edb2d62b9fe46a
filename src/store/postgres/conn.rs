//! One pooled connection, how it is opened, and how the driver's errors are classified.

use std::str::FromStr;
use std::time::Duration;

use tokio_postgres::error::SqlState;
use tokio_postgres::Config;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::client::{Client, PgError, PgResult};
use super::hosts::one_per_host;
use crate::error::{Error, Result};
use crate::url::{PgTls, SslMode};

/// One pooled connection. It holds no session setting, and no prepared statement unless the
/// URL sets `prepared_statements=on` (see `sql.rs`).
pub struct Conn {
    pub(super) client: Client,
    /// Set when the server ended this session; the pool then discards the connection.
    pub(super) broken: bool,
    /// Set once the connection has served a call. Only such a connection may have died idle in
    /// the pool; one opened for this very call that fails says the server (or the pooler) is
    /// failing now, and the call stops instead of opening another.
    pub(super) used: bool,
}

/// An open transaction on a pooled connection. Dropped without [`Txn::commit`] it rolls back;
/// a rollback that fails marks the connection broken, so the pool never lends it out again
/// mid-transaction.
pub(super) struct Txn<'a> {
    conn: &'a mut Conn,
    open: bool,
}

impl<'a> Txn<'a> {
    /// `begin` is how the transaction starts ([`super::sql::Sql::begin`]).
    pub(super) fn begin(conn: &'a mut Conn, begin: &str) -> PgResult<Txn<'a>> {
        if let Err(e) = conn.client.batch_execute("START TRANSACTION", begin) {
            // Whatever part of it ran, the session may be left inside a transaction: never
            // lend this connection out again.
            conn.broken = true;
            return Err(e);
        }
        conn.used = true;
        Ok(Txn { conn, open: true })
    }

    pub(super) fn client(&mut self) -> &mut Client {
        &mut self.conn.client
    }

    pub(super) fn commit(mut self) -> PgResult<()> {
        self.open = false;
        let committed = self.conn.client.batch_execute("COMMIT", "COMMIT");
        if committed.is_err() {
            self.conn.broken = true; // its state is unknown: never lend it out again
        }
        committed
    }
}

impl Drop for Txn<'_> {
    fn drop(&mut self) {
        if self.open
            && self
                .conn
                .client
                .batch_execute("ROLLBACK", "ROLLBACK")
                .is_err()
        {
            self.conn.broken = true;
        }
    }
}

#[derive(Clone)]
pub(crate) struct Manager {
    /// The URL's settings (messages describe the store from them).
    pub(super) config: Config,
    /// The same, one per host, in the order to try them.
    pub(super) hosts: Vec<Config>,
    /// `None` for `sslmode=disable` (no TLS connector is consulted at all).
    pub(super) tls: Option<MakeRustlsConnect>,
    /// Bounds a new connection's start-up (libpq's `connect_timeout`, default 10 s).
    pub(super) connect_timeout: Duration,
    /// Bounds every later exchange (our `timeout`, default 30 s).
    pub(super) timeout: Duration,
}

impl Manager {
    /// How connections to the URL's servers are made: the driver's settings with our
    /// defaults (`connect_timeout` 10 s, `application_name` ctrlrun, TCP keepalives), the TLS
    /// connector, and the bound on every exchange.
    pub(crate) fn for_url(url: &str, timeout: Duration, tls: &PgTls) -> Result<Manager> {
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
        let unix_only = !hosts.is_empty() && hosts.iter().all(super::hosts::is_socket);
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
            _ => Some(super::tls::connector(tls)?),
        };
        Ok(Manager {
            tls: connector,
            hosts: one_per_host(&config),
            config,
            connect_timeout,
            timeout,
        })
    }

    /// Every session starts with `ctrlrun.commit_durability = server`, which makes
    /// `ctrlrun_durable()` leave each write's commit as the server's `synchronous_commit` says
    /// (`crash_may_lose_commits=accept`). A start-up option, not a `SET`: `ctrlrun_durable()`
    /// reads the session's default, so no `SET` another client leaves on a pooler's server
    /// connection can weaken a commit.
    pub(super) fn commit_as_the_server_says(&mut self) {
        let mut options = self.config.get_options().unwrap_or("").to_owned();
        options.push_str(" -c ctrlrun.commit_durability=server");
        self.config.options(options.trim_start());
        self.hosts = one_per_host(&self.config);
    }

    /// A new connection, not pooled (the store's pool, and the fresh one a re-read needs).
    pub(super) fn connect_client(&self) -> PgResult<Client> {
        Client::connect(
            &self.hosts,
            self.tls.as_ref(),
            self.connect_timeout,
            self.timeout,
        )
    }

    fn connect_conn(&self) -> PgResult<Conn> {
        Ok(Conn {
            client: self.connect_client()?,
            broken: false,
            used: false,
        })
    }
}

impl crate::store::pool::Manage for Manager {
    type Conn = Conn;
    type Error = String;

    fn connect(&self) -> std::result::Result<Conn, String> {
        self.connect_conn().map_err(|e| e.describe())
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.broken || conn.client.is_closed()
    }
}

pub(super) fn is_serialization(e: &PgError) -> bool {
    matches!(
        e.code(),
        Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED
    )
}

/// PgBouncer's answers (SQLSTATE 08P01, then it closes the connection) for a query it never
/// gave to a server: no server connection came free within `query_wait_timeout`, or logging in
/// to the server keeps failing. Its other answers of that kind (`server conn crashed?`) may
/// follow a commit and stay unknown.
/// (Matched by prefix: since PgBouncer 1.24 the login message carries the cached error.)
const POOLER_NEVER_SENT: [&str; 2] = ["query_wait_timeout", "server login has been failing"];

/// Whether a statement that commits by itself surely did not commit: the server answered it
/// with an error of severity `ERROR`, which rolls its transaction back, or the pooler said it
/// never sent it ([`POOLER_NEVER_SENT`]). Anything else leaves
/// it unknown, as a lost `COMMIT` is: the connection lost or the wait run out after it was
/// sent, or a `FATAL` (a session terminated while its committed transaction waited for a
/// synchronous standby gets one after the commit).
pub(super) fn rolled_back(e: &PgError) -> bool {
    use tokio_postgres::error::Severity;
    match e {
        PgError::NotPrepared(_) => true,
        PgError::Driver(d) => d.as_db_error().is_some_and(|db| {
            db.parsed_severity() == Some(Severity::Error)
                || (*db.code() == SqlState::PROTOCOL_VIOLATION
                    && POOLER_NEVER_SENT
                        .iter()
                        .any(|m| db.message().starts_with(m)))
        }),
        _ => false,
    }
}

/// The server ended the session (an administrator, a restart, a crash), the socket is gone, or
/// a wait ran out and the connection was abandoned. The client may not have noticed the closed
/// socket yet when the server's goodbye arrives as the answer to `BEGIN`, so
/// `Client::is_closed` alone is not enough.
pub(super) fn is_session_gone(e: &PgError) -> bool {
    e.is_closed()
        || matches!(
            e.code(),
            Some(c) if *c == SqlState::ADMIN_SHUTDOWN
                || *c == SqlState::CRASH_SHUTDOWN
                || *c == SqlState::CANNOT_CONNECT_NOW
                || c.code().starts_with("08")
        )
}

/// `postgresql://user@host:port,host2:port2/db?schema=…` for messages (never a password).
pub(super) fn describe(config: &Config, schema: &str) -> String {
    let user = config.get_user().unwrap_or("");
    let ports = config.get_ports();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let name = super::hosts::host_name(host);
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            format!("{name}:{port}")
        })
        .collect();
    let hosts = if hosts.is_empty() {
        "localhost:5432".to_owned()
    } else {
        hosts.join(",")
    };
    let db = config.get_dbname().unwrap_or(user);
    // No user named (libpq then uses the OS user): no `@` either.
    let user = if user.is_empty() {
        String::new()
    } else {
        format!("{user}@")
    };
    format!("postgresql://{user}{hosts}/{db}?schema={schema}")
}

/// One connection outside any store's pool, for an operator's command (`doing`, for the
/// messages) on the schema `schema`: the client, and how a failure of it reads.
pub(super) fn admin_client(
    target: &Target,
    doing: &str,
) -> Result<(Client, impl Fn(PgError) -> Error)> {
    let manager = Manager::for_url(&target.url, target.timeout, &target.tls)?;
    let description = describe(&manager.config, &target.schema);
    let doing = doing.to_owned();
    let fail = move |e: PgError| {
        Error::Store(format!(
            "cannot {doing} of the PostgreSQL store {description}: {}",
            e.describe()
        ))
    };
    let client = manager.connect_client().map_err(&fail)?;
    Ok((client, fail))
}

/// What an operator's command needs of a PostgreSQL store URL: the server's URL, the schema,
/// the bound on every wait and the TLS settings.
pub(super) struct Target {
    pub(super) url: String,
    pub(super) schema: String,
    pub(super) timeout: Duration,
    pub(super) tls: PgTls,
}

/// The [`Target`] of the store `url`; a URL of another store is `InvalidArgument` with
/// `not_postgres` (the command's own words).
pub(super) fn target(url: &str, not_postgres: &str) -> Result<Target> {
    match crate::url::parse(url)? {
        crate::url::StoreUrl::Postgres(o) => Ok(Target {
            url: o.url,
            schema: o.schema,
            timeout: o.timeout,
            tls: o.tls,
        }),
        _ => Err(Error::InvalidArgument(not_postgres.to_owned())),
    }
}
