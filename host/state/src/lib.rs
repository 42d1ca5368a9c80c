//! The durable state: what jobrelay must find again after a restart or on another replica.
//!
//! Per (plugin, job) the host records the last delivered resourceVersion and phase (the
//! cursor), so that after a restart the initial list re-delivers nothing that was delivered
//! and a phase change that happened while jobrelay was down is delivered once, with the
//! stored phase as previous phase. The inbox keeps the events a lane took and has not yet
//! settled, so what the watch saw does not live only in memory. Dead letters live here too,
//! so they survive restarts, and so do operators' replay requests: `jobrelay dead-letters
//! replay` is a separate process that marks rows in the same store, and the running daemon
//! takes them from there. Beside them: when each plugin was first installed, and the
//! plugins' own key-value entries.
//!
//! The store is two traits, [`DeliveryStore`] and [`PluginKv`], with two backends:
//! [`SqliteStore`], one SQLite file (the default, for a single daemon), and [`MySqlStore`],
//! tables in a MySQL or MariaDB database that several replicas share. See each one's docs for
//! the durability it promises; the delivery guarantees are the same on both, because both are
//! one [`SqlStore`] written once over a dialect.
//!
//! # Map
//!
//! - `store.rs`: the traits, the promises every backend keeps.
//! - `cursor.rs`, `inbox.rs`, `dead_letter.rs`: what is stored, as the lanes and the CLI see it.
//! - `sql_store.rs`: [`SqlStore`], the traits written once over a dialect: which statement runs
//!   when, in which transaction, with which deadlock retry.
//! - `sql_kv.rs`: [`PluginKv`], the plugins' key-value entries, over the same store.
//! - `sql_text.rs`: the text of every statement the store runs, and how a cursor is bound.
//! - `schema.rs`: the schema's version — read, judged, migrated and recorded — for both.
//! - `dialect.rs`: what a backend supplies: the SQL phrases that differ, its driver glue, its
//!   schema's scripts, and an optional writer of its own for the lanes' writes.
//! - `sqlite.rs`, `mysql.rs`: the two dialects, their connections and schema scripts.
//! - `sqlite_writer.rs`: the SQLite dialect's writer, a thread that owns one connection to the
//!   file and runs the lanes' writes over statements it keeps prepared.
//! - `rows.rs`: reading cursors and dead letters back from rows, alike on both.
//! - `error.rs`: [`StoreError`], every error naming the file or the database.
//! - `backup.rs`: a consistent copy of the SQLite file, taken beside a running daemon.

// A layer crate: every public item says what it is for, since the next layer up reads its
// API (the lint is on in each layer crate; see the root Cargo.toml's [workspace.lints]).
#![warn(missing_docs)]

pub mod backup;
mod cursor;
mod dead_letter;
mod dialect;
mod error;
mod inbox;
mod mysql;
mod rows;
mod schema;
mod sql_kv;
mod sql_store;
mod sql_text;
mod sqlite;
mod sqlite_writer;
mod store;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use jobrelay_contract::secret;

pub use self::cursor::Cursor;
pub use self::dead_letter::{DeadLetter, Selection};
pub use self::error::{Location, StoreError};
pub use self::inbox::{
    Damaged, INBOX_PAGE, Inbox, READ_BACK_BATCH, SWEEP_AFTER_SECONDS, Settled, Stored, Taken,
    WriteBatch,
};
pub use self::mysql::{
    DEFAULT_TABLE_PREFIX, MAX_TABLE_PREFIX_LEN, MySqlDialect, MySqlStore, check_table_prefix,
    redacted_url,
};
pub use self::schema::SCHEMA_VERSION;
pub use self::sql_store::{DEADLOCK_TRIES, SqlStore};
pub use self::sqlite::{SqliteDialect, SqliteStore};
pub use self::store::{DeliveryStore, JobDeadLetters, PluginKv, summarize_dead_letters};

/// Where the state file lives when the main file does not say.
pub const DEFAULT_STATE_PATH: &str = "/var/lib/jobrelay/state.db";

/// The folder for jobrelay's local files (the plugins' `embedded` database, the default
/// archive folder) when the state is in a database server rather than in a file whose folder
/// would hold them: the folder of [`DEFAULT_STATE_PATH`].
pub const DEFAULT_LOCAL_DIR: &str = "/var/lib/jobrelay";

/// The `state:` section of the main config file. Read once at start: moving the state needs a
/// restart.
///
/// ```yaml
/// state:
///   path: state/jobrelay.db   # relative: against the config folder
/// ```
///
/// or, for replicas that share the state:
///
/// ```yaml
/// state:
///   url: env:JOBRELAY_STATE_URL   # mysql://user:password@host:3306/database
///   table_prefix: jobrelay_
/// ```
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "snake_case", deny_unknown_fields)]
pub struct StateSettings {
    /// The SQLite state file. A relative path is resolved against the config folder (not the
    /// working directory, which differs between the daemon and an operator's shell), so the
    /// daemon and `jobrelay dead-letters` find the same file. The folder is created if missing.
    /// Default (when `url` is not given either): `/var/lib/jobrelay/state.db`.
    pub path: Option<PathBuf>,
    /// A MySQL or MariaDB database instead of the file: `mysql://user:password@host:3306/db`,
    /// usually as a secret reference (`env:NAME`, `file:/path`) so that the password stays out
    /// of the config folder. Resolved when the store is opened, and never shown.
    pub url: Option<String>,
    /// With `url`: the start of every table name, so that several installations can share
    /// one database. 1 to 32 ASCII letters, digits and `_`. Default: `jobrelay_`.
    pub table_prefix: Option<String>,
}

impl std::fmt::Debug for StateSettings {
    /// Never prints a literal URL: it may hold a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateSettings")
            .field("path", &self.path)
            .field("url", &self.url.as_deref().map(shown_url))
            .field("table_prefix", &self.table_prefix)
            .finish()
    }
}

impl StateSettings {
    /// The backend these settings choose, with a relative `path` resolved against
    /// `config_dir`. Refuses `path` together with `url`, `table_prefix` without `url`, an empty
    /// `url` or one that is neither a MySQL URL nor a secret reference, and a prefix that is not
    /// allowed; each message names the field. The URL's secret is not resolved here.
    pub fn backend(&self, config_dir: &Path) -> Result<StateBackend, SettingsError> {
        match (&self.path, &self.url) {
            (Some(_), Some(_)) => Err(SettingsError::PathAndUrl),
            (None, Some(url)) => {
                let url = url.trim();
                if url.is_empty() {
                    return Err(SettingsError::EmptyUrl);
                }
                let is_mysql = url.starts_with("mysql://") || url.starts_with("mariadb://");
                if !is_mysql && !secret::is_reference(url) {
                    return Err(SettingsError::NotMySqlUrl);
                }
                let table_prefix = self
                    .table_prefix
                    .clone()
                    .unwrap_or_else(|| DEFAULT_TABLE_PREFIX.to_string());
                check_table_prefix(&table_prefix).map_err(SettingsError::TablePrefix)?;
                Ok(StateBackend::MySql {
                    url: url.to_string(),
                    table_prefix,
                })
            }
            (path, None) => {
                if self.table_prefix.is_some() {
                    return Err(SettingsError::PrefixWithoutUrl);
                }
                let path = path
                    .clone()
                    .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_PATH));
                Ok(StateBackend::Sqlite(if path.is_absolute() {
                    path
                } else {
                    config_dir.join(path)
                }))
            }
        }
    }
}

/// What is wrong with the `state:` section; each message names the field.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// Both backends are named; which one holds the cursors must not be guessed.
    #[error(
        "state.path and state.url: give one, not both (`path` is an SQLite file for one \
         daemon, `url` a MySQL or MariaDB database that replicas share)"
    )]
    PathAndUrl,
    /// `url` is given but blank.
    #[error("state.url: must not be empty")]
    EmptyUrl,
    /// `url` is neither a MySQL URL nor a secret reference.
    #[error(
        "state.url: must be a mysql:// or mariadb:// URL, or an env:NAME or file:/path secret \
         reference to one"
    )]
    NotMySqlUrl,
    /// `table_prefix` without `url`: a prefix that would silently do nothing.
    #[error(
        "state.table_prefix: only used with state.url (a MySQL or MariaDB database); the \
         SQLite file has no prefix"
    )]
    PrefixWithoutUrl,
    /// [`StoreError::BadTablePrefix`], which names the field itself.
    #[error("{0}")]
    TablePrefix(StoreError),
}

/// Where the durable state lives, after validation of the `state:` section.
#[derive(Clone, PartialEq, Eq)]
pub enum StateBackend {
    /// One SQLite file; the path is absolute.
    Sqlite(PathBuf),
    /// Tables in a MySQL or MariaDB database.
    MySql {
        /// As written in `state.url`: a `mysql://` URL, or a secret reference to one, resolved
        /// when the store is opened. Never shown as is: see the `Display` impl.
        url: String,
        /// Checked with [`check_table_prefix`].
        table_prefix: String,
    },
}

impl StateBackend {
    /// The folder for jobrelay's local files: the plugins' `embedded` SQLite database and the
    /// default archive folder. The state file's folder; with the state in a database server,
    /// [`DEFAULT_LOCAL_DIR`].
    pub fn local_dir(&self) -> PathBuf {
        match self {
            StateBackend::Sqlite(path) => path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .map(Path::to_path_buf)
                .unwrap_or_else(|| PathBuf::from(DEFAULT_LOCAL_DIR)),
            StateBackend::MySql { .. } => PathBuf::from(DEFAULT_LOCAL_DIR),
        }
    }
}

impl std::fmt::Display for StateBackend {
    /// `the SQLite file PATH`, or `the MySQL database URL (tables PREFIX*)` with a secret
    /// reference shown as written and a literal URL without its password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StateBackend::Sqlite(path) => write!(f, "the SQLite file {}", path.display()),
            StateBackend::MySql { url, table_prefix } => write!(
                f,
                "the MySQL database {} (tables {table_prefix}*)",
                shown_url(url)
            ),
        }
    }
}

impl std::fmt::Debug for StateBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// A `state.url` as it may be shown: a secret reference as written (it names the variable or
/// file, not the value), a literal URL without its password.
fn shown_url(url: &str) -> String {
    if secret::is_reference(url) {
        url.to_string()
    } else {
        redacted_url(url)
    }
}

/// Opens the backend `backend` names: the SQLite file (creating it and its folder if missing),
/// or the MySQL database (resolving the URL's secret reference, creating missing tables).
/// Fails if the database cannot be reached: the daemon needs its store at start.
pub async fn open_store(backend: &StateBackend) -> Result<Arc<dyn DeliveryStore>, StoreError> {
    Ok(match backend {
        StateBackend::Sqlite(path) => Arc::new(SqliteStore::open(path).await?),
        StateBackend::MySql { url, table_prefix } => Arc::new(open_mysql(url, table_prefix).await?),
    })
}

/// Opens the store once and returns it both as the cursor store and as the plugins'
/// key-value store.
pub async fn open_stores(
    backend: &StateBackend,
) -> Result<(Arc<dyn DeliveryStore>, Arc<dyn PluginKv>), StoreError> {
    Ok(match backend {
        StateBackend::Sqlite(path) => {
            let store = Arc::new(SqliteStore::open(path).await?);
            (store.clone(), store)
        }
        StateBackend::MySql { url, table_prefix } => {
            let store = Arc::new(open_mysql(url, table_prefix).await?);
            (store.clone(), store)
        }
    })
}

async fn open_mysql(url: &str, table_prefix: &str) -> Result<MySqlStore, StoreError> {
    let resolved = secret::resolve(url).map_err(|e| StoreError::BadUrl(e.to_string()))?;
    MySqlStore::open(&resolved, table_prefix).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<StateBackend, String> {
        let settings: StateSettings = serde_yaml_ng::from_str(yaml).map_err(|e| e.to_string())?;
        settings
            .backend(Path::new("/etc/jobrelay"))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn settings_default_and_relative_paths() {
        let s: StateSettings = serde_yaml_ng::from_str("{}").expect("empty section");
        assert_eq!(s, StateSettings::default());
        assert_eq!(
            parse("{}"),
            Ok(StateBackend::Sqlite(PathBuf::from(DEFAULT_STATE_PATH)))
        );
        assert_eq!(
            parse("path: data/state.db"),
            Ok(StateBackend::Sqlite(PathBuf::from(
                "/etc/jobrelay/data/state.db"
            )))
        );
        assert_eq!(
            parse("path: data/state.db").map(|b| b.local_dir()),
            Ok(PathBuf::from("/etc/jobrelay/data"))
        );
        assert!(serde_yaml_ng::from_str::<StateSettings>("paht: x").is_err());
    }

    #[test]
    fn settings_choose_mysql_with_a_prefix() {
        let backend = parse("url: env:STATE_URL").expect("a secret reference");
        assert_eq!(
            backend,
            StateBackend::MySql {
                url: "env:STATE_URL".into(),
                table_prefix: DEFAULT_TABLE_PREFIX.into(),
            }
        );
        assert_eq!(backend.local_dir(), PathBuf::from(DEFAULT_LOCAL_DIR));
        assert_eq!(
            backend.to_string(),
            "the MySQL database env:STATE_URL (tables jobrelay_*)"
        );
        let backend = parse("url: mysql://app:s3cret@db:3306/ops\ntable_prefix: relay2_")
            .expect("a literal URL");
        let StateBackend::MySql { table_prefix, .. } = &backend else {
            panic!("not MySQL: {backend}");
        };
        assert_eq!(table_prefix, "relay2_");
        for shown in [backend.to_string(), format!("{backend:?}")] {
            assert!(!shown.contains("s3cret"), "{shown}");
            assert!(shown.contains("mysql://app@db:3306/ops"), "{shown}");
        }
        let settings: StateSettings =
            serde_yaml_ng::from_str("url: mysql://app:s3cret@db/ops").expect("parse");
        assert!(!format!("{settings:?}").contains("s3cret"));
        assert!(parse("url: file:/run/secrets/state-url").is_ok());
        assert!(parse("url: mariadb://db/ops").is_ok());
    }

    #[test]
    fn settings_refuse_mixed_or_bad_fields() {
        let err = parse("path: state.db\nurl: env:STATE_URL").expect_err("both");
        assert!(
            err.contains("state.path") && err.contains("state.url"),
            "{err}"
        );
        let err = parse("url: env:X\ntable_prefix: bad-prefix").expect_err("bad prefix");
        assert!(err.contains("state.table_prefix"), "{err}");
        let err = parse(&format!("url: env:X\ntable_prefix: {}", "p".repeat(33)))
            .expect_err("long prefix");
        assert!(err.contains("state.table_prefix"), "{err}");
        let err = parse("table_prefix: jobrelay_").expect_err("prefix without url");
        assert!(err.contains("state.table_prefix"), "{err}");
        let err = parse("url: postgres://u:s3cret@db/x").expect_err("not MySQL");
        assert!(
            err.contains("state.url") && !err.contains("s3cret"),
            "{err}"
        );
        let err = parse("url: ' '").expect_err("empty");
        assert!(err.contains("state.url"), "{err}");
        assert!(parse("urls: env:X").is_err(), "unknown fields are refused");
    }
}
