//! Catch-up against status JSON shaped like the controllers (and the test kit's drivers) write
//! it, including odd and partial statuses.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::*;
use crate::kinds::JobKind;

fn kind(name: &str) -> NormalizerSpec {
    JobKind::builtin(name).expect("built-in kind").normalizer
}

fn parse_rule(yaml: &str) -> NormalizerSpec {
    serde_yaml_ng::with::singleton_map::deserialize(serde_yaml_ng::Deserializer::from_str(yaml))
        .expect("valid rule")
}

/// `2026-05-02T08:00:0<s>Z`: one second per step, like the kit's clock.
fn t(s: u32) -> String {
    format!("2026-05-02T08:00:{s:02}Z")
}

/// (phase, raw, at) of each missed transition.
fn summary(missed: &[MissedTransition]) -> Vec<(Phase, &str, &str)> {
    missed
        .iter()
        .map(|m| (m.phase, m.raw_phase.as_str(), m.at.as_str()))
        .collect()
}

fn missed(name: &str, object: &Value, last: Phase, at: &str) -> Vec<MissedTransition> {
    missed_transitions(&kind(name), object, last, Some(at))
}

// ---- Volcano ----

/// A Volcano job whose controller moved it through `phases` (raw phase, time), appending one
/// `status.conditions` entry per change, as `syncJob` and the kit's driver do.
fn volcano_job(phases: &[(&str, String)]) -> Value {
    let (phase, at) = phases.last().cloned().unwrap_or_default();
    let conditions: Vec<Value> = phases
        .iter()
        .map(|(p, at)| json!({"status": p, "lastTransitionTime": at}))
        .collect();
    json!({
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": "train", "namespace": "ml", "uid": "u-1", "resourceVersion": "1234"},
        "status": {
            "state": {"phase": phase, "reason": "", "message": "", "lastTransitionTime": at},
            "minAvailable": 3, "pending": 0, "running": 0, "succeeded": 3, "failed": 0,
            "terminating": 0, "unknown": 0, "version": 0, "retryCount": 0,
            "conditions": conditions,
        }
    })
}

#[test]
fn volcano_pending_running_completed_seen_at_completed() {
    // The kit's `succeeded` goes through Completing first.
    let job = volcano_job(&[
        ("Pending", t(1)),
        ("Running", t(2)),
        ("Completing", t(3)),
        ("Completed", t(4)),
    ]);
    let m = missed("volcano-job", &job, Phase::Pending, &t(1));
    // Completing is running to the normalizer, so it folds into the Running entry.
    assert_eq!(summary(&m), [(Phase::Running, "Running", t(2).as_str())]);
    assert_eq!(m[0].ordinal, 1);
    assert_eq!(
        (m[0].reason.as_deref(), m[0].message.as_deref()),
        (None, None)
    );
}

#[test]
fn volcano_restart_cycle_seen_at_failed() {
    let job = volcano_job(&[
        ("Pending", t(1)),
        ("Running", t(2)),
        ("Restarting", t(3)),
        ("Running", t(4)),
        ("Failed", t(5)),
    ]);
    let m = missed("volcano-job", &job, Phase::Running, &t(2));
    assert_eq!(
        summary(&m),
        [
            (Phase::Restarting, "Restarting", t(3).as_str()),
            (Phase::Running, "Running", t(4).as_str()),
        ]
    );
    assert_eq!(m.iter().map(|m| m.ordinal).collect::<Vec<_>>(), [2, 3]);

    // Seen from pending, the whole run is rebuilt.
    let m = missed("volcano-job", &job, Phase::Pending, &t(1));
    let phases: Vec<Phase> = m.iter().map(|m| m.phase).collect();
    assert_eq!(phases, [Phase::Running, Phase::Restarting, Phase::Running]);
}

#[test]
fn volcano_one_entry_per_phase_loses_the_earlier_visit() {
    // What a writer merging by the patchMergeKey (`status`) would leave: Running updated in
    // place to its latest time. Volcano itself appends; this documents the fallback.
    let mut job = volcano_job(&[("Failed", t(5))]);
    job["status"]["conditions"] = json!([
        {"status": "Pending", "lastTransitionTime": t(1)},
        {"status": "Running", "lastTransitionTime": t(4)},
        {"status": "Restarting", "lastTransitionTime": t(3)},
        {"status": "Failed", "lastTransitionTime": t(5)},
    ]);
    // The first Running was delivered: nothing is lost.
    let m = missed("volcano-job", &job, Phase::Running, &t(2));
    let phases: Vec<Phase> = m.iter().map(|m| m.phase).collect();
    assert_eq!(phases, [Phase::Restarting, Phase::Running]);
    // Seen from pending, the first Running has no time left: it is missing, not invented.
    let m = missed("volcano-job", &job, Phase::Pending, &t(1));
    assert_eq!(
        summary(&m),
        [
            (Phase::Restarting, "Restarting", t(3).as_str()),
            (Phase::Running, "Running", t(4).as_str()),
        ]
    );
}

#[test]
fn volcano_entries_out_of_order_are_sorted_by_time() {
    let mut job = volcano_job(&[("Completed", t(9))]);
    job["status"]["conditions"] = json!([
        {"status": "Completed", "lastTransitionTime": t(9)},
        {"status": "Running", "lastTransitionTime": t(5)},
        {"status": "Pending", "lastTransitionTime": t(1)},
        {"status": "Restarting", "lastTransitionTime": t(3)},
    ]);
    let m = missed("volcano-job", &job, Phase::Pending, &t(1));
    let phases: Vec<Phase> = m.iter().map(|m| m.phase).collect();
    assert_eq!(phases, [Phase::Restarting, Phase::Running]);
}

#[test]
fn volcano_same_second_transitions_follow_array_order() {
    // Restarting and back to Running within one second, then Failed.
    let job = volcano_job(&[
        ("Pending", t(1)),
        ("Running", t(2)),
        ("Restarting", t(3)),
        ("Running", t(3)),
        ("Failed", t(4)),
    ]);
    // Cursor on a synthetic restarting at t3: the Running after it in the same second is
    // still missed.
    let m = missed("volcano-job", &job, Phase::Restarting, &t(3));
    assert_eq!(summary(&m), [(Phase::Running, "Running", t(3).as_str())]);
    // Cursor on that Running: nothing left before Failed.
    assert!(missed("volcano-job", &job, Phase::Running, &t(3)).is_empty());
    // A cursor at t3 whose phase is not among the t3 entries cannot place itself among them
    // (its time was jobrelay's clock): they are delivered, again at worst, not lost.
    let m = missed("volcano-job", &job, Phase::Pending, &t(3));
    assert_eq!(
        summary(&m),
        [
            (Phase::Restarting, "Restarting", t(3).as_str()),
            (Phase::Running, "Running", t(3).as_str()),
        ]
    );
}

#[test]
fn a_phase_entered_twice_in_the_cursors_second_counts_from_the_first() {
    // Running, restarting and running again within t3: a cursor on running at t3 may be the
    // first or the second. What follows the first is delivered (again, at worst, under the
    // same keys: the second running is `#2` live and rebuilt), never lost.
    let job = volcano_job(&[
        ("Pending", t(1)),
        ("Running", t(3)),
        ("Restarting", t(3)),
        ("Running", t(3)),
        ("Failed", t(4)),
    ]);
    let m = missed("volcano-job", &job, Phase::Running, &t(3));
    assert_eq!(
        summary(&m),
        [
            (Phase::Restarting, "Restarting", t(3).as_str()),
            (Phase::Running, "Running", t(3).as_str()),
        ]
    );
    assert_eq!(m.iter().map(|m| m.n).collect::<Vec<_>>(), [1, 2]);
}

/// The case a generated life found: the job's running status is rewritten (a new Running
/// entry, the state time moved on to t6) and in that same second it is suspended, resumed and
/// runs again. A cursor on the rewrite (running at t6, its stay entered at t3) is the rewrite's
/// entry, not the later running of t6: the stays between are missed, not taken as delivered.
#[test]
fn a_cursor_on_a_rewritten_stay_is_not_a_later_stay_of_its_second() {
    let job = volcano_job(&[
        ("Pending", t(1)),
        ("Running", t(3)),
        ("Running", t(6)),
        ("Aborting", t(6)),
        ("Aborted", t(6)),
        ("Restarting", t(6)),
        ("Running", t(6)),
        ("Failed", t(7)),
    ]);
    let m = missed("volcano-job", &job, Phase::Running, &t(6));
    assert_eq!(
        summary(&m),
        [
            (Phase::Suspended, "Aborted", t(6).as_str()),
            (Phase::Restarting, "Restarting", t(6).as_str()),
            (Phase::Running, "Running", t(6).as_str()),
        ]
    );
    // The same from the stay's own entry time, as a rebuilt cursor keeps it.
    assert_eq!(missed("volcano-job", &job, Phase::Running, &t(3)), m);
}

#[test]
fn volcano_abort_is_two_steps_and_aborting_folds_into_running() {
    let job = volcano_job(&[
        ("Pending", t(1)),
        ("Running", t(2)),
        ("Aborting", t(3)),
        ("Aborted", t(4)),
    ]);
    assert!(missed("volcano-job", &job, Phase::Running, &t(2)).is_empty());
    let m = missed("volcano-job", &job, Phase::Pending, &t(1));
    assert_eq!(summary(&m), [(Phase::Running, "Running", t(2).as_str())]);
}

#[test]
fn volcano_finished_then_deleted_gives_the_terminal_phase() {
    let mut job = volcano_job(&[
        ("Pending", t(1)),
        ("Running", t(2)),
        ("Completing", t(3)),
        ("Completed", t(4)),
    ]);
    job["metadata"]["deletionTimestamp"] = json!(t(6));
    job["metadata"]["finalizers"] = json!(["jobrelay.dev/delivery"]);
    let m = missed("volcano-job", &job, Phase::Running, &t(2));
    assert_eq!(
        summary(&m),
        [(Phase::Succeeded, "Completed", t(4).as_str())]
    );
}

/// The deletion timestamp is the API server's clock, the status times the controller's: a job
/// deleted a moment after it finished may read as deleted "before" its finish when the clocks
/// disagree. Its outcome is still rebuilt, for a cursor and for a first sight.
#[test]
fn a_deletion_stamped_before_the_finish_by_a_skewed_clock_keeps_the_outcome() {
    let mut job = volcano_job(&[("Pending", t(1)), ("Running", t(2)), ("Completed", t(5))]);
    job["metadata"]["deletionTimestamp"] = json!(t(4));
    let m = missed("volcano-job", &job, Phase::Running, &t(2));
    assert_eq!(
        summary(&m),
        [(Phase::Succeeded, "Completed", t(5).as_str())]
    );
    let all = recorded_transitions(&kind("volcano-job"), &job);
    assert_eq!(
        all.iter().map(|m| m.phase).collect::<Vec<_>>(),
        [Phase::Pending, Phase::Running, Phase::Succeeded]
    );
}

#[test]
fn consecutive_duplicates_fold_into_the_first() {
    // Older Volcano appends an entry even when the phase did not change.
    let job = volcano_job(&[
        ("Pending", t(1)),
        ("Pending", t(2)),
        ("Running", t(3)),
        ("Running", t(4)),
        ("Completing", t(5)),
        ("Completed", t(6)),
    ]);
    let m = missed("volcano-job", &job, Phase::Pending, &t(1));
    assert_eq!(summary(&m), [(Phase::Running, "Running", t(3).as_str())]);
    // A cursor inside a folded run: its later duplicates are not re-sent.
    assert!(missed("volcano-job", &job, Phase::Running, &t(4)).is_empty());
}

// ---- Kubeflow ----

/// A condition as training-operator / mpi-operator write it.
fn kf(kind: &str, ty: &str, status: &str, at: &str, what: &str) -> Value {
    json!({"type": ty, "status": status,
           "reason": format!("{kind}{ty}"), "message": format!("{kind} ml/train {what}"),
           "lastUpdateTime": at, "lastTransitionTime": at})
}

fn kubeflow_job(kind: &str, conditions: Vec<Value>, extra: Value) -> Value {
    let mut status = json!({
        "conditions": conditions,
        "replicaStatuses": {"Master": {"succeeded": 1}, "Worker": {"succeeded": 2}},
        "startTime": t(2),
        "lastReconcileTime": t(9),
    });
    if let (Some(s), Some(e)) = (status.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    json!({"apiVersion": "kubeflow.org/v1", "kind": kind,
           "metadata": {"name": "train", "namespace": "ml", "uid": "u-2"},
           "status": status})
}

#[test]
fn pytorch_created_running_succeeded_seen_at_succeeded() {
    // Running flipped to False on success, keeping the time it became True.
    let job = kubeflow_job(
        "PyTorchJob",
        vec![
            kf("PyTorchJob", "Created", "True", &t(1), "is created."),
            kf("PyTorchJob", "Running", "False", &t(2), "is running."),
            kf(
                "PyTorchJob",
                "Succeeded",
                "True",
                &t(5),
                "successfully completed.",
            ),
        ],
        json!({"completionTime": t(5)}),
    );
    let m = missed("pytorch-job", &job, Phase::Pending, &t(1));
    assert_eq!(summary(&m), [(Phase::Running, "Running", t(2).as_str())]);
    assert_eq!(m[0].reason, None, "the flip's reason is not the start's");
    assert!(missed("pytorch-job", &job, Phase::Running, &t(2)).is_empty());
}

#[test]
fn pytorch_running_flipped_at_the_end_time_is_placed_before_the_terminal() {
    // An operator that stamps the flip time: Running's start is lost, only bounded.
    let mut running = kf("PyTorchJob", "Running", "False", &t(5), "is running.");
    running["reason"] = json!("PyTorchJobSucceeded");
    let job = kubeflow_job(
        "PyTorchJob",
        vec![
            kf("PyTorchJob", "Created", "True", &t(1), "is created."),
            running,
            kf(
                "PyTorchJob",
                "Succeeded",
                "True",
                &t(5),
                "successfully completed.",
            ),
        ],
        json!({}),
    );
    let m = missed("pytorch-job", &job, Phase::Pending, &t(1));
    assert_eq!(summary(&m), [(Phase::Running, "Running", t(5).as_str())]);
}

#[test]
fn pytorch_seen_while_running_after_creation() {
    let job = kubeflow_job(
        "PyTorchJob",
        vec![
            kf("PyTorchJob", "Created", "True", &t(1), "is created."),
            kf("PyTorchJob", "Running", "True", &t(3), "is running."),
        ],
        json!({}),
    );
    // Pending delivered, Running is the current phase: nothing in between.
    assert!(missed("pytorch-job", &job, Phase::Pending, &t(1)).is_empty());
    // Cursor before creation was recorded (e.g. a restart's own clock): Created is missed.
    let m = missed(
        "pytorch-job",
        &job,
        Phase::Suspended,
        "2026-05-02T07:59:00Z",
    );
    assert_eq!(summary(&m), [(Phase::Pending, "Created", t(1).as_str())]);
    assert_eq!(m[0].reason.as_deref(), Some("PyTorchJobCreated"));
    assert_eq!(
        m[0].message.as_deref(),
        Some("PyTorchJob ml/train is created.")
    );
}

#[test]
fn mpi_running_restarting_running_failed_loses_the_restart() {
    // Restarting and Running replace each other: after the job came back, the Restarting
    // entry is gone and Running carries the re-entry time (t4); Failed then flips it.
    let job = kubeflow_job(
        "MPIJob",
        vec![
            kf("MPIJob", "Created", "True", &t(1), "is created."),
            kf("MPIJob", "Running", "False", &t(4), "is running."),
            kf("MPIJob", "Failed", "True", &t(5), "has failed."),
        ],
        json!({"completionTime": t(5)}),
    );
    // Last delivered running (t2): the restart left no trace, nothing to catch up.
    assert!(missed("mpi-job", &job, Phase::Running, &t(2)).is_empty());
    // From pending, only the latest Running is known.
    let m = missed("mpi-job", &job, Phase::Pending, &t(1));
    assert_eq!(summary(&m), [(Phase::Running, "Running", t(4).as_str())]);
}

#[test]
fn mpi_restarting_then_failed_keeps_the_restart() {
    let job = kubeflow_job(
        "MPIJob",
        vec![
            kf("MPIJob", "Created", "True", &t(1), "is created."),
            kf(
                "MPIJob",
                "Restarting",
                "True",
                &t(3),
                "is restarting because 1 Launcher replica(s) failed.",
            ),
            kf("MPIJob", "Failed", "True", &t(5), "has failed."),
        ],
        json!({}),
    );
    let m = missed("mpi-job", &job, Phase::Running, &t(2));
    assert_eq!(
        summary(&m),
        [(Phase::Restarting, "Restarting", t(3).as_str())]
    );
    assert_eq!(m[0].reason.as_deref(), Some("MPIJobRestarting"));
}

#[test]
fn kubeflow_suspension_is_not_proof_of_running() {
    // Suspended before it ever ran: the operator still writes Running=False (…Suspended).
    let mut running = kf("PyTorchJob", "Running", "False", &t(2), "is suspended.");
    running["reason"] = json!("PyTorchJobSuspended");
    let job = kubeflow_job(
        "PyTorchJob",
        vec![
            kf("PyTorchJob", "Created", "True", &t(1), "is created."),
            kf("PyTorchJob", "Suspended", "True", &t(2), "is suspended."),
            running,
        ],
        json!({}),
    );
    assert!(missed("pytorch-job", &job, Phase::Pending, &t(1)).is_empty());
}

#[test]
fn kubeflow_tables_agree_with_the_normalizer() {
    let spec = kind("pytorch-job");
    for (ty, phase) in KUBEFLOW_LIFECYCLE {
        let one = json!({"status": {"conditions": [kf("X", ty, "True", &t(1), "")]}});
        assert_eq!(normalize(&spec, &one).phase, phase, "{ty}");
    }
    // Precedence is the lifecycle backwards: of two true conditions, the later type wins.
    for (i, (a, _)) in KUBEFLOW_LIFECYCLE.iter().enumerate() {
        for (b, phase_b) in &KUBEFLOW_LIFECYCLE[i + 1..] {
            let both = json!({"status": {"conditions": [
                kf("X", a, "True", &t(1), ""), kf("X", b, "True", &t(1), "")]}});
            assert_eq!(normalize(&spec, &both).phase, *phase_b, "{a} vs {b}");
        }
    }
}

// ---- batch/v1 Job ----

fn batch_cond(ty: &str, reason: &str, message: &str, at: &str) -> Value {
    json!({"type": ty, "status": "True", "reason": reason, "message": message,
           "lastProbeTime": at, "lastTransitionTime": at})
}

#[test]
fn batch_pending_running_complete_seen_at_complete() {
    // What the job controller (and the kit) leave after success.
    let job = json!({"apiVersion": "batch/v1", "kind": "Job",
    "metadata": {"name": "train", "namespace": "ml"},
    "status": {
        "ready": 0, "terminating": 0, "succeeded": 4, "uncountedTerminatedPods": {},
        "startTime": t(2), "completionTime": t(4),
        "conditions": [
            batch_cond("SuccessCriteriaMet", "CompletionsReached",
                       "Reached expected number of succeeded pods", &t(3)),
            batch_cond("Complete", "CompletionsReached",
                       "Reached expected number of succeeded pods", &t(4)),
        ]}});
    let m = missed("batch-job", &job, Phase::Pending, &t(1));
    assert_eq!(summary(&m), [(Phase::Running, "Active", t(2).as_str())]);
    assert!(missed("batch-job", &job, Phase::Running, &t(2)).is_empty());
    // Cursor on SuccessCriteriaMet (already succeeded): Complete is the real event.
    assert!(missed("batch-job", &job, Phase::Succeeded, &t(3)).is_empty());
}

#[test]
fn batch_failure_target_then_failed() {
    let msg = "Job has reached the specified backoff limit";
    let job = json!({"status": {
    "ready": 0, "failed": 4, "startTime": t(2),
    "conditions": [
        batch_cond("FailureTarget", "BackoffLimitExceeded", msg, &t(6)),
        batch_cond("Failed", "BackoffLimitExceeded", msg, &t(7)),
    ]}});
    let m = missed("batch-job", &job, Phase::Pending, &t(1));
    assert_eq!(summary(&m), [(Phase::Running, "Active", t(2).as_str())]);
    assert!(missed("batch-job", &job, Phase::Running, &t(2)).is_empty());
}

#[test]
fn batch_suspended_while_unseen() {
    // Suspended (pods gone, startTime cleared) and then deleted: the suspension is missed.
    let job = json!({"metadata": {"deletionTimestamp": t(8)},
        "spec": {"suspend": true},
        "status": {"ready": 0, "failed": 1, "conditions": [
            batch_cond("Suspended", "JobSuspended", "Job suspended", &t(5))]}});
    let m = missed("batch-job", &job, Phase::Running, &t(2));
    assert_eq!(
        summary(&m),
        [(Phase::Suspended, "Suspended", t(5).as_str())]
    );
    assert_eq!(m[0].reason.as_deref(), Some("JobSuspended"));
}

#[test]
fn batch_resumed_and_completed_starts_again_at_the_new_start_time() {
    let mut resumed = batch_cond("Suspended", "JobResumed", "Job resumed", &t(3));
    resumed["status"] = json!("False");
    let job = json!({"status": {
        "succeeded": 2, "startTime": t(3), "completionTime": t(6),
        "conditions": [resumed,
            batch_cond("SuccessCriteriaMet", "CompletionsReached", "", &t(5)),
            batch_cond("Complete", "CompletionsReached", "", &t(6))]}});
    let m = missed("batch-job", &job, Phase::Suspended, &t(1));
    assert_eq!(summary(&m), [(Phase::Running, "Active", t(3).as_str())]);
}

#[test]
fn batch_start_time_without_pods_is_not_running() {
    let job = json!({"status": {"startTime": t(2), "ready": 0, "conditions": [
        batch_cond("Failed", "DeadlineExceeded", "", &t(4))]}});
    assert!(missed("batch-job", &job, Phase::Pending, &t(1)).is_empty());
}

#[test]
fn batch_table_agrees_with_the_normalizer() {
    let spec = kind("batch-job");
    for (ty, phase, _) in BATCH_CONDITIONS {
        let one = json!({"status": {"conditions": [batch_cond(ty, "", "", &t(1))]}});
        assert_eq!(normalize(&spec, &one).phase, phase, "{ty}");
    }
}

// ---- generic rules ----

#[test]
fn conditions_rule_rebuilds_true_conditions() {
    let spec = parse_rule(
        "conditions:\n  - {type: Broken, phase: failed}\n  - {type: Done, phase: succeeded}\n  - {type: Ready, phase: running}\n  - {type: Queued, phase: pending}\n",
    );
    let job = json!({"status": {"conditions": [
        batch_cond("Queued", "Admitted", "", &t(1)),
        batch_cond("Ready", "AllUp", "all replicas ready", &t(2)),
        batch_cond("Done", "Finished", "", &t(4)),
    ]}});
    let m = missed_transitions(&spec, &job, Phase::Pending, Some(&t(1)));
    assert_eq!(summary(&m), [(Phase::Running, "Ready", t(2).as_str())]);
    assert_eq!(m[0].message.as_deref(), Some("all replicas ready"));

    // Same second, both still true: the status reads as the first rule's phase alone, and
    // no stay is made for the other (it may never have been seen on its own).
    let tie = json!({"status": {"conditions": [
        batch_cond("Done", "", "", &t(2)), batch_cond("Ready", "", "", &t(2))]}});
    let m = missed_transitions(&spec, &tie, Phase::Pending, Some(&t(1)));
    assert!(m.is_empty(), "{m:?}");
    // A second apart, both are stays.
    let apart = json!({"status": {"conditions": [
        batch_cond("Done", "", "", &t(3)), batch_cond("Ready", "", "", &t(2))]}});
    let m = missed_transitions(&spec, &apart, Phase::Pending, Some(&t(1)));
    assert_eq!(summary(&m), [(Phase::Running, "Ready", t(2).as_str())]);
}

/// The JobSet restart seen after a gap: `RestartingJobSet` and `StartupPolicyInProgress` set
/// in one write are one restarting stay, never a pending stay before it.
#[test]
fn two_conditions_set_in_one_second_are_one_stay() {
    let jobset = kind("jobset");
    let cond = |ty: &str, status: &str, at: &str| json!({"type": ty, "status": status, "reason": "R", "lastTransitionTime": at});
    let restarting = json!({"status": {"restarts": 1, "conditions": [
        cond("StartupPolicyInProgress", "True", &t(5)),
        cond("StartupPolicyCompleted", "False", &t(5)),
        cond("RestartingJobSet", "True", &t(5)),
    ]}});
    assert_eq!(normalize(&jobset, &restarting).phase, Phase::Restarting);
    assert!(missed("jobset", &restarting, Phase::Running, &t(2)).is_empty());
    // Written as a user would in the conditions language, the same.
    let described = parse_rule(
        "conditions:\n  - {type: Failed, phase: failed}\n  - {type: Completed, phase: succeeded}\n  - {type: Suspended, phase: suspended}\n  - {type: RestartingJobSet, phase: restarting}\n  - {type: StartupPolicyInProgress, phase: pending}\n  - {type: StartupPolicyCompleted, phase: running}\n",
    );
    assert!(missed_transitions(&described, &restarting, Phase::Running, Some(&t(2))).is_empty());
}

#[test]
fn entries_after_the_current_phase_are_dropped() {
    // Broken (t1) decides by precedence; a later Ready cannot be delivered before it.
    let spec = parse_rule(
        "conditions:\n  - {type: Broken, phase: failed}\n  - {type: Ready, phase: running}\n",
    );
    let job = json!({"status": {"conditions": [
        batch_cond("Broken", "Oops", "", &t(1)), batch_cond("Ready", "", "", &t(2))]}});
    assert!(missed_transitions(&spec, &job, Phase::Pending, Some(&t(0))).is_empty());
}

#[test]
fn field_rule_has_no_history() {
    let spec = parse_rule(
        "field:\n  path: /status/phase\n  phases: {Queued: pending, Training: running, Done: succeeded}\n  time_path: /status/since\n",
    );
    let job = json!({"status": {"phase": "Done", "since": t(5),
        "conditions": [batch_cond("Training", "", "", &t(2))]}});
    assert!(missed_transitions(&spec, &job, Phase::Pending, Some(&t(1))).is_empty());
}

/// Which versions skip the catch-up: the same phase at the same time, except for Volcano,
/// whose entries are read (but `terminating` is one stay); a field rule's same phase always;
/// another phase never.
#[test]
fn a_stay_is_taken_as_unchanged_only_where_the_status_could_tell_no_more() {
    let field = parse_rule("field:\n  path: /status/phase\n  phases: {Training: running}\n");
    let (running, terminating) = (Phase::Running, Phase::Terminating);
    let cases = [
        (kind("volcano-job"), running, 3, running, 3, false),
        (kind("volcano-job"), running, 3, running, 5, false),
        (kind("volcano-job"), terminating, 3, terminating, 3, true),
        (kind("pytorch-job"), running, 3, running, 3, true),
        (kind("pytorch-job"), running, 3, running, 5, false),
        (kind("batch-job"), running, 3, running, 3, true),
        (kind("batch-job"), running, 3, Phase::Suspended, 3, false),
        (field.clone(), running, 3, running, 5, true),
        (field, Phase::Pending, 3, running, 3, false),
    ];
    for (spec, last_phase, last_at, phase, at, unchanged) in cases {
        assert_eq!(
            stay_unchanged(&spec, (last_phase, &t(last_at)), (phase, &t(at))),
            unchanged,
            "{spec:?}: {last_phase}@{last_at} then {phase}@{at}"
        );
    }
}

// ---- cursors and odd input ----

#[test]
fn nothing_after_the_cursor_means_nothing() {
    let volcano = volcano_job(&[("Pending", t(1)), ("Running", t(2)), ("Failed", t(3))]);
    let pytorch = kubeflow_job(
        "PyTorchJob",
        vec![
            kf("PyTorchJob", "Created", "True", &t(1), "is created."),
            kf("PyTorchJob", "Running", "False", &t(2), "is running."),
            kf("PyTorchJob", "Failed", "True", &t(3), "has failed."),
        ],
        json!({}),
    );
    let batch = json!({"status": {"failed": 1, "startTime": t(2), "conditions": [
        batch_cond("Failed", "BackoffLimitExceeded", "", &t(3))]}});
    for (name, job) in [
        ("volcano-job", &volcano),
        ("pytorch-job", &pytorch),
        ("batch-job", &batch),
    ] {
        for last in [Phase::Pending, Phase::Running, Phase::Failed] {
            let later = "2026-05-02T09:00:00Z";
            assert!(missed(name, job, last, later).is_empty(), "{name} {last}");
            // No cursor time: first sight of the job, not a gap.
            assert!(missed_transitions(&kind(name), job, last, None).is_empty());
            // An unreadable cursor time gives nothing rather than a guess.
            assert!(missed(name, job, last, "yesterday").is_empty());
        }
        // Sanity: the same job does have something to catch up from an early cursor.
        assert!(
            !missed(name, job, Phase::Pending, &t(1)).is_empty(),
            "{name}"
        );
    }
}

#[test]
fn times_compare_as_instants_across_offsets_and_fractions() {
    let job = volcano_job(&[
        ("Pending", "2026-05-02T10:00:00+02:00".into()),
        ("Running", "2026-05-02T08:00:01.500Z".into()),
        ("Completed", "2026-05-02T08:00:09Z".into()),
    ]);
    let m = missed("volcano-job", &job, Phase::Pending, "2026-05-02T08:00:01Z");
    assert_eq!(
        summary(&m),
        [(Phase::Running, "Running", "2026-05-02T08:00:01.500Z")]
    );
}

#[test]
fn odd_and_partial_statuses_give_nothing() {
    let odd = [
        json!(null),
        json!([]),
        json!({}),
        json!({"status": null}),
        json!({"status": "Running"}),
        json!({"status": {"conditions": "not-a-list", "startTime": 7, "active": "two"}}),
        json!({"status": {"conditions": {"status": "Running"}}}),
        json!({"status": {"conditions": [42, null, [], "Running", {"type": 7}, {"status": "True"}]}}),
        json!({"status": {"conditions": [
            {"type": "Running", "status": "True"},
            {"type": "Running", "status": "True", "lastTransitionTime": "yesterday"},
            {"type": "Running", "status": "False", "lastTransitionTime": 1714636800},
            {"status": "Running"},
            {"status": "Running", "lastTransitionTime": ""},
            {"status": "", "lastTransitionTime": t(3)},
            {"status": 3, "lastTransitionTime": t(3)}]}}),
        json!({"status": {"active": 2, "startTime": "not a time"}}),
        json!({"metadata": {"deletionTimestamp": "soon"}, "status": {"state": {"phase": 9}}}),
    ];
    let conditions = parse_rule("conditions:\n  - {type: Running, phase: running}\n");
    for spec in [
        kind("volcano-job"),
        kind("pytorch-job"),
        kind("batch-job"),
        conditions,
    ] {
        for object in &odd {
            for last in [Phase::Pending, Phase::Unknown] {
                let m = missed_transitions(&spec, object, last, Some(&t(1)));
                assert!(m.is_empty(), "{spec:?} {object} -> {m:?}");
            }
        }
    }
}

// ---- synthetic events ----

fn current_event(object: &Value) -> JobEvent {
    JobEvent {
        id: JobEvent::make_id("prod", "u-1", "1234"),
        cluster: "prod".into(),
        api_version: "batch.volcano.sh/v1alpha1".into(),
        kind: "Job".into(),
        namespace: "ml".into(),
        name: "train".into(),
        uid: "u-1".into(),
        resource_version: "1234".into(),
        generation: Some(1),
        phase: Phase::Failed,
        raw_phase: "Failed".into(),
        reason: Some("PodFailed".into()),
        message: Some("Task master-0 failed with exit code 1".into()),
        previous_phase: Some(Phase::Running),
        transition_time: t(5),
        labels: BTreeMap::from([("team".to_string(), "vision".to_string())]),
        annotations: BTreeMap::new(),
        object_json: Arc::from(object.to_string()),
        transition_key: String::new(),
        synthetic: false,
        story: None,
    }
}

#[test]
fn synthetic_events_chain_previous_phases_and_copy_the_job() {
    let job = volcano_job(&[
        ("Pending", t(1)),
        ("Running", t(2)),
        ("Restarting", t(3)),
        ("Running", t(4)),
        ("Failed", t(5)),
    ]);
    let current = current_event(&job);
    let m = missed("volcano-job", &job, Phase::Running, &t(2));
    let events = synthetic_events(&current, Phase::Running, &m);
    assert_eq!(events.len(), 2);

    let ids: Vec<&str> = events.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(
        ids,
        ["prod/u-1/1234~restarting~2", "prod/u-1/1234~running~3"]
    );
    let rvs: Vec<&str> = events.iter().map(|e| e.resource_version.as_str()).collect();
    assert_eq!(rvs, ["1234~restarting~2", "1234~running~3"]);
    let chain: Vec<(Option<Phase>, Phase)> =
        events.iter().map(|e| (e.previous_phase, e.phase)).collect();
    assert_eq!(
        chain,
        [
            (Some(Phase::Running), Phase::Restarting),
            (Some(Phase::Restarting), Phase::Running),
        ]
    );
    for (e, at) in events.iter().zip([t(3), t(4)]) {
        assert!(e.synthetic);
        assert_eq!(e.transition_time, at);
        assert_eq!((e.reason.as_deref(), e.message.as_deref()), (None, None));
        assert!(Arc::ptr_eq(&e.object_json, &current.object_json));
        assert_eq!(
            (
                &e.cluster,
                &e.uid,
                &e.name,
                &e.namespace,
                &e.labels,
                e.generation
            ),
            (
                &current.cluster,
                &current.uid,
                &current.name,
                &current.namespace,
                &current.labels,
                current.generation
            )
        );
    }
    assert_eq!(events[0].raw_phase, "Restarting");
}

#[test]
fn synthetic_ids_are_stable_across_redeliveries_and_later_cursors() {
    let job = volcano_job(&[
        ("Pending", t(1)),
        ("Running", t(2)),
        ("Restarting", t(3)),
        ("Running", t(4)),
        ("Failed", t(5)),
    ]);
    let current = current_event(&job);
    let first = synthetic_events(
        &current,
        Phase::Running,
        &missed("volcano-job", &job, Phase::Running, &t(2)),
    );
    // Same status, same cursor (a restart before anything was acknowledged): same events.
    let again = synthetic_events(
        &current,
        Phase::Running,
        &missed("volcano-job", &job, Phase::Running, &t(2)),
    );
    assert_eq!(first, again);
    // Killed after the first synthetic event was acknowledged: the cursor is now on it, and
    // the rest keeps its id.
    let rest = synthetic_events(
        &current,
        Phase::Restarting,
        &missed("volcano-job", &job, Phase::Restarting, &t(3)),
    );
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].id, first[1].id);
    assert_eq!(rest[0].previous_phase, Some(Phase::Restarting));
}

#[test]
fn no_missed_transitions_no_synthetic_events() {
    let current = current_event(&json!({}));
    assert!(synthetic_events(&current, Phase::Running, &[]).is_empty());
}
