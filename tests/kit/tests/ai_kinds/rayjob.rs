//! RayJob: no conditions, two enums (absent when empty), a start time per attempt, and
//! STOPPED counted as complete.

use jobrelay_testkit::{Flavor, JobDriver};
use serde_json::Value;

use crate::common::{pods_of, setup};

/// `(jobDeploymentStatus, jobStatus)`, `""` for an absent field.
fn state(object: &Value) -> (&str, &str) {
    let status = &object["status"];
    assert!(
        status.get("conditions").is_none(),
        "RayJobs have no conditions"
    );
    for field in ["jobDeploymentStatus", "jobStatus"] {
        assert_ne!(status[field], "", "{field} is omitted when empty, not \"\"");
    }
    (
        status["jobDeploymentStatus"].as_str().unwrap_or_default(),
        status["jobStatus"].as_str().unwrap_or_default(),
    )
}

fn field<'v>(object: &'v Value, name: &str) -> &'v str {
    object["status"][name].as_str().unwrap_or_default()
}

/// `(succeeded, failed)`.
fn counters(object: &Value) -> (u64, u64) {
    let status = &object["status"];
    (
        status["succeeded"].as_u64().expect("succeeded"),
        status["failed"].as_u64().expect("failed"),
    )
}

#[tokio::test]
async fn rayjob_runs_retries_and_completes() {
    let (sim, client, mut versions) = setup(Flavor::RayJob, "rj").await;
    let mut job = JobDriver::builder(Flavor::RayJob, "ml", "rj")
        .workers(2)
        .create(&sim)
        .unwrap();
    let created = versions.step(job.resource_version(), 1).await;
    assert_eq!(created[0]["apiVersion"], "ray.io/v1");
    assert_eq!(created[0]["spec"]["backoffLimit"], 2);
    let pods = pods_of(&client, &job).await;
    assert_eq!(pods.len(), 3, "head and two workers");

    // Initializing: the attempt's start, job id and cluster.
    let pending = versions.step(&job.pending().unwrap(), 1).await;
    assert_eq!(state(&pending[0]), ("Initializing", ""));
    assert_eq!(counters(&pending[0]), (0, 0));
    let first_start = field(&pending[0], "startTime").to_string();
    let first_id = field(&pending[0], "jobId").to_string();
    assert!(first_id.starts_with("rj-"), "{first_id}");
    let cluster = field(&pending[0], "rayClusterName").to_string();
    for pod in &pods {
        let labels = pod.metadata.labels.clone().unwrap();
        assert_eq!(labels["ray.io/originated-from-cr-name"], "rj");
        assert_eq!(labels["ray.io/cluster"], cluster);
        assert!(pod.metadata.name.as_ref().unwrap().starts_with(&cluster));
    }
    assert!(pending[0]["status"].get("endTime").is_none());

    // Running: submitted (PENDING), then running.
    let running = versions.step(&job.running().unwrap(), 2).await;
    assert_eq!(state(&running[0]), ("Running", "PENDING"));
    assert!(field(&running[0], "dashboardURL").starts_with(&format!("{cluster}-head-svc.ml")));
    assert_eq!(state(&running[1]), ("Running", "RUNNING"));
    assert!(running[1]["status"]["rayJobInfo"]["startTime"].is_string());
    assert_eq!(field(&running[1], "startTime"), first_start);

    // Retry: Retrying with the failure, then "" with the attempt cleared, then a new attempt.
    let retry = versions.step(&job.restarting().unwrap(), 3).await;
    assert_eq!(state(&retry[0]), ("Retrying", "FAILED"));
    assert_eq!(field(&retry[0], "reason"), "AppFailed");
    assert_eq!(counters(&retry[0]), (0, 1));
    assert!(
        retry[0]["status"].get("endTime").is_none(),
        "Retrying is not terminal"
    );
    assert_eq!(state(&retry[1]), ("", ""));
    for cleared in [
        "jobId",
        "rayClusterName",
        "dashboardURL",
        "reason",
        "message",
    ] {
        assert!(
            retry[1]["status"].get(cleared).is_none(),
            "{cleared} cleared"
        );
    }
    assert_eq!(
        field(&retry[1], "startTime"),
        first_start,
        "kept until the next attempt"
    );
    assert_eq!(state(&retry[2]), ("Initializing", ""));
    assert!(field(&retry[2], "startTime") > first_start.as_str());
    assert_ne!(field(&retry[2], "jobId"), first_id);
    assert_eq!(counters(&retry[2]), (0, 1));

    let running = versions.step(&job.running().unwrap(), 2).await;
    assert_eq!(state(&running[1]), ("Running", "RUNNING"));

    let done = versions.step(&job.succeeded().unwrap(), 1).await;
    assert_eq!(state(&done[0]), ("Complete", "SUCCEEDED"));
    assert_eq!(counters(&done[0]), (1, 1));
    assert!(done[0]["status"]["endTime"].is_string());
    assert!(done[0]["status"].get("reason").is_none());
    assert_eq!(field(&done[0], "message"), "Job finished successfully.");

    for error in [
        job.completing(),
        job.failing(""),
        job.aborted(),
        job.admitted(),
    ] {
        assert!(error.is_err());
    }
}

#[tokio::test]
async fn rayjob_stopped_is_complete_and_failed_is_app_failed() {
    let (sim, _client, mut versions) = setup(Flavor::RayJob, "rs").await;
    let mut stopped = JobDriver::create(&sim, Flavor::RayJob, "ml", "rs").unwrap();
    versions.step(stopped.resource_version(), 1).await;
    versions.step(&stopped.pending().unwrap(), 1).await;
    versions.step(&stopped.running().unwrap(), 2).await;
    let end = versions.step(&stopped.stopped().unwrap(), 1).await;
    assert_eq!(state(&end[0]), ("Complete", "STOPPED"));
    assert_eq!(counters(&end[0]), (0, 0), "a stopped job is no success");
    assert!(end[0]["status"]["endTime"].is_string());

    let mut failed = JobDriver::create(&sim, Flavor::RayJob, "ml", "rf").unwrap();
    failed.pending().unwrap();
    failed.running().unwrap();
    failed.failed("").unwrap();
    let object = failed.object().unwrap();
    assert_eq!(state(&object), ("Failed", "FAILED"));
    assert_eq!(field(&object, "reason"), "AppFailed");
    assert_eq!(counters(&object), (0, 1));
    assert!(object["status"]["endTime"].is_string());

    // A deadline fails the deployment but leaves Ray's status where it was.
    let mut late = JobDriver::create(&sim, Flavor::RayJob, "ml", "rd").unwrap();
    late.running().unwrap();
    late.failed("DeadlineExceeded").unwrap();
    let object = late.object().unwrap();
    assert_eq!(state(&object), ("Failed", "RUNNING"));
    assert!(field(&object, "message").contains("activeDeadlineSeconds"));

    // Only RayJobs stop.
    for flavor in [Flavor::TrainJob, Flavor::JobSet, Flavor::Batch] {
        let mut other = JobDriver::create(&sim, flavor, "ml", "other").unwrap();
        assert!(other.stopped().is_err(), "{flavor:?}");
        other.delete().unwrap();
    }
}

#[tokio::test]
async fn rayjob_suspends_and_resumes_through_new() {
    let (sim, _client, mut versions) = setup(Flavor::RayJob, "rp").await;
    let mut job = JobDriver::create(&sim, Flavor::RayJob, "ml", "rp").unwrap();
    versions.step(job.resource_version(), 1).await;
    // `running` from a new job plays Initializing first.
    let running = versions.step(&job.running().unwrap(), 3).await;
    assert_eq!(state(&running[0]), ("Initializing", ""));
    let first_start = field(&running[0], "startTime").to_string();

    let suspend = versions.step(&job.suspended().unwrap(), 3).await;
    assert_eq!(suspend[0]["spec"]["suspend"], true);
    assert_eq!(state(&suspend[1]), ("Suspending", "RUNNING"));
    assert_eq!(state(&suspend[2]), ("Suspended", ""));
    assert!(suspend[2]["status"].get("jobId").is_none());

    let resume = versions.step(&job.resumed().unwrap(), 3).await;
    assert_eq!(resume[0]["spec"]["suspend"], false);
    assert_eq!(state(&resume[1]), ("", ""));
    assert_eq!(state(&resume[2]), ("Initializing", ""));
    assert!(field(&resume[2], "startTime") > first_start.as_str());
}

#[tokio::test]
async fn rayjob_created_suspended_initializes_then_suspends() {
    let (sim, client, mut versions) = setup(Flavor::RayJob, "rq").await;
    let mut job = JobDriver::builder(Flavor::RayJob, "ml", "rq")
        .created_suspended()
        .create(&sim)
        .unwrap();
    // KubeRay suspends only from Initializing: the job passes through it first.
    let created = versions.step(job.resource_version(), 4).await;
    assert_eq!(created[0]["spec"]["suspend"], true);
    assert_eq!(state(&created[1]), ("Initializing", ""));
    assert_eq!(state(&created[2]), ("Suspending", ""));
    assert_eq!(state(&created[3]), ("Suspended", ""));
    assert!(pods_of(&client, &job).await.is_empty());

    let admitted = versions.step(&job.admitted().unwrap(), 5).await;
    assert_eq!(admitted[0]["spec"]["suspend"], false);
    let states: Vec<_> = admitted[1..].iter().map(state).collect();
    assert_eq!(
        states,
        [
            ("", ""),
            ("Initializing", ""),
            ("Running", "PENDING"),
            ("Running", "RUNNING")
        ]
    );
    assert_eq!(pods_of(&client, &job).await.len(), 3);

    // Only the AI kinds are created suspended here.
    assert!(
        JobDriver::builder(Flavor::PyTorch, "ml", "pt")
            .created_suspended()
            .create(&sim)
            .is_err()
    );
}
