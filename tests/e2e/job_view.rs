//! The job view API over HTTP, against simulated clusters with real plugins: every cluster's
//! jobs in one list with what each plugin did of them (deliveries, dead letters, errors),
//! filters, orders and pages that hold while jobs come and go, a job's transitions and
//! per-plugin trace, malformed and huge queries refused with the parameter named, and a
//! cluster that goes down mid-request: its jobs still answered as last seen, with a warning,
//! and no request waits on it.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use jobrelay::daemon::Daemon;
use jobrelay_e2e::*;
use jobrelay_testkit::{Flavor, JobDriver, SimCluster};
use serde_json::Value;

/// The probe dead-letters a job labelled `giveup` at once.
const PROBE: &str = "wasm: probe.wasm\ndelivery: transitions\ntimeout_ms: 20000\n\
     grants:\n  filesystem:\n    - {host: out/probe, guest: /data, writable: true}\n";

async fn start(sims: &[&SimCluster]) -> (Setup, Daemon, std::net::SocketAddr) {
    let setup = Setup::new(
        "kinds: [{name: volcano-job}, {name: batch-job}]\n\
         telemetry: {listen: \"127.0.0.1:0\"}\n",
    );
    setup.install_wasm("event-log", "event-log.wasm");
    setup.install_wasm("probe", "probe.wasm");
    setup.write_manifest(
        "log",
        &Setup::log_manifest("event-log.wasm", "log", "events.jsonl", ""),
    );
    setup.write_manifest("probe", PROBE);
    for sim in sims {
        setup.add_cluster(sim);
    }
    let daemon = Daemon::start(setup.config_dir())
        .await
        .expect("daemon starts");
    for sim in sims {
        wait_synced(&daemon, sim.name()).await;
    }
    let addr = daemon.telemetry_addr().expect("telemetry endpoint");
    (setup, daemon, addr)
}

fn job<'a>(list: &'a Value, name: &str) -> &'a Value {
    list["items"]
        .as_array()
        .and_then(|items| items.iter().find(|j| j["name"] == name))
        .unwrap_or_else(|| panic!("{name} not listed: {list}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_list_across_clusters_with_what_each_plugin_did() {
    init_logs();
    let east = SimCluster::start("east").await.expect("sim");
    let west = SimCluster::start("west").await.expect("sim");
    let (_setup, _daemon, addr) = start(&[&east, &west]).await;

    let mut train = JobDriver::builder(Flavor::Volcano, "team-a", "train-1")
        .label("team", "nlp")
        .create(&east)
        .expect("create");
    train.running().expect("running");
    train.succeeded().expect("succeeded");
    let mut eval = JobDriver::builder(Flavor::Batch, "team-a", "eval")
        .label("team", "cv")
        .create(&east)
        .expect("create");
    eval.running().expect("running");
    eval.failed("").expect("failed");
    let mut far = JobDriver::builder(Flavor::Volcano, "team-b", "train-2")
        .label("team", "nlp")
        .create(&west)
        .expect("create");
    far.running().expect("running");
    let mut doomed = JobDriver::builder(Flavor::Volcano, "team-b", "doomed")
        .label("jobrelay.test/behave", "giveup")
        .create(&west)
        .expect("create");
    doomed.running().expect("running");

    // Every job listed, each in its last phase, delivered to the log, the doomed one a dead
    // letter of the probe.
    let deadline = Instant::now() + Duration::from_secs(60);
    let list = loop {
        let (code, list) = get_json(addr, "/api/v1/jobs").await;
        assert_eq!(code, 200, "{list}");
        let settled = job_names(&list).len() == 4
            && list["items"].as_array().is_some_and(|items| {
                items.iter().all(|j| {
                    j["plugins"]["log"]["pending"] == 0
                        && j["plugins"]["log"]["delivered_phase"] == j["phase"]
                })
            })
            && job(&list, "doomed")["plugins"]["probe"]["dead_letters"]
                .as_u64()
                .is_some_and(|n| n >= 1);
        if settled {
            break list;
        }
        assert!(Instant::now() < deadline, "not settled: {list:#}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        job_names(&list),
        [
            "east/team-a/eval",
            "east/team-a/train-1",
            "west/team-b/doomed",
            "west/team-b/train-2"
        ]
    );
    assert_eq!(list["warnings"], serde_json::json!([]));
    let t = job(&list, "train-1");
    assert_eq!(t["phase"], "succeeded");
    assert_eq!(t["kind"], "volcano-job");
    assert_eq!(t["uid"], train.uid());
    assert!(t["started"].is_string() && t["finished"].is_string(), "{t}");
    assert!(t["duration_seconds"].is_u64());
    assert_eq!(job(&list, "eval")["kind"], "batch-job");
    assert_eq!(job(&list, "eval")["phase"], "failed");
    let doomed_probe = &job(&list, "doomed")["plugins"]["probe"];
    assert!(
        doomed_probe["last_error"]
            .as_str()
            .is_some_and(|e| !e.is_empty()),
        "{doomed_probe}"
    );

    // The job SLIs, from the transitions seen live.
    let (_, metrics) = http_get(addr, "/metrics").await;
    for line in [
        "jobrelay_job_queue_wait_seconds_count{cluster=\"east\",job_namespace=\"team-a\",kind=\"volcano-job\"} 1",
        "jobrelay_job_run_seconds_count{cluster=\"east\",job_namespace=\"team-a\",kind=\"volcano-job\"} 1",
        "jobrelay_jobs_finished_total{cluster=\"east\",job_namespace=\"team-a\",kind=\"batch-job\",result=\"failed\"} 1",
        "jobrelay_jobs_finished_total{cluster=\"east\",job_namespace=\"team-a\",kind=\"volcano-job\",result=\"succeeded\"} 1",
        "jobrelay_job_queue_wait_seconds_count{cluster=\"west\",job_namespace=\"team-b\",kind=\"volcano-job\"} 2",
    ] {
        assert!(
            metrics.contains(line),
            "no `{line}` in /metrics:\n{}",
            metrics
                .lines()
                .filter(|l| l.starts_with("jobrelay_job"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }

    // Filters.
    let cases = [
        (
            "?cluster=west",
            vec!["west/team-b/doomed", "west/team-b/train-2"],
        ),
        (
            "?phase=failed,succeeded",
            vec!["east/team-a/eval", "east/team-a/train-1"],
        ),
        ("?kind=batch-job", vec!["east/team-a/eval"]),
        (
            "?labelSelector=team%3Dnlp",
            vec!["east/team-a/train-1", "west/team-b/train-2"],
        ),
        (
            "?labelSelector=team%20notin%20(nlp),team",
            vec!["east/team-a/eval"],
        ),
        (
            "?name=train&sort=-name",
            vec!["west/team-b/train-2", "east/team-a/train-1"],
        ),
        ("?namespace=team-a&cluster=west", vec![]),
    ];
    for (query, expected) in cases {
        let (code, page) = get_json(addr, &format!("/api/v1/jobs{query}")).await;
        assert_eq!(code, 200, "{query}: {page}");
        assert_eq!(job_names(&page), expected, "{query}");
    }

    // Pages.
    let (_, first) = get_json(addr, "/api/v1/jobs?sort=name&limit=3").await;
    assert_eq!(first["remaining"], 1);
    let token = first["continue"].as_str().expect("a continue token");
    let (_, second) = get_json(
        addr,
        &format!("/api/v1/jobs?sort=name&limit=3&continue={token}"),
    )
    .await;
    assert_eq!(job_names(&second), ["west/team-b/train-2"]);
    assert_eq!(second["remaining"], 0);
    assert!(second.get("continue").is_none());

    // One job: its transitions as observed, each plugin's trace.
    let (code, shown) = get_json(addr, "/api/v1/jobs/east/team-a/train-1").await;
    assert_eq!(code, 200, "{shown}");
    let phases: Vec<&str> = shown["job"]["transitions"]
        .as_array()
        .expect("transitions")
        .iter()
        .filter_map(|t| t["phase"].as_str())
        .collect();
    assert_eq!(phases.last(), Some(&"succeeded"), "{phases:?}");
    assert!(phases.contains(&"running"), "{phases:?}");
    assert_eq!(shown["job"]["labels"]["team"], "nlp");
    let trace = shown["plugins"]["log"]["trace"].as_array().expect("trace");
    assert!(!trace.is_empty());
    assert!(
        trace.iter().all(|t| t["outcome"] == "delivered"),
        "{trace:?}"
    );
    assert_eq!(
        trace.last().map(|t| t["phase"].clone()),
        Some(Value::from("succeeded"))
    );
    let (_, doomed_shown) = get_json(addr, "/api/v1/jobs/west/team-b/doomed").await;
    let probe_trace = doomed_shown["plugins"]["probe"]["trace"]
        .as_array()
        .expect("trace");
    assert!(
        probe_trace.iter().any(|t| t["outcome"] == "dead_lettered"),
        "{probe_trace:?}"
    );
    let (code, missing) = get_json(addr, "/api/v1/jobs/east/team-a/nope").await;
    assert_eq!(code, 404);
    assert!(
        missing["error"]
            .as_str()
            .is_some_and(|e| e.contains("team-a/nope"))
    );

    // A deleted job stays, marked.
    train.delete().expect("delete");
    let deleted = until("the deletion shown", || async {
        let (_, list) = get_json(addr, "/api/v1/jobs?phase=deleted").await;
        (job_names(&list) == ["east/team-a/train-1"]).then_some(list)
    })
    .await;
    assert!(deleted["items"][0]["deleted"].is_string());

    // Malformed and huge queries: refused, the parameter named.
    let refusals = [
        ("?phase=runing", "phase: `runing` is not a phase"),
        ("?limit=0", "limit:"),
        ("?sort=size", "sort:"),
        ("?labelSelector=a%3D%3D%3Db", "labelSelector:"),
        ("?continue=garbage", "continue:"),
        ("?clusters=east", "`clusters` is not a parameter"),
    ];
    for (query, expected) in refusals {
        let (code, body) = get_json(addr, &format!("/api/v1/jobs{query}")).await;
        assert_eq!(code, 400, "{query}: {body}");
        let error = body["error"].as_str().unwrap_or("");
        assert!(error.contains(expected), "{query}: {error}");
    }
    let huge = format!("/api/v1/jobs?name={}", "x".repeat(20_000));
    let (code, body) = http_get(addr, &huge).await;
    assert!(code == 400 || code == 414, "{code}: {body}");
    // Another order's token is refused, not misread.
    let (code, _) = get_json(
        addr,
        &format!("/api/v1/jobs?sort=-name&limit=3&continue={token}"),
    )
    .await;
    assert_eq!(code, 400);

    // The document that describes it all, naming every parameter the API reads.
    let (code, doc) = get_json(addr, "/api/v1/openapi.json").await;
    assert_eq!(code, 200);
    let params: BTreeSet<&str> = doc["paths"]["/api/v1/jobs"]["get"]["parameters"]
        .as_array()
        .expect("parameters")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(
        params,
        BTreeSet::from([
            "cluster",
            "namespace",
            "kind",
            "phase",
            "labelSelector",
            "name",
            "timer",
            "sort",
            "limit",
            "continue"
        ])
    );
    assert!(doc["paths"]["/api/v1/jobs/{cluster}/{namespace}/{name}"].is_object());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_down_answers_as_last_seen_with_a_warning_and_never_blocks() {
    init_logs();
    let east = SimCluster::start("east").await.expect("sim");
    let west = SimCluster::start("west").await.expect("sim");
    let (_setup, daemon, addr) = start(&[&east, &west]).await;
    for (sim, name) in [(&east, "a"), (&west, "b")] {
        let mut j = JobDriver::builder(Flavor::Volcano, "ml", name)
            .create(sim)
            .expect("create");
        j.running().expect("running");
    }
    until("both jobs shown", || async {
        let (_, list) = get_json(addr, "/api/v1/jobs?phase=running").await;
        (job_names(&list).len() == 2).then_some(())
    })
    .await;

    // Requests go on while west goes down: each answers at once, with west's job as last seen.
    let asking = tokio::spawn(async move {
        let mut slowest = Duration::ZERO;
        let mut warned = false;
        for _ in 0..60 {
            let started = Instant::now();
            let (code, list) = get_json(addr, "/api/v1/jobs").await;
            slowest = slowest.max(started.elapsed());
            assert_eq!(code, 200);
            assert_eq!(job_names(&list), ["east/ml/a", "west/ml/b"], "{list}");
            warned |= list["warnings"].as_array().is_some_and(|w| {
                w.iter()
                    .any(|w| w.as_str().is_some_and(|w| w.contains("`west`")))
            });
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        (slowest, warned)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    west.outage_hard(true).expect("outage");
    let (slowest, warned) = asking.await.expect("asking");
    assert!(warned, "no warning named west while it was down");
    // Not a timing target: a request that waited on the dead cluster would take its
    // connect timeouts (seconds); one from memory takes milliseconds.
    assert!(
        slowest < Duration::from_secs(2),
        "a request took {slowest:?}"
    );
    let (_, list) = get_json(addr, "/api/v1/jobs?cluster=west").await;
    let warning = list["warnings"][0].as_str().unwrap_or("");
    assert!(
        warning.contains("cluster `west`") && warning.contains("as last seen"),
        "{list}"
    );
    let (code, shown) = get_json(addr, "/api/v1/jobs/west/ml/b").await;
    assert_eq!(code, 200);
    assert!(!shown["warnings"].as_array().expect("warnings").is_empty());

    // Back: the warning goes.
    west.outage_hard(false).expect("back");
    // A watch resumed from its last version (no re-list) reports its stream synced at its
    // next event: one job of each kind.
    for flavor in [Flavor::Volcano, Flavor::Batch] {
        JobDriver::builder(
            flavor,
            "ml",
            &format!("after-{}", flavor.kind().to_lowercase()),
        )
        .without_pods()
        .create(&west)
        .expect("create");
    }
    wait_synced(&daemon, "west").await;
    let (_, list) = get_json(addr, "/api/v1/jobs").await;
    assert_eq!(list["warnings"], serde_json::json!([]), "{list}");
    // A cluster that is not configured at all is named as such.
    let (_, list) = get_json(addr, "/api/v1/jobs?cluster=north").await;
    assert!(
        list["warnings"][0]
            .as_str()
            .is_some_and(|w| w.contains("`north` is not watched"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_over_http_hold_while_jobs_come_and_go() {
    init_logs();
    let sim = SimCluster::start("east").await.expect("sim");
    let (_setup, _daemon, addr) = start(&[&sim]).await;
    let mut stable = BTreeSet::new();
    for i in 0..30 {
        let name = format!("stable-{i:02}");
        JobDriver::builder(Flavor::Batch, "ml", &name)
            .without_pods()
            .create(&sim)
            .expect("create");
        stable.insert(name);
    }
    until("the stable jobs shown", || async {
        let (_, list) = get_json(addr, "/api/v1/jobs?name=stable&limit=1000").await;
        (job_names(&list).len() == 30).then_some(())
    })
    .await;
    for sort in ["name", "-created", "cluster"] {
        let mut seen: Vec<String> = Vec::new();
        let mut token: Option<String> = None;
        let mut churn = 0;
        loop {
            let path = match &token {
                Some(t) => format!("/api/v1/jobs?sort={sort}&limit=4&continue={t}"),
                None => format!("/api/v1/jobs?sort={sort}&limit=4"),
            };
            let (code, page) = get_json(addr, &path).await;
            assert_eq!(code, 200, "{page}");
            seen.extend(job_names(&page));
            // Between pages, jobs come and go: names before and after the page's end.
            for name in [format!("aa-{sort}-{churn}"), format!("zz-{sort}-{churn}")] {
                let mut j = JobDriver::builder(Flavor::Batch, "ml", &name)
                    .without_pods()
                    .create(&sim)
                    .expect("create");
                if churn % 2 == 1 {
                    j.delete().expect("delete");
                }
            }
            churn += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
            match page["continue"].as_str() {
                Some(t) => token = Some(t.to_string()),
                None => break,
            }
        }
        let unique: BTreeSet<&String> = seen.iter().collect();
        assert_eq!(
            unique.len(),
            seen.len(),
            "{sort}: a job listed twice: {seen:?}"
        );
        for name in &stable {
            let full = format!("east/ml/{name}");
            assert!(seen.contains(&full), "{sort}: {full} skipped");
        }
    }
}
