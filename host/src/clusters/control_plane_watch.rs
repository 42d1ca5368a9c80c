//! The watch of Cluster API's `Cluster` objects beside the `cluster_api` source's kubeconfig
//! Secrets: what each Cluster says of its control plane ([`crate::config::capi_cluster`]),
//! published in the source's report for the control loop to give the health board, where it
//! feeds the cluster's availability (a cluster being built is `connecting`, not offline).
//!
//! A task of its own, so the Secrets' watch never waits on it: a home cluster without
//! Cluster API's `v1beta2` Clusters (an older Cluster API) or without the right to read them
//! keeps the clusters from the Secrets running as they would without this watch, and says why
//! in the source's `/status` entry (`control_planes_error`), tried again 0.5 s doubling to
//! 30 s. What the Clusters said stays as last read while the watch fails.

use std::collections::BTreeMap;
use std::path::PathBuf;

use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::watcher;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::inventory_watch::{Heard, Reports, client_until, follow, key_of};
use crate::config::capi_cluster;
use crate::config::inventory::Readiness;
use crate::config::sections::cluster_sources::{SecretsAt, SourceKind};

/// Watches the Clusters of the source's namespace until `cancel`, publishing into the
/// `cluster_api` report.
pub async fn run(
    kubeconfig: Option<PathBuf>,
    source: SecretsAt,
    tx: watch::Sender<Reports>,
    cancel: CancellationToken,
) {
    let name = SourceKind::ClusterApi.name();
    let failed = |error: String| {
        tx.send_modify(|reports| {
            let Some(report) = reports.get_mut(name) else {
                return;
            };
            if report.status.control_planes_error.as_ref() != Some(&error) {
                tracing::warn!(source = name, namespace = %source.namespace, error = %error,
                    "cannot read Cluster API's Clusters; their clusters are judged by health \
                     checks alone");
            }
            report.status.control_planes_error = Some(error);
        });
    };
    let Some(client) = client_until(kubeconfig.as_deref(), &cancel, &failed).await else {
        return;
    };
    let gvk = GroupVersionKind::gvk(capi_cluster::GROUP, capi_cluster::VERSION, "Cluster");
    let api: Api<DynamicObject> =
        Api::namespaced_with(client, &source.namespace, &ApiResource::from_gvk(&gvk));
    let mut said: BTreeMap<String, Readiness> = BTreeMap::new();
    let heard = |change: Heard| {
        match change {
            Heard::Listed(objects) => said = objects.iter().filter_map(read).collect(),
            Heard::Applied(object) => {
                match read(&object) {
                    Some((cluster, readiness)) => said.insert(cluster, readiness),
                    None => said.remove(object.metadata.name.as_deref().unwrap_or_default()),
                };
            }
            Heard::Deleted(object) => {
                said.remove(object.metadata.name.as_deref().unwrap_or_default());
            }
        }
        tx.send_modify(|reports| {
            if let Some(report) = reports.get_mut(name) {
                report.status.control_planes_error = None;
                report.control_planes = said.clone();
            }
        });
    };
    follow(api, watcher::Config::default(), &cancel, heard, &failed).await;
}

/// The cluster a Cluster object is of (its name: the kubeconfig Secret's label), and what it
/// says against its control plane, if anything.
fn read(object: &DynamicObject) -> Option<(String, Readiness)> {
    let cluster = object.metadata.name.clone()?;
    let readiness = capi_cluster::readiness(&key_of(object), &object.data)?;
    Some((cluster, readiness))
}
