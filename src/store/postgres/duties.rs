//! Separation of duties, enforced by the PostgreSQL server (docs/roles.md).
//!
//! Three duties: the **agent** reserves, records its outcomes, extends its lease, asks for an
//! approval and uses a grant inside its own reservation; the **approver** grants, denies and
//! resolves; the **owner** (the role that owns the store's tables) does everything else: the
//! schema and its migrations, approver accounts, the store's policy, retention.
//!
//! Every write the agent or the approver makes goes through a `SECURITY DEFINER` function of
//! the owner's. `EXECUTE` on each is revoked from `PUBLIC` and granted to one duty only
//! (`ctrlrun store roles`, [`grants`]), and the roles hold no `INSERT`, `UPDATE`, `DELETE` or
//! `TRUNCATE` on any table: a process holding the agent's credentials can write nothing else,
//! whatever SQL it sends. Each function's guard admits only its duty's steps, so the agent's
//! compare-and-set cannot be used to resolve or to decide. The guards check the parameters
//! (the state a compare-and-set expects and the state it writes), which is exact because the
//! write matches a row only in the state it expects. The row rules themselves stay in the
//! planner; a guard says only *who* may take a step (this module is the one place that says it).
//!
//! Like the schema's other functions, each pins its `search_path` (`pg_catalog, pg_temp`) and
//! names every table with its schema, so a `search_path` a caller or a pooler's server
//! connection carries cannot substitute objects of its own (PostgreSQL's "Writing SECURITY
//! DEFINER Functions Safely").

use super::statements::{Statements, INSERT_PARAMS, TRANSITION_PARAMS};
use crate::planner::Transition;
use crate::record::EffectState;

/// The parameter types of a whole-row compare-and-set of an effect: the row's 16 columns
/// (`rows::effect_values`), then the state, action id and attempt it expects, the event and
/// the writer (`rows::expected_values`).
pub(super) const CAS_PARAMS: &str = "text, text, text, int8, int8, int8, int8, text, text, text, \
                                     text, text, text, text, text, text, text, text, int8, \
                                     text, text";
/// An approval request's `INSERT` (`rows::approval_insert`).
pub(super) const ASK_PARAMS: &str = "text, text, text, text, text, text, int8, int8, int8, int8, \
                                     text, text, int8, text, int8, text, text, text, int8, text";
/// An approval request's compare-and-set (`rows::approval_cas`).
pub(super) const REQUEST_CAS_PARAMS: &str =
    "text, int8, int8, text, text, int8, text, text, text, int8, text, text, text";

/// Who may call a function.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Duty {
    Agent,
    Approver,
}

impl Duty {
    pub fn as_str(self) -> &'static str {
        match self {
            Duty::Agent => "agent",
            Duty::Approver => "approver",
        }
    }

    pub fn parse(s: &str) -> Option<Duty> {
        [Duty::Agent, Duty::Approver]
            .into_iter()
            .find(|d| d.as_str() == s)
    }
}

/// The `SECURITY DEFINER` functions, each with its parameter types and the one duty granted
/// `EXECUTE` on it.
pub(super) const DEFINER: [(&str, &str, Duty); 10] = [
    ("ctrlrun_insert", INSERT_PARAMS, Duty::Agent),
    ("ctrlrun_reserve", INSERT_PARAMS, Duty::Agent),
    ("ctrlrun_transition", TRANSITION_PARAMS, Duty::Agent),
    ("ctrlrun_cas", CAS_PARAMS, Duty::Agent),
    ("ctrlrun_ask", ASK_PARAMS, Duty::Agent),
    ("ctrlrun_settle_request", REQUEST_CAS_PARAMS, Duty::Agent),
    ("ctrlrun_hold_effect", "text", Duty::Agent),
    ("ctrlrun_resolve", CAS_PARAMS, Duty::Approver),
    ("ctrlrun_decide", REQUEST_CAS_PARAMS, Duty::Approver),
    ("ctrlrun_lock_request", "text", Duty::Approver),
];

/// The steps of an effect's row the agent's whole-row compare-and-set may write, `(from, to)`:
/// a renewal after `failed`, a lapse, an extension, a late outcome (a return commits; anything
/// else is noted on the `ambiguous` row). Moving a row out of `ambiguous` other than by a late
/// return is a person's resolution.
const AGENT_ROW_STEPS: [(EffectState, EffectState); 9] = {
    use EffectState::*;
    [
        (Failed, Reserved),
        (Failed, Executing),
        (Reserved, Ambiguous),
        (Executing, Ambiguous),
        (Executing, Executing),
        (Ambiguous, Ambiguous),
        (Ambiguous, Committed),
        (Failed, Committed),
        (Committed, Committed),
    ]
};

/// `RAISE` of SQLSTATE 42501 (`insufficient_privilege`) with `message`, whose `%` take `args`.
fn refuse(message: &str, args: &str) -> String {
    refuse_with("insufficient_privilege", message, args)
}

/// `RAISE` of SQLSTATE `code` with `message`, whose `%` take `args`.
fn refuse_with(code: &str, message: &str, args: &str) -> String {
    format!("RAISE EXCEPTION 'ctrlrun: {message}'{args} USING ERRCODE = '{code}'")
}

/// `(a, b), (c, d)` of state pairs, as SQL row constructors.
fn pairs(steps: &[(EffectState, EffectState)]) -> String {
    let each: Vec<String> = steps
        .iter()
        .map(|(from, to)| format!("('{}', '{}')", from.as_str(), to.as_str()))
        .collect();
    each.join(", ")
}

/// The guard of `ctrlrun_transition`: each state the caller accepts is one its transition
/// starts from (the planner's [`Transition::from_states`]).
fn transition_guard() -> String {
    let all = [
        Transition::Begin,
        Transition::Commit { result: None },
        Transition::Fail {
            error: String::new(),
        },
        Transition::MarkAmbiguous {
            error: String::new(),
        },
    ];
    let arms: Vec<String> = all
        .iter()
        .map(|t| {
            let from: Vec<String> = t
                .from_states()
                .iter()
                .map(|s| format!("'{}'", s.as_str()))
                .collect();
            format!(
                "WHEN '{}' THEN ARRAY[{}]::text[]",
                t.target().as_str(),
                from.join(", ")
            )
        })
        .collect();
    format!(
        "IF NOT ($2 <@ (CASE $1 {} ELSE ARRAY[]::text[] END)) THEN {}; END IF",
        arms.join(" "),
        refuse(
            "the agent duty may not move an effect from any of % to %: moving an effect out \
             of ambiguous is a person''s resolution (the approver duty)",
            ", $2, $1"
        )
    )
}

/// The guard of the reservation's `INSERT`: a key's first attempt, with no outcome and no
/// resolver.
fn insert_guard() -> String {
    format!(
        "IF $2 NOT IN ('reserved', 'executing') OR $4 <> 1 OR $7 IS NOT NULL \
         OR $8 IS NOT NULL OR $9 IS NOT NULL THEN {}; END IF",
        refuse(
            "a reservation writes a key''s first attempt (reserved or executing, attempt 1, \
             no outcome, resolved by nobody); state % attempt % is not an agent''s write",
            ", $2, $4"
        )
    )
}

/// The function `name` of the store's schema: `params` in, `returns` out, `body` run by
/// PL/pgSQL as the function's owner when `definer`.
pub(super) fn function(
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

/// The SQLSTATEs of the store's policy: the action is denied; it needs a grant in force.
pub(super) const POLICY_DENIES: &str = "CT001";
pub(super) const POLICY_NEEDS_GRANT: &str = "CT002";

/// `PERFORM` of the store's policy check on `args` (action, effect key, arguments' digest,
/// approval id): a new attempt of an action the store's policy denies, or requires approval
/// of without a grant in force of enough approvers, is refused whatever the caller's own
/// policy said.
pub(super) fn policy_check(schema: &str, args: &str) -> String {
    format!("PERFORM \"{schema}\".ctrlrun_policy_check({args})")
}

/// The function behind [`policy_check`] (run as the writing function's owner).
fn policy_check_function(schema: &str) -> String {
    let deny = refuse_with(
        POLICY_DENIES,
        "action % is denied by the store''s policy (ctrlrun policy apply); nothing was \
         reserved or run",
        ", $1",
    );
    let need = refuse_with(
        POLICY_NEEDS_GRANT,
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
         IF NOT EXISTS (SELECT 1 FROM \"{schema}\".ctrlrun_approvals WHERE request_id = $4 \
         AND state = 'granted' AND action = $1 AND effect_key = $2 AND args_digest = $3 \
         AND pg_catalog.cardinality(pg_catalog.string_to_array(granted_by, E'\\n')) >= k) \
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

/// The guard each hot function runs first (`""` for none).
pub(super) fn hot_guard(schema: &str, name: &str) -> String {
    match name {
        "ctrlrun_insert" => format!(
            "{}; {}; ",
            insert_guard(),
            policy_check(schema, "$11, $1, $13, $15")
        ),
        "ctrlrun_reserve" => insert_guard() + "; ",
        "ctrlrun_transition" => transition_guard() + "; ",
        _ => String::new(),
    }
}

/// `BEGIN <statement>; RETURN the row count; END`, preceded by `guard`.
fn counted(guard: &str, statement: &str) -> String {
    format!(
        "DECLARE n int8; BEGIN {guard}; {statement}; GET DIAGNOSTICS n = ROW_COUNT; RETURN n; END"
    )
}

/// The cold write functions: the effect's whole-row compare-and-set for the agent and for a
/// resolution, the approval request's writes, and the two row locks.
fn cold_functions(schema: &str) -> String {
    let s = Statements::new(schema);
    let t = format!("\"{schema}\".ctrlrun_effects");
    let a = format!("\"{schema}\".ctrlrun_approvals");
    let hash = format!("\"{schema}\".ctrlrun_receipt_hash");
    let agent_cas = format!(
        "{cas} AND CASE WHEN $17 = 'failed' AND $2 IN ('reserved', 'executing') \
         THEN $10 IS NULL ELSE resolved_by IS NOT DISTINCT FROM $10 END",
        cas = s.cas
    );
    let agent_guard = format!(
        "IF NOT (($17, $2) IN ({})) THEN {}; END IF; \
         IF $17 = 'failed' AND $2 IN ('reserved', 'executing') THEN {}; END IF",
        pairs(&AGENT_ROW_STEPS),
        refuse(
            "the agent duty may not write an effect from % to %: a person resolves an \
             ambiguous effect (the approver duty)",
            ", $17, $2"
        ),
        policy_check(schema, "$12, $1, $14, $16")
    );
    let resolve_guard = format!(
        "IF NOT ($17 IN ('ambiguous', 'reserved', 'executing') \
         AND $2 IN ('committed', 'failed') AND $10 IS NOT NULL) THEN {}; END IF",
        refuse(
            "a resolution moves an ambiguous effect to committed or failed and names who \
             resolved it, not from % to %",
            ", $17, $2"
        )
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
    let ask_guard = format!(
        "IF $6 <> 'pending' OR $10 IS NOT NULL OR $11 IS NOT NULL OR $13 IS NOT NULL \
         OR $14 IS NOT NULL OR $20 IS NOT NULL THEN {}; END IF",
        refuse(
            "an approval request is written pending and undecided (a decision is the \
             approver duty''s), not %",
            ", $6"
        )
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
         AND decided_at IS NOT DISTINCT FROM $3 AND granted_by IS NOT DISTINCT FROM $13"
    );
    let settle_guard = format!(
        "IF NOT (($9 IN ('pending', 'granted') AND $1 = 'expired') \
         OR ($9 = 'granted' AND $1 = 'used')) THEN {}; END IF",
        refuse(
            "the agent duty may not move an approval request from % to %: deciding is the \
             approver duty''s",
            ", $9, $1"
        )
    );
    // A decision adds its name to those recorded (never writes over another's): with the
    // request locked first ([`super::cold`]'s `lock_request`) none is lost, and should a
    // write ever meet a list it did not read, it matches nothing and is refused.
    let decide = format!(
        "{request_cas} AND (granted_by IS NULL OR $13 = granted_by \
         OR pg_catalog.left($13, pg_catalog.length(granted_by) + 1) = granted_by || E'\\n')"
    );
    let decide_guard = format!(
        "IF NOT ($9 = 'pending' AND $1 IN ('pending', 'granted', 'denied')) THEN {}; END IF",
        refuse(
            "a decision moves a pending request to pending, granted or denied, not from % to %",
            ", $9, $1"
        )
    );
    let lock = |table: &str, condition: &str, mode: &str| {
        format!("BEGIN PERFORM 1 FROM {table} WHERE {condition} {mode}; RETURN FOUND; END")
    };
    let each = [
        (
            ("ctrlrun_cas", CAS_PARAMS, "int8"),
            counted(&agent_guard, &agent_cas),
        ),
        (
            ("ctrlrun_resolve", CAS_PARAMS, "int8"),
            counted(&resolve_guard, &s.cas),
        ),
        (
            ("ctrlrun_ask", ASK_PARAMS, "int8"),
            counted(&ask_guard, &ask),
        ),
        (
            ("ctrlrun_settle_request", REQUEST_CAS_PARAMS, "int8"),
            counted(&settle_guard, &settle),
        ),
        (
            ("ctrlrun_decide", REQUEST_CAS_PARAMS, "int8"),
            counted(&decide_guard, &decide),
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

/// Every function of the store's schema in its current form, and `EXECUTE` on each
/// `SECURITY DEFINER` one revoked from `PUBLIC` (the owner keeps it; [`grants`] gives each to
/// its duty). Every migration ends with this, so a store at the current version always has
/// them as this build writes them.
pub(super) fn all_functions(schema: &str) -> String {
    let mut sql = policy_check_function(schema);
    sql.push_str(&super::statements::functions(schema));
    sql.push_str(&cold_functions(schema));
    for (name, params, _) in DEFINER {
        sql.push_str(&format!(
            "REVOKE ALL ON FUNCTION \"{schema}\".{name}({params}) FROM PUBLIC;\n"
        ));
    }
    sql
}

/// Which duty write `what` needs, for the message of a refusal (SQLSTATE 42501).
pub(super) fn needed_by(what: &str) -> &'static str {
    match what {
        "grant_approval" | "deny_approval" | "resolve_effect" => {
            "Deciding is the approver duty: use the approver role's URL (the console's), \
             never the agent's; see docs/roles.md"
        }
        "approvers" | "get_approver" | "list_approvers" => {
            "Reading the console's accounts is the approver duty's (and the owner's): start the \
             console with the approver role's URL, never the agent's; see docs/roles.md"
        }
        "reserve_effect" | "begin_execution" | "commit_effect" | "fail_effect"
        | "mark_ambiguous" | "extend_lease" | "request_approval" => {
            "This role lacks the agent duty or asked for a step that is not the agent's: the \
             store's owner grants the duties with `ctrlrun store roles --store OWNER_URL \
             --agent ROLE --approver ROLE`; see docs/roles.md"
        }
        _ => {
            "Only the store's owner (the role that owns its tables) does this: use the \
             owner's URL; see docs/roles.md"
        }
    }
}
