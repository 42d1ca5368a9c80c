//! A job's life on two clusters, through the real daemon, to the real event-log plugin.

use std::time::Duration;

use jobrelay::daemon::Daemon;
use jobrelay_e2e::*;
use jobrelay_testkit::{Flavor, JobDriver, SimCluster};
use serde_json::Value;

fn terminal_seen(lines: &[Value], uid: &str, phase: &str) -> bool {
    lines
        .iter()
        .any(|l| uid_of(l) == uid && l["phase"] == phase)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycles_on_two_clusters_reach_event_log_in_order() {
    init_logs();
    let alpha = SimCluster::start("alpha").await.expect("sim alpha");
    let beta = SimCluster::start("beta").await.expect("sim beta");
    let (setup, daemon) = start_with_event_log("", &[&alpha, &beta]).await;
    let mut expected: Vec<(String, String, Vec<&str>)> = Vec::new(); // cluster, uid, phase path
    for sim in [&alpha, &beta] {
        let mut v = JobDriver::create(sim, Flavor::Volcano, "ml", "volcano-train").expect("create");
        v.pending().expect("pending");
        v.running().expect("running");
        v.restarting().expect("restarting");
        v.running().expect("running again");
        v.succeeded().expect("succeeded");
        expected.push((
            sim.name().into(),
            v.uid().into(),
            vec!["pending", "running", "restarting", "running", "succeeded"],
        ));

        let mut p = JobDriver::create(sim, Flavor::PyTorch, "ml", "pytorch-train").expect("create");
        p.pending().expect("created");
        p.running().expect("running");
        p.failed("OOMKilled").expect("failed");
        expected.push((
            sim.name().into(),
            p.uid().into(),
            vec!["pending", "running", "failed"],
        ));

        let mut b = JobDriver::create(sim, Flavor::Batch, "etl", "batch-prep").expect("create");
        b.running().expect("running");
        b.succeeded().expect("succeeded");
        b.delete().expect("delete");
        expected.push((
            sim.name().into(),
            b.uid().into(),
            vec!["pending", "running", "succeeded", "deleted"],
        ));

        let mut m = JobDriver::create(sim, Flavor::Mpi, "ml", "mpi-allreduce").expect("create");
        m.running().expect("running");
        m.suspended().expect("suspended");
        m.resumed().expect("resumed");
        m.running().expect("running again");
        m.succeeded().expect("succeeded");
        expected.push((
            sim.name().into(),
            m.uid().into(),
            // Resumed, the job waits for its workers again before it runs.
            vec![
                "pending",
                "running",
                "suspended",
                "pending",
                "running",
                "succeeded",
            ],
        ));
    }

    let lines = wait_for("every job's last phase in the event log", || {
        let lines = setup.lines("log/events.jsonl");
        expected
            .iter()
            .all(|(_, uid, path)| terminal_seen(&lines, uid, path.last().expect("non-empty")))
            .then_some(lines)
    })
    .await;

    assert_unique_ids(&lines, "no event is delivered twice");

    let jobs = by_job(&lines);
    for (cluster, uid, path) in &expected {
        let events = &jobs[uid];
        assert_eq!(phase_path(events), *path, "phases of {cluster}/{uid}");
        let mut last_rv = 0;
        let mut last_phase: Option<String> = None;
        for e in events {
            assert_eq!(e["cluster"], cluster.as_str());
            let rv = rv_of(e);
            assert!(
                rv > last_rv,
                "resource versions in observed order: {events:?}"
            );
            assert_eq!(
                e["id"],
                format!(
                    "{cluster}/{uid}/{}",
                    e["resource_version"].as_str().unwrap_or_default()
                )
            );
            assert_eq!(
                e["previous_phase"].as_str().map(str::to_string),
                last_phase,
                "previous phase is the phase last delivered"
            );
            last_rv = rv;
            last_phase = e["phase"].as_str().map(str::to_string);
        }
    }
    let volcano = lines
        .iter()
        .find(|l| l["raw_phase"] == "Restarting")
        .expect("restart seen");
    assert_eq!(volcano["api_version"], "batch.volcano.sh/v1alpha1");
    assert_eq!(volcano["kind"], "Job");
    assert_eq!(volcano["namespace"], "ml");
    daemon.shutdown(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misbehaving_plugin_fails_only_its_own_calls() {
    init_logs();
    let sim = SimCluster::start("gamma").await.expect("sim");
    let setup = Setup::new("");
    setup.install_wasm("event-log", "event-log.wasm");
    setup.install_wasm("probe", "probe.wasm");
    setup.write_manifest(
        "log",
        &Setup::log_manifest("event-log.wasm", "log", "events.jsonl", ""),
    );
    setup.write_manifest(
        "probe",
        "wasm: probe.wasm\nretry: {max_attempts: 2, min_delay_ms: 10, max_delay_ms: 20}\ntimeout_ms: 300\nmemory_mb: 16\nconcurrency: 2\n\
         grants:\n  filesystem:\n    - {host: out/probe, guest: /data, writable: true}\n",
    );
    setup.add_cluster(&sim);
    let daemon = Daemon::start(setup.config_dir())
        .await
        .expect("daemon starts");
    wait_synced(&daemon, "gamma").await;

    let mut uids = Vec::new();
    for behave in ["trap", "loop", "oom", "none"] {
        let mut job = JobDriver::builder(Flavor::Batch, "ml", &format!("job-{behave}"))
            .label("jobrelay.test/behave", behave)
            .create(&sim)
            .expect("create");
        job.running().expect("running");
        job.succeeded().expect("succeeded");
        uids.push((behave, job.uid().to_string()));
    }

    // The well-behaved plugin gets everything, including the jobs that break the other one.
    wait_for("event-log sees every job succeed", || {
        let lines = setup.lines("log/events.jsonl");
        uids.iter()
            .all(|(_, uid)| terminal_seen(&lines, uid, "succeeded"))
            .then_some(())
    })
    .await;
    // The probe handles the harmless job, and fails each bad call without harm to the host.
    wait_for("probe handles the harmless job", || {
        let lines = setup.lines("probe/probe.jsonl");
        let uid = &uids[3].1;
        lines
            .iter()
            .any(|l| {
                l["id"].as_str().is_some_and(|id| id.contains(uid.as_str()))
                    && l["phase"] == "succeeded"
            })
            .then_some(())
    })
    .await;
    daemon.idle().await;
    let log_lines = setup.lines("log/events.jsonl");
    let bad_events = log_lines
        .iter()
        .filter(|l| uids[..3].iter().any(|(_, uid)| uid_of(l) == *uid))
        .count();
    assert!(bad_events >= 9, "each bad job has at least three versions");
    let lane = wait_for("every bad event dead-lettered", || {
        let lane = daemon.plugins().get("probe")?.lane.clone()?;
        (lane.dead_lettered as usize >= bad_events && lane.pending == 0).then_some(lane)
    })
    .await;
    assert_eq!(
        lane.dead_lettered as usize, bad_events,
        "only the bad jobs' events are dead-lettered: {lane:?}"
    );
    // Each bad event was tried twice (retry.max_attempts). A good call may also time out on
    // a loaded machine and be retried, so this is a lower bound.
    assert!(
        lane.failed_calls as usize >= 2 * bad_events,
        "each bad event was tried twice: {lane:?}"
    );
    let good_events = log_lines.len() - bad_events;
    assert_eq!(
        lane.delivered as usize, good_events,
        "every good event delivered: {lane:?}"
    );
    let probe_lines = setup.lines("probe/probe.jsonl");
    for (behave, uid) in &uids[..3] {
        assert!(
            !probe_lines
                .iter()
                .any(|l| l["id"].as_str().is_some_and(|id| id.contains(uid.as_str()))),
            "a {behave} call never completes normally"
        );
    }
    daemon.shutdown(Duration::from_secs(10)).await;
}
