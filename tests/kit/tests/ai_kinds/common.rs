//! Helpers: a kube client for a simulator, and a watch that hands back every version of one
//! job step by step.

use std::time::Duration;

use futures::StreamExt as _;
use jobrelay_testkit::{Flavor, JobDriver, SimCluster};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt as _, watcher as run_watcher};
use kube::{Client, Config};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::{Instant, timeout};

/// Generous: CI machines are noisy.
const WAIT: Duration = Duration::from_secs(30);

pub async fn client_for(sim: &SimCluster) -> Client {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(format!("{}.yaml", sim.name()));
    sim.write_kubeconfig(&path).expect("write kubeconfig");
    let kubeconfig = Kubeconfig::read_from(&path).expect("read kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("config");
    Client::try_from(config).expect("client")
}

pub fn resource_of(flavor: Flavor) -> ApiResource {
    let gvr = flavor.gvr();
    ApiResource {
        group: gvr.group.to_string(),
        version: gvr.version.to_string(),
        api_version: gvr.api_version(),
        kind: flavor.kind().into(),
        plural: gvr.plural.to_string(),
    }
}

fn rv_number(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|rv| rv.parse().ok())
        .expect("a numeric resourceVersion")
}

/// Every version of one job as a `runtime::watcher` over HTTP delivers it.
pub struct Versions {
    rx: mpsc::UnboundedReceiver<Value>,
    task: tokio::task::JoinHandle<()>,
    taken: u64,
}

impl Drop for Versions {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Versions {
    /// Watches `flavor` jobs named `name` in `namespace`; returns once the watch is synced,
    /// so start it before creating the job.
    pub async fn watch(client: &Client, flavor: Flavor, namespace: &str, name: &str) -> Versions {
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), namespace, &resource_of(flavor));
        let (tx, rx) = mpsc::unbounded_channel();
        let (synced_tx, synced_rx) = tokio::sync::oneshot::channel();
        let wanted = name.to_string();
        let task = tokio::spawn(async move {
            let mut synced = Some(synced_tx);
            let mut stream = run_watcher(api, watcher::Config::default())
                .default_backoff()
                .boxed();
            while let Some(item) = stream.next().await {
                match item {
                    Ok(Event::InitDone) => {
                        if let Some(synced) = synced.take() {
                            let _ = synced.send(());
                        }
                    }
                    Ok(Event::Apply(o)) | Ok(Event::InitApply(o))
                        if o.metadata.name.as_deref() == Some(wanted.as_str()) =>
                    {
                        let value = serde_json::to_value(&o).expect("object as JSON");
                        if tx.send(value).is_err() {
                            break;
                        }
                    }
                    _ => {}
                }
            }
        });
        timeout(WAIT, synced_rx)
            .await
            .expect("watch synced in time")
            .expect("watch task alive");
        Versions { rx, task, taken: 0 }
    }

    /// The versions after those already taken, up to and including resourceVersion `rv`,
    /// oldest first: every write one step made.
    pub async fn upto(&mut self, rv: &str) -> Vec<Value> {
        let target: u64 = rv.parse().expect("numeric resourceVersion");
        let mut seen = Vec::new();
        let deadline = Instant::now() + WAIT;
        while self.taken < target {
            let next = timeout(
                deadline.saturating_duration_since(Instant::now()),
                self.rx.recv(),
            )
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for rv {rv}; saw {seen:#?}"))
            .expect("watch ended");
            self.taken = rv_number(&next);
            seen.push(next);
        }
        seen
    }

    /// What the step that returned `rv` wrote, checking it took exactly `writes` writes.
    pub async fn step(&mut self, rv: &str, writes: usize) -> Vec<Value> {
        let versions = self.upto(rv).await;
        assert_eq!(
            versions.len(),
            writes,
            "writes up to rv {rv}: {:#?}",
            versions.iter().map(|v| &v["status"]).collect::<Vec<_>>()
        );
        versions
    }
}

/// A fresh simulator, a client for it, and a watch on one job of `flavor` (not created yet).
pub async fn setup(flavor: Flavor, name: &str) -> (SimCluster, Client, Versions) {
    let sim = SimCluster::start(&format!("ai-{name}"))
        .await
        .expect("simulator");
    let client = client_for(&sim).await;
    let versions = Versions::watch(&client, flavor, "ml", name).await;
    (sim, client, versions)
}

/// `(type, status, reason)` of every condition, in order.
pub fn conditions(object: &Value) -> Vec<(String, String, String)> {
    object["status"]["conditions"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .map(|c| {
                    let field = |f: &str| c[f].as_str().unwrap_or_default().to_string();
                    (field("type"), field("status"), field("reason"))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The condition of this type.
pub fn condition<'v>(object: &'v Value, kind: &str) -> &'v Value {
    object["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
        .unwrap_or_else(|| panic!("no {kind} condition in {:#}", object["status"]))
}

/// The `lastTransitionTime` of the condition of this type.
pub fn since(object: &Value, kind: &str) -> String {
    condition(object, kind)["lastTransitionTime"]
        .as_str()
        .expect("a lastTransitionTime")
        .to_string()
}

/// `(type, status, reason)` as owned strings, for comparisons.
pub fn c(kind: &str, status: &str, reason: &str) -> (String, String, String) {
    (kind.into(), status.into(), reason.into())
}

/// The job's pods, found by its flavour's job-name label over HTTP.
pub async fn pods_of(client: &Client, job: &JobDriver) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), job.namespace());
    let selector = format!("{}={}", job.flavor().pod_label(), job.name());
    pods.list(&ListParams::default().labels(&selector))
        .await
        .expect("list pods")
        .items
}
