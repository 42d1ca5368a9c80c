use serde_json::{Value, json};

use super::*;
use crate::kinds::{JobKind, NormalizerSpec};
use crate::normalize::normalize;

fn rules(yaml: &str) -> Result<Rules, String> {
    let spec: RulesSpec = serde_yaml_ng::from_str(yaml).map_err(|e| e.to_string())?;
    Rules::try_from(spec).map_err(|e| e.to_string())
}

fn builtin(name: &str) -> NormalizerSpec {
    JobKind::builtin(name).expect("built-in kind").normalizer
}

fn cond(ty: &str, status: &str, reason: &str, at: &str) -> Value {
    json!({"type": ty, "status": status, "reason": reason, "message": format!("{ty} {reason}"),
           "lastTransitionTime": at})
}

/// Phases and raw phases of a lifecycle of objects.
fn phases(spec: &NormalizerSpec, objects: &[Value]) -> Vec<(Phase, String)> {
    objects
        .iter()
        .map(|o| {
            let n = normalize(spec, o);
            (n.phase, n.raw_phase)
        })
        .collect()
}

fn only_phases(spec: &NormalizerSpec, objects: &[Value]) -> Vec<Phase> {
    phases(spec, objects).into_iter().map(|(p, _)| p).collect()
}

const T1: &str = "2026-03-01T10:00:01Z";
const T2: &str = "2026-03-01T10:00:02Z";
const T3: &str = "2026-03-01T10:00:03Z";

#[test]
fn every_built_in_rules_text_reads() {
    for which in [
        BuiltinRules::TrainJob,
        BuiltinRules::JobSet,
        BuiltinRules::RayJob,
    ] {
        let spec: RulesSpec = serde_yaml_ng::from_str(which.text()).expect("reads");
        Rules::try_from(spec).expect("usable");
    }
    for name in JobKind::BUILTINS {
        let kind = JobKind::builtin(name).expect("built in");
        assert!(kind.normalizer.reads_status_only(), "{name}");
    }
}

use crate::kinds::BuiltinRules;

#[test]
fn train_job_lifecycles_as_its_controller_writes_them() {
    let spec = builtin("train-job");
    let jobs = |active: i64, failed: i64, succeeded: i64, suspended: i64| {
        json!([{"name": "node", "ready": active, "active": active + failed, "failed": failed,
                "succeeded": succeeded, "suspended": suspended}])
    };
    // Succeed: no conditions while running.
    let succeed = [
        json!({"spec": {}}),
        json!({"status": {}}),
        json!({"status": {"jobsStatus": jobs(0, 0, 0, 0)}}),
        json!({"status": {"jobsStatus": jobs(2, 0, 0, 0)}}),
        json!({"status": {"jobsStatus": jobs(0, 0, 1, 0),
                          "conditions": [cond("Complete", "True", "AllJobsCompleted", T2)]}}),
    ];
    assert_eq!(
        only_phases(&spec, &succeed),
        [
            Phase::Pending,
            Phase::Pending,
            Phase::Pending,
            Phase::Running,
            Phase::Succeeded
        ]
    );
    // Restart shows only as a failed child job; then a failure with its reason.
    let fail = [
        json!({"status": {"jobsStatus": jobs(2, 0, 0, 0)}}),
        json!({"status": {"jobsStatus": jobs(0, 1, 0, 0)}}),
        json!({"status": {"jobsStatus": jobs(2, 0, 0, 0)}}),
        json!({"status": {"jobsStatus": jobs(0, 1, 0, 0),
                          "conditions": [cond("Failed", "True", "ReachedMaxRestarts", T3)]}}),
    ];
    assert_eq!(
        only_phases(&spec, &fail),
        [
            Phase::Running,
            Phase::Restarting,
            Phase::Running,
            Phase::Failed
        ]
    );
    let failed = normalize(&spec, &fail[3]);
    assert_eq!(failed.reason.as_deref(), Some("ReachedMaxRestarts"));
    assert_eq!(failed.transition_time.as_deref(), Some(T3));
    // Created suspended by Kueue: no conditions, no pods — suspended, never running; admitted.
    let kueue = [
        json!({"spec": {"suspend": true}}),
        json!({"spec": {"suspend": true}, "status": {"jobsStatus": jobs(0, 0, 0, 2)}}),
        json!({"spec": {"suspend": false}, "status": {"jobsStatus": jobs(0, 0, 0, 0)}}),
        json!({"spec": {"suspend": false}, "status": {"jobsStatus": jobs(2, 0, 0, 0)}}),
    ];
    assert_eq!(
        only_phases(&spec, &kueue),
        [
            Phase::Suspended,
            Phase::Suspended,
            Phase::Pending,
            Phase::Running
        ]
    );
    // Suspend → resume: a resumed TrainJob's `Suspended=False` is no phase of its own.
    let resume = [
        json!({"spec": {"suspend": true}, "status": {"jobsStatus": jobs(0, 0, 0, 2),
               "conditions": [cond("Suspended", "True", "Suspended", T1)]}}),
        json!({"spec": {"suspend": false}, "status": {"jobsStatus": jobs(2, 0, 0, 0),
               "conditions": [cond("Suspended", "False", "Resumed", T2)]}}),
    ];
    assert_eq!(
        phases(&spec, &resume),
        [
            (Phase::Suspended, "Suspended".to_string()),
            (Phase::Running, "Ready".to_string())
        ]
    );
}

#[test]
fn jobset_lifecycles_as_its_controller_writes_them() {
    let spec = builtin("jobset");
    let rjs = |active: i64, failed: i64| {
        json!([{"name": "workers", "ready": active, "active": active, "failed": failed,
                "succeeded": 0, "suspended": 0}])
    };
    let lifecycle = [
        json!({"status": {"replicatedJobsStatus": rjs(0, 0)}}),
        json!({"status": {"replicatedJobsStatus": rjs(2, 0)}}),
        json!({"status": {"replicatedJobsStatus": rjs(0, 1), "restarts": 1,
               "conditions": [cond("RestartingJobSet", "True", "DefaultFailurePolicy", T1)]}}),
        json!({"status": {"replicatedJobsStatus": rjs(2, 0), "restarts": 1,
               "conditions": [cond("RestartingJobSet", "False", "JobsReady", T2)]}}),
        json!({"spec": {"suspend": true}, "status": {"replicatedJobsStatus": rjs(0, 0),
               "conditions": [cond("RestartingJobSet", "False", "JobsReady", T2),
                              cond("Suspended", "True", "SuspendedJobs", T3)]}}),
        json!({"status": {"replicatedJobsStatus": rjs(2, 0),
               "conditions": [cond("RestartingJobSet", "False", "JobsReady", T2),
                              cond("Suspended", "False", "ResumeJobs", T3)]}}),
        json!({"status": {"replicatedJobsStatus": rjs(0, 0), "terminalState": "Completed",
               "conditions": [cond("RestartingJobSet", "False", "JobSetCompleted", T3),
                              cond("Suspended", "False", "ResumeJobs", T3),
                              cond("Completed", "True", "AllJobsCompleted", T3)]}}),
    ];
    assert_eq!(
        only_phases(&spec, &lifecycle),
        [
            Phase::Pending,
            Phase::Running,
            Phase::Restarting,
            Phase::Running,
            Phase::Suspended,
            Phase::Running,
            Phase::Succeeded
        ]
    );
    // In-order startup, then a restart that sets RestartingJobSet and StartupPolicyInProgress
    // in one write: restarting, not pending.
    let in_order = [
        json!({"status": {"conditions": [
            cond("StartupPolicyInProgress", "True", "InOrderStartupPolicyInProgress", T1)]}}),
        json!({"status": {"conditions": [
            cond("StartupPolicyInProgress", "False", "InOrderStartupPolicyCompleted", T2),
            cond("StartupPolicyCompleted", "True", "InOrderStartupPolicyCompleted", T2)]}}),
        json!({"status": {"conditions": [
            cond("StartupPolicyInProgress", "True", "InOrderStartupPolicyInProgress", T3),
            cond("StartupPolicyCompleted", "False", "InOrderStartupPolicyInProgress", T3),
            cond("RestartingJobSet", "True", "DefaultFailurePolicy", T3)]}}),
    ];
    assert_eq!(
        only_phases(&spec, &in_order),
        [Phase::Pending, Phase::Running, Phase::Restarting]
    );
}

#[test]
fn ray_job_lifecycles_as_its_operator_writes_them() {
    let spec = builtin("ray-job");
    let s = |deployment: &str, job: &str| {
        json!({"status": {"jobDeploymentStatus": deployment, "jobStatus": job,
                          "startTime": T1}})
    };
    let mut done = s("Complete", "SUCCEEDED");
    done["status"]["endTime"] = json!(T3);
    let lifecycle = [
        json!({}),
        s("", ""),
        s("Initializing", ""),
        s("Running", "PENDING"),
        s("Running", "RUNNING"),
        s("Failed", "FAILED"),
        s("Retrying", "FAILED"),
        s("", ""),
        s("Running", "RUNNING"),
        s("Suspending", "RUNNING"),
        s("Suspended", ""),
        done.clone(),
    ];
    assert_eq!(
        only_phases(&spec, &lifecycle),
        [
            Phase::Pending,
            Phase::Pending,
            Phase::Pending,
            Phase::Running,
            Phase::Running,
            Phase::Failed,
            Phase::Restarting,
            Phase::Pending,
            Phase::Running,
            Phase::Suspended,
            Phase::Suspended,
            Phase::Succeeded
        ]
    );
    assert_eq!(normalize(&spec, &done).transition_time.as_deref(), Some(T3));
    // STOPPED ends as Complete: told apart from success.
    let mut stopped = s("Complete", "STOPPED");
    stopped["status"]["message"] = json!("stopped by the user");
    let n = normalize(&spec, &stopped);
    assert_eq!((n.phase, n.raw_phase.as_str()), (Phase::Failed, "STOPPED"));
    assert_eq!(n.message.as_deref(), Some("stopped by the user"));
    let mut app_failed = s("Failed", "FAILED");
    app_failed["status"]["reason"] = json!("AppFailed");
    assert_eq!(
        normalize(&spec, &app_failed).reason.as_deref(),
        Some("AppFailed")
    );
    // Created suspended (Kueue): an empty status and `spec.suspend`.
    let queued = json!({"spec": {"suspend": true}, "status": {"jobDeploymentStatus": ""}});
    assert_eq!(normalize(&spec, &queued).phase, Phase::Suspended);
    // A value the rules do not list.
    assert_eq!(normalize(&spec, &s("Exploded", "")).phase, Phase::Unknown);
}

#[test]
fn what_each_test_gives_when_its_input_is_absent() {
    let r = rules(
        "first_match:\n\
         - {phase: failed, when: [{condition: Failed}]}\n\
         - {phase: suspended, when: [{condition: Suspended, status: 'False', reason: [Held]}]}\n\
         - {phase: running, when: [{field: /status/state, is: [Go, true, 3]}]}\n\
         - {phase: restarting, when: [{field: /status/state, is: ['']}]}\n\
         - {phase: succeeded, when: [{sum: /status/parts/*/done, above: 1}]}\n",
    )
    .expect("valid");
    let spec = NormalizerSpec::Rules(r);
    let n = |status: Value| normalize(&spec, &json!({"status": status})).phase;
    // An absent field reads as "": the `''` rule holds.
    assert_eq!(n(json!({})), Phase::Restarting);
    assert_eq!(n(json!({"state": null})), Phase::Restarting);
    assert_eq!(n(json!({"state": "Go"})), Phase::Running);
    assert_eq!(n(json!({"state": true})), Phase::Running);
    assert_eq!(n(json!({"state": 3})), Phase::Running);
    // An unlisted value: no rule holds, `otherwise` (pending by default).
    assert_eq!(n(json!({"state": "Elsewhere"})), Phase::Pending);
    // A condition test holds only for the condition there, with its status and reason.
    assert_eq!(
        n(json!({"state": "x", "conditions": [cond("Failed", "False", "", T1)]})),
        Phase::Pending
    );
    assert_eq!(
        n(json!({"state": "x", "conditions": [cond("Suspended", "False", "Held", T1)]})),
        Phase::Suspended
    );
    assert_eq!(
        n(json!({"state": "x", "conditions": [cond("Suspended", "False", "Other", T1)]})),
        Phase::Pending
    );
    // Sums count what is there; not-numbers count 0.
    assert_eq!(
        n(json!({"state": "x", "parts": [{"done": 1}, {"done": "2"}]})),
        Phase::Pending
    );
    assert_eq!(
        n(json!({"state": "x", "parts": [{"done": 1}, {"done": 1}]})),
        Phase::Succeeded
    );
}

#[test]
fn an_expression_decides_what_the_tests_cannot_say() {
    let r = rules(
        "first_match:\n\
         - phase: running\n  raw: Warm\n  when: [{expression: 'status.ready * 2 >= status.wanted'}]\n\
         otherwise: unknown\n",
    )
    .expect("valid");
    let spec = NormalizerSpec::Rules(r);
    assert!(spec.reads_status_only());
    let n = |status: Value| normalize(&spec, &json!({"status": status}));
    assert_eq!(n(json!({"ready": 2, "wanted": 4})).phase, Phase::Running);
    assert_eq!(n(json!({"ready": 2, "wanted": 4})).raw_phase, "Warm");
    assert_eq!(n(json!({"ready": 1, "wanted": 4})).phase, Phase::Unknown);
    // Fails on a missing field: the test does not hold.
    assert_eq!(n(json!({})).phase, Phase::Unknown);
    let whole =
        rules("first_match:\n- {phase: running, when: [{expression: 'object.spec.x == 1'}]}\n")
            .expect("valid");
    assert!(!NormalizerSpec::Rules(whole).reads_status_only());
}

#[test]
fn rules_that_cannot_be_used_are_refused_naming_the_field() {
    for (yaml, names) in [
        ("first_match: []", "first_match: the list is empty"),
        (
            "first_match: [{phase: running, when: []}]",
            "first_match[0].when",
        ),
        (
            "first_match: [{phase: running, when: [{condition: A, field: /status/x, is: [y]}]}]",
            "first_match[0].when[0]: give exactly one",
        ),
        (
            "first_match: [{phase: running, when: [{field: /status/x}]}]",
            "first_match[0].when[0].is",
        ),
        (
            "first_match: [{phase: running, when: [{field: status/x, is: [a]}]}]",
            "first_match[0].when[0].field `status/x`",
        ),
        (
            "first_match: [{phase: running, when: [{sum: /a, status: 'True'}]}]",
            "first_match[0].when[0].status: only with `condition`",
        ),
        (
            "first_match: [{phase: running, when: [{field: /a, is: [[1]]}]}]",
            "first_match[0].when[0].is[0]",
        ),
        (
            "first_match: [{phase: running, when: [{expression: 'event.x'}]}]",
            "first_match[0].when[0].expression: names `event`",
        ),
        (
            "first_match: [{phase: running, when: [{expression: '(('}]}]",
            "first_match[0].when[0].expression",
        ),
        (
            "first_match: [{phase: running, time_path: x, when: [{condition: A}]}]",
            "first_match[0].time_path `x`",
        ),
    ] {
        let err = rules(yaml).expect_err(yaml);
        assert!(err.contains(names), "{yaml}: {err}");
    }
}

/// `docs/job-kinds.md` shows each built-in kind's rules exactly as shipped.
#[test]
fn the_docs_show_the_built_in_rules_as_shipped() {
    let docs = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/job-kinds.md"),
    )
    .expect("docs/job-kinds.md");
    for which in [
        BuiltinRules::TrainJob,
        BuiltinRules::JobSet,
        BuiltinRules::RayJob,
    ] {
        assert!(
            docs.contains(&format!("```yaml\n{}```", which.text())),
            "docs/job-kinds.md does not show the {which:?} rules as shipped"
        );
    }
}
