//! A job's story: what the objects around a job said of it when one of its versions was seen —
//! its Kueue `Workload` (where it is in its queue and why, what it went through there, the
//! accelerators its admission holds) and its pods (the first failing container and why).
//!
//! A job's own status says it is pending or failed; these say why. They travel on the job's
//! event ([`JobEvent::story`](crate::event::JobEvent::story)) as a snapshot taken when the
//! version was seen, so an event read back from the inbox after a restart carries what it
//! carried when it was made. The readers of each object live in the watch layer
//! (`jobrelay_watch::story`); this is the vocabulary they produce.

use chrono::{DateTime, FixedOffset};
use serde::{Deserialize, Serialize};

/// The longest text of a story kept (a condition's reason or message, a kubelet's message),
/// in bytes. The text comes from objects anyone who can create a pod or a Workload writes, is
/// held for every job in memory and handed to every plugin call: cut, it costs a bounded
/// share of both; what teams need of it (the reason, the message's start) fits.
pub const MAX_TEXT_BYTES: usize = 1024;

/// `text` cut to at most [`MAX_TEXT_BYTES`] at a character boundary, with `…` where it was cut.
pub fn bounded(mut text: String) -> String {
    if text.len() > MAX_TEXT_BYTES {
        let mut end = MAX_TEXT_BYTES - '…'.len_utf8();
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// What the objects around one job say of it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Story {
    /// Its Kueue Workload's facts, the latest version read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<WorkloadFacts>,
    /// The first failure cause its pods showed (the first is the one that explains the
    /// rest: later pods fail because the first did, or are torn down).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<FailureCause>,
}

impl Story {
    /// Whether nothing is known: no Workload read, no failing pod seen.
    pub fn is_empty(&self) -> bool {
        self.workload.is_none() && self.failure.is_none()
    }
}

/// Where a Workload is in its queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum QueueState {
    /// Waiting for quota: Kueue's reason (`WaitingForQuota`, `NoMatchingFlavor`, …) and message,
    /// empty before Kueue wrote any.
    Queued {
        /// `QuotaReserved=False`'s reason.
        reason: String,
        /// `QuotaReserved=False`'s message.
        message: String,
    },
    /// Quota reserved in a cluster queue; admission checks not yet passed.
    Reserved,
    /// Admitted: its pods may run.
    Admitted,
    /// Evicted (and not yet requeued and admitted again).
    Evicted {
        /// `Evicted=True`'s reason: `Preempted`, `PodsReadyTimeout`, `ClusterQueueStopped`, …
        reason: String,
        /// `Evicted=True`'s message.
        message: String,
        /// Set when Kueue preempted it: `Preempted=True`'s reason and message.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        preempted: Option<Preemption>,
    },
    /// Finished: `Succeeded`, `Failed`, …, with its message.
    Finished {
        /// `Finished=True`'s reason.
        reason: String,
        /// `Finished=True`'s message.
        message: String,
    },
}

/// How Kueue preempted a Workload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preemption {
    /// `Preempted=True`'s reason: `InClusterQueue`, `InCohortReclamation`,
    /// `InCohortFairSharing`, `InCohortReclaimWhileBorrowing`.
    pub reason: String,
    /// `Preempted=True`'s message, which names the preemptor where Kueue says it.
    pub message: String,
}

/// What one version of a Workload says of its job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadFacts {
    /// The job's uid: the `kueue.x-k8s.io/job-uid` label, or the controlling owner's uid. How
    /// the Workload is joined to its job; not carried on the job's own event (it is the
    /// event's `uid`, or a child's).
    #[serde(skip)]
    pub job_uid: Option<String>,
    /// Where it is in its queue.
    #[serde(flatten)]
    pub state: QueueState,
    /// The cluster queue of its admission (or of the quota reserved).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_queue: Option<String>,
    /// Its LocalQueue (`spec.queueName`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_queue: Option<String>,
    /// When its current wait began, by Kueue's rule: the last `Requeued` transition, or the
    /// Workload's creation. `None` when neither is written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_since: Option<DateTime<FixedOffset>>,
    /// When it was admitted last (`Admitted=True`'s transition), while admitted and once
    /// finished from an admission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admitted_at: Option<DateTime<FixedOffset>>,
    /// When it was last evicted (`Evicted=True`'s transition), while Kueue says so: until it
    /// is admitted again. Not in the WIT record (the job view stamps its marks with it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evicted_at: Option<DateTime<FixedOffset>>,
    /// Seconds admitted in earlier admit–evict cycles (`accumulatedPastExecutionTimeSeconds`).
    #[serde(default)]
    pub past_execution_seconds: i64,
    /// Evictions counted by Kueue, by reason (`schedulingStats.evictions`).
    #[serde(default, skip_serializing_if = "Counts::is_empty")]
    pub evictions: Counts<u32>,
    /// Times requeued (`requeueState.count`).
    #[serde(default)]
    pub requeues: u32,
    /// Accelerators its admission holds, all pod sets together, by resource name.
    #[serde(default, skip_serializing_if = "Counts::is_empty")]
    pub accelerators: Counts<u64>,
}

impl WorkloadFacts {
    /// Evictions by preemption.
    pub fn preemptions(&self) -> u32 {
        self.evictions.get("Preempted").copied().unwrap_or(0)
    }
}

/// Counts by name (evictions by reason, accelerators by resource), as a map in JSON.
///
/// Why not a `BTreeMap`: a story holds one or two entries per count, and a B-tree's first
/// node is some 400 bytes whatever it holds, which made two counts most of a story's memory
/// (docs/BENCHMARKS.md, "A job's story"). Kept sorted by name, each name once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts<V>(Vec<(String, V)>);

impl<V: Copy + std::ops::AddAssign> Counts<V> {
    /// Adds `n` to the count of `name`.
    pub fn add(&mut self, name: &str, n: V) {
        match self.0.binary_search_by(|(k, _)| k.as_str().cmp(name)) {
            Ok(at) => self.0[at].1 += n,
            Err(at) => self.0.insert(at, (name.to_string(), n)),
        }
    }

    /// The count of `name`.
    pub fn get(&self, name: &str) -> Option<&V> {
        self.0
            .binary_search_by(|(k, _)| k.as_str().cmp(name))
            .ok()
            .map(|at| &self.0[at].1)
    }
}

impl<V> Counts<V> {
    /// Whether nothing is counted.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The counts, by name in order.
    pub fn iter(&self) -> std::slice::Iter<'_, (String, V)> {
        self.0.iter()
    }
}

impl<V: Copy + std::ops::AddAssign, const N: usize> From<[(String, V); N]> for Counts<V> {
    fn from(pairs: [(String, V); N]) -> Counts<V> {
        let mut counts = Counts(Vec::with_capacity(N));
        for (name, n) in pairs {
            counts.add(&name, n);
        }
        counts
    }
}

impl<V: Serialize> Serialize for Counts<V> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

impl<'de, V: Deserialize<'de> + Copy + std::ops::AddAssign> Deserialize<'de> for Counts<V> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = std::collections::BTreeMap::<String, V>::deserialize(deserializer)?;
        Ok(Counts(map.into_iter().collect()))
    }
}

/// Why a pod failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureCause {
    /// The failing container's name; empty when the cause is the pod's own.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub container: String,
    /// Whether the container is an init container.
    #[serde(default)]
    pub init: bool,
    /// The kubelet's reason: `OOMKilled`, `Error`, `ImagePullBackOff`, `CrashLoopBackOff`, or
    /// the pod's (`Evicted`).
    pub reason: String,
    /// The exit code of the container's termination (the last one, for `CrashLoopBackOff`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The reason of the last termination of a container waiting in `CrashLoopBackOff`
    /// (`OOMKilled`, `Error`); `None` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reason: Option<String>,
    /// The kubelet's message, as written (text from the cluster: shown, never as markup).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn story_text_is_bounded_at_a_character_boundary() {
        assert_eq!(bounded("short".into()), "short");
        let exact = "a".repeat(MAX_TEXT_BYTES);
        assert_eq!(bounded(exact.clone()), exact);
        for long in ["a".repeat(MAX_TEXT_BYTES + 1), "é".repeat(MAX_TEXT_BYTES)] {
            let cut = bounded(long);
            assert!(
                cut.len() <= MAX_TEXT_BYTES && cut.ends_with('…'),
                "{}",
                cut.len()
            );
        }
    }

    #[test]
    fn a_story_reads_back_as_written() {
        let story = Story {
            workload: Some(WorkloadFacts {
                job_uid: None,
                state: QueueState::Evicted {
                    reason: "Preempted".into(),
                    message: "Preempted to accommodate a workload".into(),
                    preempted: Some(Preemption {
                        reason: "InCohortReclamation".into(),
                        message: "by ml/other (UID: 9)".into(),
                    }),
                },
                cluster_queue: Some("gpu".into()),
                local_queue: Some("team-a".into()),
                waiting_since: DateTime::parse_from_rfc3339("2026-12-01T10:00:00+00:00").ok(),
                admitted_at: None,
                evicted_at: None,
                past_execution_seconds: 3595,
                evictions: Counts::from([("Preempted".into(), 1)]),
                requeues: 1,
                accelerators: Counts::from([("nvidia.com/gpu".into(), 8)]),
            }),
            failure: Some(FailureCause {
                container: "trainer".into(),
                init: false,
                reason: "OOMKilled".into(),
                exit_code: Some(137),
                last_reason: None,
                message: None,
            }),
        };
        let json = serde_json::to_value(&story).expect("encodes");
        assert_eq!(json["workload"]["state"], "evicted");
        assert_eq!(
            json["workload"]["preempted"]["reason"],
            "InCohortReclamation"
        );
        assert_eq!(json["workload"]["waiting_since"], "2026-12-01T10:00:00Z");
        assert_eq!(json["failure"]["exit_code"], 137);
        let back: Story = serde_json::from_value(json).expect("decodes");
        assert_eq!(back, story);
    }
}
