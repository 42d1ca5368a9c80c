//! Releasing jobrelay's finalizer: the clusters own the clients, so the lanes' finalizer book
//! asks this service, which patches the job on the right cluster.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use kube::Client;

use crate::lanes::finalizer_book::{HeldJob, Release};
use crate::watch::finalizer;

/// The clients of running clusters, to remove the finalizer with.
pub struct FinalizerService {
    name: String,
    clients: RwLock<HashMap<String, Client>>,
}

impl FinalizerService {
    pub fn new(name: String) -> Arc<FinalizerService> {
        Arc::new(FinalizerService {
            name,
            clients: RwLock::new(HashMap::new()),
        })
    }

    /// A cluster's client is ready (its supervisor connected).
    pub fn register(&self, cluster: &str, client: Client) {
        let mut clients = self.clients.write().unwrap_or_else(|p| p.into_inner());
        clients.insert(cluster.to_string(), client);
    }

    /// A cluster stopped.
    pub fn unregister(&self, cluster: &str) {
        let mut clients = self.clients.write().unwrap_or_else(|p| p.into_inner());
        clients.remove(cluster);
    }
}

impl Release for FinalizerService {
    fn release(&self, job: HeldJob) {
        let client = {
            let clients = self.clients.read().unwrap_or_else(|p| p.into_inner());
            clients.get(&job.cluster).cloned()
        };
        let Some(client) = client else {
            tracing::warn!(cluster = %job.cluster, job = %job.name,
                "cannot release the finalizer: the cluster is not connected; \
                 `jobrelay finalizers release` removes it");
            return;
        };
        let name = self.name.clone();
        tokio::spawn(async move {
            match finalizer::remove(
                client,
                &job.kind,
                &job.namespace,
                &job.name,
                &job.uid,
                &name,
            )
            .await
            {
                Ok(true) => tracing::info!(cluster = %job.cluster, namespace = %job.namespace,
                    job = %job.name, "every plugin is done with the deletion; finalizer released"),
                Ok(false) => {}
                Err(e) => tracing::warn!(cluster = %job.cluster, job = %job.name, error = %e,
                    "cannot release the finalizer; it is retried when the job is seen again"),
            }
        });
    }
}
