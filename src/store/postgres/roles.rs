//! `ctrlrun store roles`: give two roles the operator created the agent and the approver
//! duties on a store (see [`super::duties`]), after checking that the server will keep them
//! apart.

use tokio_postgres::types::Type;

use super::client::{Client, PgError};
use super::duties::{Duty, DEFINER};
use crate::error::{Error, Result};

/// The tables every duty reads, and the one only the approver (the console's sign-in) and
/// the owner read: the approver accounts' secret hashes.
const READ_BY_ALL: [&str; 5] = [
    "ctrlrun_meta",
    "ctrlrun_policy",
    "ctrlrun_effects",
    "ctrlrun_approvals",
    "ctrlrun_receipts",
];
const READ_BY_APPROVER: &str = "ctrlrun_approvers";

/// Where a role's duty is recorded in `ctrlrun_meta` (`duty:<role>` = `agent` | `approver`),
/// so that a migration that adds functions grants them again ([`regrant`]).
const RECORDED: &str = "duty:";

/// A role's name as an SQL identifier.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The statements that give `role` the duty `duty` on the store's schema, and take from it
/// every other privilege on the schema's tables and functions (those earlier versions of the
/// docs recommended included `INSERT` and `UPDATE`).
fn grants_for(schema: &str, role: &str, duty: Duty) -> String {
    let s = quote_ident(schema);
    let r = quote_ident(role);
    let mut sql = format!(
        "GRANT USAGE ON SCHEMA {s} TO {r};\n\
         REVOKE ALL ON ALL TABLES IN SCHEMA {s} FROM {r};\n\
         REVOKE ALL ON ALL SEQUENCES IN SCHEMA {s} FROM {r};\n\
         REVOKE ALL ON ALL FUNCTIONS IN SCHEMA {s} FROM {r};\n"
    );
    let mut read: Vec<&str> = READ_BY_ALL.to_vec();
    if duty == Duty::Approver {
        read.push(READ_BY_APPROVER);
    }
    for table in read {
        sql.push_str(&format!("GRANT SELECT ON {s}.{table} TO {r};\n"));
    }
    for (name, params, _) in DEFINER.iter().filter(|(_, _, d)| *d == duty) {
        sql.push_str(&format!(
            "GRANT EXECUTE ON FUNCTION {s}.{name}({params}) TO {r};\n"
        ));
    }
    sql
}

/// [`grants_for`] both roles, and their duties recorded for later migrations.
pub fn grants(schema: &str, agent: &str, approver: &str) -> String {
    let mut sql = String::new();
    for (role, duty) in [(agent, Duty::Agent), (approver, Duty::Approver)] {
        sql.push_str(&grants_for(schema, role, duty));
        sql.push_str(&format!(
            "INSERT INTO {}.ctrlrun_meta (key, value) VALUES ('{RECORDED}{}', '{}') \
             ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value;\n",
            quote_ident(schema),
            role.replace('\'', "''"),
            duty.as_str()
        ));
    }
    sql
}

/// Give the roles recorded by `ctrlrun store roles` their duties again, on the functions as a
/// migration left them (a role dropped since is skipped): part of every migration.
pub(super) fn regrant(client: &mut Client, schema: &str) -> std::result::Result<(), PgError> {
    let rows = client.query_typed(
        &format!(
            "SELECT pg_catalog.substr(m.key, {from}), m.value FROM \"{schema}\".ctrlrun_meta m \
             WHERE m.key LIKE '{RECORDED}%' AND EXISTS (SELECT 1 FROM pg_catalog.pg_roles r \
             WHERE r.rolname = pg_catalog.substr(m.key, {from}))",
            from = RECORDED.len() + 1
        ),
        &[],
    )?;
    for row in rows {
        let (role, duty): (String, String) = (row.get(0), row.get(1));
        if let Some(duty) = Duty::parse(&duty) {
            client.batch_execute("the duties' grants", &grants_for(schema, &role, duty))?;
        }
    }
    Ok(())
}

/// What `store roles` does: print the statements, or check the roles and run them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum RolesMode {
    Print,
    Apply,
}

/// A role's name: what PostgreSQL takes as one (at most 63 bytes, no control character).
fn check_role(option: &str, name: &str) -> Result<()> {
    if name.is_empty() || name.len() > 63 || name.chars().any(char::is_control) {
        return Err(Error::InvalidArgument(format!(
            "{option} must name a PostgreSQL role (1 to 63 bytes, no control characters), got \
             {name:?}"
        )));
    }
    Ok(())
}

/// The statements that give `agent` and `approver` their duties on the store `url` names;
/// with [`RolesMode::Apply`], run on the store after the checks of [`check_apart`] (the store
/// is opened first, so its schema is at this build's version). Returns the statements.
pub fn store_roles(url: &str, agent: &str, approver: &str, mode: RolesMode) -> Result<String> {
    check_role("--agent", agent)?;
    check_role("--approver", approver)?;
    if agent == approver {
        return Err(Error::InvalidArgument(format!(
            "--agent and --approver name the same role {agent:?}: one role would hold both \
             duties, and the agent could decide. Create a role for each"
        )));
    }
    let target = super::conn::target(
        url,
        "a SQLite store has no roles: whoever can write its file can decide. Duties apart need \
         a PostgreSQL store (docs/roles.md)",
    )?;
    let schema = &target.schema;
    let sql = grants(schema, agent, approver);
    if mode == RolesMode::Print {
        return Ok(sql);
    }
    drop(crate::store::open_store(url)?); // creates or migrates the schema
    let (mut client, fail) = super::conn::admin_client(&target, "set the roles")?;
    check_apart(&mut client, schema, agent, approver)?;
    let applied = client
        .batch_execute("START TRANSACTION", "START TRANSACTION")
        .and_then(|()| client.batch_execute("the grants", &sql))
        .and_then(|()| client.batch_execute("COMMIT", "COMMIT"));
    if applied.is_err() && !client.is_closed() {
        let _ = client.batch_execute("ROLLBACK", "ROLLBACK");
    }
    applied.map_err(fail)?;
    Ok(sql)
}

/// Refuse roles the server would not keep apart: a role that does not exist, a superuser
/// (it passes every privilege check), a role that is, or is a member of, the tables' owner,
/// an agent that is a member of the approver role; and a connection that is not the owner's.
fn check_apart(c: &mut Client, schema: &str, agent: &str, approver: &str) -> Result<()> {
    let fail = |e: PgError| {
        Error::Store(format!(
            "cannot read the roles on the server of schema {schema:?}: {}",
            e.describe()
        ))
    };
    let owner_query = "SELECT current_user::text, tableowner::text, \
                       pg_has_role(current_user, tableowner, 'USAGE') FROM pg_catalog.pg_tables \
                       WHERE schemaname = $1 AND tablename = 'ctrlrun_effects'";
    let row = c
        .query_typed_one(owner_query, &[(&schema, Type::TEXT)])
        .map_err(fail)?;
    let (me, owner, acts_as_owner): (String, String, bool) = (row.get(0), row.get(1), row.get(2));
    if !acts_as_owner {
        return Err(Error::PermissionDenied(format!(
            "the store's tables in schema {schema:?} are owned by the role {owner:?}, and this \
             URL connects as {me:?}: run `ctrlrun store roles` with the owner's URL"
        )));
    }
    // A role that can create roles can grant itself the other duty; the predefined roles
    // below read or write every table whatever the grants say.
    let role_query = "SELECT rolsuper OR rolbypassrls, pg_has_role(oid, $2::text, 'MEMBER'), \
                      rolcreaterole, (SELECT pg_catalog.string_agg(p.rolname, ', ') \
                      FROM pg_catalog.pg_roles p WHERE p.rolname IN ('pg_write_all_data', \
                      'pg_read_all_data', 'pg_write_server_files', 'pg_execute_server_program') \
                      AND pg_has_role(r.oid, p.oid, 'MEMBER')) \
                      FROM pg_catalog.pg_roles r WHERE rolname = $1";
    for (option, role) in [("--agent", agent), ("--approver", approver)] {
        let found = c
            .query_typed(role_query, &[(&role, Type::TEXT), (&owner, Type::TEXT)])
            .map_err(fail)?;
        let Some(row) = found.first() else {
            return Err(Error::InvalidArgument(format!(
                "{option} {role:?}: no such role on this server. Create it first (CREATE ROLE \
                 {} LOGIN PASSWORD '…'), then run this again",
                quote_ident(role)
            )));
        };
        let (superuser, owns): (bool, bool) = (row.get(0), row.get(1));
        let (creates_roles, predefined): (bool, Option<String>) = (row.get(2), row.get(3));
        if superuser {
            return Err(Error::InvalidArgument(format!(
                "{option} {role:?} is a superuser or bypasses row security, which passes every \
                 privilege check: give the duty to a role without SUPERUSER or BYPASSRLS"
            )));
        }
        if creates_roles {
            return Err(Error::InvalidArgument(format!(
                "{option} {role:?} has CREATEROLE, and could grant itself the other duty: \
                 ALTER ROLE {} NOCREATEROLE, or use another role",
                quote_ident(role)
            )));
        }
        if let Some(predefined) = predefined {
            return Err(Error::InvalidArgument(format!(
                "{option} {role:?} is a member of {predefined}, which reads or writes every \
                 table whatever the grants say: revoke that membership"
            )));
        }
        if owns {
            return Err(Error::InvalidArgument(format!(
                "{option} {role:?} is the owner of the store's tables ({owner:?}) or a member \
                 of it, and the owner may write anything: use a role that is not"
            )));
        }
    }
    let member = c
        .query_typed_one(
            "SELECT pg_has_role($1::text, $2::text, 'MEMBER')",
            &[(&agent, Type::TEXT), (&approver, Type::TEXT)],
        )
        .map_err(fail)?;
    if member.get::<_, bool>(0) {
        return Err(Error::InvalidArgument(format!(
            "--agent {agent:?} is a member of --approver {approver:?}, so the agent could \
             decide: revoke that membership (REVOKE {} FROM {})",
            quote_ident(approver),
            quote_ident(agent)
        )));
    }
    Ok(())
}
