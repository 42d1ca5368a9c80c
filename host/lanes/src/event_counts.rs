//! Event counts by cluster and job kind, for metrics: how many events each (cluster, kind)
//! produced, and what became of them in a lane.

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde::Serialize;

/// What happened to events, for one (cluster, kind).
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct Counts {
    pub observed: u64,
    pub delivered: u64,
    pub retried: u64,
    pub dead_lettered: u64,
}

/// Which count to bump.
#[derive(Debug, Clone, Copy)]
pub enum Count {
    Observed,
    Delivered,
    Retried,
    DeadLettered,
}

/// Counts keyed by (cluster, kind). Few keys (clusters × kinds), so one small lock is enough.
#[derive(Debug, Default)]
pub struct EventCounts {
    inner: Mutex<BTreeMap<(String, String), Counts>>,
}

impl EventCounts {
    pub fn add(&self, cluster: &str, kind: &str, count: Count) {
        let mut map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let key = (cluster.to_string(), kind.to_string());
        let counts = map.entry(key).or_default();
        match count {
            Count::Observed => counts.observed += 1,
            Count::Delivered => counts.delivered += 1,
            Count::Retried => counts.retried += 1,
            Count::DeadLettered => counts.dead_lettered += 1,
        }
    }

    /// `(cluster, kind) → counts`.
    pub fn snapshot(&self) -> Vec<(String, String, Counts)> {
        let map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        map.iter()
            .map(|((cluster, kind), counts)| (cluster.clone(), kind.clone(), *counts))
            .collect()
    }
}
