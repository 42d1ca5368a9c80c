//! Statements on one connection of either dialect: values bound, rows read within the result
//! caps, transactions, and driver errors sorted into the three kinds a plugin sees.
//!
//! Apart from the interface because it knows the drivers and nothing of grants or tapes. The
//! dialects' query and row types differ, the logic does not: one template serves both.

use sqlx::mysql::MySqlRow;
use sqlx::sqlite::{SqlitePool, SqliteRow};
use sqlx::{AssertSqlSafe, Column, Row};

use super::decode::{decode_mysql, decode_sqlite};
use super::{MAX_RESULT_BYTES, MAX_ROWS};
use crate::sqlite_sandbox;
use jobrelay_bindings::jobrelay::plugin::sql::{Error as SqlError, Rows, Statement, Value};

/// A connection of `pool` whose statements stop at `deadline` (the call's), so a statement
/// cannot outlive its call and keep the connection and a core busy.
pub(super) async fn bounded(
    pool: &SqlitePool,
    deadline: std::time::Instant,
) -> Result<sqlx::pool::PoolConnection<sqlx::Sqlite>, SqlError> {
    let mut conn = pool.acquire().await.map_err(classify)?;
    sqlite_sandbox::bound_to(&mut conn, deadline)
        .await
        .map_err(classify)?;
    Ok(conn)
}

/// Sorts a driver error into the three kinds the plugin sees.
pub(super) fn classify(error: sqlx::Error) -> SqlError {
    match &error {
        sqlx::Error::Database(db) => {
            let code = db.code().unwrap_or_default();
            let message = db.message();
            // MySQL/MariaDB: 1205 lock wait timeout, 1213 deadlock (both roll back and
            // succeed when retried); SQLite: 5 busy, 6 locked.
            let transient = matches!(&*code, "40001" | "HY000" if message.contains("Deadlock") || message.contains("Lock wait"))
                || matches!(&*code, "5" | "6" | "261" | "517");
            if transient {
                SqlError::Unavailable(format!("database: {message}"))
            } else {
                SqlError::Rejected(format!("database: {message} (code {code})"))
            }
        }
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::WorkerCrashed => SqlError::Unavailable(format!("{error}")),
        _ => SqlError::Rejected(format!("{error}")),
    }
}

/// Counts a value against [`MAX_RESULT_BYTES`].
fn value_bytes(value: &Value) -> usize {
    match value {
        Value::Text(text) => text.len(),
        Value::Blob(blob) => blob.len(),
        _ => 8,
    }
}

fn too_large(what: String) -> SqlError {
    SqlError::Rejected(format!(
        "the result is too large ({what}; at most {MAX_ROWS} rows and {} MiB): page with LIMIT",
        MAX_RESULT_BYTES >> 20
    ))
}

/// One implementation per dialect, generated from one template: the drivers' query and row
/// types differ, the logic does not.
macro_rules! dialect_impl {
    ($module:ident, $db:ty, $conn:ty, $row:ty, $decode:path) => {
        pub(super) mod $module {
            use super::*;

            fn bind<'q>(
                sql: String,
                params: Vec<Value>,
            ) -> sqlx::query::Query<'q, $db, <$db as sqlx::Database>::Arguments> {
                let mut query = sqlx::query(AssertSqlSafe(sql));
                for param in params {
                    query = match param {
                        Value::Null => query.bind(None::<i64>),
                        Value::Int(v) => query.bind(v),
                        Value::Float(v) => query.bind(v),
                        Value::Text(v) => query.bind(v),
                        Value::Blob(v) => query.bind(v),
                    };
                }
                query
            }

            pub(in crate::sql) async fn execute(
                pool: &mut $conn,
                statement: Statement,
            ) -> Result<u64, SqlError> {
                let done = bind(statement.sql, statement.params)
                    .execute(&mut *pool)
                    .await
                    .map_err(classify)?;
                Ok(done.rows_affected())
            }

            pub(in crate::sql) async fn query(
                pool: &mut $conn,
                statement: Statement,
            ) -> Result<Rows, SqlError> {
                use futures::TryStreamExt;
                let query = bind(statement.sql, statement.params);
                let mut stream = query.fetch(&mut *pool);
                let mut columns: Option<Vec<String>> = None;
                let mut rows = Vec::new();
                let mut bytes = 0usize;
                while let Some(row) = stream.try_next().await.map_err(classify)? {
                    let row: $row = row;
                    if columns.is_none() {
                        columns =
                            Some(row.columns().iter().map(|c| c.name().to_string()).collect());
                    }
                    if rows.len() == MAX_ROWS {
                        return Err(too_large(format!("more than {MAX_ROWS} rows")));
                    }
                    let mut values = Vec::with_capacity(row.len());
                    for index in 0..row.len() {
                        let value = $decode(&row, index)?;
                        bytes += value_bytes(&value);
                        values.push(value);
                    }
                    if bytes > MAX_RESULT_BYTES {
                        return Err(too_large(format!("over {} bytes", MAX_RESULT_BYTES)));
                    }
                    rows.push(values);
                }
                Ok(Rows {
                    columns: columns.unwrap_or_default(),
                    rows,
                })
            }

            pub(in crate::sql) async fn transaction(
                pool: &mut $conn,
                statements: Vec<Statement>,
            ) -> Result<Vec<u64>, SqlError> {
                let mut tx = sqlx::Connection::begin(&mut *pool)
                    .await
                    .map_err(classify)?;
                let mut affected = Vec::with_capacity(statements.len());
                for statement in statements {
                    let done = bind(statement.sql, statement.params)
                        .execute(&mut *tx)
                        .await
                        .map_err(classify)?;
                    affected.push(done.rows_affected());
                }
                tx.commit().await.map_err(classify)?;
                Ok(affected)
            }
        }
    };
}

dialect_impl!(
    mysql,
    sqlx::MySql,
    sqlx::MySqlConnection,
    MySqlRow,
    decode_mysql
);
dialect_impl!(
    sqlite,
    sqlx::Sqlite,
    sqlx::SqliteConnection,
    SqliteRow,
    decode_sqlite
);
