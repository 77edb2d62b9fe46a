//! `ctrlrun store roles`: give two roles the operator created the agent and the approver
//! duties on a store (see [`super::duties`]), after checking that the server will keep them
//! apart.

use tokio_postgres::types::Type;

use super::client::{Client, PgError};
use super::conn::{describe, Manager};
use super::duties::{grants, quote_ident};
use crate::error::{Error, Result};

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
    let crate::url::StoreUrl::Postgres {
        url: pg_url,
        schema,
        timeout,
        tls,
        ..
    } = crate::url::parse(url)?
    else {
        return Err(Error::InvalidArgument(
            "a SQLite store has no roles: whoever can write its file can decide. Duties \
             apart need a PostgreSQL store (docs/roles.md)"
                .into(),
        ));
    };
    let sql = grants(&schema, agent, approver);
    if mode == RolesMode::Print {
        return Ok(sql);
    }
    drop(crate::store::open_store(url)?); // creates or migrates the schema
    let manager = Manager::for_url(&pg_url, timeout, &tls)?;
    let description = describe(&manager.config, &schema);
    let fail = |e: PgError| {
        Error::Store(format!(
            "cannot set the roles of the PostgreSQL store {description}: {}",
            e.describe()
        ))
    };
    let mut client = manager.connect_client().map_err(fail)?;
    check_apart(&mut client, &schema, agent, approver, &description)?;
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
fn check_apart(
    c: &mut Client,
    schema: &str,
    agent: &str,
    approver: &str,
    description: &str,
) -> Result<()> {
    let fail = |e: PgError| {
        Error::Store(format!(
            "cannot read the roles of the PostgreSQL store {description}: {}",
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
            "the store's tables in {description} are owned by the role {owner:?}, and this URL \
             connects as {me:?}: run `ctrlrun store roles` with the owner's URL"
        )));
    }
    let role_query = "SELECT rolsuper, pg_has_role(oid, $2::text, 'MEMBER') \
                      FROM pg_catalog.pg_roles WHERE rolname = $1";
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
        if superuser {
            return Err(Error::InvalidArgument(format!(
                "{option} {role:?} is a superuser, which passes every privilege check: give \
                 the duty to a role without SUPERUSER"
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
