//! The dispatcher: takes job events from every watcher, in observation order, and queues each
//! on the lanes of the plugins that want its kind.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use tokio::sync::mpsc;

use super::lane::Lane;
use crate::config::main_file::MainConfig;
use crate::watch::event::JobEvent;

/// The lanes by plugin name, and how to tell an event's configured kind name.
#[derive(Clone, Default)]
pub struct Routes {
    inner: Arc<RwLock<RoutesInner>>,
}

#[derive(Default)]
struct RoutesInner {
    lanes: BTreeMap<String, Lane>,
    /// (apiVersion, kind) → configured kind name.
    kind_names: HashMap<(String, String), String>,
}

impl Routes {
    pub fn set_kinds(&self, main: &MainConfig) {
        let mut inner = self.inner.write().unwrap_or_else(|p| p.into_inner());
        inner.kind_names = main
            .kinds
            .iter()
            .map(|k| ((k.api_version(), k.kind.clone()), k.name.clone()))
            .collect();
    }

    pub fn insert(&self, name: &str, lane: Lane) {
        let mut inner = self.inner.write().unwrap_or_else(|p| p.into_inner());
        inner.lanes.insert(name.to_string(), lane);
    }

    pub fn remove(&self, name: &str) -> Option<Lane> {
        let mut inner = self.inner.write().unwrap_or_else(|p| p.into_inner());
        inner.lanes.remove(name)
    }

    pub fn get(&self, name: &str) -> Option<Lane> {
        let inner = self.inner.read().unwrap_or_else(|p| p.into_inner());
        inner.lanes.get(name).cloned()
    }

    pub fn lanes(&self) -> BTreeMap<String, Lane> {
        let inner = self.inner.read().unwrap_or_else(|p| p.into_inner());
        inner.lanes.clone()
    }

    /// Queue the event on every lane that wants it.
    pub fn route(&self, event: JobEvent) {
        let inner = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let Some(kind_name) = inner
            .kind_names
            .get(&(event.api_version.clone(), event.kind.clone()))
        else {
            tracing::debug!(event = %event.id, "event of a kind no longer configured; skipped");
            return;
        };
        for lane in inner.lanes.values().filter(|l| l.wants(kind_name)) {
            lane.push(event.clone());
        }
    }
}

/// Run until every sender is gone.
pub async fn run(routes: Routes, mut events: mpsc::Receiver<JobEvent>) {
    while let Some(event) = events.recv().await {
        tracing::debug!(event = %event.id, phase = %event.phase, name = %event.name, "observed");
        routes.route(event);
    }
}
