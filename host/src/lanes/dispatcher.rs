//! The dispatcher: takes observations from every watcher, in observation order, and offers
//! each to the lanes of the plugins that want its kind.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use tokio::sync::mpsc;

use super::lane::{Lane, Listed, Observed};
use crate::watch::watcher::Observation;

/// The lanes by plugin name.
#[derive(Clone, Default)]
pub struct Routes {
    inner: Arc<RwLock<BTreeMap<String, Lane>>>,
}

impl Routes {
    pub fn insert(&self, name: &str, lane: Lane) {
        let mut lanes = self.inner.write().unwrap_or_else(|p| p.into_inner());
        lanes.insert(name.to_string(), lane);
    }

    pub fn remove(&self, name: &str) -> Option<Lane> {
        let mut lanes = self.inner.write().unwrap_or_else(|p| p.into_inner());
        lanes.remove(name)
    }

    pub fn get(&self, name: &str) -> Option<Lane> {
        let lanes = self.inner.read().unwrap_or_else(|p| p.into_inner());
        lanes.get(name).cloned()
    }

    pub fn lanes(&self) -> BTreeMap<String, Lane> {
        let lanes = self.inner.read().unwrap_or_else(|p| p.into_inner());
        lanes.clone()
    }

    /// Offer the observation to every lane that wants its kind.
    pub fn route(&self, observation: Observation) {
        let lanes = self.inner.read().unwrap_or_else(|p| p.into_inner());
        match observation {
            Observation::Version {
                event,
                kind,
                from_list,
            } => {
                tracing::debug!(event = %event.id, phase = %event.phase, name = %event.name,
                    from_list, "observed");
                let observed = Observed {
                    event,
                    kind,
                    from_list,
                };
                for lane in lanes.values().filter(|l| l.wants(&observed.kind.name)) {
                    lane.push(&observed);
                }
            }
            Observation::Listed {
                cluster,
                kind,
                namespace,
                uids,
            } => {
                let listed = Listed {
                    cluster: cluster.to_string(),
                    api_version: kind.api_version(),
                    kind: kind.kind.clone(),
                    namespace,
                    uids,
                    job_kind: kind.clone(),
                };
                for lane in lanes.values().filter(|l| l.wants(&kind.name)) {
                    lane.listed(&listed);
                }
            }
        }
    }
}

/// Run until every sender is gone.
pub async fn run(routes: Routes, mut observations: mpsc::Receiver<Observation>) {
    while let Some(observation) = observations.recv().await {
        routes.route(observation);
    }
}
