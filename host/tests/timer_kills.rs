//! Timers across kills: the real daemon, SIGKILLed at seeded moments, judges `fleet.timers` on
//! jobs the simulator holds, and event-log (taking rule fleet events) writes what reached it.
//! A job that stays pending past its timer is told once, however often the daemon is killed
//! and started again while it waits; its resolution once, when it runs; a job that moves on in
//! time never. Nothing of the timers is stored: each new process judges the stays again from
//! the jobs' objects, and the lanes' cursors keep a repeat from the plugin.

use std::time::Duration;

use serde_json::Value;

use jobrelay_testkit::{Flavor, JobDriver, Pace, SimCluster};

use crate::process::{
    DEADLINE, Relay, Rng, plugin_dir, poll, read_lines, soak_seed, str_of, write,
};

fn config_folder(root: &std::path::Path, sim: &SimCluster) {
    write(
        &root.join("jobrelay.yaml"),
        &format!(
            "plugin_dir: {}\nstate: {{path: state/jobrelay.db}}\ndebounce_ms: 100\n\
             kinds: [{{name: batch-job}}]\n\
             fleet:\n  evaluate_interval_ms: 200\n\
             \x20 timers:\n\
             \x20   - {{name: pending-long, state: pending, longer_than: 3s, kinds: [batch-job]}}\n\
             \x20   - {{name: running-long, state: running, longer_than: 1h}}\n",
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
    poll(DEADLINE, || {
        (timer_lines(&root).len() >= 2)
            .then_some(())
            .ok_or_else(|| format!("no resolution yet\n{}", relay.tail()))
    })
    .await
    .unwrap_or_else(|why| panic!("{why}"));
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
    use crate::common::store::drop_tables;
    use crate::common::{mysql_url, unique_prefix};
    use crate::failover::{TOOK, WAITING, elect};
    use crate::process::wait_log;

    let sim = SimCluster::start("alpha").await.expect("simulator");
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().to_path_buf();
    config_folder(&root, &sim);
    let prefix = format!("{}_", unique_prefix("timer_takeover"));
    elect(&root, &sim, &prefix);

    let mut a = Relay::start(&root, "replica a");
    wait_log(&a, TOOK).await;
    let b = Relay::start(&root, "replica b");
    wait_log(&b, WAITING).await;
    let mut waiting = JobDriver::builder(Flavor::Batch, "ml", "waits")
        .pace(Pace::Wall)
        .create(&sim)
        .expect("create");
    poll(DEADLINE, || {
        (!timer_lines(&root).is_empty())
            .then_some(())
            .ok_or_else(|| format!("no firing yet\n{}", a.tail()))
    })
    .await
    .unwrap_or_else(|why| panic!("{why}"));

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
    poll(DEADLINE, || {
        (timer_lines(&root).len() >= 2)
            .then_some(())
            .ok_or_else(|| format!("no resolution yet\n{}", b.tail()))
    })
    .await
    .unwrap_or_else(|why| panic!("{why}"));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let kinds: Vec<String> = timer_lines(&root).into_iter().map(|(k, _, _)| k).collect();
    assert_eq!(kinds, ["rule-firing", "rule-resolved"]);
    drop(b);
    drop_tables(&mysql_url(), &prefix)
        .await
        .expect("drop the test tables");
}
