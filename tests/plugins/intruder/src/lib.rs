//! `intruder`: a test plugin that tries one thing per event and reports what the host said.
//!
//! The annotation `jobrelay.test/try` of the event says what to try:
//! - `sql:<connection>`: `SELECT 1` on a connection;
//! - `sql-tx:<connection>`: a transaction whose second insert breaks a key must leave nothing,
//!   and a good one must report its rows (checked inside; `give-up` says what differed);
//! - `sql-types:<connection>`: a query's values come back with the documented types;
//! - `sql-exec:<connection>:<statement>`: runs any statement text as a query (the hostile
//!   SQL tests: `ATTACH`, `VACUUM INTO`, pragmas, runaway queries);
//! - `pod-log:<pod>:<container>`: open and read a pod log;
//! - `pod-log-leak:<pod>:<container>:<n>`: open the log n times and forget every handle
//!   (never dropped); gives up saying how many opened when the host refuses one;
//! - `pods`: list the job's pods;
//! - `archive-put:<key>` / `archive-create:<key>`: write an object;
//! - `archive-write:<key>:<bytes>[:put]`: an object of that size, streamed or put at once;
//! - `archive-empty:<key>`: create an object and finish it without writing anything;
//! - `archive-leak:<n>`: open n writers, write to each and forget them (never finished or
//!   dropped);
//! - `kv`: set and read back a key;
//! - `annotate:<key>`: annotate the event's job with `<key>: x`;
//! - `kv-fill:<n>`: store up to n values of 1 KiB under new keys, reporting where the host
//!   stopped it;
//! - `read:<path>`: read a file through WASI;
//! - `fs-leak:<path>:<n>`: open the file n times and forget every handle; gives up saying how
//!   many opened when the host refuses one;
//! - `huge-error:<bytes>`: gives up with a reason of that many bytes, full of newlines and
//!   terminal escapes (a forged log line, repeated).
//!
//! The call returns `Ok` when the attempt succeeded and `give-up("refused: <what the host
//! said>")` when it was refused, so a test can assert both the refusal and its message.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "plugin",
});

use jobrelay::plugin::{archive, job, kv, pod_logs, sql};

struct Intruder;

fn refused(what: impl std::fmt::Debug) -> HandlerError {
    HandlerError::GiveUp(format!("refused: {what:?}"))
}

impl Guest for Intruder {
    fn init(_config: Vec<(String, String)>) -> Result<(), String> {
        Ok(())
    }

    fn handle(event: JobEvent) -> Result<(), HandlerError> {
        let attempt = event
            .annotations
            .iter()
            .find(|(k, _)| k == "jobrelay.test/try")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        let (verb, arg) = attempt.split_once(':').unwrap_or((attempt.as_str(), ""));
        match verb {
            "sql" => {
                let statement = sql::Statement {
                    sql: "SELECT 1".into(),
                    params: Vec::new(),
                };
                sql::query(arg, &statement).map(|_| ()).map_err(refused)
            }
            "sql-tx" => sql_transaction(arg),
            "huge-error" => {
                let size: usize = arg.parse().unwrap_or(1 << 20);
                let forged = "\n2026-11-24T00:00:00Z  INFO jobrelay: forged\r\u{1b}[2J";
                let mut reason = String::with_capacity(size);
                while reason.len() + forged.len() <= size {
                    reason.push_str(forged);
                }
                Err(HandlerError::GiveUp(reason))
            }
            "sql-exec" => {
                let (connection, text) = arg.split_once(':').unwrap_or((arg, ""));
                sql::query(connection, &statement(text, Vec::new()))
                    .map(|_| ())
                    .map_err(refused)
            }
            "sql-types" => sql_types(arg),
            "pods" => pod_logs::pods().map(|_| ()).map_err(refused),
            "pod-log" => {
                let (pod, container) = arg.split_once(':').unwrap_or((arg, ""));
                let log = pod_logs::open(pod, container, false).map_err(refused)?;
                log.read(1024).map(|_| ()).map_err(refused)
            }
            "pod-log-leak" => {
                let mut parts = arg.splitn(3, ':');
                let pod = parts.next().unwrap_or_default();
                let container = parts.next().unwrap_or_default();
                let count: usize = parts.next().and_then(|n| n.parse().ok()).unwrap_or(1);
                for i in 0..count {
                    match pod_logs::open(pod, container, false) {
                        Ok(log) => std::mem::forget(log),
                        Err(e) => {
                            return Err(HandlerError::GiveUp(format!(
                                "opened {i}; refused: {e:?}"
                            )));
                        }
                    }
                }
                Ok(())
            }
            "archive-put" => archive::put(arg, b"x").map_err(refused),
            "annotate" => job::annotate(arg, Some("x")).map_err(refused),
            "archive-write" => {
                // `<key>:<bytes>[:put]`: an object of that size, streamed through a writer in
                // 64 KiB chunks (or put at once); refused as soon as the host refuses a chunk.
                let mut parts = arg.splitn(3, ':');
                let key = parts.next().unwrap_or_default();
                let size: usize = parts.next().and_then(|n| n.parse().ok()).unwrap_or(0);
                if parts.next() == Some("put") {
                    return archive::put(key, &vec![7u8; size]).map_err(refused);
                }
                let writer = archive::create(key).map_err(refused)?;
                let mut left = size;
                while left > 0 {
                    let n = left.min(64 << 10);
                    writer.write(&vec![7u8; n]).map_err(refused)?;
                    left -= n;
                }
                writer.finish().map(|_| ()).map_err(refused)
            }
            "archive-leak" => {
                // Opens writers, writes to each and forgets them: never finished, never
                // dropped, as if the plugin meant to keep host memory across kept instances.
                let count: usize = arg.parse().unwrap_or(4);
                let call = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or_default();
                for i in 0..count {
                    let writer = archive::create(&format!("leak/{call}-{i}")).map_err(refused)?;
                    writer.write(&[7u8; 4096]).map_err(refused)?;
                    std::mem::forget(writer);
                }
                Ok(())
            }
            "archive-create" => {
                let writer = archive::create(arg).map_err(refused)?;
                writer.write(b"x").map_err(refused)?;
                writer.finish().map(|_| ()).map_err(refused)
            }
            "archive-empty" => {
                let writer = archive::create(arg).map_err(refused)?;
                match writer.finish().map_err(refused)? {
                    0 => Ok(()),
                    n => Err(differs(("size of an empty object", n))),
                }
            }
            "kv-fill" => {
                // Writes 1 KiB values under new keys until the host refuses one; gives up
                // saying how many were stored and why the next was refused.
                let limit: usize = arg.parse().unwrap_or(100_000);
                for i in 0..limit {
                    if let Err(e) = kv::set(&format!("fill-{i}"), &[7u8; 1024], None) {
                        return Err(HandlerError::GiveUp(format!("stored {i}; refused: {e}")));
                    }
                }
                Err(HandlerError::GiveUp(format!(
                    "stored {limit}; refused: none"
                )))
            }
            "kv" => {
                kv::set("k", b"v", None).map_err(refused)?;
                match kv::get("k").map_err(refused)? {
                    Some(v) if v == b"v" => Ok(()),
                    other => Err(HandlerError::GiveUp(format!("kv read back {other:?}"))),
                }
            }
            "fs-leak" => {
                let (path, count) = arg.rsplit_once(':').unwrap_or((arg, "1"));
                let count: usize = count.parse().unwrap_or(1);
                for i in 0..count {
                    match std::fs::File::open(path) {
                        Ok(file) => std::mem::forget(file),
                        Err(e) => {
                            return Err(HandlerError::GiveUp(format!("opened {i}; refused: {e}")));
                        }
                    }
                }
                Ok(())
            }
            "read" => std::fs::read(arg)
                .map(|_| ())
                .map_err(|e| refused(e.to_string())),
            "" => Ok(()),
            other => Err(HandlerError::GiveUp(format!("unknown attempt `{other}`"))),
        }
    }

    /// A fleet event carries no attempt to make: acknowledged.
    fn handle_fleet(_event: FleetEvent) -> Result<(), HandlerError> {
        Ok(())
    }
}

fn statement(sql: &str, params: Vec<sql::Value>) -> sql::Statement {
    sql::Statement {
        sql: sql.into(),
        params,
    }
}

/// The generated value types have no `PartialEq`; their debug forms are exact.
fn same(a: &impl std::fmt::Debug, b: &impl std::fmt::Debug) -> bool {
    format!("{a:?}") == format!("{b:?}")
}

fn differs(what: impl std::fmt::Debug) -> HandlerError {
    HandlerError::GiveUp(format!("differs: {what:?}"))
}

fn sql_transaction(connection: &str) -> Result<(), HandlerError> {
    use sql::Value::Int;
    let setup = [
        statement(
            "CREATE TABLE IF NOT EXISTS intruder_tx (x INTEGER PRIMARY KEY)",
            vec![],
        ),
        statement("DELETE FROM intruder_tx", vec![]),
    ];
    sql::transaction(connection, &setup).map_err(refused)?;
    let broken = [
        statement("INSERT INTO intruder_tx (x) VALUES (?)", vec![Int(1)]),
        statement("INSERT INTO intruder_tx (x) VALUES (?)", vec![Int(1)]),
    ];
    match sql::transaction(connection, &broken) {
        Err(sql::Error::Rejected(_)) => {}
        other => return Err(differs(("a broken transaction", other))),
    }
    let count = || {
        sql::query(
            connection,
            &statement("SELECT COUNT(*) FROM intruder_tx", vec![]),
        )
        .map(|rows| rows.rows)
        .map_err(refused)
    };
    let after_broken = count()?;
    if !same(&after_broken, &vec![vec![Int(0)]]) {
        return Err(differs((
            "rows after a rolled-back transaction",
            after_broken,
        )));
    }
    let good = [
        statement("INSERT INTO intruder_tx (x) VALUES (?)", vec![Int(1)]),
        statement(
            "INSERT INTO intruder_tx (x) VALUES (?), (?)",
            vec![Int(2), Int(3)],
        ),
    ];
    let affected = sql::transaction(connection, &good).map_err(refused)?;
    if affected != vec![1, 2] {
        return Err(differs(("rows affected", affected)));
    }
    let after_good = count()?;
    if !same(&after_good, &vec![vec![Int(3)]]) {
        return Err(differs(("rows after a committed transaction", after_good)));
    }
    Ok(())
}

fn sql_types(connection: &str) -> Result<(), HandlerError> {
    use sql::Value::{Float, Int, Null, Text};
    let dialect = sql::connection_dialect(connection).map_err(refused)?;
    let (query, expected) = match dialect {
        sql::Dialect::Mysql => (
            "SELECT 1 AS i, CAST(2.5 AS DOUBLE) AS f, 'x' AS t, NULL AS n, \
             CAST('2026-01-02 03:04:05' AS DATETIME) AS d, \
             CAST(18446744073709551615 AS UNSIGNED) AS u",
            vec![
                Int(1),
                Float(2.5),
                Text("x".into()),
                Null,
                Text("2026-01-02 03:04:05".into()),
                Text("18446744073709551615".into()),
            ],
        ),
        sql::Dialect::Sqlite => (
            "SELECT 1 AS i, 2.5 AS f, 'x' AS t, NULL AS n",
            vec![Int(1), Float(2.5), Text("x".into()), Null],
        ),
    };
    let rows = sql::query(connection, &statement(query, vec![])).map_err(refused)?;
    let got = rows.rows.into_iter().next().unwrap_or_default();
    if !same(&got, &expected) {
        return Err(differs(("values", got)));
    }
    if dialect == sql::Dialect::Mysql {
        // DECIMAL has no plugin value: the error names the column.
        match sql::query(connection, &statement("SELECT 2.5 AS d", vec![])) {
            Err(sql::Error::Rejected(m)) if m.contains("column `d`") => {}
            other => return Err(differs(("a DECIMAL column", other))),
        }
    }
    Ok(())
}

export!(Intruder);
