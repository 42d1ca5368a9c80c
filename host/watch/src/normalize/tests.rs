//! Normalizers against realistic status JSON, including odd and partial statuses.

use serde_json::{Value, json};

use super::*;
use crate::kinds::JobKind;

fn parse_rule(yaml: &str) -> Result<NormalizerSpec, serde_yaml_ng::Error> {
    serde_yaml_ng::with::singleton_map::deserialize(serde_yaml_ng::Deserializer::from_str(yaml))
}

fn kind(name: &str) -> NormalizerSpec {
    JobKind::builtin(name).expect("built-in kind").normalizer
}

fn norm(name: &str, object: Value) -> Normalized {
    normalize(&kind(name), &object)
}

fn cond(ty: &str, status: &str, reason: &str, at: &str) -> Value {
    json!({"type": ty, "status": status, "reason": reason, "message": format!("{ty} message"),
           "lastProbeTime": at, "lastTransitionTime": at})
}

// ---- batch/v1 Job ----

#[test]
fn batch_new_job_without_status_is_pending() {
    let n = norm("batch-job", json!({"metadata": {"name": "j"}, "spec": {}}));
    assert_eq!(n.phase, Phase::Pending);
    assert_eq!(n.raw_phase, "");
}

#[test]
fn batch_active_pods_mean_running_from_start_time() {
    let n = norm(
        "batch-job",
        json!({"status": {"active": 2, "ready": 2, "startTime": "2026-05-01T10:00:00Z"}}),
    );
    assert_eq!(n.phase, Phase::Running);
    assert_eq!(n.transition_time.as_deref(), Some("2026-05-01T10:00:00Z"));
}

#[test]
fn batch_complete_after_success_criteria_met() {
    let status = json!({"status": {
    "succeeded": 4, "active": 0, "completionTime": "2026-05-01T11:00:00Z",
    "conditions": [
        cond("SuccessCriteriaMet", "True", "CompletionsReached", "2026-05-01T10:59:00Z"),
        cond("Complete", "True", "CompletionsReached", "2026-05-01T11:00:00Z"),
    ]}});
    let n = norm("batch-job", status);
    assert_eq!(n.phase, Phase::Succeeded);
    assert_eq!(n.raw_phase, "Complete");
    assert_eq!(n.transition_time.as_deref(), Some("2026-05-01T11:00:00Z"));
    assert_eq!(n.reason.as_deref(), Some("CompletionsReached"));
}

#[test]
fn batch_success_criteria_met_alone_is_succeeded_with_raw_phase() {
    let n = norm(
        "batch-job",
        json!({"status": {"active": 1, "conditions": [
            cond("SuccessCriteriaMet", "True", "SuccessPolicy", "2026-05-01T10:59:00Z")]}}),
    );
    assert_eq!(n.phase, Phase::Succeeded);
    assert_eq!(n.raw_phase, "SuccessCriteriaMet");
}

#[test]
fn batch_failure_target_then_failed() {
    let target = json!({"status": {"active": 1, "failed": 3, "conditions": [
        cond("FailureTarget", "True", "BackoffLimitExceeded", "2026-05-01T10:30:00Z")]}});
    let n = norm("batch-job", target);
    assert_eq!(
        (n.phase, n.raw_phase.as_str()),
        (Phase::Failed, "FailureTarget")
    );

    let failed = json!({"status": {"failed": 4, "conditions": [
        cond("FailureTarget", "True", "BackoffLimitExceeded", "2026-05-01T10:30:00Z"),
        cond("Failed", "True", "BackoffLimitExceeded", "2026-05-01T10:30:05Z")]}});
    let n = norm("batch-job", failed);
    assert_eq!((n.phase, n.raw_phase.as_str()), (Phase::Failed, "Failed"));
    assert_eq!(n.message.as_deref(), Some("Failed message"));
}

#[test]
fn batch_failed_wins_over_complete_and_false_conditions_are_ignored() {
    let n = norm(
        "batch-job",
        json!({"status": {"conditions": [
            cond("Complete", "False", "", "2026-05-01T10:00:00Z"),
            cond("Failed", "True", "DeadlineExceeded", "2026-05-01T10:01:00Z")]}}),
    );
    assert_eq!(n.phase, Phase::Failed);
    let n = norm(
        "batch-job",
        json!({"status": {"active": 1, "conditions": [
            cond("Failed", "False", "", "2026-05-01T10:00:00Z")]}}),
    );
    assert_eq!(n.phase, Phase::Running);
}

#[test]
fn batch_suspended_and_resumed() {
    let n = norm(
        "batch-job",
        json!({"spec": {"suspend": true}, "status": {"conditions": [
            cond("Suspended", "True", "JobSuspended", "2026-05-01T10:00:00Z")]}}),
    );
    assert_eq!(n.phase, Phase::Suspended);
    let n = norm(
        "batch-job",
        json!({"status": {"active": 3, "conditions": [
            cond("Suspended", "False", "JobResumed", "2026-05-01T10:05:00Z")]}}),
    );
    assert_eq!(n.phase, Phase::Running);
}

#[test]
fn batch_odd_shapes_do_not_fail() {
    for odd in [
        json!({"status": null}),
        json!({"status": {"conditions": "not-a-list", "active": "two"}}),
        json!({"status": {"conditions": [42, {"type": 7}, {"status": "True"}]}}),
        json!([]),
    ] {
        let n = norm("batch-job", odd);
        assert_eq!(n.phase, Phase::Pending);
    }
}

// ---- Volcano ----

fn volcano_state(phase: &str) -> Value {
    json!({"status": {"state": {"phase": phase, "reason": "", "message": "",
        "lastTransitionTime": "2026-05-02T08:00:00Z"},
        "running": 4, "retryCount": 0, "version": 3,
        "conditions": [{"status": "Pending", "lastTransitionTime": "2026-05-02T07:59:00Z"},
                       {"status": phase, "lastTransitionTime": "2026-05-02T08:00:00Z"}]}})
}

#[test]
fn volcano_every_documented_phase() {
    let cases = [
        ("Pending", Phase::Pending),
        ("Running", Phase::Running),
        ("Restarting", Phase::Restarting),
        ("Completing", Phase::Running),
        ("Completed", Phase::Succeeded),
        ("Failed", Phase::Failed),
        ("Terminating", Phase::Running),
        ("Terminated", Phase::Failed),
        ("Aborting", Phase::Running),
        ("Aborted", Phase::Suspended),
    ];
    for (raw, phase) in cases {
        let n = norm("volcano-job", volcano_state(raw));
        assert_eq!(n.phase, phase, "volcano {raw}");
        assert_eq!(n.raw_phase, raw);
        assert_eq!(n.transition_time.as_deref(), Some("2026-05-02T08:00:00Z"));
        assert_eq!(n.reason, None, "empty reason is no reason");
    }
}

#[test]
fn volcano_reason_and_message_are_lifted() {
    let n = norm(
        "volcano-job",
        json!({"status": {"state": {"phase": "Restarting", "reason": "PodFailed",
            "message": "task worker-1 failed, restarting job"}}}),
    );
    assert_eq!(n.phase, Phase::Restarting);
    assert_eq!(n.reason.as_deref(), Some("PodFailed"));
    assert_eq!(
        n.message.as_deref(),
        Some("task worker-1 failed, restarting job")
    );
    assert_eq!(n.transition_time, None);
}

#[test]
fn volcano_partial_and_unknown() {
    assert_eq!(norm("volcano-job", json!({})).phase, Phase::Pending);
    assert_eq!(
        norm("volcano-job", json!({"status": {}})).phase,
        Phase::Pending
    );
    assert_eq!(
        norm("volcano-job", json!({"status": {"state": {"phase": ""}}})).phase,
        Phase::Pending
    );
    let n = norm(
        "volcano-job",
        json!({"status": {"state": {"phase": "Hibernating"}}}),
    );
    assert_eq!(
        (n.phase, n.raw_phase.as_str()),
        (Phase::Unknown, "Hibernating")
    );
    assert_eq!(
        norm("volcano-job", json!({"status": {"state": {"phase": 3}}})).phase,
        Phase::Pending
    );
}

// ---- Kubeflow PyTorchJob / MPIJob ----

#[test]
fn kubeflow_lifecycle_of_a_pytorch_job() {
    let created = json!({"status": {"conditions": [
        cond("Created", "True", "PyTorchJobCreated", "2026-05-03T09:00:00Z")]}});
    assert_eq!(norm("pytorch-job", created).phase, Phase::Pending);

    let running = json!({"status": {"replicaStatuses": {"Master": {"active": 1}, "Worker": {"active": 3}},
        "conditions": [
        cond("Created", "True", "PyTorchJobCreated", "2026-05-03T09:00:00Z"),
        cond("Running", "True", "PyTorchJobRunning", "2026-05-03T09:01:00Z")]}});
    let n = norm("pytorch-job", running);
    assert_eq!((n.phase, n.raw_phase.as_str()), (Phase::Running, "Running"));
    assert_eq!(n.transition_time.as_deref(), Some("2026-05-03T09:01:00Z"));

    let restarting = json!({"status": {"conditions": [
        cond("Created", "True", "PyTorchJobCreated", "2026-05-03T09:00:00Z"),
        cond("Running", "False", "PyTorchJobRestarting", "2026-05-03T09:10:00Z"),
        cond("Restarting", "True", "PyTorchJobRestarting", "2026-05-03T09:10:00Z")]}});
    assert_eq!(norm("pytorch-job", restarting).phase, Phase::Restarting);

    let succeeded = json!({"status": {"completionTime": "2026-05-03T10:00:00Z", "conditions": [
        cond("Created", "True", "PyTorchJobCreated", "2026-05-03T09:00:00Z"),
        cond("Running", "False", "PyTorchJobSucceeded", "2026-05-03T10:00:00Z"),
        cond("Succeeded", "True", "PyTorchJobSucceeded", "2026-05-03T10:00:00Z")]}});
    let n = norm("pytorch-job", succeeded);
    assert_eq!(n.phase, Phase::Succeeded);
    assert_eq!(n.reason.as_deref(), Some("PyTorchJobSucceeded"));
}

#[test]
fn kubeflow_precedence_failed_beats_everything() {
    // An operator that left Running=True next to Failed=True (seen with older versions).
    let n = norm(
        "mpi-job",
        json!({"status": {"conditions": [
            cond("Running", "True", "MPIJobRunning", "2026-05-03T09:01:00Z"),
            cond("Succeeded", "True", "MPIJobSucceeded", "2026-05-03T09:02:00Z"),
            cond("Failed", "True", "MPIJobFailed", "2026-05-03T09:03:00Z")]}}),
    );
    assert_eq!(n.phase, Phase::Failed);
    let n = norm(
        "mpi-job",
        json!({"status": {"conditions": [
            cond("Running", "True", "MPIJobRunning", "2026-05-03T09:01:00Z"),
            cond("Suspended", "True", "MPIJobSuspended", "2026-05-03T09:05:00Z")]}}),
    );
    assert_eq!(n.phase, Phase::Suspended);
}

#[test]
fn kubeflow_no_true_condition_is_unknown_and_no_conditions_pending() {
    let n = norm(
        "pytorch-job",
        json!({"status": {"conditions": [cond("Running", "False", "", "2026-05-03T09:01:00Z")]}}),
    );
    assert_eq!(n.phase, Phase::Unknown);
    assert_eq!(
        norm("pytorch-job", json!({"status": {"conditions": []}})).phase,
        Phase::Pending
    );
    assert_eq!(norm("mpi-job", json!({"status": {}})).phase, Phase::Pending);
}

// ---- deletion ----

#[test]
fn deletion_timestamp_means_terminating_for_every_kind() {
    for name in JobKind::DEFAULT_BUILTINS {
        let n = norm(
            name,
            json!({"metadata": {"deletionTimestamp": "2026-05-04T00:00:00Z", "finalizers": ["x"]},
                   "status": {"state": {"phase": "Running"}, "active": 1}}),
        );
        assert_eq!(n.phase, Phase::Terminating, "{name}");
        assert_eq!(n.transition_time.as_deref(), Some("2026-05-04T00:00:00Z"));
    }
}

// ---- generic rules for CRDs given as data ----

#[test]
fn field_rule_maps_a_custom_phase() {
    let spec: NormalizerSpec = parse_rule(
        "field:\n  path: /status/phase\n  phases: {Queued: pending, Training: running, Done: succeeded}\n  reason_path: /status/reason\n",
    )
    .expect("valid rule");
    let n = normalize(
        &spec,
        &json!({"status": {"phase": "Training", "reason": "Started"}}),
    );
    assert_eq!(n.phase, Phase::Running);
    assert_eq!(n.reason.as_deref(), Some("Started"));
    assert_eq!(
        normalize(&spec, &json!({"status": {"phase": "Exploded"}})).phase,
        Phase::Unknown
    );
    assert_eq!(normalize(&spec, &json!({})).phase, Phase::Pending);
}

#[test]
fn conditions_rule_uses_the_listed_order() {
    let spec: NormalizerSpec = parse_rule(
        "conditions:\n  - {type: Broken, phase: failed}\n  - {type: Ready, phase: running}\n",
    )
    .expect("valid rule");
    let obj = json!({"status": {"conditions": [
        cond("Ready", "True", "", "2026-01-01T00:00:00Z"),
        cond("Broken", "True", "Oops", "2026-01-01T00:01:00Z")]}});
    let n = normalize(&spec, &obj);
    assert_eq!((n.phase, n.raw_phase.as_str()), (Phase::Failed, "Broken"));
}

#[test]
fn builtin_named_kinds_parse_from_yaml_by_name() {
    let spec: NormalizerSpec = parse_rule("volcano").expect("unit variant");
    assert_eq!(spec, NormalizerSpec::Volcano);
}
