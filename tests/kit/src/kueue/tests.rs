use super::*;
use crate::lifecycle::{Flavor, PodFailure};

fn condition<'a>(workload: &'a Value, kind: &str) -> &'a Value {
    conditions::find(&workload["status"], kind).unwrap_or(&Value::Null)
}

fn time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

async fn suspended_job(sim: &SimCluster) -> JobDriver {
    JobDriver::builder(Flavor::Batch, "ml", "llama-ft")
        .workers(1)
        .label(QUEUE_NAME_LABEL, "team-a")
        .created_suspended()
        .create(sim)
        .expect("created suspended")
}

#[tokio::test]
async fn a_workload_goes_through_kueues_steps_as_kueue_writes_them() {
    let sim = SimCluster::start("kueue").await.expect("sim");
    let kueue = SimKueue::install(&sim);
    let mut job = suspended_job(&sim).await;
    let suspended = job.object().expect("job");
    assert_eq!(condition(&suspended, "Suspended")["reason"], "JobSuspended");
    assert!(job.pods().is_empty(), "no pods before admission");

    let mut w = kueue.submit(&job, "team-a").expect("submitted");
    let o = w.object().expect("the Workload");
    assert!(w.name().starts_with("job-llama-ft-"), "{}", w.name());
    assert_eq!(o["metadata"]["labels"][JOB_UID_LABEL], job.uid());
    assert_eq!(o["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(o["spec"]["podSets"][0]["count"], 1);
    assert_eq!(
        o["metadata"]["creationTimestamp"],
        time(w.log()[0].1),
        "the creation is logged as the simulator wrote it"
    );
    assert_eq!(condition(&o, "QuotaReserved")["reason"], "Pending");
    assert_eq!(condition(&o, "QuotaReserved")["observedGeneration"], 1);
    let err = w
        .preempt(&mut job, "InClusterQueue", "x")
        .expect_err("not admitted");
    assert!(err.to_string().contains("holds no quota"), "{err}");
    assert!(w.requeue().is_err(), "never evicted");

    w.admit(&mut job, "a100", &[("nvidia.com/gpu", 8), ("cpu", 16)])
        .expect("admitted");
    let o = w.object().expect("the Workload");
    let usage = &o["status"]["admission"]["podSetAssignments"][0]["resourceUsage"];
    assert_eq!(usage["nvidia.com/gpu"], "8");
    let admitted = w.last(|s| matches!(s, KueueStep::Admitted { .. }));
    assert_eq!(
        condition(&o, "Admitted")["lastTransitionTime"],
        time(admitted.expect("logged"))
    );
    assert_eq!(job.object().expect("job")["spec"]["suspend"], false);
    assert_eq!(
        job.pods().len(),
        1,
        "the deferred pod came with the admission"
    );
    assert!(w.admit(&mut job, "a100", &[]).is_err(), "admitted twice");

    w.preempt(&mut job, "InClusterQueue", "9c0d-job")
        .expect("preempted");
    let o = w.object().expect("the Workload");
    let evicted = condition(&o, "Evicted");
    assert_eq!(
        (&evicted["status"], &evicted["reason"]),
        (&json!("True"), &json!("Preempted"))
    );
    let message = condition(&o, "Preempted")["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("JobUID: 9c0d-job) due to prioritization in the ClusterQueue"),
        "{message}"
    );
    assert_eq!(condition(&o, "Preempted")["reason"], "InClusterQueue");
    assert_eq!(condition(&o, "Admitted")["reason"], "NoReservation");
    assert_eq!(condition(&o, "QuotaReserved")["status"], "False");
    assert!(o["status"].get("admission").is_none());
    assert_eq!(o["status"]["schedulingStats"]["evictions"][0]["count"], 1);
    let released = w.last(|s| *s == KueueStep::Released).expect("logged");
    let held = (released - admitted.expect("logged")).num_seconds();
    assert!(held >= 2, "{held}");
    assert_eq!(o["status"]["accumulatedPastExecutionTimeSeconds"], held);
    assert_eq!(o["status"]["requeueState"]["count"], 1);
    assert!(o["status"]["requeueState"]["requeueAt"].is_string());
    assert_eq!(job.object().expect("job")["spec"]["suspend"], true);

    w.requeue().expect("requeued");
    let o = w.object().expect("the Workload");
    let requeued = w.last(|s| *s == KueueStep::Requeued).expect("logged");
    assert_eq!(
        condition(&o, "Requeued")["lastTransitionTime"],
        time(requeued)
    );
    assert_eq!(condition(&o, "Requeued")["reason"], "BackoffFinished");
    assert_eq!(
        condition(&o, "Evicted")["status"],
        "True",
        "until quota again"
    );
    assert!(o["status"]["requeueState"].get("requeueAt").is_none());

    w.admit(&mut job, "a100", &[("nvidia.com/gpu", 8)])
        .expect("admitted again");
    let o = w.object().expect("the Workload");
    let evicted = condition(&o, "Evicted");
    assert_eq!(
        (&evicted["status"], &evicted["reason"]),
        (&json!("False"), &json!("QuotaReserved"))
    );
    assert!(
        evicted["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("Previously: Preempted")
    );
    w.preempt(&mut job, "InCohortReclamation", "other")
        .expect("preempted again");
    let o = w.object().expect("the Workload");
    assert_eq!(o["status"]["schedulingStats"]["evictions"][0]["count"], 2);
    assert_eq!(o["status"]["requeueState"]["count"], 2);
    assert_eq!((w.preemptions(), w.requeues()), (2, 1));
    let times: Vec<_> = w.log().iter().map(|(_, t)| *t).collect();
    assert!(times.windows(2).all(|p| p[0] < p[1]), "{:?}", w.log());
}

#[tokio::test]
async fn a_failing_pod_is_written_as_the_kubelet_writes_it() {
    let sim = SimCluster::start("pods").await.expect("sim");
    let mut waiting = suspended_job(&sim).await;
    let err = waiting
        .pod_fails(PodFailure::OomKilled)
        .expect_err("no pod before admission");
    assert!(err.to_string().contains("created suspended"), "{err}");
    let mut bare = JobDriver::builder(Flavor::Batch, "ml", "bare")
        .without_pods()
        .create(&sim)
        .expect("created");
    assert!(bare.pod_fails(PodFailure::OomKilled).is_err());
    assert!(
        JobDriver::builder(Flavor::Volcano, "ml", "v")
            .created_suspended()
            .create(&sim)
            .is_err()
    );

    let mut job = JobDriver::create(&sim, Flavor::Batch, "ml", "oom").expect("created");
    job.running().expect("running");
    let pod = job.pod_fails(PodFailure::OomKilled).expect("killed");
    job.failed("").expect("failed");
    let o = sim.get(&Gvr::POD, "ml", &pod).expect("the pod");
    assert_eq!(o["status"]["phase"], "Failed");
    let ended = &o["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(
        (&ended["reason"], &ended["exitCode"]),
        (&json!("OOMKilled"), &json!(137))
    );

    let mut job = JobDriver::create(&sim, Flavor::PyTorch, "ml", "loop").expect("created");
    job.running().expect("running");
    let pod = job
        .pod_fails(PodFailure::CrashLoopBackOff)
        .expect("looping");
    let o = sim.get(&Gvr::POD, "ml", &pod).expect("the pod");
    let c = &o["status"]["containerStatuses"][0];
    assert_eq!(c["restartCount"], 3);
    let waiting = c["state"]["waiting"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        waiting.starts_with("back-off 40s restarting failed container=pytorch pod="),
        "{waiting}"
    );
    assert_eq!(c["lastState"]["terminated"]["exitCode"], 1);

    let mut job = JobDriver::create(&sim, Flavor::Batch, "ml", "pull").expect("created");
    job.pending().expect("pending");
    let pod = job.pod_fails(PodFailure::ImagePullBackOff).expect("stuck");
    let o = sim.get(&Gvr::POD, "ml", &pod).expect("the pod");
    assert_eq!(o["status"]["phase"], "Pending");
    let waiting = &o["status"]["containerStatuses"][0]["state"]["waiting"];
    assert_eq!(waiting["reason"], "ImagePullBackOff");
    assert!(
        waiting["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("Back-off pulling image")
    );
}
