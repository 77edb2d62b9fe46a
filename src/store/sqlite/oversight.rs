//! The SQLite store's statements for oversight ([`crate::store::oversight`]): approval
//! requests and receipts, each write under `BEGIN IMMEDIATE`. A grant is used inside the
//! reservation's own transaction ([`consume`]).

use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{params_from_iter, Connection, Row};

use super::store::SqliteStore;
use crate::approval::{ActionRule, ApprovalRecord, ApprovalState, ApproverRecord};
use crate::env::{holder, now_micros};
use crate::error::{Error, Result};
use crate::planner;
use crate::receipt::Receipt;
use crate::record::Micros;
use crate::store::oversight::{rule_of, ApprovalFilter, At, OversightStore, OversightTx, Pick};
use crate::store::recovery::Commit;
use crate::store::rows::{
    self, Cells, Value, APPROVAL_COLUMNS, APPROVER_COLUMNS, RECEIPT_COLUMNS, RULE_COLUMNS,
};

impl Cells for Row<'_> {
    type Err = rusqlite::Error;
    fn text(&self, i: usize) -> rusqlite::Result<String> {
        self.get(i)
    }
    fn opt_text(&self, i: usize) -> rusqlite::Result<Option<String>> {
        self.get(i)
    }
    fn int(&self, i: usize) -> rusqlite::Result<i64> {
        self.get(i)
    }
    fn opt_int(&self, i: usize) -> rusqlite::Result<Option<i64>> {
        self.get(i)
    }
    fn unknown(&self, i: usize, what: String) -> rusqlite::Error {
        rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, what.into())
    }
}

impl rusqlite::ToSql for Value<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match *self {
            Value::Text(Some(s)) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
            Value::Int(Some(i)) => ToSqlOutput::Borrowed(ValueRef::Integer(i)),
            Value::Text(None) | Value::Int(None) => ToSqlOutput::Borrowed(ValueRef::Null),
        })
    }
}

/// An approval request's `INSERT` ([`rows::approval_insert`]'s values).
fn insert_approval() -> String {
    format!(
        "INSERT INTO ctrlrun_approvals ({APPROVAL_COLUMNS}, updated_at, last_event, written_by, \
         receipt_seq, receipt_prev, receipt_hash) VALUES \
         (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?18, ?19, ?20, ?15, ?16, \
         ?17, 1, NULL, \
         ctrlrun_receipt_hash('approval', ?4, ?1, 1, NULL, ?15, ?16, ?2, ?14, NULL, ?6, ?3, \
         ?1, ?11, ?17))"
    )
}

/// An approval request's compare-and-set ([`rows::approval_cas`]'s values).
const CAS_APPROVAL: &str = "UPDATE ctrlrun_approvals SET state = ?1, expires_at = ?2, \
     decided_at = ?3, decided_by = ?4, note = ?5, used_at = ?6, used_by = ?7, updated_at = ?10, \
     last_event = ?11, written_by = ?12, granted_by = ?13, receipt_seq = COALESCE(receipt_seq, 0) + 1, \
     receipt_prev = receipt_hash, receipt_hash = ctrlrun_receipt_hash('approval', effect_key, \
     request_id, COALESCE(receipt_seq, 0) + 1, receipt_hash, ?10, ?11, action, ?7, NULL, ?1, \
     args_digest, request_id, ?4, ?12) WHERE request_id = ?8 AND state = ?9";

/// Every row's chain head, as a receipt of the row (see [`crate::receipt::Verifier::finish`]).
const HEADS: &str = "SELECT 0, 'effect', effect_key, NULL, receipt_seq, receipt_prev, \
     receipt_hash, updated_at, last_event, action, action_id, attempt, state, args_digest, \
     approval_id, resolved_by, written_by FROM ctrlrun_effects WHERE receipt_hash IS NOT NULL \
     UNION ALL SELECT 0, 'approval', effect_key, request_id, receipt_seq, receipt_prev, \
     receipt_hash, updated_at, last_event, action, used_by, NULL, state, args_digest, \
     request_id, decided_by, written_by FROM ctrlrun_approvals WHERE receipt_hash IS NOT NULL";

/// [`HEADS`] of one key's rows (`?1`): its effect row by the primary key, its requests.
fn heads_of_key() -> String {
    HEADS
        .replace(
            "FROM ctrlrun_effects WHERE",
            "FROM ctrlrun_effects WHERE effect_key = ?1 AND",
        )
        .replace(
            "FROM ctrlrun_approvals WHERE",
            "FROM ctrlrun_approvals WHERE effect_key = ?1 AND",
        )
}

/// A transaction (or a read) on one SQLite connection.
pub(crate) struct SqliteTx<'t> {
    pub(crate) c: &'t Connection,
}

impl SqliteTx<'_> {
    fn all<T>(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
        read: impl FnMut(&Row<'_>) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<Vec<T>> {
        let mut stmt = self.c.prepare_cached(sql)?;
        let rows = stmt.query_map(params, read)?;
        rows.collect()
    }

    /// The rows (of `columns`) of `table` whose key column `key` is `only`, or all of them, in
    /// key order: the approver accounts and the policy's rules.
    fn keyed<T>(
        &self,
        (table, columns, key): (&str, &str, &str),
        only: Option<&str>,
        read: impl FnMut(&Row<'_>) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<Vec<T>> {
        let sql =
            format!("SELECT {columns} FROM {table} WHERE ?1 IS NULL OR {key} = ?1 ORDER BY {key}");
        self.all(&sql, [only], read)
    }
}

impl OversightTx for SqliteTx<'_> {
    type Err = rusqlite::Error;

    /// This host's clock: SQLite has no other.
    fn clock(&mut self, now: Option<Micros>) -> rusqlite::Result<Micros> {
        Ok(now.unwrap_or_else(now_micros))
    }

    fn approvals(&mut self, pick: Pick<'_>) -> rusqlite::Result<Vec<ApprovalRecord>> {
        let (tail, args) = pick.tail();
        let sql = format!("SELECT {APPROVAL_COLUMNS} FROM ctrlrun_approvals {tail}");
        self.all(&sql, params_from_iter(args), |r| rows::approval(r))
    }

    fn count_approvals(
        &mut self,
        filter: &ApprovalFilter<'_>,
        now: Micros,
        cap: u64,
    ) -> rusqlite::Result<u64> {
        let (sql, args) = filter.count("ctrlrun_approvals", now, cap);
        let n: i64 = self
            .c
            .prepare_cached(&sql)?
            .query_row(params_from_iter(args), |r| r.get(0))?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    fn insert_approval(&mut self, r: &ApprovalRecord, now: Micros) -> rusqlite::Result<u64> {
        let writer = holder();
        let granted = rows::granted_text(r);
        let values = rows::approval_insert(r, now, &writer, granted.as_deref());
        let n = self
            .c
            .prepare_cached(&insert_approval())?
            .execute(params_from_iter(values))?;
        Ok(n as u64)
    }

    fn cas_approval(
        &mut self,
        from: ApprovalState,
        r: &ApprovalRecord,
        now: Micros,
    ) -> rusqlite::Result<u64> {
        let writer = holder();
        let granted = rows::granted_text(r);
        let values = rows::approval_cas(from, r, now, &writer, granted.as_deref());
        let n = self
            .c
            .prepare_cached(CAS_APPROVAL)?
            .execute(params_from_iter(values))?;
        Ok(n as u64)
    }

    fn approvers(&mut self, name: Option<&str>) -> rusqlite::Result<Vec<ApproverRecord>> {
        let table = ("ctrlrun_approvers", APPROVER_COLUMNS, "name");
        self.keyed(table, name, |r| rows::approver(r))
    }

    fn put_approver(&mut self, r: &ApproverRecord, create: bool) -> rusqlite::Result<u64> {
        let n = if create {
            self.c
                .prepare_cached(
                    "INSERT INTO ctrlrun_approvers (name, secret_hash, created_at, updated_at) \
                     VALUES (?1, ?2, ?3, ?4) ON CONFLICT (name) DO NOTHING",
                )?
                .execute(rusqlite::params![
                    r.name,
                    r.secret_hash,
                    r.created_at,
                    r.updated_at
                ])?
        } else {
            self.c
                .prepare_cached(
                    "UPDATE ctrlrun_approvers SET secret_hash = ?2, updated_at = ?3 \
                     WHERE name = ?1",
                )?
                .execute(rusqlite::params![r.name, r.secret_hash, r.updated_at])?
        };
        Ok(n as u64)
    }

    fn delete_approver(&mut self, name: &str) -> rusqlite::Result<u64> {
        let n = self
            .c
            .prepare_cached("DELETE FROM ctrlrun_approvers WHERE name = ?1")?
            .execute([name])?;
        Ok(n as u64)
    }

    fn rules(&mut self, action: Option<&str>) -> rusqlite::Result<Vec<ActionRule>> {
        let table = ("ctrlrun_policy", RULE_COLUMNS, "action");
        self.keyed(table, action, |r| rows::rule(r))
    }

    fn replace_rules(&mut self, rules: &[ActionRule], now: Micros) -> rusqlite::Result<()> {
        self.c.execute("DELETE FROM ctrlrun_policy", [])?;
        let mut insert = self.c.prepare_cached(
            "INSERT INTO ctrlrun_policy (action, decision, approvals, updated_at) \
             VALUES (?1, ?2, ?3, ?4)",
        )?;
        for r in rules {
            insert.execute(rusqlite::params![
                r.action,
                r.decision.as_str(),
                r.approvals,
                now
            ])?;
        }
        Ok(())
    }

    /// Nothing to do: `BEGIN IMMEDIATE` holds the whole file.
    fn lock_request(&mut self, _id: &str) -> rusqlite::Result<()> {
        Ok(())
    }

    /// Nothing to do: `BEGIN IMMEDIATE` holds the whole file.
    fn hold_approvers(&mut self) -> rusqlite::Result<()> {
        Ok(())
    }

    /// Nothing to do: `BEGIN IMMEDIATE` holds the whole file.
    fn hold_effect(&mut self, _key: &str) -> rusqlite::Result<()> {
        Ok(())
    }

    fn latest_receipts(
        &mut self,
        key: Option<&str>,
        limit: Option<u64>,
    ) -> rusqlite::Result<Vec<Receipt>> {
        let limit = limit.map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
        let read = |r: &Row<'_>| rows::receipt(r);
        match key {
            Some(key) => self.all(
                &format!(
                    "SELECT {RECEIPT_COLUMNS} FROM ctrlrun_receipts WHERE effect_key = ?1 \
                     ORDER BY id DESC LIMIT ?2"
                ),
                rusqlite::params![key, limit],
                read,
            ),
            None => self.all(
                &format!(
                    "SELECT {RECEIPT_COLUMNS} FROM ctrlrun_receipts ORDER BY id DESC LIMIT ?1"
                ),
                [limit],
                read,
            ),
        }
    }

    fn receipt_heads(&mut self, key: Option<&str>) -> rusqlite::Result<Vec<Receipt>> {
        match key {
            None => self.all(HEADS, [], |r| rows::receipt(r)),
            Some(key) => self.all(&heads_of_key(), [key], |r| rows::receipt(r)),
        }
    }

    fn receipts_after(
        &mut self,
        after: Option<i64>,
        page: usize,
    ) -> rusqlite::Result<Vec<Receipt>> {
        let page = i64::try_from(page).unwrap_or(i64::MAX);
        self.all(
            &format!(
                "SELECT {RECEIPT_COLUMNS} FROM ctrlrun_receipts \
                 WHERE ?1 IS NULL OR id > ?1 ORDER BY id LIMIT ?2"
            ),
            rusqlite::params![after, page],
            |r| rows::receipt(r),
        )
    }
}

impl OversightStore for SqliteStore {
    type Err = rusqlite::Error;
    type Tx<'t> = SqliteTx<'t>;
    const VERIFY_STOPS_AT_BREAK: bool = false;

    fn write<T>(
        &self,
        (what, key): At<'_>,
        body: impl FnOnce(&mut SqliteTx<'_>) -> Result<T>,
    ) -> Result<Commit<T>> {
        let mut conn = self.conn()?;
        self.txn(&mut conn, what, key, |c| body(&mut SqliteTx { c }))
    }

    fn read<T>(
        &self,
        _at: At<'_>,
        mut body: impl FnMut(&mut SqliteTx<'_>) -> rusqlite::Result<T>,
    ) -> Result<rusqlite::Result<T>> {
        let conn = self.read_conn()?;
        Ok(body(&mut SqliteTx { c: &conn.conn }))
    }

    /// One read transaction: a snapshot of the file.
    fn snapshot<T>(
        &self,
        body: impl FnOnce(&mut SqliteTx<'_>) -> rusqlite::Result<T>,
    ) -> Result<rusqlite::Result<T>> {
        let mut conn = self.read_conn()?;
        let read = (|| {
            conn.conn.execute_batch("BEGIN")?;
            let found = body(&mut SqliteTx { c: &conn.conn });
            conn.conn.execute_batch("COMMIT")?;
            found
        })();
        if !conn.conn.is_autocommit() && conn.conn.execute_batch("ROLLBACK").is_err() {
            conn.broken = true;
        }
        Ok(read)
    }

    fn fresh<T>(
        &self,
        body: impl FnOnce(&mut SqliteTx<'_>) -> rusqlite::Result<T>,
    ) -> std::result::Result<T, String> {
        let c = self.fresh_conn().map_err(|e| e.to_string())?;
        body(&mut SqliteTx { c: &c }).map_err(|e| e.to_string())
    }

    fn write_failed(&self, what: &str, key: &str, e: rusqlite::Error) -> Error {
        self.failed(what, key, e)
    }

    fn read_failed(&self, what: &str, e: rusqlite::Error) -> Error {
        Error::Store(format!(
            "reading {what} from the SQLite store at {} failed: {e}",
            self.opts.path.display()
        ))
    }
}

/// Inside a reservation's transaction: the grant in force for `action`, `args_digest` and the
/// effect `key`, marked used by `action_id` (single use: the compare-and-set from `granted`
/// must change the row). [`Error::ApprovalNeeded`] when there is none; nothing is written then.
pub(super) fn consume(
    store: &SqliteStore,
    c: &Connection,
    (action, args_digest): (&str, &str),
    key: &str,
    action_id: &str,
    now: Micros,
) -> Result<ApprovalRecord> {
    let mut tx = SqliteTx { c };
    let fail = |e| store.failed("reserve_effect", key, e);
    let found = tx
        .approvals(Pick::Granted(action, args_digest, key))
        .map_err(fail)?;
    let used = planner::plan_consume(found.into_iter().next(), action, action_id, now)?;
    let rule = rule_of(&mut tx, action).map_err(fail)?;
    planner::check_grant(rule.as_ref(), &used)?;
    if tx
        .cas_approval(ApprovalState::Granted, &used, now)
        .map_err(fail)?
        != 1
    {
        return Err(store.failed("reserve_effect", key, "the grant changed under us"));
    }
    Ok(used)
}

/// Inside a reservation's transaction that uses no grant: refuse a key's new attempt of
/// `action` when the store's policy requires an approval or denies it.
pub(super) fn check_unapproved(
    store: &SqliteStore,
    c: &Connection,
    action: &str,
    key: &str,
) -> Result<()> {
    let rule =
        rule_of(&mut SqliteTx { c }, action).map_err(|e| store.failed("reserve_effect", key, e))?;
    if planner::needs_approval(rule.as_ref(), action, false)? {
        return Err(Error::ApprovalNeeded(format!(
            "the store's policy requires an approval of '{action}' for these arguments, and \
             none is in force"
        )));
    }
    Ok(())
}
