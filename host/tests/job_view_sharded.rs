//! The job view in sharded mode: two, then three `jobrelay run` replicas share four simulated
//! clusters. Each answers for the clusters whose Leases it holds and names the replica that
//! holds each other one (`elsewhere`, a warning, `held_by` on a job it does not hold); between
//! them every job is listed exactly once; and paging through one replica across a hand-over (a
//! third joins between two pages and clusters change hands) answers every page, never lists a
//! job twice, and accounts for every cluster on each page (listed here, or named as elsewhere
//! or not synced).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use jobrelay_testkit::{Flavor, JobDriver, Pace, SimCluster};
use serde_json::Value;

use crate::common::store::drop_tables;
use crate::common::{mysql_url, unique_prefix};
use crate::process::{DEADLINE, Relay, http_get};
use crate::sharding::{self, cluster_name, lease_holders, settled_on, sharded_folder};

const CLUSTERS: usize = 4;
const JOBS_PER_CLUSTER: usize = 3;
const GROUP: &str = "view";

fn free_port() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
}

fn folder(
    home: &SimCluster,
    sims: &[SimCluster],
    identity: &str,
    prefix: &str,
    listen: std::net::SocketAddr,
) -> tempfile::TempDir {
    sharded_folder(
        home,
        sims,
        (GROUP, identity),
        prefix,
        &format!("kinds: [{{name: batch-job}}]\ntelemetry: {{listen: \"{listen}\"}}\n"),
        "wasm: event-log.wasm\ndelivery: transitions\n\
         grants:\n  filesystem:\n    - {host: out/log, guest: /data, writable: true}\n\
         config:\n  file: events.jsonl\n",
    )
}

async fn get(addr: std::net::SocketAddr, path: &str) -> Option<(u16, Value)> {
    let (head, body) = http_get(addr, path).await.ok()?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, serde_json::from_str(&body).ok()?))
}

fn listed(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|j| {
                    format!(
                        "{}/{}",
                        j["cluster"].as_str().unwrap_or(""),
                        j["name"].as_str().unwrap_or("")
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn owners(members: &[&str]) -> BTreeMap<String, String> {
    sharding::owners(CLUSTERS, members)
}

async fn settle(home: &SimCluster, members: &[&str]) {
    settled_on(home, GROUP, CLUSTERS, members).await;
}

/// Waits until `addr` lists exactly the jobs of the clusters `members` gives it.
async fn lists_its_share(addr: std::net::SocketAddr, id: &str, members: &[&str]) -> Value {
    let mine: BTreeSet<String> = owners(members)
        .into_iter()
        .filter(|(_, o)| o == id)
        .map(|(c, _)| c)
        .collect();
    let started = Instant::now();
    loop {
        if let Some((200, list)) = get(addr, "/api/v1/jobs?limit=1000").await {
            let clusters: BTreeSet<String> = list["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|j| j["cluster"].as_str().map(str::to_string))
                .collect();
            if clusters == mine
                && listed(&list).len() == mine.len() * JOBS_PER_CLUSTER
                && list["warnings"]
                    .as_array()
                    .is_some_and(|w| w.is_empty() || mine.is_empty())
            {
                return list;
            }
        }
        assert!(
            started.elapsed() < DEADLINE,
            "{id} never listed its share {mine:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_replica_answers_for_its_clusters_and_names_who_holds_the_rest() {
    let prefix = unique_prefix("view");
    let home = SimCluster::start("home").await.expect("home simulator");
    let mut sims = Vec::new();
    for i in 0..CLUSTERS {
        sims.push(
            SimCluster::start(&cluster_name(i))
                .await
                .expect("simulator"),
        );
    }
    for sim in &sims {
        for j in 0..JOBS_PER_CLUSTER {
            let mut job = JobDriver::builder(Flavor::Batch, "ml", &format!("j{j}"))
                .pace(Pace::Wall)
                .without_pods()
                .create(sim)
                .expect("create");
            job.running().expect("running");
        }
    }
    let ids = ["r1", "r2", "r3"];
    let addrs: Vec<std::net::SocketAddr> = ids.iter().map(|_| free_port()).collect();
    let dirs: Vec<tempfile::TempDir> = ids
        .iter()
        .zip(&addrs)
        .map(|(id, at)| folder(&home, &sims, id, &format!("{prefix}_"), *at))
        .collect();
    let r1 = Relay::start(dirs[0].path(), ids[0]);
    let r2 = Relay::start(dirs[1].path(), ids[1]);
    let two = &ids[..2];
    settle(&home, two).await;
    let expected = owners(two);
    assert!(
        expected.values().any(|o| o == "r1") && expected.values().any(|o| o == "r2"),
        "each replica owns some clusters: {expected:?}"
    );

    // Each lists its own share, names the other's clusters, and between them every job once.
    let mut all = Vec::new();
    for (id, addr) in ids.iter().zip(&addrs).take(2) {
        let list = lists_its_share(*addr, id, two).await;
        all.extend(listed(&list));
        let others: BTreeMap<String, String> = expected
            .iter()
            .filter(|(_, o)| *o != id)
            .map(|(c, o)| (c.clone(), o.clone()))
            .collect();
        // Named from the live members as this replica last saw them: asked until they are
        // the two (a member's renewal seen late makes its clusters look on their way here).
        let started = Instant::now();
        let mut elsewhere: BTreeMap<String, String> =
            serde_json::from_value(list["elsewhere"].clone()).unwrap_or_default();
        while elsewhere != others {
            assert!(
                started.elapsed() < DEADLINE,
                "{id} names {elsewhere:?}, expected {others:?}"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
            let (_, again) = get(*addr, "/api/v1/jobs?limit=1000").await.expect("answer");
            elsewhere = serde_json::from_value(again["elsewhere"].clone()).unwrap_or_default();
        }
        let (other_cluster, holder) = others.iter().next().expect("another replica's cluster");
        let (code, asked) = get(*addr, &format!("/api/v1/jobs?cluster={other_cluster}"))
            .await
            .expect("answer");
        assert_eq!(code, 200);
        assert!(listed(&asked).is_empty());
        let warning = asked["warnings"][0].as_str().unwrap_or("");
        assert!(
            warning.contains(&format!("held by replica `{holder}`")),
            "{id}: {asked}"
        );
        let (code, missing) = get(*addr, &format!("/api/v1/jobs/{other_cluster}/ml/j0"))
            .await
            .expect("answer");
        assert_eq!(code, 404);
        assert_eq!(missing["held_by"], holder.as_str(), "{missing}");
    }
    all.sort();
    let unique: BTreeSet<&String> = all.iter().collect();
    assert_eq!(
        unique.len(),
        all.len(),
        "a job listed by both replicas: {all:?}"
    );
    assert_eq!(all.len(), CLUSTERS * JOBS_PER_CLUSTER);

    // Paging through r1 while r3 joins and clusters change hands.
    let mut r3 = None;
    let mut seen: Vec<String> = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    let mut elsewheres: Vec<Value> = Vec::new();
    assert!(
        owners(&ids).values().any(|o| o == "r3"),
        "the third replica takes some clusters: {:?}",
        owners(&ids)
    );
    loop {
        let path = match &token {
            Some(t) => format!("/api/v1/jobs?sort=cluster&limit=1&continue={t}"),
            None => "/api/v1/jobs?sort=cluster&limit=1".to_string(),
        };
        let started = Instant::now();
        let (code, page) = get(addrs[0], &path).await.expect("r1 answers every page");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "a page took {:?}",
            started.elapsed()
        );
        assert_eq!(code, 200, "{page}");
        seen.extend(listed(&page));
        // Every cluster is accounted for: listed here, or named elsewhere, or warned of.
        let here: BTreeSet<String> = page["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|j| j["cluster"].as_str().map(str::to_string))
            .collect();
        let text = page.to_string();
        for cluster in expected.keys() {
            let named = page["elsewhere"].get(cluster).is_some()
                || text.contains(&format!("`{cluster}`"))
                || here.contains(cluster);
            let held = lease_holders(&home, GROUP)
                .get(cluster)
                .is_some_and(|h| h == "r1");
            assert!(
                named || held,
                "page {pages}: cluster {cluster} neither held by r1 nor named: {page}"
            );
        }
        pages += 1;
        if pages == 1 {
            // The hand-over happens between this page and the next.
            let joined = Relay::start(dirs[2].path(), ids[2]);
            settle(&home, &ids).await;
            r3 = Some(joined);
        }
        elsewheres.push(page["elsewhere"].clone());
        match page["continue"].as_str() {
            Some(t) => token = Some(t.to_string()),
            None => break,
        }
    }
    let unique: BTreeSet<&String> = seen.iter().collect();
    assert_eq!(
        unique.len(),
        seen.len(),
        "r1 listed a job twice while shares moved: {seen:?}"
    );
    assert!(pages > 1, "the list went on after the hand-over");
    assert_ne!(
        elsewheres.first(),
        elsewheres.last(),
        "the pages saw the shares move"
    );
    let r3 = r3.expect("r3 started");

    // Settled among three: still every job exactly once between them.
    let mut all = Vec::new();
    for (id, addr) in ids.iter().zip(&addrs) {
        let list = lists_its_share(*addr, id, &ids).await;
        all.extend(listed(&list));
    }
    let unique: BTreeSet<&String> = all.iter().collect();
    assert_eq!(unique.len(), all.len(), "a job listed twice: {all:?}");
    assert_eq!(all.len(), CLUSTERS * JOBS_PER_CLUSTER, "{all:?}");
    drop((r1, r2, r3));
    drop_tables(&mysql_url(), &format!("{prefix}_"))
        .await
        .expect("drop the test tables");
}
