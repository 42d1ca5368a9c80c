//! The plugin set: turns plugin sources from the config folder into loaded versions and
//! lanes, reloading in the background.
//!
//! A new or changed plugin is compiled and checked off the event path; only a version that
//! loaded and accepted its config is installed. If loading fails, the version already serving
//! keeps serving and the failure is recorded in the plugin's status. Loads of one plugin are
//! numbered, so a slow older load finishing after a newer one can never install an old version.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use super::dispatcher::Routes;
use super::finalizer_book::FinalizerBook;
use super::lane::{Lane, LaneStats};
use crate::config::sources::PluginSource;
use crate::config::state::Change;
use crate::runtime::{PluginSpec, Runtime};
use crate::state::CursorStore;

/// What an operator sees of one plugin.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PluginStatus {
    /// The version serving events, if any loaded.
    pub serving: Option<String>,
    pub serving_wasm_sha256: Option<String>,
    /// The outcome of the last load attempt.
    pub last_reload: Option<ReloadOutcome>,
    pub lane: Option<LaneStats>,
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
    store: Arc<dyn CursorStore>,
    finalizers: Option<Arc<FinalizerBook>>,
    book: Arc<Mutex<Book>>,
}

impl PluginSet {
    pub fn new(
        runtime: Runtime,
        routes: Routes,
        store: Arc<dyn CursorStore>,
        finalizers: Option<Arc<FinalizerBook>>,
    ) -> Self {
        PluginSet {
            runtime,
            routes,
            store,
            finalizers,
            book: Arc::default(),
        }
    }

    pub fn routes(&self) -> &Routes {
        &self.routes
    }

    /// Apply plugin changes. Loads run in the background; the returned handles finish when
    /// each load has been installed or refused (tests and `check` wait on them, the daemon
    /// does not).
    pub fn apply(&self, changes: Vec<Change<PluginSource>>) -> Vec<tokio::task::JoinHandle<()>> {
        let mut loads = Vec::new();
        for change in changes {
            match change {
                Change::Added(source) | Change::Changed(source) => {
                    let generation = {
                        let mut book = self.book.lock().unwrap_or_else(|p| p.into_inner());
                        let g = book.generation.entry(source.name.clone()).or_default();
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
                        let mut book = self.book.lock().unwrap_or_else(|p| p.into_inner());
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

    async fn load(&self, source: PluginSource, generation: u64) {
        let started = std::time::Instant::now();
        let result = self.runtime.load(PluginSpec::from(&source)).await;
        let load_ms = started.elapsed().as_secs_f64() * 1000.0;
        let superseded = {
            let book = self.book.lock().unwrap_or_else(|p| p.into_inner());
            book.generation.get(&source.name) != Some(&generation)
        };
        if superseded {
            tracing::debug!(plugin = %source.name, version = %source.version,
                "a newer change superseded this load");
            return;
        }
        let at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let result = match (result, self.routes.get(&source.name)) {
            (Ok(version), Some(lane)) => {
                lane.reconfigure(version, source.lane_settings());
                Ok(())
            }
            (Ok(version), None) => {
                match Lane::open(
                    &source.name,
                    version,
                    source.lane_settings(),
                    self.store.clone(),
                    self.finalizers.clone(),
                )
                .await
                {
                    Ok(lane) => {
                        self.routes.insert(&source.name, lane);
                        Ok(())
                    }
                    Err(e) => Err(format!("cannot read the plugin's cursors: {e}")),
                }
            }
            (Err(e), _) => Err(e.to_string()),
        };
        let mut book = self.book.lock().unwrap_or_else(|p| p.into_inner());
        let status = book.status.entry(source.name.clone()).or_default();
        match result {
            Ok(()) => {
                tracing::info!(plugin = %source.name, version = %source.version,
                    wasm = %source.wasm_path.display(), delivery = ?source.delivery,
                    "plugin version serving");
                status.serving = Some(source.version.clone());
                status.serving_wasm_sha256 = Some(source.wasm_sha256.clone());
                status.last_reload = Some(ReloadOutcome {
                    version: source.version,
                    ok: true,
                    error: None,
                    load_ms,
                    at,
                });
            }
            Err(error) => {
                tracing::error!(plugin = %source.name, version = %source.version,
                    wasm = %source.wasm_path.display(), error = %error,
                    serving = ?status.serving, "plugin load failed; the serving version stays");
                status.last_reload = Some(ReloadOutcome {
                    version: source.version,
                    ok: false,
                    error: Some(error),
                    load_ms,
                    at,
                });
            }
        }
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
    pub async fn reload(&self, cluster: Option<&str>) -> Result<(), crate::state::StoreError> {
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

    /// Stop every lane: no new calls; calls in flight finish.
    pub async fn close(&self) {
        for lane in self.routes.lanes().values() {
            lane.close().await;
        }
    }

    /// Status of every plugin, with lane counters.
    pub fn status(&self) -> BTreeMap<String, PluginStatus> {
        let book = self.book.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = book.status.clone();
        for (name, status) in out.iter_mut() {
            status.lane = self.routes.get(name).map(|l| l.stats());
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
