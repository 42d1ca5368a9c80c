//! The inbox: what a lane took and had not delivered survives the process.
//!
//! 150 Volcano jobs end at once; feishu-notify's lane is held to 10 calls a second (three a
//! job: pending, running, succeeded), so most of their `succeeded` cards wait in it, while
//! event-log (unlimited) shows that the daemon read every terminal version. The daemon is then stopped — SIGKILL, or SIGTERM as a rollout does —
//! every job is deleted while it is down (no finalizer holds them, as for most kinds), and a
//! new process starts on the same state. Nothing is left to rebuild the cards from but the
//! inbox: every job's card must arrive, each once but for the calls a kill cut short.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use jobrelay_testkit::{FeishuReceiver, Flavor, JobDriver, SimCluster};

use crate::process::{CONCURRENCY, DEADLINE, Relay, plugin_dir, read_lines, str_of, write};

const TOKEN: &str = "inbox";
const JOBS: usize = 150;

fn config_folder(root: &Path, sim: &SimCluster, webhook: &str, listen: std::net::SocketAddr) {
    write(
        &root.join("jobrelay.yaml"),
        &format!(
            "plugin_dir: {}\nstate: {{path: state/jobrelay.db}}\ndebounce_ms: 100\n\
             rescan_seconds: 2\nkinds:\n  - {{name: volcano-job}}\n\
             telemetry: {{listen: \"{listen}\"}}\n",
            plugin_dir().display()
        ),
    );
    write(&root.join("clusters/alpha.yaml"), &sim.kubeconfig_yaml());
    write(
        &root.join("plugins/log.yaml"),
        "wasm: event-log.wasm\ndelivery: every-version\n\
         grants:\n  filesystem:\n    - {host: out/log, guest: /data, writable: true}\n\
         config:\n  file: events.jsonl\n",
    );
    write(
        &root.join("plugins/feishu-notify.yaml"),
        &format!(
            "wasm: feishu-notify.wasm\ndelivery: transitions\nconcurrency: {CONCURRENCY}\n\
             rate_limits: [{{per_second: 10}}]\n\
             grants:\n  http: {{allow: [\"http://127.0.0.1:*\"], allow_private: true}}\n  kv: true\n\
             config:\n  webhook: \"{webhook}\"\n  phases: \"succeeded,failed\"\n"
        ),
    );
}

/// `succeeded` cards per job name.
fn cards(feishu: &FeishuReceiver) -> BTreeMap<String, usize> {
    let mut counted = BTreeMap::new();
    for message in feishu.messages(TOKEN) {
        if message.phase() == "succeeded" {
            *counted
                .entry(message.field("Job").unwrap_or_default())
                .or_default() += 1;
        }
    }
    counted
}

/// Jobs whose `succeeded` version is in the event log.
fn logged_succeeded(config: &Path) -> usize {
    let (lines, _) = read_lines(&config.join("out/log/events.jsonl"));
    let names: std::collections::BTreeSet<&str> = lines
        .iter()
        .filter(|l| str_of(l, "phase") == "succeeded")
        .map(|l| str_of(l, "name"))
        .collect();
    names.len()
}

async fn until(what: &str, relay: &Relay, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < DEADLINE,
            "{what}: not within {DEADLINE:?}\n{}",
            relay.tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Plays the scenario, stopping the first process with `stop`; returns (cards per job,
/// cards before the stop).
async fn backlog_across(stop: &str) -> (BTreeMap<String, usize>, usize) {
    let sim = SimCluster::start("alpha").await.expect("simulator");
    let feishu = FeishuReceiver::start().await.expect("feishu receiver");
    let webhook = feishu.add_bot(TOKEN, None, None);
    // The lane's own limit paces the cards; the receiver's per-minute limit would only add
    // throttled retries.
    feishu.set_rate_limit(TOKEN, false);
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().to_path_buf();
    let listen = crate::cluster_sources::free_port();
    config_folder(&config, &sim, &webhook, listen);

    let mut relay = Relay::start(&config, "before the stop");
    until("the plugins' lanes", &relay, || {
        relay.log().matches("plugin version serving").count() >= 2
    })
    .await;
    let mut drivers = Vec::new();
    for i in 0..JOBS {
        let mut driver = JobDriver::create(&sim, Flavor::Volcano, "ml", &format!("train-{i}"))
            .expect("create a job");
        driver.running().expect("running");
        drivers.push(driver);
    }
    for driver in &mut drivers {
        driver.succeeded().expect("succeeded");
    }
    // Every terminal version was read (event-log has them all), and some cards went out.
    until("every terminal version read", &relay, || {
        logged_succeeded(&config) == JOBS && feishu.messages(TOKEN).len() >= 10
    })
    .await;
    let before = feishu.messages(TOKEN).len();
    assert!(
        before < JOBS / 2,
        "the lane was meant to be far behind at the stop, but {before} of {JOBS} cards were sent"
    );
    match stop {
        "KILL" => relay.sigkill().await,
        signal => {
            relay.signal(signal);
            // Well inside the 20 s grace period: the calls waiting for the lane's tokens are
            // cut short, not waited out (what they hold is in the inbox).
            let status = relay.exit_within(Duration::from_secs(12)).await;
            assert_eq!(
                status.and_then(|s| s.code()),
                Some(0),
                "SIGTERM ends the run with code 0\n{}",
                relay.tail()
            );
        }
    }
    for driver in &mut drivers {
        driver.delete().expect("delete while the daemon is down");
    }
    // Down a while: the cards waiting in the inbox were taken before it.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let relay = Relay::start(&config, "after the stop");
    let restarted = Instant::now();
    // The lane's age counts from when each card was taken, by the process before: over the
    // 3 s down, not from the restart.
    let age = loop {
        let lane = crate::process::status(listen)
            .await
            .and_then(|s| s["plugins"]["feishu-notify"]["lane"].as_object().cloned());
        if let Some(lane) = lane
            && lane["pending"].as_u64().unwrap_or(0) > 0
        {
            break lane["oldest_pending_seconds"].as_f64().unwrap_or(0.0);
        }
        assert!(
            restarted.elapsed() < DEADLINE,
            "no backlog\n{}",
            relay.tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let since_restart = restarted.elapsed().as_secs_f64();
    assert!(
        age >= since_restart + 2.0,
        "the backlog's age {age:.1} s counts from the restart ({since_restart:.1} s ago), not \
         from when its events were taken"
    );
    let deadline = Instant::now() + DEADLINE * 2;
    while cards(&feishu).len() < JOBS {
        assert!(
            Instant::now() < deadline,
            "only {} of {JOBS} succeeded cards arrived ({before} before the stop)\n{}",
            cards(&feishu).len(),
            relay.tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Let a late duplicate show itself.
    tokio::time::sleep(Duration::from_millis(500)).await;
    (cards(&feishu), before)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_survives_sigkill_though_every_job_is_deleted_meanwhile() {
    let (cards, before) = backlog_across("KILL").await;
    let twice: Vec<_> = cards.iter().filter(|(_, n)| **n > 1).collect();
    println!(
        "SIGKILL: {before} cards before the kill, {} jobs carded after the restart, {} twice",
        cards.len(),
        twice.len()
    );
    // The at-least-once window: a card posted by a call the kill cut before its cursor was
    // stored. At most the calls in flight.
    assert!(
        twice.len() <= CONCURRENCY && twice.iter().all(|(_, n)| **n == 2),
        "cards repeated beyond the calls in flight at the kill: {twice:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_survives_a_rollout_sigterm_though_every_job_is_deleted_meanwhile() {
    let (cards, before) = backlog_across("TERM").await;
    let twice: Vec<_> = cards.iter().filter(|(_, n)| **n > 1).collect();
    println!(
        "SIGTERM: {before} cards before the stop, {} jobs carded after the restart",
        cards.len()
    );
    // A SIGTERM lets calls in flight finish and store their cursors: nothing is repeated.
    assert!(
        twice.is_empty(),
        "cards repeated after a SIGTERM: {twice:?}"
    );
}
