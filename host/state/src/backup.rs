//! A copy of the SQLite state file that can be restored: what `jobrelay state backup` writes.
//!
//! The file runs in WAL mode, so the `.db` alone is not the state: committed cursors, inbox
//! events and plugin keys may still sit in the `-wal` file beside it, and a copy of the `.db`
//! taken while the daemon writes can be torn. SQLite's `VACUUM INTO` writes a single, whole
//! file from one read transaction — a consistent snapshot, taken beside a running daemon
//! (which goes on writing; readers do not block the WAL writer) — that is a state file as it
//! stands, with nothing in a `-wal` beside it. Restoring is putting it in place of the state
//! file while no daemon runs (docs/operations.md, "Backup and restore").
//!
//! A MySQL or MariaDB store is backed up with the database's own tools; see the docs.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags};

/// Why a backup was not written.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// No state file where the config says (nothing to back up; a wrong `--config`?).
    #[error("no state file {0}")]
    Missing(PathBuf),
    /// Something is already at the backup's path: a backup never replaces a file.
    #[error("{0} exists: a backup is written to a new file only")]
    Exists(PathBuf),
    /// SQLite could not read the state or write the copy.
    #[error("cannot back up the state file {path} into {out}: {source}")]
    Sqlite {
        /// The state file.
        path: PathBuf,
        /// The backup's path.
        out: PathBuf,
        /// What SQLite said.
        #[source]
        source: rusqlite::Error,
    },
}

/// Writes a consistent copy of the SQLite state file `db` into the new file `out`; its size
/// in bytes.
pub fn backup_sqlite(db: &Path, out: &Path) -> Result<u64, BackupError> {
    if !db.is_file() {
        return Err(BackupError::Missing(db.to_path_buf()));
    }
    if out.exists() {
        return Err(BackupError::Exists(out.to_path_buf()));
    }
    let failed = |source| BackupError::Sqlite {
        path: db.to_path_buf(),
        out: out.to_path_buf(),
        source,
    };
    // Read-only: the daemon's file is never written by a backup, nor migrated.
    let conn = Connection::open_with_flags(
        db,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(failed)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .map_err(failed)?;
    let target = out.to_string_lossy();
    conn.execute("VACUUM INTO ?1", [target.as_ref()])
        .map_err(failed)?;
    Ok(std::fs::metadata(out).map(|m| m.len()).unwrap_or_default())
}
