use serde_json::json;

use super::*;
use chrono::FixedOffset;

fn condition(kind: &str, status: &str, reason: &str, message: &str, at: &str) -> serde_json::Value {
    json!({"type": kind, "status": status, "reason": reason, "message": message,
           "lastTransitionTime": at, "observedGeneration": 1})
}

/// A Workload of a PyTorchJob as Kueue writes it, with `status`.
fn workload(status: serde_json::Value) -> String {
    json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": "pytorchjob-llama-ft-3f2a1", "namespace": "ml",
            "creationTimestamp": "2026-12-01T08:00:00Z",
            "labels": {"kueue.x-k8s.io/job-uid": "5b1e-job"},
            "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                                 "name": "llama-ft", "uid": "5b1e-job", "controller": true}],
        },
        "spec": {"queueName": "team-ml", "podSets": [{"name": "master", "count": 1}]},
        "status": status,
    })
    .to_string()
}

fn at(t: &str) -> Option<DateTime<FixedOffset>> {
    DateTime::parse_from_rfc3339(t).ok()
}

#[test]
fn a_workload_waiting_for_quota_is_queued_with_kueues_reason_since_its_creation() {
    let facts = read(&workload(json!({"conditions": [condition(
        "QuotaReserved", "False", "WaitingForQuota",
        "couldn't assign flavors to pod set master: insufficient quota for nvidia.com/gpu in flavor a100",
        "2026-12-01T08:00:01Z")]})))
    .expect("reads");
    match &facts.state {
        QueueState::Queued { reason, message } => {
            assert_eq!(reason, "WaitingForQuota");
            assert!(message.contains("insufficient quota"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(facts.waiting_since, at("2026-12-01T08:00:00Z"));
    assert_eq!(facts.job_uid.as_deref(), Some("5b1e-job"));
    assert_eq!(facts.local_queue.as_deref(), Some("team-ml"));
    assert_eq!((facts.cluster_queue, facts.admitted_at), (None, None));
}

#[test]
fn a_workload_goes_reserved_admitted_preempted_requeued_and_admitted_again() {
    let admission = json!({"clusterQueue": "a100", "podSetAssignments": [
        {"name": "master", "count": 1, "flavors": {"nvidia.com/gpu": "a100"},
         "resourceUsage": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "8"}},
        {"name": "worker", "count": 3, "flavors": {"nvidia.com/gpu": "a100"},
         "resourceUsage": {"cpu": "24", "nvidia.com/gpu": "24"}}]});
    let reserved = read(&workload(json!({
        "admission": admission,
        "conditions": [condition("QuotaReserved", "True", "QuotaReserved",
                                 "Quota reserved in ClusterQueue a100", "2026-12-01T09:00:00Z"),
                       condition("Admitted", "False", "UnsatisfiedAdmissionChecks", "", "2026-12-01T09:00:00Z")]})))
    .expect("reads");
    assert_eq!(reserved.state, QueueState::Reserved);
    assert_eq!(reserved.cluster_queue.as_deref(), Some("a100"));

    let admitted = read(&workload(json!({
        "admission": admission,
        "conditions": [condition("QuotaReserved", "True", "QuotaReserved", "", "2026-12-01T09:00:00Z"),
                       condition("Admitted", "True", "Admitted", "", "2026-12-01T09:00:05Z"),
                       condition("PodsReady", "True", "Started", "", "2026-12-01T09:01:00Z")]})))
    .expect("reads");
    assert_eq!(admitted.state, QueueState::Admitted);
    assert_eq!(admitted.admitted_at, at("2026-12-01T09:00:05Z"));
    assert_eq!(
        admitted.accelerators,
        Counts::from([("nvidia.com/gpu".to_string(), 32)]),
        "both pod sets' totals, no cpu or memory"
    );

    let preempted = read(&workload(json!({
        "conditions": [
            condition("QuotaReserved", "False", "Preempted", "", "2026-12-01T10:00:00Z"),
            condition("Admitted", "False", "NoReservation", "", "2026-12-01T10:00:00Z"),
            condition("Evicted", "True", "Preempted",
                      "Preempted to accommodate a workload (UID: 77aa, JobUID: 9c0d) due to reclamation within the cohort",
                      "2026-12-01T10:00:00Z"),
            condition("Preempted", "True", "InCohortReclamation",
                      "Preempted to accommodate a workload (UID: 77aa, JobUID: 9c0d) due to reclamation within the cohort",
                      "2026-12-01T10:00:00Z")],
        "accumulatedPastExecutionTimeSeconds": 3595,
        "schedulingStats": {"evictions": [{"reason": "Preempted", "underlyingCause": "", "count": 1}]},
        "requeueState": {"count": 1, "requeueAt": "2026-12-01T10:01:00Z"}})))
    .expect("reads");
    match &preempted.state {
        QueueState::Evicted {
            reason,
            preempted:
                Some(Preemption {
                    reason: how,
                    message,
                }),
            ..
        } => {
            assert_eq!(
                (reason.as_str(), how.as_str()),
                ("Preempted", "InCohortReclamation")
            );
            assert!(
                message.contains("JobUID: 9c0d"),
                "the preemptor named: {message}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!((preempted.preemptions(), preempted.requeues), (1, 1));
    assert_eq!(preempted.past_execution_seconds, 3595);
    assert!(
        preempted.accelerators.is_empty(),
        "no admission, no quota held"
    );

    let requeued = read(&workload(json!({
        "conditions": [
            condition("QuotaReserved", "False", "WaitingForQuota", "", "2026-12-01T10:01:00Z"),
            condition("Evicted", "False", "QuotaReserved", "Previously: Preempted", "2026-12-01T10:01:00Z"),
            condition("Requeued", "True", "BackoffFinished", "", "2026-12-01T10:01:00Z")],
        "schedulingStats": {"evictions": [{"reason": "Preempted", "underlyingCause": "", "count": 1}]}})))
    .expect("reads");
    assert!(
        matches!(requeued.state, QueueState::Queued { ref reason, .. } if reason == "WaitingForQuota")
    );
    assert_eq!(
        requeued.waiting_since,
        at("2026-12-01T10:01:00Z"),
        "since the requeue, as Kueue counts"
    );
}

#[test]
fn a_finished_workload_is_finished_whatever_else_it_says() {
    let facts = read(&workload(json!({"conditions": [
        condition("Admitted", "True", "Admitted", "", "2026-12-01T09:00:05Z"),
        condition("Finished", "True", "Failed", "Job failed: BackoffLimitExceeded", "2026-12-01T11:00:00Z")]})))
    .expect("reads");
    assert_eq!(
        facts.state,
        QueueState::Finished {
            reason: "Failed".into(),
            message: "Job failed: BackoffLimitExceeded".into()
        }
    );
    // The admission it finished from stays, so its last run can be counted to the end.
    assert_eq!(
        facts.admitted_at.map(|t| t.to_rfc3339()),
        Some("2026-12-01T09:00:05+00:00".to_string())
    );
}

#[test]
fn a_workload_without_status_or_label_reads_with_fewer_facts_and_garbage_is_an_error() {
    let bare = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                      "metadata": {"name": "w", "ownerReferences": [
                          {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "owner-1", "controller": true}]}})
    .to_string();
    let facts = read(&bare).expect("reads");
    assert_eq!(
        facts.job_uid.as_deref(),
        Some("owner-1"),
        "the controller's uid"
    );
    assert_eq!(
        facts.state,
        QueueState::Queued {
            reason: String::new(),
            message: String::new()
        }
    );
    assert_eq!(facts.waiting_since, None);
    assert!(read("{\"status\": 7}").is_err());
    assert!(read("not json").is_err());
}

#[test]
fn a_huge_message_is_kept_bounded() {
    let long = "x".repeat(1_000_000);
    let facts = read(&workload(json!({
        "conditions": [condition("QuotaReserved", "False", "Pending", &long, "2026-12-01T09:00:00Z")]
    })))
    .expect("reads");
    match facts.state {
        QueueState::Queued { message, .. } => {
            assert!(
                message.len() <= jobrelay_contract::story::MAX_TEXT_BYTES,
                "{}",
                message.len()
            );
            assert!(message.ends_with('…'));
        }
        other => panic!("queued, not {other:?}"),
    }
}

/// Kueue keeps `Evicted=True` until it reserves quota again: once it requeued the Workload
/// and holds no quota for it, the Workload waits in its queue again; while quota is still held
/// (the eviction's first write), it is evicted.
#[test]
fn a_requeued_eviction_waits_in_its_queue() {
    let evicted = condition(
        "Evicted",
        "True",
        "Preempted",
        "Preempted to accommodate",
        "2026-12-01T10:00:00Z",
    );
    let facts = read(&workload(json!({"conditions": [
        evicted.clone(),
        condition("QuotaReserved", "True", "QuotaReserved", "", "2026-12-01T09:00:00Z"),
        condition("Requeued", "True", "BackoffFinished", "", "2026-12-01T08:00:00Z")]})))
    .expect("reads");
    assert!(
        matches!(facts.state, QueueState::Evicted { .. }),
        "{:?}",
        facts.state
    );
    let facts = read(&workload(json!({"conditions": [
        evicted,
        condition("QuotaReserved", "False", "Pending", "insufficient quota", "2026-12-01T10:00:01Z"),
        condition("Requeued", "True", "Preempted", "", "2026-12-01T10:00:01Z")]})))
    .expect("reads");
    assert_eq!(
        facts.state,
        QueueState::Queued {
            reason: "Pending".into(),
            message: "insufficient quota".into()
        }
    );
}
