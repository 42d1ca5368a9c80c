//! The `jobrelay:plugin/sql` interface: statements on named connections the host owns.
//!
//! The main file defines connections by name (`sql.connections`); a manifest grants names
//! (`grants.sql: [main]`). The host builds one pool per connection at start and hands a plugin
//! only the pools of the names it was granted, so a plugin never sees a URL or a password and
//! cannot reach a database nobody granted it. One connection always exists: `embedded`, an
//! SQLite file of the plugin's own next to the state file (`embedded/<plugin>.db`), so a
//! plugin that needs a table works without any database server, and no plugin sees, fills or
//! locks another's tables through it.
//!
//! Values are bound, never spliced; `?` is the placeholder on both dialects. Results are
//! capped ([`MAX_ROWS`], [`MAX_RESULT_BYTES`]) so a careless `SELECT *` cannot blow up host
//! memory. Errors come back as values sorted into "denied", "unavailable" (worth a retry) and
//! "rejected" (the statement itself is wrong), which maps directly onto the handler's retry
//! or give-up.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions, MySqlRow};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
};
use sqlx::{AssertSqlSafe, Column, Row, ValueRef};
use wasmtime::component::{HasSelf, Linker};

use super::Grants;
use super::open_error::OpenError;
use super::{CallScope, Capability, GrantProblem, LoadScope, StoreSetup, sqlite_sandbox};
use jobrelay_bindings::jobrelay::plugin::sql as wit;
use jobrelay_bindings::v0_1::jobrelay::plugin::sql as older;
use jobrelay_contract::secret;
use serde::{Deserialize, Serialize};

use wit::{Dialect, Error as SqlError, Rows, Statement, Value};

use super::tape::{self, CallTape, FromDivergence, Taped};
use serde_json::json;

/// The `sql:` section.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SqlSettings {
    /// Connections by name; plugins are granted names, never URLs.
    #[serde(default)]
    pub connections: std::collections::BTreeMap<String, SqlConnection>,
}

/// One named SQL connection pool.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SqlConnection {
    /// `mysql://user:password@host:3306/db` (MySQL, MariaDB) or `sqlite:///path/file.db`.
    /// May be a secret reference, `env:NAME` or `file:/path`, so the password stays out of
    /// the config folder.
    pub url: String,
    /// Most connections the pool opens (default 8).
    #[serde(default = "default_sql_max_connections")]
    pub max_connections: u32,
    /// How long a statement waits for a free connection, in milliseconds (default 5000).
    #[serde(default = "default_sql_acquire_timeout")]
    pub acquire_timeout_ms: u64,
    /// MySQL/MariaDB: the longest a statement may run on the server, in milliseconds (default
    /// 60000; 0: no limit). A plugin call that times out stops waiting for its statement, but
    /// the server would run it to its end; this limit ends it there. Set on each connection
    /// (`max_statement_time` on MariaDB; `max_execution_time` on MySQL, which bounds only
    /// `SELECT`).
    #[serde(default = "default_sql_max_statement_ms")]
    pub max_statement_ms: u64,
}

impl std::fmt::Debug for SqlConnection {
    /// Never prints the URL: it may hold a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlConnection")
            .field("max_connections", &self.max_connections)
            .field("acquire_timeout_ms", &self.acquire_timeout_ms)
            .field("max_statement_ms", &self.max_statement_ms)
            .finish_non_exhaustive()
    }
}

impl SqlConnection {
    /// A connection to `url` with the default limits.
    pub fn new(url: String) -> SqlConnection {
        SqlConnection {
            url,
            max_connections: default_sql_max_connections(),
            acquire_timeout_ms: default_sql_acquire_timeout(),
            max_statement_ms: default_sql_max_statement_ms(),
        }
    }
}

fn default_sql_max_connections() -> u32 {
    8
}
fn default_sql_acquire_timeout() -> u64 {
    5_000
}
fn default_sql_max_statement_ms() -> u64 {
    60_000
}

/// Rows one query may return.
pub const MAX_ROWS: usize = 10_000;
/// Bytes of values one query may return (text and blobs counted by length, others as 8).
pub const MAX_RESULT_BYTES: usize = 16 << 20;
/// Statements one transaction may hold.
pub const MAX_STATEMENTS: usize = 1_000;
/// The connection that always exists unless the main file redefines it.
pub const EMBEDDED: &str = "embedded";

/// The SQL capability.
pub struct Sql;

/// One pool, of either dialect. Clones share the pool.
#[derive(Clone)]
pub enum Database {
    MySql(MySqlPool),
    Sqlite(SqlitePool),
}

/// Connections each plugin's `embedded` database may hold at once.
pub const EMBEDDED_CONNECTIONS: u32 = 2;

/// The named pools of the process.
#[derive(Clone, Default)]
pub struct Databases {
    by_name: Arc<BTreeMap<String, Database>>,
    /// The per-plugin `embedded` files, unless the main file defines a connection of that name.
    embedded: Option<Arc<EmbeddedFiles>>,
}

/// One SQLite file per plugin in a folder, each with its own small pool, opened on first use.
struct EmbeddedFiles {
    dir: PathBuf,
    pools: Mutex<HashMap<String, SqlitePool>>,
}

impl EmbeddedFiles {
    fn pool(&self, plugin: &str) -> SqlitePool {
        let mut pools = self.pools.lock().unwrap_or_else(|p| p.into_inner());
        pools
            .entry(plugin.to_string())
            .or_insert_with(|| {
                let options = SqliteConnectOptions::new()
                    .filename(self.dir.join(embedded_file_name(plugin)))
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    .busy_timeout(Duration::from_secs(10));
                fenced(SqlitePoolOptions::new().max_connections(EMBEDDED_CONNECTIONS))
                    .connect_lazy_with(options)
            })
            .clone()
    }
}

/// The file of a plugin's `embedded` database: `<plugin>.db`, or, for a name that is not a
/// plain file name, `plugin-<hash of the name>.db`.
pub fn embedded_file_name(plugin: &str) -> String {
    let plain = !plugin.is_empty()
        && !plugin.starts_with('.')
        && plugin
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if plain {
        format!("{plugin}.db")
    } else {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(plugin.as_bytes());
        format!("plugin-{}.db", &hex::encode(digest)[..16])
    }
}

impl std::fmt::Debug for Databases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<&str> = self.by_name.keys().map(String::as_str).collect();
        if self.embedded.is_some() {
            names.push(EMBEDDED);
        }
        f.debug_list().entries(names).finish()
    }
}

impl Databases {
    /// Builds the pools of the main file's connections, plus [`EMBEDDED`] — one SQLite file
    /// per plugin in `embedded_dir`, created when first used — unless the main file defines a
    /// connection of that name.
    ///
    /// Pools connect lazily: a database that is down at start does not stop jobrelay; the
    /// plugin's statements fail as "unavailable" (and are retried) until it is back. A URL
    /// that cannot be parsed, or a secret that cannot be resolved, is an error naming the
    /// connection, never showing the URL.
    pub fn open(settings: &SqlSettings, embedded_dir: &Path) -> Result<Databases, OpenError> {
        let mut by_name = BTreeMap::new();
        for (name, connection) in &settings.connections {
            by_name.insert(name.clone(), open_one(name, connection)?);
        }
        let embedded = (!by_name.contains_key(EMBEDDED)).then(|| {
            Arc::new(EmbeddedFiles {
                dir: embedded_dir.to_path_buf(),
                pools: Mutex::new(HashMap::new()),
            })
        });
        Ok(Databases {
            by_name: Arc::new(by_name),
            embedded,
        })
    }

    /// Whether a connection of that name exists.
    pub fn has(&self, name: &str) -> bool {
        self.by_name.contains_key(name) || (name == EMBEDDED && self.embedded.is_some())
    }

    /// The pool `plugin` uses for connection `name`: its own file for [`EMBEDDED`] (the folder
    /// is made when first needed), the shared pool for any other.
    pub fn for_plugin(&self, name: &str, plugin: &str) -> Result<Option<Database>, String> {
        if let Some(database) = self.by_name.get(name) {
            return Ok(Some(database.clone()));
        }
        match &self.embedded {
            Some(files) if name == EMBEDDED => {
                std::fs::create_dir_all(&files.dir)
                    .map_err(|e| format!("cannot create {}: {e}", files.dir.display()))?;
                Ok(Some(Database::Sqlite(files.pool(plugin))))
            }
            _ => Ok(None),
        }
    }

    /// Closes every pool (at shutdown, so connections end cleanly).
    pub async fn close(&self) {
        for database in self.by_name.values() {
            match database {
                Database::MySql(pool) => pool.close().await,
                Database::Sqlite(pool) => pool.close().await,
            }
        }
        let embedded: Vec<SqlitePool> = self
            .embedded
            .iter()
            .flat_map(|files| {
                let pools = files.pools.lock().unwrap_or_else(|p| p.into_inner());
                pools.values().cloned().collect::<Vec<_>>()
            })
            .collect();
        for pool in embedded {
            pool.close().await;
        }
    }
}

fn open_one(name: &str, connection: &SqlConnection) -> Result<Database, OpenError> {
    let url = secret::resolve(&connection.url).map_err(|source| OpenError::SqlSecret {
        connection: name.to_string(),
        source,
    })?;
    let bad_url = |why| OpenError::SqlUrl {
        connection: name.to_string(),
        why,
    };
    let acquire = Duration::from_millis(connection.acquire_timeout_ms.max(1));
    if url.starts_with("mysql:") || url.starts_with("mariadb:") {
        let url = url.replacen("mariadb:", "mysql:", 1);
        // The parse error is not shown: it can quote the URL, password included.
        let options =
            MySqlConnectOptions::from_str(&url).map_err(|_| bad_url("not a valid mysql:// URL"))?;
        let limit_ms = connection.max_statement_ms;
        let pool = MySqlPoolOptions::new()
            .max_connections(connection.max_connections)
            .acquire_timeout(acquire)
            .after_connect(move |conn, _meta| Box::pin(limit_statements(conn, limit_ms)))
            .connect_lazy_with(options);
        Ok(Database::MySql(pool))
    } else if url.starts_with("sqlite:") {
        let options = SqliteConnectOptions::from_str(&url)
            .map_err(|_| bad_url("not a valid sqlite:// URL"))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(acquire);
        let pool = fenced(
            SqlitePoolOptions::new()
                .max_connections(connection.max_connections)
                .acquire_timeout(acquire),
        )
        .connect_lazy_with(options);
        Ok(Database::Sqlite(pool))
    } else {
        Err(bad_url("must start with mysql://, mariadb:// or sqlite:"))
    }
}

/// Bounds how long the server runs any statement of a new MySQL/MariaDB connection: a call
/// that timed out has stopped waiting, and without this the server would run its statement to
/// the end, holding locks and a core. MariaDB bounds every statement (`max_statement_time`, in
/// seconds); MySQL only `SELECT` (`max_execution_time`, in ms). 0: no limit.
async fn limit_statements(
    conn: &mut sqlx::MySqlConnection,
    limit_ms: u64,
) -> Result<(), sqlx::Error> {
    use sqlx::Executor;
    if limit_ms == 0 {
        return Ok(());
    }
    let version: String = sqlx::query_scalar("SELECT VERSION()")
        .fetch_one(&mut *conn)
        .await?;
    let set = if version.contains("MariaDB") {
        format!(
            "SET SESSION max_statement_time = {}",
            limit_ms as f64 / 1000.0
        )
    } else {
        format!("SET SESSION max_execution_time = {limit_ms}")
    };
    conn.execute(AssertSqlSafe(set)).await.map(|_| ())
}

/// SQLite pool options whose every new connection is fenced ([`sqlite_sandbox::fence`]).
fn fenced(options: SqlitePoolOptions) -> SqlitePoolOptions {
    options.after_connect(|conn, _meta| Box::pin(sqlite_sandbox::fence(conn)))
}

impl Capability for Sql {
    fn name(&self) -> &'static str {
        "sql"
    }

    fn prepare(&self, grants: &mut Grants, load: &LoadScope<'_>) -> Result<(), GrantProblem> {
        for name in &grants.sql {
            if !load.services.sql.has(name) {
                return Err(format!(
                    "connection `{name}` is not defined in the main file's `sql.connections` \
                     (defined: {:?})",
                    load.services.sql
                )
                .into());
            }
        }
        Ok(())
    }

    fn configure(&self, call: &CallScope<'_>, setup: &mut StoreSetup) -> Result<(), GrantProblem> {
        let mut granted = Vec::new();
        for name in &call.grants.sql {
            if let Some(database) = call.services.sql.for_plugin(name, call.plugin)? {
                granted.push((name.clone(), database));
            }
        }
        setup.state.sql = SqlAccess {
            granted,
            deadline: call.deadline,
            unavailable: None,
            tape: call.tape(),
        };
        Ok(())
    }
}

/// The pools one call may use.
pub struct SqlAccess {
    granted: Vec<(String, Database)>,
    /// The call's deadline: no SQLite statement runs past it.
    deadline: Instant,
    /// The first "unavailable" answer of the call (see [`super::CapabilityState::unavailable`]).
    unavailable: Option<String>,
    /// The run's tape, if calls are recorded or replayed.
    tape: Option<CallTape>,
}

impl Default for SqlAccess {
    fn default() -> SqlAccess {
        SqlAccess {
            granted: Vec::new(),
            deadline: Instant::now(),
            unavailable: None,
            tape: None,
        }
    }
}

/// Links the interface (both served versions) into a linker whose store data gives the
/// call's [`SqlAccess`] through `get`.
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut SqlAccess,
) -> wasmtime::Result<()> {
    wit::add_to_linker::<T, HasSelf<SqlAccess>>(linker, get)?;
    older::add_to_linker::<T, HasSelf<SqlAccess>>(linker, get)
}

impl SqlAccess {
    /// The first answer of the call that said a database could not be reached.
    pub fn unavailable(&self) -> Option<&str> {
        self.unavailable.as_deref()
    }

    /// Passes an answer through, noting it if it says "unavailable".
    fn note<T>(&mut self, answer: Result<T, SqlError>) -> Result<T, SqlError> {
        if let Err(e @ SqlError::Unavailable(_)) = &answer
            && self.unavailable.is_none()
        {
            self.unavailable = Some(e.to_string());
        }
        answer
    }

    fn database(&self, name: &str) -> Result<&Database, SqlError> {
        self.granted
            .iter()
            .find(|(granted, _)| granted == name)
            .map(|(_, database)| database)
            .ok_or_else(|| {
                SqlError::Denied(format!(
                    "connection `{name}` is not granted to this plugin (grants.sql)"
                ))
            })
    }
}

/// Runs one of the dialect functions on a connection of the granted pool — a SQLite one
/// bounded by the call's deadline — through the run's tape if there is one, and notes an
/// "unavailable" answer for the load-time retry rule (see [`super::CapabilityState::note`]).
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

/// `"mysql"` or `"sqlite"`.
impl Taped for Dialect {
    fn to_tape(&self) -> serde_json::Value {
        json!(match self {
            Dialect::Mysql => "mysql",
            Dialect::Sqlite => "sqlite",
        })
    }

    fn from_tape(value: &serde_json::Value) -> Result<Dialect, String> {
        match value.as_str() {
            Some("mysql") => Ok(Dialect::Mysql),
            Some("sqlite") => Ok(Dialect::Sqlite),
            _ => Err("expected \"mysql\" or \"sqlite\"".into()),
        }
    }
}

/// A statement on a tape: `{"sql": "...", "params": [...]}`.
impl Taped for Statement {
    fn to_tape(&self) -> serde_json::Value {
        let params: Vec<serde_json::Value> = self.params.iter().map(Taped::to_tape).collect();
        json!({ "sql": self.sql, "params": params })
    }

    fn from_tape(value: &serde_json::Value) -> Result<Statement, String> {
        Ok(Statement {
            sql: String::from_tape(tape::field(value, "sql")?)?,
            params: tape::list_from_tape(tape::field(value, "params")?, Value::from_tape)?,
        })
    }
}

/// A value on a tape: `null`, an integer, a number with a fraction (`2.0`), a string, or
/// `{"float": "NaN"}` for a float JSON cannot hold, `{"base64": "..."}` for a blob.
impl Taped for Value {
    fn to_tape(&self) -> serde_json::Value {
        match self {
            Value::Null => serde_json::Value::Null,
            Value::Int(v) => json!(v),
            Value::Float(v) if v.is_finite() => json!(v),
            Value::Float(v) => json!({ "float": v.to_string() }),
            Value::Text(v) => json!(v),
            Value::Blob(v) => tape::base64_to_tape(v),
        }
    }

    fn from_tape(value: &serde_json::Value) -> Result<Value, String> {
        use serde_json::Value as Json;
        match value {
            Json::Null => Ok(Value::Null),
            Json::Number(n) if n.is_i64() => Ok(Value::Int(n.as_i64().unwrap_or_default())),
            Json::Number(n) => n
                .as_f64()
                .map(Value::Float)
                .ok_or_else(|| format!("{n} is not a value")),
            Json::String(text) => Ok(Value::Text(text.clone())),
            Json::Object(object) if object.contains_key("float") => object["float"]
                .as_str()
                .and_then(|f| f.parse().ok())
                .map(Value::Float)
                .ok_or_else(|| "`float` must be a number written as a string".to_string()),
            Json::Object(object) if object.contains_key("base64") => {
                tape::bytes_from_tape(value).map(Value::Blob)
            }
            other => Err(format!("{other} is not a value")),
        }
    }
}

/// Rows on a tape: `{"columns": [...], "rows": [[...], ...]}`.
impl Taped for Rows {
    fn to_tape(&self) -> serde_json::Value {
        let rows: Vec<Vec<serde_json::Value>> = self
            .rows
            .iter()
            .map(|row| row.iter().map(Taped::to_tape).collect())
            .collect();
        json!({ "columns": self.columns, "rows": rows })
    }

    fn from_tape(value: &serde_json::Value) -> Result<Rows, String> {
        Ok(Rows {
            columns: tape::list_from_tape(tape::field(value, "columns")?, String::from_tape)?,
            rows: tape::list_from_tape(tape::field(value, "rows")?, |row| {
                tape::list_from_tape(row, Value::from_tape)
            })?,
        })
    }
}

/// `{"denied": "..."}`, `{"unavailable": "..."}` or `{"rejected": "..."}`.
impl Taped for SqlError {
    fn to_tape(&self) -> serde_json::Value {
        match self {
            SqlError::Denied(m) => tape::case_to_tape("denied", m),
            SqlError::Unavailable(m) => tape::case_to_tape("unavailable", m),
            SqlError::Rejected(m) => tape::case_to_tape("rejected", m),
        }
    }

    fn from_tape(value: &serde_json::Value) -> Result<SqlError, String> {
        match tape::case_from_tape(value)? {
            ("denied", m) => Ok(SqlError::Denied(m.into())),
            ("unavailable", m) => Ok(SqlError::Unavailable(m.into())),
            ("rejected", m) => Ok(SqlError::Rejected(m.into())),
            (other, _) => Err(format!("`{other}` is not an sql error")),
        }
    }
}

/// A diverged replay is answered as a statement the database refused: the plugin's error
/// path runs, and nothing retries it as a passing outage.
impl FromDivergence for SqlError {
    fn from_divergence(reason: String) -> SqlError {
        SqlError::Rejected(reason)
    }
}

impl older::Host for SqlAccess {
    async fn connection_dialect(
        &mut self,
        connection: String,
    ) -> Result<older::Dialect, older::Error> {
        wit::Host::connection_dialect(self, connection)
            .await
            .map(Into::into)
            .map_err(Into::into)
    }

    async fn execute(
        &mut self,
        connection: String,
        statement: older::Statement,
    ) -> Result<u64, older::Error> {
        wit::Host::execute(self, connection, statement.into())
            .await
            .map_err(Into::into)
    }

    async fn query(
        &mut self,
        connection: String,
        statement: older::Statement,
    ) -> Result<older::Rows, older::Error> {
        wit::Host::query(self, connection, statement.into())
            .await
            .map(Into::into)
            .map_err(Into::into)
    }

    async fn transaction(
        &mut self,
        connection: String,
        statements: Vec<older::Statement>,
    ) -> Result<Vec<u64>, older::Error> {
        let statements = statements.into_iter().map(Into::into).collect();
        wit::Host::transaction(self, connection, statements)
            .await
            .map_err(Into::into)
    }
}

/// A connection of `pool` whose statements stop at `deadline` (the call's), so a statement
/// cannot outlive its call and keep the connection and a core busy.
async fn bounded(
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
fn classify(error: sqlx::Error) -> SqlError {
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
        mod $module {
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

            pub(super) async fn execute(
                pool: &mut $conn,
                statement: Statement,
            ) -> Result<u64, SqlError> {
                let done = bind(statement.sql, statement.params)
                    .execute(&mut *pool)
                    .await
                    .map_err(classify)?;
                Ok(done.rows_affected())
            }

            pub(super) async fn query(
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

            pub(super) async fn transaction(
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

/// A MySQL column as a WIT value. The driver checks types strictly, so the decodings are tried
/// from the most to the least specific; temporal types come back as text.
fn decode_mysql(row: &MySqlRow, index: usize) -> Result<Value, SqlError> {
    let raw = row.try_get_raw(index).map_err(classify)?;
    if raw.is_null() {
        return Ok(Value::Null);
    }
    if let Ok(v) = row.try_get::<i64, _>(index) {
        return Ok(Value::Int(v));
    }
    if let Ok(v) = row.try_get::<u64, _>(index) {
        return Ok(i64::try_from(v).map_or_else(|_| Value::Text(v.to_string()), Value::Int));
    }
    if let Ok(v) = row.try_get::<f64, _>(index) {
        return Ok(Value::Float(v));
    }
    if let Ok(v) = row.try_get::<f32, _>(index) {
        return Ok(Value::Float(f64::from(v)));
    }
    if let Ok(v) = row.try_get::<bool, _>(index) {
        return Ok(Value::Int(i64::from(v)));
    }
    if let Ok(v) = row.try_get::<String, _>(index) {
        return Ok(Value::Text(v));
    }
    if let Ok(v) = row.try_get::<chrono::NaiveDateTime, _>(index) {
        return Ok(Value::Text(v.format("%Y-%m-%d %H:%M:%S%.f").to_string()));
    }
    if let Ok(v) = row.try_get::<chrono::DateTime<chrono::Utc>, _>(index) {
        return Ok(Value::Text(v.format("%Y-%m-%d %H:%M:%S%.f").to_string()));
    }
    if let Ok(v) = row.try_get::<chrono::NaiveDate, _>(index) {
        return Ok(Value::Text(v.to_string()));
    }
    if let Ok(v) = row.try_get::<Vec<u8>, _>(index) {
        return Ok(Value::Blob(v));
    }
    Err(unsupported(
        row.columns()[index].name(),
        &row.columns()[index].type_info().to_string(),
    ))
}

/// An SQLite value as a WIT value (SQLite types each value, not each column).
fn decode_sqlite(row: &SqliteRow, index: usize) -> Result<Value, SqlError> {
    let raw = row.try_get_raw(index).map_err(classify)?;
    if raw.is_null() {
        return Ok(Value::Null);
    }
    let type_name = raw.type_info().to_string();
    let value = match type_name.as_str() {
        "INTEGER" | "BOOLEAN" | "INT8" => row.try_get::<i64, _>(index).map(Value::Int),
        "REAL" => row.try_get::<f64, _>(index).map(Value::Float),
        "BLOB" => row.try_get::<Vec<u8>, _>(index).map(Value::Blob),
        _ => row.try_get::<String, _>(index).map(Value::Text),
    };
    value.map_err(|_| unsupported(row.columns()[index].name(), &type_name))
}

fn unsupported(column: &str, type_name: &str) -> SqlError {
    SqlError::Rejected(format!(
        "column `{column}` has type {type_name}, which has no plugin value; CAST it to a \
         number or text in the query"
    ))
}
