//! Every function of the store's schema, as this build writes them: the hot statements'
//! (schema version 7), the oversight writes' and the store policy's check (version 9). The
//! writes are `SECURITY DEFINER`, each guarded by its duty's rule ([`super::duties`]); their
//! statements' text is in [`super::statements`].

use super::duties::{
    self, reserve_many_guard, transition_many_guard, ASK_PARAMS, CAS_PARAMS, DEFINER,
    REQUEST_CAS_PARAMS,
};
use super::statements::{
    append_receipt, hot_clock, receipt_hash, Statements, CLOCK, COLUMNS, DURABLE, INSERT_PARAMS,
    RESERVE_MANY_PARAMS, ROW_TYPES, SELECT_PARAMS, TRANSITION_MANY_PARAMS, TRANSITION_PARAMS,
};

/// Every function of the store's schema in its current form, and `EXECUTE` on each
/// `SECURITY DEFINER` one revoked from `PUBLIC` (the owner keeps it; `ctrlrun store roles`,
/// [`super::roles`], gives each to its duty). Every migration ends with this, so a store at
/// the current version always has them as this build writes them.
pub(super) fn all_functions(schema: &str) -> String {
    let mut sql = durable_function(schema);
    sql.push_str(&policy_check_function(schema));
    sql.push_str(&hot_functions(schema));
    sql.push_str(&oversight_functions(schema));
    sql.push_str(&batch_functions(schema));
    for (name, params, _) in DEFINER {
        sql.push_str(&format!(
            "REVOKE ALL ON FUNCTION \"{schema}\".{name}({params}) FROM PUBLIC;\n"
        ));
    }
    sql
}

/// The function `name` of the store's schema: `params` in, `returns` out, `body` run by
/// PL/pgSQL as the function's owner when `definer`.
fn function(
    schema: &str,
    (name, params, returns): (&str, &str, &str),
    body: &str,
    definer: bool,
) -> String {
    let security = if definer { "SECURITY DEFINER " } else { "" };
    format!(
        "CREATE OR REPLACE FUNCTION \"{schema}\".{name}({params}) RETURNS {returns} \
         LANGUAGE plpgsql VOLATILE {security}\
         SET search_path = pg_catalog, pg_temp \
         SET plan_cache_mode = force_generic_plan AS $fn$ \
         {body} $fn$;\n"
    )
}

/// `ctrlrun_durable()`, called by every write (in its statement, or at the start of its
/// transaction): the transaction commits at least as `synchronous_commit = on` (flushed here,
/// and on the synchronous standbys when there are any), `remote_apply` where that is the
/// session's default, whatever the server, database, role or URL set (schema version 10).
/// Only a session that started with `ctrlrun.commit_durability = server` (the URL's
/// `crash_may_lose_commits=accept`, see [`super::conn::Manager`]) commits as the server says.
/// Both settings are first put back to the session's defaults, so a `SET` another client left
/// on a pooler's server connection counts for neither. `SET LOCAL` in a function lasts to the
/// end of the calling transaction, so it covers that commit and nothing after it.
fn durable_function(schema: &str) -> String {
    format!(
        "CREATE OR REPLACE FUNCTION \"{schema}\".ctrlrun_durable() RETURNS boolean \
         LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $fn$ \
         BEGIN {DURABLE} RETURN true; END $fn$;\n"
    )
}

/// `BEGIN <statement>; RETURN the row count; END`, preceded by `guard`.
fn counted(guard: &str, statement: &str) -> String {
    format!(
        "DECLARE n int8; BEGIN {guard}; {statement}; GET DIAGNOSTICS n = ROW_COUNT; RETURN n; END"
    )
}

/// The function behind [`super::statements::policy_check`] (run as the writing function's
/// owner). A grant counts when it is in force by the server's clock, has as many distinct
/// names as the rule requires, and no row of its key carries it already: a grant the agent
/// never marked used still pays for one attempt only.
fn policy_check_function(schema: &str) -> String {
    let deny = duties::refuse_with(
        duties::POLICY_DENIES,
        "action % is denied by the store''s policy (ctrlrun policy apply); nothing was \
         reserved or run",
        ", $1",
    );
    let need = duties::refuse_with(
        duties::POLICY_NEEDS_GRANT,
        "the store''s policy requires % approver(s) of % for these arguments, and no grant \
         of as many is in force",
        ", k, $1",
    );
    let body = format!(
        "DECLARE d text; k int8; \
         BEGIN \
         IF $1 IS NULL THEN RETURN true; END IF; \
         SELECT decision, approvals INTO d, k FROM \"{schema}\".ctrlrun_policy WHERE action = $1; \
         IF NOT FOUND OR d = 'allow' THEN RETURN true; END IF; \
         IF d = 'deny' THEN {deny}; END IF; \
         IF NOT EXISTS (SELECT 1 FROM \"{schema}\".ctrlrun_approvals a WHERE a.request_id = $4 \
         AND a.state = 'granted' AND a.action = $1 AND a.effect_key = $2 \
         AND a.args_digest = $3 \
         AND a.expires_at >= (extract(epoch FROM pg_catalog.clock_timestamp()) * 1000000)::int8 \
         AND (SELECT count(DISTINCT g) FROM pg_catalog.unnest(pg_catalog.string_to_array( \
             a.granted_by, E'\\n')) g WHERE g <> '') >= k \
         AND NOT EXISTS (SELECT 1 FROM \"{schema}\".ctrlrun_effects e \
             WHERE e.key_digest = pg_catalog.sha256(pg_catalog.convert_to($2, 'UTF8')) \
             AND e.effect_key = $2 AND e.approval_id = $4)) \
         THEN {need}; END IF; \
         RETURN true; END"
    );
    function(
        schema,
        ("ctrlrun_policy_check", "text, text, text, text", "boolean"),
        &body,
        false,
    )
}

/// The hot functions: the read, the reservation's `INSERT` and the outcome's `UPDATE`, each
/// the statement it replaces, run by PL/pgSQL (schema version 7; see [`super::sql::Sql`]).
/// Their result columns are named `r_*` so that none shadows a table column in the statement.
/// Like the other functions of the schema they fix their `search_path`: a pooler's server
/// connection may carry another client's. They also force the generic plan from the first
/// call: left to choose, the server plans each statement five times more per session before it
/// settles on the generic plan (`pg_stat_statements`: 6 plans against 1 in 600 calls).
///
/// Since schema version 12 the writes spend what the server does per call on the write alone
/// (`bench/README.md`, issue 51): each appends its receipt in its own statement instead of by
/// the trigger (a PL/pgSQL trigger call and its `INSERT`; the row's `receipt_kept` says so,
/// see `schema::receipt_triggers`), hashes it inline, makes its commit durable inline instead of
/// calling `ctrlrun_durable()`, and takes the clock once.
fn hot_functions(schema: &str) -> String {
    let s = Statements::new(schema);
    let out = |extra: &str| {
        let cols: Vec<String> = ROW_TYPES.split(", ").map(|c| format!("r_{c}")).collect();
        format!("{}{extra}", cols.join(", "))
    };
    let query = |q: String| format!("RETURN QUERY {q}");
    // The writes take their clock from their `now` parameter ($5 or $9).
    let each = [
        (
            "ctrlrun_select",
            SELECT_PARAMS,
            out(", r_n int8"),
            query(s.select),
            None,
        ),
        (
            "ctrlrun_insert",
            INSERT_PARAMS,
            out(""),
            query(s.insert),
            Some(5),
        ),
        (
            "ctrlrun_reserve",
            INSERT_PARAMS,
            out(", r_n int8, r_inserted bool"),
            s.reserve,
            Some(5),
        ),
        (
            "ctrlrun_transition",
            TRANSITION_PARAMS,
            out(""),
            query(s.transition),
            Some(9),
        ),
    ];
    each.iter()
        .map(|(name, params, returns, body, now)| {
            // The writes run as the function's owner, guarded (see `super::duties`).
            let guard = duties::hot_guard(schema, name);
            let returns = format!("TABLE ({returns})");
            let (declare, clock) = match now {
                Some(now) => (format!("DECLARE {CLOCK} int8; "), hot_clock(Some(*now))),
                None => (String::new(), String::new()),
            };
            function(
                schema,
                (name, params, &returns),
                &format!("{declare}BEGIN {guard}{clock}{body}; END"),
                now.is_some(),
            )
        })
        .collect()
}

/// The oversight write functions: the effect's whole-row compare-and-set for the agent and for a
/// resolution, the approval request's writes, and the two row locks.
fn oversight_functions(schema: &str) -> String {
    let s = Statements::new(schema);
    let t = format!("\"{schema}\".ctrlrun_effects");
    let a = format!("\"{schema}\".ctrlrun_approvals");
    let hash = format!("\"{schema}\".ctrlrun_receipt_hash");
    let agent_cas = format!(
        "{cas} AND CASE WHEN $17 = 'failed' AND $2 IN ('reserved', 'executing') \
         THEN $10 IS NULL ELSE resolved_by IS NOT DISTINCT FROM $10 END",
        cas = s.cas
    );
    let ask = format!(
        "INSERT INTO {a} (request_id, action, args_digest, effect_key, arguments, state, \
         requested_at, ttl, expires_at, decided_at, decided_by, note, used_at, used_by, \
         requested_by, approvals_needed, granted_by, updated_at, last_event, written_by, \
         receipt_seq, receipt_prev, receipt_hash) VALUES \
         ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $18, $19, $20, $15, \
         $16, $17, 1, NULL, {hash}('approval', $4, $1, '1', NULL, $15::text, $16, $2, $14, \
         NULL, $6, $3, $1, $11, $17)) ON CONFLICT DO NOTHING"
    );
    let request_cas = format!(
        "UPDATE {a} SET state = $1, expires_at = $2, decided_at = $3, decided_by = $4, \
         note = $5, used_at = $6, used_by = $7, updated_at = $10, last_event = $11, \
         written_by = $12, granted_by = $13, receipt_seq = COALESCE(receipt_seq, 0) + 1, \
         receipt_prev = receipt_hash, receipt_hash = {hash}('approval', effect_key, \
         request_id, (COALESCE(receipt_seq, 0) + 1)::text, receipt_hash, $10::text, $11, \
         action, $7, NULL, $1, args_digest, request_id, $4, $12) \
         WHERE request_id = $8 AND state = $9"
    );
    // The agent expires a request or uses a grant; it cannot touch who decided.
    let settle = format!(
        "{request_cas} AND decided_by IS NOT DISTINCT FROM $4 \
         AND decided_at IS NOT DISTINCT FROM $3 AND granted_by IS NOT DISTINCT FROM $13 \
         AND note IS NOT DISTINCT FROM $5 AND expires_at = $2"
    );
    // A decision adds its name to those recorded (never writes over another's): with the
    // request locked first ([`super::oversight`]'s `lock_request`) none is lost, and should a
    // write ever meet a list it did not read, it matches nothing and is refused.
    let decide = format!(
        "{request_cas} AND (granted_by IS NULL OR $13 = granted_by \
         OR pg_catalog.left($13, pg_catalog.length(granted_by) + 1) = granted_by || E'\\n')"
    );
    let lock = |table: &str, condition: &str, mode: &str| {
        format!("BEGIN PERFORM 1 FROM {table} WHERE {condition} {mode}; RETURN FOUND; END")
    };
    let each = [
        (
            ("ctrlrun_cas", CAS_PARAMS, "int8"),
            counted(&duties::agent_cas_guard(schema), &agent_cas),
        ),
        (
            ("ctrlrun_resolve", CAS_PARAMS, "int8"),
            counted(&duties::resolve_guard(), &s.cas),
        ),
        (
            ("ctrlrun_ask", ASK_PARAMS, "int8"),
            counted(&duties::ask_guard(), &ask),
        ),
        (
            ("ctrlrun_settle_request", REQUEST_CAS_PARAMS, "int8"),
            counted(&duties::settle_guard(), &settle),
        ),
        (
            ("ctrlrun_decide", REQUEST_CAS_PARAMS, "int8"),
            counted(&duties::decide_guard(), &decide),
        ),
        (
            ("ctrlrun_hold_effect", "text", "boolean"),
            lock(
                &t,
                "key_digest = pg_catalog.sha256(pg_catalog.convert_to($1, 'UTF8')) \
                 AND effect_key = $1",
                "FOR KEY SHARE",
            ),
        ),
        (
            ("ctrlrun_lock_request", "text", "boolean"),
            lock(&a, "request_id = $1", "FOR UPDATE"),
        ),
    ];
    each.iter()
        .map(|(sig, body)| function(schema, *sig, body, true))
        .collect()
}

/// The two batch functions of the store's schema (created with the others, see
/// [`super::functions::all_functions`]).
pub(super) fn batch_functions(schema: &str) -> String {
    let t = format!("\"{schema}\".ctrlrun_effects");
    let r = format!("\"{schema}\".ctrlrun_receipts");
    let cols: Vec<&str> = COLUMNS.split(", ").collect();
    let w_cols: Vec<String> = cols.iter().map(|c| format!("w.{c}")).collect();
    let w_cols = w_cols.join(", ");
    let out: Vec<String> = ROW_TYPES.split(", ").map(|c| format!("r_{c}")).collect();
    let returns = format!("TABLE (r_n int8, {})", out.join(", "));
    let receipt = append_receipt(&r);
    let digest = "pg_catalog.sha256(pg_catalog.convert_to(i.k, 'UTF8'))";
    let hash = receipt_hash(&[
        "'effect'",
        "i.k",
        "NULL",
        "'1'",
        "NULL",
        &format!("{CLOCK}::text"),
        "'reservation'",
        "i.act",
        "i.aid",
        "'1'",
        "i.st",
        "i.ad",
        "NULL",
        "NULL",
        "$10",
    ]);
    let reserve = format!(
        "RETURN QUERY WITH i AS (SELECT * FROM unnest($1, $2, $3, $4, $5, $6, $7, \
         $8, $9) WITH ORDINALITY AS i(k, st, aid, lease, tok, act, hold, ad, ads, n)), \
         w AS (INSERT INTO {t} (key_digest, {COLUMNS}, last_event, written_by, receipt_seq, \
         receipt_prev, receipt_hash, receipt_kept) SELECT {digest}, i.k, i.st, i.aid, 1, \
         {CLOCK}, {CLOCK}, {CLOCK} + i.lease, NULL, NULL, NULL, i.tok, i.act, i.hold, i.ad, \
         i.ads, NULL, 'reservation', $10, 1, NULL, {hash}, 1 FROM i \
         WHERE NOT EXISTS (SELECT FROM \"{schema}\".ctrlrun_policy p WHERE p.action = i.act \
         AND p.decision <> 'allow') ORDER BY 1 \
         ON CONFLICT (key_digest) DO NOTHING RETURNING *), receipt AS ({receipt}) \
         SELECT i.n, {w_cols} FROM i LEFT JOIN w ON w.attempt_token = i.tok \
         AND w.effect_key = i.k ORDER BY i.n"
    );
    let seq = "COALESCE(e.receipt_seq, 0) + 1";
    let update_hash = receipt_hash(&[
        "'effect'",
        "e.effect_key",
        "NULL",
        &format!("({seq})::text"),
        "e.receipt_hash",
        &format!("{CLOCK}::text"),
        "i.ev",
        "e.action",
        "e.action_id",
        "e.attempt::text",
        "i.st",
        "e.args_digest",
        "e.approval_id",
        "e.resolved_by",
        "$10",
    ]);
    let transition = format!(
        "RETURN QUERY WITH i AS (SELECT * FROM unnest($1, $2, $3, $4, $5, $6, $7, \
         $8, $9) WITH ORDINALITY AS i(st, f, clear, res, err, k, aid, att, ev, n) \
         ORDER BY pg_catalog.sha256(pg_catalog.convert_to(i.k, 'UTF8'))), \
         w AS (UPDATE {t} e SET state = i.st, updated_at = {CLOCK}, \
         lease_expires_at = CASE WHEN i.clear THEN NULL ELSE e.lease_expires_at END, \
         result = i.res, error = i.err, last_event = i.ev, written_by = $10, \
         receipt_seq = {seq}, receipt_prev = e.receipt_hash, receipt_hash = {update_hash}, \
         receipt_kept = {seq} FROM i \
         WHERE e.key_digest = pg_catalog.sha256(pg_catalog.convert_to(i.k, 'UTF8')) \
         AND e.effect_key = i.k AND e.action_id = i.aid \
         AND (i.att IS NULL OR e.attempt = i.att) \
         AND e.state = ANY(pg_catalog.string_to_array(i.f, ',')) RETURNING e.*, i.n), \
         receipt AS ({receipt}) \
         SELECT i.n, {w_cols} FROM i LEFT JOIN w ON w.n = i.n ORDER BY i.n"
    );
    // The generic plan is made at a session's first call, maybe on an empty table, where a
    // hash join over a scan of the whole table looks cheapest: each row is found by its key's
    // index instead, whatever the table's statistics say.
    let function = |name: &str, params: &str, guard: String, body: String| {
        format!(
            "CREATE OR REPLACE FUNCTION \"{schema}\".{name}({params}) RETURNS {returns} \
             LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp \
             SET plan_cache_mode = force_generic_plan SET enable_seqscan = off \
             SET enable_hashjoin = off SET enable_mergejoin = off AS $fn$ \
             DECLARE {CLOCK} int8; \
             BEGIN {guard}; {clock}{body}; END $fn$;\n",
            clock = hot_clock(None),
        )
    };
    function(
        "ctrlrun_reserve_many",
        RESERVE_MANY_PARAMS,
        reserve_many_guard(),
        reserve,
    ) + &function(
        "ctrlrun_transition_many",
        TRANSITION_MANY_PARAMS,
        transition_many_guard(),
        transition,
    )
}
