//! One consistent picture of the daemon for `/status`, `/readyz` and `/metrics`: cluster
//! health, plugins with their lanes, and config files currently refused.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use serde::Serialize;

use super::store_check::{StoreHealth, StoreStatus};
use crate::clusters::health::{ClusterHealth, HealthBoard};
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
    /// Main-file sections read once at start, edited since.
    pub restart_pending: Arc<RwLock<Vec<&'static str>>>,
    /// The dispatcher's routes: recent events and what was observed per cluster and kind.
    pub routes: Routes,
    /// This replica's part in the leader election.
    pub role: tokio::sync::watch::Receiver<Role>,
    /// Whether the state store answers (see [`super::store_check`]).
    pub store: StoreHealth,
}

/// The daemon at one moment.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// Ready: this replica can do its part — every plugin serves a version, the state store
    /// answers, and the replica has not lost its Lease. Remote clusters are not part of it:
    /// one cluster down, or lacking a kind's resource, must not take every replica out of
    /// service; their health is in `clusters`, the metrics and the alerts.
    pub ready: bool,
    /// Single replica, leader, follower (with the leader's identity), or lost.
    pub coordination: Role,
    pub clusters: BTreeMap<String, ClusterHealth>,
    pub plugins: BTreeMap<String, PluginStatus>,
    /// The state store's last check.
    pub state_store: StoreStatus,
    /// Config files refused (path → reason); their last good versions stay in force.
    pub problems: BTreeMap<PathBuf, String>,
    /// Sections of the main file that are read once at start (`sql`, `archive`, `telemetry`,
    /// …) and were edited since: the daemon runs on with the values it started with until it
    /// is restarted.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub restart_pending: Vec<&'static str>,
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
        let coordination = self.role.borrow().clone();
        let state_store = self.store.snapshot();
        Status {
            ready: is_ready(&plugins, &state_store, &coordination),
            coordination,
            clusters,
            plugins,
            state_store,
            problems,
            restart_pending: self
                .restart_pending
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
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

/// Whether this replica can do its part (see [`Status::ready`]).
fn is_ready(plugins: &BTreeMap<String, PluginStatus>, store: &StoreStatus, role: &Role) -> bool {
    plugins.values().all(|p| p.serving.is_some()) && store.reachable && !matches!(role, Role::Lost)
}

impl Status {
    /// Why the daemon is not ready, one line each (empty when ready).
    pub fn not_ready_reasons(&self) -> Vec<String> {
        let mut reasons = Vec::new();
        if !self.state_store.reachable {
            reasons.push(format!(
                "state store: does not answer ({})",
                self.state_store.error.as_deref().unwrap_or("no answer")
            ));
        }
        if matches!(self.coordination, Role::Lost) {
            reasons.push("coordination: this replica lost its Lease".to_string());
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

#[cfg(test)]
mod tests {
    use super::*;

    fn plugins(serving: &[Option<&str>]) -> BTreeMap<String, PluginStatus> {
        serving
            .iter()
            .enumerate()
            .map(|(i, version)| {
                let status = PluginStatus {
                    serving: version.map(str::to_string),
                    ..PluginStatus::default()
                };
                (format!("p{i}"), status)
            })
            .collect()
    }

    fn store(reachable: bool) -> StoreStatus {
        StoreStatus {
            reachable,
            error: (!reachable).then(|| "connection refused".to_string()),
            dead_letters: Default::default(),
        }
    }

    #[test]
    fn ready_is_plugins_serving_a_store_that_answers_and_a_lease_not_lost() {
        let serving = plugins(&[Some("v1"), Some("v2")]);
        assert!(is_ready(&serving, &store(true), &Role::Single));
        assert!(is_ready(&BTreeMap::new(), &store(true), &Role::Leader));
        let follower = Role::Follower { holder: None };
        assert!(is_ready(&serving, &store(true), &follower));
        assert!(!is_ready(
            &plugins(&[Some("v1"), None]),
            &store(true),
            &Role::Single
        ));
        assert!(!is_ready(&serving, &store(false), &Role::Single));
        assert!(!is_ready(&serving, &store(true), &Role::Lost));
    }
}
