//! Two `jobrelay run` processes with `coordination.mode: leader`, electing through a Lease on
//! the simulated home cluster while jobs run their lifecycles: the leader is killed with
//! SIGKILL mid-stream, the follower takes over, a restarted replica waits as follower, and a
//! SIGTERM hands the Lease back at once. Across all of it every final state is delivered,
//! events repeat only for calls in flight at the kill, and the follower delivers nothing.
//!
//! Both processes share one config folder and the state store on the test MariaDB (tables of
//! their own), as replicas in a cluster do: leader election refuses a SQLite state file.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use jobrelay_testkit::SimCluster;

use jobrelay_state::StateBackend;

use crate::common::store::drop_tables;
use crate::common::{mysql_url, unique_prefix};
use crate::process::{
    CONCURRENCY, Relay, Rng, assert_cursors_current, config_folder, count_ids, cursors, drive,
    finals_delivered, plan_jobs, read_lines, soak_seed, str_of, wait_log,
};

const LEASE_SECONDS: u64 = 3;
const RETRY_SECONDS: u64 = 1;
pub(crate) const TOOK: &str = "took the Lease";
pub(crate) const WAITING: &str = "leader election: watching as a follower";

/// Adds leader election to the main file, with the state store on the test MariaDB under
/// `prefix`; the simulated cluster is also the home cluster.
pub(crate) fn elect(config: &Path, sim: &SimCluster, prefix: &str) {
    std::fs::write(config.join("home.kubeconfig"), sim.kubeconfig_yaml()).expect("kubeconfig");
    let main = config.join("jobrelay.yaml");
    let text = std::fs::read_to_string(&main).expect("main file");
    let mut text = text.replace(
        "state: {path: state/jobrelay.db}",
        &format!(
            "state: {{url: \"{}\", table_prefix: {prefix}}}",
            mysql_url()
        ),
    );
    assert!(text.contains(prefix), "the main file names its state store");
    text.push_str(&format!(
        "coordination:\n  mode: leader\n  kubeconfig: home.kubeconfig\n  namespace: jobrelay\n  \
         lease_duration_seconds: {LEASE_SECONDS}\n  renew_deadline_seconds: 2\n  \
         retry_period_seconds: {RETRY_SECONDS}\n"
    ));
    std::fs::write(&main, text).expect("main file");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_is_replaced_by_the_follower_without_losing_a_final_state() {
    const JOBS: usize = 24;
    let seed = soak_seed();
    println!("seed {seed} (JOBRELAY_SOAK_SEED={seed} replays this schedule)");
    let mut rng = Rng(seed);
    let plans = plan_jobs(&mut rng, JOBS);

    let sim = SimCluster::start("alpha").await.expect("simulator");
    let manifest = format!(
        "wasm: event-log.wasm\ndelivery: every-version\ntimeout_ms: 5000\nconcurrency: {CONCURRENCY}\n\
         grants:\n  filesystem:\n    - {{host: out/log, guest: /data, writable: true}}\n\
         config:\n  file: events.jsonl\n"
    );
    let dir = config_folder(&sim, "log", &manifest);
    let config = dir.path().to_path_buf();
    let prefix = format!("{}_", unique_prefix("failover"));
    elect(&config, &sim, &prefix);
    let events = config.join("out/log/events.jsonl");

    let mut a = Relay::start(&config, "replica a");
    wait_log(&a, TOOK).await;
    let mut b = Relay::start(&config, "replica b");
    wait_log(&b, WAITING).await;

    let driver = tokio::spawn(drive(sim.clone(), plans.clone()));
    // After the last job is created (within 9 s), while jobs still change and finish: a job
    // created and deleted entirely while no replica watches leaves no trace in the API to
    // deliver, here or in any watcher.
    let ms = rng.range(10_000, 12_000);
    tokio::time::sleep(Duration::from_millis(ms)).await;
    assert!(
        !b.log().contains(TOOK),
        "the follower took the Lease while the leader was alive\n{}",
        b.tail()
    );
    let (before, _) = read_lines(&events);
    a.sigkill().await;
    let killed = Instant::now();
    println!(
        "leader SIGKILLed after {ms} ms of jobs ({} event lines)",
        before.len()
    );

    wait_log(&b, TOOK).await;
    let takeover = killed.elapsed();
    println!("the follower took over {takeover:?} after the kill (Lease: {LEASE_SECONDS} s)");
    // Not a timing measurement: a follower may take the Lease only once it has gone a whole
    // Lease duration unchanged, so a take-over sooner than about that would be a bug.
    assert!(
        takeover >= Duration::from_secs(LEASE_SECONDS - RETRY_SECONDS),
        "took over after {takeover:?}, before the Lease could expire"
    );

    // The killed replica comes back, as Kubernetes would restart it: now a follower.
    let mut a = Relay::start(&config, "replica a, restarted");
    wait_log(&a, WAITING).await;

    let played = driver
        .await
        .expect("driver task")
        .expect("driver plays every step");
    if let Err(missing) = finals_delivered(&played, &events).await {
        panic!("final states never delivered: {missing}\n{}", b.tail());
    }

    // A stopping leader releases the Lease: the follower takes it without waiting it out.
    let (lines_before_handover, _) = read_lines(&events);
    b.signal("TERM");
    let stopped = Instant::now();
    let status = b.exit_within(Duration::from_secs(30)).await;
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "SIGTERM stops the leader cleanly\n{}",
        b.tail()
    );
    assert!(
        b.log().contains("released the Lease"),
        "the leader did not release the Lease\n{}",
        b.tail()
    );
    wait_log(&a, TOOK).await;
    println!(
        "hand-over after SIGTERM: {:?} (a released Lease is taken at the next attempt)",
        stopped.elapsed()
    );
    // The new leader re-lists everything; with every cursor current it delivers nothing new.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (after_handover, _) = read_lines(&events);
    assert_eq!(
        after_handover.len(),
        lines_before_handover.len(),
        "the hand-over repeated events: {:?}",
        &after_handover[lines_before_handover.len()..]
    );
    a.signal("TERM");
    let status = a.exit_within(Duration::from_secs(30)).await;
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{}", a.tail());

    // --- the event log across both leaders ---
    let (lines, torn) = read_lines(&events);
    assert!(torn.is_empty(), "torn lines: {torn:#?}");
    let (per_id, duplicated) = count_ids(&lines);
    println!(
        "events delivered: {} lines, {} distinct ids, {} repeated (bound: concurrency {CONCURRENCY} x 1 kill)",
        lines.len(),
        per_id.len(),
        duplicated.len()
    );
    assert!(
        duplicated.iter().all(|(_, n)| *n <= 2) && duplicated.len() <= CONCURRENCY,
        "more repeats than calls in flight at the kill: {duplicated:?}"
    );
    let known: BTreeSet<&str> = played.iter().map(|j| j.uid.as_str()).collect();
    assert!(
        lines.iter().all(|l| known.contains(str_of(l, "uid"))),
        "events of unknown jobs"
    );
    let state = StateBackend::MySql {
        url: mysql_url(),
        table_prefix: prefix.clone(),
    };
    let cursors = cursors(&state, "log").await;
    assert_cursors_current(&sim, "alpha", &cursors, &played);
    drop_tables(&mysql_url(), &prefix)
        .await
        .expect("drop the test tables");
}

/// Fleet events across a take-over: a cluster goes offline while replica a leads, a is
/// SIGKILLed, and b — which judged the outage too but delivered nothing while following —
/// tells the standing states again once it leads (the dead leader may not have delivered
/// them); the shared cursors keep the offline event from the plugin a second time, and the
/// cluster's return reaches it once, from b.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_told_by_a_dead_leader_is_told_once_after_the_take_over() {
    let sim = SimCluster::start("alpha").await.expect("simulator");
    let west = SimCluster::start("west").await.expect("simulator");
    let manifest = "wasm: event-log.wasm\nfleet_events: [clusters, rules]\n\
         grants:\n  filesystem:\n    - {host: out/log, guest: /data, writable: true}\n\
         config:\n  file: events.jsonl\n";
    let dir = config_folder(&sim, "log", manifest);
    let config = dir.path().to_path_buf();
    std::fs::write(config.join("clusters/west.yaml"), west.kubeconfig_yaml()).expect("west");
    let main = config.join("jobrelay.yaml");
    let mut text = std::fs::read_to_string(&main).expect("main file");
    text.push_str("cluster_health: {check_interval_ms: 300, offline_after: 3, online_after: 2}\n");
    std::fs::write(&main, text).expect("main file");
    let prefix = format!("{}_", unique_prefix("fleet_takeover"));
    elect(&config, &sim, &prefix);
    let events = config.join("out/log/events.jsonl");
    let fleet = || -> Vec<String> {
        read_lines(&events)
            .0
            .iter()
            .filter(|l| str_of(l, "cluster") == "west" && l.get("fleet").is_some())
            .map(|l| str_of(l, "fleet").to_string())
            .collect()
    };

    let mut a = Relay::start(&config, "replica a");
    wait_log(&a, TOOK).await;
    let b = Relay::start(&config, "replica b");
    wait_log(&b, WAITING).await;
    west.outage_hard(true).expect("outage");
    let started = Instant::now();
    while fleet().is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no offline event\n{}",
            a.tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // b has judged west offline too by now (its own checks), and announced nothing.
    tokio::time::sleep(Duration::from_secs(2)).await;
    a.sigkill().await;
    wait_log(&b, TOOK).await;
    wait_log(&b, "telling each cluster's standing availability again").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        fleet(),
        ["cluster-offline"],
        "told once across the take-over\n{}",
        b.tail()
    );

    west.outage_hard(false).expect("back");
    let started = Instant::now();
    while fleet().len() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no online event\n{}",
            b.tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(fleet(), ["cluster-offline", "cluster-online"]);
    drop(b);
    drop_tables(&mysql_url(), &prefix)
        .await
        .expect("drop the test tables");
}
