//! One consistent picture of the daemon for `/status`, `/readyz` and `/metrics`: cluster
//! health, plugins with their lanes, and config files currently refused.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use serde::Serialize;

use crate::clusters::health::{ClusterHealth, HealthBoard, HealthState};
use crate::plugin_set::{PluginSet, PluginStatus};
use jobrelay_coordination::Role;
use jobrelay_lanes::dispatcher::Routes;
use jobrelay_lanes::recent::RecentEvent;

/// Where the picture is read from; cheap to clone.
#[derive(Clone)]
pub struct StatusSources {
    pub health: HealthBoard,
    pub plugins: PluginSet,
    pub problems: Arc<RwLock<BTreeMap<PathBuf, String>>>,
    /// The dispatcher's routes: recent events and what was observed per cluster and kind.
    pub routes: Routes,
    /// This replica's part in the leader election.
    pub role: tokio::sync::watch::Receiver<Role>,
}

/// The daemon at one moment.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// Ready: every cluster's streams have listed, and every plugin serves a version. A
    /// follower watches no cluster: it is ready once its plugins are, to take over.
    pub ready: bool,
    /// Single replica, leader, follower (with the leader's identity), or lost.
    pub coordination: Role,
    pub clusters: BTreeMap<String, ClusterHealth>,
    pub plugins: BTreeMap<String, PluginStatus>,
    /// Config files refused (path → reason); their last good versions stay in force.
    pub problems: BTreeMap<PathBuf, String>,
    /// The latest job events observed, newest first.
    pub recent_events: Vec<RecentEvent>,
    /// Events observed per (cluster, kind).
    pub observed: Vec<ObservedCount>,
}

/// Events the watchers observed for one cluster and job kind.
#[derive(Debug, Clone, Serialize)]
pub struct ObservedCount {
    pub cluster: String,
    pub kind: String,
    pub events: u64,
}

impl StatusSources {
    /// Reads every source once.
    pub fn snapshot(&self) -> Status {
        let clusters = self.health.snapshot();
        let plugins = self.plugins.status();
        let problems = self
            .problems
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let ready = clusters.values().all(|c| c.state == HealthState::Synced)
            && plugins.values().all(|p| p.serving.is_some());
        Status {
            ready,
            coordination: self.role.borrow().clone(),
            clusters,
            plugins,
            problems,
            recent_events: self.routes.recent().snapshot(),
            observed: self
                .routes
                .observed()
                .into_iter()
                .map(|(cluster, kind, counts)| ObservedCount {
                    cluster,
                    kind,
                    events: counts.observed,
                })
                .collect(),
        }
    }
}

impl Status {
    /// Why the daemon is not ready, one line each (empty when ready).
    pub fn not_ready_reasons(&self) -> Vec<String> {
        let mut reasons = Vec::new();
        for (name, cluster) in &self.clusters {
            if cluster.state != HealthState::Synced {
                reasons.push(format!(
                    "cluster {name}: {:?}, {} of {} streams listed{}",
                    cluster.state,
                    cluster.streams_synced,
                    cluster.streams,
                    cluster
                        .last_error
                        .as_deref()
                        .map(|e| format!(" ({e})"))
                        .unwrap_or_default()
                ));
            }
        }
        for (name, plugin) in &self.plugins {
            match (&plugin.serving, &plugin.waiting) {
                (None, Some(waiting)) => reasons.push(format!(
                    "plugin {name}: no version serving yet; its events wait in its lane while \
                     the load is retried (attempt {}: {})",
                    waiting.attempts, waiting.error
                )),
                (None, None) => reasons.push(format!("plugin {name}: no version serving")),
                _ => {}
            }
        }
        reasons
    }
}
