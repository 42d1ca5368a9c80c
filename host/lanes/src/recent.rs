//! The last few job events the dispatcher saw, for the status page: what is moving right now.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;

use serde::Serialize;

use jobrelay_contract::event::JobEvent;

/// Events kept.
pub const KEPT: usize = 25;

/// One observed version, as the status page shows it.
#[derive(Debug, Clone, Serialize)]
pub struct RecentEvent {
    /// When it was observed (RFC 3339).
    pub at: String,
    /// The event's id (`cluster/uid/resource_version`).
    pub id: String,
    /// The job's cluster.
    pub cluster: String,
    /// The configured kind's name (`volcano-job`, `trainjob`), as the main file, filters and
    /// the job view name it: the object's `kind` alone (`Job`) does not tell a Volcano Job
    /// from a batch one.
    pub kind: String,
    /// The job's namespace.
    pub namespace: String,
    /// The job's name.
    pub name: String,
    /// The normalized phase, as text.
    pub phase: String,
    /// Rebuilt after a watch gap rather than observed.
    pub synthetic: bool,
}

/// A small ring of the latest events, newest last. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct RecentEvents {
    inner: Arc<Mutex<VecDeque<RecentEvent>>>,
}

impl RecentEvents {
    /// Keeps `event` of the configured kind `kind`, stamped now, dropping the oldest past
    /// [`KEPT`].
    pub fn record(&self, event: &JobEvent, kind: &str) {
        let mut ring = self.inner.lock();
        if ring.len() == KEPT {
            ring.pop_front();
        }
        ring.push_back(RecentEvent {
            at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            id: event.id.clone(),
            cluster: event.cluster.clone(),
            kind: kind.to_string(),
            namespace: event.namespace.clone(),
            name: event.name.clone(),
            phase: event.phase.to_string(),
            synthetic: event.synthetic,
        });
    }

    /// Newest first.
    pub fn snapshot(&self) -> Vec<RecentEvent> {
        let ring = self.inner.lock();
        ring.iter().rev().cloned().collect()
    }
}
