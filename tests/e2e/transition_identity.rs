//! One transition, one card: a transition that reached Feishu live, whose acknowledgement was
//! then lost (jobrelay killed between the card and the cursor write), is delivered again after
//! the restart as a reconstruction from a later version of the job. feishu-notify dedupes on
//! the transition key, which the live event and the reconstruction share, so the team sees one
//! `failed` card, not two. (Deduping on the event id, as before 0.2.0, posts twice: the
//! reconstruction's id is `rv~phase~n` of the later version.)

use std::collections::BTreeMap;
use std::time::Duration;

use jobrelay::daemon::Daemon;
use jobrelay_e2e::{Setup, init_logs, wait_synced};
use jobrelay_testkit::{FeishuReceiver, Flavor, JobDriver, Pace, SimCluster};
use serde_json::json;
use sqlx::sqlite::SqlitePool;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transition_delivered_live_and_rebuilt_after_a_lost_ack_posts_one_card() {
    init_logs();
    let sim = SimCluster::start("east").await.expect("simulator");
    let feishu = FeishuReceiver::start().await.expect("feishu receiver");
    let token = "one-card";
    let webhook = feishu.add_bot(token, None, None);
    let setup = Setup::new("kinds: [{name: volcano-job}]\n");
    setup.install_wasm("feishu-notify", "feishu-notify.wasm");
    setup.write_manifest(
        "feishu-notify",
        &format!(
            "wasm: feishu-notify.wasm\ndelivery: transitions\n\
             grants:\n  http: {{allow: [\"http://127.0.0.1:*\"], allow_private: true}}\n  kv: true\n\
             config:\n  webhook: \"{webhook}\"\n  phases: failed\n"
        ),
    );
    setup.add_cluster(&sim);
    let daemon = Daemon::start(setup.config_dir()).await.expect("daemon");
    wait_synced(&daemon, "east").await;

    let mut job = JobDriver::create(&sim, Flavor::Volcano, "ml", "train").expect("job");
    job.running().expect("running");
    let running_rv = job.resource_version().to_string();
    let running_at = job.object().expect("object")["status"]["state"]["lastTransitionTime"]
        .as_str()
        .expect("a transition time")
        .to_string();
    job.failed("OOMKilled").expect("failed");
    feishu
        .wait_for_messages(token, 1, Duration::from_secs(60))
        .await
        .expect("the failed card");
    let state = setup.path("state/jobrelay.db");
    let uid = job.uid().to_string();
    let pool = SqlitePool::connect(&format!("sqlite://{}", state.display()))
        .await
        .expect("state file");
    let started = std::time::Instant::now();
    loop {
        let phase: Option<String> = sqlx::query_scalar(
            "SELECT phase FROM cursors WHERE plugin = 'feishu-notify' AND uid = ?",
        )
        .bind(&uid)
        .fetch_optional(&pool)
        .await
        .expect("read the cursor");
        if phase.as_deref() == Some("failed") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the failed transition is never acknowledged ({phase:?})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    daemon.shutdown(Duration::from_secs(10)).await;

    // The lost acknowledgement: the cursor is back where it was before the card.
    let rewound = sqlx::query(
        "UPDATE cursors SET phase = 'running', resource_version = ?, transition_time = ? \
         WHERE plugin = 'feishu-notify' AND uid = ?",
    )
    .bind(&running_rv)
    .bind(&running_at)
    .bind(&uid)
    .execute(&pool)
    .await
    .expect("rewind the cursor");
    assert_eq!(rewound.rows_affected(), 1);
    pool.close().await;

    // The kit's controller clock runs up to a few seconds ahead of the wall clock the
    // simulator stamps deletions with; a deletion is always after the failure it follows.
    let failed_at = job.object().expect("object")["status"]["state"]["lastTransitionTime"]
        .as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .expect("a failure time");
    while chrono::Utc::now() <= failed_at + chrono::Duration::seconds(1) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // While jobrelay is down, the job is being deleted (held by someone else's finalizer), so
    // the restart sees a later version: `terminating`, after `failed`.
    let gvr = Flavor::Volcano.gvr();
    sim.patch_merge(
        &gvr,
        "ml",
        "train",
        json!({"metadata": {"finalizers": ["example.com/hold"]}}),
    )
    .expect("a foreign finalizer");
    sim.delete(&gvr, "ml", "train").expect("deletion requested");

    let daemon = Daemon::start(setup.config_dir()).await.expect("restart");
    wait_synced(&daemon, "east").await;
    let started = std::time::Instant::now();
    let rebuilt = loop {
        let lane = daemon.plugins()["feishu-notify"]
            .lane
            .clone()
            .expect("a lane");
        if lane.delivered >= 2 && lane.pending == 0 && lane.in_flight == 0 {
            break lane;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the failed transition was not delivered again: {lane:?}; cards: {:#?}",
            feishu.messages(token)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    daemon.idle().await;
    let cards = feishu.messages(token);
    assert_eq!(
        cards.len(),
        1,
        "one failed card, however often the transition is delivered ({rebuilt:?}): {cards:#?}"
    );
    daemon.shutdown(Duration::from_secs(10)).await;
}

/// Cards per (cluster, job name): the phases they announce, as a count each.
fn cards_by_job(
    feishu: &FeishuReceiver,
    token: &str,
) -> BTreeMap<(String, String), BTreeMap<String, usize>> {
    let mut out: BTreeMap<(String, String), BTreeMap<String, usize>> = BTreeMap::new();
    for message in feishu.messages(token) {
        let field = |label: &str| message.field(label).unwrap_or_default();
        *out.entry((field("Cluster"), field("Job")))
            .or_default()
            .entry(message.phase())
            .or_default() += 1;
    }
    out
}

/// The calm fleet of the issue: no fault at all, but jobs that restart and run again (or are
/// suspended and resumed) within one second, as a controller that recovers at once does. Their
/// statuses keep whole seconds, and Kubeflow keeps a single `Running` condition, so the status
/// cannot tell the second `running` from the first; the watch saw both. Every transition must
/// become one `job_transitions` row in MariaDB and one Feishu card — none dropped as a repeat,
/// none doubled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fast_reentries_on_a_calm_fleet_reach_mysql_and_feishu_once_each() {
    init_logs();
    let sims = [
        SimCluster::start("calm-a").await.expect("simulator"),
        SimCluster::start("calm-b").await.expect("simulator"),
    ];
    let feishu = FeishuReceiver::start().await.expect("feishu receiver");
    let token = "calm";
    let webhook = feishu.add_bot(token, None, None);
    let url = std::env::var("JOBRELAY_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_string());
    let prefix = format!("calm{}", std::process::id());
    let setup = Setup::new(&format!(
        "kinds: [{{name: volcano-job}}, {{name: pytorch-job}}, {{name: mpi-job}}, {{name: batch-job}}]\n\
         sql:\n  connections:\n    main: {{url: \"{url}\", max_connections: 4}}\n"
    ));
    setup.install_wasm("mysql-sync", "mysql-sync.wasm");
    setup.install_wasm("feishu-notify", "feishu-notify.wasm");
    setup.write_manifest(
        "mysql-sync",
        &format!(
            "wasm: mysql-sync.wasm\ndelivery: transitions\ngrants: {{sql: [main]}}\n\
             config: {{connection: main, jobs_table: {prefix}_jobs, transitions_table: {prefix}_transitions}}\n"
        ),
    );
    setup.write_manifest(
        "feishu-notify",
        &format!(
            "wasm: feishu-notify.wasm\ndelivery: transitions\n\
             rate_limits: [{{per_second: 5}}, {{per_minute: 100}}]\n\
             grants:\n  http: {{allow: [\"http://127.0.0.1:*\"], allow_private: true}}\n  kv: true\n\
             config:\n  webhook: \"{webhook}\"\n  phases: pending,running,restarting,suspended,succeeded,failed\n"
        ),
    );
    for sim in &sims {
        setup.add_cluster(sim);
    }
    let daemon = Daemon::start(setup.config_dir()).await.expect("daemon");
    for sim in &sims {
        wait_synced(&daemon, sim.name()).await;
    }
    let db = sqlx::mysql::MySqlPool::connect(&url)
        .await
        .expect("MariaDB must be reachable (tests/run.sh starts it)");

    // (cluster, uid, name) → the transitions the job went through, by phase.
    let mut expected: Vec<(String, String, String, BTreeMap<String, usize>)> = Vec::new();
    for sim in &sims {
        for (n, flavor) in Flavor::ALL.iter().enumerate() {
            let name = format!("fast-{n}");
            let mut job = JobDriver::builder(*flavor, "ml", &name)
                .pace(Pace::Wall)
                .create(sim)
                .expect("job");
            let phases: &[&str] = if *flavor == Flavor::Batch {
                job.running().expect("running");
                job.suspended().expect("suspended");
                job.resumed().expect("resumed");
                job.running().expect("running again");
                job.succeeded().expect("succeeded");
                &[
                    "pending",
                    "running",
                    "suspended",
                    "pending",
                    "running",
                    "succeeded",
                ]
            } else {
                job.pending().expect("pending");
                job.running().expect("running");
                job.restarting().expect("restarting");
                job.running().expect("running again");
                job.restarting().expect("restarting again");
                job.running().expect("running a third time");
                job.succeeded().expect("succeeded");
                &[
                    "pending",
                    "running",
                    "restarting",
                    "running",
                    "restarting",
                    "running",
                    "succeeded",
                ]
            };
            let mut counts = BTreeMap::new();
            for phase in phases {
                *counts.entry(phase.to_string()).or_insert(0) += 1;
            }
            expected.push((sim.name().to_string(), job.uid().to_string(), name, counts));
            // A calm fleet: jobs at a steady pace, each one's steps at once.
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    }

    let rows_by_job = || async {
        let rows: Vec<(String, String, String)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT cluster, uid, to_phase FROM {prefix}_transitions"
        )))
        .fetch_all(&db)
        .await
        .unwrap_or_default();
        let mut by_job: BTreeMap<(String, String), BTreeMap<String, usize>> = BTreeMap::new();
        for (cluster, uid, phase) in rows {
            *by_job
                .entry((cluster, uid))
                .or_default()
                .entry(phase)
                .or_default() += 1;
        }
        by_job
    };
    let started = std::time::Instant::now();
    loop {
        daemon.idle().await;
        let rows = rows_by_job().await;
        let cards = cards_by_job(&feishu, token);
        let wrong: Vec<String> = expected
            .iter()
            .filter_map(|(cluster, uid, job, want)| {
                let row = rows.get(&(cluster.clone(), uid.clone()));
                let card = cards.get(&(cluster.clone(), job.clone()));
                (row != Some(want) || card != Some(want)).then(|| {
                    format!("{cluster}/{job}: want {want:?}, rows {row:?}, cards {card:?}")
                })
            })
            .collect();
        if wrong.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "transitions dropped or doubled:\n{}",
            wrong.join("\n")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for (_, uid, _, _) in &expected {
        let keys: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT transition_key FROM {prefix}_transitions WHERE uid = ?"
        )))
        .bind(uid)
        .fetch_all(&db)
        .await
        .expect("keys");
        let distinct: std::collections::BTreeSet<&String> = keys.iter().collect();
        assert_eq!(distinct.len(), keys.len(), "one key per row: {keys:?}");
    }
    db.close().await;
    daemon.shutdown(Duration::from_secs(10)).await;
}
