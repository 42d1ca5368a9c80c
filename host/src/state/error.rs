//! What can go wrong with the state file, always said with the file's path and the operation,
//! because the operator reading the message has to find and fix that file.

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
    #[error("state file {path}: cannot {operation}: {source}")]
    Query {
        path: PathBuf,
        operation: &'static str,
        #[source]
        source: sqlx::Error,
    },

    /// A stored row could not be read back (an unknown phase, undecodable event JSON, ...):
    /// the file was changed by hand or damaged.
    #[error("state file {path}: stored {what} is unreadable: {detail}")]
    Corrupt {
        path: PathBuf,
        what: &'static str,
        detail: String,
    },

    /// A value could not be encoded for storage.
    #[error("cannot encode {what} for the state file: {source}")]
    Encode {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },

    /// A dead-letter selection that is empty or ambiguous; refused rather than guessed, since
    /// guessing could drop every dead letter.
    #[error("{0}")]
    InvalidSelection(String),
}
