//! The text of the PostgreSQL store's statements, and schema version 7's functions that hold
//! the hot ones (see [`super::sql::Sql`] for why).

pub(super) use crate::store::rows::EFFECT_COLUMNS as COLUMNS;

/// The row's index: the SHA-256 of the key's UTF-8 bytes. The primary key is this digest, not
/// the key, because a B-tree entry cannot exceed ~2.7 KB and keys may be longer; every lookup
/// also compares the key itself, byte for byte. Functions are named with their schema, so a
/// `search_path` that a pooler carries over from another client cannot swap in its own.
fn digest(param: usize) -> String {
    format!("pg_catalog.sha256(pg_catalog.convert_to(${param}::text, 'UTF8'))")
}

/// Microseconds since the epoch: the caller's `now` when given, else the server's clock.
pub(super) fn now_expr(param: usize) -> String {
    format!(
        "COALESCE(${param}::int8, (extract(epoch FROM pg_catalog.clock_timestamp()) * 1000000)::int8)"
    )
}

/// `columns` (`a, b`) qualified with `alias` (`e.a, e.b`).
fn qualified(alias: &str, columns: &str) -> String {
    let each: Vec<String> = columns
        .split(", ")
        .map(|c| format!("{alias}.{c}"))
        .collect();
    each.join(", ")
}

/// The text of each statement, with its parameters as `$n`.
pub(super) struct Statements {
    pub(super) insert: String,
    pub(super) select: String,
    pub(super) reserve: String,
    /// The whole-row compare-and-set: the body of `ctrlrun_cas` and `ctrlrun_resolve`.
    pub(super) cas: String,
    pub(super) transition: String,
}

impl Statements {
    pub(super) fn new(schema: &str) -> Statements {
        let t = format!("\"{schema}\".ctrlrun_effects");
        let r = format!("\"{schema}\".ctrlrun_receipts");
        let seq = "COALESCE(receipt_seq, 0) + 1";
        // Each write sets the row's chain head from the head it replaces (in an UPDATE's SET
        // list a column is the old row's value). Fields in `Receipt::expected_hash`'s order.
        let head = |seq: &str, prev: &str, fields: [&str; 11]| {
            let seq_text = format!("({seq})::text");
            let mut all = vec!["'effect'", fields[0], "NULL", &seq_text, prev];
            all.extend(&fields[1..]);
            format!(
                "receipt_seq = {seq}, receipt_prev = {prev}, receipt_hash = {}",
                receipt_hash(&all)
            )
        };
        // The hot writes' head also says that the statement appends the receipt itself.
        let kept_head = |fields: [&str; 11]| {
            format!(
                "{}, receipt_kept = {seq}",
                head(seq, "receipt_hash", fields)
            )
        };
        // The hot writes append their own receipt in the statement (see `append_receipt`).
        let appended = |write: String, returning: &str| {
            format!(
                "WITH w AS ({write} RETURNING *), receipt AS ({}) SELECT {} FROM w",
                append_receipt(&r),
                returning
            )
        };
        let durable = format!("\"{schema}\".ctrlrun_durable");
        let insert_columns = format!(
            "key_digest, {COLUMNS}, last_event, written_by, receipt_seq, receipt_prev, \
             receipt_hash, receipt_kept"
        );
        // `{CLOCK}`: the time the function took once (`hot_clock`), for the row and its receipt.
        let values = format!(
            "{d}, $1, $2, $3, $4, {CLOCK}, {CLOCK}, {CLOCK} + $6::int8, $7, $8, $9, $10, $11, \
             $12, $13, $14, $15, $16, $17, 1, NULL, {hash}, 1",
            d = digest(1),
            hash = receipt_hash(&[
                "'effect'",
                "$1",
                "NULL",
                "'1'",
                "NULL",
                &format!("{CLOCK}::text"),
                "$16",
                "$11",
                "$3",
                "$4::text",
                "$2",
                "$13",
                "$15",
                "$9",
                "$17"
            ]),
        );
        let insert = |only_when: &str| {
            format!(
                "INSERT INTO {t} ({insert_columns}) SELECT {values}{only_when} \
                 ON CONFLICT (key_digest) DO NOTHING"
            )
        };
        let cols = qualified("w", COLUMNS);
        let inserted = format!("{cols}, NULL::int8, true");
        Statements {
            // The planner's row; a row already there wins (no row returned). Its times are
            // the server's clock when the function runs (or the caller's `now`), the lease the
            // planner's length from there: planned from a read made before the transaction, a
            // wait for a connection or a pooler must not eat into the holder's lease.
            insert: appended(insert(""), &cols),
            select: select(&t, 2, ""),
            // The reservation, one round trip: the planner's row inserted when the key has
            // none (the common case: one INSERT); else the key's row and the server's clock
            // (the statement's $5) for the planner, which refuses from it. An action the
            // store's policy does not simply allow is never inserted by the first INSERT: that
            // call goes the long way, the read, the policy's check (which refuses, or finds
            // the grant), then the INSERT; a row another writer inserted meanwhile is read.
            reserve: format!(
                "RETURN QUERY {fresh}; IF FOUND THEN RETURN; END IF; \
                 RETURN QUERY {found} WHERE e.effect_key IS NOT NULL; \
                 IF FOUND THEN RETURN; END IF; {policy}; RETURN QUERY {checked}; \
                 IF NOT FOUND THEN RETURN QUERY {found}; END IF",
                fresh = appended(
                    insert(&format!(
                        " WHERE NOT EXISTS (SELECT FROM \"{schema}\".ctrlrun_policy p \
                         WHERE p.action = $11 AND p.decision <> 'allow')"
                    )),
                    &inserted
                ),
                checked = appended(insert(""), &inserted),
                found = select(&t, 5, ", false"),
                policy = policy_check(schema, "$11, $1, $13, $15"),
            ),
            // [`crate::store::rows::effect_values`] of the row written ($1 to $16),
            // then the expected state, action id and attempt, the event and the writer.
            cas: format!(
                "UPDATE {t} SET state = $2, action_id = $3, attempt = $4, created_at = $5, \
                 updated_at = $6, lease_expires_at = $7, result = $8, error = $9, \
                 resolved_by = $10, attempt_token = $11, action = $12, holder = $13, \
                 args_digest = $14, arg_digests = $15, approval_id = $16, last_event = $20, \
                 written_by = $21, {head} FROM (SELECT {durable}()) durable(ok) \
                 WHERE key_digest = {d} AND effect_key = $1 AND state = $17 \
                 AND action_id = $18 AND attempt = $19",
                d = digest(1),
                head = head(
                    seq,
                    "receipt_hash",
                    [
                        "$1", "$6::text", "$20", "$12", "$3", "$4::text", "$2", "$14", "$16",
                        "$10", "$21"
                    ]
                )
            ),
            // The time is the function's clock, taken once: the row and its receipt agree.
            transition: appended(
                format!(
                    "UPDATE {t} SET state = $1, updated_at = {CLOCK}, \
                     lease_expires_at = CASE WHEN $3 THEN NULL ELSE lease_expires_at END, \
                     result = $4, error = $5, last_event = $10, written_by = $11, {head} \
                     WHERE key_digest = {d} AND effect_key = $6 AND action_id = $7 \
                     AND ($8::int8 IS NULL OR attempt = $8) AND state = ANY($2::text[])",
                    d = digest(6),
                    head = kept_head([
                        "effect_key",
                        &format!("{CLOCK}::text"),
                        "$10",
                        "action",
                        "action_id",
                        "attempt::text",
                        "$1",
                        "args_digest",
                        "approval_id",
                        "resolved_by",
                        "$11"
                    ])
                ),
                &cols,
            ),
        }
    }
}

/// The read of key `$1` and the clock (the caller's `now` in `$now`, else the server's), plus
/// the columns `extra`: a row of NULL columns when the key has no row.
fn select(t: &str, now: usize, extra: &str) -> String {
    format!(
        "SELECT {cols}, clock.n{extra} FROM (SELECT {now} AS n) clock \
         LEFT JOIN {t} e ON e.key_digest = {d} AND e.effect_key = $1",
        d = digest(1),
        cols = qualified("e", COLUMNS),
        now = now_expr(now)
    )
}

/// The PL/pgSQL variable of the hot write functions that holds their clock: the caller's `now`,
/// else the time the calling statement started (see [`hot_clock`]).
pub(super) const CLOCK: &str = "clock_at";

/// The hot write functions' first steps after their guard: the commit made durable (the body of
/// `ctrlrun_durable()`, run inline: a call of it costs a function call with its own settings),
/// and the clock taken from the parameter `now` (none: the server's).
pub(super) fn hot_clock(now: Option<usize>) -> String {
    let given = now.map_or("NULL".to_owned(), |n| format!("${n}"));
    format!(
        "{durable} {CLOCK} := COALESCE({given}::int8, \
         (extract(epoch FROM pg_catalog.statement_timestamp()) * 1000000)::int8); ",
        durable = DURABLE
    )
}

/// What `ctrlrun_durable()` does (see `functions::durable_function`): the transaction commits at
/// least as `synchronous_commit = on`, unless the session started with
/// `ctrlrun.commit_durability = server`, each setting first put back to the session's default.
pub(super) const DURABLE: &str = "SET LOCAL synchronous_commit TO DEFAULT; \
     SET LOCAL ctrlrun.commit_durability TO DEFAULT; \
     IF current_setting('ctrlrun.commit_durability', true) IS DISTINCT FROM 'server' \
     AND current_setting('synchronous_commit') NOT IN ('on', 'remote_apply') THEN \
     SET LOCAL synchronous_commit TO on; END IF;";

/// A receipt's hash as one SQL expression over `fields` (each a text expression or `NULL`):
/// the same digest as `ctrlrun_receipt_hash` and [`crate::receipt::hash_fields`] (each field's
/// UTF-8 length, `:` and the field, or `~` for NULL; SHA-256 in hex). Written out in the
/// statement because a call of that PL/pgSQL function costs each write a function call with
/// its own settings.
pub(super) fn receipt_hash(fields: &[&str]) -> String {
    let each: Vec<String> = fields
        .iter()
        .map(|f| {
            format!(
                "COALESCE(pg_catalog.octet_length(pg_catalog.convert_to(({f})::text, 'UTF8'))::text \
                 || ':' || ({f})::text, '~')"
            )
        })
        .collect();
    format!(
        "pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to({}, 'UTF8')), 'hex')",
        each.join(" || ")
    )
}

/// The receipt of the effect row a hot write just wrote (the CTE `w`), appended to `receipts` in
/// the same statement: what the `AFTER` trigger appends for any other write (schema version 12,
/// `schema::receipt_triggers`).
pub(super) fn append_receipt(receipts: &str) -> String {
    format!(
        "INSERT INTO {receipts} (key_digest, chain, effect_key, request_id, seq, prev_hash, hash, \
         at, kind, action, action_id, attempt, state, args_digest, approval_id, actor, writer) \
         SELECT w.key_digest, 'effect', w.effect_key, NULL, w.receipt_seq, w.receipt_prev, \
         w.receipt_hash, w.updated_at, w.last_event, w.action, w.action_id, w.attempt, w.state, \
         w.args_digest, w.approval_id, w.resolved_by, w.written_by FROM w"
    )
}

/// The columns of an effect row as the functions return them, and the functions' parameters
/// (in the order of the statements' `$n`).
pub(super) const ROW_TYPES: &str = "effect_key text, state text, action_id text, attempt int8, \
                         created_at int8, updated_at int8, lease_expires_at int8, result text, \
                         error text, resolved_by text, attempt_token text, action text, \
                         holder text, args_digest text, arg_digests text, approval_id text";
pub(super) const SELECT_PARAMS: &str = "text, int8";
pub(super) const INSERT_PARAMS: &str =
    "text, text, text, int8, int8, int8, text, text, text, text, text, text, text, text, text, \
     text, text";
pub(super) const TRANSITION_PARAMS: &str =
    "text, text[], bool, text, text, text, text, int8, int8, text, text";

/// The parameters of `ctrlrun_reserve_many`: per row the key, state, action id, lease length,
/// attempt token, action, holder, arguments' digest and per-argument digests; then the writer.
pub(super) const RESERVE_MANY_PARAMS: &str =
    "text[], text[], text[], int8[], text[], text[], text[], text[], text[], text";
/// The parameters of `ctrlrun_transition_many`: per row the state written, the states it may
/// start from (comma-separated), whether the lease ends, the result, the error, the key, the
/// action id, the attempt (NULL: any) and the event; then the writer.
pub(super) const TRANSITION_MANY_PARAMS: &str =
    "text[], text[], bool[], text[], text[], text[], text[], int8[], text[], text";

/// `SELECT * FROM s.name($1, …, $n)` for a function of `params`.
pub(super) fn call(schema: &str, name: &str, params: &str) -> String {
    let n = params.split(", ").count();
    let args: Vec<String> = (1..=n).map(|i| format!("${i}")).collect();
    format!("SELECT * FROM \"{schema}\".{name}({})", args.join(", "))
}

/// `PERFORM` of the store's policy check on `args` (action, effect key, arguments' digest,
/// approval id): a new attempt of an action the store's policy denies, or requires approval
/// of without a grant in force of enough approvers, is refused whatever the caller's own
/// policy said.
pub(super) fn policy_check(schema: &str, args: &str) -> String {
    format!("PERFORM \"{schema}\".ctrlrun_policy_check({args})")
}
