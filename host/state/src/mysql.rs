//! The server backend: tables in a MySQL or MariaDB database, shared by every replica of the
//! daemon and by the `dead-letters` CLI.
//!
//! The promises are those of [`SqliteStore`](super::SqliteStore): a batch of cursors is stored
//! in one transaction or not at all, remembering a job never overwrites a cursor, a dead
//! letter's seq is unique and never reused, and two takers of replays never get the same dead
//! letter. Only the means differ, as below.
//!
//! # Tables
//!
//! Every table name starts with a prefix (`state.table_prefix`, default `jobrelay_`), so
//! several installations, or several tests, can share one database. The prefix is checked
//! ([`check_table_prefix`]) before it is ever put into a statement; values are always bound.
//! Keys are `VARCHAR` columns of `utf8mb4` with a binary collation, so keys compare byte for
//! byte as in SQLite (`Job` and `job` are two keys); where the server has a no-pad binary
//! collation (`utf8mb4_0900_bin` on MySQL 8, `utf8mb4_nopad_bin` on MariaDB) it is used, so a
//! trailing space makes another key too. Every session runs with `STRICT_ALL_TABLES`: a value
//! longer than its column fails the statement instead of being cut, which could merge two keys.
//!
//! # Durability
//!
//! A write returns once InnoDB committed it. With the server's default
//! `innodb_flush_log_at_trx_commit = 1` a commit is on disk when it returns and survives a
//! crash of jobrelay, of the server and of its machine; with `2` or `0` the server may lose
//! about the last second of commits when its machine crashes (the lanes then deliver those
//! events again: at-least-once, never lost). Dead-letter seqs come from an `AUTO_INCREMENT`
//! column, which InnoDB keeps across server restarts from MariaDB 10.2.4 and MySQL 8.0 on; on
//! older servers a seq freed by a drop could come back after a server restart.
//!
//! # Several processes, one database
//!
//! Replicas, and the CLI beside them, use the tables at the same time. `take_replays` selects
//! the marked rows `FOR UPDATE` and deletes exactly those in the same transaction: a second
//! taker waits for the row locks and then no longer sees the rows. InnoDB resolves a deadlock
//! by rolling back one of the transactions; the store runs that one again from the start (up
//! to [`DEADLOCK_TRIES`] times), so a caller sees a deadlock only if it keeps happening. A
//! statement waits at most [`LOCK_WAIT_SECONDS`] for a row another process holds.
//!
//! Creating or migrating the schema runs under a named lock (`GET_LOCK`), so replicas starting
//! together on an empty database create the tables once. Plugins' key-value entries expire by
//! the database server's clock, so replicas whose clocks differ still agree on what expired.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::mysql::{
    MySql, MySqlArguments, MySqlConnectOptions, MySqlConnection, MySqlDatabaseError, MySqlPool,
    MySqlPoolOptions, MySqlRow,
};
use sqlx::query::Query;
use sqlx::{AssertSqlSafe, ConnectOptions, Connection};

use super::cursor::Cursor;
use super::dead_letter::{DeadLetter, Selection};
use super::error::StoreError;
use super::rows;
use super::sqlite::SCHEMA_VERSION;
use super::store::{CursorStore, PluginKv};
use jobrelay_contract::event::JobEvent;

/// The table prefix when `state.table_prefix` is not given.
pub const DEFAULT_TABLE_PREFIX: &str = "jobrelay_";

/// The longest table prefix: the longest table name (`schema_version`) must stay well inside
/// MySQL's 64 characters.
pub const MAX_TABLE_PREFIX_LEN: usize = 32;

/// How long opening waits for the server to answer before giving up.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a statement waits for a row lock held by another process (the session's
/// `innodb_lock_wait_timeout`). Writes are short, so a wait this long means something is wrong.
pub const LOCK_WAIT_SECONDS: u32 = 10;

/// How many times a transaction that InnoDB chose as a deadlock victim is run.
pub const DEADLOCK_TRIES: u32 = 5;

/// How long a statement waits for a free connection of the pool, or for the server to come
/// back after the connection was lost.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections of the pool. Every statement is a network round trip, so a few more than for
/// SQLite let the lanes' cursor writes overlap.
const MAX_CONNECTIONS: u32 = 8;

/// How long opening waits for another process that is creating the schema.
const SCHEMA_LOCK_SECONDS: u32 = 30;

/// Rows or ids per statement when a batch or an id list is split: far below the protocol's
/// 65,535 placeholders, and small enough to keep one statement's packet modest.
const CHUNK: usize = 500;

/// Expired key-value entries removed with each write (see [`PluginKv::kv_set`]).
const KV_SWEEP: u32 = 16;

/// No-pad binary collations, preferred in this order when the server has one.
const NO_PAD_BIN_COLLATIONS: [&str; 2] = ["utf8mb4_0900_bin", "utf8mb4_nopad_bin"];
/// The binary collation every server with `utf8mb4` has.
const PAD_BIN_COLLATION: &str = "utf8mb4_bin";

const CURSOR_COLUMNS: &str = "plugin, cluster, uid, api_version, kind, namespace, name, \
                              resource_version, phase, transition_time, deleted";
const CURSOR_PLACEHOLDERS: &str = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
const DEAD_LETTER_COLUMNS: &str = "seq, plugin, event_json, error, attempts, at, replay_requested";

/// Checks a table prefix: 1 to [`MAX_TABLE_PREFIX_LEN`] ASCII letters, digits and underscores.
/// Nothing else ever reaches a statement's text, so this is what keeps the prefix from being
/// SQL.
pub fn check_table_prefix(prefix: &str) -> Result<(), StoreError> {
    let reason = if prefix.is_empty() {
        "is empty"
    } else if prefix.len() > MAX_TABLE_PREFIX_LEN {
        "is longer than 32 characters"
    } else if !prefix
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        "holds other characters"
    } else {
        return Ok(());
    };
    Err(StoreError::BadTablePrefix {
        prefix: prefix.to_string(),
        reason,
    })
}

/// A MySQL URL as it may be shown: user, host, port and database, never the password. A URL
/// that cannot be parsed is not shown at all (the parser's message could quote it).
pub fn redacted_url(url: &str) -> String {
    match parse_url(url) {
        Ok(options) => describe(&options),
        Err(_) => "(a URL that is not a valid mysql:// URL)".to_string(),
    }
}

/// The table names of one prefix.
#[derive(Debug, Clone)]
struct Tables {
    schema_version: String,
    cursors: String,
    dead_letters: String,
    plugin_kv: String,
    plugin_installs: String,
}

impl Tables {
    /// `prefix` must have passed [`check_table_prefix`].
    fn new(prefix: &str) -> Tables {
        Tables {
            schema_version: format!("{prefix}schema_version"),
            cursors: format!("{prefix}cursors"),
            dead_letters: format!("{prefix}dead_letters"),
            plugin_kv: format!("{prefix}plugin_kv"),
            plugin_installs: format!("{prefix}plugin_installs"),
        }
    }
}

/// The schema scripts, version 1 first, one statement per entry: DDL commits on its own in
/// MySQL, so each statement is idempotent (`IF NOT EXISTS`) and an interrupted creation is
/// finished by the next open. The versions are those of the SQLite file: version 1 has the
/// cursors and dead letters, version 2 adds the plugins' key-value entries, version 3 the
/// plugins' first install times.
fn schema_scripts(t: &Tables, collation: &str) -> [Vec<String>; 3] {
    let table_options =
        format!("ENGINE=InnoDB ROW_FORMAT=DYNAMIC DEFAULT CHARSET=utf8mb4 COLLATE={collation}");
    // Key lengths: the primary keys stay below InnoDB's 3,072 bytes at 4 bytes a character.
    // Kubernetes limits uids to 36 characters, namespaces and kinds to 63, names to 253;
    // cluster names are at most 63, plugin names are file stems.
    let v1 = vec![
        format!(
            "CREATE TABLE IF NOT EXISTS {} (
                version BIGINT NOT NULL PRIMARY KEY
            ) {table_options}",
            t.schema_version
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {} (
                plugin VARCHAR(255) NOT NULL,
                cluster VARCHAR(128) NOT NULL,
                uid VARCHAR(128) NOT NULL,
                api_version VARCHAR(320) NOT NULL,
                kind VARCHAR(128) NOT NULL,
                namespace VARCHAR(128) NOT NULL,
                name VARCHAR(255) NOT NULL,
                resource_version VARCHAR(255) NOT NULL,
                phase VARCHAR(32) NOT NULL,
                transition_time VARCHAR(64) NOT NULL,
                deleted BOOLEAN NOT NULL,
                PRIMARY KEY (plugin, cluster, uid)
            ) {table_options}",
            t.cursors
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {} (
                seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
                plugin VARCHAR(255) NOT NULL,
                event_id VARCHAR(1024) NOT NULL,
                cluster VARCHAR(128) NOT NULL,
                uid VARCHAR(128) NOT NULL,
                event_json LONGTEXT NOT NULL,
                error LONGTEXT NOT NULL,
                attempts INT UNSIGNED NOT NULL,
                at VARCHAR(40) NOT NULL,
                replay_requested BOOLEAN NOT NULL DEFAULT FALSE,
                KEY by_plugin (plugin, replay_requested),
                KEY by_job (cluster, uid)
            ) {table_options}",
            t.dead_letters
        ),
    ];
    // `expires_at` is Unix seconds by the server's clock, NULL for entries that never expire.
    // Keys are at most 512 bytes (the kv capability's limit), so at most 512 characters.
    let v2 = vec![format!(
        "CREATE TABLE IF NOT EXISTS {} (
            plugin VARCHAR(255) NOT NULL,
            `key` VARCHAR(512) NOT NULL,
            value LONGBLOB NOT NULL,
            expires_at BIGINT NULL,
            PRIMARY KEY (plugin, `key`),
            KEY by_expiry (expires_at)
        ) {table_options}",
        t.plugin_kv
    )];
    let v3 = vec![format!(
        "CREATE TABLE IF NOT EXISTS {} (
            plugin VARCHAR(255) NOT NULL PRIMARY KEY,
            installed_at VARCHAR(64) NOT NULL
        ) {table_options}",
        t.plugin_installs
    )];
    [v1, v2, v3]
}

/// The statements of one prefix, built once at open. The ones whose length depends on a call
/// (id lists, batches) are built by the call, from these names and placeholders only.
#[derive(Debug)]
struct Statements {
    tables: Tables,
    load_cursors: Arc<str>,
    upsert_cursor: Arc<str>,
    remember_job: Arc<str>,
    remove_cursor: Arc<str>,
    add_dead_letter: Arc<str>,
    list_dead_letters: Arc<str>,
    list_dead_letters_of_plugin: Arc<str>,
    select_replays: Arc<str>,
    kv_get: Arc<str>,
    kv_set: Arc<str>,
    kv_sweep: Arc<str>,
    kv_delete: Arc<str>,
    kv_usage: Arc<str>,
    record_install: Arc<str>,
    read_install: Arc<str>,
}

impl Statements {
    fn new(tables: Tables) -> Statements {
        let t = &tables;
        let sql = |text: String| -> Arc<str> { Arc::from(text) };
        Statements {
            load_cursors: sql(format!(
                "SELECT {CURSOR_COLUMNS} FROM {} WHERE plugin = ? ORDER BY cluster, uid",
                t.cursors
            )),
            upsert_cursor: sql(upsert_cursors_sql(&t.cursors, 1)),
            remember_job: sql(format!(
                "INSERT INTO {} ({CURSOR_COLUMNS}) VALUES {CURSOR_PLACEHOLDERS} \
                 ON DUPLICATE KEY UPDATE plugin = plugin",
                t.cursors
            )),
            remove_cursor: sql(format!(
                "DELETE FROM {} WHERE plugin = ? AND cluster = ? AND uid = ?",
                t.cursors
            )),
            add_dead_letter: sql(format!(
                "INSERT INTO {} (plugin, event_id, cluster, uid, event_json, error, attempts, at, \
                 replay_requested) VALUES (?, ?, ?, ?, ?, ?, ?, ?, FALSE)",
                t.dead_letters
            )),
            list_dead_letters: sql(format!(
                "SELECT {DEAD_LETTER_COLUMNS} FROM {} ORDER BY seq",
                t.dead_letters
            )),
            list_dead_letters_of_plugin: sql(format!(
                "SELECT {DEAD_LETTER_COLUMNS} FROM {} WHERE plugin = ? ORDER BY seq",
                t.dead_letters
            )),
            select_replays: sql(select_replays(&t.dead_letters, None)),
            kv_usage: sql(format!(
                "SELECT COUNT(*), CAST(COALESCE(SUM(LENGTH(`key`) + LENGTH(value)), 0) AS SIGNED) \
                 FROM {} WHERE plugin = ? AND `key` <> ? \
                 AND (expires_at IS NULL OR expires_at > UNIX_TIMESTAMP())",
                t.plugin_kv
            )),
            kv_get: sql(format!(
                "SELECT value FROM {} WHERE plugin = ? AND `key` = ? \
                 AND (expires_at IS NULL OR expires_at > UNIX_TIMESTAMP())",
                t.plugin_kv
            )),
            kv_set: sql(format!(
                "INSERT INTO {} (plugin, `key`, value, expires_at) \
                 VALUES (?, ?, ?, UNIX_TIMESTAMP() + ?) \
                 ON DUPLICATE KEY UPDATE value = VALUES(value), expires_at = VALUES(expires_at)",
                t.plugin_kv
            )),
            kv_sweep: sql(format!(
                "DELETE FROM {} WHERE expires_at <= UNIX_TIMESTAMP() ORDER BY expires_at \
                 LIMIT {KV_SWEEP}",
                t.plugin_kv
            )),
            record_install: sql(format!(
                "INSERT INTO {} (plugin, installed_at) VALUES (?, ?) \
                 ON DUPLICATE KEY UPDATE plugin = plugin",
                t.plugin_installs
            )),
            read_install: sql(format!(
                "SELECT installed_at FROM {} WHERE plugin = ?",
                t.plugin_installs
            )),
            kv_delete: sql(format!(
                "DELETE FROM {} WHERE plugin = ? AND `key` = ? \
                 AND (expires_at IS NULL OR expires_at > UNIX_TIMESTAMP())",
                t.plugin_kv
            )),
            tables,
        }
    }
}

/// `rows` cursors upserted by one statement; a key repeated in the batch ends with its last
/// row, as with one statement per row.
fn upsert_cursors_sql(table: &str, rows: usize) -> String {
    let values = vec![CURSOR_PLACEHOLDERS; rows].join(", ");
    format!(
        "INSERT INTO {table} ({CURSOR_COLUMNS}) VALUES {values} ON DUPLICATE KEY UPDATE \
         api_version = VALUES(api_version), kind = VALUES(kind), \
         namespace = VALUES(namespace), name = VALUES(name), \
         resource_version = VALUES(resource_version), phase = VALUES(phase), \
         transition_time = VALUES(transition_time), deleted = VALUES(deleted)"
    )
}

/// `?, ?, …`, `n` times.
/// Locks and reads the dead letters of one plugin (bound first) marked for replay; with
/// `clusters`, only those of that many clusters (bound next).
fn select_replays(table: &str, clusters: Option<usize>) -> String {
    let of_clusters = clusters
        .map(|n| format!(" AND cluster IN ({})", placeholders(n)))
        .unwrap_or_default();
    format!(
        "SELECT {DEAD_LETTER_COLUMNS} FROM {table} WHERE plugin = ? AND replay_requested = TRUE\
         {of_clusters} ORDER BY seq FOR UPDATE"
    )
}

fn placeholders(n: usize) -> String {
    vec!["?"; n].join(", ")
}

/// What a dead-letter selection does to the rows it selects.
#[derive(Debug, Clone, Copy)]
enum SelectionVerb {
    Drop,
    MarkForReplay,
}

/// Runs the same attempt again while InnoDB picks it as a deadlock victim (the whole
/// transaction was rolled back, so running it again is safe), with a short growing pause.
macro_rules! retry_deadlocks {
    ($attempt:expr) => {{
        let mut tries = 1_u32;
        loop {
            match $attempt {
                Err(e) if tries < DEADLOCK_TRIES && is_deadlock(&e) => {
                    tracing::debug!(error = %e, tries, "deadlock; running the transaction again");
                    tokio::time::sleep(Duration::from_millis(5 * u64::from(tries))).await;
                    tries += 1;
                }
                done => break done,
            }
        }
    }};
}

/// The state store in a MySQL or MariaDB database. Cheap to share: clone the `Arc` it lives
/// in.
#[derive(Debug)]
pub struct MySqlStore {
    pool: MySqlPool,
    /// The server as it may be shown: `mysql://user@host:port/database`, no password.
    server: String,
    prefix: String,
    sql: Statements,
}

impl MySqlStore {
    /// Connects to the database at `url` (a `mysql://` or `mariadb://` URL with a database,
    /// already resolved from any secret reference) and creates or checks the schema of the
    /// tables named with `table_prefix`.
    ///
    /// Fails, with an error naming the server but never the password, when the prefix is not
    /// allowed, the URL is not a MySQL URL or names no database, the server does not answer
    /// within [`CONNECT_TIMEOUT`] or refuses the login, the tables were written by a newer
    /// jobrelay, or tables with these names belong to something else. After a successful open
    /// the pool reconnects by itself when the server goes away and comes back.
    pub async fn open(url: &str, table_prefix: &str) -> Result<MySqlStore, StoreError> {
        check_table_prefix(table_prefix)?;
        let options = parse_url(url)?;
        let server = describe(&options);
        if options.get_database().is_none_or(str::is_empty) {
            return Err(StoreError::BadUrl(format!(
                "{server} names no database; add one, as in mysql://user@host:3306/jobrelay"
            )));
        }
        let tables = Tables::new(table_prefix);

        // The schema is checked on a connection of its own: it holds the schema lock, and its
        // connect error is the real cause (a pool would only report that it timed out).
        let mut conn = connect(&options, &server).await?;
        let migrated = migrate(&mut conn, &tables, &server).await;
        if let Err(e) = conn.close().await {
            tracing::debug!(server = %server, error = %e, "closing the schema connection failed");
        }
        migrated?;

        let pool = MySqlPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .after_connect(|conn, _| Box::pin(async move { prepare_session(conn).await }))
            .connect_lazy_with(options);
        Ok(MySqlStore {
            pool,
            server,
            prefix: table_prefix.to_string(),
            sql: Statements::new(tables),
        })
    }

    /// The server and database, as they may be shown (no password).
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The prefix of this store's table names.
    pub fn table_prefix(&self) -> &str {
        &self.prefix
    }

    /// Maps a sqlx error to one that names the server and what was being done.
    fn failed(&self, operation: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError + '_ {
        failed(&self.server, operation)
    }

    fn corrupt(&self, what: &'static str, detail: impl ToString) -> StoreError {
        StoreError::DatabaseCorrupt {
            server: self.server.clone(),
            what,
            detail: detail.to_string(),
        }
    }

    fn cursor_from_row(&self, row: &MySqlRow) -> Result<Cursor, StoreError> {
        rows::cursor(row, &|what, detail| self.corrupt(what, detail))
    }

    fn dead_letter_from_row(&self, row: &MySqlRow) -> Result<DeadLetter, StoreError> {
        rows::dead_letter::<_, u32>(row, &|what, detail| self.corrupt(what, detail))
    }

    fn dead_letters_from_rows(&self, rows: &[MySqlRow]) -> Result<Vec<DeadLetter>, StoreError> {
        rows.iter().map(|r| self.dead_letter_from_row(r)).collect()
    }

    /// One cursor through `statement` (the upsert, or the insert that keeps what is there).
    async fn try_write_cursor(
        &self,
        statement: &Arc<str>,
        cursor: &Cursor,
        what: &'static str,
    ) -> Result<(), StoreError> {
        bind_cursor(sqlx::query(AssertSqlSafe(statement.clone())), cursor)
            .execute(&self.pool)
            .await
            .map_err(self.failed(what))?;
        Ok(())
    }

    async fn try_save_cursors(&self, cursors: &[Cursor]) -> Result<(), StoreError> {
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(self.failed("begin saving cursors"))?;
        for chunk in cursors.chunks(CHUNK) {
            let sql = upsert_cursors_sql(&self.sql.tables.cursors, chunk.len());
            let mut query = sqlx::query(AssertSqlSafe(sql)).persistent(false);
            for cursor in chunk {
                query = bind_cursor(query, cursor);
            }
            query
                .execute(&mut *tx)
                .await
                .map_err(self.failed("save cursors"))?;
        }
        tx.commit()
            .await
            .map_err(self.failed("commit saved cursors"))?;
        Ok(())
    }

    async fn try_remove_cursor(
        &self,
        plugin: &str,
        cluster: &str,
        uid: &str,
    ) -> Result<(), StoreError> {
        sqlx::query(AssertSqlSafe(self.sql.remove_cursor.clone()))
            .bind(plugin)
            .bind(cluster)
            .bind(uid)
            .execute(&self.pool)
            .await
            .map_err(self.failed("remove a cursor"))?;
        Ok(())
    }

    async fn try_add_dead_letter(
        &self,
        plugin: &str,
        event: &JobEvent,
        event_json: &str,
        error: &str,
        attempts: u32,
        at: &str,
    ) -> Result<i64, StoreError> {
        let done = sqlx::query(AssertSqlSafe(self.sql.add_dead_letter.clone()))
            .bind(plugin)
            .bind(&event.id)
            .bind(&event.cluster)
            .bind(&event.uid)
            .bind(event_json)
            .bind(error)
            .bind(attempts)
            .bind(at)
            .execute(&self.pool)
            .await
            .map_err(self.failed("add a dead letter"))?;
        i64::try_from(done.last_insert_id()).map_err(|_| {
            self.corrupt(
                "dead letter",
                format!("seq {} out of range", done.last_insert_id()),
            )
        })
    }

    /// Drops or marks the dead letters of `selection`; returns how many it selected.
    async fn try_execute_selected(
        &self,
        verb: SelectionVerb,
        selection: &Selection<'_>,
        operation: &'static str,
    ) -> Result<u64, StoreError> {
        let table = &self.sql.tables.dead_letters;
        let head = match verb {
            SelectionVerb::Drop => format!("DELETE FROM {table}"),
            // Counts the rows it matched, marked already or not: sqlx connects with the
            // CLIENT_FOUND_ROWS flag.
            SelectionVerb::MarkForReplay => {
                format!("UPDATE {table} SET replay_requested = TRUE")
            }
        };
        let Some(seqs) = selection.seqs else {
            let query = match selection.plugin {
                Some(plugin) => {
                    sqlx::query(AssertSqlSafe(format!("{head} WHERE plugin = ?"))).bind(plugin)
                }
                None => sqlx::query(AssertSqlSafe(head)),
            };
            let done = query
                .execute(&self.pool)
                .await
                .map_err(self.failed(operation))?;
            return Ok(done.rows_affected());
        };
        // Each id once, so that splitting the list cannot count a row twice.
        let mut seqs = seqs.to_vec();
        seqs.sort_unstable();
        seqs.dedup();
        let mut tx = self.pool.begin().await.map_err(self.failed(operation))?;
        let mut selected = 0;
        for chunk in seqs.chunks(CHUNK) {
            let mut sql = format!("{head} WHERE seq IN ({})", placeholders(chunk.len()));
            if selection.plugin.is_some() {
                sql.push_str(" AND plugin = ?");
            }
            let mut query = sqlx::query(AssertSqlSafe(sql)).persistent(false);
            for seq in chunk {
                query = query.bind(*seq);
            }
            if let Some(plugin) = selection.plugin {
                query = query.bind(plugin);
            }
            selected += query
                .execute(&mut *tx)
                .await
                .map_err(self.failed(operation))?
                .rows_affected();
        }
        tx.commit().await.map_err(self.failed(operation))?;
        Ok(selected)
    }

    async fn try_take_replays(
        &self,
        plugin: &str,
        clusters: Option<&[String]>,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(self.failed("begin taking replays"))?;
        // Locks the marked rows: a second taker waits here until this transaction ends, and
        // then no longer finds the rows it deleted.
        let statement: Arc<str> = match clusters {
            None => self.sql.select_replays.clone(),
            Some(clusters) => Arc::from(select_replays(
                &self.sql.tables.dead_letters,
                Some(clusters.len()),
            )),
        };
        let mut select = sqlx::query(AssertSqlSafe(statement)).bind(plugin);
        for cluster in clusters.unwrap_or_default() {
            select = select.bind(cluster);
        }
        let rows = select
            .fetch_all(&mut *tx)
            .await
            .map_err(self.failed("take dead letters marked for replay"))?;
        // Decode before deleting: a row that cannot be read stays for an operator to look at
        // rather than vanishing (dropping `tx` rolls back).
        let letters = self.dead_letters_from_rows(&rows)?;
        let seqs: Vec<i64> = letters.iter().map(|l| l.seq).collect();
        for chunk in seqs.chunks(CHUNK) {
            let sql = format!(
                "DELETE FROM {} WHERE seq IN ({})",
                self.sql.tables.dead_letters,
                placeholders(chunk.len())
            );
            let mut query = sqlx::query(AssertSqlSafe(sql)).persistent(false);
            for seq in chunk {
                query = query.bind(*seq);
            }
            query
                .execute(&mut *tx)
                .await
                .map_err(self.failed("take dead letters marked for replay"))?;
        }
        tx.commit()
            .await
            .map_err(self.failed("commit taken replays"))?;
        Ok(letters)
    }

    async fn try_kv_set(
        &self,
        plugin: &str,
        key: &str,
        value: &[u8],
        ttl_seconds: Option<u32>,
    ) -> Result<(), StoreError> {
        sqlx::query(AssertSqlSafe(self.sql.kv_set.clone()))
            .bind(plugin)
            .bind(key)
            .bind(value)
            .bind(ttl_seconds.map(i64::from))
            .execute(&self.pool)
            .await
            .map_err(self.failed("write a plugin key"))?;
        Ok(())
    }

    async fn try_kv_sweep(&self) -> Result<(), StoreError> {
        sqlx::query(AssertSqlSafe(self.sql.kv_sweep.clone()))
            .execute(&self.pool)
            .await
            .map_err(self.failed("remove expired plugin keys"))?;
        Ok(())
    }
}

#[async_trait]
impl CursorStore for MySqlStore {
    async fn cursors(&self, plugin: &str) -> Result<Vec<Cursor>, StoreError> {
        let rows = sqlx::query(AssertSqlSafe(self.sql.load_cursors.clone()))
            .bind(plugin)
            .fetch_all(&self.pool)
            .await
            .map_err(self.failed("load cursors"))?;
        rows.iter().map(|r| self.cursor_from_row(r)).collect()
    }

    async fn save_cursor(&self, cursor: &Cursor) -> Result<(), StoreError> {
        retry_deadlocks!(
            self.try_write_cursor(&self.sql.upsert_cursor, cursor, "save a cursor")
                .await
        )
    }

    async fn remember_job(&self, cursor: &Cursor) -> Result<(), StoreError> {
        let seen = Cursor {
            resource_version: String::new(),
            ..cursor.clone()
        };
        retry_deadlocks!(
            self.try_write_cursor(&self.sql.remember_job, &seen, "remember a job")
                .await
        )
    }

    async fn installed(&self, plugin: &str, now: &str) -> Result<String, StoreError> {
        retry_deadlocks!(
            sqlx::query(AssertSqlSafe(self.sql.record_install.clone()))
                .bind(plugin)
                .bind(now)
                .execute(&self.pool)
                .await
                .map_err(self.failed("record a plugin's install"))
        )?;
        sqlx::query_scalar(AssertSqlSafe(self.sql.read_install.clone()))
            .bind(plugin)
            .fetch_one(&self.pool)
            .await
            .map_err(self.failed("read a plugin's install"))
    }

    async fn save_cursors(&self, cursors: &[Cursor]) -> Result<(), StoreError> {
        if cursors.is_empty() {
            return Ok(());
        }
        retry_deadlocks!(self.try_save_cursors(cursors).await)
    }

    async fn remove_cursor(
        &self,
        plugin: &str,
        cluster: &str,
        uid: &str,
    ) -> Result<(), StoreError> {
        retry_deadlocks!(self.try_remove_cursor(plugin, cluster, uid).await)
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
        retry_deadlocks!(
            self.try_add_dead_letter(plugin, event, &event_json, error, attempts, &at)
                .await
        )
    }

    async fn dead_letters(&self, plugin: Option<&str>) -> Result<Vec<DeadLetter>, StoreError> {
        let query = match plugin {
            Some(plugin) => {
                sqlx::query(AssertSqlSafe(self.sql.list_dead_letters_of_plugin.clone()))
                    .bind(plugin)
            }
            None => sqlx::query(AssertSqlSafe(self.sql.list_dead_letters.clone())),
        };
        let rows = query
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
        retry_deadlocks!(
            self.try_execute_selected(SelectionVerb::Drop, &selection, "drop dead letters")
                .await
        )
    }

    async fn request_replay(
        &self,
        plugin: Option<&str>,
        seqs: &[i64],
        all: bool,
    ) -> Result<u64, StoreError> {
        let selection = Selection::new(plugin, seqs, all)?;
        retry_deadlocks!(
            self.try_execute_selected(
                SelectionVerb::MarkForReplay,
                &selection,
                "mark dead letters for replay",
            )
            .await
        )
    }

    async fn take_replays(
        &self,
        plugin: &str,
        clusters: Option<&[String]>,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        if clusters.is_some_and(|c| c.is_empty()) {
            return Ok(Vec::new());
        }
        retry_deadlocks!(self.try_take_replays(plugin, clusters).await)
    }

    async fn check(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map_err(self.failed("check the state database"))?;
        Ok(())
    }

    async fn close(&self) {
        self.pool.close().await;
    }
}

#[async_trait]
impl PluginKv for MySqlStore {
    async fn kv_get(&self, plugin: &str, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        sqlx::query_scalar(AssertSqlSafe(self.sql.kv_get.clone()))
            .bind(plugin)
            .bind(key)
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
        retry_deadlocks!(self.try_kv_set(plugin, key, value, ttl_seconds).await)?;
        // Expired entries go a few at a time with each write, so the table never needs a
        // sweeper task and a write never pays for a large backlog at once. The entry is
        // committed already and the next write sweeps again, so a failed sweep is not the
        // caller's failure.
        if let Err(e) = retry_deadlocks!(self.try_kv_sweep().await) {
            tracing::debug!(error = %e, "sweeping expired plugin keys failed");
        }
        Ok(())
    }

    async fn kv_usage(&self, plugin: &str, except_key: &str) -> Result<(u64, u64), StoreError> {
        let (entries, bytes): (i64, i64) = sqlx::query_as(AssertSqlSafe(self.sql.kv_usage.clone()))
            .bind(plugin)
            .bind(except_key)
            .fetch_one(&self.pool)
            .await
            .map_err(self.failed("measure a plugin's keys"))?;
        Ok((entries.max(0) as u64, bytes.max(0) as u64))
    }

    async fn kv_delete(&self, plugin: &str, key: &str) -> Result<bool, StoreError> {
        let done = retry_deadlocks!(
            sqlx::query(AssertSqlSafe(self.sql.kv_delete.clone()))
                .bind(plugin)
                .bind(key)
                .execute(&self.pool)
                .await
                .map_err(self.failed("delete a plugin key"))
        )?;
        Ok(done.rows_affected() > 0)
    }
}

/// Parses a `mysql://` (or `mariadb://`) URL. The parser's own message is not kept: it can
/// quote the URL, password included.
fn parse_url(url: &str) -> Result<MySqlConnectOptions, StoreError> {
    let url = url.trim();
    let url = match url.strip_prefix("mariadb:") {
        Some(rest) => format!("mysql:{rest}"),
        None => url.to_string(),
    };
    if !url.starts_with("mysql://") {
        return Err(StoreError::BadUrl(
            "must be a mysql:// or mariadb:// URL (or an env:/file: secret reference to one)"
                .into(),
        ));
    }
    MySqlConnectOptions::from_str(&url)
        .map_err(|_| StoreError::BadUrl("not a valid mysql:// URL".into()))
}

/// `mysql://user@host:port/database`: what an operator needs to find the server, without the
/// password.
fn describe(options: &MySqlConnectOptions) -> String {
    let user = match options.get_username() {
        "" => String::new(),
        user => format!("{user}@"),
    };
    let database = options.get_database().unwrap_or_default();
    match options.get_socket() {
        Some(socket) => format!(
            "mysql://{user}localhost/{database} (socket {})",
            socket.display()
        ),
        None => {
            let host = options.get_host();
            let host = if host.contains(':') {
                format!("[{host}]")
            } else {
                host.to_string()
            };
            format!("mysql://{user}{host}:{}/{database}", options.get_port())
        }
    }
}

fn failed<'a>(
    server: &'a str,
    operation: &'static str,
) -> impl FnOnce(sqlx::Error) -> StoreError + 'a {
    move |source| StoreError::DatabaseQuery {
        server: server.to_string(),
        operation,
        source,
    }
}

/// Whether InnoDB rolled back the transaction to break a deadlock (error 1213; Galera reports
/// a certification conflict the same way).
fn is_deadlock(error: &StoreError) -> bool {
    let StoreError::DatabaseQuery {
        source: sqlx::Error::Database(db),
        ..
    } = error
    else {
        return false;
    };
    db.try_downcast_ref::<MySqlDatabaseError>()
        .is_some_and(|e| e.number() == 1213)
}

/// Session settings of every connection: strict mode (an overlong value fails instead of
/// being cut) and the lock wait bound.
async fn prepare_session(conn: &mut MySqlConnection) -> Result<(), sqlx::Error> {
    let sql = format!(
        "SET SESSION sql_mode = CONCAT(@@sql_mode, ',STRICT_ALL_TABLES'), \
         SESSION innodb_lock_wait_timeout = {LOCK_WAIT_SECONDS}"
    );
    sqlx::raw_sql(AssertSqlSafe(sql)).execute(conn).await?;
    Ok(())
}

/// One connection, within [`CONNECT_TIMEOUT`], with the session prepared.
async fn connect(
    options: &MySqlConnectOptions,
    server: &str,
) -> Result<MySqlConnection, StoreError> {
    let unreachable = |source| StoreError::Connect {
        server: server.to_string(),
        source,
    };
    let mut conn = match tokio::time::timeout(CONNECT_TIMEOUT, options.connect()).await {
        Ok(connected) => connected.map_err(unreachable)?,
        Err(_) => {
            return Err(unreachable(sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {} s", CONNECT_TIMEOUT.as_secs()),
            ))));
        }
    };
    prepare_session(&mut conn).await.map_err(unreachable)?;
    Ok(conn)
}

/// Creates the schema of new tables, or checks the version of existing ones and migrates them
/// forward, under a named lock so that processes opening an empty database together create it
/// once.
async fn migrate(
    conn: &mut MySqlConnection,
    tables: &Tables,
    server: &str,
) -> Result<(), StoreError> {
    // Lock names are server-wide and at most 64 characters: the prefix (at most 32) keeps
    // installations with different prefixes apart; two with the same prefix in different
    // databases only wait for each other while creating tables.
    let lock = format!("jobrelay:{}", tables.schema_version);
    let locked: Option<i64> = sqlx::query_scalar("SELECT CAST(GET_LOCK(?, ?) AS SIGNED)")
        .bind(&lock)
        .bind(SCHEMA_LOCK_SECONDS)
        .fetch_one(&mut *conn)
        .await
        .map_err(failed(server, "lock the schema"))?;
    if locked != Some(1) {
        return Err(StoreError::DatabaseQuery {
            server: server.to_string(),
            operation: "lock the schema",
            source: sqlx::Error::Protocol(format!(
                "another process held the lock `{lock}` for {SCHEMA_LOCK_SECONDS} s"
            )),
        });
    }
    let result = migrate_locked(conn, tables, server).await;
    let released = sqlx::query("DO RELEASE_LOCK(?)")
        .bind(&lock)
        .execute(&mut *conn)
        .await;
    if let Err(e) = released {
        tracing::debug!(server = %server, error = %e, "releasing the schema lock failed");
    }
    result
}

async fn migrate_locked(
    conn: &mut MySqlConnection,
    tables: &Tables,
    server: &str,
) -> Result<(), StoreError> {
    let existing: i64 = sqlx::query_scalar(
        "SELECT CAST(COUNT(*) AS SIGNED) FROM information_schema.TABLES \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
    )
    .bind(&tables.schema_version)
    .fetch_one(&mut *conn)
    .await
    .map_err(failed(server, "read the schema"))?;

    // How many of the scripts the tables already have (0: new tables).
    let mut migrate_from = 0;
    if existing > 0 {
        let found: Option<i64> = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT MAX(version) FROM {}",
            tables.schema_version
        )))
        .fetch_one(&mut *conn)
        .await
        .map_err(failed(server, "read the schema version"))?;
        match found {
            Some(v) if v > SCHEMA_VERSION => {
                return Err(StoreError::DatabaseNewerSchema {
                    server: server.to_string(),
                    table: tables.schema_version.clone(),
                    found: v,
                    supported: SCHEMA_VERSION,
                });
            }
            Some(SCHEMA_VERSION) => return Ok(()),
            Some(v @ 1..SCHEMA_VERSION) => migrate_from = v as usize,
            Some(v) => {
                return Err(StoreError::DatabaseCorrupt {
                    server: server.to_string(),
                    what: "schema version",
                    detail: format!("version {v} never existed"),
                });
            }
            // The table exists but is empty: an earlier creation was interrupted.
            None => {}
        }
    } else {
        let others: i64 = sqlx::query_scalar(
            "SELECT CAST(COUNT(*) AS SIGNED) FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN (?, ?, ?)",
        )
        .bind(&tables.cursors)
        .bind(&tables.dead_letters)
        .bind(&tables.plugin_kv)
        .fetch_one(&mut *conn)
        .await
        .map_err(failed(server, "read the schema"))?;
        if others > 0 {
            return Err(StoreError::NotAStateDatabase {
                server: server.to_string(),
                table: tables.schema_version.clone(),
            });
        }
    }

    let collation = binary_collation(conn, server).await?;
    for script in schema_scripts(tables, collation).iter().skip(migrate_from) {
        for statement in script {
            sqlx::raw_sql(AssertSqlSafe(statement.as_str()))
                .execute(&mut *conn)
                .await
                .map_err(failed(server, "create or migrate the schema"))?;
        }
    }
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO {} (version) VALUES (?) ON DUPLICATE KEY UPDATE version = version",
        tables.schema_version
    )))
    .bind(SCHEMA_VERSION)
    .execute(&mut *conn)
    .await
    .map_err(failed(server, "record the schema version"))?;
    Ok(())
}

/// The best binary collation of `utf8mb4` the server has: a no-pad one if it can.
async fn binary_collation(
    conn: &mut MySqlConnection,
    server: &str,
) -> Result<&'static str, StoreError> {
    for collation in NO_PAD_BIN_COLLATIONS {
        let found: i64 = sqlx::query_scalar(
            "SELECT CAST(COUNT(*) AS SIGNED) FROM information_schema.COLLATIONS \
             WHERE COLLATION_NAME = ?",
        )
        .bind(collation)
        .fetch_one(&mut *conn)
        .await
        .map_err(failed(server, "read the server's collations"))?;
        if found > 0 {
            return Ok(collation);
        }
    }
    Ok(PAD_BIN_COLLATION)
}

/// A cursor's columns bound in table order, for the statements that write one.
fn bind_cursor<'q>(
    query: Query<'q, MySql, MySqlArguments>,
    cursor: &'q Cursor,
) -> Query<'q, MySql, MySqlArguments> {
    query
        .bind(cursor.plugin.as_str())
        .bind(cursor.cluster.as_str())
        .bind(cursor.uid.as_str())
        .bind(cursor.api_version.as_str())
        .bind(cursor.kind.as_str())
        .bind(cursor.namespace.as_str())
        .bind(cursor.name.as_str())
        .bind(cursor.resource_version.as_str())
        .bind(cursor.phase.as_str())
        .bind(cursor.transition_time.as_str())
        .bind(cursor.deleted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_prefixes() {
        for good in ["jobrelay_", "a", "T1_x", &"p".repeat(MAX_TABLE_PREFIX_LEN)] {
            assert!(check_table_prefix(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "job-relay_",
            "x; DROP TABLE y",
            "tab`le",
            "é_",
            &"p".repeat(MAX_TABLE_PREFIX_LEN + 1),
        ] {
            let err = check_table_prefix(bad).expect_err(bad);
            assert!(err.to_string().contains("state.table_prefix"), "{err}");
        }
    }

    #[test]
    fn urls_are_shown_without_their_password() {
        assert_eq!(
            redacted_url("mysql://app:s3cret@db.example:3307/state"),
            "mysql://app@db.example:3307/state"
        );
        assert_eq!(
            redacted_url("mariadb://db.example/state"),
            // sqlx logs in as root when the URL names no user.
            "mysql://root@db.example:3306/state"
        );
        let shown = redacted_url("mysql://app:s3cret@[::1/state");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(matches!(
            parse_url("postgres://app:s3cret@db/state"),
            Err(StoreError::BadUrl(_))
        ));
    }

    #[test]
    fn statements_name_only_prefixed_tables() {
        let s = Statements::new(Tables::new("abc_"));
        assert!(s.kv_sweep.contains("abc_plugin_kv"));
        assert!(s.select_replays.contains("FROM abc_dead_letters"));
        assert!(s.select_replays.ends_with("FOR UPDATE"));
        let batch = upsert_cursors_sql("abc_cursors", 3);
        assert_eq!(batch.matches('?').count(), 33);
        assert_eq!(placeholders(3), "?, ?, ?");
    }
}
