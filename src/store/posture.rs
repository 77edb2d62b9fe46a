//! What a store's set-up does to the promise, beyond its own writes (docs/postgres.md,
//! "Durability and replication"): whether a commit it acknowledges survives a crash, whether a
//! failover can lose one, and what sits between it and the database. Read once at open; shown
//! by `ctrlrun verify`, which fails on a line that fails.

/// How one line of the posture stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// The promise holds on this count.
    Pass,
    /// An acknowledged write can be lost this way (a risk the URL accepted by name).
    Fail,
    /// The store's credentials cannot see enough to tell.
    NotVisible,
    /// Worth knowing; neither keeps nor breaks the promise.
    Info,
}

impl Standing {
    pub fn as_str(self) -> &'static str {
        match self {
            Standing::Pass => "pass",
            Standing::Fail => "fail",
            Standing::NotVisible => "not visible",
            Standing::Info => "info",
        }
    }
}

/// One line of the posture: what was checked, how it stands, and what was seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostureLine {
    /// `durable commits`, `replication` or `pooler`.
    pub check: &'static str,
    pub standing: Standing,
    pub detail: String,
}

impl PostureLine {
    pub fn new(check: &'static str, standing: Standing, detail: impl Into<String>) -> Self {
        PostureLine {
            check,
            standing,
            detail: detail.into(),
        }
    }
}
