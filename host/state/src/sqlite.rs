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

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sqlx::sqlite::{
    SqliteArguments, SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteRow, SqliteSynchronous,
};
use sqlx::{Sqlite, query::Query};

use super::cursor::Cursor;
use super::dead_letter::{DeadLetter, Selection};
use super::error::StoreError;
use super::rows;
use super::store::{CursorStore, PluginKv};
use jobrelay_contract::event::JobEvent;

/// The schema this build writes. A file with a higher version is refused; a lower one is
/// migrated forward on open.
pub const SCHEMA_VERSION: i64 = 3;

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

/// The schema scripts, version 1 first: a file at version N runs the scripts after the Nth.
const SCHEMAS: [&str; 3] = [SCHEMA_V1, SCHEMA_V2, SCHEMA_V3];

const UPSERT_CURSOR: &str = "
INSERT INTO cursors (plugin, cluster, uid, api_version, kind, namespace, name,
                     resource_version, phase, transition_time, deleted)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (plugin, cluster, uid) DO UPDATE SET
    api_version = excluded.api_version,
    kind = excluded.kind,
    namespace = excluded.namespace,
    name = excluded.name,
    resource_version = excluded.resource_version,
    phase = excluded.phase,
    transition_time = excluded.transition_time,
    deleted = excluded.deleted";

const REMEMBER_JOB: &str = "
INSERT INTO cursors (plugin, cluster, uid, api_version, kind, namespace, name,
                     resource_version, phase, transition_time, deleted)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (plugin, cluster, uid) DO NOTHING";

/// The selection of [`Selection`] in SQL (a macro, because `concat!` needs literals and sqlx
/// takes only `&'static str`). Binds: plugin, plugin, select-all flag, seqs as a JSON array;
/// `json_each` keeps the seq list one bound parameter instead of SQL built by hand.
macro_rules! selection_where {
    () => {
        "(? IS NULL OR plugin = ?) AND (? OR seq IN (SELECT value FROM json_each(?)))"
    };
}

macro_rules! dead_letter_columns {
    () => {
        "seq, plugin, event_json, error, attempts, at, replay_requested"
    };
}

const LIST_DEAD_LETTERS: &str = concat!(
    "SELECT ",
    dead_letter_columns!(),
    " FROM dead_letters WHERE (? IS NULL OR plugin = ?) ORDER BY seq"
);
const DROP_SELECTED: &str = concat!("DELETE FROM dead_letters WHERE ", selection_where!());
const MARK_SELECTED: &str = concat!(
    "UPDATE dead_letters SET replay_requested = 1 WHERE ",
    selection_where!()
);
/// Binds: plugin, take-every-cluster flag, clusters as a JSON array.
const TAKE_REPLAYS: &str = concat!(
    "DELETE FROM dead_letters WHERE plugin = ? AND replay_requested = 1 \
     AND (? OR cluster IN (SELECT value FROM json_each(?))) RETURNING ",
    dead_letter_columns!()
);

/// The state store on one SQLite file. Cheap to share: clone the `Arc` it lives in.
#[derive(Debug)]
pub struct SqliteStore {
    pool: SqlitePool,
    path: PathBuf,
}

impl SqliteStore {
    /// Run one statement over a dead-letter selection; returns how many rows it touched.
    async fn execute_selected(
        &self,
        sql: &'static str,
        selection: &Selection<'_>,
        what: &'static str,
    ) -> Result<u64, StoreError> {
        let done = bind_selection(sqlx::query(sql), selection)?
            .execute(&self.pool)
            .await
            .map_err(self.failed(what))?;
        Ok(done.rows_affected())
    }

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
        let store = SqliteStore { pool, path };
        if let Err(e) = store.migrate().await {
            store.pool.close().await;
            return Err(e);
        }
        Ok(store)
    }

    /// The file this store works on.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Creates the schema in a new file, or checks the version of an existing one. Runs under
    /// the write lock so a daemon and a CLI opening a new file at once do not both create it.
    async fn migrate(&self) -> Result<(), StoreError> {
        let mut tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(self.failed("lock the file to check its schema"))?;

        let has_version_table: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version')",
        )
        .fetch_one(&mut *tx)
        .await
        .map_err(self.failed("read the schema"))?;

        // How many of `SCHEMAS` the file already has (0: a new file).
        let mut migrate_from = 0;
        if has_version_table {
            let found: Option<i64> = sqlx::query_scalar("SELECT MAX(version) FROM schema_version")
                .fetch_one(&mut *tx)
                .await
                .map_err(self.failed("read the schema version"))?;
            match found {
                Some(v) if v > SCHEMA_VERSION => {
                    return Err(StoreError::NewerSchema {
                        path: self.path.clone(),
                        found: v,
                        supported: SCHEMA_VERSION,
                    });
                }
                Some(SCHEMA_VERSION) => return Ok(()),
                Some(v @ 1..SCHEMA_VERSION) => migrate_from = v as usize,
                Some(v) => {
                    return Err(StoreError::Corrupt {
                        path: self.path.clone(),
                        what: "schema version",
                        detail: format!("version {v} never existed"),
                    });
                }
                // The table exists but is empty: treat the file as new.
                None => {}
            }
        } else {
            let tables: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
            )
            .fetch_one(&mut *tx)
            .await
            .map_err(self.failed("read the schema"))?;
            if tables > 0 {
                return Err(StoreError::NotAStateFile {
                    path: self.path.clone(),
                });
            }
        }

        // Every script from the file's version on, in order: all of them for a new file.
        for script in SCHEMAS.iter().skip(migrate_from).copied() {
            sqlx::raw_sql(script)
                .execute(&mut *tx)
                .await
                .map_err(self.failed("create or migrate the schema"))?;
        }
        sqlx::query("INSERT INTO schema_version (version) VALUES (?)")
            .bind(SCHEMA_VERSION)
            .execute(&mut *tx)
            .await
            .map_err(self.failed("record the schema version"))?;
        tx.commit()
            .await
            .map_err(self.failed("commit the schema"))?;
        Ok(())
    }

    /// Maps a sqlx error to one that names the file and what was being done.
    fn failed(&self, operation: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError + '_ {
        move |source| StoreError::Query {
            path: self.path.clone(),
            operation,
            source,
        }
    }

    fn corrupt(&self, what: &'static str, detail: impl ToString) -> StoreError {
        StoreError::Corrupt {
            path: self.path.clone(),
            what,
            detail: detail.to_string(),
        }
    }

    fn cursor_from_row(&self, row: &SqliteRow) -> Result<Cursor, StoreError> {
        rows::cursor(row, &|what, detail| self.corrupt(what, detail))
    }

    fn dead_letter_from_row(&self, row: &SqliteRow) -> Result<DeadLetter, StoreError> {
        rows::dead_letter::<_, i64>(row, &|what, detail| self.corrupt(what, detail))
    }

    fn dead_letters_from_rows(&self, rows: &[SqliteRow]) -> Result<Vec<DeadLetter>, StoreError> {
        rows.iter().map(|r| self.dead_letter_from_row(r)).collect()
    }
}

#[async_trait]
impl CursorStore for SqliteStore {
    async fn cursors(&self, plugin: &str) -> Result<Vec<Cursor>, StoreError> {
        let rows = sqlx::query(
            "SELECT plugin, cluster, uid, api_version, kind, namespace, name, resource_version,
                    phase, transition_time, deleted
             FROM cursors WHERE plugin = ? ORDER BY cluster, uid",
        )
        .bind(plugin)
        .fetch_all(&self.pool)
        .await
        .map_err(self.failed("load cursors"))?;
        rows.iter().map(|r| self.cursor_from_row(r)).collect()
    }

    async fn save_cursor(&self, cursor: &Cursor) -> Result<(), StoreError> {
        upsert_cursor(cursor)
            .execute(&self.pool)
            .await
            .map_err(self.failed("save a cursor"))?;
        Ok(())
    }

    async fn remember_job(&self, cursor: &Cursor) -> Result<(), StoreError> {
        let seen = Cursor {
            resource_version: String::new(),
            ..cursor.clone()
        };
        cursor_query(REMEMBER_JOB, &seen)
            .execute(&self.pool)
            .await
            .map_err(self.failed("remember a job"))?;
        Ok(())
    }

    async fn installed(&self, plugin: &str, now: &str) -> Result<String, StoreError> {
        sqlx::query(
            "INSERT INTO plugin_installs (plugin, installed_at) VALUES (?, ?) \
             ON CONFLICT (plugin) DO NOTHING",
        )
        .bind(plugin)
        .bind(now)
        .execute(&self.pool)
        .await
        .map_err(self.failed("record a plugin's install"))?;
        sqlx::query_scalar("SELECT installed_at FROM plugin_installs WHERE plugin = ?")
            .bind(plugin)
            .fetch_one(&self.pool)
            .await
            .map_err(self.failed("read a plugin's install"))
    }

    async fn save_cursors(&self, cursors: &[Cursor]) -> Result<(), StoreError> {
        if cursors.is_empty() {
            return Ok(());
        }
        let mut tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(self.failed("begin saving cursors"))?;
        for cursor in cursors {
            upsert_cursor(cursor)
                .execute(&mut *tx)
                .await
                .map_err(self.failed("save cursors"))?;
        }
        tx.commit()
            .await
            .map_err(self.failed("commit saved cursors"))?;
        Ok(())
    }

    async fn remove_cursor(
        &self,
        plugin: &str,
        cluster: &str,
        uid: &str,
    ) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM cursors WHERE plugin = ? AND cluster = ? AND uid = ?")
            .bind(plugin)
            .bind(cluster)
            .bind(uid)
            .execute(&self.pool)
            .await
            .map_err(self.failed("remove a cursor"))?;
        Ok(())
    }

    async fn add_dead_letter(
        &self,
        plugin: &str,
        event: &JobEvent,
        error: &str,
        attempts: u32,
    ) -> Result<i64, StoreError> {
        let event_json = serde_json::to_string(event).map_err(|source| StoreError::Encode {
            what: "a dead-lettered event",
            source,
        })?;
        let at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let done = sqlx::query(
            "INSERT INTO dead_letters (plugin, event_id, cluster, uid, event_json, error, attempts, at,
                                       replay_requested)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0)",
        )
        .bind(plugin)
        .bind(&event.id)
        .bind(&event.cluster)
        .bind(&event.uid)
        .bind(event_json)
        .bind(error)
        .bind(i64::from(attempts))
        .bind(at)
        .execute(&self.pool)
        .await
        .map_err(self.failed("add a dead letter"))?;
        Ok(done.last_insert_rowid())
    }

    async fn dead_letters(&self, plugin: Option<&str>) -> Result<Vec<DeadLetter>, StoreError> {
        let rows = sqlx::query(LIST_DEAD_LETTERS)
            .bind(plugin)
            .bind(plugin)
            .fetch_all(&self.pool)
            .await
            .map_err(self.failed("list dead letters"))?;
        self.dead_letters_from_rows(&rows)
    }

    async fn drop_dead_letters(
        &self,
        plugin: Option<&str>,
        seqs: &[i64],
        all: bool,
    ) -> Result<u64, StoreError> {
        let selection = Selection::new(plugin, seqs, all)?;
        self.execute_selected(DROP_SELECTED, &selection, "drop dead letters")
            .await
    }

    async fn request_replay(
        &self,
        plugin: Option<&str>,
        seqs: &[i64],
        all: bool,
    ) -> Result<u64, StoreError> {
        let selection = Selection::new(plugin, seqs, all)?;
        self.execute_selected(MARK_SELECTED, &selection, "mark dead letters for replay")
            .await
    }

    async fn take_replays(
        &self,
        plugin: &str,
        clusters: Option<&[String]>,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        let only = serde_json::to_string(clusters.unwrap_or_default()).map_err(|source| {
            StoreError::Encode {
                what: "cluster list",
                source,
            }
        })?;
        // One DELETE … RETURNING under the write lock: a row is returned by exactly the
        // statement that deleted it, so two takers can never both get it.
        let mut tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(self.failed("begin taking replays"))?;
        let rows = sqlx::query(TAKE_REPLAYS)
            .bind(plugin)
            .bind(clusters.is_none())
            .bind(only)
            .fetch_all(&mut *tx)
            .await
            .map_err(self.failed("take dead letters marked for replay"))?;
        // Decode before committing: a row that cannot be read stays in the file for an
        // operator to look at rather than vanishing.
        let mut letters = self.dead_letters_from_rows(&rows)?;
        tx.commit()
            .await
            .map_err(self.failed("commit taken replays"))?;
        letters.sort_by_key(|l| l.seq);
        Ok(letters)
    }

    async fn check(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map_err(self.failed("check the state file"))?;
        Ok(())
    }

    async fn close(&self) {
        self.pool.close().await;
    }
}

/// Binds the four parameters of `selection_where!`.
fn bind_selection<'q>(
    query: Query<'q, Sqlite, SqliteArguments>,
    selection: &Selection<'_>,
) -> Result<Query<'q, Sqlite, SqliteArguments>, StoreError> {
    let seqs_json = serde_json::to_string(selection.seqs.unwrap_or(&[])).map_err(|source| {
        StoreError::Encode {
            what: "dead-letter ids",
            source,
        }
    })?;
    Ok(query
        .bind(selection.plugin)
        .bind(selection.plugin)
        .bind(selection.seqs.is_none())
        .bind(seqs_json))
}

fn upsert_cursor(cursor: &Cursor) -> Query<'static, Sqlite, SqliteArguments> {
    cursor_query(UPSERT_CURSOR, cursor)
}

/// A cursor's columns bound in table order, for the statements that write one.
fn cursor_query(sql: &'static str, cursor: &Cursor) -> Query<'static, Sqlite, SqliteArguments> {
    sqlx::query(sql)
        .bind(cursor.plugin.clone())
        .bind(cursor.cluster.clone())
        .bind(cursor.uid.clone())
        .bind(cursor.api_version.clone())
        .bind(cursor.kind.clone())
        .bind(cursor.namespace.clone())
        .bind(cursor.name.clone())
        .bind(cursor.resource_version.clone())
        .bind(cursor.phase.as_str())
        .bind(cursor.transition_time.clone())
        .bind(cursor.deleted)
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

/// Seconds since the Unix epoch, for kv expiry.
fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[async_trait]
impl PluginKv for SqliteStore {
    async fn kv_get(&self, plugin: &str, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        sqlx::query_scalar(
            "SELECT value FROM plugin_kv WHERE plugin = ? AND key = ? \
             AND (expires_at IS NULL OR expires_at > ?)",
        )
        .bind(plugin)
        .bind(key)
        .bind(unix_now())
        .fetch_optional(&self.pool)
        .await
        .map_err(self.failed("read a plugin key"))
    }

    async fn kv_set(
        &self,
        plugin: &str,
        key: &str,
        value: &[u8],
        ttl_seconds: Option<u32>,
    ) -> Result<(), StoreError> {
        let now = unix_now();
        let expires_at = ttl_seconds.map(|ttl| now.saturating_add(i64::from(ttl)));
        let mut tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(self.failed("lock the file to write a plugin key"))?;
        sqlx::query(
            "INSERT INTO plugin_kv (plugin, key, value, expires_at) VALUES (?, ?, ?, ?) \
             ON CONFLICT (plugin, key) DO UPDATE SET value = excluded.value, \
             expires_at = excluded.expires_at",
        )
        .bind(plugin)
        .bind(key)
        .bind(value)
        .bind(expires_at)
        .execute(&mut *tx)
        .await
        .map_err(self.failed("write a plugin key"))?;
        // Expired entries go a few at a time with each write, so the table never needs a
        // sweeper task and a write never pays for a large backlog at once.
        sqlx::query(
            "DELETE FROM plugin_kv WHERE rowid IN (SELECT rowid FROM plugin_kv \
             WHERE expires_at IS NOT NULL AND expires_at <= ? LIMIT 16)",
        )
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(self.failed("remove expired plugin keys"))?;
        tx.commit()
            .await
            .map_err(self.failed("commit a plugin key"))
    }

    async fn kv_usage(&self, plugin: &str, except_key: &str) -> Result<(u64, u64), StoreError> {
        let (entries, bytes): (i64, i64) = sqlx::query_as(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(CAST(key AS BLOB)) + LENGTH(value)), 0) \
             FROM plugin_kv WHERE plugin = ? AND key <> ? \
             AND (expires_at IS NULL OR expires_at > ?)",
        )
        .bind(plugin)
        .bind(except_key)
        .bind(unix_now())
        .fetch_one(&self.pool)
        .await
        .map_err(self.failed("measure a plugin's keys"))?;
        Ok((entries.max(0) as u64, bytes.max(0) as u64))
    }

    async fn kv_delete(&self, plugin: &str, key: &str) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "DELETE FROM plugin_kv WHERE plugin = ? AND key = ? \
             AND (expires_at IS NULL OR expires_at > ?)",
        )
        .bind(plugin)
        .bind(key)
        .bind(unix_now())
        .execute(&self.pool)
        .await
        .map_err(self.failed("delete a plugin key"))?;
        Ok(done.rows_affected() > 0)
    }
}
