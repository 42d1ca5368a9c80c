//! One consistent picture of the daemon for `/status`, `/readyz` and `/metrics`: cluster
//! health, plugins with their lanes, and config files currently refused.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::RwLock;
use serde::Serialize;

use super::store_check::{StoreHealth, StoreStatus};
use crate::clusters::api_meter::ApiMeters;
use crate::clusters::cleanup::{Cleaner, CleanupStatus};
use crate::clusters::health::{ClusterHealth, HealthBoard, HealthState};
use crate::config::inventory::SourceStatus;
use crate::daemon::plugin_set::{PluginSet, PluginStatus};
use jobrelay_coordination::Role;
use jobrelay_lanes::dispatcher::Routes;
use jobrelay_lanes::recent::RecentEvent;

/// Where the picture is read from; cheap to clone.
#[derive(Clone)]
pub struct StatusSources {
    pub health: HealthBoard,
    /// Each cluster's API requests by verb (read by `/metrics` only).
    pub meters: ApiMeters,
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
    /// Clean-up of finished jobs.
    pub cleanup: Arc<Cleaner>,
    /// The state store, for the dead letters the job view shows.
    pub delivery_store: Option<Arc<dyn jobrelay_state::DeliveryStore>>,
    /// The fleet rules and their verdicts (read by `/metrics`).
    pub fleet_rules: Arc<crate::daemon::fleet_events::RuleBook>,
    /// Each cluster source on the home cluster (`cluster_sources:`), by source.
    pub cluster_sources: Arc<RwLock<BTreeMap<String, SourceStatus>>>,
}

/// The daemon at one moment.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// Ready: this replica can do its part — the state store answers and takes the lanes'
    /// writes, and the replica has not lost its Lease. Neither remote clusters nor plugins are part of it: a cluster down, or
    /// a plugin that cannot load (the same config on every replica), would take every replica
    /// out of service at once and help nothing; they are in `attention`, the metrics and the
    /// alerts.
    pub ready: bool,
    /// What needs an operator's eye, one line each, most serious first (empty: nothing):
    /// the state store down, the Lease lost, plugins without a serving version or whose last
    /// load failed, clusters not synced, dead letters stored, config files refused, sections
    /// waiting for a restart. The status page shows it at the top.
    pub attention: Vec<String>,
    /// Single replica, leader, follower (with the leader's identity), or lost.
    pub coordination: Role,
    pub clusters: BTreeMap<String, ClusterHealth>,
    pub plugins: BTreeMap<String, PluginStatus>,
    /// The state store's last check.
    pub state_store: StoreStatus,
    /// Config files refused (path → reason); their last good versions stay in force.
    pub problems: BTreeMap<PathBuf, String>,
    /// Each cluster source on the home cluster (`argocd`, `cluster_api`): where it reads, the clusters it
    /// gives, the objects refused and why (their last good credentials stay), and why its
    /// watch fails, while it does. Absent without `cluster_sources:`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub cluster_sources: BTreeMap<String, SourceStatus>,
    /// Sections of the main file that are read once at start (`sql`, `archive`, `telemetry`,
    /// …) and were edited since: the daemon runs on with the values it started with until it
    /// is restarted.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub restart_pending: Vec<&'static str>,
    /// The latest job events observed, newest first.
    pub recent_events: Vec<RecentEvent>,
    /// Events observed per (cluster, kind).
    pub observed: Vec<ObservedCount>,
    /// What the lanes keep of events in memory, against `event_memory_mb`.
    pub event_memory: EventMemory,
    /// Finished jobs scheduled for deletion, held back (with the reason), and deleted.
    pub cleanup: CleanupStatus,
}

/// The process-wide memory budget of events (see `jobrelay_lanes::budget`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct EventMemory {
    /// Bytes of events the lanes keep whole, and of copies not yet stored in the inbox.
    pub held_bytes: u64,
    pub limit_bytes: u64,
    /// Of `held_bytes`, the copies on their way to the inbox: accepted events that live only
    /// in memory until stored, what a kill now would take with it.
    pub unstored_bytes: u64,
    /// The most `unstored_bytes` before the watch waits for the inbox's writers.
    pub write_ahead_bytes: u64,
    /// Events that wait only in the inbox, all plugins.
    pub spilled_events: u64,
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
        let problems = self.problems.read().clone();
        let coordination = self.role.borrow().clone();
        let mut state_store = self.store.snapshot();
        state_store.writes_failing = self.routes.budget().writes().failing().map(|f| {
            let since = chrono::DateTime::<chrono::Utc>::from(f.since)
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            format!("since {since}: {}", f.error)
        });
        let mut status = Status {
            ready: is_ready(&state_store, &coordination),
            attention: Vec::new(),
            coordination,
            clusters,
            plugins,
            state_store,
            problems,
            cluster_sources: self.cluster_sources.read().clone(),
            restart_pending: self.restart_pending.read().clone(),
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
            event_memory: {
                let budget = self.routes.budget();
                EventMemory {
                    held_bytes: budget.held(),
                    limit_bytes: budget.limit(),
                    unstored_bytes: budget.unstored(),
                    write_ahead_bytes: budget.write_ahead(),
                    spilled_events: budget.spilled(),
                }
            },
            cleanup: self.cleanup.status(),
        };
        status.attention = status.needs_attention();
        status
    }
}

/// Whether this replica can do its part (see [`Status::ready`]).
fn is_ready(store: &StoreStatus, role: &Role) -> bool {
    store.reachable && store.writes_failing.is_none() && !matches!(role, Role::Lost)
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
        if let Some(failing) = &self.state_store.writes_failing {
            reasons.push(format!(
                "state store: answers but refuses the lanes' writes {failing}"
            ));
        }
        if matches!(self.coordination, Role::Lost) {
            reasons.push("coordination: this replica lost its Lease".to_string());
        }
        reasons
    }

    /// A shard that cannot read or write its Leases: not readiness (the home cluster's API
    /// may be back in a moment, and every replica would go at once), but it delivers
    /// nothing meanwhile, which `attention` says.
    fn lease_trouble(&self) -> Option<String> {
        match &self.coordination {
            Role::Sharded {
                lease_error: Some(error),
                owned,
                ..
            } => Some(format!(
                "coordination: cannot read or write {error}; this replica holds {} cluster(s)",
                owned.len()
            )),
            _ => None,
        }
    }

    /// Plugins without a serving version: not readiness (see [`Status::ready`]), but said on
    /// `/readyz` under its answer, and in [`Status::attention`].
    pub fn plugins_not_serving(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for (name, plugin) in &self.plugins {
            match (&plugin.serving, &plugin.waiting) {
                (None, Some(waiting)) => lines.push(format!(
                    "plugin {name}: no version serving yet; its events wait in its lane while \
                     the load is retried (attempt {}: {})",
                    waiting.attempts, waiting.error
                )),
                (None, None) => lines.push(format!(
                    "plugin {name}: no version serving; nothing is delivered to it until a \
                     version loads ({})",
                    plugin
                        .last_reload
                        .as_ref()
                        .and_then(|r| r.error.as_deref())
                        .unwrap_or("no load finished yet")
                )),
                _ => {}
            }
        }
        lines
    }

    /// See [`Status::attention`].
    fn needs_attention(&self) -> Vec<String> {
        let mut lines = self.not_ready_reasons();
        lines.extend(self.lease_trouble());
        lines.extend(self.plugins_not_serving());
        for (name, plugin) in &self.plugins {
            if let (Some(_), Some(reload)) = (&plugin.serving, &plugin.last_reload)
                && !reload.ok
            {
                lines.push(format!(
                    "plugin {name}: the last load failed, the previous version serves ({})",
                    reload.error.as_deref().unwrap_or("no reason given")
                ));
            }
        }
        for (name, cluster) in &self.clusters {
            if cluster.state != HealthState::Synced {
                lines.push(format!(
                    "cluster {name}: {} since {}{}",
                    format!("{:?}", cluster.state).to_lowercase(),
                    cluster.since,
                    cluster
                        .last_error
                        .as_deref()
                        .map(|e| format!(" ({e})"))
                        .unwrap_or_default()
                ));
            }
            if !cluster.kinds_not_installed.is_empty() {
                lines.push(format!(
                    "cluster {name}: does not serve {} (not installed)",
                    cluster.kinds_not_installed.join(", ")
                ));
            }
        }
        let stored: u64 = self.state_store.dead_letters.values().sum();
        if stored > 0 {
            lines.push(format!(
                "{stored} dead letter(s) stored (jobrelay dead-letters list)"
            ));
        }
        let mut held: BTreeMap<&str, u64> = BTreeMap::new();
        for stages in self.cleanup.schedule.jobs.values() {
            for (stage, n) in stages {
                if matches!(*stage, "dead_lettered" | "plugin_not_loaded" | "failing") {
                    *held.entry(stage).or_default() += n;
                }
            }
        }
        for (stage, n) in held {
            lines.push(format!(
                "clean-up: {n} finished job(s) held back ({}); see cleanup.held",
                stage.replace('_', " ")
            ));
        }
        for (path, why) in &self.problems {
            lines.push(format!(
                "config file {} refused, its last good version stays: {why}",
                path.display()
            ));
        }
        for (name, source) in &self.cluster_sources {
            let object = crate::config::sections::cluster_sources::object_of(name);
            if let Some(error) = &source.error {
                lines.push(format!(
                    "cluster source {name}: cannot read the {object}s in {} ({error}); its \
                     clusters as last read stay",
                    source.namespace
                ));
            }
            for (secret, why) in &source.refused {
                lines.push(format!(
                    "cluster source {name}: {object} {secret} refused: {why}"
                ));
            }
        }
        if !self.restart_pending.is_empty() {
            lines.push(format!(
                "main file sections edited that take effect at the next restart: {}",
                self.restart_pending.join(", ")
            ));
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::plugin_set::ReloadOutcome;

    fn store(reachable: bool) -> StoreStatus {
        StoreStatus {
            reachable,
            error: (!reachable).then(|| "connection refused".to_string()),
            dead_letters: Default::default(),
            writes_failing: None,
        }
    }

    #[test]
    fn ready_is_a_store_that_answers_and_a_lease_not_lost() {
        assert!(is_ready(&store(true), &Role::Single));
        let full = StoreStatus {
            writes_failing: Some("since 2026-11-27T08:00:00Z: database or disk is full".into()),
            ..store(true)
        };
        assert!(
            !is_ready(&full, &Role::Single),
            "a store that refuses writes"
        );
        assert!(is_ready(&store(true), &Role::Leader));
        assert!(is_ready(&store(true), &Role::Follower { holder: None }));
        assert!(!is_ready(&store(false), &Role::Single));
        assert!(!is_ready(&store(true), &Role::Lost));
    }

    fn status() -> Status {
        Status {
            ready: true,
            attention: Vec::new(),
            coordination: Role::Single,
            clusters: BTreeMap::new(),
            plugins: BTreeMap::new(),
            state_store: store(true),
            problems: BTreeMap::new(),
            cluster_sources: BTreeMap::new(),
            restart_pending: Vec::new(),
            recent_events: Vec::new(),
            observed: Vec::new(),
            event_memory: EventMemory::default(),
            cleanup: CleanupStatus::default(),
        }
    }

    /// A plugin that cannot load is not readiness, but it heads what needs attention, with
    /// the stored dead letters and a cluster down.
    #[test]
    fn what_needs_attention_names_each_problem() {
        let mut s = status();
        assert!(s.needs_attention().is_empty(), "a healthy daemon: nothing");
        s.plugins.insert(
            "broken".into(),
            PluginStatus {
                last_reload: Some(ReloadOutcome {
                    version: "1".into(),
                    ok: false,
                    error: Some("cannot compile".into()),
                    load_ms: 1.0,
                    at: String::new(),
                }),
                ..PluginStatus::default()
            },
        );
        s.state_store.dead_letters.insert("log".into(), 318);
        let board = HealthBoard::default();
        board.connecting("east", 1, vec!["batch-job".into()]);
        board.failed("east", "connection refused".into());
        s.clusters = board.snapshot();
        s.problems
            .insert(PathBuf::from("plugins/x.yaml"), "bad YAML".into());
        s.cleanup.schedule.jobs.insert(
            "east".into(),
            BTreeMap::from([
                ("dead_lettered", 2),
                ("scheduled", 9),
                ("pending_delivery", 4),
            ]),
        );
        let lines = s.needs_attention();
        assert_eq!(lines.len(), 5, "{lines:#?}");
        assert!(
            lines[0].contains("plugin broken") && lines[0].contains("cannot compile"),
            "{lines:#?}"
        );
        assert!(
            lines[1].starts_with("cluster east: error since") && lines[1].contains("refused"),
            "{lines:#?}"
        );
        assert!(lines[2].starts_with("318 dead letter(s)"), "{lines:#?}");
        assert_eq!(
            lines[3], "clean-up: 2 finished job(s) held back (dead lettered); see cleanup.held",
            "only what waits for an operator: {lines:#?}"
        );
        assert!(lines[4].contains("plugins/x.yaml"), "{lines:#?}");
        // The page shows clean-up (only when on), with the held jobs escaped.
        assert!(!super::super::page::render(&s).contains("Clean-up of finished jobs"));
        s.cleanup.on = true;
        s.cleanup
            .schedule
            .held
            .push(jobrelay_fleet::cleanup::HeldView {
                cluster: "east".into(),
                kind: "volcano-job".into(),
                namespace: "ml".into(),
                name: "<b>x</b>".into(),
                uid: "u".into(),
                finished_at: "2026-11-27T00:00:00Z".into(),
                held: jobrelay_fleet::cleanup::Held::DeadLettered("probe".into()),
            });
        let page = super::super::page::render(&s);
        assert!(page.contains("Clean-up of finished jobs"), "{page}");
        assert!(page.contains("east/ml/&lt;b&gt;x&lt;/b&gt;"), "{page}");
        assert!(page.contains("dead lettered probe"), "{page}");
        assert!(
            page.contains("2 dead lettered, 4 pending delivery, 9 scheduled"),
            "{page}"
        );
        assert!(s.not_ready_reasons().is_empty(), "still ready");
    }
}
