//! jobrelay's finalizer: a deleted job stays until every plugin has handled its deletion; the
//! finalizer is never added to a job already being deleted; `finalizers release` frees all.

use std::time::Duration;

use jobrelay::daemon::Daemon;
use jobrelay_e2e::*;
use jobrelay_testkit::{Flavor, Gvr, JobDriver, SimCluster};
use serde_json::Value;

const FINALIZER: &str = "jobrelay.io/delivery";

fn finalizers(sim: &SimCluster, name: &str) -> Option<Vec<String>> {
    let obj = sim.get(&Gvr::VOLCANO_JOB, "ml", name).ok()?;
    Some(
        obj.pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default(),
    )
}

fn setup_with_slow_plugin() -> Setup {
    let setup = Setup::new("kinds: [{name: volcano-job, finalizer: true}]\n");
    setup.install_wasm("event-log", "event-log.wasm");
    setup.install_wasm("probe", "probe.wasm");
    setup.write_manifest(
        "log",
        &Setup::log_manifest("event-log.wasm", "log", "events.jsonl", ""),
    );
    // The slow plugin stands for a log archiver: it needs the job's end, and takes its time.
    setup.write_manifest(
        "slow",
        "wasm: probe.wasm\ndelivery: terminal\ntimeout_ms: 20000\n\
         grants:\n  filesystem:\n    - {host: out/slow, guest: /data, writable: true}\n",
    );
    setup
}

/// A simulated cluster and a daemon holding its Volcano jobs, with the slow plugin.
async fn start_held() -> (SimCluster, Setup, Daemon) {
    init_logs();
    let sim = SimCluster::start("alpha").await.expect("sim");
    let setup = setup_with_slow_plugin();
    setup.add_cluster(&sim);
    let daemon = Daemon::start(setup.config_dir())
        .await
        .expect("daemon starts");
    wait_synced(&daemon, "alpha").await;
    (sim, setup, daemon)
}

/// Waits until jobrelay's finalizer is on the job.
async fn wait_held(sim: &SimCluster, name: &str) {
    wait_for("jobrelay's finalizer on the job", || {
        finalizers(sim, name)?
            .iter()
            .any(|f| f == FINALIZER)
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_job_stays_until_every_plugin_handled_its_deletion() {
    let (sim, setup, daemon) = start_held().await;

    let mut job = JobDriver::builder(Flavor::Volcano, "ml", "archived")
        .label("jobrelay.test/behave", "sleep-ms:1500")
        .create(&sim)
        .expect("create");
    job.running().expect("running");
    wait_held(&sim, "archived").await;

    job.delete().expect("kubectl delete");
    assert!(
        finalizers(&sim, "archived").is_some(),
        "held by the finalizer"
    );
    wait_for("the job removed once the plugins are done", || {
        finalizers(&sim, "archived").is_none().then_some(())
    })
    .await;
    // The finalizer went only after the slow plugin finished handling the deletion.
    let slow = setup.lines("slow/probe.jsonl");
    assert!(
        slow.iter().any(|l| l["phase"] == "terminating"),
        "the slow plugin handled the deletion before the job was released: {slow:?}"
    );
    let log = wait_for("the deletion in the event log", || {
        let lines = setup.lines("log/events.jsonl");
        lines
            .iter()
            .any(|l| uid_of(l) == job.uid() && l["phase"] == "deleted")
            .then_some(lines)
    })
    .await;
    let phases: Vec<&str> = log
        .iter()
        .filter(|l| uid_of(l) == job.uid())
        .filter_map(|l| l["phase"].as_str())
        .collect();
    assert_eq!(phases.last(), Some(&"deleted"));
    assert!(phases.contains(&"terminating"), "{phases:?}");
    daemon.shutdown(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_added_to_a_job_being_deleted_and_released_for_uninstall() {
    init_logs();
    let sim = SimCluster::start("alpha").await.expect("sim");
    // Being deleted before jobrelay starts, held by someone else's finalizer.
    let mut leaving = JobDriver::builder(Flavor::Volcano, "ml", "leaving")
        .finalizer("example.com/keep")
        .create(&sim)
        .expect("create");
    leaving.delete().expect("delete");
    let setup = setup_with_slow_plugin();
    setup.add_cluster(&sim);
    let daemon = Daemon::start(setup.config_dir())
        .await
        .expect("daemon starts");
    wait_synced(&daemon, "alpha").await;
    let mut staying = JobDriver::create(&sim, Flavor::Volcano, "ml", "staying").expect("create");
    staying.running().expect("running");
    wait_for("the finalizer on the new job", || {
        finalizers(&sim, "staying")?
            .iter()
            .any(|f| f == FINALIZER)
            .then_some(())
    })
    .await;
    daemon.idle().await;
    assert_eq!(
        finalizers(&sim, "leaving"),
        Some(vec!["example.com/keep".to_string()]),
        "no finalizer is added to a job being deleted"
    );
    daemon.shutdown(Duration::from_secs(10)).await;

    let (report, ok) =
        jobrelay::cli::ops::finalizers::release(setup.config_dir(), Duration::from_secs(30))
            .await
            .expect("release runs");
    assert!(ok, "{report}");
    assert!(
        report.contains("alpha: finalizer removed from 1 job(s)"),
        "{report}"
    );
    assert_eq!(finalizers(&sim, "staying"), Some(vec![]));
}

/// A short job whose every version met a failing API on the finalizer patch is still
/// protected: the finalizer is retried on its own timer, not only when a new version arrives,
/// and each failure is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_finalizer_is_retried_until_added_when_writes_fail() {
    let (sim, setup, daemon) = start_held().await;

    // Every write jobrelay makes fails while the job lives its short life.
    sim.fail_writes(true);
    let mut job = JobDriver::builder(Flavor::Volcano, "ml", "short")
        .create(&sim)
        .expect("create");
    job.running().expect("running");
    job.succeeded().expect("succeeded");
    let uid = job.uid().to_string();
    wait_for_phases(&setup, "log/events.jsonl", &[(uid.clone(), "succeeded")]).await;
    wait_for("failed finalizer patches counted", || {
        (daemon.clusters().get("alpha")?.finalizer_add_failures > 0).then_some(())
    })
    .await;
    assert!(
        !finalizers(&sim, "short")
            .expect("job exists")
            .iter()
            .any(|f| f == FINALIZER)
    );

    // The API recovers; the job does not change again, yet jobrelay adds its finalizer.
    sim.fail_writes(false);
    wait_held(&sim, "short").await;

    // So its deletion is held until the plugins handled it.
    job.delete().expect("kubectl delete");
    wait_for("the job removed once the plugins are done", || {
        finalizers(&sim, "short").is_none().then_some(())
    })
    .await;
    // Held: the deletion was seen as a `terminating` version before the object went.
    let log = setup.lines("log/events.jsonl");
    assert!(
        log.iter()
            .any(|l| l["uid"] == uid.as_str() && l["phase"] == "terminating"),
        "{log:?}"
    );
    daemon.shutdown(Duration::from_secs(5)).await;
}

/// A release that fails (every write refused) is retried on its own timer: the job being
/// deleted never changes again, yet it goes once the API accepts writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_release_is_retried_until_it_lands() {
    let (sim, setup, daemon) = start_held().await;
    let mut job = JobDriver::builder(Flavor::Volcano, "ml", "release")
        .create(&sim)
        .expect("create");
    job.running().expect("running");
    job.succeeded().expect("succeeded");
    let uid = job.uid().to_string();
    wait_held(&sim, "release").await;

    sim.fail_writes(true);
    job.delete().expect("kubectl delete");
    wait_for_phases(&setup, "log/events.jsonl", &[(uid.clone(), "terminating")]).await;
    // The plugins are done, the release is refused: still held.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        finalizers(&sim, "release").is_some(),
        "held while writes fail"
    );

    sim.fail_writes(false);
    wait_for("released although the job never changed again", || {
        finalizers(&sim, "release").is_none().then_some(())
    })
    .await;
    daemon.shutdown(Duration::from_secs(5)).await;
}
