//! TrainJob, JobSet and RayJob end to end: lifecycles as their controllers write them, played
//! by the test kit on the simulator, through the real daemon into `mysql-sync` (real MariaDB
//! over TCP) and `feishu-notify` (real HTTP to the kit's Feishu receiver), with `event-log`
//! as the record of what was delivered; part of it written while jobrelay is down.
//!
//! What must hold: each job's transitions reach mysql-sync's `job_transitions` once each, in
//! the order the job went through them, with the phase and reason its kind's rules give; its
//! `jobs` row ends in the right phase, raw phase and reason; one card per notified
//! transition. The lifecycles: a TrainJob that restarts (a child job fails and is recreated,
//! no condition says so) and succeeds; a TrainJob created suspended by Kueue (no status, no
//! pods: suspended, never running) that is admitted and fails while jobrelay is down; a JobSet
//! with in-order startup that restarts (`RestartingJobSet` and `StartupPolicyInProgress` set
//! in one write), is suspended and resumed, and succeeds; a JobSet that restarts and succeeds
//! while jobrelay is down (its restart, whose condition is False again, is no longer in its
//! status: not delivered, and nothing invented in its place); a RayJob that retries and is
//! stopped (`Complete` with `STOPPED`: failed, not succeeded); a RayJob created suspended,
//! admitted, succeeding while jobrelay is down.
//!
//! Needs MariaDB at `JOBRELAY_TEST_MYSQL_URL` (default root@127.0.0.1:3306/test); fails
//! without it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use jobrelay::daemon::Daemon;
use jobrelay_e2e::*;
use jobrelay_testkit::{FeishuReceiver, Flavor, JobDriver, SimCluster};
use serde_json::Value;
use sqlx::mysql::MySqlPool;

fn mysql_url() -> String {
    std::env::var("JOBRELAY_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_string())
}

/// What a job's `job_transitions` rows say, in order: (from, to, raw phase, reason).
type Row = (Option<String>, String, String, Option<String>);

async fn transitions(db: &MySqlPool, table: &str, uid: &str) -> Vec<Row> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT from_phase, to_phase, raw_phase, reason FROM {table} WHERE uid = ? \
         ORDER BY recorded_at, transition_time"
    )))
    .bind(uid)
    .fetch_all(db)
    .await
    .expect("transitions")
}

fn path(rows: &[Row]) -> Vec<&str> {
    rows.iter().map(|r| r.1.as_str()).collect()
}

async fn start_daemon(setup: &Setup) -> Daemon {
    let daemon = Daemon::start(setup.config_dir())
        .await
        .expect("daemon starts");
    wait_synced(&daemon, "east").await;
    daemon
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn train_jobs_jobsets_and_ray_jobs_reach_mysql_sync_and_chat_once_each() {
    init_logs();
    let sim = SimCluster::start("east").await.expect("simulator");
    let feishu = FeishuReceiver::start().await.expect("feishu receiver");
    let token = format!("ai-{}", std::process::id());
    let webhook = feishu.add_bot(&token, None, None);
    let prefix = format!("ai{}", std::process::id());
    // SAFETY: set once, before the daemon starts; nothing else in this test binary reads it.
    unsafe { std::env::set_var("JOBRELAY_E2E_AI_MYSQL_URL", mysql_url()) };
    let setup = Setup::new(
        "kinds: [{name: train-job}, {name: jobset}, {name: ray-job}]\n\
         sql:\n  connections:\n    main: {url: \"env:JOBRELAY_E2E_AI_MYSQL_URL\", max_connections: 4}\n",
    );
    for (built, file) in [
        ("event-log", "event-log.wasm"),
        ("feishu-notify", "feishu-notify.wasm"),
    ] {
        setup.install_wasm(built, file);
    }
    setup.write_manifest(
        "log",
        &Setup::log_manifest(
            "event-log.wasm",
            "log",
            "events.jsonl",
            "delivery: transitions\n",
        ),
    );
    let (jobs_table, transitions_table) = setup.install_mysql_sync(&prefix);
    setup.write_manifest(
        "feishu-notify",
        &format!(
            "wasm: feishu-notify.wasm\ndelivery: transitions\n\
             grants:\n  http: {{allow: [\"http://127.0.0.1:*\"], allow_private: true}}\n  kv: true\n\
             config:\n  webhook: \"{webhook}\"\n  phases: \"running,restarting,suspended,succeeded,failed\"\n"
        ),
    );
    setup.add_cluster(&sim);
    let daemon = start_daemon(&setup).await;
    let db = MySqlPool::connect(&mysql_url())
        .await
        .expect("MariaDB must be reachable (tests/run.sh starts it)");

    let job = |flavor, name: &str| JobDriver::builder(flavor, "ml", name).workers(1);
    // --- Live.
    let mut tj_ok = job(Flavor::TrainJob, "tj-ok")
        .create(&sim)
        .expect("trainjob");
    tj_ok.running().expect("running");
    tj_ok
        .restarting()
        .expect("a child job fails and is recreated");
    tj_ok.succeeded().expect("succeeded");

    let mut tj_queued = job(Flavor::TrainJob, "tj-queued")
        .created_suspended()
        .create(&sim)
        .expect("trainjob");
    let mut js_ordered = job(Flavor::JobSet, "js-ordered")
        .in_order_startup()
        .create(&sim)
        .expect("jobset");
    js_ordered.running().expect("running");
    js_ordered.restarting().expect("restart");
    js_ordered.suspended().expect("suspended");
    js_ordered.resumed().expect("resumed");
    js_ordered.running().expect("running again");
    js_ordered.succeeded().expect("succeeded");

    let mut js_down = job(Flavor::JobSet, "js-down").create(&sim).expect("jobset");
    js_down.running().expect("running");

    let mut ray_stop = job(Flavor::RayJob, "ray-stop")
        .create(&sim)
        .expect("rayjob");
    ray_stop.running().expect("running");
    ray_stop.restarting().expect("retry");
    ray_stop.running().expect("running again");
    ray_stop.stopped().expect("stopped");

    let mut ray_queued = job(Flavor::RayJob, "ray-queued")
        .created_suspended()
        .create(&sim)
        .expect("rayjob");
    tj_queued.admitted().expect("admitted");
    ray_queued.admitted().expect("admitted");

    // Wait for what was played live, then stop jobrelay.
    let live = [
        (tj_ok.uid().to_string(), "succeeded"),
        (tj_queued.uid().to_string(), "running"),
        (js_ordered.uid().to_string(), "succeeded"),
        (js_down.uid().to_string(), "running"),
        (ray_stop.uid().to_string(), "failed"),
        (ray_queued.uid().to_string(), "running"),
    ];
    wait_for_phases(&setup, "log/events.jsonl", &live).await;
    daemon.shutdown(Duration::from_secs(10)).await;

    // --- While jobrelay is down.
    tj_queued.failed("ReachedMaxRestarts").expect("failed");
    js_down.restarting().expect("restart, recovered");
    ray_queued.succeeded().expect("succeeded");

    let daemon = start_daemon(&setup).await;
    js_down.succeeded().expect("succeeded");

    // --- What each job's rows must say.
    let expected: BTreeMap<String, (&str, Vec<&str>)> = BTreeMap::from([
        (
            tj_ok.uid().to_string(),
            (
                "tj-ok",
                vec!["pending", "running", "restarting", "running", "succeeded"],
            ),
        ),
        (
            tj_queued.uid().to_string(),
            (
                "tj-queued",
                vec!["suspended", "pending", "running", "failed"],
            ),
        ),
        (
            js_ordered.uid().to_string(),
            (
                "js-ordered",
                vec![
                    "pending",
                    "running",
                    "restarting",
                    "running",
                    "suspended",
                    "pending",
                    "running",
                    "succeeded",
                ],
            ),
        ),
        (
            js_down.uid().to_string(),
            ("js-down", vec!["pending", "running", "succeeded"]),
        ),
        (
            ray_stop.uid().to_string(),
            (
                "ray-stop",
                vec![
                    "pending",
                    "running",
                    "restarting",
                    "pending",
                    "running",
                    "failed",
                ],
            ),
        ),
        (
            ray_queued.uid().to_string(),
            (
                "ray-queued",
                vec![
                    "suspended",
                    "pending",
                    "suspended",
                    "pending",
                    "running",
                    "succeeded",
                ],
            ),
        ),
    ]);
    let started = Instant::now();
    let mut rows: BTreeMap<String, Vec<Row>> = BTreeMap::new();
    loop {
        rows.clear();
        for uid in expected.keys() {
            rows.insert(uid.clone(), transitions(&db, &transitions_table, uid).await);
        }
        let done = expected
            .iter()
            .all(|(uid, (_, want))| rows[uid].len() >= want.len());
        if done || started.elapsed() > Duration::from_secs(60) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await; // a repeat would show by now
    for (uid, (name, want)) in &expected {
        let got = transitions(&db, &transitions_table, uid).await;
        assert_eq!(
            path(&got),
            *want,
            "{name}: its transitions, once each, in order: {got:?}"
        );
        // Each row's from is the row before it.
        for pair in got.windows(2) {
            assert_eq!(pair[1].0.as_deref(), Some(pair[0].1.as_str()), "{name}");
        }
    }
    // The reasons and raw phases the kinds' rules read.
    let tj_failed = transitions(&db, &transitions_table, tj_queued.uid()).await;
    assert_eq!(
        tj_failed.last().and_then(|r| r.3.as_deref()),
        Some("ReachedMaxRestarts"),
        "{tj_failed:?}"
    );
    let restart = &transitions(&db, &transitions_table, js_ordered.uid()).await[2];
    assert_eq!(
        (restart.2.as_str(), restart.3.as_deref()),
        ("RestartingJobSet", Some("DefaultFailurePolicy"))
    );
    let job_row = |uid: String| {
        let db = db.clone();
        let sql = format!("SELECT phase, raw_phase, reason FROM {jobs_table} WHERE uid = ?");
        async move {
            sqlx::query_as::<_, (String, String, Option<String>)>(sqlx::AssertSqlSafe(sql))
                .bind(uid)
                .fetch_one(&db)
                .await
                .expect("jobs row")
        }
    };
    assert_eq!(
        job_row(ray_stop.uid().to_string()).await,
        ("failed".to_string(), "STOPPED".to_string(), None),
        "a stopped RayJob is no success"
    );
    assert_eq!(job_row(ray_queued.uid().to_string()).await.0, "succeeded");
    assert_eq!(job_row(js_down.uid().to_string()).await.0, "succeeded");

    // --- Feishu: one card per notified transition, each naming its job and phase.
    let notified = ["running", "restarting", "suspended", "succeeded", "failed"];
    let want_cards: usize = expected
        .values()
        .map(|(_, p)| p.iter().filter(|ph| notified.contains(ph)).count())
        .sum();
    let cards = feishu
        .wait_for_messages(&token, want_cards, Duration::from_secs(60))
        .await
        .expect("cards");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let cards_now = feishu.messages(&token);
    assert_eq!(cards_now.len(), want_cards, "one card per transition");
    let mut per_job: BTreeMap<(String, String), usize> = BTreeMap::new();
    for card in &cards {
        let text = card.body.to_string();
        let name = expected
            .values()
            .map(|(n, _)| *n)
            .find(|n| text.contains(n))
            .unwrap_or_else(|| panic!("a card names its job: {text}"));
        *per_job.entry((name.to_string(), card.phase())).or_default() += 1;
    }
    for (name, want) in expected.values() {
        for phase in notified {
            let n = want.iter().filter(|p| **p == phase).count();
            assert_eq!(
                per_job
                    .get(&(name.to_string(), phase.to_string()))
                    .copied()
                    .unwrap_or(0),
                n,
                "{name} {phase}: {per_job:?}"
            );
        }
    }
    let lines: Vec<Value> = setup.lines("log/events.jsonl");
    assert_unique_ids(&lines, "event-log");
    daemon.shutdown(Duration::from_secs(5)).await;
}
