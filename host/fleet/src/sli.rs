//! Job SLIs per cluster × namespace × kind, from the transitions the view sees as they
//! happen: how long jobs wait to run (created → first running), how long they run (first
//! running → succeeded or failed), how many end each way, and how often they restart; and,
//! for kinds that tell a story, per Kueue ClusterQueue how long jobs waited to be admitted and
//! how often they were preempted, and the failed jobs by their first failure cause.
//!
//! Only live observations count, not the versions a (re-)list gives: after a restart every
//! job is listed again, and counting those would report every long-finished job anew. The
//! counters start from zero with the process, as Prometheus counters do.
//!
//! Namespaces are labels, and a fleet can have thousands: each cluster labels its first
//! `max_namespaces` by name and counts the rest under `other`, so the series stay bounded
//! (clusters × (max_namespaces + 1) × kinds). Cluster queues and causes are labels too, and
//! a cause is text a kubelet (or anyone who can write a pod's status) chose: each cluster names
//! its first [`MAX_NAMED`] of each and counts the rest under `other`.

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

/// Cluster queues, and failure causes, named per cluster; the rest count under [`OTHER`].
pub const MAX_NAMED: usize = 20;

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
    /// By cluster queue, sorted by name (a story's kinds only; most series have none).
    queues: Vec<(String, QueueSeries)>,
    /// Failed jobs by their first failure cause, sorted by cause.
    causes: Vec<(String, u64)>,
}

#[derive(Debug, Clone, Default, PartialEq)]
struct QueueSeries {
    admission_wait: Histogram,
    preemptions: u64,
}

/// The entry for `name` in a small vector sorted by name, made when missing.
fn entry<'v, V: Default>(items: &'v mut Vec<(String, V)>, name: &str) -> &'v mut V {
    let at = match items.binary_search_by(|(n, _)| n.as_str().cmp(name)) {
        Ok(at) => at,
        Err(at) => {
            items.insert(at, (name.to_string(), V::default()));
            at
        }
    };
    &mut items[at].1
}

/// Whether a cluster queue or cause can be a label value as it is: at most 63 characters of
/// letters, digits and `-_.:/`. Both are text from the cluster — a pod's status, which anyone
/// who may write it sets, or a Workload's — and the exposition writes label values unescaped,
/// so a quote or a line break would forge samples; such a name counts as [`OTHER`].
fn label_safe(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:/".contains(&b))
}

/// `name` if `named` holds it or has room for it (and then holds it), else [`OTHER`].
fn label<'a>(named: &mut BTreeSet<String>, name: &'a str, max: usize) -> &'a str {
    if named.contains(name) {
        name
    } else if named.len() < max {
        named.insert(name.to_string());
        name
    } else {
        OTHER
    }
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
    /// Per Kueue ClusterQueue its jobs were admitted to or preempted in, by name ([`OTHER`]
    /// past the cluster's [`MAX_NAMED`]).
    pub queues: Vec<QueueSli>,
    /// Failed jobs by their first failure cause (`OOMKilled`, `ImagePullBackOff`, …; [`OTHER`]
    /// past the cluster's [`MAX_NAMED`]); failures with no cause known are in `failed` only.
    pub failed_by_cause: Vec<(String, u64)>,
}

/// One cluster queue's SLIs in one series.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueueSli {
    /// The ClusterQueue (the LocalQueue when no cluster queue is known).
    pub queue: String,
    /// Seconds from the start of a wait (Kueue's rule: the last requeue, else the Workload's
    /// creation) to the admission that ended it, per admission seen live.
    pub admission_wait: HistogramSnapshot,
    /// Preemptions of its jobs seen live.
    pub preemptions: u64,
}

/// What one live transition means for the SLIs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sample<'a> {
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
        /// A failure's first cause, when its story tells one.
        cause: Option<&'a str>,
    },
    /// Entered `restarting`.
    Restarted,
    /// Kueue admitted its Workload to `queue` after a wait of `waited` seconds.
    Admitted {
        /// The cluster queue (else the local queue).
        queue: &'a str,
        /// Seconds from the wait's start to the admission.
        waited: f64,
    },
    /// Kueue preempted its Workload `times` more times, last in `queue`.
    Preempted {
        /// The cluster queue (else the local queue).
        queue: &'a str,
        /// Preemptions since the last seen.
        times: u32,
    },
}

#[derive(Debug, Default)]
struct Inner {
    series: BTreeMap<(String, String, String), Series>,
    /// The namespaces labelled by name, per cluster.
    named: BTreeMap<String, BTreeSet<String>>,
    /// The cluster queues labelled by name, per cluster.
    named_queues: BTreeMap<String, BTreeSet<String>>,
    /// The failure causes labelled by name, per cluster.
    named_causes: BTreeMap<String, BTreeSet<String>>,
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
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        let named = inner.named.entry(cluster.to_string()).or_default();
        let namespace = label(named, namespace, max);
        let key = (cluster.to_string(), namespace.to_string(), kind.to_string());
        let series = inner.series.entry(key).or_default();
        let mut queue_label = |queue: &'_ str| -> String {
            let named = inner.named_queues.entry(cluster.to_string()).or_default();
            let queue = if label_safe(queue) { queue } else { OTHER };
            label(named, queue, MAX_NAMED).to_string()
        };
        match sample {
            Sample::Started { waited } => series.queue_wait.record(waited.max(0.0)),
            Sample::Ended {
                succeeded,
                ran,
                cause,
            } => {
                if succeeded {
                    series.succeeded += 1;
                } else {
                    series.failed += 1;
                    if let Some(cause) = cause {
                        let cause = if label_safe(cause) { cause } else { OTHER };
                        let named = inner.named_causes.entry(cluster.to_string()).or_default();
                        *entry(&mut series.causes, label(named, cause, MAX_NAMED)) += 1;
                    }
                }
                if let Some(ran) = ran {
                    series.run.record(ran.max(0.0));
                }
            }
            Sample::Restarted => series.restarts += 1,
            Sample::Admitted { queue, waited } => {
                let queue = queue_label(queue);
                entry(&mut series.queues, &queue)
                    .admission_wait
                    .record(waited.max(0.0));
            }
            Sample::Preempted { queue, times } => {
                let queue = queue_label(queue);
                entry(&mut series.queues, &queue).preemptions += u64::from(times);
            }
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
        inner.named_queues.remove(cluster);
        inner.named_causes.remove(cluster);
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
                queues: s
                    .queues
                    .iter()
                    .map(|(queue, q)| QueueSli {
                        queue: queue.clone(),
                        admission_wait: q.admission_wait.snapshot(),
                        preemptions: q.preemptions,
                    })
                    .collect(),
                failed_by_cause: s.causes.clone(),
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
                cause: None,
            },
        );
        slis.record(
            "c",
            "ml",
            "batch-job",
            Sample::Ended {
                succeeded: true,
                ran: None,
                cause: None,
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

    #[test]
    fn admissions_preemptions_and_causes_land_by_queue_and_cause() {
        let slis = Slis::default();
        let record = |sample| slis.record("c", "ml", "k", sample);
        record(Sample::Admitted {
            queue: "a100",
            waited: 100.0,
        });
        record(Sample::Admitted {
            queue: "a100",
            waited: 4_000.0,
        });
        record(Sample::Admitted {
            queue: "cpu",
            waited: 2.0,
        });
        record(Sample::Preempted {
            queue: "a100",
            times: 2,
        });
        for cause in [Some("OOMKilled"), Some("OOMKilled"), None] {
            record(Sample::Ended {
                succeeded: false,
                ran: None,
                cause,
            });
        }
        let rows = slis.snapshot();
        let row = &rows[0];
        assert_eq!(row.failed, 3, "every failure counts, caused or not");
        assert_eq!(row.failed_by_cause, [("OOMKilled".to_string(), 2)]);
        let queues: Vec<(&str, u64, u64)> = row
            .queues
            .iter()
            .map(|q| (q.queue.as_str(), q.admission_wait.count, q.preemptions))
            .collect();
        assert_eq!(queues, [("a100", 2, 2), ("cpu", 1, 0)]);
        assert_eq!(row.queues[0].admission_wait.sum_seconds, 4_100.0);
    }

    /// A cause or queue that cannot be a label value as it is (a pod's status can say anything)
    /// counts as `other`, so it cannot forge a sample on `/metrics`.
    #[test]
    fn a_cause_or_queue_no_label_can_hold_counts_as_other() {
        let slis = Slis::default();
        let forged = "x\"} 1\njobrelay_leader 1\n#";
        for cause in [forged, "", &"a".repeat(64), "OOMKilled"] {
            slis.record(
                "c",
                "ml",
                "k",
                Sample::Ended {
                    succeeded: false,
                    ran: None,
                    cause: Some(cause),
                },
            );
        }
        slis.record(
            "c",
            "ml",
            "k",
            Sample::Preempted {
                queue: forged,
                times: 1,
            },
        );
        let row = &slis.snapshot()[0];
        assert_eq!(
            row.failed_by_cause,
            [("OOMKilled".to_string(), 1), (OTHER.to_string(), 3)]
        );
        assert_eq!(row.queues.len(), 1);
        assert_eq!(row.queues[0].queue, OTHER);
    }

    #[test]
    fn queues_and_causes_past_the_cap_are_counted_as_other() {
        let slis = Slis::default();
        for i in 0..MAX_NAMED + 5 {
            slis.record(
                "c",
                "ml",
                "k",
                Sample::Preempted {
                    queue: &format!("q{i}"),
                    times: 1,
                },
            );
            slis.record(
                "c",
                "ml",
                "k",
                Sample::Ended {
                    succeeded: false,
                    ran: None,
                    cause: Some(&format!("cause-{i}")),
                },
            );
        }
        let row = &slis.snapshot()[0];
        assert_eq!(row.queues.len(), MAX_NAMED + 1);
        let other = row.queues.iter().find(|q| q.queue == OTHER).expect("other");
        assert_eq!(other.preemptions, 5);
        assert_eq!(row.failed_by_cause.len(), MAX_NAMED + 1);
        assert!(row.failed_by_cause.contains(&(OTHER.to_string(), 5)));
    }
}
