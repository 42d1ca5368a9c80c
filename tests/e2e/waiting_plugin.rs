//! A plugin whose load fails for a reason that may pass is waited for: `mysql-sync` configured
//! against a database that is down when jobrelay starts (its load-time `init` cannot create its
//! tables) gets a lane that holds its events and its finalizer holds, is retried with backoff,
//! and once the database is up delivers every job's outcome. The database is a private MariaDB
//! server this test starts itself, never the shared one.

use std::collections::BTreeMap;

use jobrelay::daemon::Daemon;
use jobrelay_e2e::{Setup, http_get, init_logs, wait_for, wait_plugin_serving, wait_synced};
use jobrelay_testkit::{Flavor, Gvr, JobDriver, PrivateMariaDb, SimCluster};
use sqlx::Row;
use sqlx::mysql::MySqlPool;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_whose_database_is_down_at_start_waits_and_loses_nothing() {
    init_logs();
    let mut db = PrivateMariaDb::init().expect("a private MariaDB data folder");
    let sim = SimCluster::start("east").await.expect("simulator");
    let setup = Setup::new(&format!(
        "kinds: [{{name: volcano-job, finalizer: true}}, {{name: batch-job}}]\n\
         telemetry: {{listen: \"127.0.0.1:0\"}}\n\
         sql:\n  connections:\n    main: {{url: \"{}\", max_connections: 2, acquire_timeout_ms: 1000}}\n",
        db.url()
    ));
    setup.install_wasm("mysql-sync", "mysql-sync.wasm");
    setup.write_manifest(
        "mysql-sync",
        "wasm: mysql-sync.wasm\ndelivery: transitions\ngrants: {sql: [main]}\n\
         config: {connection: main}\n",
    );
    setup.add_cluster(&sim);
    let daemon = Daemon::start(setup.config_dir())
        .await
        .expect("daemon starts although a plugin's database is down");
    wait_synced(&daemon, "east").await;

    // The first load failed because the database is down: the plugin is waiting, not refused.
    let waiting = wait_for("mysql-sync waiting for its load", || {
        daemon.plugins().get("mysql-sync")?.waiting.clone()
    })
    .await;
    assert!(
        waiting.error.contains("unavailable") || waiting.error.contains("init"),
        "{waiting:?}"
    );
    let status = daemon.plugins()["mysql-sync"].clone();
    assert!(status.serving.is_none(), "{status:?}");
    assert!(
        status.lane.is_some(),
        "a waiting plugin has a lane: {status:?}"
    );

    // Jobs live their lives while the plugin cannot be loaded; one of them, held by the
    // finalizer, is deleted.
    let mut vc = JobDriver::builder(Flavor::Volcano, "ml", "vc-held")
        .workers(1)
        .create(&sim)
        .expect("volcano job");
    let mut ok = JobDriver::builder(Flavor::Batch, "ml", "batch-ok")
        .workers(1)
        .create(&sim)
        .expect("batch job");
    let mut bad = JobDriver::builder(Flavor::Batch, "ml", "batch-bad")
        .workers(1)
        .create(&sim)
        .expect("batch job");
    for job in [&mut vc, &mut ok, &mut bad] {
        job.running().expect("running");
    }
    ok.succeeded().expect("succeeded");
    bad.failed("BackoffLimitExceeded").expect("failed");
    vc.succeeded().expect("succeeded");
    wait_for("jobrelay's finalizer on the volcano job", || {
        let obj = sim.get(&Gvr::VOLCANO_JOB, "ml", "vc-held").ok()?;
        let list = obj.pointer("/metadata/finalizers")?.as_array()?.clone();
        list.iter()
            .any(|f| f.as_str() == Some("jobrelay.io/delivery"))
            .then_some(())
    })
    .await;
    vc.delete().expect("delete");

    // Every version waits in the lane, nothing is dropped, and the deleted job stays held: a
    // plugin without a version must not let the finalizer go.
    wait_for("the deletion queued in the waiting lane", || {
        let lane = daemon.plugins().get("mysql-sync")?.lane.clone()?;
        (lane.pending >= 4).then_some(())
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert!(
        sim.get(&Gvr::VOLCANO_JOB, "ml", "vc-held").is_ok(),
        "the held job was released before the waiting plugin handled its deletion"
    );
    let lane = daemon.plugins()["mysql-sync"].lane.clone().expect("lane");
    assert_eq!(lane.delivered, 0, "{lane:?}");
    assert_eq!(
        lane.dead_lettered, 0,
        "no attempt is spent while waiting: {lane:?}"
    );
    let addr = daemon.telemetry_addr().expect("telemetry endpoint");
    // One plugin that cannot load must not take the replica out of service (the same config
    // is on every replica): /readyz stays 200 and says it under its answer; /status puts it
    // first in what needs attention; the metrics say the plugin is down and waiting.
    let (code, body) = http_get(addr, "/readyz").await;
    assert_eq!(
        code, 200,
        "a plugin without a version leaves the replica ready: {body}"
    );
    assert!(
        body.contains("warning: plugin mysql-sync") && body.contains("retried"),
        "{body}"
    );
    let (_, status) = http_get(addr, "/status").await;
    let status: serde_json::Value = serde_json::from_str(&status).expect("JSON");
    assert!(
        status["attention"][0]
            .as_str()
            .is_some_and(|l| l.starts_with("plugin mysql-sync: no version serving yet")),
        "{status}"
    );
    let (_, metrics) = http_get(addr, "/metrics").await;
    assert!(
        metrics.contains("jobrelay_plugin_load_waiting{plugin=\"mysql-sync\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("jobrelay_plugin_up{plugin=\"mysql-sync\"} 0"),
        "{metrics}"
    );
    assert!(metrics.contains("jobrelay_ready 1"), "{metrics}");

    // The database comes back: the retried load succeeds and everything waiting is delivered.
    db.start().expect("the private MariaDB starts");
    wait_plugin_serving(&daemon, "mysql-sync").await;
    assert!(daemon.plugins()["mysql-sync"].waiting.is_none());
    wait_for("the held job released and removed", || {
        sim.get(&Gvr::VOLCANO_JOB, "ml", "vc-held")
            .is_err()
            .then_some(())
    })
    .await;
    let pool = MySqlPool::connect(&db.url())
        .await
        .expect("private MariaDB");
    let expected = BTreeMap::from([
        (vc.uid().to_string(), "vc-held"),
        (ok.uid().to_string(), "batch-ok"),
        (bad.uid().to_string(), "batch-bad"),
    ]);
    // The held job's deletion row may land a moment after the job is gone from the API.
    let transitions = wait_for_rows(&pool, &expected, vc.uid()).await;
    for (uid, phases) in &transitions {
        let name = expected[uid];
        let want_end = match name {
            "batch-bad" => "failed",
            _ => "succeeded",
        };
        assert!(
            phases.iter().any(|p| p == want_end),
            "{name}: transitions {phases:?} miss {want_end}"
        );
        assert!(phases.iter().any(|p| p == "running"), "{name}: {phases:?}");
    }
    assert!(
        transitions[vc.uid()].iter().any(|p| p == "deleted"),
        "{:?}",
        transitions[vc.uid()]
    );
    daemon.shutdown(std::time::Duration::from_secs(5)).await;
}

/// The transitions mysql-sync recorded per job, once every expected job has its outcome and
/// the `deleted` job its deletion.
async fn wait_for_rows(
    pool: &MySqlPool,
    expected: &BTreeMap<String, &str>,
    deleted: &str,
) -> BTreeMap<String, Vec<String>> {
    let deadline = std::time::Instant::now() + jobrelay_e2e::DEADLINE;
    loop {
        let rows = sqlx::query("SELECT uid, to_phase FROM job_transitions ORDER BY recorded_at")
            .fetch_all(pool)
            .await
            .unwrap_or_default();
        let mut by_job: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for row in rows {
            let uid: String = row.try_get("uid").unwrap_or_default();
            let phase: String = row.try_get("to_phase").unwrap_or_default();
            by_job.entry(uid).or_default().push(phase);
        }
        let done = expected.keys().all(|uid| {
            by_job
                .get(uid)
                .is_some_and(|p| p.iter().any(|p| p == "succeeded" || p == "failed"))
        }) && by_job
            .get(deleted)
            .is_some_and(|p| p.iter().any(|p| p == "deleted"));
        if done {
            return by_job;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not every job's outcome (and the held job's deletion) reached MySQL: {by_job:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}
