//! The daemon: wires config → clusters → watchers → dispatcher → lanes → plugins, and keeps
//! them in step with the config folder.
//!
//! Order matters at start: plugins are loaded before any cluster is watched, so the first
//! list of every cluster reaches every plugin that exists at start.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::clusters::health::{ClusterHealth, HealthBoard};
use crate::clusters::manager::ClusterManager;
use crate::config::folder_watch::{FolderWatch, Trigger};
use crate::config::state::{ConfigState, Update};
use crate::lanes::dispatcher::{self, Routes};
use crate::lanes::plugin_set::{PluginSet, PluginStatus};
use crate::runtime::Runtime;

/// How many observed events may wait for the dispatcher before watchers are held back.
const EVENT_BUFFER: usize = 1024;

/// A running daemon.
pub struct Daemon {
    health: HealthBoard,
    plugins: PluginSet,
    problems: Arc<RwLock<BTreeMap<PathBuf, String>>>,
    cancel: CancellationToken,
    task: JoinHandle<()>,
}

impl Daemon {
    /// Read the config folder, load plugins, start watching clusters, and keep following the
    /// folder. Fails only if the main file is broken or the engine cannot be built.
    pub async fn start(config_dir: &Path) -> anyhow::Result<Daemon> {
        let (mut state, first) = ConfigState::load(config_dir)
            .map_err(|(path, e)| anyhow::anyhow!("{}: {e}", path.display()))?;
        let main = state.main().clone();
        let runtime =
            Runtime::new(main.runtime.clone()).context("cannot build the WebAssembly engine")?;
        let routes = Routes::default();
        routes.set_kinds(&main);
        let plugins = PluginSet::new(runtime, routes.clone());
        let health = HealthBoard::default();
        let cancel = CancellationToken::new();
        let (sink, events) = mpsc::channel(EVENT_BUFFER);
        let problems = Arc::new(RwLock::new(state.problems().clone()));

        for load in plugins.apply(first.plugins) {
            let _ = load.await;
        }
        let mut clusters = ClusterManager::new(sink, health.clone(), cancel.clone());
        clusters.apply(&first.clusters, &main).await;

        let mut folder = FolderWatch::new(
            Duration::from_millis(main.debounce_ms),
            Duration::from_secs(main.rescan_seconds),
        )
        .context("cannot watch the config folder")?;
        folder.ensure_watched(&state.watched_dirs());

        let dispatch = tokio::spawn(dispatcher::run(routes.clone(), events));
        let task = {
            let plugins = plugins.clone();
            let problems = problems.clone();
            let cancel = cancel.clone();
            tokio::spawn(async move {
                loop {
                    let trigger = tokio::select! {
                        t = folder.next() => t,
                        _ = cancel.cancelled() => break,
                    };
                    let update = state.refresh();
                    if trigger == Trigger::Rescan && !update.is_empty() {
                        tracing::info!("periodic re-scan found changes that file events missed");
                    }
                    *problems.write().unwrap_or_else(|p| p.into_inner()) = state.problems().clone();
                    apply(&state, update, &plugins, &routes, &mut clusters).await;
                    folder.ensure_watched(&state.watched_dirs());
                }
                clusters.stop_all().await;
                drop(clusters); // closes the last event sender: the dispatcher drains and ends
                let _ = dispatch.await;
            })
        };
        tracing::info!(config = %state_root(config_dir).display(), "jobrelay running");
        Ok(Daemon {
            health,
            plugins,
            problems,
            cancel,
            task,
        })
    }

    /// Health of every cluster.
    pub fn clusters(&self) -> BTreeMap<String, ClusterHealth> {
        self.health.snapshot()
    }

    /// Status of every plugin.
    pub fn plugins(&self) -> BTreeMap<String, PluginStatus> {
        self.plugins.status()
    }

    /// Config files currently refused, with the reason.
    pub fn problems(&self) -> BTreeMap<PathBuf, String> {
        self.problems
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Stop watching, then let queued and running calls finish for up to `grace`.
    pub async fn shutdown(self, grace: Duration) {
        self.cancel.cancel();
        let _ = self.task.await;
        if tokio::time::timeout(grace, self.plugins.idle())
            .await
            .is_err()
        {
            tracing::warn!("grace period over with plugin calls still queued or running");
        }
    }
}

fn state_root(dir: &Path) -> PathBuf {
    std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf())
}

async fn apply(
    state: &ConfigState,
    update: Update,
    plugins: &PluginSet,
    routes: &Routes,
    clusters: &mut ClusterManager,
) {
    if update.is_empty() {
        return;
    }
    let main = state.main();
    // Plugin loads run in the background; the serving versions keep taking events meanwhile.
    drop(plugins.apply(update.plugins));
    if update.watch_changed {
        tracing::info!("kinds or watch scope changed; restarting every cluster's watchers");
        routes.set_kinds(main);
        clusters.restart_all(state.clusters(), main).await;
    } else {
        clusters.apply(&update.clusters, main).await;
    }
}
