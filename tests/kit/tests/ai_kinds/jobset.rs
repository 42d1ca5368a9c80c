//! JobSet: conditions appended only when first True, child-Job counts per replicated job,
//! restarts, and the in-order startup policy whose restart flips two conditions in one second.

use jobrelay_testkit::{Flavor, JobDriver};
use serde_json::Value;

use crate::common::{c, condition, conditions, pods_of, setup, since};

/// `(ready, succeeded, failed, active, suspended)` of the leader and of the workers.
type Counts = (u64, u64, u64, u64, u64);

fn jobs(object: &Value) -> (Counts, Counts) {
    let entries = object["status"]["replicatedJobsStatus"]
        .as_array()
        .expect("replicatedJobsStatus");
    assert_eq!(entries.len(), 2, "{entries:?}");
    let counts = |entry: &Value, name: &str| {
        assert_eq!(entry["name"], name);
        let n = |f: &str| {
            entry[f]
                .as_u64()
                .unwrap_or_else(|| panic!("{f} in {entry}"))
        };
        (
            n("ready"),
            n("succeeded"),
            n("failed"),
            n("active"),
            n("suspended"),
        )
    };
    (
        counts(&entries[0], "leader"),
        counts(&entries[1], "workers"),
    )
}

fn restarts(object: &Value) -> u64 {
    object["status"]["restarts"].as_u64().expect("restarts")
}

const READY: (Counts, Counts) = ((1, 0, 0, 1, 0), (2, 0, 0, 2, 0));

#[tokio::test]
async fn jobset_runs_restarts_suspends_and_completes() {
    let (sim, client, mut versions) = setup(Flavor::JobSet, "js").await;
    let mut job = JobDriver::builder(Flavor::JobSet, "ml", "js")
        .workers(2)
        .create(&sim)
        .unwrap();
    let created = versions.step(job.resource_version(), 1).await;
    assert_eq!(created[0]["apiVersion"], "jobset.x-k8s.io/v1alpha2");
    assert_eq!(
        created[0]["spec"]["startupPolicy"]["startupPolicyOrder"],
        "AnyOrder"
    );
    let pods = pods_of(&client, &job).await;
    assert_eq!(pods.len(), 3, "leader and two workers");
    let leader = pods[0].metadata.labels.clone().unwrap();
    assert_eq!(leader["jobset.sigs.k8s.io/replicatedjob-name"], "leader");
    assert_eq!(leader["batch.kubernetes.io/job-name"], "js-leader-0");

    let pending = versions.step(&job.pending().unwrap(), 1).await;
    assert_eq!(jobs(&pending[0]), ((0, 0, 0, 1, 0), (0, 0, 0, 2, 0)));
    assert_eq!(restarts(&pending[0]), 0);
    assert!(
        pending[0]["status"]
            .get("restartsCountTowardsMax")
            .is_none()
    );

    // Running: no condition (none was ever True), only counts.
    let running = versions.step(&job.running().unwrap(), 1).await;
    assert_eq!(jobs(&running[0]), READY);
    assert!(conditions(&running[0]).is_empty());

    // Restart: marked with restarts+1 and the Jobs of the old attempt gone, then all ready.
    let restart = versions.step(&job.restarting().unwrap(), 2).await;
    assert_eq!(
        conditions(&restart[0]),
        [c("RestartingJobSet", "True", "DefaultFailurePolicy")]
    );
    assert_eq!(
        condition(&restart[0], "RestartingJobSet")["message"],
        "applying RestartJobSet failure policy action (first failed job: js-leader-0)"
    );
    assert_eq!(restarts(&restart[0]), 1);
    assert_eq!(restart[0]["status"]["restartsCountTowardsMax"], 1);
    assert_eq!(jobs(&restart[0]), ((0, 0, 1, 0, 0), (0, 0, 0, 0, 0)));
    assert_eq!(
        conditions(&restart[1]),
        [c("RestartingJobSet", "False", "JobsReady")]
    );
    assert_eq!(
        condition(&restart[1], "RestartingJobSet")["message"],
        "all jobs are ready"
    );
    assert!(since(&restart[1], "RestartingJobSet") > since(&restart[0], "RestartingJobSet"));
    assert_eq!(jobs(&restart[1]), READY);
    assert_eq!(restarts(&restart[1]), 1);
    let ready_since = since(&restart[1], "RestartingJobSet");

    // Suspend: RestartingJobSet stays False, its reason changes and its time does not.
    let suspend = versions.step(&job.suspended().unwrap(), 2).await;
    assert_eq!(suspend[0]["spec"]["suspend"], true);
    assert_eq!(
        conditions(&suspend[1]),
        [
            c("RestartingJobSet", "False", "JobSetSuspended"),
            c("Suspended", "True", "SuspendedJobs")
        ]
    );
    assert_eq!(since(&suspend[1], "RestartingJobSet"), ready_since);
    assert_eq!(
        condition(&suspend[1], "Suspended")["message"],
        "jobset is suspended"
    );
    assert_eq!(jobs(&suspend[1]), ((0, 0, 0, 0, 1), (0, 0, 0, 0, 2)));

    let resume = versions.step(&job.resumed().unwrap(), 2).await;
    assert_eq!(resume[0]["spec"]["suspend"], false);
    assert_eq!(condition(&resume[1], "Suspended")["reason"], "ResumeJobs");
    assert_eq!(condition(&resume[1], "Suspended")["status"], "False");
    assert_eq!(jobs(&resume[1]), ((0, 0, 0, 1, 0), (0, 0, 0, 2, 0)));

    let running = versions.step(&job.running().unwrap(), 1).await;
    assert_eq!(jobs(&running[0]), READY);
    assert_eq!(
        condition(&running[0], "RestartingJobSet")["reason"],
        "JobsReady"
    );

    let done = versions.step(&job.succeeded().unwrap(), 1).await;
    assert_eq!(
        conditions(&done[0]),
        [
            c("RestartingJobSet", "False", "JobSetCompleted"),
            c("Suspended", "False", "ResumeJobs"),
            c("Completed", "True", "AllJobsCompleted")
        ]
    );
    assert_eq!(done[0]["status"]["terminalState"], "Completed");
    assert_eq!(jobs(&done[0]), ((0, 1, 0, 0, 0), (0, 2, 0, 0, 0)));
    assert_eq!(since(&done[0], "RestartingJobSet"), ready_since);

    assert!(job.completing().is_err());
    assert!(job.stopped().is_err());
    assert!(job.failing("").is_err());
}

#[tokio::test]
async fn jobset_failure_sets_terminal_state() {
    let (sim, _client, mut versions) = setup(Flavor::JobSet, "jf").await;
    let mut job = JobDriver::create(&sim, Flavor::JobSet, "ml", "jf").unwrap();
    versions.step(job.resource_version(), 1).await;
    versions.step(&job.running().unwrap(), 1).await;
    let failed = versions.step(&job.failed("").unwrap(), 1).await;
    // Never restarted: no RestartingJobSet entry at all.
    assert_eq!(conditions(&failed[0]), [c("Failed", "True", "FailedJobs")]);
    assert_eq!(
        condition(&failed[0], "Failed")["message"],
        "jobset failed due to one or more job failures (first failed job: jf-leader-0)"
    );
    assert_eq!(failed[0]["status"]["terminalState"], "Failed");
    assert_eq!(jobs(&failed[0]).0, (0, 0, 1, 0, 0));

    let mut max = JobDriver::create(&sim, Flavor::JobSet, "ml", "jm").unwrap();
    max.running().unwrap();
    max.restarting().unwrap();
    max.failed("ReachedMaxRestarts").unwrap();
    let object = max.object().unwrap();
    assert_eq!(
        conditions(&object),
        [
            c("RestartingJobSet", "False", "JobSetFailed"),
            c("Failed", "True", "ReachedMaxRestarts")
        ]
    );
}

#[tokio::test]
async fn jobset_in_order_restart_flips_two_conditions_in_one_write() {
    let (sim, _client, mut versions) = setup(Flavor::JobSet, "jo").await;
    let mut job = JobDriver::builder(Flavor::JobSet, "ml", "jo")
        .in_order_startup()
        .create(&sim)
        .unwrap();
    let created = versions.step(job.resource_version(), 1).await;
    assert_eq!(
        created[0]["spec"]["startupPolicy"]["startupPolicyOrder"],
        "InOrder"
    );

    // The leader's Jobs first.
    let pending = versions.step(&job.pending().unwrap(), 1).await;
    assert_eq!(
        conditions(&pending[0]),
        [c(
            "StartupPolicyInProgress",
            "True",
            "InOrderStartupPolicyInProgress"
        )]
    );
    assert_eq!(jobs(&pending[0]), ((0, 0, 0, 1, 0), (0, 0, 0, 0, 0)));
    let started = since(&pending[0], "StartupPolicyInProgress");

    // Leader ready and the workers started, then all ready: Completed, InProgress False.
    let running = versions.step(&job.running().unwrap(), 2).await;
    assert_eq!(jobs(&running[0]), ((1, 0, 0, 1, 0), (0, 0, 0, 2, 0)));
    assert_eq!(since(&running[0], "StartupPolicyInProgress"), started);
    assert_eq!(
        conditions(&running[1]),
        [
            c(
                "StartupPolicyInProgress",
                "False",
                "InOrderStartupPolicyInProgress"
            ),
            c(
                "StartupPolicyCompleted",
                "True",
                "InOrderStartupPolicyCompleted"
            )
        ]
    );
    // Turned False by exclusion: the time is not moved.
    assert_eq!(since(&running[1], "StartupPolicyInProgress"), started);
    assert_eq!(jobs(&running[1]), READY);
    let completed = since(&running[1], "StartupPolicyCompleted");

    // The trap: RestartingJobSet and StartupPolicyInProgress turn True in the same write,
    // with the same lastTransitionTime; StartupPolicyCompleted turns False keeping its own.
    let restart = versions.step(&job.restarting().unwrap(), 2).await;
    assert_eq!(
        conditions(&restart[0]),
        [
            c(
                "StartupPolicyInProgress",
                "True",
                "InOrderStartupPolicyInProgress"
            ),
            c(
                "StartupPolicyCompleted",
                "False",
                "InOrderStartupPolicyCompleted"
            ),
            c("RestartingJobSet", "True", "DefaultFailurePolicy")
        ]
    );
    let flipped = since(&restart[0], "RestartingJobSet");
    assert_eq!(since(&restart[0], "StartupPolicyInProgress"), flipped);
    assert!(flipped > started);
    assert_eq!(since(&restart[0], "StartupPolicyCompleted"), completed);
    assert_eq!(restarts(&restart[0]), 1);
    // Recreated and ready: Completed again, and the restart is over, in one write too.
    assert_eq!(
        conditions(&restart[1]),
        [
            c(
                "StartupPolicyInProgress",
                "False",
                "InOrderStartupPolicyInProgress"
            ),
            c(
                "StartupPolicyCompleted",
                "True",
                "InOrderStartupPolicyCompleted"
            ),
            c("RestartingJobSet", "False", "JobsReady")
        ]
    );
    assert_eq!(
        since(&restart[1], "StartupPolicyCompleted"),
        since(&restart[1], "RestartingJobSet")
    );
    assert_eq!(since(&restart[1], "StartupPolicyInProgress"), flipped);
    assert_eq!(jobs(&restart[1]), READY);

    // Only JobSets have a startup policy.
    assert!(
        JobDriver::builder(Flavor::TrainJob, "ml", "x")
            .in_order_startup()
            .create(&sim)
            .is_err()
    );
}

#[tokio::test]
async fn jobset_created_suspended_waits_for_admission() {
    let (sim, client, mut versions) = setup(Flavor::JobSet, "jq").await;
    let mut job = JobDriver::builder(Flavor::JobSet, "ml", "jq")
        .created_suspended()
        .create(&sim)
        .unwrap();
    // The controller creates the Jobs suspended and says so; no pods yet.
    let created = versions.step(job.resource_version(), 2).await;
    assert_eq!(created[0]["spec"]["suspend"], true);
    assert_eq!(
        conditions(&created[1]),
        [c("Suspended", "True", "SuspendedJobs")]
    );
    assert_eq!(jobs(&created[1]), ((0, 0, 0, 0, 1), (0, 0, 0, 0, 2)));
    assert!(pods_of(&client, &job).await.is_empty());

    let admitted = versions.step(&job.admitted().unwrap(), 3).await;
    assert_eq!(admitted[0]["spec"]["suspend"], false);
    assert_eq!(
        conditions(&admitted[1]),
        [c("Suspended", "False", "ResumeJobs")]
    );
    assert_eq!(jobs(&admitted[1]), ((0, 0, 0, 1, 0), (0, 0, 0, 2, 0)));
    assert_eq!(jobs(&admitted[2]), READY);
    assert_eq!(pods_of(&client, &job).await.len(), 3);

    // In order, suspended: no startup condition until admitted, then the leader first.
    let mut ordered = JobDriver::builder(Flavor::JobSet, "ml", "jq2")
        .in_order_startup()
        .created_suspended()
        .create(&sim)
        .unwrap();
    assert_eq!(
        conditions(&ordered.object().unwrap()),
        [c("Suspended", "True", "SuspendedJobs")]
    );
    ordered.admitted().unwrap();
    assert_eq!(
        conditions(&ordered.object().unwrap()),
        [
            c("Suspended", "False", "ResumeJobs"),
            c(
                "StartupPolicyInProgress",
                "False",
                "InOrderStartupPolicyInProgress"
            ),
            c(
                "StartupPolicyCompleted",
                "True",
                "InOrderStartupPolicyCompleted"
            )
        ]
    );
}
