//! What a store URL says: the SQLite file and its settings, or the PostgreSQL server, schema,
//! pool, bound and TLS settings.

use std::path::PathBuf;
use std::time::Duration;

/// SQLite's `PRAGMA synchronous` level for the WAL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Synchronous {
    /// fsync the WAL on every commit: a committed reservation survives power loss (default).
    Full,
    /// fsync at checkpoints only: faster; the last commits can be lost on power loss.
    Normal,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SqliteOptions {
    pub path: PathBuf,
    pub synchronous: Synchronous,
    /// How long a writer waits for SQLite's write lock before the write fails.
    pub busy_timeout: Duration,
    /// The mode of a database file the store creates (`file_mode`, octal; default
    /// [`DEFAULT_FILE_MODE`]); a folder it creates gets it with a search bit wherever it has a
    /// read bit. The umask applies on top. Files and folders that exist keep theirs.
    pub file_mode: u32,
    /// Group commit (`group_commit`, default on): the reservations, and the outcomes, that
    /// one process makes at once share a transaction and its fsync (`store::sqlite::batches`).
    pub group_commit: bool,
    /// How long a call waits behind a write in flight before it goes alone
    /// (`group_commit_wait`, seconds; default 0.1).
    pub group_commit_wait: Duration,
}

/// How long a call waits behind a write in flight before it goes alone unless the URL says
/// otherwise (`group_commit_wait`): a write in flight that long waits for something other than
/// its commit (another transaction's row lock, a slow server), and the calls behind it must not
/// wait for that too. A batch's commit takes a few milliseconds.
pub const DEFAULT_GROUP_COMMIT_WAIT: Duration = Duration::from_millis(100);

/// `group_commit_wait=<seconds>`: from 0.001 to 60 (a wait past the URL's own bounds would
/// only hide a stuck write).
pub fn group_commit_wait(shown: &str, v: &str) -> crate::error::Result<Duration> {
    match v.parse::<f64>() {
        Ok(secs) if secs.is_finite() && (0.001..=60.0).contains(&secs) => {
            Ok(Duration::from_secs_f64(secs))
        }
        _ => Err(crate::error::Error::InvalidArgument(format!(
            "store URL {shown:?}: group_commit_wait must be a number of seconds from 0.001 to \
             60 (how long a call waits behind a write in flight before it goes alone), got {v:?}"
        ))),
    }
}

/// A new SQLite store file is its owner's only unless the URL sets `file_mode`.
pub const DEFAULT_FILE_MODE: u32 = 0o600;

#[derive(Clone, Debug, PartialEq)]
pub enum StoreUrl {
    Sqlite(SqliteOptions),
    Postgres(PostgresOptions),
}

/// What a PostgreSQL store URL says. `url` is the driver's connection URL: without our own
/// options (`schema`, `pool_size`, `timeout`, `prepared_statements`) and the TLS ones, which
/// `tls` holds.
#[derive(Clone, Debug, PartialEq)]
pub struct PostgresOptions {
    pub url: String,
    pub schema: String,
    /// At most this many connections per store (per process): `pool_size`, default 16.
    pub pool_size: usize,
    /// The bound on every exchange with the server (`timeout`, seconds; default 30).
    pub timeout: Duration,
    pub tls: PgTls,
    /// Send the hot statements as named ones prepared once per connection
    /// (`prepared_statements=on`; default off: every statement unnamed, safe behind any
    /// transaction pooler).
    pub prepared_statements: bool,
    /// Group commit (`group_commit`, default on): the reservations, and the outcomes, that
    /// one process makes at once share a round trip and a commit (`store::postgres::batches`).
    pub group_commit: bool,
    /// How long a call waits behind a write in flight before it goes alone
    /// (`group_commit_wait`, seconds; default 0.1).
    pub group_commit_wait: Duration,
    /// The risks the URL accepts by name (none unless it says so).
    pub risks: PgRisks,
}

/// Risks to the promise that a PostgreSQL URL may accept, each only by an option that names
/// what it costs; accepted, each is warned of at open (docs/postgres.md, "Durability and
/// replication").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PgRisks {
    /// `crash_may_lose_commits=accept`: commit as the server's `synchronous_commit` says, even
    /// `off` or `local`, which acknowledge a commit a crash can still lose. Otherwise every
    /// write commits at least as `on`.
    pub crash_may_lose_commits: bool,
    /// `failover_may_lose_commits=accept`: open a primary that streams to a standby
    /// asynchronously, which a failover can leave without the last acknowledged commits.
    /// Otherwise such a primary is refused at open.
    pub failover_may_lose_commits: bool,
}

pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// libpq's `sslmode`, as libpq means it (`allow` is refused: it tries plaintext first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    /// Plaintext only.
    Disable,
    /// TLS when the server offers it (no certificate check), else plaintext (the default).
    Prefer,
    /// TLS or nothing; the certificate is checked against `sslrootcert` only if one is given.
    Require,
    /// TLS, and the server's certificate chain must lead to a root in `sslrootcert`.
    VerifyCa,
    /// As `VerifyCa`, and the certificate must name the host connected to.
    VerifyFull,
}

/// The TLS settings of a PostgreSQL URL (libpq's names and meanings).
#[derive(Clone, Debug, PartialEq)]
pub struct PgTls {
    pub mode: SslMode,
    /// `sslrootcert`: PEM file of trusted roots; `None`: `~/.postgresql/root.crt` for the
    /// verify modes, as libpq does.
    pub root_cert: Option<PathBuf>,
    /// `sslcert` / `sslkey`: a client certificate and its key (PEM), for servers that ask.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

/// The bound on each exchange with a PostgreSQL server unless the URL sets `timeout`.
pub const DEFAULT_PG_TIMEOUT: Duration = Duration::from_secs(30);

/// Connections per PostgreSQL store unless the URL sets `pool_size`.
pub const DEFAULT_POOL_SIZE: usize = 16;
/// The largest `pool_size` accepted (a server's `max_connections` is far lower in practice).
pub const MAX_POOL_SIZE: usize = 1000;
