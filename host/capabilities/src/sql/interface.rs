//! The `jobrelay:plugin/sql` calls as plugins built for the current WIT version make them:
//! each finds the granted pool, runs on one of its connections through the run's tape, and
//! notes an "unavailable" answer.
//!
//! Apart from the driver and the pools so that what a plugin may ask, and what a tape sees of
//! it, reads on its own.

use serde_json::json;

use super::driver::{bounded, classify, mysql, sqlite};
use super::{Database, MAX_STATEMENTS, SqlAccess};
use crate::tape::{self, Taped};
use jobrelay_bindings::jobrelay::plugin::sql as wit;

use wit::{Dialect, Error as SqlError, Rows, Statement};

/// Runs one of the dialect functions on a connection of the granted pool — a SQLite one
/// bounded by the call's deadline — through the run's tape if there is one, and notes an
/// "unavailable" answer for the load-time retry rule (see
/// [`crate::CapabilityState::unavailable`]).
macro_rules! on_connection {
    ($state:ident, $name:literal, $connection:ident, $call:ident($arg:ident), $args:expr) => {{
        let deadline = $state.deadline;
        let database = $state.database(&$connection)?.clone();
        // Written before the statement moves into the call, only when there is a tape.
        let args = $state.tape.as_ref().map(|_| $args());
        let real = async {
            match database {
                Database::MySql(pool) => match pool.acquire().await {
                    Ok(mut conn) => mysql::$call(&mut conn, $arg).await,
                    Err(e) => Err(classify(e)),
                },
                Database::Sqlite(pool) => match bounded(&pool, deadline).await {
                    Ok(mut conn) => sqlite::$call(&mut conn, $arg).await,
                    Err(e) => Err(e),
                },
            }
        };
        let answer = tape::through(
            $state.tape.as_ref(),
            $name,
            || args.unwrap_or_default(),
            real,
        )
        .await;
        $state.note(answer)
    }};
}

impl wit::Host for SqlAccess {
    /// Taped too, although no service is asked: a replay's connections are stand-ins, and the
    /// plugin must see the dialect it saw when the tape was recorded.
    async fn connection_dialect(&mut self, connection: String) -> Result<Dialect, SqlError> {
        let dialect = match self.database(&connection)? {
            Database::MySql(_) => Dialect::Mysql,
            Database::Sqlite(_) => Dialect::Sqlite,
        };
        let args = || json!({ "connection": connection });
        let answer = async { Ok(dialect) };
        tape::through(self.tape.as_ref(), "sql.connection-dialect", args, answer).await
    }

    async fn execute(&mut self, connection: String, statement: Statement) -> Result<u64, SqlError> {
        let args = || json!({ "connection": connection, "statement": statement.to_tape() });
        on_connection!(self, "sql.execute", connection, execute(statement), args)
    }

    async fn query(&mut self, connection: String, statement: Statement) -> Result<Rows, SqlError> {
        let args = || json!({ "connection": connection, "statement": statement.to_tape() });
        on_connection!(self, "sql.query", connection, query(statement), args)
    }

    async fn transaction(
        &mut self,
        connection: String,
        statements: Vec<Statement>,
    ) -> Result<Vec<u64>, SqlError> {
        if statements.len() > MAX_STATEMENTS {
            return Err(SqlError::Rejected(format!(
                "a transaction holds at most {MAX_STATEMENTS} statements, got {}",
                statements.len()
            )));
        }
        let args = || {
            let list: Vec<serde_json::Value> = statements.iter().map(Taped::to_tape).collect();
            json!({ "connection": connection, "statements": list })
        };
        on_connection!(
            self,
            "sql.transaction",
            connection,
            transaction(statements),
            args
        )
    }
}
