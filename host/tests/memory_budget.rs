//! The event memory budget, attacked with a backlog far larger than it: about 10,000 versions
//! queued behind a throttled plugin while the daemon may keep only 1 MiB of events (a few
//! hundred) in memory.
//!
//! Two event-log plugins take every version of 3,400 Volcano jobs (three each: created,
//! running, succeeded): `witness`, unlimited, shows what the daemon read; `slow`,
//! held to 20 calls a second, falls thousands behind, so nearly all of its queue waits only in
//! the inbox. Meanwhile `/status` must show the events held within the budget and the rest
//! spilled. The daemon is then SIGKILLed, every job deleted while it is down, the slow plugin's
//! limit lifted (as an operator would, to catch up), and a new process started on the same
//! state: `slow` must receive every version `witness` saw — read back from the inbox, in each
//! job's order — and repeat none but the calls the kill cut short.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use jobrelay_testkit::{Flavor, JobDriver, SimCluster};
use serde_json::Value;

use crate::common::store::drop_tables;
use crate::common::{mysql_url, unique_prefix};
use crate::failover::{TOOK, WAITING, elect};
use crate::process::{
    CONCURRENCY, DEADLINE, Relay, plugin_dir, read_lines, status, str_of, wait_log, write,
};

const JOBS: usize = 3_400;
const BUDGET_MB: u64 = 1;

/// The main file with the 1 MiB budget (and the telemetry endpoint at `listen`), the
/// simulated cluster, and the two plugins, `slow` held to 20 calls a second.
pub(crate) fn config_folder(root: &Path, sim: &SimCluster, listen: Option<std::net::SocketAddr>) {
    let telemetry = listen
        .map(|at| format!("telemetry: {{listen: \"{at}\"}}\n"))
        .unwrap_or_default();
    write(
        &root.join("jobrelay.yaml"),
        &format!(
            "plugin_dir: {}\nstate: {{path: state/jobrelay.db}}\ndebounce_ms: 100\n\
             rescan_seconds: 2\nevent_memory_mb: {BUDGET_MB}\n{telemetry}\
             kinds:\n  - {{name: volcano-job}}\n",
            plugin_dir().display()
        ),
    );
    write(&root.join("clusters/alpha.yaml"), &sim.kubeconfig_yaml());
    plugin(root, "witness", "");
    plugin(root, "slow", "rate_limits: [{per_second: 20}]\n");
}

/// An event-log plugin writing to `out/NAME/events.jsonl`, with `limits` in its manifest.
pub(crate) fn plugin(root: &Path, name: &str, limits: &str) {
    write(
        &root.join(format!("plugins/{name}.yaml")),
        &format!(
            "wasm: event-log.wasm\ndelivery: every-version\nconcurrency: {CONCURRENCY}\n\
             {limits}grants:\n  filesystem:\n    - {{host: out/{name}, guest: /data, writable: true}}\n\
             config:\n  file: events.jsonl\n"
        ),
    );
}

/// The versions a plugin logged, by job uid, in the order it received them (deletions left
/// out: the jobs were deleted while the daemon was down, so only the restart sees those).
fn versions(config: &Path, plugin: &str) -> BTreeMap<String, Vec<String>> {
    let (lines, _) = read_lines(&config.join(format!("out/{plugin}/events.jsonl")));
    let mut by_job: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in &lines {
        if str_of(line, "phase") == "deleted" {
            continue;
        }
        by_job
            .entry(str_of(line, "uid").to_string())
            .or_default()
            .push(str_of(line, "resource_version").to_string());
    }
    by_job
}

/// `jobs` Volcano jobs, each created, running and succeeded.
pub(crate) fn create_jobs(sim: &SimCluster, jobs: usize) -> Vec<JobDriver> {
    let mut drivers = Vec::new();
    for i in 0..jobs {
        // No pods: the simulator's garbage collection of a deleted job's pods scans every
        // object, and thousands of them would make the deletes take minutes.
        let mut driver = JobDriver::builder(Flavor::Volcano, "ml", &format!("train-{i}"))
            .without_pods()
            .create(sim)
            .expect("create a job");
        driver.running().expect("running");
        drivers.push(driver);
    }
    for driver in &mut drivers {
        driver.succeeded().expect("succeeded");
    }
    drivers
}

/// What `witness` logged, once it has every job's end and nothing new for a second (and, with
/// the daemon's telemetry address, once its lane is drained).
pub(crate) async fn witnessed(
    config: &Path,
    jobs: usize,
    relay: &Relay,
    listen: Option<std::net::SocketAddr>,
) -> BTreeMap<String, Vec<String>> {
    let started = Instant::now();
    loop {
        let witness = versions(config, "witness");
        let ended = witness.values().filter(|v| v.len() >= 3).count();
        let drained = match listen {
            Some(listen) => status(listen)
                .await
                .is_some_and(|s| number(&s, "/plugins/witness/lane/pending") == 0),
            None => true,
        };
        if ended == jobs && drained {
            // Settled once a second passes with nothing new (a job's end is not always its
            // last version).
            let count: usize = witness.values().map(Vec::len).sum();
            tokio::time::sleep(Duration::from_secs(1)).await;
            let mut now = versions(config, "witness");
            if now.values().map(Vec::len).sum::<usize>() == count {
                // A version the witness got twice (its cursor not stored) counts once.
                for versions in now.values_mut() {
                    versions.dedup();
                }
                return now;
            }
            continue;
        }
        assert!(
            started.elapsed() < DEADLINE * 3,
            "witness logged the end of {ended} of {jobs} jobs\n{}",
            relay.tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub(crate) fn logged(config: &Path, plugin: &str) -> usize {
    versions(config, plugin).values().map(Vec::len).sum()
}

pub(crate) fn free_listen() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
}

fn number(status: &Value, pointer: &str) -> u64 {
    status.pointer(pointer).and_then(Value::as_u64).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_versions_wait_in_the_inbox_within_the_budget_and_survive_sigkill() {
    let sim = SimCluster::start("alpha").await.expect("simulator");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().to_path_buf();
    let listen = free_listen();
    config_folder(&config, &sim, Some(listen));

    let mut relay = Relay::start(&config, "before the kill");
    let started = Instant::now();
    while relay.log().matches("plugin version serving").count() < 2 {
        assert!(
            started.elapsed() < DEADLINE,
            "the plugins' lanes\n{}",
            relay.tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Sampled from the first job written until the kill.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = tokio::spawn({
        let stop = stop.clone();
        async move {
            let (mut held, mut spilled, mut limit) = (0u64, 0u64, 0u64);
            let (mut unstored, mut ahead, mut written) = (0u64, 0u64, 0u64);
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                if let Some(s) = status(listen).await {
                    held = held.max(number(&s, "/event_memory/held_bytes"));
                    spilled = spilled.max(number(&s, "/event_memory/spilled_events"));
                    limit = number(&s, "/event_memory/limit_bytes");
                    unstored = unstored.max(number(&s, "/event_memory/unstored_bytes"));
                    ahead = number(&s, "/event_memory/write_ahead_bytes");
                    written = number(&s, "/plugins/slow/lane/inbox_written");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            (held, spilled, limit, (unstored, ahead, written))
        }
    });
    let mut drivers = create_jobs(&sim, JOBS);
    let seen = witnessed(&config, JOBS, &relay, Some(listen)).await;
    let total: usize = seen.values().map(Vec::len).sum();
    let before = logged(&config, "slow");
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (held, spilled, limit, (unstored, ahead, written)) = sampler.await.expect("sampler");
    println!(
        "{total} versions read; at most {held} bytes held (limit {limit}), {unstored} not yet \
         in the inbox (write-ahead {ahead}), {spilled} spilled; slow had {before} when killed, \
         its lane had stored {written} in the inbox"
    );
    assert_eq!(limit, BUDGET_MB << 20, "the budget is the configured one");
    assert_eq!(ahead, 256 << 10, "a 1 MiB budget writes 256 KiB ahead");
    // What a kill could take along: accepted, not yet stored. Past the write-ahead by at
    // most what one observation adds before the dispatcher waits again.
    assert!(
        unstored <= ahead + (64 << 10),
        "{unstored} bytes of accepted events waited to be stored, write-ahead {ahead}"
    );
    assert!(
        spilled >= 1_000,
        "the slow lane's backlog was meant to wait in the inbox, but at most {spilled} did"
    );
    // A lane that trails stores what it took (its takes fall due before their calls), and
    // `/status` counts them.
    assert!(
        written >= 1_000 && written as usize <= total,
        "the slow lane stored {written} of {total} versions in the inbox"
    );
    // Over the limit only by what one observation adds before the dispatcher waits again.
    assert!(
        held <= limit + (256 << 10),
        "{held} bytes of events held in memory with a budget of {limit}"
    );
    assert!(
        before < total / 2,
        "slow was meant to be far behind at the kill: {before} of {total}"
    );
    relay.sigkill().await;
    for driver in &mut drivers {
        driver.delete().expect("delete while the daemon is down");
    }
    plugin(&config, "slow", "");

    let relay = Relay::start(&config, "after the kill");
    let repeated = every_version_in_order(&config, &seen, &relay, before).await;
    println!("after the restart: every version delivered, {repeated} repeated");
}

/// Waits until `slow` has logged every version `witness` saw (`seen`), then checks that each
/// job's versions came in the witness's order, a version repeated by the kill only right after
/// itself; returns how many were repeated (at most the calls in flight at the kill).
pub(crate) async fn every_version_in_order(
    config: &Path,
    seen: &BTreeMap<String, Vec<String>>,
    relay: &Relay,
    before: usize,
) -> usize {
    let total: usize = seen.values().map(Vec::len).sum();
    let deadline = Instant::now() + DEADLINE * 4;
    loop {
        let got = versions(config, "slow");
        let missing: usize = seen
            .iter()
            .map(|(uid, versions)| {
                let have: BTreeSet<&String> = got.get(uid).into_iter().flatten().collect();
                versions.iter().filter(|v| !have.contains(v)).count()
            })
            .sum();
        if missing == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{missing} of {total} versions never reached the slow plugin ({before} before the kill)\n{}",
            relay.tail()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let got = versions(config, "slow");
    let mut repeated = 0;
    for (uid, versions) in &got {
        let mut distinct = versions.clone();
        distinct.dedup();
        repeated += versions.len() - distinct.len();
        assert_eq!(
            &distinct, &seen[uid],
            "job {uid}: the slow plugin's versions are not the witness's, in order"
        );
    }
    assert!(
        repeated <= CONCURRENCY,
        "{repeated} versions repeated: more than the calls in flight at the kill"
    );
    repeated
}

/// The same backlog through a leader take-over: two replicas elect through a Lease, the
/// state on MariaDB; the leader is SIGKILLed with thousands of versions waiting in its slow
/// lane (most only in the inbox), every job is deleted, and the follower that takes the Lease
/// over delivers every version from the shared inbox, in each job's order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_in_the_inbox_survives_a_leader_take_over_on_mariadb() {
    const JOBS: usize = 1_200;
    let sim = SimCluster::start("alpha").await.expect("simulator");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().to_path_buf();
    config_folder(&config, &sim, None);
    let prefix = format!("{}_", unique_prefix("budgetfail"));
    elect(&config, &sim, &prefix);
    // The new leader resumes thousands of events and lists the cluster again the moment it
    // takes over, beside a simulator deleting 1,200 jobs in this process: on two busy cores a
    // 2 s renew deadline can pass, and a replica that cannot renew stops, as it must. This
    // test is about the inbox, so its Lease gives renewals more room.
    let main = config.join("jobrelay.yaml");
    let text = std::fs::read_to_string(&main).expect("main file");
    let roomy = text
        .replace("lease_duration_seconds: 3", "lease_duration_seconds: 10")
        .replace("renew_deadline_seconds: 2", "renew_deadline_seconds: 7");
    assert_ne!(
        text, roomy,
        "the Lease timings are where elect() writes them"
    );
    std::fs::write(&main, roomy).expect("main file");

    let a = Relay::start(&config, "replica a");
    wait_log(&a, TOOK).await;
    let b = Relay::start(&config, "replica b");
    wait_log(&b, WAITING).await;
    let mut drivers = create_jobs(&sim, JOBS);
    let seen = witnessed(&config, JOBS, &a, None).await;
    let before = logged(&config, "slow");
    let total: usize = seen.values().map(Vec::len).sum();
    assert!(
        before < total / 2,
        "slow was meant to be far behind at the kill: {before} of {total}"
    );
    let mut a = a;
    a.sigkill().await;
    for driver in &mut drivers {
        driver.delete().expect("delete while no replica leads");
    }
    plugin(&config, "slow", "");
    wait_log(&b, TOOK).await;
    let repeated = every_version_in_order(&config, &seen, &b, before).await;
    println!(
        "take-over: {total} versions, {before} delivered by the killed leader, every version \
         delivered by the new one, {repeated} repeated"
    );
    drop(b);
    drop_tables(&mysql_url(), &prefix)
        .await
        .expect("drop the test's tables");
}

/// Rows of the inbox damaged by hand while the daemon is down — one event's JSON cut short,
/// another event's row deleted from under its mark — are refused by name when the next
/// process resumes the inbox, and every other waiting version flows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_inbox_rows_are_refused_by_name_and_the_rest_flow() {
    const JOBS: usize = 300;
    let sim = SimCluster::start("alpha").await.expect("simulator");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().to_path_buf();
    config_folder(&config, &sim, None);
    let mut relay = Relay::start(&config, "before the damage");
    wait_log(&relay, "plugin version serving").await;
    let mut drivers = create_jobs(&sim, JOBS);
    let mut seen = witnessed(&config, JOBS, &relay, None).await;
    let before = logged(&config, "slow");
    relay.sigkill().await;
    for driver in &mut drivers {
        driver.delete().expect("delete while the daemon is down");
    }

    // The last two events the slow plugin took and had not settled.
    let db = config.join("state/jobrelay.db");
    let options = sqlx::sqlite::SqliteConnectOptions::new().filename(&db);
    let mut conn = sqlx::ConnectOptions::connect(&options)
        .await
        .expect("open the state file");
    let damaged: Vec<String> = sqlx::query_scalar(
        "SELECT event_id FROM inbox_marks WHERE plugin = 'slow' ORDER BY seq DESC LIMIT 2",
    )
    .fetch_all(&mut conn)
    .await
    .expect("the slow plugin's marks");
    assert_eq!(damaged.len(), 2, "the slow plugin had a backlog");
    sqlx::query("UPDATE inbox_events SET event_json = '{\"id\": ' WHERE event_id = ?")
        .bind(&damaged[0])
        .execute(&mut conn)
        .await
        .expect("cut one event short");
    sqlx::query("DELETE FROM inbox_events WHERE event_id = ?")
        .bind(&damaged[1])
        .execute(&mut conn)
        .await
        .expect("delete another");
    drop(conn);
    // Neither is expected any more: an id is `cluster/uid/version`.
    for id in &damaged {
        let mut parts = id.rsplitn(2, '/');
        let (version, job) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let uid = job.rsplit('/').next().unwrap_or("");
        if let Some(versions) = seen.get_mut(uid) {
            versions.retain(|v| v != version);
        }
    }
    plugin(&config, "slow", "");

    let relay = Relay::start(&config, "after the damage");
    let repeated = every_version_in_order(&config, &seen, &relay, before).await;
    let log = relay.log();
    for id in &damaged {
        assert!(
            log.lines()
                .any(|l| l.contains("an inbox entry cannot be read") && l.contains(id.as_str())),
            "{id} is not named as refused\n{}",
            relay.tail()
        );
    }
    println!(
        "two damaged rows refused by name, every other version delivered, {repeated} repeated"
    );
}

/// A rolling restart under load: jobs keep finishing while the daemon is stopped with SIGTERM
/// (its slow lane thousands behind) and a new process starts on the same state. Every version
/// read before the stop reaches the slow plugin, every job's end reaches it — read by the new
/// process, or rebuilt from the object — and nothing is repeated (a SIGTERM lets the calls in
/// flight finish and store their cursors).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_under_load_loses_nothing() {
    const JOBS: usize = 600;
    let sim = SimCluster::start("alpha").await.expect("simulator");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().to_path_buf();
    config_folder(&config, &sim, None);
    let mut relay = Relay::start(&config, "before the rollout");
    wait_log(&relay, "plugin version serving").await;
    let mut drivers = Vec::new();
    for i in 0..JOBS {
        let mut driver = JobDriver::builder(Flavor::Volcano, "ml", &format!("train-{i}"))
            .without_pods()
            .create(&sim)
            .expect("create a job");
        driver.running().expect("running");
        drivers.push(driver);
    }
    // The jobs end over about six seconds, the rollout in the middle of it.
    let ending = tokio::task::spawn_blocking(move || {
        for driver in &mut drivers {
            driver.succeeded().expect("succeeded");
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    relay.signal("TERM");
    let status = relay.exit_within(Duration::from_secs(12)).await;
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "SIGTERM ends the run with code 0\n{}",
        relay.tail()
    );
    let mut read = versions(&config, "witness");
    for versions in read.values_mut() {
        versions.dedup();
    }
    let before = logged(&config, "slow");
    plugin(&config, "slow", "");
    let relay = Relay::start(&config, "after the rollout");
    ending.await.expect("every job ends");

    let started = Instant::now();
    let ended = |plugin: &str| -> BTreeSet<String> {
        let (lines, _) = read_lines(&config.join(format!("out/{plugin}/events.jsonl")));
        lines
            .iter()
            .filter(|l| str_of(l, "phase") == "succeeded")
            .map(|l| str_of(l, "uid").to_string())
            .collect()
    };
    while ended("slow").len() < JOBS {
        assert!(
            started.elapsed() < DEADLINE * 2,
            "{} of {JOBS} jobs' ends reached the slow plugin\n{}",
            ended("slow").len(),
            relay.tail()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let got = versions(&config, "slow");
    let mut repeated = 0;
    for (uid, versions) in &got {
        let mut distinct = versions.clone();
        distinct.dedup();
        repeated += versions.len() - distinct.len();
        let have: BTreeSet<&String> = distinct.iter().collect();
        let missing: Vec<&String> = read
            .get(uid)
            .into_iter()
            .flatten()
            .filter(|v| !have.contains(v))
            .collect();
        assert!(
            missing.is_empty(),
            "job {uid}: versions read before the rollout never reached the slow plugin: {missing:?}"
        );
    }
    let total: usize = read.values().map(Vec::len).sum();
    println!(
        "rollout: {total} versions read before the stop ({before} delivered), every one and \
         all {JOBS} ends delivered after it, {repeated} repeated"
    );
    assert_eq!(repeated, 0, "a SIGTERM repeats nothing");
}
