//! Which approval requests a listing selects ([`ApprovalFilter`]) and the statement's text for
//! both backends. Everything is filtered, ordered and cut in the database: a console with
//! thousands of requests reads one page, never the whole history.
//!
//! A request's state is read as of the store's clock: a `pending` or `granted` row past its
//! `expires_at` is `expired` (see [`crate::approval::ApprovalRecord::state_at`]), so a filter
//! on a state is a condition on `state` and `expires_at` together. Schema version 11's indexes
//! serve what a console asks for: `(state, requested_at, request_id)` one state's requests in
//! order; `(requested_at, request_id)` several states, newest first, the others filtered out as
//! the walk meets them; `(state, expires_at)` the live pending or granted requests (and their
//! count) among any number of abandoned ones, which stay stored `pending` until the same call
//! asks again; `(action, …)` and `(requested_by, …)` one action's or one asker's requests in
//! order, whatever the others hold.

use crate::approval::ApprovalState;
use crate::record::Micros;
use crate::store::rows::Value;

/// What [`crate::store::Approvals::list_approvals`] selects: every filter given must hold.
/// Requests come oldest first (request time, then id), or newest first; with `after`, those
/// that come after that point of the order; with `limit`, the first that many.
#[derive(Clone, Copy, Debug, Default)]
pub struct ApprovalFilter<'a> {
    /// Requests in any of these states as of the store's clock (every state when empty).
    pub states: &'a [ApprovalState],
    /// Of this action.
    pub action: Option<&'a str>,
    /// Whose effect key starts with this text.
    pub prefix: Option<&'a str>,
    /// Asked for by this principal.
    pub requested_by: Option<&'a str>,
    /// After this `(requested_at, request_id)` in the listing's order: the last request of
    /// the page before.
    pub after: Option<(Micros, &'a str)>,
    pub newest_first: bool,
    pub limit: Option<u64>,
}

/// The condition that selects requests in `state` as of the parameter `now` (`?N`), the
/// stored state read as `col` (see [`ApprovalFilter::filter`]).
fn state_clause(state: ApprovalState, now: &str, col: &str) -> String {
    match state {
        ApprovalState::Pending | ApprovalState::Granted => {
            format!("({col} = '{}' AND expires_at >= {now})", state.as_str())
        }
        ApprovalState::Expired => format!(
            "({col} = 'expired' OR ({col} IN ('pending', 'granted') AND expires_at < {now}))"
        ),
        ApprovalState::Denied | ApprovalState::Used => format!("{col} = '{}'", state.as_str()),
    }
}

impl<'a> ApprovalFilter<'a> {
    /// `WHERE …` (or nothing) and its parameters, numbered from `?1`.
    fn filter(&self, now: Micros) -> (String, Vec<Value<'a>>) {
        let mut clauses: Vec<String> = Vec::new();
        let mut params: Vec<Value<'a>> = Vec::new();
        let mut next = |p: Value<'a>| {
            params.push(p);
            format!("?{}", params.len())
        };
        if !self.states.is_empty() {
            let timed =
                |s: &ApprovalState| !matches!(s, ApprovalState::Denied | ApprovalState::Used);
            let at = match self.states.iter().any(timed) {
                true => next(Value::Int(Some(now))),
                false => String::new(), // no state compared with the time: no parameter
            };
            // One state's condition uses an index on the state. Several (or `expired`, two
            // in one) read the state as `state || ''`, which no index serves: else SQLite
            // merges one index range per state and sorts every row they hold for the ORDER
            // BY; this way both backends walk the time index in order and filter.
            let one = matches!(self.states, [s] if *s != ApprovalState::Expired);
            let col = if one { "state" } else { "(state || '')" };
            let any: Vec<String> = self
                .states
                .iter()
                .map(|s| state_clause(*s, &at, col))
                .collect();
            clauses.push(format!("({})", any.join(" OR ")));
        }
        if let Some(action) = self.action {
            clauses.push(format!("action = {}", next(Value::Text(Some(action)))));
        }
        if let Some(who) = self.requested_by {
            clauses.push(format!("requested_by = {}", next(Value::Text(Some(who)))));
        }
        if let Some(prefix) = self.prefix {
            // Characters on both backends (not bytes, not a pattern: `%` is plain text).
            let p = next(Value::Text(Some(prefix)));
            clauses.push(format!("substr(effect_key, 1, length({p})) = {p}"));
        }
        if let Some((at, id)) = self.after {
            let (at, id) = (next(Value::Int(Some(at))), next(Value::Text(Some(id))));
            let op = if self.newest_first { "<" } else { ">" };
            clauses.push(format!("(requested_at, request_id) {op} ({at}, {id})"));
        }
        let filter = if clauses.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", clauses.join(" AND "))
        };
        (filter, params)
    }

    /// What follows `FROM <table>` to list the requests, and its parameters.
    pub(crate) fn tail(&self, now: Micros) -> (String, Vec<Value<'a>>) {
        let (filter, mut params) = self.filter(now);
        let dir = if self.newest_first { " DESC" } else { "" };
        let mut tail = format!("{filter} ORDER BY requested_at{dir}, request_id{dir}");
        if let Some(limit) = self.limit {
            params.push(Value::Int(Some(i64::try_from(limit).unwrap_or(i64::MAX))));
            tail.push_str(&format!(" LIMIT ?{}", params.len()));
        }
        (tail, params)
    }

    /// The statement that counts the requests selected (at most `cap` of them: a count of a
    /// long history reads no further), and its parameters.
    pub(crate) fn count(&self, table: &str, now: Micros, cap: u64) -> (String, Vec<Value<'a>>) {
        let (filter, mut params) = self.filter(now);
        params.push(Value::Int(Some(i64::try_from(cap).unwrap_or(i64::MAX))));
        let sql = format!(
            "SELECT count(*) FROM (SELECT 1 FROM {table} {filter} LIMIT ?{}) AS counted",
            params.len()
        );
        (sql, params)
    }
}
