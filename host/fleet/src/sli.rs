//! Job SLIs per cluster × namespace × kind, from the transitions the view sees as they
//! happen: how long jobs wait to run (created → first running), how long they run (first
//! running → succeeded or failed), how many end each way, and how often they restart.
//!
//! Only live observations count, not the versions a (re-)list gives: after a restart every
//! job is listed again, and counting those would report every long-finished job anew. The
//! counters start from zero with the process, as Prometheus counters do.
//!
//! Namespaces are labels, and a fleet can have thousands: each cluster labels its first
//! `max_namespaces` by name and counts the rest under `other`, so the series stay bounded
//! (clusters × (max_namespaces + 1) × kinds).

use std::collections::{BTreeMap, BTreeSet};

use parking_lot::Mutex;
use serde::Serialize;

/// Upper bounds, in seconds, of the queue-wait and run-time buckets: a second to a day.
pub const BUCKETS: [f64; 14] = [
    1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1_800.0, 3_600.0, 7_200.0, 21_600.0, 43_200.0,
    86_400.0,
];

/// The namespace label of the namespaces past a cluster's cap.
pub const OTHER: &str = "other";

/// Namespaces labelled by name per cluster, by default: each (namespace, kind) that has a
/// live transition is 37 series (two histograms of 17, three counters), so 10 bound a
/// cluster with 3 kinds at 1,221 series.
pub const DEFAULT_MAX_NAMESPACES: usize = 10;

/// Samples per bucket (not cumulative; the last counts those above every bound), and their
/// sum.
#[derive(Debug, Clone, Default, PartialEq)]
struct Histogram {
    buckets: [u64; BUCKETS.len() + 1],
    sum: f64,
}

impl Histogram {
    fn record(&mut self, seconds: f64) {
        let slot = BUCKETS
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(BUCKETS.len());
        self.buckets[slot] += 1;
        self.sum += seconds;
    }

    fn snapshot(&self) -> HistogramSnapshot {
        let mut below = 0;
        let buckets = BUCKETS
            .iter()
            .zip(&self.buckets)
            .map(|(bound, n)| {
                below += n;
                (*bound, below)
            })
            .collect();
        HistogramSnapshot {
            buckets,
            count: self.buckets.iter().sum(),
            sum_seconds: self.sum,
        }
    }
}

/// A histogram as read: `(upper bound, samples at or under it)`, cumulative, without `+Inf`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HistogramSnapshot {
    /// One pair per bound of [`BUCKETS`], in order.
    pub buckets: Vec<(f64, u64)>,
    /// Every sample, those above the last bound included (Prometheus's `+Inf` bucket).
    pub count: u64,
    /// The samples' sum, in seconds.
    pub sum_seconds: f64,
}

#[derive(Debug, Clone, Default, PartialEq)]
struct Series {
    queue_wait: Histogram,
    run: Histogram,
    succeeded: u64,
    failed: u64,
    restarts: u64,
}

/// One cluster × namespace × kind.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SliRow {
    /// The cluster's name in jobrelay.
    pub cluster: String,
    /// The namespace, or [`OTHER`] past the cluster's cap.
    pub namespace: String,
    /// The configured kind's name.
    pub kind: String,
    /// Seconds from creation to first running, per job that started.
    pub queue_wait: HistogramSnapshot,
    /// Seconds from first running to the end, per job that ended after a start this process
    /// saw.
    pub run: HistogramSnapshot,
    /// Jobs that succeeded.
    pub succeeded: u64,
    /// Jobs that failed.
    pub failed: u64,
    /// Times a job entered `restarting`.
    pub restarts: u64,
}

/// What one live transition means for the SLIs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sample {
    /// First running, after waiting this long since creation.
    Started {
        /// Seconds from the job's creation to its first running.
        waited: f64,
    },
    /// Succeeded or failed, having run this long (unknown when its start was not seen).
    Ended {
        /// Succeeded (true) or failed.
        succeeded: bool,
        /// Seconds from its first running to this end.
        ran: Option<f64>,
    },
    /// Entered `restarting`.
    Restarted,
}

#[derive(Debug, Default)]
struct Inner {
    series: BTreeMap<(String, String, String), Series>,
    /// The namespaces labelled by name, per cluster.
    named: BTreeMap<String, BTreeSet<String>>,
    /// Watch lag per cluster (see [`Slis::record_lag`]).
    lag: BTreeMap<String, Histogram>,
}

/// Every series, behind one lock taken only on transitions and scrapes.
#[derive(Debug)]
pub struct Slis {
    inner: Mutex<Inner>,
    max_namespaces: std::sync::atomic::AtomicUsize,
}

impl Default for Slis {
    fn default() -> Slis {
        Slis::new(DEFAULT_MAX_NAMESPACES)
    }
}

impl Slis {
    /// No series yet; each cluster labels its first `max_namespaces` namespaces by name.
    pub fn new(max_namespaces: usize) -> Slis {
        Slis {
            inner: Mutex::default(),
            max_namespaces: max_namespaces.into(),
        }
    }

    /// A new cap, for namespaces not labelled yet (those already named keep their name).
    pub fn set_max_namespaces(&self, max: usize) {
        self.max_namespaces
            .store(max, std::sync::atomic::Ordering::Relaxed);
    }

    /// Counts one live transition of a job of `kind` in `namespace` on `cluster`, under
    /// `other` when the cluster has labeled its quota of namespaces and this one is not among
    /// them.
    pub fn record(&self, cluster: &str, namespace: &str, kind: &str, sample: Sample) {
        let max = self
            .max_namespaces
            .load(std::sync::atomic::Ordering::Relaxed);
        let mut inner = self.inner.lock();
        let named = inner.named.entry(cluster.to_string()).or_default();
        let label = if named.contains(namespace) {
            namespace
        } else if named.len() < max {
            named.insert(namespace.to_string());
            namespace
        } else {
            OTHER
        };
        let key = (cluster.to_string(), label.to_string(), kind.to_string());
        let series = inner.series.entry(key).or_default();
        match sample {
            Sample::Started { waited } => series.queue_wait.record(waited.max(0.0)),
            Sample::Ended { succeeded, ran } => {
                if succeeded {
                    series.succeeded += 1;
                } else {
                    series.failed += 1;
                }
                if let Some(ran) = ran {
                    series.run.record(ran.max(0.0));
                }
            }
            Sample::Restarted => series.restarts += 1,
        }
    }

    /// Watch lag: a live transition reached this process `seconds` after the time its job's
    /// status records for it (whole seconds, as statuses keep them; clocks apart count in).
    pub fn record_lag(&self, cluster: &str, seconds: f64) {
        let mut inner = self.inner.lock();
        match inner.lag.get_mut(cluster) {
            Some(h) => h.record(seconds.max(0.0)),
            None => {
                let mut h = Histogram::default();
                h.record(seconds.max(0.0));
                inner.lag.insert(cluster.to_string(), h);
            }
        }
    }

    /// The watch lag of every cluster that had a live transition.
    pub fn lags(&self) -> Vec<(String, HistogramSnapshot)> {
        let inner = self.inner.lock();
        inner
            .lag
            .iter()
            .map(|(cluster, h)| (cluster.clone(), h.snapshot()))
            .collect()
    }

    /// A cluster is no longer watched here: its series go (its new holder reports them).
    pub fn forget_cluster(&self, cluster: &str) {
        let mut inner = self.inner.lock();
        inner.series.retain(|(c, _, _), _| c != cluster);
        inner.named.remove(cluster);
        inner.lag.remove(cluster);
    }

    /// Every series' counters now, ordered by cluster, namespace and kind, for a scrape or a
    /// rules evaluation.
    pub fn snapshot(&self) -> Vec<SliRow> {
        let inner = self.inner.lock();
        inner
            .series
            .iter()
            .map(|((cluster, namespace, kind), s)| SliRow {
                cluster: cluster.clone(),
                namespace: namespace.clone(),
                kind: kind.clone(),
                queue_wait: s.queue_wait.snapshot(),
                run: s.run.snapshot(),
                succeeded: s.succeeded,
                failed: s.failed,
                restarts: s.restarts,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_land_in_their_series_and_buckets() {
        let slis = Slis::default();
        slis.record("c", "ml", "batch-job", Sample::Started { waited: 12.0 });
        slis.record("c", "ml", "batch-job", Sample::Started { waited: 400.0 });
        slis.record(
            "c",
            "ml",
            "batch-job",
            Sample::Ended {
                succeeded: false,
                ran: Some(90_000.0),
            },
        );
        slis.record(
            "c",
            "ml",
            "batch-job",
            Sample::Ended {
                succeeded: true,
                ran: None,
            },
        );
        slis.record("c", "ml", "batch-job", Sample::Restarted);
        let rows = slis.snapshot();
        assert_eq!(rows.len(), 1);
        let row = &rows[0];
        assert_eq!((row.succeeded, row.failed, row.restarts), (1, 1, 1));
        assert_eq!(row.queue_wait.count, 2);
        assert_eq!(row.queue_wait.sum_seconds, 412.0);
        // 12 s is under the 15 s bound, 400 s under 600 s; cumulative.
        let at = |bound: f64| {
            row.queue_wait
                .buckets
                .iter()
                .find(|(b, _)| *b == bound)
                .map(|(_, n)| *n)
        };
        assert_eq!(at(5.0), Some(0));
        assert_eq!(at(15.0), Some(1));
        assert_eq!(at(300.0), Some(1));
        assert_eq!(at(600.0), Some(2));
        // A run over a day is above every bound: counted, in no finite bucket.
        assert_eq!(row.run.count, 1);
        assert_eq!(row.run.buckets.last().map(|(_, n)| *n), Some(0));
    }

    #[test]
    fn namespaces_past_the_cap_are_counted_as_other() {
        let slis = Slis::new(2);
        for ns in ["a", "b", "c", "d", "a"] {
            slis.record("c1", ns, "k", Sample::Restarted);
        }
        slis.record("c2", "z", "k", Sample::Restarted);
        let rows: Vec<(String, String, u64)> = slis
            .snapshot()
            .into_iter()
            .map(|r| (r.cluster, r.namespace, r.restarts))
            .collect();
        assert_eq!(
            rows,
            [
                ("c1".into(), "a".into(), 2),
                ("c1".into(), "b".into(), 1),
                ("c1".into(), OTHER.into(), 2),
                ("c2".into(), "z".into(), 1),
            ]
        );
        slis.forget_cluster("c1");
        assert_eq!(slis.snapshot().len(), 1);
    }
}
