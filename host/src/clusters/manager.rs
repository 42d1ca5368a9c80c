//! The set of running clusters, changed one file's worth at a time.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::health::HealthBoard;
use super::supervisor::{self, ClientUsers, SupervisorHandle};
use crate::config::main_file::MainConfig;
use crate::config::sources::ClusterSource;
use crate::config::state::Change;
use jobrelay_fleet::jobs::JobView;
use jobrelay_watch::watcher::Sink;

/// Owns one supervisor per cluster.
pub struct ClusterManager {
    running: BTreeMap<String, SupervisorHandle>,
    sink: Sink,
    health: HealthBoard,
    /// Who gets each cluster's client.
    users: ClientUsers,
    cancel: CancellationToken,
    /// Which clusters may run. A follower in a leader election allows none until
    /// [`activate`](ClusterManager::activate); a sharded replica allows the clusters whose
    /// Leases it holds.
    scope: Scope,
    /// Watch without delivering: a follower in a leader election keeps its watches (health,
    /// credentials and connections proven) but leaves jobrelay's finalizer alone.
    passive: bool,
    /// The job view, which forgets a cluster that is removed or handed to another replica
    /// (one that only restarts keeps its jobs: its next list settles them).
    view: Option<Arc<JobView>>,
}

/// Which of the configured clusters run here.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Scope {
    All,
    Only(BTreeSet<String>),
}

impl ClusterManager {
    pub fn new(
        sink: Sink,
        health: HealthBoard,
        users: ClientUsers,
        cancel: CancellationToken,
    ) -> Self {
        ClusterManager {
            running: BTreeMap::new(),
            sink,
            health,
            users,
            cancel,
            scope: Scope::All,
            passive: false,
            view: None,
        }
    }

    /// The same manager, telling `view` of the clusters it lets go.
    pub fn viewing(mut self, view: Arc<JobView>) -> Self {
        self.view = Some(view);
        self
    }

    /// The kinds watched changed: the job view lets go of the jobs of kinds no longer watched.
    pub fn retain_kinds(&self, main: &MainConfig) {
        if let Some(view) = &self.view {
            let names: Vec<&str> = main.kinds.iter().map(|k| k.name.as_str()).collect();
            view.retain_kinds(&names);
        }
    }

    /// A cluster no longer runs here: its health and its jobs are forgotten.
    fn forget(&self, name: &str) {
        self.health.remove(name);
        self.users.meters.remove(name);
        if let Some(view) = &self.view {
            view.forget_cluster(name);
        }
    }

    /// A manager that watches every cluster passively until [`activate`](Self::activate).
    pub fn passive(mut self) -> Self {
        self.passive = true;
        self
    }

    /// A manager that starts no cluster until activated or allowed one by one.
    pub fn inactive(mut self) -> Self {
        self.scope = Scope::Only(BTreeSet::new());
        self
    }

    /// Starts every cluster of `sources` (this replica begins to deliver).
    pub async fn activate(
        &mut self,
        sources: &BTreeMap<String, ClusterSource>,
        main: &Arc<MainConfig>,
    ) {
        self.scope = Scope::All;
        self.passive = false;
        self.restart_all(sources, main).await;
    }

    /// Lets one more cluster run and starts it, if configured.
    pub async fn allow(
        &mut self,
        name: &str,
        sources: &BTreeMap<String, ClusterSource>,
        main: &Arc<MainConfig>,
    ) {
        if let Scope::Only(allowed) = &mut self.scope {
            allowed.insert(name.to_string());
        }
        self.users.directory.set_kinds(&main.kinds);
        self.stop(name).await;
        if let Some(source) = sources.get(name) {
            self.start(source, main);
        }
    }

    /// Stops one cluster and keeps it from running here.
    pub async fn disallow(&mut self, name: &str) {
        if let Scope::Only(allowed) = &mut self.scope {
            allowed.remove(name);
        }
        self.stop(name).await;
        self.forget(name);
    }

    /// The clusters allowed to run, or `None` when all are.
    pub fn allowed(&self) -> Option<Vec<String>> {
        match &self.scope {
            Scope::All => None,
            Scope::Only(allowed) => Some(allowed.iter().cloned().collect()),
        }
    }

    fn in_scope(&self, name: &str) -> bool {
        match &self.scope {
            Scope::All => true,
            Scope::Only(allowed) => allowed.contains(name),
        }
    }

    pub fn health(&self) -> &HealthBoard {
        &self.health
    }

    /// Names of running clusters.
    pub fn names(&self) -> Vec<String> {
        self.running.keys().cloned().collect()
    }

    /// Apply cluster changes: start added ones, restart changed ones, stop removed ones. Other
    /// clusters are not touched.
    pub async fn apply(&mut self, changes: &[Change<ClusterSource>], main: &Arc<MainConfig>) {
        self.users.directory.set_kinds(&main.kinds);
        for change in changes {
            match change {
                Change::Added(source) | Change::Changed(source) => {
                    if !self.in_scope(&source.name) {
                        continue;
                    }
                    self.stop(&source.name).await;
                    self.start(source, main);
                }
                Change::Removed(name) => {
                    self.stop(name).await;
                    self.forget(name);
                }
            }
        }
    }

    /// Restart every cluster (the kinds or scope to watch changed).
    pub async fn restart_all(
        &mut self,
        sources: &BTreeMap<String, ClusterSource>,
        main: &Arc<MainConfig>,
    ) {
        self.users.directory.set_kinds(&main.kinds);
        self.stop_all().await;
        for source in sources.values() {
            if self.in_scope(&source.name) {
                self.start(source, main);
            }
        }
    }

    pub async fn stop_all(&mut self) {
        let names: Vec<String> = self.running.keys().cloned().collect();
        for name in names {
            self.stop(&name).await;
        }
    }

    fn start(&mut self, source: &ClusterSource, main: &Arc<MainConfig>) {
        let handle = supervisor::spawn(
            source,
            main,
            self.passive,
            self.sink.clone(),
            self.health.clone(),
            self.users.clone(),
            &self.cancel,
        );
        tracing::info!(cluster = %source.name, file = %source.path.display(), "cluster started");
        self.running.insert(source.name.clone(), handle);
    }

    async fn stop(&mut self, name: &str) {
        if let Some(handle) = self.running.remove(name) {
            handle.stop().await;
        }
    }
}
