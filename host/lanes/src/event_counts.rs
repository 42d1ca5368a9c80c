//! Event counts by cluster and job kind, for metrics: how many events each (cluster, kind)
//! produced, and what became of them in a lane.
//!
//! The kind is the *configured* kind's name (`batch-job`, `volcano-job`), not the object's
//! `kind`: batch and Volcano jobs are both `Job`, and an SLO per kind must tell them apart.
//! An event carries only its API version and kind, so the name is learnt when a version is
//! observed (where the configured kind is at hand) and looked up when it is settled.

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use jobrelay_contract::event::JobEvent;

/// What happened to events, for one (cluster, kind).
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct Counts {
    /// Versions the watchers saw, delivered or not.
    pub observed: u64,
    /// Events a plugin handled, one per lane that delivered it.
    pub delivered: u64,
    /// Failed calls that were retried: an event retried three times counts three.
    pub retried: u64,
    /// Events stored as dead letters, one per lane.
    pub dead_lettered: u64,
}

/// Which count to bump.
#[derive(Debug, Clone, Copy)]
pub enum Count {
    /// [`Counts::observed`].
    Observed,
    /// [`Counts::delivered`].
    Delivered,
    /// [`Counts::retried`].
    Retried,
    /// [`Counts::dead_lettered`].
    DeadLettered,
}

/// Counts keyed by (cluster, configured kind name). Few keys (clusters × kinds), so one small
/// lock is enough.
#[derive(Debug, Default)]
pub struct EventCounts {
    inner: Mutex<Book>,
}

#[derive(Debug, Default)]
struct Book {
    /// Cluster → kind name → counts (nested, so a lookup by `&str` allocates nothing).
    counts: BTreeMap<String, BTreeMap<String, Counts>>,
    /// Cluster → the configured kinds' names by API version and kind. Per cluster: one object
    /// kind may be configured twice under two names for different clusters (`clusters:`).
    names: HashMap<String, Vec<KindName>>,
}

/// The configured kind an API version and kind belong to, on one cluster.
#[derive(Debug)]
struct KindName {
    api_version: String,
    kind: String,
    name: String,
}

impl EventCounts {
    /// Counts one event of the configured kind `kind_name`, and remembers the name for later
    /// counts of events of the same cluster, API version and kind.
    pub fn add_named(&self, event: &JobEvent, kind_name: &str, count: Count) {
        let mut guard = self.inner.lock();
        let book = &mut *guard;
        learn(&mut book.names, event, kind_name);
        bump(&mut book.counts, &event.cluster, kind_name, count);
    }

    /// Remembers which configured kind events of `event`'s cluster, API version and kind
    /// belong to.
    pub fn learn(&self, event: &JobEvent, kind_name: &str) {
        let mut guard = self.inner.lock();
        learn(&mut guard.names, event, kind_name);
    }

    /// Counts one event under the configured kind learnt for it (its object kind when none
    /// was: an event replayed from a dead letter of a kind no longer configured).
    pub fn add(&self, event: &JobEvent, count: Count) {
        let mut guard = self.inner.lock();
        let book = &mut *guard;
        let name = name_of(&book.names, event).unwrap_or(event.kind.as_str());
        bump(&mut book.counts, &event.cluster, name, count);
    }

    /// `(cluster, kind name) → counts`.
    pub fn snapshot(&self) -> Vec<(String, String, Counts)> {
        let book = self.inner.lock();
        book.counts
            .iter()
            .flat_map(|(cluster, kinds)| {
                kinds
                    .iter()
                    .map(|(kind, counts)| (cluster.clone(), kind.clone(), *counts))
            })
            .collect()
    }
}

fn name_of<'a>(names: &'a HashMap<String, Vec<KindName>>, event: &JobEvent) -> Option<&'a str> {
    names
        .get(event.cluster.as_str())?
        .iter()
        .find(|k| k.api_version == event.api_version && k.kind == event.kind)
        .map(|k| k.name.as_str())
}

fn learn(names: &mut HashMap<String, Vec<KindName>>, event: &JobEvent, kind_name: &str) {
    if name_of(names, event) == Some(kind_name) {
        return;
    }
    let kinds = names.entry(event.cluster.clone()).or_default();
    kinds.retain(|k| k.api_version != event.api_version || k.kind != event.kind);
    kinds.push(KindName {
        api_version: event.api_version.clone(),
        kind: event.kind.clone(),
        name: kind_name.to_string(),
    });
}

fn bump(
    counts: &mut BTreeMap<String, BTreeMap<String, Counts>>,
    cluster: &str,
    kind_name: &str,
    count: Count,
) {
    // Keys are made only for a (cluster, kind) not counted yet.
    if !counts.contains_key(cluster) {
        counts.insert(cluster.to_string(), BTreeMap::new());
    }
    let Some(kinds) = counts.get_mut(cluster) else {
        return;
    };
    if !kinds.contains_key(kind_name) {
        kinds.insert(kind_name.to_string(), Counts::default());
    }
    let Some(counts) = kinds.get_mut(kind_name) else {
        return;
    };
    match count {
        Count::Observed => counts.observed += 1,
        Count::Delivered => counts.delivered += 1,
        Count::Retried => counts.retried += 1,
        Count::DeadLettered => counts.dead_lettered += 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(api_version: &str, kind: &str) -> JobEvent {
        on("a", api_version, kind)
    }

    fn on(cluster: &str, api_version: &str, kind: &str) -> JobEvent {
        serde_json::from_value(serde_json::json!({
            "id": "a/u/1", "cluster": cluster, "api_version": api_version, "kind": kind,
            "namespace": "ml", "name": "n", "uid": "u", "resource_version": "1",
            "phase": "running", "raw_phase": "Running", "transition_time": "2026-01-01T00:00:00Z",
            "labels": {}, "annotations": {}, "object_json": "{}"
        }))
        .expect("event")
    }

    /// Batch and Volcano jobs are both `Job`: counted apart, under their configured names.
    #[test]
    fn jobs_of_two_kinds_with_one_object_kind_are_counted_apart() {
        let counts = EventCounts::default();
        let batch = event("batch/v1", "Job");
        let volcano = event("batch.volcano.sh/v1alpha1", "Job");
        counts.add_named(&batch, "batch-job", Count::Observed);
        counts.learn(&volcano, "volcano-job");
        counts.add(&volcano, Count::Delivered);
        counts.add(&volcano, Count::Delivered);
        counts.add(&batch, Count::Retried);
        counts.add(&event("example.com/v1", "TrainJob"), Count::DeadLettered);
        let snapshot = counts.snapshot();
        let of = |kind: &str| {
            snapshot
                .iter()
                .find(|(c, k, _)| c == "a" && k == kind)
                .map(|(_, _, n)| *n)
        };
        assert_eq!(
            of("batch-job"),
            Some(Counts {
                observed: 1,
                retried: 1,
                ..Counts::default()
            })
        );
        assert_eq!(of("volcano-job").map(|n| n.delivered), Some(2));
        assert_eq!(
            of("TrainJob").map(|n| n.dead_lettered),
            Some(1),
            "a kind never learnt keeps its object kind"
        );
        assert_eq!(of("Job"), None, "{snapshot:?}");
    }

    /// One CRD configured under two names for two clusters (`clusters:`): each cluster's
    /// events count under its own name, however their pushes and settlements interleave.
    #[test]
    fn one_object_kind_configured_twice_for_two_clusters_keeps_both_names() {
        let counts = EventCounts::default();
        let east = on("east", "batch.volcano.sh/v1alpha1", "Job");
        let west = on("west", "batch.volcano.sh/v1alpha1", "Job");
        counts.learn(&east, "volcano-east");
        counts.learn(&west, "volcano-west");
        counts.add(&east, Count::Delivered);
        counts.learn(&west, "volcano-west");
        counts.add(&east, Count::Delivered);
        counts.add(&west, Count::Delivered);
        let snapshot = counts.snapshot();
        let delivered = |cluster: &str, kind: &str| {
            snapshot
                .iter()
                .find(|(c, k, _)| c == cluster && k == kind)
                .map(|(_, _, n)| n.delivered)
        };
        assert_eq!(delivered("east", "volcano-east"), Some(2), "{snapshot:?}");
        assert_eq!(delivered("west", "volcano-west"), Some(1), "{snapshot:?}");
        assert_eq!(snapshot.len(), 2, "{snapshot:?}");
    }
}
