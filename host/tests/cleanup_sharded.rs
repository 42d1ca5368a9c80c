//! Clean-up in sharded mode: two `jobrelay run` replicas share four simulated clusters (state
//! on MariaDB), each holding the Leases of its share. Finished jobs on every cluster are
//! deleted once each, and every deletion is made by the replica that holds its cluster's
//! Lease (each replica logs the jobs it deletes; the clusters' Leases say who holds what).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use jobrelay_coordination::rendezvous;
use jobrelay_testkit::{Flavor, Gvr, JobDriver, Pace, SimCluster};

use crate::common::store::drop_tables;
use crate::common::{mysql_url, unique_prefix};
use crate::process::{DEADLINE, Relay, poll};
use crate::sharding::{cluster_name, lease_holders, sharded_folder};

const CLUSTERS: usize = 4;
const JOBS_PER_CLUSTER: usize = 6;
const GROUP: &str = "tidy";
const REPLICAS: [&str; 2] = ["r1", "r2"];

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
        "kinds: [{name: batch-job}]\n\
         cleanup: {per_cluster_per_second: 20, rules: [{kinds: [batch-job], after_finished: 1s}]}\n",
        "wasm: event-log.wasm\ndelivery: transitions\n\
         grants:\n  filesystem:\n    - {host: out/log, guest: /data, writable: true}\n\
         config:\n  file: events.jsonl\n",
    )
}

fn holders(home: &SimCluster) -> BTreeMap<String, String> {
    lease_holders(home, GROUP)
}

/// The (cluster, job) pairs a replica's log says it deleted.
fn deleted_by(log: &str) -> Vec<(String, String)> {
    log.lines()
        .filter(|l| l.contains("finished job delivered and deleted"))
        .filter_map(|l| {
            let field = |name: &str| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix(&format!("{name}=")))
                    .map(str::to_string)
            };
            Some((field("cluster")?, field("job")?))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_sharded_mode_only_the_owner_of_a_cluster_deletes_its_jobs() {
    let prefix = unique_prefix("tidy");
    let home = SimCluster::start("home").await.expect("home simulator");
    let mut sims = Vec::new();
    for i in 0..CLUSTERS {
        sims.push(
            SimCluster::start(&cluster_name(i))
                .await
                .expect("simulator"),
        );
    }
    let dirs: Vec<tempfile::TempDir> = REPLICAS
        .iter()
        .map(|id| folder(&home, &sims, id, &format!("{prefix}_")))
        .collect();
    let relays: Vec<Relay> = REPLICAS
        .iter()
        .zip(&dirs)
        .map(|(id, d)| Relay::start(d.path(), id))
        .collect();
    let expected: BTreeMap<String, String> = (0..CLUSTERS)
        .map(|i| {
            let c = cluster_name(i);
            let owner = rendezvous::owner(&c, REPLICAS.iter().copied()).expect("members");
            (c, owner.to_string())
        })
        .collect();
    let settled = poll(DEADLINE, || {
        let now = holders(&home);
        if now == expected {
            Ok(())
        } else {
            Err(format!("holders {now:?}, expected {expected:?}"))
        }
    })
    .await;
    if let Err(why) = settled {
        panic!("the clusters never settled: {why}");
    }
    assert!(
        expected.values().any(|h| h == REPLICAS[0]) && expected.values().any(|h| h == REPLICAS[1]),
        "each replica owns some clusters: {expected:?}"
    );

    for sim in &sims {
        for j in 0..JOBS_PER_CLUSTER {
            let mut job = JobDriver::builder(Flavor::Batch, "ml", &format!("j{j}"))
                .pace(Pace::Wall)
                .without_pods()
                .create(sim)
                .expect("create");
            job.running().expect("running");
            job.succeeded().expect("succeeded");
        }
    }
    let started = Instant::now();
    while sims.iter().any(|s| {
        !s.list(&Gvr::BATCH_JOB, Some("ml"))
            .unwrap_or_default()
            .is_empty()
    }) {
        assert!(
            started.elapsed() < DEADLINE,
            "jobs still standing\n{}\n{}",
            relays[0].tail(),
            relays[1].tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        holders(&home),
        expected,
        "the shares did not move meanwhile"
    );

    for (i, sim) in sims.iter().enumerate() {
        let deletions = sim.deletions();
        assert_eq!(
            deletions.len(),
            JOBS_PER_CLUSTER,
            "{}: one DELETE per job: {deletions:#?}",
            cluster_name(i)
        );
        assert!(deletions.iter().all(|d| d.status == 200));
    }
    let mut by_replica: BTreeMap<String, usize> = BTreeMap::new();
    for (relay, id) in relays.iter().zip(REPLICAS) {
        for (cluster, job) in deleted_by(&relay.log()) {
            assert_eq!(
                expected.get(&cluster).map(String::as_str),
                Some(id),
                "{id} deleted {cluster}/{job}, a cluster it does not own"
            );
            *by_replica.entry(id.to_string()).or_default() += 1;
        }
    }
    assert_eq!(
        by_replica.values().sum::<usize>(),
        CLUSTERS * JOBS_PER_CLUSTER,
        "every deletion is in its replica's log: {by_replica:?}"
    );
    drop(relays);
    drop_tables(&mysql_url(), &format!("{prefix}_"))
        .await
        .expect("drop the test tables");
}
