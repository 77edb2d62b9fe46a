//! The hot statements as server-side prepared statements that are safe behind a transaction
//! pooler.
//!
//! An unnamed statement is parsed and planned again on every call (about 0.1 ms of server time
//! per statement here, more than its execution). A statement prepared under a name keeps its
//! plan, but the driver names statements `s0`, `s1`, … per process: behind a pooler in
//! transaction mode the next transaction may run on a server connection where another client's
//! `s3` is a different statement, and a Bind to `s3` would run it with our parameters.
//!
//! So the name is the statement's content: `ctrlrun_` and the SHA-256 of its `PREPARE` text
//! (the text names the schema and every function with its schema). A server connection that
//! holds that name holds that very statement, whoever prepared it. We run it with `EXECUTE
//! name(literals)` in one simple query; where the name is missing (a server connection that never
//! saw it: a new one, or another one handed out by a pooler, or one reset with `DISCARD ALL`)
//! the server answers SQLSTATE 26000 and ran nothing, and the next try sends `PREPARE …; EXECUTE
//! …` in one simple query, which a pooler runs on one server connection. Neither error can
//! leave anything written, so the failure classification is unchanged. The driver has no way to
//! name a statement, hence this module.
//!
//! Parameters travel as literals. Texts are `E'…'` strings with `\` and `'` doubled, which mean
//! the same whatever `standard_conforming_strings` a pooled server connection carries; a text
//! with a NUL is refused before anything is sent (PostgreSQL `text` cannot hold one).

use std::collections::HashSet;
use std::fmt::Write as _;

use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;
use tokio_postgres::{SimpleQueryMessage, SimpleQueryRow};

use super::client::{Client, PgError, PgResult};

/// One statement with its content-derived name and parameter types.
pub(super) struct Prepared {
    name: String,
    /// `PREPARE name(types) AS body`.
    prepare: String,
    body: String,
    types: Vec<Type>,
}

/// One parameter of an `EXECUTE`.
pub(super) enum Arg<'a> {
    Text(Option<&'a str>),
    Int(Option<i64>),
    Bool(bool),
    Texts(&'a [&'a str]),
}

impl Prepared {
    pub(super) fn new(body: &str, types: &[Type]) -> Prepared {
        let list: Vec<&str> = types.iter().map(|t| t.name()).collect();
        let signature = list.join(", ");
        let digest = ring::digest::digest(
            &ring::digest::SHA256,
            format!("({signature}) AS {body}").as_bytes(),
        );
        let mut name = String::from("ctrlrun_");
        for b in &digest.as_ref()[..12] {
            let _ = write!(name, "{b:02x}");
        }
        let prepare = format!("PREPARE {name}({signature}) AS {body}");
        Prepared {
            name,
            prepare,
            body: body.to_owned(),
            types: types.to_vec(),
        }
    }

    /// The statement itself with each `$n` replaced by its literal, cast to its type: what
    /// runs when a pooler keeps handing out server connections that disagree about the name.
    fn inline(&self, args: &[Arg<'_>]) -> PgResult<String> {
        let mut sql = String::with_capacity(self.body.len() + 256);
        let mut rest = self.body.as_str();
        while let Some(at) = rest.find('$') {
            sql.push_str(&rest[..at]);
            let digits = rest[at + 1..]
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len() - at - 1);
            if digits == 0 {
                sql.push('$'); // not a parameter
                rest = &rest[at + 1..];
                continue;
            }
            let i = rest[at + 1..at + 1 + digits]
                .parse::<usize>()
                .ok()
                .and_then(|n| n.checked_sub(1));
            let (Some(arg), Some(ty)) = (
                i.and_then(|i| args.get(i)),
                i.and_then(|i| self.types.get(i)),
            ) else {
                return Err(PgError::Refused(format!(
                    "the statement names parameter {} that it was not given",
                    &rest[at..at + 1 + digits]
                )));
            };
            sql.push('(');
            literal(&mut sql, arg)?;
            let _ = write!(sql, ")::{}", ty.name());
            rest = &rest[at + 1 + digits..];
        }
        sql.push_str(rest);
        Ok(sql)
    }

    /// `EXECUTE name(literals)`, or `PREPARE …; EXECUTE …` for a server connection that does
    /// not hold the statement yet.
    fn text(&self, args: &[Arg<'_>], with_prepare: bool) -> PgResult<String> {
        debug_assert_eq!(args.len(), self.types.len());
        let mut sql = String::with_capacity(256);
        if with_prepare {
            sql.push_str(&self.prepare);
            sql.push_str("; ");
        }
        sql.push_str("EXECUTE ");
        sql.push_str(&self.name);
        sql.push('(');
        for (i, arg) in args.iter().enumerate() {
            if i > 0 {
                sql.push_str(", ");
            }
            literal(&mut sql, arg)?;
        }
        sql.push(')');
        Ok(sql)
    }
}

fn text_literal(sql: &mut String, text: &str) -> PgResult<()> {
    if text.contains('\0') {
        return Err(PgError::Refused(
            "a text contains a NUL character, which PostgreSQL text cannot hold".into(),
        ));
    }
    sql.push_str("E'");
    for c in text.chars() {
        match c {
            '\\' => sql.push_str("\\\\"),
            '\'' => sql.push_str("''"),
            c => sql.push(c),
        }
    }
    sql.push('\'');
    Ok(())
}

fn literal(sql: &mut String, arg: &Arg<'_>) -> PgResult<()> {
    match arg {
        Arg::Text(None) | Arg::Int(None) => sql.push_str("NULL"),
        Arg::Text(Some(text)) => text_literal(sql, text)?,
        Arg::Int(Some(n)) => {
            let _ = write!(sql, "{n}");
        }
        Arg::Bool(b) => sql.push_str(if *b { "true" } else { "false" }),
        Arg::Texts(items) => {
            sql.push_str("ARRAY[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    sql.push_str(", ");
                }
                text_literal(sql, item)?;
            }
            sql.push_str("]::text[]");
        }
    }
    Ok(())
}

/// The names this connection has prepared. Behind a pooler it is only a hint: the server
/// connection under the next transaction may hold them or not, and the server says which.
#[derive(Default)]
pub(super) struct Names(HashSet<String>);

/// How many times one call may find its statement missing, or prepared already by another
/// client on the server connection it got, before it sends the statement itself (a pooler that
/// resets every server connection after each transaction costs one retry per call).
const TRIES: usize = 4;

impl Client {
    /// Run `p` with `args` as one statement that commits by itself; its rows.
    pub(super) fn execute_prepared(
        &mut self,
        p: &Prepared,
        args: &[Arg<'_>],
    ) -> PgResult<Vec<SimpleQueryRow>> {
        for _ in 0..TRIES {
            let with_prepare = !self.prepared.0.contains(&p.name);
            let sql = p.text(args, with_prepare)?;
            match self.simple_query("a statement", &sql) {
                Ok(messages) => {
                    self.prepared.0.insert(p.name.clone());
                    return Ok(rows(messages));
                }
                // Missing here: prepare it with the next try. Both answers mean the server ran
                // nothing of this query.
                Err(e) if e.code() == Some(&SqlState::INVALID_SQL_STATEMENT_NAME) => {
                    self.prepared.0.remove(&p.name);
                }
                // Already there (another client prepared it on this server connection): the
                // same text under the same name, so run it.
                Err(e) if e.code() == Some(&SqlState::DUPLICATE_PSTATEMENT) => {
                    self.prepared.0.insert(p.name.clone());
                }
                Err(e) => return Err(e),
            }
        }
        // A pooler handed out server connections that disagreed each time: the statement
        // itself, planned for this call only.
        let sql = p.inline(args)?;
        self.simple_query("a statement", &sql).map(rows)
    }
}

fn rows(messages: Vec<SimpleQueryMessage>) -> Vec<SimpleQueryRow> {
    messages
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some(row),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_are_escaped_whatever_the_server_setting_and_nul_is_refused() {
        let p = Prepared::new(
            "SELECT $1, $2, $3, $4",
            &[Type::TEXT, Type::INT8, Type::BOOL, Type::TEXT_ARRAY],
        );
        let sql = p
            .text(
                &[
                    Arg::Text(Some("it's a \\ 'x'")),
                    Arg::Int(Some(-5)),
                    Arg::Bool(true),
                    Arg::Texts(&["a'", "b"]),
                ],
                false,
            )
            .unwrap();
        assert!(
            sql.ends_with("(E'it''s a \\\\ ''x''', -5, true, ARRAY[E'a''', E'b']::text[])"),
            "{sql}"
        );
        assert!(p
            .text(
                &[
                    Arg::Text(Some("a\0b")),
                    Arg::Int(None),
                    Arg::Bool(false),
                    Arg::Texts(&[])
                ],
                false
            )
            .is_err());
    }

    #[test]
    fn inlined_parameters_keep_their_types_and_only_parameters_are_replaced() {
        let p = Prepared::new("SELECT $1, $12, $2 || '$'", &[Type::TEXT, Type::INT8]);
        let args = [Arg::Text(Some("a'b")), Arg::Int(None)];
        assert!(p.inline(&args).is_err(), "$12 names no parameter"); // never sent
        let p = Prepared::new("SELECT $1, $2 || '$'", &[Type::TEXT, Type::INT8]);
        assert_eq!(
            p.inline(&args).unwrap(),
            "SELECT (E'a''b')::text, (NULL)::int8 || '$'"
        );
    }

    #[test]
    fn the_name_is_the_content() {
        let a = Prepared::new("SELECT $1", &[Type::TEXT]);
        let b = Prepared::new("SELECT $1", &[Type::TEXT]);
        let c = Prepared::new("SELECT $1 ", &[Type::TEXT]);
        let d = Prepared::new("SELECT $1", &[Type::INT8]);
        assert_eq!(a.name, b.name);
        assert_ne!(a.name, c.name);
        assert_ne!(a.name, d.name);
        assert!(a
            .text(&[Arg::Text(None)], true)
            .unwrap()
            .starts_with(&format!(
                "PREPARE {}(text) AS SELECT $1; EXECUTE {}(NULL)",
                a.name, a.name
            )));
    }
}
