//! The durable state: cursors, dead letters and replay requests.
//!
//! Per (plugin, job) the host records the last delivered resourceVersion and phase, so that
//! after a restart the initial list re-delivers nothing that was delivered and a phase change
//! that happened while jobrelay was down is delivered once, with the stored phase as previous
//! phase. Dead letters live here too, so they survive restarts, and so do operators' replay
//! requests: `jobrelay dead-letters replay` is a separate process that marks rows in the same
//! file, and the running daemon takes them from there.
//!
//! The store is the [`CursorStore`] trait; the default backend is [`SqliteStore`], one SQLite
//! file (see its docs for the durability it promises).

mod cursor;
mod dead_letter;
mod error;
mod sqlite;
mod store;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use self::cursor::Cursor;
pub use self::dead_letter::{DeadLetter, Selection};
pub use self::error::StoreError;
pub use self::sqlite::{SCHEMA_VERSION, SqliteStore};
pub use self::store::{CursorStore, PluginKv};

/// Where the state file lives when the main file does not say.
pub const DEFAULT_STATE_PATH: &str = "/var/lib/jobrelay/state.db";

/// The `state:` section of the main config file. Read once at start: moving the file needs a
/// restart.
///
/// ```yaml
/// state:
///   path: state/jobrelay.db   # relative: against the config folder
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "snake_case", deny_unknown_fields)]
pub struct StateSettings {
    /// The SQLite state file. A relative path is resolved against the config folder (not the
    /// working directory, which differs between the daemon and an operator's shell), so the
    /// daemon and `jobrelay dead-letters` find the same file. The folder is created if missing.
    /// Default: `/var/lib/jobrelay/state.db`.
    pub path: PathBuf,
}

impl Default for StateSettings {
    fn default() -> Self {
        StateSettings {
            path: PathBuf::from(DEFAULT_STATE_PATH),
        }
    }
}

impl StateSettings {
    /// The state file's path with a relative `path` resolved against `config_dir`.
    pub fn resolved_path(&self, config_dir: &Path) -> PathBuf {
        if self.path.is_absolute() {
            self.path.clone()
        } else {
            config_dir.join(&self.path)
        }
    }
}

/// Opens the default backend on `path`, creating the file and its folder if missing.
pub async fn open_store(path: &Path) -> Result<Arc<dyn CursorStore>, StoreError> {
    let store = SqliteStore::open(path).await?;
    Ok(Arc::new(store))
}

/// Opens the state file once and returns it both as the cursor store and as the plugins'
/// key-value store.
pub async fn open_stores(
    path: &Path,
) -> Result<(Arc<dyn CursorStore>, Arc<dyn PluginKv>), StoreError> {
    let store = Arc::new(SqliteStore::open(path).await?);
    Ok((store.clone(), store))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_default_and_relative_paths() {
        let s: StateSettings = serde_yaml_ng::from_str("{}").expect("empty section");
        assert_eq!(s.path, PathBuf::from(DEFAULT_STATE_PATH));
        assert_eq!(
            s.resolved_path(Path::new("/etc/jobrelay")),
            PathBuf::from(DEFAULT_STATE_PATH)
        );
        let s: StateSettings = serde_yaml_ng::from_str("path: data/state.db").expect("relative");
        assert_eq!(
            s.resolved_path(Path::new("/etc/jobrelay")),
            PathBuf::from("/etc/jobrelay/data/state.db")
        );
        assert!(serde_yaml_ng::from_str::<StateSettings>("paht: x").is_err());
    }
}
