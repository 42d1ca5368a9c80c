//! Three `jobrelay run` processes sharing six simulated clusters (`coordination.mode:
//! sharded`), with the state store on MariaDB, while jobs run their lifecycles on every
//! cluster: one replica is killed with SIGKILL and its clusters move to the survivors once
//! their Leases expire; it comes back and takes its share again by clean hand-over.
//!
//! The simulated home cluster holds the Leases. Every 50 ms the test reads who holds each
//! cluster's Lease and what each replica has delivered since the last look; every event a
//! replica delivered must be of a cluster whose Lease that replica held at one end of the
//! window it was delivered in. Across all of it every final state is delivered, repeats are
//! bounded by the calls in flight at the kill, and the shared cursors end at every job's
//! current version.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jobrelay_coordination::rendezvous;
use jobrelay_state::StateBackend;
use jobrelay_testkit::{Gvr, SimCluster};
use serde_json::Value;

use crate::common::store::drop_tables;
use crate::common::{mysql_url, unique_prefix};
use crate::process::{
    CONCURRENCY, DEADLINE, Played, Relay, Rng, assert_cursors_current, count_ids, cursors, drive,
    missing_finals, plan_jobs, plugin_dir, poll, read_lines, soak_seed, str_of, write,
};

const CLUSTERS: usize = 6;
const JOBS_PER_CLUSTER: usize = 5;
const GROUP: &str = "relay";
const NAMESPACE: &str = "jobrelay";

pub(crate) fn cluster_name(i: usize) -> String {
    format!("c{i}")
}

/// One replica's config folder: all six clusters, the event-log plugin writing to its own
/// file, the shared store, sharding with short Lease timings.
fn folder(
    home: &SimCluster,
    sims: &[SimCluster],
    identity: &str,
    prefix: &str,
) -> tempfile::TempDir {
    sharded_folder(
        home,
        sims,
        (GROUP, identity),
        prefix,
        "",
        &format!(
            "wasm: event-log.wasm\ndelivery: every-version\ntimeout_ms: 5000\nconcurrency: {CONCURRENCY}\n\
             grants:\n  filesystem:\n    - {{host: out/log, guest: /data, writable: true}}\n\
             config:\n  file: events.jsonl\n"
        ),
    )
}

/// A sharded replica's config folder: `sims` as clusters `c0`, `c1`, …, the state on the test
/// MariaDB under `prefix`, Leases of `group` in the home cluster (3 s, renewed within 2 s,
/// tried every second) held as `identity`, `main` added to the main file, and `log` as the
/// manifest `plugins/log.yaml`.
pub(crate) fn sharded_folder(
    home: &SimCluster,
    sims: &[SimCluster],
    (group, identity): (&str, &str),
    prefix: &str,
    main: &str,
    log: &str,
) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    write(
        &root.join("jobrelay.yaml"),
        &format!(
            "plugin_dir: {}\nstate: {{url: \"{}\", table_prefix: {prefix}}}\n\
             debounce_ms: 100\nrescan_seconds: 2\n{main}\
             coordination:\n  mode: sharded\n  kubeconfig: home.kubeconfig\n  namespace: {NAMESPACE}\n  \
             lease_name: {group}\n  identity: {identity}\n  lease_duration_seconds: 3\n  \
             renew_deadline_seconds: 2\n  retry_period_seconds: 1\n",
            plugin_dir().display(),
            mysql_url()
        ),
    );
    write(&root.join("home.kubeconfig"), &home.kubeconfig_yaml());
    for (i, sim) in sims.iter().enumerate() {
        write(
            &root.join(format!("clusters/{}.yaml", cluster_name(i))),
            &sim.kubeconfig_yaml(),
        );
    }
    write(&root.join("plugins/log.yaml"), log);
    dir
}

/// Holder of each cluster's Lease, as the home cluster has it now.
fn holders(home: &SimCluster) -> BTreeMap<String, String> {
    lease_holders(home, GROUP)
}

/// Holder of each cluster's Lease of `group`, as the home cluster has it now.
pub(crate) fn lease_holders(home: &SimCluster, group: &str) -> BTreeMap<String, String> {
    let leases = home.list(&Gvr::LEASE, Some(NAMESPACE)).unwrap_or_default();
    leases
        .iter()
        .filter_map(|l| {
            let name = l["metadata"]["name"].as_str()?;
            let cluster = name.strip_prefix(&format!("{group}-cluster-"))?;
            let holder = l["spec"]["holderIdentity"].as_str()?;
            Some((cluster.to_string(), holder.to_string()))
        })
        .collect()
}

/// Waits until every cluster's Lease is held by its rendezvous owner among `members`.
async fn settled(home: &SimCluster, members: &[&str]) -> Duration {
    settled_on(home, GROUP, CLUSTERS, members).await
}

/// The rendezvous owner among `members` of each of the first `clusters` clusters.
pub(crate) fn owners(clusters: usize, members: &[&str]) -> BTreeMap<String, String> {
    (0..clusters)
        .map(|i| {
            let c = cluster_name(i);
            let owner = rendezvous::owner(&c, members.iter().copied()).expect("members");
            (c, owner.to_string())
        })
        .collect()
}

/// Waits until each of the first `clusters` clusters' Lease of `group` is held by its
/// rendezvous owner among `members`; how long that took.
pub(crate) async fn settled_on(
    home: &SimCluster,
    group: &str,
    clusters: usize,
    members: &[&str],
) -> Duration {
    let started = Instant::now();
    let expected = owners(clusters, members);
    let done = poll(DEADLINE, || {
        let now = lease_holders(home, group);
        if now == expected {
            Ok(())
        } else {
            Err(format!("holders {now:?}, expected {expected:?}"))
        }
    })
    .await;
    if let Err(why) = done {
        panic!("the clusters never settled on {members:?}: {why}");
    }
    started.elapsed()
}

/// What the sampler saw.
#[derive(Default)]
struct Samples {
    /// Lines read so far from each replica's event file.
    seen: BTreeMap<String, usize>,
    /// Events delivered by a replica that held its cluster's Lease at neither end of the
    /// window they appeared in.
    violations: Vec<String>,
    windows: usize,
}

fn sample(
    home: &SimCluster,
    files: &[(String, PathBuf)],
    before: &BTreeMap<String, String>,
    out: &mut Samples,
) -> BTreeMap<String, String> {
    let after = holders(home);
    for (replica, file) in files {
        let (lines, _) = read_lines(file);
        let from = out.seen.get(replica).copied().unwrap_or(0);
        for line in lines.iter().skip(from) {
            let cluster = str_of(line, "cluster");
            let held = before.get(cluster) == Some(replica) || after.get(cluster) == Some(replica);
            if !held {
                out.violations.push(format!(
                    "{replica} delivered {} of {cluster} while {:?} / {:?} held it",
                    str_of(line, "id"),
                    before.get(cluster),
                    after.get(cluster)
                ));
            }
        }
        out.seen.insert(replica.clone(), lines.len().max(from));
    }
    out.windows += 1;
    after
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_clusters_over_three_replicas_through_a_death_and_a_return() {
    let seed = soak_seed();
    println!("seed {seed} (JOBRELAY_SOAK_SEED={seed} replays this schedule)");
    let mut rng = Rng(seed);
    let prefix = unique_prefix("shard");
    let url = mysql_url();

    let home = SimCluster::start("home").await.expect("home simulator");
    let mut sims = Vec::new();
    for i in 0..CLUSTERS {
        sims.push(
            SimCluster::start(&cluster_name(i))
                .await
                .expect("simulator"),
        );
    }
    let identities = ["r1", "r2", "r3"];
    let dirs: Vec<tempfile::TempDir> = identities
        .iter()
        .map(|id| folder(&home, &sims, id, &format!("{prefix}_")))
        .collect();
    let files: Vec<(String, PathBuf)> = identities
        .iter()
        .zip(&dirs)
        .map(|(id, d)| (id.to_string(), d.path().join("out/log/events.jsonl")))
        .collect();
    let config = |i: usize| -> &Path { dirs[i].path() };

    let mut relays: BTreeMap<&str, Relay> = BTreeMap::new();
    for (i, id) in identities.iter().enumerate() {
        relays.insert(id, Relay::start(config(i), id));
    }
    let took = settled(&home, &identities).await;
    println!(
        "three replicas hold all {CLUSTERS} clusters after {took:?}: {:?}",
        holders(&home)
    );

    // The sampler: Lease holders and new deliveries, every 50 ms, until told to stop.
    let samples = Arc::new(Mutex::new(Samples::default()));
    let stop = tokio_util::sync::CancellationToken::new();
    let sampler = {
        let (home, files, samples, stop) =
            (home.clone(), files.clone(), samples.clone(), stop.clone());
        tokio::spawn(async move {
            let mut before = holders(&home);
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                    _ = stop.cancelled() => break,
                }
                let mut out = samples.lock().unwrap_or_else(|p| p.into_inner());
                before = sample(&home, &files, &before, &mut out);
            }
        })
    };

    let mut drivers = Vec::new();
    for sim in &sims {
        let plans = plan_jobs(&mut rng, JOBS_PER_CLUSTER);
        drivers.push(tokio::spawn(drive(sim.clone(), plans)));
    }

    // Kill the replica holding the most clusters, after the last job is created (within 9 s)
    // while jobs still change and finish: a job created and deleted entirely while nobody
    // watches its cluster leaves no trace in the API to deliver.
    tokio::time::sleep(Duration::from_millis(rng.range(10_000, 12_000))).await;
    let held = holders(&home);
    let victim = identities
        .iter()
        .copied()
        .max_by_key(|id| held.values().filter(|h| h.as_str() == *id).count())
        .expect("replicas");
    let victim_clusters: Vec<&String> = held
        .iter()
        .filter(|(_, h)| h.as_str() == victim)
        .map(|(c, _)| c)
        .collect();
    let mut dead = relays.remove(victim).expect("victim runs");
    dead.sigkill().await;
    let killed = Instant::now();
    println!("SIGKILLed {victim}, which held {victim_clusters:?}");

    let survivors: Vec<&str> = identities
        .iter()
        .copied()
        .filter(|id| *id != victim)
        .collect();
    settled(&home, &survivors).await;
    println!(
        "its clusters moved to {survivors:?} {:?} after the kill (Leases: 3 s)",
        killed.elapsed()
    );

    // A second wave of jobs on every cluster; once all of them exist, the killed replica comes
    // back under its name (as a restarted pod keeps its name) and takes its clusters back from
    // the others by hand-over while the jobs run.
    for sim in &sims {
        let mut plans = plan_jobs(&mut rng, JOBS_PER_CLUSTER);
        for plan in &mut plans {
            plan.name = format!("late-{}", plan.name);
        }
        drivers.push(tokio::spawn(drive(sim.clone(), plans)));
    }
    tokio::time::sleep(Duration::from_millis(rng.range(10_000, 11_000))).await;
    let returned = Instant::now();
    let index = identities
        .iter()
        .position(|id| *id == victim)
        .expect("the victim is one of them");
    relays.insert(
        victim,
        Relay::start(config(index), &format!("{victim}, back")),
    );
    settled(&home, &identities).await;
    println!(
        "{victim} came back; clusters rebalanced after {:?}: {:?}",
        returned.elapsed(),
        holders(&home)
    );

    let mut played: Vec<(usize, Vec<Played>)> = Vec::new();
    for (n, driver) in drivers.into_iter().enumerate() {
        played.push((
            n % CLUSTERS,
            driver
                .await
                .expect("driver task")
                .expect("driver plays every step"),
        ));
    }
    let all_lines = || -> Vec<Value> { files.iter().flat_map(|(_, f)| read_lines(f).0).collect() };
    let delivered = poll(DEADLINE, || {
        let lines = all_lines();
        let missing: Vec<String> = played
            .iter()
            .flat_map(|(i, p)| {
                let of: Vec<Value> = lines
                    .iter()
                    .filter(|l| str_of(l, "cluster") == cluster_name(*i))
                    .cloned()
                    .collect();
                missing_finals(p, &of)
                    .into_iter()
                    .map(move |m| format!("c{i}/{m}"))
            })
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(missing.join(", "))
        }
    })
    .await;
    if let Err(missing) = delivered {
        let mut notes = Vec::new();
        for relay in relays.values().chain(std::iter::once(&dead)) {
            notes.extend(
                relay
                    .log()
                    .lines()
                    .filter(|l| {
                        l.contains("WARN")
                            || l.contains("ERROR")
                            || l.contains("shards")
                            || l.contains("cluster stopped")
                    })
                    .map(str::to_string),
            );
        }
        for (id, f) in &files {
            for l in read_lines(f).0 {
                notes.push(format!(
                    "{id}: {} {} {} {}",
                    str_of(&l, "cluster"),
                    str_of(&l, "name"),
                    str_of(&l, "phase"),
                    str_of(&l, "resource_version")
                ));
            }
        }
        panic!(
            "final states never delivered: {missing}\n{}",
            notes.join("\n")
        );
    }
    stop.cancel();
    sampler.await.expect("sampler");

    for (id, relay) in relays.iter_mut() {
        relay.signal("TERM");
        let status = relay.exit_within(Duration::from_secs(30)).await;
        assert_eq!(
            status.and_then(|s| s.code()),
            Some(0),
            "{id} stops cleanly\n{}",
            relay.tail()
        );
    }

    {
        let samples = samples.lock().unwrap_or_else(|p| p.into_inner());
        println!("sampled {} windows of 50 ms", samples.windows);
        assert!(
            samples.violations.is_empty(),
            "events delivered by a replica without its cluster's Lease:\n{}",
            samples.violations.join("\n")
        );
    }
    let lines = all_lines();
    let (per_id, repeated) = count_ids(&lines);
    let by_replica: BTreeMap<&str, usize> = files
        .iter()
        .map(|(id, f)| (id.as_str(), read_lines(f).0.len()))
        .collect();
    println!(
        "events delivered: {} lines ({by_replica:?}), {} distinct, {} repeated (bound: concurrency {CONCURRENCY} x 1 kill)",
        lines.len(),
        per_id.len(),
        repeated.len()
    );
    assert!(
        repeated.iter().all(|(_, n)| *n <= 2) && repeated.len() <= CONCURRENCY,
        "more repeats than calls in flight at the kill: {repeated:?}"
    );
    let used: BTreeSet<&str> = by_replica
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(id, _)| *id)
        .collect();
    assert!(
        used.len() >= 3,
        "the work was spread over the replicas, before and after the kill: {by_replica:?}"
    );

    let state = StateBackend::MySql {
        url: url.clone(),
        table_prefix: format!("{prefix}_"),
    };
    let stored = cursors(&state, "log").await;
    for (i, p) in &played {
        assert_cursors_current(&sims[*i], &cluster_name(*i), &stored, p);
    }
    drop_tables(&url, &format!("{prefix}_"))
        .await
        .expect("drop the test tables");
}

/// A sharded replica whose Leases cannot be written (the home cluster refuses every write)
/// holds no cluster and delivers nothing — and says so: `attention` names why, and
/// `jobrelay_leader` reads 0. Once writes go through again it takes its cluster and the line
/// goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_that_cannot_write_its_leases_says_so() {
    let home = SimCluster::start("home").await.expect("home");
    home.fail_writes(true);
    let sim = SimCluster::start("c0").await.expect("cluster");
    let prefix = unique_prefix("lease_refused");
    let listen = crate::cluster_sources::free_port();
    let dir = sharded_folder(
        &home,
        std::slice::from_ref(&sim),
        ("refused", "r1"),
        &format!("{prefix}_"),
        &format!("telemetry: {{listen: \"{listen}\"}}\n"),
        "wasm: event-log.wasm\ngrants:\n  filesystem:\n    - {host: out/log, guest: /data, \
         writable: true}\nconfig:\n  file: events.jsonl\n",
    );
    let relay = Relay::start(dir.path(), "r1");
    let said = |s: &Value| {
        s["attention"].as_array().and_then(|lines| {
            lines
                .iter()
                .filter_map(Value::as_str)
                .find(|l| l.starts_with("coordination: cannot read or write"))
                .map(str::to_string)
        })
    };
    let started = Instant::now();
    let line = loop {
        if let Some(line) = crate::process::status(listen).await.as_ref().and_then(said) {
            break line;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "no attention line\n{}",
            relay.tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(line.ends_with("this replica holds 0 cluster(s)"), "{line}");
    let (_, metrics) = crate::process::http_get(listen, "/metrics")
        .await
        .expect("metrics");
    assert!(metrics.contains("\njobrelay_leader 0"), "{metrics}");

    home.fail_writes(false);
    let started = Instant::now();
    loop {
        if let Some(s) = crate::process::status(listen).await
            && s["coordination"]["owned"].as_array().map(Vec::len) == Some(1)
            && said(&s).is_none()
        {
            break;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "the cluster never taken\n{}",
            relay.tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(relay);
    drop_tables(&mysql_url(), &format!("{prefix}_"))
        .await
        .expect("drop the test tables");
}
