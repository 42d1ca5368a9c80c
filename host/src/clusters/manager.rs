//! The set of running clusters, changed one file's worth at a time.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::finalizer::FinalizerService;
use super::health::HealthBoard;
use super::supervisor::{self, SupervisorHandle};
use crate::capabilities::pod_logs::ClusterDirectory;
use crate::config::main_file::MainConfig;
use crate::config::sources::ClusterSource;
use crate::config::state::Change;
use crate::watch::watcher::Observation;

/// Owns one supervisor per cluster.
pub struct ClusterManager {
    running: BTreeMap<String, SupervisorHandle>,
    sink: mpsc::Sender<Observation>,
    health: HealthBoard,
    finalizers: Arc<FinalizerService>,
    directory: ClusterDirectory,
    cancel: CancellationToken,
    /// Whether clusters run at all. A follower in a leader election keeps the manager
    /// inactive: changes are ignored until [`activate`](ClusterManager::activate) starts every
    /// cluster from the config's list as it is then.
    active: bool,
}

impl ClusterManager {
    pub fn new(
        sink: mpsc::Sender<Observation>,
        health: HealthBoard,
        finalizers: Arc<FinalizerService>,
        directory: ClusterDirectory,
        cancel: CancellationToken,
    ) -> Self {
        ClusterManager {
            running: BTreeMap::new(),
            sink,
            health,
            finalizers,
            directory,
            cancel,
            active: true,
        }
    }

    /// A manager that starts no cluster until activated.
    pub fn inactive(mut self) -> Self {
        self.active = false;
        self
    }

    /// Starts every cluster of `sources` (this replica begins to deliver).
    pub async fn activate(
        &mut self,
        sources: &BTreeMap<String, ClusterSource>,
        main: &Arc<MainConfig>,
    ) {
        self.active = true;
        self.restart_all(sources, main).await;
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
        self.directory.set_kinds(&main.kinds);
        if !self.active {
            return;
        }
        for change in changes {
            match change {
                Change::Added(source) | Change::Changed(source) => {
                    self.stop(&source.name).await;
                    self.start(source, main);
                }
                Change::Removed(name) => {
                    self.stop(name).await;
                    self.health.remove(name);
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
        self.directory.set_kinds(&main.kinds);
        self.stop_all().await;
        if !self.active {
            return;
        }
        for source in sources.values() {
            self.start(source, main);
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
            self.sink.clone(),
            self.health.clone(),
            supervisor::ClientUsers {
                finalizers: self.finalizers.clone(),
                directory: self.directory.clone(),
            },
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
