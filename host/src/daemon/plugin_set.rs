//! The plugin set: turns plugin sources from the config folder into loaded versions and
//! lanes, reloading in the background.
//!
//! A new or changed plugin is compiled and checked off the event path; only a version that
//! loaded and accepted its config is installed. If loading fails, the version already serving
//! keeps serving and the failure is recorded in the plugin's status. Loads of one plugin are
//! numbered, so a slow older load finishing after a newer one can never install an old version.
//!
//! A load that fails for a reason that may pass (see [`LoadError::is_passing`]: `init` found
//! its database down, ran out of time, or asked to be retried) is tried again with backoff
//! until it succeeds or the plugin's files change. A plugin configured is waited for: if it
//! has no version yet, it still gets a lane, whose events queue and wait (and whose finalizer
//! holds stand) until a version is installed, instead of being dropped.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::config::sources::PluginSource;
use crate::config::state::Change;
use crate::oci::{FetchError, Registries};
use jobrelay_lanes::dispatcher::Routes;
use jobrelay_lanes::finalizer_book::FinalizerBook;
use jobrelay_lanes::lane::{Lane, LaneStats};
use jobrelay_runtime::{LoadError, PluginVersion, Runtime};
use jobrelay_state::DeliveryStore;

/// What an operator sees of one plugin.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PluginStatus {
    /// The version serving events, if any loaded.
    pub serving: Option<String>,
    /// The sha256 of the serving component's bytes (the `.wasm` file's, also when it came
    /// from a registry).
    pub serving_wasm_sha256: Option<String>,
    /// For a component from a registry: the pinned reference it was pulled by (whose digest
    /// is the artifact manifest's, not the component's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serving_oci: Option<String>,
    /// The outcome of the last load attempt.
    pub last_reload: Option<ReloadOutcome>,
    /// Set while a load that failed for a reason that may pass is being retried.
    pub waiting: Option<WaitingLoad>,
    pub lane: Option<LaneStats>,
    /// Writes and requests refused by a quota or limit since the process started, by limit
    /// (`kv_quota`, `archive_quota`, `http_open_requests`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub refusals: BTreeMap<&'static str, u64>,
    /// Log lines the plugin wrote since the process started, by level (`warn`, `error`, …;
    /// levels it never wrote at are left out).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub log_lines: BTreeMap<&'static str, u64>,
    /// Failed load attempts since the process started, by reason: a [`LoadError`] kind
    /// (`compile`, `wrong_world`, `init_refused`, `secret`, `grant`, `limits`, `unavailable`), or
    /// `lane` when the plugin's cursors could not be read to open its lane.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub load_failures: BTreeMap<&'static str, u64>,
}

/// A load being retried after a failure that may pass. Without a serving version, the
/// plugin's events wait in its lane meanwhile.
#[derive(Debug, Clone, Serialize)]
pub struct WaitingLoad {
    pub version: String,
    /// Attempts made so far.
    pub attempts: u32,
    /// The last attempt's error.
    pub error: String,
    /// When the first failed attempt was made, RFC 3339.
    pub since: String,
    /// When the next attempt starts, RFC 3339.
    pub next_attempt_at: String,
}

/// A plugin's lane could not be opened: its cursors could not be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the plugin's cursors: {0}")]
struct CursorsUnreadable(jobrelay_state::StoreError);

/// How one load attempt ended.
#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    /// Installed, refused for good, or superseded by a newer change: nothing more to do.
    Settled,
    /// Failed for a reason that may pass: try again later.
    Passing,
}

/// First and longest wait between attempts of a load that failed for a passing reason.
const RETRY_MIN: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(60);

fn retry_delays() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::default()
        .with_min_delay(RETRY_MIN)
        .with_max_delay(RETRY_MAX)
        .with_jitter()
        .without_max_times()
        .build()
}

fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[derive(Debug, Clone, Serialize)]
pub struct ReloadOutcome {
    pub version: String,
    pub ok: bool,
    pub error: Option<String>,
    /// How long the load took (compile or cache hit, link, the load-time `init`).
    pub load_ms: f64,
    /// RFC 3339.
    pub at: String,
}

#[derive(Default)]
struct Book {
    /// Latest load number started per plugin.
    generation: BTreeMap<String, u64>,
    status: BTreeMap<String, PluginStatus>,
}

/// Owns plugin loading and the lanes' plugin versions.
#[derive(Clone)]
pub struct PluginSet {
    runtime: Runtime,
    routes: Routes,
    store: Arc<dyn DeliveryStore>,
    finalizers: Option<Arc<FinalizerBook>>,
    book: Arc<Mutex<Book>>,
    /// Ends the retries of waiting loads when the set closes.
    stop: CancellationToken,
    /// Where registry components (`wasm: oci://…`) come from.
    registries: Registries,
    /// A lane resumes its inbox as soon as it opens: this replica delivers every cluster from
    /// the start (`single` mode). Otherwise the take-over does it (`reload`), for what the
    /// replica then delivers.
    resume_at_open: bool,
}

/// Why a version did not load: its component could not be fetched, or the runtime refused it.
#[derive(Debug)]
enum LoadFailure {
    Fetch(FetchError),
    Load(LoadError),
    /// The manifest lists `fleet_events`, but the component targets this older world, which
    /// has no `handle-fleet`.
    NoFleetExport(String),
}

impl LoadFailure {
    /// Whether trying the same files again may succeed.
    fn is_passing(&self) -> bool {
        match self {
            LoadFailure::Fetch(e) => e.is_passing(),
            LoadFailure::Load(e) => e.is_passing(),
            LoadFailure::NoFleetExport(_) => false,
        }
    }

    /// The metric label (`jobrelay_plugin_load_failures_total{reason}`).
    fn kind(&self) -> &'static str {
        match self {
            LoadFailure::Fetch(_) => "fetch",
            LoadFailure::Load(e) => e.kind(),
            LoadFailure::NoFleetExport(_) => "wrong_world",
        }
    }
}

impl std::fmt::Display for LoadFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadFailure::Fetch(e) => write!(f, "plugin component: {e}"),
            LoadFailure::Load(e) => write!(f, "{e}"),
            LoadFailure::NoFleetExport(world) => write!(
                f,
                "fleet_events: the component targets {world}, which has no handle-fleet; build \
                 it against jobrelay:plugin@0.2.1 or later, or remove fleet_events"
            ),
        }
    }
}

impl PluginSet {
    pub fn new(
        runtime: Runtime,
        routes: Routes,
        store: Arc<dyn DeliveryStore>,
        finalizers: Option<Arc<FinalizerBook>>,
        registries: Registries,
        resume_at_open: bool,
    ) -> Self {
        PluginSet {
            runtime,
            routes,
            store,
            finalizers,
            book: Arc::default(),
            stop: CancellationToken::new(),
            registries,
            resume_at_open,
        }
    }

    pub fn routes(&self) -> &Routes {
        &self.routes
    }

    /// Apply plugin changes. Loads run in the background; the returned handles finish when
    /// each load's first attempt has been installed, refused, or found to be passing (then a
    /// lane waits for the plugin and the retries go on in the background). The daemon waits
    /// on them at start, so the first list reaches every plugin's lane.
    pub fn apply(&self, changes: Vec<Change<PluginSource>>) -> Vec<tokio::task::JoinHandle<()>> {
        let mut loads = Vec::new();
        for change in changes {
            match change {
                Change::Added(source) | Change::Changed(source) => {
                    let generation = {
                        let mut book = self.book.lock();
                        let g = book.generation.entry(source.spec.name.clone()).or_default();
                        *g += 1;
                        *g
                    };
                    let this = self.clone();
                    loads.push(tokio::spawn(async move {
                        this.load(source, generation).await;
                    }));
                }
                Change::Removed(name) => {
                    {
                        let mut book = self.book.lock();
                        // Bump the generation so a load still running is not installed.
                        *book.generation.entry(name.clone()).or_default() += 1;
                        book.status.remove(&name);
                    }
                    if let Some(lane) = self.routes.remove(&name) {
                        tracing::info!(plugin = %name, "plugin removed");
                        loads.push(tokio::spawn(async move { lane.close().await }));
                    }
                    if let Some(book) = &self.finalizers {
                        book.forget_lane(&name);
                    }
                }
            }
        }
        loads
    }

    /// The first attempt; a passing failure hands the retries to a background task.
    async fn load(&self, source: PluginSource, generation: u64) {
        if self.attempt(&source, generation, 1).await == Attempt::Passing {
            let this = self.clone();
            tokio::spawn(async move { this.retry(source, generation).await });
        }
    }

    /// Attempts again, with backoff, until the load settles, a newer change supersedes it or
    /// the set closes.
    async fn retry(&self, source: PluginSource, generation: u64) {
        let mut delays = retry_delays();
        for attempt in 2u32.. {
            let delay = delays.next().unwrap_or(RETRY_MAX);
            {
                let mut book = self.book.lock();
                if let Some(waiting) = book
                    .status
                    .get_mut(&source.spec.name)
                    .and_then(|s| s.waiting.as_mut())
                {
                    waiting.next_attempt_at = (chrono::Utc::now()
                        + chrono::Duration::from_std(delay).unwrap_or_default())
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = self.stop.cancelled() => return,
            }
            if self.superseded(&source.spec.name, generation) {
                return;
            }
            if self.attempt(&source, generation, attempt).await == Attempt::Settled {
                return;
            }
        }
    }

    fn superseded(&self, name: &str, generation: u64) -> bool {
        let book = self.book.lock();
        book.generation.get(name) != Some(&generation)
    }

    /// Makes sure the plugin has a lane, opening one if it has none, and puts `version` into
    /// it when there is one. Without a version the lane waits (see [`Lane::open_waiting`]).
    async fn ensure_lane(
        &self,
        source: &PluginSource,
        version: Option<Arc<PluginVersion>>,
    ) -> Result<(), CursorsUnreadable> {
        if let Some(lane) = self.routes.get(&source.spec.name) {
            if let Some(version) = version {
                lane.reconfigure(version, source.lane.clone());
            }
            return Ok(());
        }
        let lane = Lane::open_with(
            &source.spec.name,
            version.map(|v| v as Arc<dyn jobrelay_lanes::handler::Handler>),
            source.lane.clone(),
            self.store.clone(),
            self.finalizers.clone(),
            self.routes.budget().clone(),
        )
        .await
        .map_err(CursorsUnreadable)?;
        if self.resume_at_open {
            lane.resume_inbox().await.map_err(CursorsUnreadable)?;
        }
        self.routes.insert(&source.spec.name, lane);
        Ok(())
    }

    async fn attempt(&self, source: &PluginSource, generation: u64, attempt: u32) -> Attempt {
        let started = std::time::Instant::now();
        let result = match source.loadable(&self.registries).await {
            Ok(spec) => self.runtime.load(spec).await.map_err(LoadFailure::Load),
            Err(e) => Err(LoadFailure::Fetch(e)),
        };
        // A manifest asking for fleet events needs a component that can take them.
        let result = result.and_then(|version| {
            if source.lane.fleet_events.any() && !version.takes_fleet_events() {
                Err(LoadFailure::NoFleetExport(version.package().to_string()))
            } else {
                Ok(version)
            }
        });
        let load_ms = started.elapsed().as_secs_f64() * 1000.0;
        if self.superseded(&source.spec.name, generation) {
            tracing::debug!(plugin = %source.spec.name, version = %source.spec.version,
                "a newer change superseded this load");
            return Attempt::Settled;
        }
        let at = now_rfc3339();
        let result = match result {
            Ok(version) => {
                let sha256 = version.wasm_sha256().to_string();
                self.ensure_lane(source, Some(version))
                    .await
                    .map(|()| sha256)
                    .map_err(|e| ("lane", e.to_string()))
            }
            Err(e) if e.is_passing() => {
                return self.note_passing(source, e, attempt, load_ms, at).await;
            }
            Err(e) => Err((e.kind(), e.to_string())),
        };
        let source = source.clone();
        let mut book = self.book.lock();
        let status = book.status.entry(source.spec.name.clone()).or_default();
        status.waiting = None;
        match result {
            Ok(sha256) => {
                tracing::info!(plugin = %source.spec.name, version = %source.spec.version,
                    wasm = %source.wasm_path.display(), delivery = ?source.lane.mode,
                    "plugin version serving");
                status.serving = Some(source.spec.version.clone());
                status.serving_wasm_sha256 = Some(sha256);
                status.serving_oci = source.oci.as_ref().map(ToString::to_string);
                status.last_reload = Some(ReloadOutcome {
                    version: source.spec.version,
                    ok: true,
                    error: None,
                    load_ms,
                    at,
                });
            }
            Err((reason, error)) => {
                tracing::error!(plugin = %source.spec.name, version = %source.spec.version,
                    wasm = %source.wasm_path.display(), error = %error,
                    serving = ?status.serving, "plugin load failed; the serving version stays");
                *status.load_failures.entry(reason).or_default() += 1;
                status.last_reload = Some(ReloadOutcome {
                    version: source.spec.version,
                    ok: false,
                    error: Some(error),
                    load_ms,
                    at,
                });
            }
        }
        Attempt::Settled
    }

    /// Records a load that failed for a reason that may pass, and gives a plugin that has no
    /// version a lane to wait in.
    async fn note_passing(
        &self,
        source: &PluginSource,
        error: LoadFailure,
        attempt: u32,
        load_ms: f64,
        at: String,
    ) -> Attempt {
        let reason = error.kind();
        let error = error.to_string();
        let lane = self.ensure_lane(source, None).await;
        let mut book = self.book.lock();
        let status = book.status.entry(source.spec.name.clone()).or_default();
        *status.load_failures.entry(reason).or_default() += 1;
        if let Err(lane_error) = lane {
            tracing::error!(plugin = %source.spec.name, version = %source.spec.version,
                error = %lane_error, "plugin load failed; no lane could be opened for it");
            status.waiting = None;
            status.last_reload = Some(ReloadOutcome {
                version: source.spec.version.clone(),
                ok: false,
                error: Some(format!("{error}; {lane_error}")),
                load_ms,
                at,
            });
            return Attempt::Settled;
        }
        // What happens meanwhile depends on whether an older version serves.
        match &status.serving {
            Some(serving) => tracing::warn!(plugin = %source.spec.name,
                version = %source.spec.version, attempt, error = %error, serving = %serving,
                "plugin load failed for a reason that may pass; retrying with backoff (the \
                 serving version keeps delivering meanwhile)"),
            None => tracing::warn!(plugin = %source.spec.name,
                version = %source.spec.version, attempt, error = %error,
                "plugin load failed for a reason that may pass; retrying with backoff (no \
                 version serves: events wait in the plugin's lane meanwhile)"),
        }
        let since = status
            .waiting
            .as_ref()
            .filter(|w| w.version == source.spec.version)
            .map_or_else(|| at.clone(), |w| w.since.clone());
        status.waiting = Some(WaitingLoad {
            version: source.spec.version.clone(),
            attempts: attempt,
            error: error.clone(),
            since,
            next_attempt_at: at.clone(),
        });
        status.last_reload = Some(ReloadOutcome {
            version: source.spec.version.clone(),
            ok: false,
            error: Some(error),
            load_ms,
            at,
        });
        Attempt::Passing
    }

    /// Queue the dead letters an operator asked to replay (`jobrelay dead-letters replay`);
    /// with `clusters`, only those of these clusters (the ones a sharded replica delivers).
    pub async fn take_replays(&self, clusters: Option<&[String]>) {
        for (name, lane) in self.routes.lanes() {
            match self.store.take_replays(&name, clusters).await {
                Ok(letters) => {
                    for letter in letters {
                        tracing::info!(plugin = %name, event = %letter.event.id, "replaying a dead letter");
                        lane.push_replay(letter.event);
                    }
                }
                Err(e) => tracing::warn!(plugin = %name, error = %e, "cannot read replay requests"),
            }
        }
    }

    /// Every lane re-reads its cursors from the store, of one cluster or of all (see
    /// [`Lane::reload`]). Fails on the first lane whose cursors cannot be read: delivering from
    /// stale cursors would repeat what another replica delivered.
    pub async fn reload(&self, cluster: Option<&str>) -> Result<(), jobrelay_state::StoreError> {
        for lane in self.routes.lanes().values() {
            lane.reload(cluster).await?;
        }
        Ok(())
    }

    /// Every lane lets go of one cluster (see [`Lane::forget_cluster`]), and the finalizer
    /// holds on its jobs are dropped: the replica that takes the cluster over holds them.
    pub async fn forget_cluster(&self, cluster: &str) {
        for lane in self.routes.lanes().values() {
            lane.forget_cluster(cluster).await;
        }
        if let Some(book) = &self.finalizers {
            book.forget_cluster(cluster);
        }
    }

    /// Close the state store (after the lanes stopped writing to it).
    pub async fn close_store(&self) {
        self.store.close().await;
    }

    /// Stop every lane: no new calls; calls in flight finish. Loads being retried stop.
    pub async fn close(&self) {
        self.stop.cancel();
        for lane in self.routes.lanes().values() {
            lane.close().await;
        }
    }

    /// Status of every plugin, with lane counters.
    /// Lets the cache of registry components hold only what `sources` name.
    pub fn retain_components<'a>(&self, sources: impl IntoIterator<Item = &'a PluginSource>) {
        self.registries
            .retain(sources.into_iter().filter_map(|source| source.oci.as_ref()));
    }

    pub fn status(&self) -> BTreeMap<String, PluginStatus> {
        let book = self.book.lock();
        let mut out = book.status.clone();
        let services = self.runtime.services();
        for (name, status) in out.iter_mut() {
            status.lane = self.routes.get(name).map(|l| l.stats());
            status.refusals = services.refusals.of(name);
            status.log_lines = services.log_lines.of(name);
        }
        out
    }

    /// Wait until every lane has nothing queued or running.
    pub async fn idle(&self) {
        for lane in self.routes.lanes().values() {
            lane.idle().await;
        }
    }
}
