//! A Kueue `Workload` (`kueue.x-k8s.io/v1beta2`) read for its job's story: where the job is in
//! its queue and why, and what it has been through there.
//!
//! Kueue keeps the facts on the Workload, not on the job: a job it manages is created
//! suspended and says only that (`Suspended=True`), so a job waiting two hours for quota looks
//! like any pending job, and a preempted one like a failure. The Workload's conditions
//! (`QuotaReserved`, `Admitted`, `Evicted`, `Preempted`, `Requeued`, `Finished`) say which, with
//! Kueue's reasons and messages, and its status counts evictions and requeues.
//!
//! The state is decided in this order, the first that holds: `Finished=True`, `Evicted=True`
//! (with the `Preempted=True` reason when Kueue preempted it), `Admitted=True`,
//! `QuotaReserved=True` (reserved, its admission checks not yet passed), and otherwise queued,
//! with `QuotaReserved=False`'s reason and message when Kueue wrote them. When the wait began
//! is Kueue's own rule for its queued wait time: the last `Requeued` condition's transition,
//! or the Workload's creation.
//!
//! Accelerators are read from the admission's pod sets (`resourceUsage`, the pod set's total):
//! every resource whose name has a domain (`nvidia.com/gpu`, `amd.com/gpu`,
//! `google.com/tpu`) and a whole-number quantity. Extended resources are whole numbers by
//! Kubernetes' rule, so nothing is lost by reading no other quantity form.

use std::collections::BTreeMap;

use chrono::DateTime;
use serde::Deserialize;

pub use jobrelay_contract::story::{Counts, Preemption, QueueState, WorkloadFacts};

use jobrelay_contract::story::bounded;

/// A Workload that is not one: its JSON does not decode as a Workload's shape.
#[derive(Debug, thiserror::Error)]
#[error("a Kueue Workload that does not decode: {0}")]
pub struct WorkloadError(#[from] serde_json::Error);

/// The facts of a Workload's JSON text.
pub fn read(json: &str) -> Result<WorkloadFacts, WorkloadError> {
    let w: Workload = serde_json::from_str(json)?;
    let status = w.status.unwrap_or_default();
    let condition = |kind: &str| status.conditions.iter().find(|c| c.type_ == kind);
    let holds = |kind: &str| condition(kind).filter(|c| c.status == "True");
    let text = |c: Option<&Condition>, f: fn(&Condition) -> &Option<String>| {
        bounded(c.and_then(|c| f(c).clone()).unwrap_or_default())
    };
    let state = if let Some(done) = holds("Finished") {
        QueueState::Finished {
            reason: text(Some(done), |c| &c.reason),
            message: text(Some(done), |c| &c.message),
        }
    } else if let Some(evicted) = holds("Evicted")
        // Kueue keeps `Evicted=True` until it reserves quota again: an evicted Workload it
        // has requeued (`Requeued=True`) and that holds no quota is back in its queue.
        .filter(|_| holds("Requeued").is_none() || holds("QuotaReserved").is_some())
    {
        QueueState::Evicted {
            reason: text(Some(evicted), |c| &c.reason),
            message: text(Some(evicted), |c| &c.message),
            preempted: holds("Preempted").map(|p| Preemption {
                reason: text(Some(p), |c| &c.reason),
                message: text(Some(p), |c| &c.message),
            }),
        }
    } else if holds("Admitted").is_some() {
        QueueState::Admitted
    } else if holds("QuotaReserved").is_some() {
        QueueState::Reserved
    } else {
        let waiting = condition("QuotaReserved");
        QueueState::Queued {
            reason: text(waiting, |c| &c.reason),
            message: text(waiting, |c| &c.message),
        }
    };
    let when = |c: Option<&Condition>| {
        c.and_then(|c| c.last_transition_time.as_deref())
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
    };
    let created = w
        .metadata
        .creation_timestamp
        .as_deref()
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok());
    let admission = status.admission.unwrap_or_default();
    let mut accelerators = Counts::default();
    for usage in admission
        .pod_set_assignments
        .iter()
        .flat_map(|a| &a.resource_usage)
    {
        let (name, quantity) = usage;
        let whole = match quantity {
            serde_json::Value::String(text) => text.parse::<u64>().ok(),
            number => number.as_u64(),
        };
        if let Some(n) = whole.filter(|_| name.contains('/')) {
            accelerators.add(name, n);
        }
    }
    let job_uid = w
        .metadata
        .labels
        .get("kueue.x-k8s.io/job-uid")
        .cloned()
        .or_else(|| {
            w.metadata
                .owner_references
                .iter()
                .find(|o| o.controller == Some(true))
                .map(|o| o.uid.clone())
        });
    Ok(WorkloadFacts {
        job_uid,
        cluster_queue: admission.cluster_queue,
        local_queue: w.spec.and_then(|s| s.queue_name),
        waiting_since: when(condition("Requeued").filter(|c| c.status == "True")).or(created),
        // Kept once finished, so the last admission's run can be counted to the end.
        admitted_at: matches!(state, QueueState::Admitted | QueueState::Finished { .. })
            .then(|| when(holds("Admitted")))
            .flatten(),
        evicted_at: when(holds("Evicted")),
        past_execution_seconds: status.accumulated_past_execution_time_seconds.unwrap_or(0),
        evictions: status
            .scheduling_stats
            .map(|s| s.evictions)
            .unwrap_or_default()
            .into_iter()
            .fold(Counts::default(), |mut by, e| {
                by.add(&e.reason, e.count);
                by
            }),
        requeues: status.requeue_state.and_then(|r| r.count).unwrap_or(0),
        accelerators,
        state,
    })
}

// The Workload's fields this reads, each optional: an older or newer Kueue that leaves one
// out gives fewer facts, not an error.

#[derive(Deserialize)]
struct Workload {
    #[serde(default)]
    metadata: Metadata,
    spec: Option<Spec>,
    status: Option<Status>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Metadata {
    creation_timestamp: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    owner_references: Vec<OwnerReference>,
}

#[derive(Deserialize)]
struct OwnerReference {
    uid: String,
    controller: Option<bool>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Spec {
    queue_name: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Status {
    #[serde(default)]
    conditions: Vec<Condition>,
    admission: Option<Admission>,
    requeue_state: Option<RequeueState>,
    accumulated_past_execution_time_seconds: Option<i64>,
    scheduling_stats: Option<SchedulingStats>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Condition {
    #[serde(rename = "type")]
    type_: String,
    status: String,
    reason: Option<String>,
    message: Option<String>,
    last_transition_time: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Admission {
    cluster_queue: Option<String>,
    #[serde(default)]
    pod_set_assignments: Vec<PodSetAssignment>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodSetAssignment {
    /// Quantities, strings as the API server writes them (a number is read too).
    #[serde(default)]
    resource_usage: BTreeMap<String, serde_json::Value>,
}

#[derive(Deserialize)]
struct RequeueState {
    count: Option<u32>,
}

#[derive(Deserialize)]
struct SchedulingStats {
    #[serde(default)]
    evictions: Vec<EvictionCount>,
}

#[derive(Deserialize)]
struct EvictionCount {
    reason: String,
    count: u32,
}

#[cfg(test)]
mod tests;
