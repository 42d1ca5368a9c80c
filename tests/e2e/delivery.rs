//! Delivery guarantees across failures and restarts: retries keep order, cursors make a
//! restart deliver exactly what changed, missed transitions are reconstructed.

use std::collections::BTreeSet;
use std::time::Duration;

use jobrelay::daemon::Daemon;
use jobrelay_e2e::*;
use jobrelay_testkit::{Flavor, JobDriver, SimCluster};
use serde_json::Value;

fn of_job<'a>(lines: &'a [Value], uid: &str) -> Vec<&'a Value> {
    lines.iter().filter(|l| uid_of(l) == uid).collect()
}

fn phases(lines: &[&Value]) -> Vec<String> {
    lines
        .iter()
        .map(|l| l["phase"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// A daemon on one simulated cluster (`alpha`, Volcano jobs) running `probe` with `settings`
/// (manifest lines) and a writable `/data` in `out/probe`, once the cluster is synced.
async fn probe_daemon(settings: &str) -> (SimCluster, Setup, Daemon) {
    let sim = SimCluster::start("alpha").await.expect("sim");
    let setup = Setup::new("kinds: [{name: volcano-job}]\n");
    setup.install_wasm("probe", "probe.wasm");
    setup.write_manifest(
        "probe",
        &format!(
            "{settings}grants:\n  filesystem:\n    - {{host: out/probe, guest: /data, writable: true}}\n"
        ),
    );
    setup.add_cluster(&sim);
    let daemon = Daemon::start(setup.config_dir())
        .await
        .expect("daemon starts");
    wait_synced(&daemon, "alpha").await;
    (sim, setup, daemon)
}

/// What probe recorded, once it has recorded every job of `uids` succeeded.
async fn probe_succeeded(setup: &Setup, uids: &[String], what: &str) -> Vec<Value> {
    wait_for(what, || {
        let lines = setup.lines("probe/probe.jsonl");
        uids.iter()
            .all(|u| {
                lines
                    .iter()
                    .any(|l| uid_of(l) == *u && l["phase"] == "succeeded")
            })
            .then_some(lines)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_recover_a_flaky_plugin_and_keep_each_jobs_order() {
    init_logs();
    let (sim, setup, daemon) = probe_daemon(
        "wasm: probe.wasm\nconcurrency: 3\nretry: {max_attempts: 5, min_delay_ms: 5, max_delay_ms: 40}\n",
    )
    .await;

    let mut uids = Vec::new();
    for i in 0..3 {
        let mut job = JobDriver::builder(Flavor::Volcano, "ml", &format!("flaky-{i}"))
            .label("jobrelay.test/behave", "flaky:2")
            .create(&sim)
            .expect("create");
        job.running().expect("running");
        job.restarting().expect("restarting");
        job.running().expect("running");
        job.succeeded().expect("succeeded");
        uids.push(job.uid().to_string());
    }
    let lines = probe_succeeded(
        &setup,
        &uids,
        "every job succeeded through the flaky plugin",
    )
    .await;
    assert_unique_ids(&lines, "a retried event is recorded once");
    for uid in &uids {
        let rvs: Vec<u64> = of_job(&lines, uid).iter().map(|l| rv_of(l)).collect();
        assert!(
            rvs.windows(2).all(|w| w[0] < w[1]),
            "order kept under retries: {rvs:?}"
        );
    }
    let lane = daemon.plugins()["probe"].lane.clone().expect("lane");
    assert_eq!(lane.dead_lettered, 0, "{lane:?}");
    assert_eq!(
        lane.retried,
        2 * lines.len() as u64,
        "two failures per event: {lane:?}"
    );
    daemon.shutdown(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_delivers_exactly_what_changed_while_down() {
    init_logs();
    let sim = SimCluster::start("alpha").await.expect("sim");
    let setup = Setup::new("");
    setup.install_wasm("event-log", "event-log.wasm");
    let plugin = |name: &str, delivery: &str| {
        setup.write_manifest(
            name,
            &Setup::log_manifest(
                "event-log.wasm",
                name,
                "events.jsonl",
                &format!("delivery: {delivery}\n"),
            ),
        );
    };
    plugin("every", "every-version");
    plugin("changes", "transitions");
    plugin("final", "terminal");
    setup.add_cluster(&sim);

    let daemon = Daemon::start(setup.config_dir())
        .await
        .expect("daemon starts");
    wait_synced(&daemon, "alpha").await;
    let mut a = JobDriver::create(&sim, Flavor::Volcano, "ml", "a").expect("create");
    let mut b = JobDriver::create(&sim, Flavor::PyTorch, "ml", "b").expect("create");
    let mut c = JobDriver::create(&sim, Flavor::Batch, "ml", "c").expect("create");
    let mut d = JobDriver::create(&sim, Flavor::Volcano, "ml", "d").expect("create");
    let mut done = JobDriver::create(&sim, Flavor::Volcano, "ml", "done").expect("create");
    for job in [&mut a, &mut b, &mut c, &mut d, &mut done] {
        job.running().expect("running");
    }
    done.succeeded().expect("succeeded");
    let before = wait_for("first run delivered", || {
        let lines = setup.lines("every/events.jsonl");
        let all_running = [&a, &b, &c, &d].iter().all(|j| {
            lines
                .iter()
                .any(|l| uid_of(l) == j.uid() && l["phase"] == "running")
        });
        let done_seen = lines
            .iter()
            .any(|l| uid_of(l) == done.uid() && l["phase"] == "succeeded");
        (all_running && done_seen).then_some(lines)
    })
    .await;
    daemon.idle().await;
    daemon.shutdown(Duration::from_secs(10)).await;
    let final_before = setup.lines("final/events.jsonl");
    assert_eq!(phases(&of_job(&final_before, done.uid())), ["succeeded"]);

    // While jobrelay is down: a finishes, b fails, c is deleted, d restarts and fails, e is new.
    a.succeeded().expect("a succeeded");
    b.failed("OOMKilled").expect("b failed");
    c.delete().expect("c deleted");
    d.restarting().expect("d restarting");
    d.running().expect("d running again");
    d.failed("NodeLost").expect("d failed");
    let mut e = JobDriver::create(&sim, Flavor::Volcano, "ml", "e").expect("create");
    e.running().expect("e running");

    let daemon = Daemon::start(setup.config_dir())
        .await
        .expect("daemon restarts");
    wait_synced(&daemon, "alpha").await;
    let after_all = wait_for("the changes delivered after the restart", || {
        let lines = setup.lines("every/events.jsonl");
        let has = |uid: &str, phase: &str| {
            lines
                .iter()
                .any(|l| uid_of(l) == uid && l["phase"] == phase)
        };
        (has(a.uid(), "succeeded")
            && has(b.uid(), "failed")
            && has(c.uid(), "deleted")
            && has(d.uid(), "failed")
            && has(e.uid(), "running"))
        .then_some(lines)
    })
    .await;
    daemon.idle().await;
    let after_all = {
        let _ = after_all;
        setup.lines("every/events.jsonl")
    };
    assert_unique_ids(&after_all, "nothing delivered twice across the restart");
    let before_ids: BTreeSet<&str> = before.iter().filter_map(|l| l["id"].as_str()).collect();
    let after = &after_all[before.len()..];
    assert!(
        after
            .iter()
            .all(|l| !before_ids.contains(l["id"].as_str().unwrap_or_default())),
        "the re-list re-delivers nothing that was delivered"
    );
    assert!(
        of_job(after, done.uid()).is_empty(),
        "an unchanged job is not delivered again"
    );

    // a changed while down: delivered once, with the stored phase as previous phase.
    let a_after = of_job(after, a.uid());
    let a_last = a_after.last().expect("a delivered");
    assert_eq!(a_last["phase"], "succeeded");
    assert_eq!(
        a_after[0]["previous_phase"], "running",
        "the stored phase is the previous phase"
    );

    // c was deleted while down: delivered as deleted.
    let c_after = of_job(after, c.uid());
    assert_eq!(phases(&c_after), ["deleted"]);
    assert_eq!(c_after[0]["previous_phase"], "running");

    // d went through phases unseen: reconstructed from its status, in order, flagged.
    let d_changes = of_job(&setup.lines("changes/events.jsonl"), d.uid())
        .into_iter()
        .cloned()
        .collect::<Vec<_>>();
    let d_refs: Vec<&Value> = d_changes.iter().collect();
    assert_eq!(
        phases(&d_refs),
        ["pending", "running", "restarting", "running", "failed"],
        "{d_changes:?}"
    );
    assert_eq!(d_changes[2]["synthetic"], true);
    assert_eq!(d_changes[3]["synthetic"], true);
    assert!(
        d_changes[4].get("synthetic").is_none(),
        "the observed version is not synthetic"
    );

    // The terminal plugin got each first terminal phase exactly once over both runs.
    let final_lines = setup.lines("final/events.jsonl");
    assert_eq!(phases(&of_job(&final_lines, done.uid())), ["succeeded"]);
    assert_eq!(phases(&of_job(&final_lines, a.uid())), ["succeeded"]);
    assert_eq!(phases(&of_job(&final_lines, b.uid())), ["failed"]);
    assert_eq!(phases(&of_job(&final_lines, d.uid())), ["failed"]);
    assert_eq!(phases(&of_job(&final_lines, c.uid())), ["deleted"]);
    assert!(of_job(&final_lines, e.uid()).is_empty());
    daemon.shutdown(Duration::from_secs(10)).await;
}

/// A deferral (`deferral.defer` then `retry`) is not a failure: with a retry budget of one
/// attempt, where any real failure would dead-letter at once, events deferred three times each
/// are all delivered, in order, once; no call counts as failed. The daemon is shut down while
/// the events wait out their deferrals and started again: nothing is lost, the new process
/// asks the plugin again and it goes on deferring from where its count stood.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deferrals_spend_no_attempt_and_survive_a_restart() {
    init_logs();
    let (sim, setup, daemon) = probe_daemon(
        "wasm: probe.wasm\nconcurrency: 3\ndelivery: transitions\n\
         retry: {max_attempts: 1, min_delay_ms: 5, max_delay_ms: 10}\n",
    )
    .await;

    let mut jobs = Vec::new();
    for i in 0..3 {
        let mut job = JobDriver::builder(Flavor::Volcano, "ml", &format!("held-{i}"))
            .label("jobrelay.test/behave", "defer:3")
            .create(&sim)
            .expect("create");
        job.running().expect("running");
        jobs.push(job);
    }
    // Every job's first events are deferred now (the first deferral takes a second).
    wait_for("a deferral in the lane", || {
        let lane = daemon.plugins().get("probe")?.lane.clone()?;
        (lane.deferred >= 3).then_some(())
    })
    .await;
    // A job waiting out its deferral is counted apart, and not as the lane's lag.
    wait_for("a job waiting out a deferral", || {
        let lane = daemon.plugins().get("probe")?.lane.clone()?;
        (lane.deferred_waiting >= 1).then_some(())
    })
    .await;
    let before = daemon.plugins()["probe"].lane.clone().expect("lane");
    assert_eq!(
        before.failed_calls, 0,
        "a deferral is no failed call: {before:?}"
    );
    assert_eq!(before.dead_lettered, 0, "{before:?}");
    daemon.shutdown(Duration::from_secs(10)).await;
    for job in &mut jobs {
        job.succeeded().expect("succeeded");
    }

    let daemon = Daemon::start(setup.config_dir())
        .await
        .expect("daemon starts again");
    let uids: Vec<String> = jobs.iter().map(|j| j.uid().to_string()).collect();
    let lines = probe_succeeded(
        &setup,
        &uids,
        "every job succeeded through the deferring plugin",
    )
    .await;
    assert_unique_ids(&lines, "a deferred event is recorded once");
    for uid in &uids {
        assert_eq!(
            phases(&of_job(&lines, uid)),
            ["pending", "running", "succeeded"],
            "every transition, in order, once"
        );
    }
    let lane = daemon.plugins()["probe"].lane.clone().expect("lane");
    assert_eq!(lane.failed_calls, 0, "{lane:?}");
    assert_eq!(lane.dead_lettered, 0, "{lane:?}");
    assert!(lane.deferred > 0, "{lane:?}");
    daemon.shutdown(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_survive_a_restart_and_are_replayed_on_request() {
    use jobrelay::cli::ops::dead_letters::{DeadLettersCommand, run};
    init_logs();
    let (sim, setup, daemon) = probe_daemon(
        "wasm: probe.wasm\nretry: {max_attempts: 2, min_delay_ms: 5, max_delay_ms: 10}\n",
    )
    .await;
    // Each event fails three times: two attempts, then the dead-letter list.
    let mut job = JobDriver::builder(Flavor::Volcano, "ml", "unlucky")
        .label("jobrelay.test/behave", "flaky:3")
        .create(&sim)
        .expect("create");
    job.running().expect("running");
    wait_for("both versions dead-lettered", || {
        let lane = daemon.plugins().get("probe")?.lane.clone()?;
        (lane.dead_lettered == 2 && lane.pending == 0).then_some(())
    })
    .await;
    daemon.shutdown(Duration::from_secs(10)).await;

    let state_path = setup.path("state/jobrelay.db");
    let store = jobrelay_state::open_store(&jobrelay_state::StateBackend::Sqlite(state_path))
        .await
        .expect("open state");
    let letters = store.dead_letters(Some("probe")).await.expect("list");
    assert_eq!(letters.len(), 2, "dead letters survive the restart");
    assert!(
        letters
            .iter()
            .all(|l| l.event.uid == job.uid() && l.attempts == 2)
    );
    assert!(letters[0].error.contains("flaky"), "{}", letters[0].error);
    let listing = run(
        store.as_ref(),
        &DeadLettersCommand::List {
            plugin: None,
            json: false,
        },
    )
    .await
    .expect("list")
    .text;
    assert!(listing.contains(&letters[0].event.id), "{listing}");

    // Restarted: the cursors say these versions were settled, so they are not redelivered.
    let daemon = Daemon::start(setup.config_dir())
        .await
        .expect("daemon restarts");
    wait_synced(&daemon, "alpha").await;
    daemon.idle().await;
    assert!(setup.lines("probe/probe.jsonl").is_empty());

    // The operator replays them while the daemon runs; now the plugin recovers.
    let said = run(
        store.as_ref(),
        &DeadLettersCommand::Replay {
            plugin: Some("probe".into()),
            all: true,
            ids: vec![],
        },
    )
    .await
    .expect("replay")
    .text;
    assert!(said.contains('2'), "{said}");
    let lines = wait_for("replayed events delivered", || {
        let lines = setup.lines("probe/probe.jsonl");
        (lines.len() == 2).then_some(lines)
    })
    .await;
    let replayed: BTreeSet<&str> = lines.iter().filter_map(|l| l["id"].as_str()).collect();
    let letter_ids: BTreeSet<&str> = letters.iter().map(|l| l.event.id.as_str()).collect();
    assert_eq!(replayed, letter_ids);
    wait_for("the dead-letter list emptied", || {
        let store = store.clone();
        let handle = tokio::runtime::Handle::current();
        let left = std::thread::spawn(move || handle.block_on(store.dead_letters(None)))
            .join()
            .ok()?
            .ok()?;
        left.is_empty().then_some(())
    })
    .await;
    store.close().await;
    daemon.shutdown(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_space_calls_out_across_jobs() {
    init_logs();
    let (sim, setup, daemon) = probe_daemon(
        "wasm: probe.wasm\nconcurrency: 4\nrate_limits: [{per_second: 5, burst: 1}]\n",
    )
    .await;

    let started = std::time::Instant::now();
    let mut uids = Vec::new();
    for i in 0..3 {
        let mut job = JobDriver::create(&sim, Flavor::Volcano, "ml", &format!("limited-{i}"))
            .expect("create");
        job.running().expect("running");
        uids.push(job.uid().to_string());
    }
    let lines = wait_for("every job running", || {
        let lines = setup.lines("probe/probe.jsonl");
        uids.iter()
            .all(|u| {
                lines
                    .iter()
                    .any(|l| uid_of(l) == *u && l["phase"] == "running")
            })
            .then_some(lines)
    })
    .await;
    // 5 in any second with a burst of 1 (1 in any 200 ms) lets the first call through at once
    // and each later one 200 ms after the previous one's end at the earliest: a lower bound no
    // scheduler can beat.
    let elapsed = started.elapsed();
    let floor = Duration::from_millis(200) * (lines.len() as u32 - 1);
    assert!(
        elapsed >= floor,
        "{} calls in {elapsed:?}, faster than the limit allows ({floor:?})",
        lines.len()
    );
    daemon.shutdown(Duration::from_secs(10)).await;
}
