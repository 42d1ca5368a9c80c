//! Timers across kills: the real daemon, SIGKILLed at seeded moments, judges `fleet.timers` on
//! jobs the simulator holds, and event-log (taking rule fleet events) writes what reached it.
//! A job that stays pending past its timer is told once, however often the daemon is killed
//! and started again while it waits; its resolution once, when it runs; a job that moves on in
//! time never. Nothing of a stay is stored: each new process judges the stays again from the
//! jobs' objects, and the lanes' cursors keep a repeat from the plugin. A counting timer's
//! restarts are in no object: a new process, or a new leader, counts the ones its view never
//! saw from the state store.

use std::time::Duration;

use serde_json::Value;

use jobrelay_testkit::{Flavor, JobDriver, Pace, SimCluster};

use crate::common::store::drop_tables;
use crate::common::{mysql_url, unique_prefix};
use crate::failover::{TOOK, WAITING, elect};
use crate::process::{
    DEADLINE, Relay, Rng, plugin_dir, poll, read_lines, soak_seed, str_of, wait_log, write,
};

fn config_folder(root: &std::path::Path, sim: &SimCluster) {
    timers_folder(
        root,
        sim,
        "batch-job",
        "\x20   - {name: pending-long, state: pending, longer_than: 3s, kinds: [batch-job]}\n\
         \x20   - {name: running-long, state: running, longer_than: 1h}\n",
    );
}

/// A folder watching `alpha` for `kind`, with these `timers` (YAML list lines), and event-log
/// writing what reaches it (fleet events too) to `out/log/events.jsonl`.
fn timers_folder(root: &std::path::Path, sim: &SimCluster, kind: &str, timers: &str) {
    write(
        &root.join("jobrelay.yaml"),
        &format!(
            "plugin_dir: {}\nstate: {{path: state/jobrelay.db}}\ndebounce_ms: 100\n\
             kinds: [{{name: {kind}}}]\n\
             fleet:\n  evaluate_interval_ms: 200\n  timers:\n{timers}",
            plugin_dir().display()
        ),
    );
    write(&root.join("clusters/alpha.yaml"), &sim.kubeconfig_yaml());
    write(
        &root.join("plugins/log.yaml"),
        "wasm: event-log.wasm\nfleet_events: [rules]\n\
         grants:\n  filesystem:\n    - {host: out/log, guest: /data, writable: true}\n\
         config:\n  file: events.jsonl\n",
    );
}

/// The fleet lines event-log wrote: `(fleet kind, rule, summary)`.
fn timer_lines(root: &std::path::Path) -> Vec<(String, String, String)> {
    let (lines, torn) = read_lines(&root.join("out/log/events.jsonl"));
    assert!(torn.is_empty(), "torn lines: {torn:?}");
    lines
        .iter()
        .filter(|l: &&Value| l.get("fleet").is_some())
        .map(|l| {
            (
                str_of(l, "fleet").to_string(),
                str_of(l, "rule").to_string(),
                str_of(l, "summary").to_string(),
            )
        })
        .collect()
}

/// A simulator and a config folder written by `folder`, its state on MariaDB under a prefix of
/// its own and its replicas electing a leader: `(sim, folder, its path, table prefix)`.
async fn elected(
    name: &str,
    folder: impl FnOnce(&std::path::Path, &SimCluster),
) -> (SimCluster, tempfile::TempDir, std::path::PathBuf, String) {
    let sim = SimCluster::start("alpha").await.expect("simulator");
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().to_path_buf();
    folder(&root, &sim);
    let prefix = format!("{}_", unique_prefix(name));
    elect(&root, &sim, &prefix);
    (sim, dir, root, prefix)
}

/// Waits until event-log wrote at least `n` timer lines; panics with `relay`'s log after the
/// deadline.
async fn wait_timer_lines(root: &std::path::Path, n: usize, relay: &Relay) {
    poll(DEADLINE, || {
        (timer_lines(root).len() >= n)
            .then_some(())
            .ok_or_else(|| format!("{n} timer lines not yet written\n{}", relay.tail()))
    })
    .await
    .unwrap_or_else(|why| panic!("{why}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_fires_once_per_stay_across_kills_and_resolves_once() {
    let seed = soak_seed();
    eprintln!("timer kill seed {seed} (JOBRELAY_SOAK_SEED={seed} repeats it)");
    let mut rng = Rng(seed);
    let sim = SimCluster::start("alpha").await.expect("simulator");
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().to_path_buf();
    config_folder(&root, &sim);

    let mut relay = Relay::start(&root, "first start");
    // One job stays pending; another runs within a second, before its timer's time.
    let mut waiting = JobDriver::builder(Flavor::Batch, "ml", "waits")
        .pace(Pace::Wall)
        .create(&sim)
        .expect("create");
    let mut quick = JobDriver::builder(Flavor::Batch, "ml", "quick")
        .pace(Pace::Wall)
        .create(&sim)
        .expect("create");
    tokio::time::sleep(Duration::from_millis(800)).await;
    quick.running().expect("running");

    let fired = poll(DEADLINE, || {
        let lines = timer_lines(&root);
        if lines.is_empty() {
            Err(format!("no timer line yet\n{}", relay.tail()))
        } else {
            Ok(lines)
        }
    })
    .await
    .unwrap_or_else(|why| panic!("{why}"));
    assert_eq!(fired.len(), 1, "{fired:?}");
    let (kind, rule, summary) = &fired[0];
    assert_eq!(
        (kind.as_str(), rule.as_str()),
        ("rule-firing", "pending-long")
    );
    assert!(
        summary.starts_with("ml/waits pending ") && summary.ends_with("on alpha (longer than 3s)"),
        "{summary}"
    );

    // Killed at seeded moments while the job still waits: each new process finds the stay
    // long again and fires it, and the lane keeps it from event-log.
    for round in 0..3 {
        let after = Duration::from_millis(rng.range(0, 1500));
        tokio::time::sleep(after).await;
        relay.sigkill().await;
        eprintln!("round {round}: killed {after:?} in");
        relay = Relay::start(&root, &format!("restart {round}"));
    }
    // Many evaluations of the last process.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let lines = timer_lines(&root);
    assert_eq!(
        lines.len(),
        1,
        "fired once across the kills: {lines:?}\n{}",
        relay.tail()
    );
    // Not because the new process judged otherwise: it found the stay long and fired too.
    assert!(
        relay.log().contains("timer firing"),
        "the restarted daemon fires the timer again:\n{}",
        relay.tail()
    );

    // It runs: resolved, once — across a kill just after too.
    waiting.running().expect("running");
    wait_timer_lines(&root, 2, &relay).await;
    relay.sigkill().await;
    let relay = Relay::start(&root, "after the resolution");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let lines = timer_lines(&root);
    let kinds: Vec<(&str, &str)> = lines
        .iter()
        .map(|(k, r, _)| (k.as_str(), r.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("rule-firing", "pending-long"),
            ("rule-resolved", "pending-long")
        ],
        "{lines:?}\n{}",
        relay.tail()
    );
    assert!(
        lines[1]
            .2
            .starts_with("ml/waits is no longer pending on alpha"),
        "{lines:?}"
    );
    assert!(
        !lines.iter().any(|(_, _, s)| s.contains("quick")),
        "a job that moved on in time never fires: {lines:?}"
    );
}

/// A take-over: two replicas electing a leader through a Lease, sharing their cursors on
/// MariaDB. The leader fires a timer on a waiting job and is SIGKILLed; the follower, which
/// judged the same stay all along but keeps no firing while it delivers nothing, takes the
/// Lease, fires the stay again on its first pass — and the shared cursor keeps it from the
/// plugin. Its resolution, when the job runs, is delivered once, by the new leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_fires_once_across_a_leader_take_over() {
    let (sim, _dir, root, prefix) = elected("timer_takeover", config_folder).await;

    let mut a = Relay::start(&root, "replica a");
    wait_log(&a, TOOK).await;
    let b = Relay::start(&root, "replica b");
    wait_log(&b, WAITING).await;
    let mut waiting = JobDriver::builder(Flavor::Batch, "ml", "waits")
        .pace(Pace::Wall)
        .create(&sim)
        .expect("create");
    wait_timer_lines(&root, 1, &a).await;

    a.sigkill().await;
    wait_log(&b, TOOK).await;
    // Following, it announced nothing; leading, its first passes fire the standing stay
    // again (were the firing kept from its time as a follower, a stay the dead leader had not
    // delivered would never be).
    let took_at = b.log().find(TOOK).expect("took the Lease");
    assert!(
        !b.log()[..took_at].contains("timer firing"),
        "a follower keeps no firing:\n{}",
        b.tail()
    );
    poll(DEADLINE, || {
        b.log()[took_at..]
            .contains("timer firing")
            .then_some(())
            .ok_or_else(|| format!("the new leader never judged the stay\n{}", b.tail()))
    })
    .await
    .unwrap_or_else(|why| panic!("{why}"));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(timer_lines(&root).len(), 1, "{:?}", timer_lines(&root));

    waiting.running().expect("running");
    wait_timer_lines(&root, 2, &b).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let kinds: Vec<String> = timer_lines(&root).into_iter().map(|(k, _, _)| k).collect();
    assert_eq!(kinds, ["rule-firing", "rule-resolved"]);
    drop(b);
    drop_tables(&mysql_url(), &prefix)
        .await
        .expect("drop the test tables");
}

/// A main file with one counting timer: a PyTorchJob restarted more than twice in `within`
/// seconds (its `Restarting` condition dates each restart).
fn counting_folder(root: &std::path::Path, sim: &SimCluster, within: u32) {
    timers_folder(
        root,
        sim,
        "pytorch-job",
        &format!(
            "\x20   - {{name: restarts-often, counts: restarted, more_than: 2, within: {within}s}}\n"
        ),
    );
}

/// How many restarts the state file holds for the job `uid` (0 before any).
async fn stored_restarts(root: &std::path::Path, uid: &str) -> usize {
    let path = root.join("state/jobrelay.db");
    let Ok(pool) = sqlx::SqlitePool::connect(&format!("sqlite://{}?mode=ro", path.display())).await
    else {
        return 0;
    };
    let value: Option<Vec<u8>> =
        sqlx::query_scalar("SELECT value FROM plugin_kv WHERE plugin = '.timers' AND `key` = ?")
            .bind(format!("restarted/alpha/{uid}"))
            .fetch_optional(&pool)
            .await
            .ok()
            .flatten();
    pool.close().await;
    let text = String::from_utf8_lossy(&value.unwrap_or_default()).into_owned();
    text.split_once(';').map_or(0, |(_, times)| {
        times.split(',').filter(|t| !t.is_empty()).count()
    })
}

/// A job restarted three times, the daemon SIGKILLed at seeded moments between the restarts
/// (each once stored) and after the firing: each new process sees the job only running, yet
/// counts the restarts from the store and fires again — the lane keeps the repeat from the
/// plugin — and the resolution, when the first restart leaves the window, is told once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counting_timer_fires_once_across_kills_and_resolves_once() {
    let seed = soak_seed();
    eprintln!("counting timer seed {seed} (JOBRELAY_SOAK_SEED={seed} repeats it)");
    let mut rng = Rng(seed);
    let sim = SimCluster::start("alpha").await.expect("simulator");
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().to_path_buf();
    counting_folder(&root, &sim, 25);

    let mut relay = Relay::start(&root, "first start");
    let mut job = JobDriver::builder(Flavor::PyTorch, "ml", "flaky")
        .pace(Pace::Wall)
        .create(&sim)
        .expect("create");
    job.running().expect("running");
    let uid = job.uid().to_string();
    for restart in 1..=3 {
        tokio::time::sleep(Duration::from_millis(1100)).await;
        job.restarting().expect("restarting");
        let started = std::time::Instant::now();
        loop {
            let n = stored_restarts(&root, &uid).await;
            if n >= restart {
                break;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "{n} of {restart} restarts stored\n{}",
                relay.tail()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        tokio::time::sleep(Duration::from_millis(1100)).await;
        job.running().expect("running again");
        if restart < 3 && rng.range(0, 2) == 0 {
            relay.sigkill().await;
            eprintln!("killed after restart {restart}");
            relay = Relay::start(&root, &format!("after restart {restart}"));
        }
    }
    wait_timer_lines(&root, 1, &relay).await;
    let fired = timer_lines(&root);
    assert_eq!(
        fired,
        [(
            "rule-firing".to_string(),
            "restarts-often".to_string(),
            "ml/flaky restarted 3 times in 25s on alpha (more than 2)".to_string()
        )]
    );
    // Killed after the firing: the new process's view has the job running and no restart.
    tokio::time::sleep(Duration::from_millis(rng.range(0, 800))).await;
    relay.sigkill().await;
    let relay = Relay::start(&root, "after the firing");
    // It counts the stored restarts (its view has none) and fires again.
    wait_log(&relay, "timer firing").await;
    wait_timer_lines(&root, 2, &relay).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let lines = timer_lines(&root);
    let kinds: Vec<(&str, &str)> = lines
        .iter()
        .map(|(k, r, _)| (k.as_str(), r.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("rule-firing", "restarts-often"),
            ("rule-resolved", "restarts-often")
        ],
        "{lines:?}\n{}",
        relay.tail()
    );
    assert!(
        lines[1]
            .2
            .starts_with("ml/flaky is no longer restarted more than 2 times in 25s on alpha"),
        "{lines:?}"
    );
}

/// A take-over: the leader counts a job's three restarts into the shared store and fires; a
/// replica started only then (its view never saw a restart) takes the Lease when the leader
/// is SIGKILLed, reads the counted times, fires again (kept from the plugin by the shared
/// cursor) and resolves once when the window passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counting_timer_fires_once_across_a_leader_take_over() {
    let (sim, _dir, root, prefix) =
        elected("count_takeover", |root, sim| counting_folder(root, sim, 30)).await;

    let mut a = Relay::start(&root, "replica a");
    wait_log(&a, TOOK).await;
    let mut job = JobDriver::builder(Flavor::PyTorch, "ml", "flaky")
        .pace(Pace::Wall)
        .create(&sim)
        .expect("create");
    job.running().expect("running");
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(1100)).await;
        job.restarting().expect("restarting");
        tokio::time::sleep(Duration::from_millis(1100)).await;
        job.running().expect("running again");
    }
    wait_timer_lines(&root, 1, &a).await;

    let b = Relay::start(&root, "replica b");
    wait_log(&b, WAITING).await;
    a.sigkill().await;
    let took = wait_log(&b, TOOK).await;
    eprintln!("replica b took the Lease after {took:?}");
    poll(DEADLINE, || {
        let log = b.log();
        let took_at = log.find(TOOK).unwrap_or(log.len());
        log[took_at..]
            .contains("timer firing")
            .then_some(())
            .ok_or_else(|| {
                format!(
                    "the new leader never counted the stored restarts\n{}",
                    b.tail()
                )
            })
    })
    .await
    .unwrap_or_else(|why| panic!("{why}"));
    wait_timer_lines(&root, 2, &b).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let kinds: Vec<String> = timer_lines(&root).into_iter().map(|(k, _, _)| k).collect();
    assert_eq!(kinds, ["rule-firing", "rule-resolved"], "{}", b.tail());
    drop(b);
    drop_tables(&mysql_url(), &prefix)
        .await
        .expect("drop the test tables");
}
