//! Watch failures — dropped connections, `410 Gone`, an outage — lose no terminal phase.

use std::time::Duration;

use jobrelay::clusters::health::HealthState;
use jobrelay_e2e::*;
use jobrelay_testkit::{Flavor, Gvr, JobDriver, SimCluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_watches_410_and_an_outage_lose_no_terminal_phase() {
    init_logs();
    let sim = SimCluster::start("alpha").await.expect("sim");
    let (setup, daemon) = start_with_event_log("", &[&sim]).await;
    let mut jobs: Vec<JobDriver> = Vec::new();
    for (i, flavor) in Flavor::ALL.iter().cycle().take(12).enumerate() {
        let mut d = JobDriver::create(&sim, *flavor, "ml", &format!("job-{i}")).expect("create");
        d.running().expect("running");
        jobs.push(d);
    }
    let (first, rest) = jobs.split_at_mut(4);
    let (second, third) = rest.split_at_mut(4);

    // 1. Watches dropped: jobs finish while the watchers reconnect.
    sim.drop_watches();
    for d in first.iter_mut() {
        d.succeeded().expect("succeeded");
    }

    // 2. History compacted, then watches dropped: resuming gets 410 and must re-list.
    let lists_before = sim.list_requests_for(&Gvr::VOLCANO_JOB);
    for d in second.iter_mut() {
        d.failed("NodeLost").expect("failed");
    }
    sim.compact();
    sim.drop_watches();
    wait_for("a re-list after 410", || {
        (sim.list_requests_for(&Gvr::VOLCANO_JOB) > lists_before).then_some(())
    })
    .await;

    // 3. An outage: the API answers 503 and drops watches; jobs finish meanwhile.
    sim.set_outage(true);
    wait_for("the outage shows in cluster health", || {
        let h = daemon.clusters().get("alpha").cloned()?;
        (h.state != HealthState::Synced).then_some(())
    })
    .await;
    // Writes go through the driver API, which the outage does not block (the operators keep
    // working; only jobrelay's view is cut off).
    for d in third.iter_mut() {
        d.succeeded().expect("succeeded");
    }
    sim.set_outage(false);
    wait_synced(&daemon, "alpha").await;

    let expect: Vec<(String, &str)> = first
        .iter()
        .chain(third.iter())
        .map(|d| (d.uid().to_string(), "succeeded"))
        .chain(second.iter().map(|d| (d.uid().to_string(), "failed")))
        .collect();
    let lines = wait_for_phases(&setup, "log/events.jsonl", &expect).await;
    assert_unique_ids(&lines, "re-lists deliver no version twice");
    daemon.shutdown(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_watch_is_detected_and_reopened() {
    init_logs();
    let sim = SimCluster::start("alpha").await.expect("sim");
    let (setup, daemon) = start_with_event_log(
        "kinds: [{name: volcano-job}]\nwatch: {timeout_seconds: 2}\n",
        &[&sim],
    )
    .await;
    let opened = wait_for("the watch open", || {
        let n = sim.watch_requests_for(&Gvr::VOLCANO_JOB);
        (n >= 1).then_some(n)
    })
    .await;
    // The connection stays open but carries nothing, not even bookmarks.
    sim.stall_watches(true);
    let mut job = JobDriver::create(&sim, Flavor::Volcano, "ml", "quiet").expect("create");
    job.running().expect("running");
    // kube's client drops a watch silent for timeout + 5 s and opens a new one.
    wait_for("a new watch request", || {
        (sim.watch_requests_for(&Gvr::VOLCANO_JOB) > opened).then_some(())
    })
    .await;
    sim.stall_watches(false);
    wait_for("the job delivered after the stall", || {
        setup
            .lines("log/events.jsonl")
            .iter()
            .any(|l| uid_of(l) == job.uid() && l["phase"] == "running")
            .then_some(())
    })
    .await;
    wait_synced(&daemon, "alpha").await;
    daemon.shutdown(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_30_second_api_outage_loses_no_final_state() {
    init_logs();
    let sim = SimCluster::start("gamma").await.expect("sim");
    let (setup, daemon) = start_with_event_log("", &[&sim]).await;
    let mut jobs: Vec<JobDriver> = Vec::new();
    for (i, flavor) in Flavor::ALL.iter().cycle().take(8).enumerate() {
        let mut d = JobDriver::create(&sim, *flavor, "ml", &format!("long-{i}")).expect("create");
        d.running().expect("running");
        jobs.push(d);
    }
    wait_for("every job running delivered", || {
        let lines = setup.lines("log/events.jsonl");
        jobs.iter()
            .all(|d| {
                lines
                    .iter()
                    .any(|l| uid_of(l) == d.uid() && l["phase"] == "running")
            })
            .then_some(())
    })
    .await;

    // The API server goes away entirely (connections refused) for 30 s. Meanwhile jobs
    // restart, finish and fail, one is deleted and one is created.
    sim.outage_hard(true).expect("outage");
    wait_for("the outage shows in cluster health", || {
        let h = daemon.clusters().get("gamma").cloned()?;
        (h.state != HealthState::Synced).then_some(())
    })
    .await;
    let (finishing, rest) = jobs.split_at_mut(4);
    for d in finishing.iter_mut() {
        d.restarting().expect("restarting");
        d.running().expect("running again");
        d.succeeded().expect("succeeded");
    }
    let (failing, deleted) = rest.split_at_mut(3);
    for d in failing.iter_mut() {
        d.failed("NodeLost").expect("failed");
    }
    deleted[0].delete().expect("delete");
    let mut created =
        JobDriver::create(&sim, Flavor::PyTorch, "ml", "born-in-outage").expect("create");
    created.running().expect("running");
    tokio::time::sleep(Duration::from_secs(30)).await;
    let during = daemon.clusters().get("gamma").cloned().expect("health");
    assert_eq!(
        during.state,
        HealthState::Error,
        "30 s in, still down: {during:?}"
    );
    sim.outage_hard(false).expect("back");
    wait_synced(&daemon, "gamma").await;

    let mut expect: Vec<(String, &str)> = finishing
        .iter()
        .map(|d| (d.uid().to_string(), "succeeded"))
        .chain(failing.iter().map(|d| (d.uid().to_string(), "failed")))
        .collect();
    expect.push((deleted[0].uid().to_string(), "deleted"));
    expect.push((created.uid().to_string(), "running"));
    let lines = wait_for_phases(&setup, "log/events.jsonl", &expect).await;
    assert_unique_ids(&lines, "nothing delivered twice across the outage");
    // Each job's delivered history ends in its final state: nothing older arrives after it.
    let by = by_job(&lines);
    for (uid, phase) in &expect {
        let last = by[uid].last().expect("delivered");
        assert_eq!(last["phase"], *phase, "{uid}: {:?}", phase_path(&by[uid]));
    }
    daemon.shutdown(Duration::from_secs(10)).await;
}

/// A job object nested deeper than the JSON decoder allows is reported by name and delivered
/// as `unknown` (its status unreadable, its text as sent); the rest of its kind keeps flowing,
/// at start (the first list) and after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_unreadable_object_does_not_blind_its_kind() {
    init_logs();
    let sim = SimCluster::start("east").await.expect("sim");
    let deep_job = JobDriver::builder(Flavor::Volcano, "ml", "deep")
        .create(&sim)
        .expect("create");
    let mut nested = serde_json::json!(1);
    for _ in 0..1_000 {
        nested = serde_json::json!([nested]);
    }
    // The status is decoded (normalizers read it): nested deeper than the decoder's limit,
    // the object cannot be read.
    sim.patch_status(
        &jobrelay_testkit::Gvr::VOLCANO_JOB,
        "ml",
        "deep",
        serde_json::json!({"status": {"deep": nested.clone()}}),
    )
    .expect("make it deep");
    // The spec is never decoded: a deep one does not matter, the job is delivered.
    let deep_spec = JobDriver::builder(Flavor::Volcano, "ml", "deep-spec")
        .create(&sim)
        .expect("create");
    sim.patch_merge(
        &jobrelay_testkit::Gvr::VOLCANO_JOB,
        "ml",
        "deep-spec",
        serde_json::json!({"spec": {"plugins": {"deep": nested}}}),
    )
    .expect("make its spec deep");
    let mut fine = JobDriver::builder(Flavor::Volcano, "ml", "fine")
        .create(&sim)
        .expect("create");

    // The first list holds the bad object: the stream still syncs.
    let (setup, daemon) = start_with_event_log("kinds: [{name: volcano-job}]\n", &[&sim]).await;
    fine.running().expect("running");
    fine.succeeded().expect("succeeded");
    let uid = fine.uid().to_string();
    wait_for_phases(&setup, "log/events.jsonl", &[(uid.clone(), "succeeded")]).await;
    assert!(
        setup
            .lines("log/events.jsonl")
            .iter()
            .any(|l| l["uid"] == deep_spec.uid()),
        "the job with a deep spec was delivered"
    );
    let health = daemon.clusters()["east"].clone();
    assert!(health.unreadable_objects >= 1, "{health:?}");
    let last = health.last_unreadable.clone().unwrap_or_default();
    assert!(last.starts_with("ml/deep:"), "{last}");
    // Its status cannot be read, but it is a job all the same: delivered as `unknown`, with
    // the reason, rather than dropped.
    let deep_lines: Vec<serde_json::Value> = setup
        .lines("log/events.jsonl")
        .into_iter()
        .filter(|l| l["uid"] == deep_job.uid())
        .collect();
    assert!(
        deep_lines
            .iter()
            .any(|l| l["phase"] == "unknown" && l["reason"] == "StatusUnreadable"),
        "the job whose status cannot be read is delivered as unknown: {deep_lines:?}"
    );
    daemon.shutdown(std::time::Duration::from_secs(5)).await;

    // A restart lists it again, and stays in sync; the good job is not repeated.
    let daemon = jobrelay::daemon::Daemon::start(setup.config_dir())
        .await
        .expect("daemon restarts");
    wait_synced(&daemon, "east").await;
    let lines = setup.lines("log/events.jsonl");
    assert_unique_ids(&lines, "nothing repeated after the restart");
    daemon.shutdown(std::time::Duration::from_secs(5)).await;
}
