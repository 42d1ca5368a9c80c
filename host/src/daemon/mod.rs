//! The daemon: wires config → clusters → watchers → dispatcher → lanes → plugins, then hands
//! them to the control loop ([`control_loop`]), which keeps them in step with the config
//! folder and this replica's role.
//!
//! Order matters at start: plugins are loaded before any cluster is watched, so the first
//! list of every cluster reaches every plugin that exists at start.
//!
//! - this file — [`Daemon`]: starting it, what it reports, stopping it;
//! - [`control_loop`] — the one task that changes what runs, one input at a time;
//! - [`plugin_set`] — plugin versions loaded in the background, with retries, into lanes.

pub mod control_loop;
pub mod fleet_events;
pub mod plugin_set;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use parking_lot::RwLock;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use self::control_loop::ControlLoop;
use self::plugin_set::{PluginSet, PluginStatus};
use crate::clusters::api_meter::ApiMeters;
use crate::clusters::cleanup::Cleaner;
use crate::clusters::finalizer::FinalizerService;
use crate::clusters::health::{ClusterHealth, HealthBoard};
use crate::clusters::inventory_watch;
use crate::clusters::manager::ClusterManager;
use crate::clusters::supervisor::ClientUsers;
use crate::config::folder_watch::FolderWatch;
use crate::config::state::ConfigState;
use crate::oci::{OCI_CACHE_DIR, Registries};
use crate::telemetry;
use crate::telemetry::status::StatusSources;
use crate::telemetry::store_check::{self, StoreHealth};
use jobrelay_capabilities::Services;
use jobrelay_coordination::coordinator::BeforeLease;
use jobrelay_coordination::{Coordinator, Mode};
use jobrelay_fleet::cleanup::Schedule;
use jobrelay_fleet::jobs::JobView;
use jobrelay_lanes::budget::MemoryBudget;
use jobrelay_lanes::dispatcher::{self, Routes};
use jobrelay_lanes::finalizer_book::FinalizerBook;
use jobrelay_runtime::Runtime;
use jobrelay_state::open_stores;

/// A running daemon.
pub struct Daemon {
    health: HealthBoard,
    plugins: PluginSet,
    problems: Arc<RwLock<BTreeMap<PathBuf, String>>>,
    cancel: CancellationToken,
    task: JoinHandle<()>,
    /// Where the telemetry endpoint listens, when configured.
    telemetry: Option<std::net::SocketAddr>,
    /// Leader election or sharding, if configured.
    coordinator: Coordinator,
    /// Clean-up of finished jobs.
    cleaner: Arc<Cleaner>,
    /// Cancelled when this replica lost the Lease and stopped delivering.
    lost: CancellationToken,
    /// How long calls in flight may go on after the Lease is lost: half the margin between
    /// the renew deadline and the Lease duration, so they end before a follower may start.
    loss_grace: Duration,
}

impl Daemon {
    /// Read the config folder, load plugins, start watching clusters, and keep following the
    /// folder. Fails only if the main file is broken or the engine cannot be built.
    pub async fn start(config_dir: &Path) -> anyhow::Result<Daemon> {
        let (state, first) = ConfigState::load(config_dir)
            .map_err(|(path, e)| anyhow::anyhow!("{}: {e}", path.display()))?;
        let main = state.main().clone();
        let root = state.root().to_path_buf();
        let (store, kv) = open_stores(&main.state)
            .await
            .with_context(|| format!("cannot open the state store, {}", main.state))?;
        let cancel = CancellationToken::new();
        let store_health = StoreHealth::default();
        store_check::spawn(store.clone(), store_health.clone(), cancel.clone());
        let services = Services::open(
            &main.sql,
            &main.archive,
            &main.state.local_dir(),
            &main.kinds,
            Some(kv.clone()),
        )?;
        let directory = services.clusters.clone();
        let runtime = Runtime::with_services(main.runtime.clone(), services)
            .context("cannot build the WebAssembly engine")?;
        let releaser = FinalizerService::new(main.finalizers.name.clone());
        let book = Arc::new(FinalizerBook::new(
            releaser.clone(),
            main.finalizers.dead_letter_blocks,
        ));
        let schedule = Schedule::new(main.cleanup.clone());
        let view = Arc::new(JobView::new(main.job_view));
        tokio::spawn(sweep_view(view.clone(), cancel.clone()));
        let routes = Routes::with_finalizers(book.clone(), main.finalizers.name.clone())
            .within(MemoryBudget::new(main.event_memory_bytes))
            .cleaning(schedule.clone())
            .viewing(view.clone());
        let cleaner = Cleaner::new(schedule, routes.clone(), store.clone());
        let delivery_store = store.clone();
        tokio::spawn(cleaner.clone().run(cancel.clone()));
        let registries = Registries::new(&main.oci, main.state.local_dir().join(OCI_CACHE_DIR));
        let plugins = PluginSet::new(
            runtime,
            routes.clone(),
            store,
            Some(book.clone()),
            registries,
            main.coordination.mode == Mode::Single,
        );
        let health = HealthBoard::default();
        // Each cluster's API requests: metered by its supervisors, read by `/metrics`.
        let meters = ApiMeters::default();
        health.set_check_settings(main.cluster_health);
        let announcer = fleet_events::FleetAnnouncer::new(routes.clone());
        let fleet_rules = fleet_events::RuleBook::new(&main.fleet);
        tokio::spawn(fleet_events::evaluate_rules(
            fleet_rules.clone(),
            view.clone(),
            announcer.clone(),
            kv,
            cancel.clone(),
        ));
        // An offline cluster's events wait out their plugins' failures without spending
        // attempts; its crossings are fleet events.
        let offline_to = routes.clone();
        health.on_change(move |change| {
            let offline = matches!(
                change.change,
                jobrelay_fleet::availability::Change::Offline { .. }
            );
            offline_to.set_cluster_offline(&change.cluster, offline);
            announcer.availability(change);
        });
        let (sink, intake) = dispatcher::channel();
        let problems = Arc::new(RwLock::new(state.problems().clone()));
        let restart_pending = Arc::new(RwLock::new(Vec::new()));
        let cluster_sources = Arc::new(RwLock::new(BTreeMap::new()));
        let inventory = inventory_watch::spawn(&main.cluster_sources, &cancel);

        for load in plugins.apply(first.plugins) {
            let _ = load.await;
        }
        let (cluster_names, names_rx) = watch::channel(control_loop::cluster_names(&state));
        let (coordinator, shard_commands) =
            Coordinator::start(&main.coordination, names_rx).await?;
        let role = coordinator.role();
        let mut clusters = ClusterManager::new(
            sink,
            health.clone(),
            ClientUsers {
                finalizers: releaser.clone(),
                directory,
                cleanup: cleaner.clone(),
                meters: meters.clone(),
            },
            cancel.clone(),
        )
        .viewing(view.clone());
        match coordinator.before_lease() {
            BeforeLease::Deliver => {}
            BeforeLease::WatchOnly => {
                routes.set_delivering(false);
                clusters = clusters.passive();
            }
            BeforeLease::Nothing => clusters = clusters.inactive(),
        }
        clusters.apply(&first.clusters, &main).await;
        let lost = CancellationToken::new();

        let mut folder = FolderWatch::new(
            Duration::from_millis(main.debounce_ms),
            Duration::from_secs(main.rescan_seconds),
            own_files(&main.state, &root),
        )
        .context("cannot watch the config folder")?;
        folder.ensure_watched(&state.watched_dirs());

        let dispatch = tokio::spawn(intake.run(routes.clone()));
        let control = ControlLoop {
            state,
            folder,
            plugins: plugins.clone(),
            clusters,
            routes: routes.clone(),
            book,
            problems: problems.clone(),
            restart_pending: restart_pending.clone(),
            cluster_names,
            role: role.clone(),
            shard_commands,
            cancel: cancel.clone(),
            lost: lost.clone(),
            fleet_rules: fleet_rules.clone(),
            inventory,
            sources: cluster_sources.clone(),
        };
        let task = tokio::spawn(control.run(dispatch));
        let sources = StatusSources {
            health: health.clone(),
            meters,
            plugins: plugins.clone(),
            problems: problems.clone(),
            restart_pending,
            routes: routes.clone(),
            role: role.clone(),
            store: store_health,
            cleanup: cleaner.clone(),
            delivery_store: Some(delivery_store),
            fleet_rules,
            cluster_sources,
        };
        let telemetry = match main.telemetry.listen {
            Some(listen) => Some(
                telemetry::http::serve(listen, sources, cancel.clone())
                    .await
                    .with_context(|| format!("cannot listen on {listen} (telemetry.listen)"))?,
            ),
            None => None,
        };
        tracing::info!(config = %root.display(), "jobrelay running");
        let loss_grace = {
            let t = main.coordination.timings();
            t.lease_duration.saturating_sub(t.renew_deadline) / 2
        };
        Ok(Daemon {
            coordinator,
            cleaner,
            lost,
            loss_grace,
            telemetry,
            health,
            plugins,
            problems,
            cancel,
            task,
        })
    }

    /// The bound address of the telemetry endpoint (`telemetry.listen`), if any.
    pub fn telemetry_addr(&self) -> Option<std::net::SocketAddr> {
        self.telemetry
    }

    /// Health of every cluster.
    pub fn clusters(&self) -> BTreeMap<String, ClusterHealth> {
        self.health.snapshot()
    }

    /// Status of every plugin.
    pub fn plugins(&self) -> BTreeMap<String, PluginStatus> {
        self.plugins.status()
    }

    /// Clean-up of finished jobs: what is scheduled, held back, and deleted.
    pub fn cleanup(&self) -> crate::clusters::cleanup::CleanupStatus {
        self.cleaner.status()
    }

    /// Config files currently refused, with the reason.
    pub fn problems(&self) -> BTreeMap<PathBuf, String> {
        self.problems.read().clone()
    }

    /// Stop watching, then let calls in flight finish for up to `grace`. Cursors are written as
    /// each event is settled, so nothing acknowledged is lost; events still queued were not
    /// acknowledged and are delivered after the next start.
    ///
    /// A leader gives its Lease up last, once its calls have ended, so a follower takes over
    /// at once instead of waiting for the Lease to expire.
    pub async fn shutdown(self, grace: Duration) {
        self.cancel.cancel();
        let _ = self.task.await;
        if tokio::time::timeout(grace, self.plugins.close())
            .await
            .is_err()
        {
            tracing::warn!("grace period over with plugin calls still running");
        }
        self.plugins.close_store().await;
        self.coordinator.stop().await;
    }

    /// Resolves when this replica lost the Lease and stopped watching; the process should
    /// then shut down with [`loss_grace`](Daemon::loss_grace) and exit, to come back as a
    /// follower. Never resolves for a single replica.
    pub async fn lost_leadership(&self) {
        self.lost.cancelled().await;
    }

    /// The grace for calls in flight after the Lease was lost.
    pub fn loss_grace(&self) -> Duration {
        self.loss_grace
    }

    /// Wait until no lane has queued or running work (tests, benchmarks).
    pub async fn idle(&self) {
        self.plugins.idle().await;
    }
}

/// What the daemon itself writes that may lie inside the config folder, so that the folder
/// watch does not take its own writes for config changes: the state file (with its `-wal` and
/// `-shm` siblings), and the local folder (plugins' embedded databases, the default archive)
/// unless that is the config folder itself or holds it.
fn own_files(state: &jobrelay_state::StateBackend, config_root: &Path) -> Vec<std::path::PathBuf> {
    let mut own = Vec::new();
    if let jobrelay_state::StateBackend::Sqlite(path) = state {
        own.push(path.clone());
    }
    let local = state.local_dir();
    if !config_root.starts_with(&local) {
        own.push(local);
    }
    own
}

/// Lets the job view's deleted jobs go once they are older than `job_view.keep_deleted` or
/// over `job_view.max_deleted`, every few seconds.
async fn sweep_view(view: Arc<JobView>, cancel: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => view.sweep(jobrelay_fleet::record::now_secs()),
            _ = cancel.cancelled() => return,
        }
    }
}
