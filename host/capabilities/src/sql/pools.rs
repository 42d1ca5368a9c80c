//! The process's SQL pools: one per named connection of the main file, and a SQLite file of
//! its own for each plugin behind `embedded`.
//!
//! Apart from the calls that use them because pools outlive every call: built once at start
//! (connecting lazily, so a database that is down does not stop jobrelay), shared by every
//! plugin version, closed at shutdown. Every SQLite connection they open is fenced
//! (`sqlite_sandbox`); every MySQL/MariaDB one has its statements bounded on the server.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use sqlx::AssertSqlSafe;
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};

use super::settings::{SqlConnection, SqlSettings};
use crate::GrantProblem;
use crate::open_error::OpenError;
use crate::sqlite_sandbox;
use jobrelay_contract::secret;

/// The connection that always exists unless the main file redefines it.
pub const EMBEDDED: &str = "embedded";

/// One pool, of either dialect. Clones share the pool.
#[derive(Clone)]
pub enum Database {
    /// A MySQL or MariaDB connection of `sql.connections`.
    MySql(MySqlPool),
    /// An SQLite file: a connection of `sql.connections`, or a plugin's `embedded` file,
    /// fenced by [`sqlite_sandbox`].
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
        let mut pools = self.pools.lock();
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
    pub fn for_plugin(&self, name: &str, plugin: &str) -> Result<Option<Database>, GrantProblem> {
        if let Some(database) = self.by_name.get(name) {
            return Ok(Some(database.clone()));
        }
        match &self.embedded {
            Some(files) if name == EMBEDDED => {
                std::fs::create_dir_all(&files.dir).map_err(|e| {
                    GrantProblem::io(format!("cannot create {}", files.dir.display()), e)
                })?;
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
                let pools = files.pools.lock();
                pools.values().cloned().collect::<Vec<_>>()
            })
            .collect();
        for pool in embedded {
            pool.close().await;
        }
    }
}

/// What a connection's URL says, resolved and parsed, before any pool.
enum Options {
    MySql(MySqlConnectOptions),
    Sqlite(SqliteConnectOptions),
}

/// Resolves the URL's secret and parses it: every way a connection can be refused before a
/// pool exists, named with the connection.
fn options(name: &str, connection: &SqlConnection) -> Result<Options, OpenError> {
    let url = secret::resolve(&connection.url).map_err(|source| OpenError::SqlSecret {
        connection: name.to_string(),
        source,
    })?;
    let bad_url = |why| OpenError::SqlUrl {
        connection: name.to_string(),
        why,
    };
    if url.starts_with("mysql:") || url.starts_with("mariadb:") {
        let url = url.replacen("mariadb:", "mysql:", 1);
        // The parse error is not shown: it can quote the URL, password included.
        MySqlConnectOptions::from_str(&url)
            .map(Options::MySql)
            .map_err(|_| bad_url("not a valid mysql:// URL"))
    } else if url.starts_with("sqlite:") {
        SqliteConnectOptions::from_str(&url)
            .map(Options::Sqlite)
            .map_err(|_| bad_url("not a valid sqlite:// URL"))
    } else {
        Err(bad_url("must start with mysql://, mariadb:// or sqlite:"))
    }
}

impl Databases {
    /// What [`Databases::open`] refuses, found without building a pool (so without a runtime):
    /// a secret reference that does not resolve, a URL that does not parse. For a running
    /// daemon's edit of the `sql:` section, judged as the next start will judge it.
    pub fn check(settings: &SqlSettings) -> Result<(), OpenError> {
        for (name, connection) in &settings.connections {
            options(name, connection)?;
        }
        Ok(())
    }
}

fn open_one(name: &str, connection: &SqlConnection) -> Result<Database, OpenError> {
    let acquire = Duration::from_millis(connection.acquire_timeout_ms.max(1));
    match options(name, connection)? {
        Options::MySql(options) => {
            let limit_ms = connection.max_statement_ms;
            let pool = MySqlPoolOptions::new()
                .max_connections(connection.max_connections)
                .acquire_timeout(acquire)
                .after_connect(move |conn, _meta| Box::pin(limit_statements(conn, limit_ms)))
                .connect_lazy_with(options);
            Ok(Database::MySql(pool))
        }
        Options::Sqlite(options) => {
            let options = options
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
        }
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
