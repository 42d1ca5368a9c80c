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
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The file could not be opened as an SQLite database: missing permissions, a folder in its
    /// place, or a file that is not SQLite at all.
    #[error("cannot open the state file {path}: {source}")]
    Open {
        path: PathBuf,
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
        path: PathBuf,
        found: i64,
        supported: i64,
    },

    /// The file is an SQLite database of something else; writing our tables into it would
    /// damage another program's data.
    #[error(
        "the file {path} is an SQLite database but not a jobrelay state file (it has tables but no \
         schema_version); point `state.path` at another file"
    )]
    NotAStateFile { path: PathBuf },

    /// A statement failed. `operation` names what the store was doing.
    #[error("{store}: cannot {operation}: {source}")]
    Query {
        store: Location,
        operation: &'static str,
        #[source]
        source: sqlx::Error,
    },

    /// A write of the SQLite file's writer thread failed (see `sqlite_writer`). `operation` names
    /// what was being done.
    #[error("state file {path}: cannot {operation}: {source}")]
    CursorWrite {
        path: PathBuf,
        operation: &'static str,
        #[source]
        source: rusqlite::Error,
    },

    /// The thread that writes cursors to the SQLite file could not be started.
    #[error("state file {path}: cannot start the cursor writer's thread: {source}")]
    CursorThreadStart {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The thread that writes cursors to the SQLite file has stopped (it only does when the
    /// store is dropped, or on a bug); no cursor can be saved until the daemon restarts.
    #[error("state file {path}: the cursor writer's thread has stopped")]
    CursorThreadStopped { path: PathBuf },

    /// A stored row could not be read back (an unknown phase, undecodable event JSON, ...):
    /// the file or tables were changed by hand or damaged.
    #[error("{store}: stored {what} is unreadable: {detail}")]
    Corrupt {
        store: Location,
        what: &'static str,
        detail: String,
    },

    /// A value could not be encoded for storage.
    #[error("cannot encode {what} for the state store: {source}")]
    Encode {
        what: &'static str,
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
        prefix: String,
        reason: &'static str,
    },

    /// The database server could not be reached, or refused the login. `server` is
    /// `mysql://user@host:port/database`, without the password.
    #[error("cannot connect to the state database {server}: {source}")]
    Connect {
        server: String,
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
        server: String,
        table: String,
        found: i64,
        supported: i64,
    },

    /// Tables with the store's names exist but `table` (the schema version) does not: they
    /// belong to something else, and writing into them could damage its data.
    #[error(
        "the state database {server} has tables named like jobrelay's but no {table}, so they \
         are not jobrelay's; choose another `state.table_prefix`"
    )]
    NotAStateDatabase { server: String, table: String },

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
