//! Releasing jobrelay's finalizer: the clusters own the clients, so the lanes' finalizer book
//! asks this service, which patches the job on the right cluster.
//!
//! A release that fails (the API answers 503, is down, refuses the write) is retried on its
//! own timer until it lands, the job is gone, or its cluster is removed: a job being deleted
//! usually never changes again, so waiting for its next version would hold it forever.

use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use kube::Client;

use jobrelay_lanes::finalizer_book::{HeldJob, Release};
use jobrelay_watch::finalizer;

/// The clients of running clusters, to remove the finalizer with.
pub struct FinalizerService {
    name: String,
    clients: Arc<RwLock<HashMap<String, Client>>>,
}

/// The first wait before a failed release is tried again; it doubles up to the maximum.
const RELEASE_RETRY_MIN: Duration = Duration::from_secs(1);
const RELEASE_RETRY_MAX: Duration = Duration::from_secs(60);

impl FinalizerService {
    pub fn new(name: String) -> Arc<FinalizerService> {
        Arc::new(FinalizerService {
            name,
            clients: Arc::new(RwLock::new(HashMap::new())),
        })
    }

    /// A cluster's client is ready (its supervisor connected).
    pub fn register(&self, cluster: &str, client: Client) {
        let mut clients = self.clients.write();
        clients.insert(cluster.to_string(), client);
    }

    /// A cluster stopped.
    pub fn unregister(&self, cluster: &str) {
        let mut clients = self.clients.write();
        clients.remove(cluster);
    }
}

impl Release for FinalizerService {
    fn release(&self, job: HeldJob) {
        let client = {
            let clients = self.clients.read();
            clients.get(&job.cluster).cloned()
        };
        let Some(client) = client else {
            tracing::warn!(cluster = %job.cluster, job = %job.name,
                "cannot release the finalizer: the cluster is not connected; \
                 `jobrelay finalizers release` removes it");
            return;
        };
        let name = self.name.clone();
        let clients = self.clients.clone();
        tokio::spawn(async move {
            let mut delays = ExponentialBuilder::default()
                .with_min_delay(RELEASE_RETRY_MIN)
                .with_max_delay(RELEASE_RETRY_MAX)
                .with_jitter()
                .without_max_times()
                .build();
            for attempt in 1u32.. {
                let removed = finalizer::remove(
                    client.clone(),
                    &job.kind,
                    &job.namespace,
                    &job.name,
                    &job.uid,
                    &name,
                )
                .await;
                let error = match removed {
                    Ok(true) => {
                        tracing::info!(cluster = %job.cluster, namespace = %job.namespace,
                            job = %job.name, "every plugin is done with the deletion; finalizer released");
                        return;
                    }
                    Ok(false) => return,
                    Err(e) => e,
                };
                let wait = delays.next().unwrap_or(RELEASE_RETRY_MAX);
                tracing::warn!(cluster = %job.cluster, job = %job.name, error = %error, attempt,
                    retry_in_ms = wait.as_millis() as u64, "cannot release the finalizer; retrying");
                tokio::time::sleep(wait).await;
                let connected = clients.read().contains_key(&job.cluster);
                if !connected {
                    tracing::warn!(cluster = %job.cluster, job = %job.name,
                        "cluster removed before the finalizer could be released; \
                         `jobrelay finalizers release` removes it");
                    return;
                }
            }
        });
    }
}
