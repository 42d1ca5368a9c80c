//! Clusters come and go with their kubeconfig files, one at a time, without disturbing others.

use std::time::Duration;

use jobrelay::daemon::Daemon;
use jobrelay_e2e::*;
use jobrelay_testkit::{Flavor, JobDriver, SimCluster};

fn has_job(setup: &Setup, uid: &str, phase: &str) -> bool {
    setup
        .lines("log/events.jsonl")
        .iter()
        .any(|l| uid_of(l) == uid && l["phase"] == phase)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusters_are_added_changed_and_removed_one_file_at_a_time() {
    init_logs();
    let alpha = SimCluster::start("alpha").await.expect("sim alpha");
    let beta = SimCluster::start("beta").await.expect("sim beta");
    let (setup, daemon) = start_with_event_log("", &[&alpha]).await;
    // Synced means listed; the watch requests follow the lists.
    let alpha_watches = wait_for("one watch per built-in kind", || {
        let n = watches_opened(&alpha);
        (n >= 4).then_some(n)
    })
    .await;
    assert_eq!(alpha_watches, 4, "one watch per built-in kind");

    // Added mid-run: beta gets watched and its jobs arrive.
    setup.add_cluster(&beta);
    wait_synced(&daemon, "beta").await;
    let mut job = JobDriver::create(&beta, Flavor::Volcano, "ml", "on-beta").expect("create");
    job.running().expect("running");
    wait_for("beta's job in the log", || {
        has_job(&setup, job.uid(), "running").then_some(())
    })
    .await;
    assert_eq!(
        watches_opened(&alpha),
        alpha_watches,
        "alpha's watches were not reopened"
    );

    // Changed: only beta restarts.
    let beta_watches = watches_opened(&beta);
    write_atomic(
        &setup.path("clusters/beta.yaml"),
        format!("{}\n# rotated\n", beta.kubeconfig_yaml()).as_bytes(),
    );
    wait_for("beta re-watched after its file changed", || {
        (watches_opened(&beta) >= beta_watches + 4).then_some(())
    })
    .await;
    wait_synced(&daemon, "beta").await;
    assert_eq!(
        watches_opened(&alpha),
        alpha_watches,
        "alpha untouched by beta's change"
    );

    // Removed: beta's watches close and its events stop; alpha goes on.
    setup.remove_cluster("beta");
    wait_for("beta's watches closed", || {
        (beta.open_watches() == 0).then_some(())
    })
    .await;
    assert!(
        !daemon.clusters().contains_key("beta"),
        "beta's health entry is gone"
    );
    let mut late =
        JobDriver::create(&beta, Flavor::Volcano, "ml", "after-removal").expect("create");
    late.running().expect("running");
    let mut marker = JobDriver::create(&alpha, Flavor::Batch, "ml", "on-alpha").expect("create");
    marker.running().expect("running");
    wait_for("alpha still delivers", || {
        has_job(&setup, marker.uid(), "running").then_some(())
    })
    .await;
    // Events are delivered in observation order per cluster, and alpha's later job already
    // arrived; give beta's (impossible) delivery a moment more before asserting its absence.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !has_job(&setup, late.uid(), "pending") && !has_job(&setup, late.uid(), "running"),
        "a removed cluster produces no events"
    );
    assert_eq!(
        watches_opened(&alpha),
        alpha_watches,
        "alpha untouched by beta's removal"
    );
    assert_eq!(beta.open_watches(), 0);
    daemon.shutdown(Duration::from_secs(10)).await;
    assert_eq!(alpha.open_watches(), 0, "shutdown closes every watch");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_cluster_reports_error_and_recovers() {
    init_logs();
    let sim = SimCluster::start("flaky").await.expect("sim");
    let setup = Setup::new("kinds: [{name: volcano-job}]\n");
    setup.install_wasm("event-log", "event-log.wasm");
    setup.write_manifest(
        "log",
        &Setup::log_manifest("event-log.wasm", "log", "events.jsonl", ""),
    );
    write_atomic(
        &setup.path("clusters/flaky.yaml"),
        sim.kubeconfig_yaml_with_token("wrong-token").as_bytes(),
    );
    let daemon = Daemon::start(setup.config_dir())
        .await
        .expect("daemon starts");
    let error = wait_for("cluster in error with the reason", || {
        let h = daemon.clusters().get("flaky").cloned()?;
        (h.state == jobrelay::clusters::health::HealthState::Error).then_some(h.last_error?)
    })
    .await;
    assert!(
        error.contains("401") || error.to_lowercase().contains("unauthorized"),
        "{error}"
    );
    setup.add_cluster(&sim); // the right token
    wait_synced(&daemon, "flaky").await;
    daemon.shutdown(Duration::from_secs(10)).await;
}

/// The cluster jobrelay runs in, watched with the pod's service account files instead of a
/// kubeconfig: the token is read from its file (and a rotated token is picked up by the next
/// connection), a missing token is reported against the main file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_home_cluster_is_watched_with_the_service_account_and_no_kubeconfig() {
    init_logs();
    let home = SimCluster::start("home").await.expect("sim");
    let account = tempfile::tempdir().expect("service account dir");
    let main = format!(
        "home_cluster: {{name: home, server: \"{}\", service_account_dir: \"{}\"}}\n",
        home.url(),
        account.path().display()
    );
    // No token mounted yet: the main file is reported, nothing else breaks.
    let (setup, daemon) = start_with_event_log(&main, &[]).await;
    let problems = daemon.problems();
    let why = problems
        .get(&setup.path("jobrelay.yaml"))
        .expect("the missing token is reported against the main file");
    assert!(why.contains("no service account token"), "{why}");
    assert!(daemon.clusters().is_empty());

    // The token appears (Kubernetes mounts it): the next re-scan picks the cluster up.
    write_atomic(&account.path().join("token"), home.token().as_bytes());
    wait_synced(&daemon, "home").await;
    let mut job = JobDriver::create(&home, Flavor::Batch, "ml", "at-home").expect("create");
    job.running().expect("running");
    wait_for("the home cluster's job in the log", || {
        has_job(&setup, job.uid(), "running").then_some(())
    })
    .await;
    assert!(daemon.problems().is_empty(), "{:?}", daemon.problems());

    // A kubeconfig file may not take the home cluster's name.
    setup.add_cluster(&home);
    wait_for("the clashing file refused", || {
        daemon
            .problems()
            .values()
            .any(|p| p.contains("taken by `home_cluster`"))
            .then_some(())
    })
    .await;
    daemon.shutdown(Duration::from_secs(5)).await;
}
