//! The watch of the cluster sources on the home cluster (`cluster_sources:`): Argo CD's
//! cluster Secrets, Cluster API's kubeconfig Secrets and ClusterProfiles, each source listed and then watched
//! through the API with kube-runtime's watcher on a task of its own, so an added, edited or
//! deleted Secret is a cluster added, restarted or removed within moments.
//!
//! Each object is made a cluster by its source's parser ([`crate::config::argocd_secret`],
//! [`crate::config::capi_secret`], [`crate::config::cluster_profile`]) and kept, with its last good version, in an
//! [`Inventory`]; after every change a source's watch publishes what it holds, which the
//! control loop gives to the config state ([`ConfigState::set_inventory`]), so clusters from
//! Secrets run through the same cluster set as the files. A watch that fails (no rights, the
//! home cluster down) keeps the clusters as last read, reports why in `/status`, and is tried
//! again, 0.5 s doubling to 30 s, each attempt a fresh list (Secrets deleted meanwhile are
//! then gone).
//!
//! [`ConfigState::set_inventory`]: crate::config::state::ConfigState::set_inventory

use std::path::Path;
use std::pin::Pin;
use std::time::Duration;

use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::access_providers::AccessProviders;
use crate::config::inventory::{
    Inventory, InventorySnapshot, ObjectError, Parsed, Readiness, SourceStatus,
};
use crate::config::sections::cluster_sources::{ClusterSources, SecretsAt, SourceKind};
use crate::config::{argocd_secret, capi_secret, cluster_profile};
use jobrelay_capabilities::open_error::chain;

/// How long a home client that cannot be built waits before it is tried again.
const CLIENT_RETRY: Duration = Duration::from_secs(10);

/// The wait after the source's watch failed, doubling up to [`RETRY_MAX`] while it fails in
/// a row, back to this after a list.
const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// What a source holds, and how its watch fares.
#[derive(Debug, Clone)]
pub struct SourceReport {
    /// The clusters, `None` until the first list: a source not yet listed changes nothing.
    pub snapshot: Option<InventorySnapshot>,
    /// For `/status` (the conflicts with files are added by the config state).
    pub status: SourceStatus,
    /// Cluster name → what its Cluster API `Cluster` says against its control plane (the
    /// `cluster_api` source only: [`super::control_plane_watch`]).
    pub control_planes: std::collections::BTreeMap<String, Readiness>,
}

/// The latest report of each source, by its name ([`SourceKind::name`]).
pub type Reports = std::collections::BTreeMap<&'static str, SourceReport>;

/// The running watches of the configured sources, one task each. Dropping it leaves the tasks
/// running; [`InventoryWatch::stop`] ends them.
pub struct InventoryWatch {
    /// The settings they run with: a change of them is a new watch.
    pub settings: ClusterSources,
    /// The latest report of each source.
    pub reports: watch::Receiver<Reports>,
    cancel: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl InventoryWatch {
    /// Ends the watches and waits for them.
    pub async fn stop(self) {
        self.cancel.cancel();
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

/// Why the home cluster cannot be read; never carries a credential.
#[derive(Debug, thiserror::Error)]
pub enum HomeClientError {
    #[error("cluster_sources.kubeconfig {}: {}", path.display(), chain(source))]
    Kubeconfig {
        path: std::path::PathBuf,
        source: kube::config::KubeconfigError,
    },
    #[error(
        "cluster_sources: no `kubeconfig` given and no in-cluster service account: {}",
        chain(.0)
    )]
    InCluster(kube::config::InClusterError),
    #[error("cluster_sources: cannot build a client for the home cluster: {}", chain(.0))]
    Client(kube::Error),
}

/// A client for the home cluster with the section's credentials.
pub async fn home_client(kubeconfig: Option<&Path>) -> Result<Client, HomeClientError> {
    let mut config = match kubeconfig {
        Some(path) => {
            let failed = |source| HomeClientError::Kubeconfig {
                path: path.to_path_buf(),
                source,
            };
            let file = Kubeconfig::read_from(path).map_err(failed)?;
            kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
                .await
                .map_err(failed)?
        }
        None => kube::Config::incluster().map_err(HomeClientError::InCluster)?,
    };
    // The watcher retries with its own backoff; the client's retries would only hide a
    // failing home cluster from the source's status.
    config.default_retry = false;
    Client::try_from(config).map_err(HomeClientError::Client)
}

/// The objects a source reads (Secrets, or ClusterProfiles), as the API serves them.
pub fn objects(client: Client, kind: SourceKind, source: &SecretsAt) -> Api<DynamicObject> {
    let gvk = match kind {
        SourceKind::ArgoCd | SourceKind::ClusterApi => GroupVersionKind::gvk("", "v1", "Secret"),
        SourceKind::ClusterProfile => GroupVersionKind::gvk(
            cluster_profile::GROUP,
            cluster_profile::VERSION,
            "ClusterProfile",
        ),
    };
    let resource = ApiResource::from_gvk(&gvk);
    Api::namespaced_with(client, &source.namespace, &resource)
}

/// `namespace/name` of an object, and the cluster its current version makes (or why not);
/// `None` for a Secret the selector takes that is none of the source's clusters (Cluster
/// API's other Secrets of a cluster), which is passed over. `providers` are the
/// ClusterProfile source's (empty for the others).
pub fn parse_object(
    kind: SourceKind,
    providers: &AccessProviders,
    object: &DynamicObject,
) -> Option<(String, Parsed)> {
    let key = key_of(object);
    let empty = serde_json::Map::new();
    let data = object
        .data
        .get("data")
        .and_then(|d| d.as_object())
        .unwrap_or(&empty);
    let parsed = match kind {
        SourceKind::ArgoCd => argocd_secret::parse(&key, data).map_err(ObjectError::from),
        SourceKind::ClusterApi => {
            let labels = object.metadata.labels.clone().unwrap_or_default();
            let name = object.metadata.name.as_deref().unwrap_or_default();
            if !capi_secret::is_kubeconfig_secret(name, &labels) {
                return None;
            }
            let secret_type = object.data.get("type").and_then(|t| t.as_str());
            capi_secret::parse(&key, &labels, secret_type, data).map_err(ObjectError::from)
        }
        SourceKind::ClusterProfile => {
            let name = object.metadata.name.as_deref().unwrap_or_default();
            cluster_profile::parse(&key, name, &object.data, providers).map_err(ObjectError::from)
        }
    };
    Some((key, parsed))
}

/// What an object says against its cluster's control plane (a ClusterProfile's
/// `ControlPlaneHealthy`); Secrets say nothing of it.
pub fn readiness_of(kind: SourceKind, object: &DynamicObject) -> Option<Readiness> {
    match kind {
        SourceKind::ClusterProfile => cluster_profile::readiness(&key_of(object), &object.data),
        SourceKind::ArgoCd | SourceKind::ClusterApi => None,
    }
}

/// An object's `namespace/name`.
pub fn key_of(object: &DynamicObject) -> String {
    format!(
        "{}/{}",
        object.metadata.namespace.as_deref().unwrap_or_default(),
        object.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Starts the watch of every configured source; `None` when the section configures none.
pub fn spawn(settings: &ClusterSources, parent: &CancellationToken) -> Option<InventoryWatch> {
    let configured = settings.configured();
    if configured.is_empty() {
        return None;
    }
    let initial: Reports = configured
        .iter()
        .map(|(kind, at)| {
            let status = SourceStatus {
                namespace: at.namespace.clone(),
                label_selector: at.label_selector.clone(),
                ..SourceStatus::default()
            };
            let report = SourceReport {
                snapshot: None,
                status,
                control_planes: Default::default(),
            };
            (kind.name(), report)
        })
        .collect();
    let (tx, reports) = watch::channel(initial);
    let cancel = parent.child_token();
    let mut tasks: Vec<JoinHandle<()>> = configured
        .iter()
        .map(|(kind, at)| {
            tokio::spawn(run(
                settings.kubeconfig.clone(),
                settings.providers().cloned().unwrap_or_default(),
                *kind,
                (*at).clone(),
                tx.clone(),
                cancel.clone(),
            ))
        })
        .collect();
    if let Some((_, at)) = configured
        .iter()
        .find(|(k, _)| *k == SourceKind::ClusterApi)
    {
        tasks.push(tokio::spawn(super::control_plane_watch::run(
            settings.kubeconfig.clone(),
            (*at).clone(),
            tx.clone(),
            cancel.clone(),
        )));
    }
    Some(InventoryWatch {
        settings: settings.clone(),
        reports,
        cancel,
        tasks,
    })
}

async fn run(
    kubeconfig: Option<std::path::PathBuf>,
    providers: AccessProviders,
    kind: SourceKind,
    source: SecretsAt,
    tx: watch::Sender<Reports>,
    cancel: CancellationToken,
) {
    let name = kind.name();
    let failed = |error: String| {
        tx.send_modify(|reports| {
            let Some(report) = reports.get_mut(name) else {
                return;
            };
            if report.status.error.as_ref() != Some(&error) {
                tracing::warn!(source = name, namespace = %source.namespace, error = %error,
                    "cannot read the cluster source; its clusters as last read stay");
            }
            report.status.error = Some(error);
        });
    };
    let Some(client) = client_until(kubeconfig.as_deref(), &cancel, &failed).await else {
        return;
    };
    let mut config = watcher::Config::default();
    if !source.label_selector.is_empty() {
        config = config.labels(&source.label_selector);
    }
    let mut inventory = Inventory::default();
    let heard = |change: Heard| {
        match change {
            Heard::Listed(objects) => {
                inventory.replace(
                    objects
                        .iter()
                        .filter_map(|o| parse_object(kind, &providers, o))
                        .collect(),
                );
                for object in &objects {
                    inventory.set_readiness(&key_of(object), readiness_of(kind, object));
                }
            }
            Heard::Applied(object) => {
                inventory.set_readiness(&key_of(&object), readiness_of(kind, &object));
                match parse_object(kind, &providers, &object) {
                    Some((key, parsed)) => inventory.apply(key, parsed),
                    // Relabelled into none of the source's clusters: it is gone.
                    None => inventory.remove(&key_of(&object)),
                }
            }
            Heard::Deleted(object) => inventory.remove(&key_of(&object)),
        }
        publish(&tx, name, &inventory);
    };
    follow(
        objects(client, kind, &source),
        config,
        &cancel,
        heard,
        &failed,
    )
    .await;
}

/// A change of the objects a watch follows.
pub(crate) enum Heard {
    /// A full list: these are all there are.
    Listed(Vec<DynamicObject>),
    /// One was added or changed.
    Applied(DynamicObject),
    /// One was deleted.
    Deleted(DynamicObject),
}

/// A client for the home cluster, tried again every [`CLIENT_RETRY`] (each failure told to
/// `failed`) until one is built; `None` once `cancel` fires.
pub(crate) async fn client_until(
    kubeconfig: Option<&Path>,
    cancel: &CancellationToken,
    failed: &impl Fn(String),
) -> Option<Client> {
    loop {
        match home_client(kubeconfig).await {
            Ok(client) => return Some(client),
            Err(e) => failed(e.to_string()),
        }
        tokio::select! {
            _ = tokio::time::sleep(CLIENT_RETRY) => {}
            _ = cancel.cancelled() => return None,
        }
    }
}

/// Lists and then watches `api` with kube-runtime's watcher until `cancel`, telling `heard`
/// each change. A watch that fails (no rights, the home cluster down) is told to `failed` and
/// tried again, [`RETRY_FIRST`] doubling to [`RETRY_MAX`] while it fails in a row, back to the
/// first after a list; each attempt is a fresh list, so what was deleted meanwhile goes, and
/// the list tells that the objects are read again (a watch resumed in silence would not).
pub(crate) async fn follow(
    api: Api<DynamicObject>,
    config: watcher::Config,
    cancel: &CancellationToken,
    mut heard: impl FnMut(Heard),
    failed: &impl Fn(String),
) {
    let mut wait = RETRY_FIRST;
    loop {
        let mut stream = Box::pin(watcher::watcher(api.clone(), config.clone()));
        let mut listing: Option<Vec<DynamicObject>> = None;
        let error = loop {
            let event = tokio::select! {
                event = next(&mut stream) => event,
                _ = cancel.cancelled() => return,
            };
            match event {
                None => break None,
                Some(Err(e)) => break Some(chain(&e)),
                Some(Ok(Event::Init)) => listing = Some(Vec::new()),
                Some(Ok(Event::InitApply(object))) => {
                    listing.get_or_insert_with(Vec::new).push(object);
                }
                Some(Ok(Event::InitDone)) => {
                    wait = RETRY_FIRST;
                    heard(Heard::Listed(listing.take().unwrap_or_default()));
                }
                Some(Ok(Event::Apply(object))) => heard(Heard::Applied(object)),
                Some(Ok(Event::Delete(object))) => heard(Heard::Deleted(object)),
            }
        };
        if let Some(error) = error {
            failed(error);
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = cancel.cancelled() => return,
        }
        wait = (wait * 2).min(RETRY_MAX);
    }
}

/// Tells the control loop what the source holds now; the source is read again.
fn publish(tx: &watch::Sender<Reports>, name: &'static str, inventory: &Inventory) {
    let snapshot = inventory.snapshot();
    tx.send_modify(|reports| {
        let Some(report) = reports.get_mut(name) else {
            return;
        };
        if report.status.error.take().is_some() {
            tracing::info!(source = name, "the cluster source is read again");
        }
        report.status.listed = true;
        report.status.clusters = snapshot
            .clusters
            .iter()
            .map(|(name, (key, _))| (name.clone(), key.clone()))
            .collect();
        report.status.refused = snapshot.refused.clone();
        report.snapshot = Some(snapshot);
    });
}

/// The stream's next item. The watcher's stream is named by its `WatchStreamExt` bound, whose
/// `Stream` supertrait gives the poll, so no stream crate is needed for it.
async fn next<S>(stream: &mut Pin<Box<S>>) -> Option<S::Item>
where
    S: WatchStreamExt + ?Sized,
{
    std::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await
}
