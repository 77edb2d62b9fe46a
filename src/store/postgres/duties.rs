//! Separation of duties, enforced by the PostgreSQL server (docs/roles.md).
//!
//! Three duties: the **agent** reserves, records its outcomes, extends its lease, asks for an
//! approval and uses a grant inside its own reservation; the **approver** grants, denies and
//! resolves; the **owner** (the role that owns the store's tables) does everything else: the
//! schema and its migrations, approver accounts, the store's policy, retention.
//!
//! Every write the agent or the approver makes goes through a `SECURITY DEFINER` function of
//! the owner's. `EXECUTE` on each is revoked from `PUBLIC` and granted to one duty only
//! (`ctrlrun store roles`, [`super::grants`]), and the roles hold no `INSERT`, `UPDATE`,
//! `DELETE` or `TRUNCATE` on any table: a process holding the agent's credentials can write
//! nothing else, whatever SQL it sends. Each function's guard admits only its duty's steps, so
//! the agent's compare-and-set cannot be used to resolve or to decide. The guards check the
//! parameters (the state a compare-and-set expects and the state it writes), which is exact
//! because the write matches a row only in the state it expects. The row rules themselves stay
//! in the planner; a guard says only *who* may take a step (this module is the one place that
//! says it).
//!
//! Like the schema's other functions, each pins its `search_path` (`pg_catalog, pg_temp`) and
//! names every table with its schema, so a `search_path` a caller or a pooler's server
//! connection carries cannot substitute objects of its own (PostgreSQL's "Writing SECURITY
//! DEFINER Functions Safely").

use super::statements::{
    INSERT_PARAMS, RESERVE_MANY_PARAMS, TRANSITION_MANY_PARAMS, TRANSITION_PARAMS,
};
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
pub(super) const DEFINER: [(&str, &str, Duty); 12] = [
    ("ctrlrun_insert", INSERT_PARAMS, Duty::Agent),
    ("ctrlrun_reserve_many", RESERVE_MANY_PARAMS, Duty::Agent),
    (
        "ctrlrun_transition_many",
        TRANSITION_MANY_PARAMS,
        Duty::Agent,
    ),
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
pub(super) fn refuse_with(code: &str, message: &str, args: &str) -> String {
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

/// Refuse with `refusal` unless `allowed` is true. Written this way round, a condition that
/// is NULL (a NULL parameter) refuses: three-valued logic never lets a step through.
fn unless(allowed: &str, refusal: String) -> String {
    format!("IF NOT COALESCE({allowed}, false) THEN {refusal}; END IF")
}

/// Whether a transition to `target` from the states `from` (a `text[]` expression) is the
/// agent's: each state it accepts is one its transition starts from (the planner's
/// [`Transition::from_states`]).
fn transition_allowed(target: &str, from: &str) -> String {
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
        "{from} <@ (CASE {target} {} ELSE ARRAY[]::text[] END) AND pg_catalog.cardinality({from}) > 0",
        arms.join(" ")
    )
}

const TRANSITION_REFUSED: &str = "the agent duty may not move an effect from any of % to %: \
     moving an effect out of ambiguous is a person''s resolution (the approver duty)";

/// The guard of `ctrlrun_transition`.
fn transition_guard() -> String {
    unless(
        &transition_allowed("$1", "$2"),
        refuse(TRANSITION_REFUSED, ", $2, $1"),
    )
}

/// The guard of `ctrlrun_transition_many`: each row's, the states it accepts given as
/// comma-separated names (`$2`), the states it writes in `$1`.
pub(super) fn transition_many_guard() -> String {
    let froms = "pg_catalog.string_to_array(g.f, ',')";
    format!(
        "IF EXISTS (SELECT FROM unnest($1::text[], $2::text[]) g(t, f) \
         WHERE NOT COALESCE({}, false)) THEN {}; END IF",
        transition_allowed("g.t", froms),
        refuse(TRANSITION_REFUSED, ", $2, $1")
    )
}

/// The guard of `ctrlrun_reserve_many`: each row a key's first attempt, reserved or executing
/// (the batch writes attempt 1 with no outcome, no resolver and no approval by itself).
pub(super) fn reserve_many_guard() -> String {
    format!(
        "IF EXISTS (SELECT FROM unnest($1::text[], $2::text[]) g(k, st) \
         WHERE g.k IS NULL OR g.st IS NULL OR g.st NOT IN ('reserved', 'executing')) \
         THEN {}; END IF",
        refuse(
            "a reservation writes a key''s first attempt (reserved or executing); states % \
             are not an agent''s write",
            ", $2",
        )
    )
}

/// The guard of the reservation's `INSERT`: a key's first attempt, with no outcome and no
/// resolver.
fn insert_guard() -> String {
    unless(
        "$2 IN ('reserved', 'executing') AND $4 = 1 AND $7 IS NULL AND $8 IS NULL \
         AND $9 IS NULL",
        refuse(
            "a reservation writes a key''s first attempt (reserved or executing, attempt 1, \
             no outcome, resolved by nobody); state % attempt % is not an agent''s write",
            ", $2, $4",
        ),
    )
}

/// The SQLSTATEs of the store's policy: the action is denied; it needs a grant in force.
pub(super) const POLICY_DENIES: &str = "CT001";
pub(super) const POLICY_NEEDS_GRANT: &str = "CT002";

/// The guard of the agent's whole-row compare-and-set (`ctrlrun_cas`): only
/// [`AGENT_ROW_STEPS`]; and a renewal meets the store's policy for the action it names and for
/// the action that last held the key (a renewal naming another action, or none, does not
/// escape a rule).
pub(super) fn agent_cas_guard(schema: &str) -> String {
    let held = format!(
        "NULLIF((SELECT e.action FROM \"{schema}\".ctrlrun_effects e \
         WHERE e.key_digest = pg_catalog.sha256(pg_catalog.convert_to($1, 'UTF8')) \
         AND e.effect_key = $1), $12)"
    );
    format!(
        "{}; IF $17 = 'failed' AND $2 IN ('reserved', 'executing') THEN {}; {}; END IF",
        unless(
            &format!("($17, $2) IN ({})", pairs(&AGENT_ROW_STEPS)),
            refuse(
                "the agent duty may not write an effect from % to %: a person resolves an \
                 ambiguous effect (the approver duty)",
                ", $17, $2",
            ),
        ),
        super::statements::policy_check(schema, "$12, $1, $14, $16"),
        super::statements::policy_check(schema, &format!("{held}, $1, $14, $16")),
    )
}

/// The guard of a resolution (`ctrlrun_resolve`): out of `ambiguous` (or a lapsed hold), to
/// `committed` or `failed`, naming who resolved it.
pub(super) fn resolve_guard() -> String {
    unless(
        "$17 IN ('ambiguous', 'reserved', 'executing') AND $2 IN ('committed', 'failed') \
         AND $10 IS NOT NULL",
        refuse(
            "a resolution moves an ambiguous effect to committed or failed and names who \
             resolved it, not from % to %",
            ", $17, $2",
        ),
    )
}

/// The guard of the agent's approval request (`ctrlrun_ask`): pending and undecided.
pub(super) fn ask_guard() -> String {
    unless(
        "$6 = 'pending' AND $10 IS NULL AND $11 IS NULL AND $13 IS NULL AND $14 IS NULL \
         AND $20 IS NULL AND $19 >= 1",
        refuse(
            "an approval request is written pending and undecided (a decision is the \
             approver duty''s), not %",
            ", $6",
        ),
    )
}

/// The guard of the agent's request step (`ctrlrun_settle_request`): expire a request, or use
/// a grant.
pub(super) fn settle_guard() -> String {
    unless(
        "($9 IN ('pending', 'granted') AND $1 = 'expired') OR ($9 = 'granted' AND $1 = 'used')",
        refuse(
            "the agent duty may not move an approval request from % to %: deciding is the \
             approver duty''s",
            ", $9, $1",
        ),
    )
}

/// The guard of a decision (`ctrlrun_decide`): a pending request to pending, granted or
/// denied.
pub(super) fn decide_guard() -> String {
    unless(
        "$9 = 'pending' AND $1 IN ('pending', 'granted', 'denied')",
        refuse(
            "a decision moves a pending request to pending, granted or denied, not from % to %",
            ", $9, $1",
        ),
    )
}

/// The guard each hot function runs first (`""` for none).
pub(super) fn hot_guard(schema: &str, name: &str) -> String {
    match name {
        "ctrlrun_insert" => format!(
            "{}; {}; ",
            insert_guard(),
            super::statements::policy_check(schema, "$11, $1, $13, $15")
        ),
        "ctrlrun_reserve" => insert_guard() + "; ",
        "ctrlrun_transition" => transition_guard() + "; ",
        _ => String::new(),
    }
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
