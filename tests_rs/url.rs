//! Store URLs fail closed: anything that looks like a URL but is malformed is refused (never
//! taken as a SQLite file path), and no message shows a password in any URL or DSN form.

use ctrlrun::url::{parse, redact, PostgresOptions, StoreUrl};
use ctrlrun::Error;

const SECRET: &str = "s3cr3t";

#[test]
fn malformed_urls_are_refused_not_taken_as_file_paths() {
    for url in [
        "postgresql:/u:s3cr3t@db/x",
        "postgresql:u:s3cr3t@db/x",
        "postgresql//u:s3cr3t@db/x",
        "postgres:/u:s3cr3t@db/x",
        "POSTGRESQL:/u:s3cr3t@db/x",
        "sqlite:/x.db",
        "sqlite:x.db",
        "sqlite//x.db",
        "redis:x",
        "file:state.db",
        "mysql:/u:s3cr3t@db",
    ] {
        match parse(url) {
            Err(Error::InvalidArgument(m)) => {
                assert!(m.contains("://"), "{url}: {m}");
                assert!(!m.contains(SECRET), "{url}: the password is shown: {m}");
                assert!(
                    !m.contains("  "),
                    "{url}: a run of spaces in the message: {m:?}"
                );
            }
            other => panic!("{url:?}: expected InvalidArgument, got {other:?}"),
        }
    }
}

#[test]
fn libpq_keyword_strings_are_refused_not_taken_as_file_paths() {
    for dsn in [
        "service=prod",
        "dbname=app",
        "host = db",
        "host=db password='a s3cr3t'",
        "host=db user=u password=s3cr3t",
    ] {
        match parse(dsn) {
            Err(Error::InvalidArgument(m)) => {
                assert!(m.contains("keyword"), "{dsn}: {m}");
                assert!(!m.contains(SECRET), "{dsn}: {m}");
            }
            other => panic!("{dsn:?}: expected InvalidArgument, got {other:?}"),
        }
    }
}

#[test]
fn a_password_with_unescaped_specials_is_refused_and_never_shown() {
    for url in [
        "postgresql://app:p@s3cr3t@db/x",
        "postgresql://app:pa?s3cr3t@db/x?sslmode=require",
        "postgresql://app:pa/s3cr3t@db/x",
        "postgresql://app:pa#s3cr3t@db/x",
    ] {
        match parse(url) {
            Err(Error::InvalidArgument(m)) => {
                assert!(m.contains("percent-encoded"), "{url}: {m}");
                assert!(!m.contains("s3cr3t"), "{url}: {m}");
            }
            other => panic!("{url:?}: expected InvalidArgument, got {other:?}"),
        }
    }
    // percent-encoded, the same password is fine
    assert!(parse("postgresql://app:p%40s3cr3t@db/x?sslmode=require").is_ok());
}

#[test]
fn plain_paths_are_still_sqlite_files() {
    for path in [
        "state.db",
        "./x/state.db",
        "/abs/state.db",
        "C:/state.db",
        "a:b.db",
        "v1.2/state.db",
    ] {
        match parse(path) {
            Ok(StoreUrl::Sqlite(o)) => assert_eq!(o.path.to_str(), Some(path)),
            other => panic!("{path:?}: expected a SQLite path, got {other:?}"),
        }
    }
}

#[test]
fn no_url_or_dsn_form_shows_its_password() {
    for url in [
        "postgresql://u:s3cr3t@db/x",
        "postgresql://u:s3cr3t@db:5432/x?sslmode=require",
        "postgresql://u:p@s3cr3t@db/x",
        "postgresql://u:s3cr3t@@db/x",
        "postgresql://u:s3/cr3t@db/x",
        "postgresql://u:s3?cr3t@db/x",
        "postgresql:/u:s3cr3t@db/x",
        "postgresql//u:s3cr3t@db/x",
        "u:s3cr3t@db/x",
        "postgresql://u@db/x?password=s3cr3t&schema=a",
        "postgresql://u@db/x?PassWord=s3cr3t",
        "host=db user=u password=s3cr3t dbname=x",
        "host=db user=u Password=s3cr3t",
        "host=db user=u password = s3cr3t",
        "host=db user=u password='s3 cr3t x'",
        "host=db password='s3\\'cr3t' user=u",
        "host=db password=s3\\ cr3t user=u",
        "host=db password=s3&cr3t",
        "user:s3:cr3t@host",
    ] {
        let shown = redact(url);
        for part in ["s3cr3t", "cr3t", "s3 "] {
            assert!(!shown.contains(part), "{url:?} shown as {shown:?}");
        }
        assert!(shown.contains("***"), "{url:?} shown as {shown:?}");
        if let Err(e) = parse(url) {
            assert!(!e.to_string().contains("cr3t"), "{url:?}: {e}");
        }
    }
    assert_eq!(redact("postgresql://u@db/x"), "postgresql://u@db/x");
    assert_eq!(redact("/var/lib/state.db"), "/var/lib/state.db");
}

#[test]
fn an_option_given_twice_or_a_bound_of_no_time_is_refused() {
    for (url, needle) in [
        (
            "sqlite:///x.db?synchronous=normal&synchronous=full",
            "'synchronous' is given twice",
        ),
        (
            "postgresql://u:s3cr3t@db/x?schema=a&schema=b",
            "'schema' is given twice",
        ),
        (
            "postgresql://u:s3cr3t@db/x?connect_timeout=5&connect_timeout=9",
            "given twice",
        ),
        (
            "postgresql://u:s3cr3t@db/x?connect_timeout=0",
            "connect_timeout must be",
        ),
        (
            "postgresql://u:s3cr3t@db/x?connect_timeout=-5",
            "connect_timeout must be",
        ),
        (
            "postgresql://u:s3cr3t@db/x?connect_timeout=1.5",
            "connect_timeout must be",
        ),
        (
            "postgresql://u:s3cr3t@db/x?connect_timeout=3601",
            "connect_timeout must be",
        ),
        (
            "postgresql://u:s3cr3t@db/x?connect_%74imeout=0",
            "connect_timeout must be",
        ),
        (
            "postgresql://u:s3cr3t@db/x?connect_timeout=5&connect_%74imeout=9",
            "'connect_timeout' is given twice",
        ),
    ] {
        match parse(url) {
            Err(Error::InvalidArgument(m)) => {
                assert!(m.contains(needle), "{url}: {m}");
                assert!(!m.contains(SECRET), "{url}: the password is shown: {m}");
            }
            other => panic!("{url:?}: expected InvalidArgument, got {other:?}"),
        }
    }
    assert!(matches!(
        parse("postgresql://u:s3cr3t@db/x?connect_timeout=7"),
        Ok(StoreUrl::Postgres { .. })
    ));
}

#[test]
fn prepared_statements_is_on_or_off_and_off_unless_asked_for() {
    let prepared = |url: &str| match parse(url) {
        Ok(StoreUrl::Postgres(PostgresOptions {
            prepared_statements,
            url,
            ..
        })) => {
            assert!(
                !url.contains("prepared_statements"),
                "{url}: left for the driver"
            );
            prepared_statements
        }
        other => panic!("{url:?}: expected a PostgreSQL URL, got {other:?}"),
    };
    assert!(!prepared("postgresql://u:s3cr3t@db/x"));
    assert!(!prepared(
        "postgresql://u:s3cr3t@db/x?prepared_statements=off"
    ));
    assert!(prepared(
        "postgresql://u:s3cr3t@db/x?schema=a&prepared_statements=on"
    ));
    // the value percent-decoded, as every other option's
    assert!(prepared(
        "postgresql://u:s3cr3t@db/x?prepared_statements=%6Fn"
    ));
    for value in ["", "yes", "true", "ON", "1"] {
        let url = format!("postgresql://u:s3cr3t@db/x?prepared_statements={value}");
        match parse(&url) {
            Err(Error::InvalidArgument(m)) => {
                assert!(
                    m.contains("prepared_statements must be on or off"),
                    "{url}: {m}"
                );
                assert!(
                    m.contains("never behind a transaction pooler"),
                    "{url}: {m}"
                );
                assert!(!m.contains(SECRET), "{url}: the password is shown: {m}");
            }
            other => panic!("{url:?}: expected InvalidArgument, got {other:?}"),
        }
    }
}

#[test]
fn file_mode_is_octal_from_0600_to_0777_and_0600_unless_given() {
    let mode = |url: &str| match parse(url) {
        Ok(StoreUrl::Sqlite(o)) => o.file_mode,
        other => panic!("{url:?}: expected a SQLite URL, got {other:?}"),
    };
    assert_eq!(mode("sqlite:///x.db"), 0o600);
    assert_eq!(mode("/abs/x.db"), 0o600);
    assert_eq!(mode("sqlite:///x.db?file_mode=0640"), 0o640);
    assert_eq!(mode("sqlite:///x.db?file_mode=660"), 0o660);
    assert_eq!(
        mode("sqlite:///x.db?synchronous=normal&file_mode=0777"),
        0o777
    );
    for (value, needle) in [
        ("", "file_mode must be an octal mode such as 0600 or 0640"),
        ("rw-r-----", "file_mode must be an octal mode"),
        ("0o640", "file_mode must be an octal mode"),
        ("0890", "file_mode must be an octal mode"),
        ("+640", "file_mode must be an octal mode"),
        ("01600", "file_mode must be from 0600 to 0777"),
        ("4600", "file_mode must be from 0600 to 0777"),
        ("99999999999999999999", "file_mode must be an octal mode"),
        (
            "77777777777777777777",
            "file_mode must be from 0600 to 0777",
        ),
        ("0400", "file_mode must be from 0600 to 0777"),
        ("0200", "file_mode must be from 0600 to 0777"),
        ("0077", "file_mode must be from 0600 to 0777"),
    ] {
        let url = format!("sqlite:///x.db?file_mode={value}");
        match parse(&url) {
            Err(Error::InvalidArgument(m)) => {
                assert!(m.contains(needle), "{url}: {m}");
                assert!(m.contains(&format!("got {value:?}")), "{url}: {m}");
            }
            other => panic!("{url:?}: expected InvalidArgument, got {other:?}"),
        }
    }
    match parse("sqlite:///x.db?file_mode=0600&file_mode=0640") {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("'file_mode' is given twice"), "{m}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    match parse("sqlite:///x.db?filemode=0640") {
        Err(Error::InvalidArgument(m)) => {
            assert!(
                m.contains("busy_timeout, file_mode, group_commit and group_commit_wait"),
                "{m}"
            )
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}
