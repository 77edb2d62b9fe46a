//! Creating the store's tables, checking their version, and dropping scratch schemas.

use std::time::Duration;

use tokio_postgres::error::SqlState;

use super::client::{Client, PgError};
use crate::error::{Error, Result};

/// The schema version this build writes (`ctrlrun_meta.schema_version`).
pub const SCHEMA_VERSION: i64 = 12;

/// How each older version is brought to the next (`MIGRATIONS[v - 1]` takes version `v` to
/// `v + 1`), all in one transaction with the version's update. `{t}` is the effects table, `{a}`
/// the approvals table, `{r}` the receipts table, `{p}` the approvers table, `{y}` the policy table, `{s}` the schema (quoted). A new schema gets
/// version 1's tables and then every step.
const MIGRATIONS: [&str; 11] = [
    // 1 -> 2: the per-attempt token (rows written before keep NULL).
    "ALTER TABLE {t} ADD COLUMN IF NOT EXISTS attempt_token text",
    // 2 -> 3: who holds a key and with which arguments; approvals.
    "ALTER TABLE {t} ADD COLUMN IF NOT EXISTS action text,
         ADD COLUMN IF NOT EXISTS holder text,
         ADD COLUMN IF NOT EXISTS args_digest text,
         ADD COLUMN IF NOT EXISTS arg_digests text,
         ADD COLUMN IF NOT EXISTS approval_id text;
     CREATE TABLE IF NOT EXISTS {a} (
         request_id   text   NOT NULL PRIMARY KEY,
         action       text   NOT NULL,
         args_digest  text   NOT NULL,
         effect_key   text   NOT NULL,
         arguments    text   NOT NULL,
         state        text   NOT NULL CHECK (state IN
             ('pending', 'granted', 'denied', 'used', 'expired')),
         requested_at bigint NOT NULL,
         ttl          bigint NOT NULL,
         expires_at   bigint NOT NULL,
         decided_at   bigint,
         decided_by   text,
         note         text,
         used_at      bigint,
         used_by      text);
     CREATE UNIQUE INDEX IF NOT EXISTS ctrlrun_approvals_open
         ON {a} (action, args_digest, effect_key) WHERE state IN ('pending', 'granted');
     CREATE INDEX IF NOT EXISTS ctrlrun_approvals_call
         ON {a} (action, args_digest, effect_key, requested_at)",
    // 3 -> 4: receipts. Each write statement sets its row's chain head with
    // `ctrlrun_receipt_hash` (the same hash as `crate::receipt::hash_fields`); the triggers
    // append the written row as a receipt in the same transaction. The functions fix their
    // `search_path`, so one a pooler carries over from another client cannot change them.
    "ALTER TABLE {t} ADD COLUMN IF NOT EXISTS last_event text,
         ADD COLUMN IF NOT EXISTS written_by text,
         ADD COLUMN IF NOT EXISTS receipt_seq bigint,
         ADD COLUMN IF NOT EXISTS receipt_prev text,
         ADD COLUMN IF NOT EXISTS receipt_hash text;
     ALTER TABLE {a} ADD COLUMN IF NOT EXISTS updated_at bigint,
         ADD COLUMN IF NOT EXISTS last_event text,
         ADD COLUMN IF NOT EXISTS written_by text,
         ADD COLUMN IF NOT EXISTS receipt_seq bigint,
         ADD COLUMN IF NOT EXISTS receipt_prev text,
         ADD COLUMN IF NOT EXISTS receipt_hash text;
     CREATE TABLE IF NOT EXISTS {r} (
         id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
         key_digest  bytea  NOT NULL,
         chain       text   NOT NULL,
         effect_key  text   NOT NULL,
         request_id  text,
         seq         bigint NOT NULL,
         prev_hash   text,
         hash        text   NOT NULL,
         at          bigint NOT NULL,
         kind        text   NOT NULL,
         action      text,
         action_id   text,
         attempt     bigint,
         state       text   NOT NULL,
         args_digest text,
         approval_id text,
         actor       text,
         writer      text);
     CREATE INDEX IF NOT EXISTS ctrlrun_receipts_key ON {r} (key_digest, id);
     CREATE OR REPLACE FUNCTION {s}.ctrlrun_receipt_hash(VARIADIC f text[]) RETURNS text
         LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
         SELECT encode(sha256(convert_to(string_agg(
             COALESCE(octet_length(convert_to(x, 'UTF8'))::text || ':' || x, '~'), ''
             ORDER BY i), 'UTF8')), 'hex')
         FROM unnest(f) WITH ORDINALITY AS u(x, i) $$;
     CREATE OR REPLACE FUNCTION {s}.ctrlrun_effect_receipt() RETURNS trigger
         LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
         BEGIN
             INSERT INTO {r} (key_digest, chain, effect_key, request_id, seq, prev_hash, hash,
                 at, kind, action, action_id, attempt, state, args_digest, approval_id, actor,
                 writer)
             VALUES (NEW.key_digest, 'effect', NEW.effect_key, NULL, NEW.receipt_seq,
                 NEW.receipt_prev, NEW.receipt_hash, NEW.updated_at, NEW.last_event,
                 NEW.action, NEW.action_id, NEW.attempt, NEW.state, NEW.args_digest,
                 NEW.approval_id, NEW.resolved_by, NEW.written_by);
             RETURN NULL;
         END $$;
     CREATE OR REPLACE FUNCTION {s}.ctrlrun_approval_receipt() RETURNS trigger
         LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
         BEGIN
             INSERT INTO {r} (key_digest, chain, effect_key, request_id, seq, prev_hash, hash,
                 at, kind, action, action_id, attempt, state, args_digest, approval_id, actor,
                 writer)
             VALUES (sha256(convert_to(NEW.effect_key, 'UTF8')), 'approval', NEW.effect_key,
                 NEW.request_id, NEW.receipt_seq, NEW.receipt_prev, NEW.receipt_hash,
                 NEW.updated_at, NEW.last_event, NEW.action, NEW.used_by, NULL, NEW.state,
                 NEW.args_digest, NEW.request_id, NEW.decided_by, NEW.written_by);
             RETURN NULL;
         END $$;
     CREATE OR REPLACE FUNCTION {s}.ctrlrun_receipt_required() RETURNS trigger
         LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
         BEGIN
             RAISE EXCEPTION 'ctrlrun: this write to % sets no receipt: the process runs a '
                 'ctrlrun older than the store schema (version 4); restart it with the '
                 'current ctrlrun', TG_TABLE_NAME;
         END $$;
     {receipt_triggers}",
    // 4 -> 5: the writes that commit by themselves (one statement, no BEGIN or COMMIT) call
    // `ctrlrun_durable()`, which does for their transaction what `SET LOCAL synchronous_commit
    // TO DEFAULT` does in an explicit one: behind a transaction pooler, a server connection may
    // carry another client's `SET synchronous_commit = off`, which would acknowledge the commit
    // before it is durable. `SET LOCAL` in a function lasts to the end of the calling
    // statement's transaction, so it covers that statement's commit and nothing after it.
    // The receipt hash is the same, computed by PL/pgSQL, which keeps its compiled form for the
    // session: the SQL version's query was planned again in every statement that called it.
    "CREATE OR REPLACE FUNCTION {s}.ctrlrun_durable() RETURNS boolean
         LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
         BEGIN
             SET LOCAL synchronous_commit TO DEFAULT;
             RETURN true;
         END $$;
     CREATE OR REPLACE FUNCTION {s}.ctrlrun_receipt_hash(VARIADIC f text[]) RETURNS text
         LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
         DECLARE
             fields text := '';
             x text;
         BEGIN
             FOREACH x IN ARRAY f LOOP
                 fields := fields
                     || COALESCE(octet_length(convert_to(x, 'UTF8'))::text || ':' || x, '~');
             END LOOP;
             RETURN encode(sha256(convert_to(fields, 'UTF8')), 'hex');
         END $$",
    // 5 -> 6: the indexes behind `effects list --state` and `--prefix`, and retention (see
    // `retention.rs`). Keys by their first 200 characters: an index entry has a size limit,
    // keys have none. Each index costs every protected call's writes (an UPDATE of an indexed
    // column also ends the heap-only update), so `--action` and `--limit` alone are not
    // indexed.
    "CREATE INDEX IF NOT EXISTS ctrlrun_effects_state ON {t} (state, created_at);
     CREATE INDEX IF NOT EXISTS ctrlrun_effects_prefix
         ON {t} ((pg_catalog.left(effect_key, 200) COLLATE \"C\"));
     CREATE INDEX IF NOT EXISTS ctrlrun_approvals_open_key
         ON {a} (pg_catalog.left(effect_key, 200)) WHERE state IN ('pending', 'granted')",
    // 6 -> 7: the read, the reservation's INSERT and the outcome's UPDATE as PL/pgSQL
    // functions, whose plans the server keeps per session (see `Sql::functions`). Processes
    // of version 6 go on sending the statements themselves. Every migration now ends by
    // creating all the functions in their current form (`duties::all_functions`), so this
    // step sends nothing.
    "",
    // 7 -> 8: who asked for a request, how many distinct people must grant it and who did
    // (one name per line); the accounts of the people who decide in the console.
    "ALTER TABLE {a} ADD COLUMN IF NOT EXISTS requested_by text,
         ADD COLUMN IF NOT EXISTS approvals_needed bigint,
         ADD COLUMN IF NOT EXISTS granted_by text;
     CREATE TABLE IF NOT EXISTS {p} (
         name        text   NOT NULL PRIMARY KEY,
         secret_hash text   NOT NULL,
         created_at  bigint NOT NULL,
         updated_at  bigint NOT NULL)",
    // 8 -> 9: every write of a role other than the owner goes through a `SECURITY DEFINER`
    // function whose `EXECUTE` is granted per duty (`duties`, created with the others at the
    // end of the migration); `PUBLIC` loses `EXECUTE` on them. The store's policy: each
    // action's rule, a floor under every caller's own policy.
    "CREATE TABLE IF NOT EXISTS {y} (
         action     text   NOT NULL PRIMARY KEY,
         decision   text   NOT NULL CHECK (decision IN ('allow', 'approve', 'deny')),
         approvals  bigint NOT NULL CHECK (approvals BETWEEN 1 AND 10),
         updated_at bigint NOT NULL)",
    // 9 -> 10: `ctrlrun_durable()` commits every write at least as `synchronous_commit = on`
    // (it used to put back the session's default, which may be `off`). It is created with the
    // other functions at the end of the migration, so this step sends nothing.
    "",
    // 10 -> 11: the indexes behind the console's and `approvals list`'s pages (see
    // `oversight/listing.rs`): one state's requests in request order, every request newest
    // first, the live pending or granted ones by expiry, and one action's or one asker's in
    // order. Approval requests are written by the actions that need a person, never by every
    // protected call, so the writes these cost are few. The build holds approval writes for
    // its time (a table of a million requests: seconds).
    "CREATE INDEX IF NOT EXISTS ctrlrun_approvals_state ON {a} (state, requested_at, request_id);
     CREATE INDEX IF NOT EXISTS ctrlrun_approvals_time ON {a} (requested_at, request_id);
     CREATE INDEX IF NOT EXISTS ctrlrun_approvals_expiry ON {a} (state, expires_at);
     CREATE INDEX IF NOT EXISTS ctrlrun_approvals_action ON {a} (action, requested_at, request_id);
     CREATE INDEX IF NOT EXISTS ctrlrun_approvals_asker
         ON {a} (requested_by, requested_at, request_id)",
    // 11 -> 12: the hot writes append their receipts in their own statements (see
    // `functions::hot_functions`) and set `receipt_kept` to the sequence number of the receipt
    // they appended, so the effects table's AFTER triggers append one only for a write that did
    // not: every other function of the schema, and a statement of an older process, keep
    // writing theirs through the trigger. Adding a column with no default rewrites nothing.
    "ALTER TABLE {t} ADD COLUMN IF NOT EXISTS receipt_kept bigint;
     {receipt_triggers_12}",
];

pub(super) fn init_schema(client: &mut Client, schema: &str, description: &str) -> Result<()> {
    let fail = |e: PgError| {
        Error::Store(format!(
            "cannot set up the tables of the PostgreSQL store {description}: {}",
            e.describe()
        ))
    };
    let version_query =
        format!("SELECT value FROM \"{schema}\".ctrlrun_meta WHERE key = 'schema_version'");
    let read_version = |client: &mut Client| -> std::result::Result<Option<i64>, PgError> {
        let rows = client.query_typed(&version_query, &[])?;
        Ok(rows
            .first()
            .and_then(|r| r.get::<_, String>(0).parse::<i64>().ok()))
    };
    let version = match read_version(client) {
        Ok(v) => v,
        Err(e)
            if matches!(e.code(), Some(c) if *c == SqlState::UNDEFINED_TABLE
                || *c == SqlState::INVALID_SCHEMA_NAME) =>
        {
            None
        }
        Err(e) => return Err(fail(e)),
    };
    let version = match version {
        Some(v) => v,
        None => {
            let ddl = format!(
                "CREATE SCHEMA IF NOT EXISTS \"{schema}\";
                 CREATE TABLE IF NOT EXISTS \"{schema}\".ctrlrun_effects (
                     key_digest       bytea  NOT NULL PRIMARY KEY,
                     effect_key       text   NOT NULL,
                     state            text   NOT NULL CHECK (state IN
                         ('reserved', 'executing', 'committed', 'failed', 'ambiguous')),
                     action_id        text   NOT NULL,
                     attempt          bigint NOT NULL CHECK (attempt >= 1),
                     created_at       bigint NOT NULL,
                     updated_at       bigint NOT NULL,
                     lease_expires_at bigint,
                     result           text,
                     error            text,
                     resolved_by      text);
                 COMMENT ON COLUMN \"{schema}\".ctrlrun_effects.created_at IS
                     'microseconds since the Unix epoch, UTC';
                 COMMENT ON COLUMN \"{schema}\".ctrlrun_effects.key_digest IS
                     'sha256 of effect_key (UTF-8): the unique index, for keys of any length';
                 CREATE TABLE IF NOT EXISTS \"{schema}\".ctrlrun_meta (
                     key text NOT NULL PRIMARY KEY, value text NOT NULL);
                 INSERT INTO \"{schema}\".ctrlrun_meta VALUES ('schema_version', '1')
                     ON CONFLICT (key) DO NOTHING;"
            );
            // Several processes may create the same schema at once; the loser of a catalog race
            // sees a unique violation and simply tries again.
            let mut tries = 0;
            loop {
                let created = client
                    .batch_execute(
                        "START TRANSACTION",
                        "START TRANSACTION; SET LOCAL synchronous_commit = on",
                    )
                    .and_then(|_| client.batch_execute("the tables' creation", &ddl))
                    .and_then(|_| client.batch_execute("COMMIT", "COMMIT"));
                if created.is_err() && !client.is_closed() {
                    let _ = client.batch_execute("ROLLBACK", "ROLLBACK");
                }
                match created {
                    Ok(()) => break,
                    Err(e)
                        if tries < 5
                            && matches!(e.code(), Some(c) if *c == SqlState::UNIQUE_VIOLATION
                                || *c == SqlState::DUPLICATE_SCHEMA
                                || *c == SqlState::DUPLICATE_TABLE
                                || *c == SqlState::T_R_SERIALIZATION_FAILURE) =>
                    {
                        tries += 1;
                        std::thread::sleep(Duration::from_millis(20 * tries));
                    }
                    Err(e) => return Err(fail(e)),
                }
            }
            read_version(client).map_err(fail)?.unwrap_or(1)
        }
    };
    if version > SCHEMA_VERSION {
        return Err(Error::Store(format!(
            "the PostgreSQL store {description} has schema version {version}, newer than this \
             ctrlrun understands ({SCHEMA_VERSION}); upgrade ctrlrun"
        )));
    }
    if version < SCHEMA_VERSION {
        let migrated = migrate(client, schema);
        if migrated.is_err() && !client.is_closed() {
            let _ = client.batch_execute("ROLLBACK", "ROLLBACK");
        }
        migrated.map_err(|e| {
            Error::Store(format!(
                "cannot bring the tables of the PostgreSQL store {description} from schema \
                 version {version} to {SCHEMA_VERSION}: {}",
                e.describe()
            ))
        })?;
    }
    Ok(())
}

/// Schema version 4's triggers, on the effects (`{t}`) and approvals (`{a}`) tables alike: the
/// BEFORE ones refuse a write that sets no receipt, the AFTER ones append the written row as a
/// receipt. Since version 12 (`kept`), the effects table's append is skipped for a row whose
/// `receipt_kept` is its `receipt_seq`: the statement that wrote it appended that receipt. A
/// write that does not set the column (any other function, an older process's statement)
/// leaves it NULL or at an earlier number, so the trigger appends its receipt.
fn receipt_triggers(kept: bool) -> String {
    let tables = [
        ("{t}", "ctrlrun_effects", "ctrlrun_effect_receipt"),
        ("{a}", "ctrlrun_approvals", "ctrlrun_approval_receipt"),
    ];
    let mut sql = String::new();
    for (table, name, append) in tables {
        let skip = if kept && table == "{t}" {
            " AND NEW.receipt_kept IS DISTINCT FROM NEW.receipt_seq"
        } else {
            ""
        };
        let appended_insert = format!("NEW.receipt_hash IS NOT NULL{skip}");
        let appended_update = format!("NEW.receipt_hash IS DISTINCT FROM OLD.receipt_hash{skip}");
        let kinds = [
            (
                "receipt_required_insert",
                "BEFORE INSERT",
                "NEW.receipt_hash IS NULL",
                "ctrlrun_receipt_required",
            ),
            (
                "receipt_required_update",
                "BEFORE UPDATE",
                "NEW.receipt_seq IS NOT DISTINCT FROM OLD.receipt_seq",
                "ctrlrun_receipt_required",
            ),
            (
                "receipt_insert",
                "AFTER INSERT",
                &appended_insert[..],
                append,
            ),
            (
                "receipt_update",
                "AFTER UPDATE",
                &appended_update[..],
                append,
            ),
        ];
        for (suffix, timing, when, function) in kinds {
            sql.push_str(&format!(
                "DROP TRIGGER IF EXISTS {name}_{suffix} ON {table}; \
                 CREATE TRIGGER {name}_{suffix} {timing} ON {table} FOR EACH ROW WHEN ({when}) \
                 EXECUTE FUNCTION {{s}}.{function}();\n"
            ));
        }
    }
    sql
}

/// Bring an older schema to [`SCHEMA_VERSION`] in one transaction. The version row is locked
/// first, so processes that open the store at once migrate it once, one after another.
fn migrate(client: &mut Client, schema: &str) -> std::result::Result<(), PgError> {
    let meta = format!("\"{schema}\".ctrlrun_meta");
    // Durable whatever the session's default: a migration a crash undid would leave processes
    // that saw it land writing to a schema that went back a version.
    client.batch_execute(
        "START TRANSACTION",
        "START TRANSACTION; SET LOCAL synchronous_commit = on",
    )?;
    let rows = client.query_typed(
        &format!("SELECT value FROM {meta} WHERE key = 'schema_version' FOR UPDATE"),
        &[],
    )?;
    let version = rows
        .first()
        .and_then(|r| r.get::<_, String>(0).parse::<i64>().ok())
        .unwrap_or(1);
    if (1..SCHEMA_VERSION).contains(&version) {
        let table = format!("\"{schema}\".ctrlrun_effects");
        let approvals = format!("\"{schema}\".ctrlrun_approvals");
        let receipts = format!("\"{schema}\".ctrlrun_receipts");
        let approvers = format!("\"{schema}\".ctrlrun_approvers");
        let quoted = format!("\"{schema}\"");
        for step in &MIGRATIONS[(version - 1) as usize..] {
            let step = step
                .replace("{receipt_triggers}", &receipt_triggers(false))
                .replace("{receipt_triggers_12}", &receipt_triggers(true))
                .replace("{t}", &table)
                .replace("{a}", &approvals)
                .replace("{r}", &receipts)
                .replace("{p}", &approvers)
                .replace("{y}", &format!("\"{schema}\".ctrlrun_policy"))
                .replace("{s}", &quoted);
            if !step.trim().is_empty() {
                client.batch_execute("a schema migration", &step)?;
            }
        }
        client.batch_execute(
            "the schema's functions",
            &super::functions::all_functions(schema),
        )?;
        super::roles::regrant(client, schema)?;
        client.batch_execute(
            "the schema version's update",
            &format!("UPDATE {meta} SET value = '{SCHEMA_VERSION}' WHERE key = 'schema_version'"),
        )?;
    }
    client.batch_execute("COMMIT", "COMMIT")
}

/// Prefix of throwaway schemas (`ctrlrun verify`, the pytest plugin).
pub const SCRATCH_PREFIX: &str = "ctrlrun_scratch_";

/// Drop a throwaway schema made by `ctrlrun verify` or the pytest plugin. Refuses any schema whose name does not start
/// with [`SCRATCH_PREFIX`], so it can never drop the user's data.
pub fn drop_scratch_schema(url: &str) -> Result<()> {
    let target = super::conn::target(url, "drop_scratch_schema takes a postgresql:// URL")?;
    let schema = &target.schema;
    if !schema.starts_with(SCRATCH_PREFIX) {
        return Err(Error::InvalidArgument(format!(
            "refusing to drop schema {schema:?}: only {SCRATCH_PREFIX}* scratch schemas are dropped"
        )));
    }
    let (mut client, fail) = super::conn::admin_client(&target, "drop the scratch schema")?;
    client
        .batch_execute(
            "DROP SCHEMA",
            &format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"),
        )
        .map_err(fail)
}
