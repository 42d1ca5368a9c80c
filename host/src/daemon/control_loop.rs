//! The daemon's control loop: the one task that changes what runs. It takes one input at a
//! time — a config folder change, a cluster source's new report, a change of this replica's
//! role, a shard hand-over, a timer for dead-letter replays and finalizer holds — and applies
//! it to the plugins and clusters before taking the next, so no two changes ever interleave.
//!
//! Events do not pass through here: they flow from the watchers to the dispatcher and lanes on
//! their own tasks. The loop only decides which watchers, plugins and clusters exist.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Interval;
use tokio_util::sync::CancellationToken;

use super::fleet_events::RuleBook;
use super::plugin_set::PluginSet;
use crate::clusters::inventory_watch::{self, InventoryWatch};
use crate::clusters::manager::ClusterManager;
use crate::config::folder_watch::{FolderWatch, Trigger};
use crate::config::inventory::SourceStatus;
use crate::config::sections::cluster_sources::SourceKind;
use crate::config::state::{Change, ConfigState, Update};
use jobrelay_coordination::Role;
use jobrelay_coordination::shards::ShardCommand;
use jobrelay_lanes::dispatcher::Routes;
use jobrelay_lanes::finalizer_book::FinalizerBook;

/// How often replay requests made by `jobrelay dead-letters replay` are picked up.
const REPLAY_POLL: Duration = Duration::from_secs(2);

/// How often finalizer holds are checked against `finalizers.max_hold_seconds`.
const HOLD_SWEEP: Duration = Duration::from_secs(5);

/// One input of the loop.
enum Input {
    /// The config folder changed, or its periodic re-scan is due.
    Config(Trigger),
    /// A cluster source on the home cluster reported what it holds now.
    Inventory,
    /// Leader election changed this replica's role.
    Role(Role),
    /// Sharding gives this replica a cluster, or takes one away.
    Shard(ShardCommand),
    /// Time to pick up replay requests.
    Replays,
    /// Time to check finalizer holds against their limit.
    Sweep,
    /// The daemon is stopping.
    Stop,
}

/// Everything the loop owns or steers.
pub(crate) struct ControlLoop {
    pub state: ConfigState,
    pub folder: FolderWatch,
    pub plugins: PluginSet,
    pub clusters: ClusterManager,
    pub routes: Routes,
    pub book: Arc<FinalizerBook>,
    /// Config files refused, with the reason, for the status page.
    pub problems: Arc<RwLock<BTreeMap<PathBuf, String>>>,
    /// Sections of the main file edited since the start that are read once, for the status.
    pub restart_pending: Arc<RwLock<Vec<&'static str>>>,
    /// The cluster names, for the coordinator (sharding assigns them).
    pub cluster_names: watch::Sender<BTreeSet<String>>,
    pub role: watch::Receiver<Role>,
    pub shard_commands: Option<mpsc::Receiver<ShardCommand>>,
    pub cancel: CancellationToken,
    /// Cancelled when this replica stops delivering after losing its Lease (or cannot read the
    /// cursors it would deliver from).
    pub lost: CancellationToken,
    /// The fleet rules, set from the main file.
    pub fleet_rules: Arc<RuleBook>,
    /// The watch of the cluster sources (`cluster_sources:`), when any is configured.
    pub inventory: Option<InventoryWatch>,
    /// Each cluster source as `/status` shows it, by source.
    pub sources: Arc<RwLock<BTreeMap<String, SourceStatus>>>,
}

/// The cluster names of a config state.
pub(crate) fn cluster_names(state: &ConfigState) -> BTreeSet<String> {
    state.clusters().keys().cloned().collect()
}

impl ControlLoop {
    /// Runs until the daemon stops or the replica loses its Lease; then stops every cluster
    /// and waits for the dispatcher to drain.
    pub async fn run(mut self, dispatch: JoinHandle<()>) {
        let mut replays = tokio::time::interval(REPLAY_POLL);
        let mut sweeps = tokio::time::interval(HOLD_SWEEP);
        loop {
            let input = self.next_input(&mut replays, &mut sweeps).await;
            let flow = match input {
                Input::Config(trigger) => self.on_config(trigger).await,
                Input::Inventory => self.on_inventory().await,
                Input::Role(role) => self.on_role(role).await,
                Input::Shard(command) => self.on_shard(command).await,
                Input::Replays => self.on_replays().await,
                Input::Sweep => self.on_sweep(),
                Input::Stop => ControlFlow::Break(()),
            };
            if flow.is_break() {
                break;
            }
        }
        if let Some(watch) = self.inventory.take() {
            watch.stop().await;
        }
        self.clusters.stop_all().await;
        drop(self.clusters); // closes the last event sender: the dispatcher drains and ends
        let _ = dispatch.await;
    }

    async fn next_input(&mut self, replays: &mut Interval, sweeps: &mut Interval) -> Input {
        tokio::select! {
            trigger = self.folder.next() => Input::Config(trigger),
            () = next_report(&mut self.inventory) => Input::Inventory,
            role = next_role(&mut self.role) => Input::Role(role),
            command = next_command(&mut self.shard_commands) => Input::Shard(command),
            _ = replays.tick() => Input::Replays,
            _ = sweeps.tick() => Input::Sweep,
            _ = self.cancel.cancelled() => Input::Stop,
        }
    }

    /// Reads the folder again and applies what changed; a failed read changes nothing.
    async fn on_config(&mut self, trigger: Trigger) -> ControlFlow<()> {
        let update = self.state.refresh();
        if trigger == Trigger::Rescan && !update.is_empty() {
            tracing::info!("periodic re-scan found changes that file events missed");
        }
        *self.problems.write() = self.state.problems().clone();
        *self.restart_pending.write() = self.state.restart_pending().to_vec();
        let relist = self.apply_cleanup();
        if let Some(view) = self.routes.view() {
            view.set_settings(self.state.main().job_view);
        }
        self.clusters
            .health()
            .set_check_settings(self.state.main().cluster_health);
        self.fleet_rules.set(&self.state.main().fleet);
        apply(&self.state, update, &self.plugins, &mut self.clusters).await;
        self.follow_sources().await;
        if relist {
            // Jobs that finished before a rule covered them were passed by: the watch offers
            // each version once. Listing every cluster again shows them to the schedule
            // (the lanes skip what they already handled).
            tracing::info!(
                "clean-up rules changed; re-listing every cluster for the finished jobs"
            );
            self.clusters
                .restart_all(self.state.clusters(), self.state.main())
                .await;
        }
        self.plugins
            .retain_components(self.state.plugins().values());
        self.publish_clusters();
        self.folder.ensure_watched(&self.state.watched_dirs());
        ControlFlow::Continue(())
    }

    /// A cluster source's report: its clusters applied (added, restarted where the
    /// credentials changed, removed), its status published.
    async fn on_inventory(&mut self) -> ControlFlow<()> {
        let Some(watch) = self.inventory.as_mut() else {
            return ControlFlow::Continue(());
        };
        let listed: Vec<_> = watch
            .reports
            .borrow_and_update()
            .iter()
            .filter_map(|(name, report)| Some((*name, report.snapshot.clone()?)))
            .collect();
        for (name, snapshot) in listed {
            let update = self.state.set_inventory(name, Some(snapshot));
            apply(&self.state, update, &self.plugins, &mut self.clusters).await;
        }
        self.publish_clusters();
        ControlFlow::Continue(())
    }

    /// Starts, restarts or stops the cluster sources' watch when `cluster_sources:` changed.
    /// A restarted watch keeps the clusters as last read until it has listed the objects; a
    /// source no longer configured takes its clusters with it.
    async fn follow_sources(&mut self) {
        let wanted = &self.state.main().cluster_sources;
        let running = self.inventory.as_ref().map(|w| &w.settings);
        if running == Some(wanted) || (running.is_none() && !wanted.any()) {
            return;
        }
        if let Some(old) = self.inventory.take() {
            old.stop().await;
        }
        tracing::info!("cluster_sources changed; watching the cluster sources again");
        let configured: Vec<SourceKind> =
            wanted.configured().iter().map(|(kind, _)| *kind).collect();
        self.inventory = inventory_watch::spawn(wanted, &self.cancel);
        for kind in SourceKind::ALL {
            if !configured.contains(&kind) {
                let update = self.state.set_inventory(kind.name(), None);
                apply(&self.state, update, &self.plugins, &mut self.clusters).await;
            }
        }
    }

    /// Tells the coordinator the cluster names (sharding assigns them) and `/status` the
    /// cluster sources, conflicts with files included.
    fn publish_clusters(&mut self) {
        let now = cluster_names(&self.state);
        self.cluster_names.send_if_modified(|known| {
            let changed = *known != now;
            *known = now;
            changed
        });
        let mut sources = BTreeMap::new();
        let mut said = BTreeMap::new();
        if let Some(watch) = &self.inventory {
            let reports = watch.reports.borrow().clone();
            // Which source object gives each cluster (a file or another source may take it).
            let given_by = self.state.given_by();
            for (name, report) in reports {
                // What a source says of a cluster's control plane counts where the source
                // is the one that gives the cluster.
                let objects = report.snapshot.iter().flat_map(|s| &s.readiness);
                for (cluster, readiness) in objects.chain(&report.control_planes) {
                    let key = report.status.clusters.get(cluster);
                    if given_by
                        .get(cluster)
                        .is_some_and(|(source, by)| source == name && Some(by) == key)
                    {
                        said.insert(cluster.clone(), readiness.clone());
                    }
                }
                let mut status = report.status;
                status.refused = self
                    .state
                    .source_refused()
                    .get(name)
                    .cloned()
                    .unwrap_or_default();
                // A cluster the source names that a file or another source gives is not its.
                status.clusters.retain(|cluster, secret| {
                    given_by
                        .get(cluster)
                        .is_some_and(|(source, by)| source == name && by == secret)
                });
                sources.insert(name.to_string(), status);
            }
        }
        *self.sources.write() = sources;
        self.clusters.health().set_sources(said);
    }

    /// Gives the schedule an edited `cleanup:` section; whether its rules changed (the
    /// clusters are then listed again).
    fn apply_cleanup(&self) -> bool {
        let Some(schedule) = self.routes.cleanup() else {
            return false;
        };
        let next = &self.state.main().cleanup;
        if schedule.settings().as_ref() == next {
            return false;
        }
        let relist = schedule.rules_differ(next) && next.is_on();
        schedule.set_settings(next.clone());
        relist
    }

    /// Leading: deliver from the shared cursors. Lost: stop.
    async fn on_role(&mut self, role: Role) -> ControlFlow<()> {
        match role {
            Role::Leader => {
                if let Err(e) = self.plugins.reload(None).await {
                    tracing::error!(error = %e, "cannot read the cursors at take-over; not delivering");
                    self.lost.cancel();
                    return ControlFlow::Break(());
                }
                tracing::info!(
                    "leading: listing every cluster again and delivering from the shared cursors"
                );
                self.routes.set_delivering(true);
                // What this replica announced while following reached no plugin, and the
                // leader it replaces may have died before delivering: tell the fleet's
                // standing states again (timers do so by themselves: a follower keeps none).
                self.clusters.health().tell_standing();
                self.fleet_rules.tell_again();
                self.clusters
                    .activate(self.state.clusters(), self.state.main())
                    .await;
            }
            Role::Lost => {
                self.lost.cancel();
                return ControlFlow::Break(());
            }
            Role::Single | Role::Follower { .. } | Role::Sharded { .. } => {}
        }
        ControlFlow::Continue(())
    }

    /// Takes a cluster (from the shared cursors) or lets one go (after its calls in flight).
    async fn on_shard(&mut self, command: ShardCommand) -> ControlFlow<()> {
        match command {
            ShardCommand::Start(cluster) => {
                if let Err(e) = self.plugins.reload(Some(&cluster)).await {
                    tracing::error!(%cluster, error = %e,
                        "cannot read the cluster's cursors at take-over; not delivering");
                    self.lost.cancel();
                    return ControlFlow::Break(());
                }
                self.clusters
                    .allow(&cluster, self.state.clusters(), self.state.main())
                    .await;
            }
            ShardCommand::Stop(cluster, done) => {
                self.clusters.disallow(&cluster).await;
                self.plugins.forget_cluster(&cluster).await;
                let _ = done.send(());
            }
        }
        ControlFlow::Continue(())
    }

    /// Replays are deliveries: only of the clusters delivered here.
    async fn on_replays(&mut self) -> ControlFlow<()> {
        let scope = self.clusters.allowed();
        self.plugins.take_replays(scope.as_deref()).await;
        ControlFlow::Continue(())
    }

    fn on_sweep(&mut self) -> ControlFlow<()> {
        let max_hold = Duration::from_secs(self.state.main().finalizers.max_hold_seconds);
        self.book.sweep(max_hold);
        ControlFlow::Continue(())
    }
}

/// Resolves when the cluster sources' watch has a new report; pending forever without one.
async fn next_report(watch: &mut Option<InventoryWatch>) {
    match watch {
        Some(watch) => {
            if watch.reports.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending().await,
    }
}

/// The next shard command; pending forever when not sharding.
async fn next_command(commands: &mut Option<mpsc::Receiver<ShardCommand>>) -> ShardCommand {
    match commands {
        Some(rx) => match rx.recv().await {
            Some(command) => command,
            None => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}

/// The role once it changes; pending forever when no election runs (or it has ended).
async fn next_role(role: &mut watch::Receiver<Role>) -> Role {
    match role.changed().await {
        Ok(()) => role.borrow_and_update().clone(),
        Err(_) => std::future::pending().await,
    }
}

/// Applies one config update: plugins first, then clusters.
async fn apply(
    state: &ConfigState,
    update: Update,
    plugins: &PluginSet,
    clusters: &mut ClusterManager,
) {
    if update.is_empty() {
        return;
    }
    let main = state.main();
    let added = update.plugins.iter().any(|c| matches!(c, Change::Added(_)));
    // A filter that changed may take jobs it skipped so far: they need their current state.
    let refiltered = update.plugins.iter().any(|c| match c {
        Change::Changed(source) => plugins
            .routes()
            .get(&source.spec.name)
            .is_some_and(|lane| *lane.filter() != *source.lane.filter),
        _ => false,
    });
    if update.watch_changed {
        clusters.retain_kinds(main);
    }
    let loads = plugins.apply(update.plugins);
    if added || refiltered {
        // A new plugin (or a new filter) should see every job's current version, not only
        // later changes: wait for it to load, then re-list every cluster. Other plugins skip
        // what they already handled (their cursors), so they see no repeats.
        for load in loads {
            let _ = load.await;
        }
        let why = if added {
            "plugin added"
        } else {
            "plugin filter changed"
        };
        tracing::info!("{why}; re-listing every cluster so it sees the current jobs");
        clusters.restart_all(state.clusters(), main).await;
        return;
    }
    // Reloads run in the background; the serving versions keep taking events meanwhile.
    drop(loads);
    if update.watch_changed {
        tracing::info!("kinds or watch scope changed; restarting every cluster's watchers");
        clusters.restart_all(state.clusters(), main).await;
    } else {
        clusters.apply(&update.clusters, main).await;
    }
}
