//! The three shipped plugins at once, in the real daemon: job lifecycles on the simulator go
//! through `mysql-sync` (real MariaDB over TCP), `feishu-notify` (real HTTP to the test kit's
//! signature-checking Feishu receiver) and `log-archive` (real pod logs, local archive), with
//! `event-log` alongside as the record of what was delivered.
//!
//! Needs MariaDB at `JOBRELAY_TEST_MYSQL_URL` (default root@127.0.0.1:3306/test); fails
//! without it.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::time::{Duration, Instant};

use jobrelay::daemon::Daemon;
use jobrelay_e2e::*;
use jobrelay_testkit::{FeishuReceiver, Flavor, Gvr, JobDriver, SimCluster};
use serde_json::Value;
use sqlx::mysql::MySqlPool;

const SECRET: &str = "s3cret-signing-key";

fn mysql_url() -> String {
    std::env::var("JOBRELAY_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_string())
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .expect("valid gzip");
    out
}

/// Polls an async check every 100 ms for up to a minute.
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

struct World {
    setup: Setup,
    daemon: Daemon,
    sim: SimCluster,
    feishu: FeishuReceiver,
    token: String,
    db: MySqlPool,
    prefix: String,
}

async fn start() -> World {
    init_logs();
    let sim = SimCluster::start("east").await.expect("simulator");
    let feishu = FeishuReceiver::start().await.expect("feishu receiver");
    let token = format!("bot-{}", std::process::id());
    let webhook = feishu.add_bot(&token, Some(SECRET), None);
    let prefix = format!("e2e{}", std::process::id());

    // The database URL and the signing secret reach the daemon as secret references: an
    // environment variable and a file, never the config folder.
    // SAFETY: set once, before the daemon starts; nothing else in this test binary reads it.
    unsafe { std::env::set_var("JOBRELAY_E2E_MYSQL_URL", mysql_url()) };
    let setup = Setup::new(
        "kinds: [{name: volcano-job, finalizer: true}, {name: pytorch-job}, {name: batch-job}]\n\
         sql:\n  connections:\n    main: {url: \"env:JOBRELAY_E2E_MYSQL_URL\", max_connections: 4}\n\
         archive: {local: archive}\n",
    );
    let secret_file = setup.path("secrets/feishu");
    write_atomic(&secret_file, format!("{SECRET}\n").as_bytes());
    for (built, file) in [
        ("event-log", "event-log.wasm"),
        ("mysql-sync", "mysql-sync.wasm"),
        ("feishu-notify", "feishu-notify.wasm"),
        ("log-archive", "log-archive.wasm"),
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
             config:\n  webhook: \"{webhook}\"\n  secret: \"file:{}\"\n",
            secret_file.display()
        ),
    );
    setup.write_manifest(
        "log-archive",
        "wasm: log-archive.wasm\ndelivery: transitions\ntimeout_ms: 20000\n\
         grants: {pod_logs: {}, archive: {}, kv: true, job: {annotations: [\"archive.jobrelay.io/\"]}}\n",
    );
    setup.add_cluster(&sim);
    let daemon = Daemon::start(setup.config_dir())
        .await
        .expect("daemon starts");
    wait_synced(&daemon, "east").await;
    let db = MySqlPool::connect(&mysql_url())
        .await
        .expect("MariaDB must be reachable (tests/run.sh starts it)");
    World {
        setup,
        daemon,
        sim,
        feishu,
        token,
        db,
        prefix,
    }
}

/// Gives every pod of `job` a log of its own, with bytes that are not UTF-8 (kept as is).
fn write_logs(job: &JobDriver) {
    for pod in job.pods() {
        let mut log = format!("{} training log\nstep 1 loss=1.0\n", pod.name).into_bytes();
        log.extend_from_slice(&[0xff, 0x00, b'\n']);
        job.set_log(&pod.name, false, log).expect("log");
    }
}

/// Every pod's current log as the simulator serves it.
fn final_logs(sim: &SimCluster, job: &JobDriver) -> BTreeMap<String, Vec<u8>> {
    job.pods()
        .iter()
        .map(|pod| {
            let log = sim
                .pod_log(job.namespace(), &pod.name, &pod.container, false)
                .map(|b| b.to_vec())
                .unwrap_or_default();
            (pod.name.clone(), log)
        })
        .collect()
}

fn manifest(setup: &Setup, uid: &str) -> Option<Value> {
    let path = setup.path(&format!("archive/log-archive/east/ml/{uid}/manifest.json"));
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

fn phase_name(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_plugins_on_job_lifecycles() {
    let w = start().await;

    // A Volcano job (held by jobrelay's finalizer) that is deleted while running, a PyTorch
    // job that fails and a batch job that succeeds.
    let mut volcano = JobDriver::builder(Flavor::Volcano, "ml", "vc-train")
        .workers(2)
        .create(&w.sim)
        .expect("volcano job");
    let mut pytorch = JobDriver::builder(Flavor::PyTorch, "ml", "pt-train")
        .workers(1)
        .create(&w.sim)
        .expect("pytorch job");
    let mut batch = JobDriver::builder(Flavor::Batch, "ml", "batch-train")
        .workers(1)
        .create(&w.sim)
        .expect("batch job");
    volcano.running().expect("running");
    pytorch.running().expect("running");
    batch.running().expect("running");
    write_logs(&volcano);
    write_logs(&pytorch);
    write_logs(&batch);
    pytorch.failed("OOMKilled").expect("failed");
    batch.succeeded().expect("succeeded");
    // The logs as the kubelet would serve them at the end (the drivers append the last lines
    // a failing or finishing job prints); the Volcano job's pods go with the job.
    let volcano_logs = final_logs(&w.sim, &volcano);
    let pytorch_logs = final_logs(&w.sim, &pytorch);
    let batch_logs = final_logs(&w.sim, &batch);

    // jobrelay holds the Volcano job: wait for its finalizer, then delete it while running.
    wait_for("jobrelay's finalizer on the volcano job", || {
        let obj = w.sim.get(&Gvr::VOLCANO_JOB, "ml", "vc-train").ok()?;
        let list = obj.pointer("/metadata/finalizers")?.as_array()?.clone();
        list.iter()
            .any(|f| f.as_str() == Some("jobrelay.io/delivery"))
            .then_some(())
    })
    .await;
    volcano.delete().expect("delete");
    wait_for("the volcano job to be released and removed", || {
        w.sim
            .get(&Gvr::VOLCANO_JOB, "ml", "vc-train")
            .is_err()
            .then_some(())
    })
    .await;

    // What was delivered, as event-log recorded it (same delivery mode as the others).
    let uids: BTreeSet<String> = [&volcano, &pytorch, &batch]
        .iter()
        .map(|j| j.uid().to_string())
        .collect();
    let lines = wait_for("every job's last transition in the event log", || {
        let lines = w.setup.lines("log/events.jsonl");
        let by = by_job(&lines);
        let done = |uid: &str, phase: &str| {
            by.get(uid)
                .is_some_and(|events| events.iter().any(|e| e["phase"] == phase))
        };
        (done(volcano.uid(), "deleted")
            && done(pytorch.uid(), "failed")
            && done(batch.uid(), "succeeded"))
        .then_some(lines)
    })
    .await;
    assert_unique_ids(&lines, "event-log");

    // --- MySQL: one row per job with its last delivered state; one row per transition.
    let jobs_table = format!("{}_jobs", w.prefix);
    let transitions_table = format!("{}_transitions", w.prefix);
    let by = by_job(&lines);
    let last_phase: BTreeMap<String, String> = by
        .iter()
        .map(|(uid, events)| (uid.clone(), phase_name(&events[events.len() - 1]["phase"])))
        .collect();
    let rows: Vec<(String, String)> =
        eventually("the jobs table to reach the final states", || {
            let db = w.db.clone();
            let sql = format!("SELECT uid, phase FROM {jobs_table} ORDER BY uid");
            let want = last_phase.clone();
            async move {
                let rows: Vec<(String, String)> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                    .fetch_all(&db)
                    .await
                    .ok()?;
                let got: BTreeMap<String, String> = rows.iter().cloned().collect();
                (got == want).then_some(rows)
            }
        })
        .await;
    assert_eq!(rows.len(), 3);
    let delivered_ids: BTreeSet<String> = lines
        .iter()
        .filter(|l| uids.contains(&uid_of(l)))
        .filter(|l| l["previous_phase"] != l["phase"])
        .map(|l| l["id"].as_str().expect("id").to_string())
        .collect();
    let stored_ids: BTreeSet<String> = eventually("one transition row per transition", || {
        let db = w.db.clone();
        let sql = format!("SELECT event_id FROM {transitions_table}");
        let want = delivered_ids.clone();
        async move {
            let ids: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                .fetch_all(&db)
                .await
                .ok()?;
            let ids: BTreeSet<String> = ids.into_iter().collect();
            (ids == want).then_some(ids)
        }
    })
    .await;
    let count: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT COUNT(*) FROM {transitions_table}"
    )))
    .fetch_one(&w.db)
    .await
    .expect("count");
    assert_eq!(count as usize, stored_ids.len(), "no duplicates");

    // --- Feishu: one signed card per configured transition (running, succeeded, failed,
    // restarting), none for the others.
    let notified = ["running", "succeeded", "failed", "restarting"];
    let expected_cards: Vec<&Value> = lines
        .iter()
        .filter(|l| l["previous_phase"] != l["phase"])
        .filter(|l| notified.contains(&l["phase"].as_str().unwrap_or_default()))
        .collect();
    let cards = w
        .feishu
        .wait_for_messages(&w.token, expected_cards.len(), Duration::from_secs(30))
        .await
        .expect("cards");
    tokio::time::sleep(Duration::from_millis(500)).await; // a duplicate would show up by now
    let cards = {
        let all = w.feishu.messages(&w.token);
        assert_eq!(
            all.len(),
            cards.len().max(expected_cards.len()),
            "exactly one card each"
        );
        all
    };
    assert_eq!(cards.len(), expected_cards.len());
    for card in &cards {
        assert!(card.signed, "every card carries a valid signature");
        assert_eq!(card.body["msg_type"], "interactive");
    }
    for line in &expected_cards {
        let name = line["name"].as_str().expect("name");
        let phase = line["phase"].as_str().expect("phase");
        let found = cards.iter().any(|c| {
            let text = c.body["card"].to_string();
            text.contains(name) && text.to_lowercase().contains(phase)
        });
        assert!(found, "a card for {name} {phase}");
    }

    // --- Archives: complete, byte for byte, for every pod, and for the deleted job written
    // before its finalizer was released: its pods (removed with the job) are all in it.
    for (job, logs, phase) in [
        (&pytorch, &pytorch_logs, "failed"),
        (&batch, &batch_logs, "succeeded"),
        (&volcano, &volcano_logs, "terminating"),
    ] {
        let m = wait_for("the archive manifest", || manifest(&w.setup, job.uid())).await;
        assert_eq!(m["phase"], phase, "{}", job.name());
        let pods = m["pods"].as_array().expect("pods");
        assert_eq!(
            pods.len(),
            logs.len(),
            "{}: every pod archived: {m}",
            job.name()
        );
        for pod in pods {
            let name = pod["name"].as_str().expect("pod name");
            let key = pod["containers"][0]["logs"][0]["key"]
                .as_str()
                .expect("a stored log");
            let stored = std::fs::read(w.setup.path(&format!("archive/log-archive/{key}")))
                .expect("log object");
            assert_eq!(
                &gunzip(&stored),
                &logs[name],
                "{name}: the log byte for byte"
            );
        }
    }
    // The jobs still in the cluster say where their logs went (the `job` capability).
    for (job, gvr) in [(&pytorch, &Gvr::PYTORCH_JOB), (&batch, &Gvr::BATCH_JOB)] {
        let annotation = wait_for("the archive annotation", || {
            let obj = w.sim.get(gvr, "ml", job.name()).ok()?;
            obj["metadata"]["annotations"]["archive.jobrelay.io/logs"]
                .as_str()
                .map(str::to_string)
        })
        .await;
        assert_eq!(
            annotation,
            format!("east/ml/{}/manifest.json", job.uid()),
            "{}",
            job.name()
        );
    }
    // The deletion of the archived Volcano job reached the plugins after the archive.
    assert!(
        w.sim
            .list(&Gvr::VOLCANO_JOB, Some("ml"))
            .expect("list")
            .is_empty()
    );
    w.daemon.shutdown(Duration::from_secs(5)).await;
}
