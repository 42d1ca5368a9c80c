//! What the objects around the event's job said of it (its Kueue Workload, its first failing
//! pod): `story::get()` inside `handle`, `None` when its kind tells no story
//! (`docs/job-kinds.md`, "A job's story"); and the rules reading it the same way in every
//! plugin.

pub use crate::bindings::jobrelay::plugin::story::*;

/// Kueue's eviction reason for a preemption (`WorkloadEvictedByPreemption`).
const PREEMPTED: &str = "Preempted";

/// How many times the Workload was preempted, of its evictions by reason
/// ([`Workload::evictions`], Kueue's `schedulingStats.evictions`).
///
/// Why only `Preempted`: Kueue counts each eviction there under the reason of the `Evicted`
/// condition it set, and only `Preempted` (`WorkloadEvictedByPreemption`) means a Workload
/// was evicted to free quota for another, whichever kind of preemption it was (that is the
/// `Preempted=True` condition's reason: `InClusterQueue`, `InCohortReclamation`,
/// `InCohortFairSharing`, ..., never an eviction reason). Every other eviction reason is not
/// a preemption: `PodsReadyTimeout`, `AdmissionCheck`, `ClusterQueueStopped`,
/// `LocalQueueStopped`, `NodeFailures`, `InactiveWorkload` / `Deactivated` (by Kueue
/// version). Summed rather than looked up, so a reason listed twice still counts whole.
pub fn preemptions(evictions: &[(String, u32)]) -> u32 {
    evictions
        .iter()
        .filter(|(reason, _)| reason == PREEMPTED)
        .map(|(_, n)| *n)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_evictions_by_preemption_are_preemptions() {
        let evictions = |pairs: &[(&str, u32)]| -> Vec<(String, u32)> {
            pairs.iter().map(|(r, n)| (r.to_string(), *n)).collect()
        };
        assert_eq!(preemptions(&[]), 0);
        assert_eq!(
            preemptions(&evictions(&[
                ("PodsReadyTimeout", 3),
                ("Preempted", 2),
                ("AdmissionCheck", 1),
                ("Preempted", 1),
            ])),
            3
        );
        // Neither another eviction reason nor a preemption's own reason is the eviction's.
        assert_eq!(
            preemptions(&evictions(&[
                ("InCohortReclamation", 4),
                ("preempted", 1),
                ("NodeFailures", 1),
            ])),
            0
        );
    }
}
