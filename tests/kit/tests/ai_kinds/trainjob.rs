//! TrainJob: no Running condition, state in `jobsStatus`, restarts invisible but for the node
//! Job's counts, and Kueue's suspended creation with no status at all.

use jobrelay_testkit::{Flavor, JobDriver};
use serde_json::{Value, json};

use crate::common::{c, condition, conditions, pods_of, setup, since};

/// The single `node` entry of `jobsStatus`: (ready, succeeded, failed, active, suspended).
fn node(object: &Value) -> (u64, u64, u64, u64, u64) {
    let jobs = object["status"]["jobsStatus"]
        .as_array()
        .expect("jobsStatus");
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    let entry = &jobs[0];
    assert_eq!(entry["name"], "node");
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
}

#[tokio::test]
async fn trainjob_runs_restarts_suspends_and_completes() {
    let (sim, client, mut versions) = setup(Flavor::TrainJob, "tj").await;
    let mut job = JobDriver::builder(Flavor::TrainJob, "ml", "tj")
        .workers(2)
        .create(&sim)
        .unwrap();
    let created = versions.step(job.resource_version(), 1).await;
    assert_eq!(created[0]["apiVersion"], "trainer.kubeflow.org/v1alpha1");
    assert_eq!(created[0]["spec"]["trainer"]["numNodes"], 2);
    assert_eq!(created[0]["spec"]["suspend"], false);
    assert!(created[0].get("status").is_none_or(|s| s == &json!({})));

    // Pods: numNodes of them, found by the JobSet's name label (the TrainJob's name).
    let pods = pods_of(&client, &job).await;
    assert_eq!(pods.len(), 2);
    let labels = pods[0].metadata.labels.clone().unwrap();
    assert_eq!(labels["jobset.sigs.k8s.io/jobset-name"], "tj");
    assert_eq!(labels["jobset.sigs.k8s.io/replicatedjob-name"], "node");
    assert_eq!(labels["batch.kubernetes.io/job-name"], "tj-node-0");

    let pending = versions.step(&job.pending().unwrap(), 1).await;
    assert_eq!(node(&pending[0]), (0, 0, 0, 1, 0));
    assert!(conditions(&pending[0]).is_empty());

    // Running: no condition at all, only the counts.
    let running = versions.step(&job.running().unwrap(), 1).await;
    assert_eq!(node(&running[0]), (1, 0, 0, 1, 0));
    assert!(running[0]["status"].get("conditions").is_none());

    // Restart: the node Job fails, then comes back; no condition says so.
    let restart = versions.step(&job.restarting().unwrap(), 2).await;
    assert_eq!(node(&restart[0]), (0, 0, 1, 0, 0));
    assert_eq!(node(&restart[1]), (1, 0, 0, 1, 0));
    assert!(restart.iter().all(|v| conditions(v).is_empty()));

    // Suspend: the spec first, then the condition and the counts.
    let suspend = versions.step(&job.suspended().unwrap(), 2).await;
    assert_eq!(suspend[0]["spec"]["suspend"], true);
    assert!(conditions(&suspend[0]).is_empty());
    assert_eq!(
        conditions(&suspend[1]),
        [c("Suspended", "True", "Suspended")]
    );
    assert_eq!(
        condition(&suspend[1], "Suspended")["message"],
        "TrainJob is suspended"
    );
    assert_eq!(node(&suspend[1]), (0, 0, 0, 0, 1));

    let resume = versions.step(&job.resumed().unwrap(), 2).await;
    assert_eq!(resume[0]["spec"]["suspend"], false);
    assert_eq!(conditions(&resume[1]), [c("Suspended", "False", "Resumed")]);
    assert_eq!(
        condition(&resume[1], "Suspended")["message"],
        "TrainJob is resumed"
    );
    assert!(since(&resume[1], "Suspended") > since(&suspend[1], "Suspended"));
    assert_eq!(node(&resume[1]), (0, 0, 0, 1, 0));

    let running = versions.step(&job.running().unwrap(), 1).await;
    assert_eq!(node(&running[0]), (1, 0, 0, 1, 0));

    // Complete is appended after Suspended, which stays in place: kubectl's "State" column
    // (the last condition's type) says Complete.
    let done = versions.step(&job.succeeded().unwrap(), 1).await;
    assert_eq!(
        conditions(&done[0]),
        [
            c("Suspended", "False", "Resumed"),
            c("Complete", "True", "AllJobsCompleted")
        ]
    );
    assert_eq!(
        condition(&done[0], "Complete")["message"],
        "jobset completed successfully"
    );
    assert_eq!(node(&done[0]), (0, 1, 0, 0, 0));
    assert_eq!(since(&done[0], "Suspended"), since(&resume[1], "Suspended"));
    assert!(done[0]["status"].get("startTime").is_none());
    assert!(done[0]["status"].get("completionTime").is_none());

    // Steps a TrainJob has no use for.
    assert!(job.completing().is_err());
    assert!(job.failing("").is_err());
    assert!(job.stopped().is_err());
    assert!(job.aborted().is_err());
    assert!(job.terminated("").is_err());
    assert!(job.admitted().is_err(), "not suspended");
}

#[tokio::test]
async fn trainjob_failures_copy_the_jobset_reason() {
    let (sim, _client, mut versions) = setup(Flavor::TrainJob, "tf").await;
    let mut job = JobDriver::create(&sim, Flavor::TrainJob, "ml", "tf").unwrap();
    versions.step(job.resource_version(), 1).await;
    versions.step(&job.running().unwrap(), 1).await;
    let failed = versions
        .step(&job.failed("ReachedMaxRestarts").unwrap(), 1)
        .await;
    assert_eq!(
        conditions(&failed[0]),
        [c("Failed", "True", "ReachedMaxRestarts")]
    );
    assert_eq!(
        condition(&failed[0], "Failed")["message"],
        "jobset failed due to reaching max number of restarts (first failed job: tf-node-0)"
    );
    assert_eq!(node(&failed[0]), (0, 0, 1, 0, 0));

    let mut other = JobDriver::create(&sim, Flavor::TrainJob, "ml", "tf2").unwrap();
    other.failed("").unwrap();
    let object = other.object().unwrap();
    assert_eq!(conditions(&object), [c("Failed", "True", "FailedJobs")]);
    let mut late = JobDriver::create(&sim, Flavor::TrainJob, "ml", "tf3").unwrap();
    late.failed("DeadlineExceeded").unwrap();
    assert_eq!(
        condition(&late.object().unwrap(), "Failed")["message"],
        "TrainJob exceeded its active deadline"
    );
}

#[tokio::test]
async fn trainjob_created_suspended_has_no_status_and_no_pods_until_admitted() {
    let (sim, client, mut versions) = setup(Flavor::TrainJob, "tq").await;
    let mut job = JobDriver::builder(Flavor::TrainJob, "ml", "tq")
        .created_suspended()
        .create(&sim)
        .unwrap();
    // Kueue's case: suspended, but not a condition, not a count, not a pod.
    let created = versions.step(job.resource_version(), 1).await;
    assert_eq!(created[0]["spec"]["suspend"], true);
    assert!(created[0].get("status").is_none_or(|s| s == &json!({})));
    assert!(pods_of(&client, &job).await.is_empty());
    assert!(job.pods().is_empty());

    // Admission: spec, the counts (no Suspended condition, it never was True), then running.
    let generation = created[0]["metadata"]["generation"].as_i64().unwrap();
    let admitted = versions.step(&job.admitted().unwrap(), 3).await;
    assert_eq!(admitted[0]["spec"]["suspend"], false);
    assert_eq!(
        admitted[0]["metadata"]["generation"].as_i64().unwrap(),
        generation + 1
    );
    assert_eq!(node(&admitted[1]), (0, 0, 0, 1, 0));
    assert_eq!(node(&admitted[2]), (1, 0, 0, 1, 0));
    assert!(admitted.iter().all(|v| conditions(v).is_empty()));
    let pods = pods_of(&client, &job).await;
    assert_eq!(pods.len(), 2);
    assert!(
        pods.iter()
            .all(|p| { p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") })
    );
    assert!(job.admitted().is_err(), "admitted twice");

    // When the trainer does see the suspension first, admission resumes the condition.
    let mut seen = JobDriver::builder(Flavor::TrainJob, "ml", "tq2")
        .created_suspended()
        .create(&sim)
        .unwrap();
    seen.suspended().unwrap();
    assert_eq!(
        conditions(&seen.object().unwrap()),
        [c("Suspended", "True", "Suspended")]
    );
    seen.admitted().unwrap();
    assert_eq!(
        conditions(&seen.object().unwrap()),
        [c("Suspended", "False", "Resumed")]
    );
    assert_eq!(seen.pods().len(), 2);
}
