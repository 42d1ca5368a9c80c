//! What can go wrong with the state store, always said with the file's path (SQLite) or the
//! server and database (MySQL, never with the password) and the operation, because the
//! operator reading the message has to find and fix that file or database.

use std::fmt;
use std::path::PathBuf;

use thiserror::Error;

/// An error of the durable state store.
#[derive(Debug, Error)]
pub enum StoreError {
    /// The folder that should hold the state file could not be created.
    #[error("cannot create the folder {path} for the state file: {source}")]
    CreateDir {
        /// The folder.
        path: PathBuf,
        /// Why the file system refused.
        #[source]
        source: std::io::Error,
    },

    /// The file could not be opened as an SQLite database: missing permissions, a folder in its
    /// place, or a file that is not SQLite at all.
    #[error("cannot open the state file {path}: {source}")]
    Open {
        /// The state file, as `state.path` resolves.
        path: PathBuf,
        /// What SQLite or sqlx said.
        #[source]
        source: sqlx::Error,
    },

    /// The file was written by a newer jobrelay. Opening it anyway could corrupt what that
    /// version stored, so this one stops instead.
    #[error(
        "the state file {path} has schema version {found}, but this jobrelay understands only up to \
         version {supported}; run the newer jobrelay that wrote it, or point `state.path` at another file"
    )]
    NewerSchema {
        /// The state file, as `state.path` resolves.
        path: PathBuf,
        /// The schema version the file records.
        found: i64,
        /// The newest schema version this build knows.
        supported: i64,
    },

    /// The file is an SQLite database of something else; writing our tables into it would
    /// damage another program's data.
    #[error(
        "the file {path} is an SQLite database but not a jobrelay state file (it has tables but no \
         schema_version); point `state.path` at another file"
    )]
    NotAStateFile {
        /// The file.
        path: PathBuf,
    },

    /// A statement failed. `operation` names what the store was doing.
    #[error("{store}: cannot {operation}: {source}")]
    Query {
        /// The file or database.
        store: Location,
        /// What the store was doing, as a verb phrase (`lock the schema`).
        operation: &'static str,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },

    /// A write of the SQLite file's writer thread failed (see `sqlite_writer`). `operation` names
    /// what was being done.
    #[error("state file {path}: cannot {operation}: {source}")]
    CursorWrite {
        /// The state file, as `state.path` resolves.
        path: PathBuf,
        /// What the writer was doing, as a verb phrase.
        operation: &'static str,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },

    /// The thread that writes cursors to the SQLite file could not be started.
    #[error("state file {path}: cannot start the cursor writer's thread: {source}")]
    CursorThreadStart {
        /// The state file, as `state.path` resolves.
        path: PathBuf,
        /// Why the thread could not be spawned.
        #[source]
        source: std::io::Error,
    },

    /// The thread that writes cursors to the SQLite file has stopped (it only does when the
    /// store is dropped, or on a bug); no cursor can be saved until the daemon restarts.
    #[error("state file {path}: the cursor writer's thread has stopped")]
    CursorThreadStopped {
        /// The state file, as `state.path` resolves.
        path: PathBuf,
    },

    /// A stored row could not be read back (an unknown phase, undecodable event JSON, ...):
    /// the file or tables were changed by hand or damaged.
    #[error("{store}: stored {what} is unreadable: {detail}")]
    Corrupt {
        /// The file or database.
        store: Location,
        /// What kind of row (`cursor`, `dead letter`, `schema version`).
        what: &'static str,
        /// What is wrong with it.
        detail: String,
    },

    /// A value could not be encoded for storage.
    #[error("cannot encode {what} for the state store: {source}")]
    Encode {
        /// What was being stored.
        what: &'static str,
        /// serde_json's error.
        #[source]
        source: serde_json::Error,
    },

    /// `state.url` cannot be used: its secret reference does not resolve, it is not a MySQL
    /// URL, or it names no database. Never shows the URL, which may hold a password.
    #[error("state.url: {0}")]
    BadUrl(String),

    /// `state.table_prefix` is not 1 to 32 ASCII letters, digits and underscores. The prefix
    /// goes into table names, so nothing else is let through.
    #[error("state.table_prefix {prefix:?} {reason}: use 1 to 32 ASCII letters, digits and `_`")]
    BadTablePrefix {
        /// The prefix as configured.
        prefix: String,
        /// What is wrong with it (`is longer than 32 characters`).
        reason: &'static str,
    },

    /// The database server could not be reached, or refused the login. `server` is
    /// `mysql://user@host:port/database`, without the password.
    #[error("cannot connect to the state database {server}: {source}")]
    Connect {
        /// `mysql://user@host:port/database`, without the password.
        server: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },

    /// The tables were written by a newer jobrelay. Using them anyway could corrupt what that
    /// version stored, so this one stops instead.
    #[error(
        "the state database {server} has schema version {found} (table {table}), but this \
         jobrelay understands only up to version {supported}; run the newer jobrelay that wrote \
         it, or point `state.url` or `state.table_prefix` at other tables"
    )]
    DatabaseNewerSchema {
        /// `mysql://user@host:port/database`, without the password.
        server: String,
        /// The schema-version table, with its prefix.
        table: String,
        /// The schema version the table records.
        found: i64,
        /// The newest schema version this build knows.
        supported: i64,
    },

    /// Tables with the store's names exist but `table` (the schema version) does not: they
    /// belong to something else, and writing into them could damage its data.
    #[error(
        "the state database {server} has tables named like jobrelay's but no {table}, so they \
         are not jobrelay's; choose another `state.table_prefix`"
    )]
    NotAStateDatabase {
        /// `mysql://user@host:port/database`, without the password.
        server: String,
        /// The schema-version table that is missing, with its prefix.
        table: String,
    },

    /// A dead-letter selection that is empty or ambiguous; refused rather than guessed, since
    /// guessing could drop every dead letter.
    #[error("{0}")]
    InvalidSelection(String),
}

/// Which store an error is about, as the operator must find it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// The SQLite state file.
    File(PathBuf),
    /// The MySQL or MariaDB database, as `mysql://user@host:port/database` (no password).
    Database(String),
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::File(path) => write!(f, "state file {}", path.display()),
            Location::Database(server) => write!(f, "state database {server}"),
        }
    }
}
