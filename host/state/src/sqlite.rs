//! The default backend: one SQLite file, shared by the daemon and the `dead-letters` CLI.
//!
//! # Durability
//!
//! The file is in write-ahead-log mode with `synchronous = NORMAL`. A committed transaction
//! survives the jobrelay process being killed at any point (SIGKILL, OOM kill, a panic), which
//! is the promise the delivery guarantees rest on. It is *not* synced to disk on every commit:
//! after a power loss or a kernel crash the last transactions before it may be missing, and
//! the lanes then re-deliver those events (at-least-once, never lost). `FULL` would close that
//! gap at the price of one fsync per acknowledged batch.
//!
//! # Two processes, one file
//!
//! The CLI writes replay requests while the daemon writes cursors. SQLite lets one writer in at
//! a time; the other waits up to [`BUSY_TIMEOUT`]. Every transaction that writes starts with
//! `BEGIN IMMEDIATE`, because a transaction that reads first and writes later cannot wait for
//! the lock in WAL mode: SQLite would fail it at once with "database is locked".
//!
//! # The writer thread
//!
//! The lanes' writes (acknowledged cursors, jobs seen first, a lane's batch) do not go through
//! the pool: the dialect's writer hook starts [`sqlite_writer`](super::sqlite_writer), a thread
//! with a connection of its own that runs each request over statements it keeps prepared.
//! Everything else — reads, a single cursor's save or removal, dead letters and replays,
//! install times, the plugins' key-value entries — uses the pool.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sqlx::AssertSqlSafe;
use sqlx::sqlite::{
    Sqlite, SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool,
    SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};

use super::dialect::{self, Conn, Dialect, Done, Kind, Statement, Value};
use super::error::{Location, StoreError};
use super::schema::{self, Migrated, Scripts};
use super::sql_store::SqlStore;
use super::sql_text::{Statements, Tables};
use super::sqlite_writer::SqliteWriter;

/// How long a statement waits for the other process's write lock before failing. Writes are
/// short (a batch of cursor upserts), so a wait this long means something is wrong.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// A few connections let a listing CLI or a slow reader not stall the lanes' writes; SQLite
/// serialises writers anyway, so more would only add threads.
const MAX_CONNECTIONS: u32 = 4;

/// Version 1. `IF NOT EXISTS` everywhere: `schema_version` may already exist, empty, when an
/// earlier creation was interrupted.
const SCHEMA_V1: &str = "
CREATE TABLE IF NOT EXISTS schema_version (
    version INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS cursors (
    plugin TEXT NOT NULL,
    cluster TEXT NOT NULL,
    uid TEXT NOT NULL,
    api_version TEXT NOT NULL,
    kind TEXT NOT NULL,
    namespace TEXT NOT NULL,
    name TEXT NOT NULL,
    resource_version TEXT NOT NULL,
    phase TEXT NOT NULL,
    transition_time TEXT NOT NULL,
    deleted INTEGER NOT NULL,
    PRIMARY KEY (plugin, cluster, uid)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS dead_letters (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    plugin TEXT NOT NULL,
    event_id TEXT NOT NULL,
    cluster TEXT NOT NULL,
    uid TEXT NOT NULL,
    event_json TEXT NOT NULL,
    error TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    at TEXT NOT NULL,
    replay_requested INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS dead_letters_by_plugin ON dead_letters (plugin, replay_requested);
CREATE INDEX IF NOT EXISTS dead_letters_by_job ON dead_letters (cluster, uid);
";

/// Version 2 adds the plugins' key-value entries. `expires_at` is Unix seconds, NULL for
/// entries that never expire.
const SCHEMA_V2: &str = "
CREATE TABLE IF NOT EXISTS plugin_kv (
    plugin TEXT NOT NULL,
    key TEXT NOT NULL,
    value BLOB NOT NULL,
    expires_at INTEGER,
    PRIMARY KEY (plugin, key)
);
CREATE INDEX IF NOT EXISTS plugin_kv_by_expiry ON plugin_kv (expires_at) WHERE expires_at IS NOT NULL;
";

/// Version 3 records when each plugin was first installed (RFC 3339, jobrelay's clock), so
/// that a restart is not taken for an install (see `lanes::lane`, first-install rule).
const SCHEMA_V3: &str = "
CREATE TABLE IF NOT EXISTS plugin_installs (
    plugin TEXT NOT NULL PRIMARY KEY,
    installed_at TEXT NOT NULL
);
";

/// Version 4 adds the inbox (see `inbox`): each event a lane took, once (`at` is Unix seconds,
/// for the sweep of events no plugin marks any more), and each plugin's marks.
const SCHEMA_V4: &str = "
CREATE TABLE IF NOT EXISTS inbox_events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id TEXT NOT NULL UNIQUE,
    event_json TEXT NOT NULL,
    at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS inbox_events_by_age ON inbox_events (at);
CREATE TABLE IF NOT EXISTS inbox (
    plugin TEXT NOT NULL,
    event_id TEXT NOT NULL,
    PRIMARY KEY (plugin, event_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS inbox_by_event ON inbox (event_id);
";

/// Version 5 numbers the marks (`inbox_marks`, replacing `inbox`): a plugin's inbox is read
/// back in the order the plugin took its events. The events' own order is not that: an event
/// is stored by whichever plugin's lane wrote it first, and a lane that kept up writes only
/// some of a job's versions, so a later version may be stored before an earlier one. Existing
/// marks are numbered in their events' order.
const SCHEMA_V5: &str = "
CREATE TABLE IF NOT EXISTS inbox_marks (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    plugin TEXT NOT NULL,
    event_id TEXT NOT NULL,
    UNIQUE (plugin, event_id)
);
CREATE INDEX IF NOT EXISTS inbox_marks_by_event ON inbox_marks (event_id);
INSERT OR IGNORE INTO inbox_marks (plugin, event_id)
    SELECT m.plugin, m.event_id FROM inbox m LEFT JOIN inbox_events e ON e.event_id = m.event_id
    ORDER BY e.seq, m.event_id;
DROP TABLE IF EXISTS inbox;
";

/// Version 6 keeps an event in two parts (see `inbox`): `event_json` is the event without its
/// object, `object` the object's JSON text as it is. A row written before has the whole event
/// in `event_json` and no `object`, and is read back as it was. Left out where the column is
/// there already (see `schema_scripts`), as on a server database.
const SCHEMA_V6: &str = "ALTER TABLE inbox_events ADD COLUMN object TEXT;";

/// Version 7 narrows the inbox, whose writes are most of what a trailing lane stores (see
/// `docs/BENCHMARKS.md`, "A stored take alone"): a take wrote eight B-trees (two rows, four
/// indexes, two sequence counters) and a settle three; now five and two. The events lose their `AUTOINCREMENT` (their `seq` orders nothing a reader
/// pages through; a plain rowid still grows with every insert, so the oldest events stay at
/// the low end) and their age index (the sweep finds the old end by a binary search over the
/// rowid instead, see `sqlite_writer`); the marks' unique key leads with the event, so it also
/// answers "is any plugin still marking this event", and their by-event index goes. The marks
/// keep `AUTOINCREMENT`: a reader pages a plugin's marks by `seq`, and a number handed out
/// again after the newest mark was settled could fall behind where a reader stands.
const SCHEMA_V7: &str = "
CREATE TABLE inbox_events_v7 (
    seq INTEGER PRIMARY KEY,
    event_id TEXT NOT NULL UNIQUE,
    event_json TEXT NOT NULL,
    at INTEGER NOT NULL,
    object TEXT
);
INSERT INTO inbox_events_v7 (seq, event_id, event_json, at, object)
    SELECT seq, event_id, event_json, at, object FROM inbox_events ORDER BY seq;
DROP TABLE inbox_events;
ALTER TABLE inbox_events_v7 RENAME TO inbox_events;
CREATE TABLE inbox_marks_v7 (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    plugin TEXT NOT NULL,
    event_id TEXT NOT NULL,
    UNIQUE (event_id, plugin)
);
INSERT INTO inbox_marks_v7 (seq, plugin, event_id)
    SELECT seq, plugin, event_id FROM inbox_marks ORDER BY seq;
DROP TABLE inbox_marks;
ALTER TABLE inbox_marks_v7 RENAME TO inbox_marks;
";

/// The schema scripts, version 1 first (see [`schema`]), each one entry of several statements:
/// they run inside the transaction that holds the file's write lock, so a migration is
/// written whole or not at all.
const SCHEMAS: [&str; schema::SCHEMA_VERSION as usize] = [
    SCHEMA_V1, SCHEMA_V2, SCHEMA_V3, SCHEMA_V4, SCHEMA_V5, SCHEMA_V6, SCHEMA_V7,
];

/// The SQLite dialect; its value is the state file's path.
#[derive(Debug, Clone)]
pub struct SqliteDialect {
    path: PathBuf,
}

/// The state store on one SQLite file.
pub type SqliteStore = SqlStore<SqliteDialect>;

impl SqlStore<SqliteDialect> {
    /// Opens the state file, creating it (and its folder) if missing, and creates or checks the
    /// schema. Refuses a file written by a newer jobrelay, a non-SQLite file and another
    /// program's SQLite database, each with an error naming the path.
    ///
    /// A new file is created readable by its owner only: dead letters hold whole job objects,
    /// which may carry credentials in their pod templates.
    pub async fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        let path = path.to_path_buf();
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|source| StoreError::CreateDir {
                path: parent.to_path_buf(),
                source,
            })?;
        }
        create_private_file(&path);

        let options = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(false);
        let pool = connect(&path, options).await?;
        let dialect = SqliteDialect { path };
        let location = Location::File(dialect.path.clone());
        if let Err(e) = migrate(&pool, &dialect, &location).await {
            pool.close().await;
            return Err(e);
        }
        SqlStore::from_pool(pool, dialect, location, "").await
    }

    /// The file this store works on.
    pub fn path(&self) -> &Path {
        &self.dialect.path
    }
}

impl Dialect for SqliteDialect {
    type Db = Sqlite;

    /// A transaction that reads first and writes later cannot wait for the lock in WAL mode
    /// (SQLite fails it at once with "database is locked"), so every one that writes takes
    /// the write lock at its start.
    const BEGIN_WRITE: Option<&'static str> = Some("BEGIN IMMEDIATE");
    /// `BEGIN IMMEDIATE` holds the file's write lock: no other writer until the end.
    const LOCK_ROWS: &'static str = "";
    const NOW: &'static str = "unixepoch()";
    /// The rowid (`seq`) is still used; no index is.
    const BY_PRIMARY_KEY: &'static str = "NOT INDEXED";

    fn upsert(table: &str, columns: &str, key: &[&str], row: &str, rows: usize) -> String {
        let values = vec![row; rows].join(", ");
        let updates = dialect::set_non_key(columns, key, |c| format!("excluded.{c}"));
        format!(
            "INSERT INTO {table} ({columns}) VALUES {values} ON CONFLICT ({}) DO UPDATE SET \
             {updates}",
            key.join(", ")
        )
    }

    fn insert_or_keep(table: &str, columns: &str, key: &[&str], row: &str) -> String {
        format!(
            "INSERT INTO {table} ({columns}) VALUES {row} ON CONFLICT ({}) DO NOTHING",
            key.join(", ")
        )
    }

    fn byte_length(column: &str) -> String {
        format!("LENGTH(CAST({column} AS BLOB))")
    }

    fn integer(expression: &str) -> String {
        expression.to_string()
    }

    fn delete_expired(table: &str, limit: u32) -> String {
        // DELETE … LIMIT needs a compile-time option; a rowid subquery does not.
        format!(
            "DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table} \
             WHERE expires_at IS NOT NULL AND expires_at <= {} LIMIT {limit})",
            Self::NOW
        )
    }

    /// Waiting for the other process's lock is the busy timeout's job; what is left is final.
    fn is_retryable(_: &sqlx::Error) -> bool {
        false
    }

    async fn execute(
        conn: &mut SqliteConnection,
        statement: &Statement,
    ) -> Result<Done, sqlx::Error> {
        let done = dialect::query::<Sqlite>(statement).execute(conn).await?;
        Ok(Done {
            rows_affected: done.rows_affected(),
            last_insert_id: Some(done.last_insert_rowid()),
        })
    }

    async fn fetch(
        conn: &mut Conn<Self>,
        statement: &Statement,
    ) -> Result<Vec<SqliteRow>, sqlx::Error> {
        dialect::query::<Sqlite>(statement).fetch_all(conn).await
    }

    fn decode(row: &SqliteRow, shape: &[Kind]) -> Result<Vec<Value>, sqlx::Error> {
        dialect::decode(row, shape)
    }

    const HAS_TABLE: &'static str =
        "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?";

    /// Any table: a state file holds nothing else.
    fn foreign_tables(_: &Tables) -> Statement {
        Statement::once(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
                .to_string(),
        )
    }

    /// Version 1 gave the table no key; a version is recorded once, after its scripts.
    fn record_version(table: &str) -> String {
        format!("INSERT INTO {table} (version) VALUES (?)")
    }

    /// Each version one script; version 6's only where the events have no `object` column
    /// yet (SQLite has no `ADD COLUMN IF NOT EXISTS`).
    async fn schema_scripts(
        &self,
        conn: &mut SqliteConnection,
        tables: &Tables,
    ) -> Result<Scripts, StoreError> {
        let found: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM pragma_table_info(?) WHERE name = 'object'")
                .bind(&tables.inbox_events)
                .fetch_one(conn)
                .await
                .map_err(|source| StoreError::Query {
                    store: Location::File(self.path.clone()),
                    operation: "read the inbox's columns",
                    source,
                })?;
        Ok(SCHEMAS.map(|script| match script {
            SCHEMA_V6 if found > 0 => Vec::new(),
            script => vec![script.to_string()],
        }))
    }

    async fn execute_script(conn: &mut SqliteConnection, sql: &str) -> Result<(), sqlx::Error> {
        sqlx::raw_sql(AssertSqlSafe(sql)).execute(conn).await?;
        Ok(())
    }

    type Writer = SqliteWriter;

    /// The writer thread (see [`sqlite_writer`](super::sqlite_writer)), on a connection of
    /// its own to the file.
    fn start_writer(&self, sql: &Statements<Self>) -> Result<Option<SqliteWriter>, StoreError> {
        SqliteWriter::start(&self.path, sql).map(Some)
    }
}

/// Creates the schema in a new file, or checks and migrates an existing one (see [`schema`]).
/// Runs under the write lock so a daemon and a CLI opening a new file at once do not both
/// create it, and in one transaction, so a migration is written whole or not at all.
async fn migrate(
    pool: &SqlitePool,
    dialect: &SqliteDialect,
    location: &Location,
) -> Result<(), StoreError> {
    let failed = |operation: &'static str| {
        move |source| StoreError::Query {
            store: location.clone(),
            operation,
            source,
        }
    };
    let mut tx = pool
        .begin_with("BEGIN IMMEDIATE")
        .await
        .map_err(failed("lock the file to check its schema"))?;
    if schema::migrate(dialect, &mut *tx, &Tables::new(""), location).await? == Migrated::Written {
        tx.commit().await.map_err(failed("commit the schema"))?;
    }
    Ok(())
}

/// Creates a missing state file with owner-only permissions before SQLite creates it with the
/// default ones. Best effort: if this fails, opening reports the real problem.
fn create_private_file(path: &Path) {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let _ = options.open(path);
}

/// Opens the pool, retrying while another process holds the lock.
///
/// Switching a new file to WAL needs an exclusive lock that SQLite does not wait for, so a
/// daemon and a CLI creating the file at the same instant can see "database is locked" once;
/// after that the mode is stored in the file and the switch is a no-op.
async fn connect(path: &Path, options: SqliteConnectOptions) -> Result<SqlitePool, StoreError> {
    let deadline = Instant::now() + BUSY_TIMEOUT;
    loop {
        let attempt = SqlitePoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .acquire_timeout(BUSY_TIMEOUT * 3)
            .connect_with(options.clone())
            .await;
        match attempt {
            Ok(pool) => return Ok(pool),
            Err(e) if is_busy(&e) && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(source) => {
                return Err(StoreError::Open {
                    path: path.to_path_buf(),
                    source,
                });
            }
        }
    }
}

/// SQLITE_BUSY or SQLITE_LOCKED, with any extended code.
fn is_busy(error: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = error else {
        return false;
    };
    db.code()
        .and_then(|code| code.parse::<i32>().ok())
        .is_some_and(|code| matches!(code & 0xff, 5 | 6))
}
