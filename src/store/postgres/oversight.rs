//! The PostgreSQL store's statements for oversight ([`crate::store::oversight`]): approval
//! requests and receipts. Times are the server's clock unless the caller gives `now`. A grant
//! is used inside the reservation's own transaction ([`grant_in_force`], [`mark_used`]).

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Row;

use super::client::{Client, PgError};
use super::sql::{counted, typed, Sql};
use super::store::{check_key, PostgresStore};
use crate::approval::{ActionRule, ApprovalRecord, ApprovalState, ApproverRecord};
use crate::env::holder;
use crate::error::{Error, Result};
use crate::planner::{self, Proposal};
use crate::receipt::Receipt;
use crate::record::Micros;
use crate::store::oversight::{rule_of, ApprovalFilter, At, OversightStore, OversightTx, Pick};
use crate::store::recovery::Commit;
use crate::store::rows::{
    self, Cells, APPROVAL_COLUMNS, APPROVER_COLUMNS, RECEIPT_COLUMNS, RULE_COLUMNS,
};

const CLOCK: &str = "SELECT COALESCE($1::int8, \
                     (extract(epoch FROM pg_catalog.clock_timestamp()) * 1000000)::int8)";

impl Cells for Row {
    type Err = Error;
    fn text(&self, i: usize) -> Result<String> {
        Ok(self.get(i))
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>> {
        Ok(self.get(i))
    }
    fn int(&self, i: usize) -> Result<i64> {
        Ok(self.get(i))
    }
    fn opt_int(&self, i: usize) -> Result<Option<i64>> {
        Ok(self.get(i))
    }
    fn unknown(&self, _i: usize, what: String) -> Error {
        Error::Store(format!("the store holds an {what}"))
    }
}

/// What failed in an oversight call: a statement, or a row that does not decode (an error of its
/// own, passed on as it is).
pub(crate) enum PgFault {
    Pg(PgError),
    Data(Error),
}

impl From<PgError> for PgFault {
    fn from(e: PgError) -> PgFault {
        PgFault::Pg(e)
    }
}

impl std::fmt::Display for PgFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PgFault::Pg(e) => f.write_str(&e.describe()),
            PgFault::Data(e) => e.fmt(f),
        }
    }
}

type Fallible<T> = std::result::Result<T, PgFault>;

fn decode<T>(rows: Vec<Row>, read: impl Fn(&Row) -> Result<T>) -> Fallible<Vec<T>> {
    rows.iter()
        .map(read)
        .collect::<Result<_>>()
        .map_err(PgFault::Data)
}

/// The rows (of `columns`) of `table` whose key column `key` is `only`, or all of them, in key
/// order: the approver accounts and the policy's rules.
fn keyed<T>(
    c: &mut Client,
    (table, columns, key): (&str, &str, &str),
    only: Option<&str>,
    read: impl Fn(&Row) -> Result<T>,
) -> Fallible<Vec<T>> {
    let sql = format!(
        "SELECT {columns} FROM {table} WHERE $1::text IS NULL OR {key} = $1 ORDER BY {key}"
    );
    decode(c.query_typed(&sql, &[(&only, Type::TEXT)])?, read)
}

/// A transaction (or a read) on one PostgreSQL connection.
pub(crate) struct PgTx<'t> {
    pub(super) c: &'t mut Client,
    pub(super) sql: &'t Sql,
}

impl OversightTx for PgTx<'_> {
    type Err = PgFault;

    /// The server's clock (or `now`).
    fn clock(&mut self, now: Option<Micros>) -> Fallible<Micros> {
        Ok(self.c.query_typed_one(CLOCK, &[(&now, Type::INT8)])?.get(0))
    }

    fn approvals(&mut self, pick: Pick<'_>) -> Fallible<Vec<ApprovalRecord>> {
        let (tail, args) = pick.tail();
        let sql = format!(
            "SELECT {APPROVAL_COLUMNS} FROM {} {}",
            self.sql.approvals,
            tail.replace('?', "$")
        );
        decode(self.c.query_typed(&sql, &typed(&args))?, rows::approval)
    }

    fn count_approvals(
        &mut self,
        filter: &ApprovalFilter<'_>,
        now: Micros,
        cap: u64,
    ) -> Fallible<u64> {
        let (sql, args) = filter.count(&self.sql.approvals, now, cap);
        let row = self
            .c
            .query_typed_one(&sql.replace('?', "$"), &typed(&args))?;
        Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
    }

    fn insert_approval(&mut self, r: &ApprovalRecord, now: Micros) -> Fallible<u64> {
        let writer = holder();
        let granted = rows::granted_text(r);
        let values = rows::approval_insert(r, now, &writer, granted.as_deref());
        Ok(counted(self.c, &self.sql.ask, &typed(&values))?)
    }

    /// Expiring a request or using a grant is the agent's step, a decision the approver's
    /// (each its own function: `duties`).
    fn cas_approval(
        &mut self,
        from: ApprovalState,
        r: &ApprovalRecord,
        now: Micros,
    ) -> Fallible<u64> {
        let writer = holder();
        let granted = rows::granted_text(r);
        let values = rows::approval_cas(from, r, now, &writer, granted.as_deref());
        let sql = match r.state {
            ApprovalState::Expired | ApprovalState::Used => &self.sql.settle_request,
            _ => &self.sql.decide,
        };
        Ok(counted(self.c, sql, &typed(&values))?)
    }

    fn rules(&mut self, action: Option<&str>) -> Fallible<Vec<ActionRule>> {
        let table = (self.sql.policy.as_str(), RULE_COLUMNS, "action");
        keyed(self.c, table, action, rows::rule)
    }

    fn replace_rules(&mut self, rules: &[ActionRule], now: Micros) -> Fallible<()> {
        let table = &self.sql.policy;
        self.c.execute_typed(&format!("DELETE FROM {table}"), &[])?;
        let insert = format!(
            "INSERT INTO {table} (action, decision, approvals, updated_at) VALUES ($1, $2, $3, $4)"
        );
        for r in rules {
            let decision = r.decision.as_str();
            self.c.execute_typed(
                &insert,
                &[
                    (&r.action, Type::TEXT),
                    (&decision, Type::TEXT),
                    (&r.approvals, Type::INT8),
                    (&now, Type::INT8),
                ],
            )?;
        }
        Ok(())
    }

    /// `FOR UPDATE` on the request until the transaction ends: decisions on one request are
    /// made one after another, each reading the names the one before it recorded.
    fn lock_request(&mut self, id: &str) -> Fallible<()> {
        self.c
            .query_typed(&self.sql.lock_request, &[(&id, Type::TEXT)])?;
        Ok(())
    }

    fn approvers(&mut self, name: Option<&str>) -> Fallible<Vec<ApproverRecord>> {
        let table = (self.sql.approvers.as_str(), APPROVER_COLUMNS, "name");
        keyed(self.c, table, name, rows::approver)
    }

    fn put_approver(&mut self, r: &ApproverRecord, create: bool) -> Fallible<u64> {
        let table = &self.sql.approvers;
        if create {
            let sql = format!(
                "INSERT INTO {table} (name, secret_hash, created_at, updated_at) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (name) DO NOTHING"
            );
            let params: [(&(dyn ToSql + Sync), Type); 4] = [
                (&r.name, Type::TEXT),
                (&r.secret_hash, Type::TEXT),
                (&r.created_at, Type::INT8),
                (&r.updated_at, Type::INT8),
            ];
            return Ok(self.c.execute_typed(&sql, &params)?);
        }
        let sql = format!("UPDATE {table} SET secret_hash = $2, updated_at = $3 WHERE name = $1");
        let params: [(&(dyn ToSql + Sync), Type); 3] = [
            (&r.name, Type::TEXT),
            (&r.secret_hash, Type::TEXT),
            (&r.updated_at, Type::INT8),
        ];
        Ok(self.c.execute_typed(&sql, &params)?)
    }

    fn delete_approver(&mut self, name: &str) -> Fallible<u64> {
        let sql = format!("DELETE FROM {} WHERE name = $1", self.sql.approvers);
        Ok(self.c.execute_typed(&sql, &[(&name, Type::TEXT)])?)
    }

    /// `SHARE ROW EXCLUSIVE` on the accounts' table: it waits for, and holds off, every
    /// other write of an account (their `INSERT`, `UPDATE` and `DELETE` take `ROW EXCLUSIVE`,
    /// and this mode conflicts with itself), never a read (a sign-in reads on). Only adding an
    /// account takes it: a rare write of a few rows, committed at once.
    fn hold_approvers(&mut self) -> Fallible<()> {
        let sql = format!(
            "LOCK TABLE {} IN SHARE ROW EXCLUSIVE MODE",
            self.sql.approvers
        );
        self.c.execute_typed(&sql, &[])?;
        Ok(())
    }

    /// `FOR KEY SHARE` on the key's effect row: a prune that locked it first removes it before
    /// the request lands; one that comes after waits, then sees the request and keeps the row.
    fn hold_effect(&mut self, key: &str) -> Fallible<()> {
        self.c
            .query_typed(&self.sql.hold_effect, &[(&key, Type::TEXT)])?;
        Ok(())
    }

    fn latest_receipts(&mut self, key: Option<&str>, limit: Option<u64>) -> Fallible<Vec<Receipt>> {
        let limit = limit.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        let sql = format!(
            "SELECT {RECEIPT_COLUMNS} FROM {r} WHERE $1::text IS NULL OR \
             (key_digest = pg_catalog.sha256(pg_catalog.convert_to($1::text, 'UTF8')) \
             AND effect_key = $1) ORDER BY id DESC LIMIT $2",
            r = self.sql.receipts
        );
        let found = self
            .c
            .query_typed(&sql, &[(&key, Type::TEXT), (&limit, Type::INT8)])?;
        decode(found, rows::receipt)
    }

    fn receipt_heads(&mut self, key: Option<&str>) -> Fallible<Vec<Receipt>> {
        // One key's rows: its effect row by the key's digest (the primary key), its requests.
        let (of_effect, of_request) = match key {
            None => ("", ""),
            Some(_) => (
                "key_digest = pg_catalog.sha256(pg_catalog.convert_to($1::text, 'UTF8')) AND ",
                "effect_key = $1::text AND ",
            ),
        };
        let sql = format!(
            "SELECT 0::int8, 'effect', effect_key, NULL::text, receipt_seq, receipt_prev, \
             receipt_hash, updated_at, last_event, action, action_id, attempt, state, \
             args_digest, approval_id, resolved_by, written_by \
             FROM {e} WHERE {of_effect}receipt_hash IS NOT NULL UNION ALL \
             SELECT 0::int8, 'approval', effect_key, request_id, receipt_seq, receipt_prev, \
             receipt_hash, updated_at, last_event, action, used_by, NULL::int8, state, \
             args_digest, request_id, decided_by, written_by \
             FROM {a} WHERE {of_request}receipt_hash IS NOT NULL",
            e = self.sql.effects,
            a = self.sql.approvals
        );
        let rows = match key {
            None => self.c.query_typed(&sql, &[])?,
            Some(k) => self.c.query_typed(&sql, &[(&k, Type::TEXT)])?,
        };
        decode(rows, rows::receipt)
    }

    fn receipts_after(&mut self, after: Option<i64>, page: usize) -> Fallible<Vec<Receipt>> {
        let sql = format!(
            "SELECT {RECEIPT_COLUMNS} FROM {r} WHERE $1::int8 IS NULL OR id > $1 \
             ORDER BY id LIMIT {page}",
            r = self.sql.receipts
        );
        decode(self.c.query_typed(&sql, &[(&after, Type::INT8)])?, |r| {
            rows::receipt(r)
        })
    }
}

impl OversightStore for PostgresStore {
    type Err = PgFault;
    type Tx<'t> = PgTx<'t>;
    const VERIFY_STOPS_AT_BREAK: bool = true;

    fn check_text(&self, text: &str) -> Result<()> {
        check_key(text)
    }

    fn write<T>(
        &self,
        (what, key): At<'_>,
        body: impl FnOnce(&mut PgTx<'_>) -> Result<T>,
    ) -> Result<Commit<T>> {
        self.txn(what, key, |c, sql| body(&mut PgTx { c, sql }))
    }

    fn read<T>(
        &self,
        (what, key): At<'_>,
        mut body: impl FnMut(&mut PgTx<'_>) -> Fallible<T>,
    ) -> Result<Fallible<T>> {
        let mut data = None;
        let found =
            PostgresStore::read(self, what, key, |c, sql| match body(&mut PgTx { c, sql }) {
                Ok(v) => Ok(Some(v)),
                Err(PgFault::Pg(e)) => Err(e),
                Err(PgFault::Data(e)) => {
                    data = Some(e);
                    Ok(None)
                }
            })?;
        Ok(match (found, data) {
            (Ok(Some(v)), _) => Ok(v),
            (Err(e), _) => Err(PgFault::Pg(e)),
            (Ok(None), Some(e)) => Err(PgFault::Data(e)),
            (Ok(None), None) => unreachable!("a read that found nothing says why"),
        })
    }

    /// One `REPEATABLE READ READ ONLY` transaction.
    fn snapshot<T>(&self, body: impl FnOnce(&mut PgTx<'_>) -> Fallible<T>) -> Result<Fallible<T>> {
        let mut conn = self.conn("verify_receipts", "*")?;
        let c = &mut conn.client;
        let found = c
            .batch_execute(
                "START TRANSACTION",
                "START TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY",
            )
            .map_err(PgFault::Pg)
            .and_then(|()| body(&mut PgTx { c, sql: &self.sql }))
            .and_then(|v| Ok(c.batch_execute("COMMIT", "COMMIT").map(|()| v)?));
        if found.is_err() {
            conn.broken = true; // it may be left inside the transaction
        }
        Ok(found)
    }

    fn fresh<T>(
        &self,
        body: impl FnOnce(&mut PgTx<'_>) -> Fallible<T>,
    ) -> std::result::Result<T, String> {
        let mut c = self.fresh.connect_client().map_err(|e| e.describe())?;
        body(&mut PgTx {
            c: &mut c,
            sql: &self.sql,
        })
        .map_err(|e| e.to_string())
    }

    fn write_failed(&self, what: &str, key: &str, e: PgFault) -> Error {
        match e {
            PgFault::Pg(e) => self.failed(what, key, &e),
            PgFault::Data(e) => e,
        }
    }

    fn read_failed(&self, what: &str, e: PgFault) -> Error {
        match e {
            PgFault::Pg(e) => self
                .denied((what, &format!("reading {what}")), &e)
                .unwrap_or_else(|| {
                    Error::Store(format!(
                        "reading {what} from the PostgreSQL store {} failed: {}",
                        self.description,
                        e.describe()
                    ))
                }),
            PgFault::Data(e) => e,
        }
    }
}

impl PostgresStore {
    /// The server's clock (or `now`).
    pub(super) fn clock(&self, c: &mut Client, now: Option<Micros>) -> Result<Micros, PgError> {
        Ok(c.query_typed_one(CLOCK, &[(&now, Type::INT8)])?.get(0))
    }
}

/// Inside a reservation's transaction: the grant in force for the proposal's action and
/// arguments, planned as used by its attempt (written by [`mark_used`] after the reservation's
/// row). [`Error::ApprovalNeeded`] when there is none.
pub(super) fn grant_in_force(
    store: &PostgresStore,
    c: &mut Client,
    p: &Proposal<'_>,
    now: Micros,
) -> Result<ApprovalRecord> {
    let (Some(action), Some((digest, _))) = (p.action, p.args) else {
        return Err(Error::InvalidArgument(
            "an action that needs approval is reserved with its action name and the digest of \
             its arguments"
                .into(),
        ));
    };
    let mut tx = PgTx { c, sql: &store.sql };
    let found = tx
        .approvals(Pick::Granted(action, digest, p.key))
        .map_err(|e| store.write_failed("reserve_effect", p.key, e))?;
    let used = planner::plan_consume(found.into_iter().next(), action, p.action_id, now)?;
    let rule =
        rule_of(&mut tx, action).map_err(|e| store.write_failed("reserve_effect", p.key, e))?;
    planner::check_grant(rule.as_ref(), &used)?;
    Ok(used)
}

/// Mark the grant `used` (a compare-and-set from `granted`: single use). Another call that
/// used it first makes this one [`Error::ApprovalNeeded`], and its transaction rolls back.
pub(super) fn mark_used(
    store: &PostgresStore,
    c: &mut Client,
    key: &str,
    used: &ApprovalRecord,
    now: Micros,
) -> Result<()> {
    let mut tx = PgTx { c, sql: &store.sql };
    let n = tx
        .cas_approval(ApprovalState::Granted, used, now)
        .map_err(|e| store.write_failed("reserve_effect", key, e))?;
    if n != 1 {
        return Err(Error::ApprovalNeeded(format!(
            "the approval of '{}' for these arguments was used by another call",
            used.action
        )));
    }
    Ok(())
}
