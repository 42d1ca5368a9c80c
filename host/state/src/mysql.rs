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
//! to [`DEADLOCK_TRIES`](super::DEADLOCK_TRIES) times), so a caller sees a deadlock only if it
//! keeps happening. A statement waits at most [`LOCK_WAIT_SECONDS`] for a row another process
//! holds.
//!
//! Creating or migrating the schema runs under a named lock (`GET_LOCK`), so replicas starting
//! together on an empty database create the tables once. Plugins' key-value entries expire by
//! the database server's clock, so replicas whose clocks differ still agree on what expired.

use std::convert::Infallible;
use std::str::FromStr;
use std::time::Duration;

use sqlx::mysql::{
    MySql, MySqlConnectOptions, MySqlConnection, MySqlDatabaseError, MySqlPoolOptions, MySqlRow,
};
use sqlx::{AssertSqlSafe, ConnectOptions, Connection};

use super::dialect::{self, Conn, Dialect, Done, Kind, Statement, Value};
use super::error::{Location, StoreError};
use super::schema::{self, Scripts};
use super::sql_store::SqlStore;
use super::sql_text::{Statements, Tables};

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

/// How long a statement waits for a free connection of the pool, or for the server to come
/// back after the connection was lost.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections of the pool. Every statement is a network round trip, so a few more than for
/// SQLite let the lanes' cursor writes overlap.
const MAX_CONNECTIONS: u32 = 8;

/// How long opening waits for another process that is creating the schema.
const SCHEMA_LOCK_SECONDS: u32 = 30;

/// No-pad binary collations, preferred in this order when the server has one.
const NO_PAD_BIN_COLLATIONS: [&str; 2] = ["utf8mb4_0900_bin", "utf8mb4_nopad_bin"];
/// The binary collation every server with `utf8mb4` has.
const PAD_BIN_COLLATION: &str = "utf8mb4_bin";

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

/// The schema scripts, version 1 first (see [`schema`]), one statement per entry: DDL commits
/// on its own in MySQL, so each statement is idempotent (`IF NOT EXISTS`) and an interrupted
/// creation is finished by the next open. The versions are those of the SQLite file: version 1
/// has the cursors and dead letters, version 2 adds the plugins' key-value entries, version 3
/// the plugins' first install times, version 4 the inbox, version 5 numbers the inbox's marks
/// (see `sqlite.rs`): the old marks table is copied in its events' order and then dropped, so
/// an interrupted migration runs again from version 4, whose table is made again if gone.
/// Version 6 adds the events' `object` column (see `sqlite.rs`); MySQL has no
/// `ADD COLUMN IF NOT EXISTS`, so the script is left out when `has_object` says the column is
/// there already (a migration interrupted after it).
fn schema_scripts(t: &Tables, collation: &str, has_object: bool) -> Scripts {
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
    // Event ids are `cluster/uid/version` (a rebuilt event's version a little longer): well
    // under 255 characters, so the unique key and the marks' key fit InnoDB's limit.
    let v4 = vec![
        format!(
            "CREATE TABLE IF NOT EXISTS {} (
                seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
                event_id VARCHAR(255) NOT NULL,
                event_json LONGTEXT NOT NULL,
                at BIGINT NOT NULL,
                UNIQUE KEY by_event (event_id),
                KEY by_age (at)
            ) {table_options}",
            t.inbox_events
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {} (
                plugin VARCHAR(255) NOT NULL,
                event_id VARCHAR(255) NOT NULL,
                PRIMARY KEY (plugin, event_id),
                KEY by_event (event_id)
            ) {table_options}",
            t.inbox_v4
        ),
    ];
    let v5 = vec![
        format!(
            "CREATE TABLE IF NOT EXISTS {} (
                seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
                plugin VARCHAR(255) NOT NULL,
                event_id VARCHAR(255) NOT NULL,
                UNIQUE KEY by_mark (plugin, event_id),
                KEY by_event (event_id)
            ) {table_options}",
            t.inbox_marks
        ),
        format!(
            "INSERT IGNORE INTO {marks} (plugin, event_id) SELECT m.plugin, m.event_id \
             FROM {old} m LEFT JOIN {events} e ON e.event_id = m.event_id \
             ORDER BY e.seq, m.event_id",
            marks = t.inbox_marks,
            old = t.inbox_v4,
            events = t.inbox_events,
        ),
        format!("DROP TABLE IF EXISTS {}", t.inbox_v4),
    ];
    let v6 = if has_object {
        Vec::new()
    } else {
        vec![format!(
            "ALTER TABLE {} ADD COLUMN object LONGTEXT NULL",
            t.inbox_events
        )]
    };
    // Version 7 narrows SQLite's inbox (see `sqlite.rs`); a server database keeps its tables.
    let v7 = Vec::new();
    [v1, v2, v3, v4, v5, v6, v7]
}

/// The MySQL and MariaDB dialect; its value is the server (as shown) and the table prefix.
#[derive(Debug, Clone)]
pub struct MySqlDialect {
    server: String,
    prefix: String,
}

/// The state store in a MySQL or MariaDB database.
pub type MySqlStore = SqlStore<MySqlDialect>;

impl SqlStore<MySqlDialect> {
    /// Connects to the database at `url` (a `mysql://` or `mariadb://` URL with a database,
    /// already resolved from any secret reference) and creates or checks the schema of the
    /// tables named with `table_prefix`.
    ///
    /// Fails, with an error naming the server but never the password, when the prefix is not
    /// allowed, the URL is not a MySQL URL or names no database, the server does not answer
    /// within `CONNECT_TIMEOUT` or refuses the login, the tables were written by a newer
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
        let location = Location::Database(server.clone());
        let dialect = MySqlDialect {
            server,
            prefix: table_prefix.to_string(),
        };

        // The schema is checked on a connection of its own: it holds the schema lock, and its
        // connect error is the real cause (a pool would only report that it timed out).
        let server = &dialect.server;
        let mut conn = connect(&options, server).await?;
        let migrated = migrate(&dialect, &mut conn, &tables, &location).await;
        if let Err(e) = conn.close().await {
            tracing::debug!(server = %server, error = %e, "closing the schema connection failed");
        }
        migrated?;

        let pool = MySqlPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .after_connect(|conn, _| Box::pin(async move { prepare_session(conn).await }))
            .connect_lazy_with(options);
        SqlStore::from_pool(pool, dialect, location, table_prefix).await
    }

    /// The server and database, as they may be shown (no password).
    pub fn server(&self) -> &str {
        &self.dialect.server
    }

    /// The prefix of this store's table names.
    pub fn table_prefix(&self) -> &str {
        &self.dialect.prefix
    }
}

impl Dialect for MySqlDialect {
    type Db = MySql;

    const BEGIN_WRITE: Option<&'static str> = None;
    /// Row locks: a second transaction selecting the same rows waits for this one to end.
    const LOCK_ROWS: &'static str = " FOR UPDATE";
    /// The server's clock, so that replicas whose clocks differ agree on what expired.
    const NOW: &'static str = "UNIX_TIMESTAMP()";
    const BY_PRIMARY_KEY: &'static str = "FORCE INDEX (PRIMARY)";

    fn upsert(table: &str, columns: &str, key: &[&str], row: &str, rows: usize) -> String {
        let values = vec![row; rows].join(", ");
        let updates = dialect::set_non_key(columns, key, |c| format!("VALUES({c})"));
        format!("INSERT INTO {table} ({columns}) VALUES {values} ON DUPLICATE KEY UPDATE {updates}")
    }

    fn insert_or_keep(table: &str, columns: &str, key: &[&str], row: &str) -> String {
        // Setting a key column to itself changes nothing; unlike INSERT IGNORE it does not
        // also swallow other errors (an overlong value).
        let first = key.first().copied().unwrap_or("plugin");
        format!(
            "INSERT INTO {table} ({columns}) VALUES {row} ON DUPLICATE KEY UPDATE {first} = {first}"
        )
    }

    fn byte_length(column: &str) -> String {
        format!("LENGTH({column})")
    }

    fn integer(expression: &str) -> String {
        // COUNT and SUM are DECIMAL or unsigned in MySQL; the store reads signed 64-bit.
        format!("CAST({expression} AS SIGNED)")
    }

    fn delete_expired(table: &str, limit: u32) -> String {
        format!(
            "DELETE FROM {table} WHERE expires_at <= {} ORDER BY expires_at LIMIT {limit}",
            Self::NOW
        )
    }

    fn is_retryable(error: &sqlx::Error) -> bool {
        is_deadlock(error)
    }

    async fn execute(
        conn: &mut MySqlConnection,
        statement: &Statement,
    ) -> Result<Done, sqlx::Error> {
        let done = dialect::query::<MySql>(statement).execute(conn).await?;
        Ok(Done {
            rows_affected: done.rows_affected(),
            last_insert_id: i64::try_from(done.last_insert_id()).ok(),
        })
    }

    async fn fetch(
        conn: &mut Conn<Self>,
        statement: &Statement,
    ) -> Result<Vec<MySqlRow>, sqlx::Error> {
        dialect::query::<MySql>(statement).fetch_all(conn).await
    }

    fn decode(row: &MySqlRow, shape: &[Kind]) -> Result<Vec<Value>, sqlx::Error> {
        dialect::decode(row, shape)
    }

    const HAS_TABLE: &'static str = "SELECT CAST(COUNT(*) AS SIGNED) FROM \
        information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?";

    /// Tables with the store's names: the database may hold anything besides them.
    fn foreign_tables(t: &Tables) -> Statement {
        Statement::once(
            "SELECT CAST(COUNT(*) AS SIGNED) FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN (?, ?, ?)"
                .to_string(),
        )
        .text(&t.cursors)
        .text(&t.dead_letters)
        .text(&t.plugin_kv)
    }

    fn record_version(table: &str) -> String {
        Self::insert_or_keep(table, "version", &["version"], "(?)")
    }

    /// In the best binary collation the server has.
    async fn schema_scripts(
        &self,
        conn: &mut MySqlConnection,
        tables: &Tables,
    ) -> Result<Scripts, StoreError> {
        let collation = binary_collation(conn, &self.server).await?;
        let has_object = has_column(conn, &self.server, &tables.inbox_events, "object").await?;
        Ok(schema_scripts(tables, collation, has_object))
    }

    async fn execute_script(conn: &mut MySqlConnection, sql: &str) -> Result<(), sqlx::Error> {
        sqlx::raw_sql(AssertSqlSafe(sql)).execute(conn).await?;
        Ok(())
    }

    /// None: the lanes' writes are multi-row statements on the pool, whose connections overlap
    /// their network round trips.
    type Writer = Infallible;

    fn start_writer(&self, _: &Statements<Self>) -> Result<Option<Infallible>, StoreError> {
        Ok(None)
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
    move |source| StoreError::Query {
        store: Location::Database(server.to_string()),
        operation,
        source,
    }
}

/// Whether InnoDB rolled back the transaction to break a deadlock (error 1213; Galera reports
/// a certification conflict the same way).
fn is_deadlock(error: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = error else {
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
/// forward (see [`schema`]), under a named lock so that processes opening an empty database
/// together create it once.
async fn migrate(
    dialect: &MySqlDialect,
    conn: &mut MySqlConnection,
    tables: &Tables,
    location: &Location,
) -> Result<(), StoreError> {
    let server = &dialect.server;
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
        return Err(StoreError::Query {
            store: location.clone(),
            operation: "lock the schema",
            source: sqlx::Error::Protocol(format!(
                "another process held the lock `{lock}` for {SCHEMA_LOCK_SECONDS} s"
            )),
        });
    }
    let result = schema::migrate(dialect, conn, tables, location).await;
    let released = sqlx::query("DO RELEASE_LOCK(?)")
        .bind(&lock)
        .execute(&mut *conn)
        .await;
    if let Err(e) = released {
        tracing::debug!(server = %server, error = %e, "releasing the schema lock failed");
    }
    result.map(|_| ())
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

/// Whether `table` of the connection's database has `column`.
async fn has_column(
    conn: &mut MySqlConnection,
    server: &str,
    table: &str,
    column: &str,
) -> Result<bool, StoreError> {
    let found: i64 = sqlx::query_scalar(
        "SELECT CAST(COUNT(*) AS SIGNED) FROM information_schema.COLUMNS \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = ?",
    )
    .bind(table)
    .bind(column)
    .fetch_one(&mut *conn)
    .await
    .map_err(failed(server, "read the inbox's columns"))?;
    Ok(found > 0)
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
}
