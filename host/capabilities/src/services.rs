//! The process-wide resources behind the capabilities: pools, stores and cluster clients.
//!
//! Built once by the daemon (or a CLI command) and shared by every plugin version; a call's
//! store gets only the parts its grants name. A host built without some service (a test, the
//! `plugin run` command without a main file) refuses the grants that need it at load, with a
//! message saying so.

use std::path::Path;
use std::sync::Arc;

use super::archive::{ArchiveLocation, ArchiveStore};
use super::log::LogLines;
use super::open_error::OpenError;
use super::pod_logs::ClusterDirectory;
use super::refusals::Refusals;
use super::sql::{Databases, SqlSettings};
use super::tape::Tape;
use jobrelay_state::PluginKv;
use jobrelay_watch::kinds::JobKind;

/// Folder of the `embedded` SQL connection's files, one per plugin (`<plugin>.db`): next to the
/// state file, or, with the state in MySQL, in
/// [`DEFAULT_LOCAL_DIR`](jobrelay_state::DEFAULT_LOCAL_DIR). A main file that defines a
/// connection named `embedded` puts it elsewhere (and shares it, as any named connection).
pub const EMBEDDED_DB_DIR: &str = "embedded";

/// Everything the capabilities reach outside the store.
#[derive(Clone, Default)]
pub struct Services {
    /// Named SQL pools.
    pub sql: Databases,
    /// Where plugins' key-value entries are kept.
    pub kv: Option<Arc<dyn PluginKv>>,
    /// The archive store.
    pub archive: Option<ArchiveStore>,
    /// The watched clusters' clients, for pod logs.
    pub clusters: ClusterDirectory,
    /// How often each plugin ran into a quota or limit.
    pub refusals: Arc<Refusals>,
    /// The log lines each plugin wrote, by level.
    pub log_lines: Arc<LogLines>,
    /// A tape recording or replaying every capability call (`plugin run --record/--replay`,
    /// `plugin test`); `None` in the daemon.
    pub tape: Option<Arc<Tape>>,
}

impl std::fmt::Debug for Services {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Services")
            .field("sql", &self.sql)
            .field("kv", &self.kv.is_some())
            .field("archive", &self.archive)
            .finish_non_exhaustive()
    }
}

impl Services {
    /// The services the main file describes, with `kv` kept in the state store (none: kv calls
    /// fail, as in `jobrelay check`, which must not open the state file). SQL pools
    /// connect lazily and the archive folder is created, so this fails only on configuration
    /// errors (a bad URL, an unresolvable secret, an archive folder that cannot be made).
    pub fn open(
        sql: &SqlSettings,
        archive: &ArchiveLocation,
        local_dir: &Path,
        kinds: &[JobKind],
        kv: Option<Arc<dyn PluginKv>>,
    ) -> Result<Services, OpenError> {
        let sql = Databases::open(sql, &local_dir.join(EMBEDDED_DB_DIR))?;
        let archive = ArchiveStore::open(archive)?;
        let clusters = ClusterDirectory::default();
        clusters.set_kinds(kinds);
        Ok(Services {
            sql,
            kv,
            archive: Some(archive),
            clusters,
            refusals: Arc::default(),
            log_lines: Arc::default(),
            tape: None,
        })
    }
}
