//! Where a call's job lives: the client of each watched cluster and the pod label of each job
//! kind, kept up to date by the cluster manager, and the scope they give one event.
//!
//! Apart because it is process-wide and written from outside (clusters come and go while
//! plugins run); a call only reads the scope of its own event from it.

use std::collections::HashMap;
use std::sync::Arc;

use jobrelay_contract::event::JobEvent;
use jobrelay_watch::kinds::JobKind;
use parking_lot::RwLock;

/// The clients of the clusters being watched, and the pod label of each job kind. Kept up to
/// date by the cluster manager as clusters come and go.
#[derive(Clone, Default)]
pub struct ClusterDirectory {
    inner: Arc<RwLock<Directory>>,
}

#[derive(Default)]
struct Directory {
    clients: HashMap<String, kube::Client>,
    /// (apiVersion, kind) → pod label.
    pod_labels: HashMap<(String, String), String>,
    /// (apiVersion, kind) → the API resource, for writes to a job (the `job` capability).
    resources: HashMap<(String, String), kube::discovery::ApiResource>,
}

impl std::fmt::Debug for ClusterDirectory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterDirectory").finish_non_exhaustive()
    }
}

impl ClusterDirectory {
    /// Records the client of a cluster (replacing an older one).
    pub fn set_client(&self, cluster: &str, client: kube::Client) {
        let mut directory = self.inner.write();
        directory.clients.insert(cluster.to_string(), client);
    }

    /// Forgets a removed cluster.
    pub fn remove_client(&self, cluster: &str) {
        let mut directory = self.inner.write();
        directory.clients.remove(cluster);
    }

    /// Records the API resource of every kind, and the pod label of every kind that has one.
    pub fn set_kinds(&self, kinds: &[JobKind]) {
        let mut directory = self.inner.write();
        directory.resources = kinds
            .iter()
            .map(|kind| {
                let resource = kube::discovery::ApiResource {
                    group: kind.group.clone(),
                    version: kind.version.clone(),
                    api_version: kind.api_version(),
                    kind: kind.kind.clone(),
                    plural: kind.plural.clone(),
                };
                ((kind.api_version(), kind.kind.clone()), resource)
            })
            .collect();
        directory.pod_labels = kinds
            .iter()
            .filter_map(|kind| {
                let label = kind.pod_label.clone()?;
                Some(((kind.api_version(), kind.kind.clone()), label))
            })
            .collect();
    }

    /// The client of `cluster` and the API resource of a kind, for a write to a job of it; or
    /// why there is none.
    pub(crate) fn job_resource(
        &self,
        cluster: &str,
        api_version: &str,
        kind: &str,
    ) -> Result<(kube::Client, kube::discovery::ApiResource), NoScope> {
        let directory = self.inner.read();
        let client = directory
            .clients
            .get(cluster)
            .cloned()
            .ok_or_else(|| NoScope::NotConnected(cluster.to_string()))?;
        let resource = directory
            .resources
            .get(&(api_version.to_string(), kind.to_string()))
            .cloned()
            .ok_or_else(|| NoScope::UnknownKind {
                api_version: api_version.to_string(),
                kind: kind.to_string(),
            })?;
        Ok((client, resource))
    }

    /// The scope of a call handling `event`, or why there is none.
    pub(super) fn scope(&self, event: &JobEvent) -> Result<JobScope, NoScope> {
        let directory = self.inner.read();
        let client = directory
            .clients
            .get(&*event.cluster)
            .cloned()
            .ok_or_else(|| NoScope::NotConnected(event.cluster.to_string()))?;
        let label = directory
            .pod_labels
            .get(&(event.api_version.to_string(), event.kind.to_string()))
            .cloned()
            .ok_or_else(|| NoScope::NoPodLabel {
                api_version: event.api_version.to_string(),
                kind: event.kind.to_string(),
            })?;
        Ok(JobScope {
            client,
            namespace: event.namespace.to_string(),
            name: event.name.to_string(),
            uid: event.uid.to_string(),
            label,
        })
    }
}

/// Why a call has no job whose pods it may read, or that it may write (`job_resource`, for
/// the `job` capability); the plugin is told as a denial, or as unavailable while its cluster
/// is not connected (see `PodLogAccess::scope`; every write is told as unavailable).
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum NoScope {
    #[error("pod logs are not granted to this plugin (grants.pod_logs)")]
    NotGranted,
    /// A call outside `handle` (`init`) has no event, so no job.
    #[error("there is no job in scope outside `handle`")]
    OutsideHandle,
    /// A fleet event's call (`handle-fleet`) is about a cluster or a rule, not a job.
    #[error("a fleet event has no job, so no pods")]
    FleetEvent,
    #[error("cluster `{0}` is not connected")]
    NotConnected(String),
    #[error(
        "kind {api_version} {kind} has no `pod_label` in the main file, so its pods cannot be found"
    )]
    NoPodLabel { api_version: String, kind: String },
    /// A write to a job of a kind the main file does not configure.
    #[error("kind {api_version} {kind} is not a configured kind")]
    UnknownKind { api_version: String, kind: String },
}

/// Where the job of one call lives.
pub(super) struct JobScope {
    pub(super) client: kube::Client,
    pub(super) namespace: String,
    pub(super) name: String,
    pub(super) uid: String,
    pub(super) label: String,
}
