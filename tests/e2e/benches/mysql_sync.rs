//! Rows per second of the `mysql-sync` plugin against the same MariaDB as a plain sqlx loop.
//!
//! Both sides write the same data at the same concurrency: 2,000 jobs, three events each
//! (pending, running, succeeded), spread over `CONCURRENCY` tasks that each own a disjoint set
//! of jobs and write a job's events in order (as the lanes do). Per event both sides run two
//! statements: `INSERT IGNORE` of the transition row and an upsert of the job row.
//! - `plugin`: `PluginVersion::handle` on the real component through the host's `sql`
//!   capability and a pool of the same size, twice: with a fresh instance per event (the
//!   default) and with `instance_reuse: 256` (an instance serves up to 256 events);
//! - `plain`: hand-written sqlx on the same tables (created by the plugin, so schema and
//!   indexes are identical) through a pool of the same size: the same `INSERT IGNORE` and an
//!   unguarded `ON DUPLICATE KEY UPDATE` of the same columns (the simplest upsert a
//!   hand-written sync would use).
//!
//! Rows/s counts events written (each writes one job row version and one transition row).
//! Each side runs three rounds on fresh tables, alternating; the medians are compared.
//!
//! Run: `plugins/build.sh && cargo bench -p jobrelay-e2e --bench mysql_sync`
//! (MariaDB at `JOBRELAY_TEST_MYSQL_URL`, default root@127.0.0.1:3306/test).

#![expect(
    clippy::print_stdout,
    reason = "a bench's figures are its output, printed for whoever runs it"
)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jobrelay_capabilities::Grants;
use jobrelay_capabilities::Services;
use jobrelay_capabilities::sql::Databases;
use jobrelay_capabilities::sql::{SqlConnection, SqlSettings};
use jobrelay_contract::event::{JobEvent, Phase};
use jobrelay_e2e::built_wasm;
use jobrelay_runtime::{PluginSpec, PluginVersion, Runtime, RuntimeSettings};
use sqlx::mysql::{MySqlPool, MySqlPoolOptions};

const JOBS: usize = 2_000;
const DEFAULT_CONCURRENCY: usize = 8;
const ROUNDS: usize = 3;
/// Calls per instance on the reusing side.
const REUSE: u32 = 256;

fn mysql_url() -> String {
    std::env::var("JOBRELAY_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_string())
}

/// Tasks (and pool connections) on each side: `BENCH_CONCURRENCY`, default 8.
fn concurrency() -> usize {
    std::env::var("BENCH_CONCURRENCY")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(DEFAULT_CONCURRENCY)
}

fn events() -> Vec<Vec<JobEvent>> {
    (0..JOBS)
        .map(|j| {
            let uid = format!("bench-{j:05}");
            let steps = [
                (Phase::Pending, None, "2026-11-21T10:00:00Z"),
                (Phase::Running, Some(Phase::Pending), "2026-11-21T10:00:05Z"),
                (
                    Phase::Succeeded,
                    Some(Phase::Running),
                    "2026-11-21T11:00:05Z",
                ),
            ];
            steps
                .iter()
                .enumerate()
                .map(|(i, (phase, previous, at))| {
                    let rv = (j * 10 + i + 1).to_string();
                    JobEvent {
                        id: JobEvent::make_id("east", &uid, &rv),
                        cluster: "east".into(),
                        api_version: "kubeflow.org/v1".into(),
                        kind: "PyTorchJob".into(),
                        namespace: "ml".into(),
                        name: format!("train-{j}"),
                        uid: uid.clone(),
                        resource_version: rv,
                        generation: Some(1),
                        phase: *phase,
                        raw_phase: format!("{phase:?}"),
                        reason: None,
                        message: Some("PyTorchJob is running.".into()),
                        previous_phase: *previous,
                        transition_time: (*at).into(),
                        labels: BTreeMap::from([("team".to_string(), "nlp".to_string())]),
                        annotations: BTreeMap::new(),
                        object_json: Arc::from(
                            r#"{"status":{"startTime":"2026-11-21T10:00:05Z"}}"#,
                        ),
                        transition_key: String::new(),
                        synthetic: false,
                        story: None,
                    }
                })
                .collect()
        })
        .collect()
}

/// Splits the jobs over the tasks, a job's events staying together and in order.
fn shares(jobs: &[Vec<JobEvent>]) -> Vec<Vec<JobEvent>> {
    let n = concurrency();
    let mut out = vec![Vec::new(); n];
    for (i, job) in jobs.iter().enumerate() {
        out[i % n].extend(job.iter().cloned());
    }
    out
}

fn plugin_spec(prefix: &str, version: &str, instance_reuse: u32) -> PluginSpec {
    PluginSpec {
        name: "mysql-sync".into(),
        version: version.into(),
        wasm: std::fs::read(built_wasm("mysql-sync"))
            .expect("wasm")
            .into(),
        wasm_sha256: String::new(),
        timeout: Duration::from_secs(10),
        memory_bytes: 32 << 20,
        instance_reuse,
        config: BTreeMap::from([
            ("connection".to_string(), "main".to_string()),
            ("jobs_table".to_string(), format!("{prefix}_jobs")),
            (
                "transitions_table".to_string(),
                format!("{prefix}_transitions"),
            ),
        ]),
        grants: Grants {
            sql: vec!["main".into()],
            ..Grants::default()
        },
    }
}

async fn run_plugin(
    rt: &Runtime,
    jobs: &[Vec<JobEvent>],
    round: usize,
    instance_reuse: u32,
) -> Duration {
    let prefix = format!(
        "bench_plugin{instance_reuse}_{round}_{}",
        std::process::id()
    );
    let plugin: Arc<PluginVersion> = rt
        .load(plugin_spec(
            &prefix,
            &format!("bench-{round}-{instance_reuse}"),
            instance_reuse,
        ))
        .await
        .expect("mysql-sync loads");
    let started = Instant::now();
    let mut tasks = Vec::new();
    for share in shares(jobs) {
        let plugin = plugin.clone();
        tasks.push(tokio::spawn(async move {
            for event in &share {
                plugin.handle(event).await.expect("handled");
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    started.elapsed()
}

/// The same tables (created by loading the plugin once, so schema and indexes are identical),
/// written by hand-written sqlx code: `INSERT IGNORE` of the transition and a plain, unguarded
/// `ON DUPLICATE KEY UPDATE` of every job column.
async fn run_plain(
    rt: &Runtime,
    pool: &MySqlPool,
    jobs: &[Vec<JobEvent>],
    round: usize,
) -> Duration {
    let prefix = format!("bench_plain_{round}_{}", std::process::id());
    rt.load(plugin_spec(&prefix, &format!("schema-{round}"), 1))
        .await
        .expect("the plugin's load creates the tables");
    let jobs_table = format!("{prefix}_jobs");
    let transitions = format!("{prefix}_transitions");
    let insert_transition = Arc::new(format!(
        "INSERT IGNORE INTO {transitions} (event_id, cluster, uid, namespace, name, kind, \
         from_phase, to_phase, raw_phase, reason, message, transition_time, synthetic, recorded_at) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NOW(3))"
    ));
    let job_columns = [
        "cluster",
        "uid",
        "namespace",
        "name",
        "api_version",
        "kind",
        "phase",
        "raw_phase",
        "reason",
        "message",
        "start_time",
        "finish_time",
        "duration_seconds",
        "labels_json",
        "resource_version",
        "transition_time",
        "updated_at",
        "version_minor",
        "version_major",
    ];
    let updates: Vec<String> = job_columns[2..]
        .iter()
        .map(|c| format!("{c} = VALUES({c})"))
        .collect();
    let upsert = Arc::new(format!(
        "INSERT INTO {jobs_table} ({}) VALUES ({}) ON DUPLICATE KEY UPDATE {}",
        job_columns.join(", "),
        vec!["?"; job_columns.len()].join(", "),
        updates.join(", ")
    ));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for share in shares(jobs) {
        let pool = pool.clone();
        let insert_transition = insert_transition.clone();
        let upsert = upsert.clone();
        tasks.push(tokio::spawn(async move {
            for e in &share {
                let at = e.transition_time.replace('T', " ").replace('Z', "");
                let phase = format!("{:?}", e.phase).to_lowercase();
                let previous = e.previous_phase.map(|p| format!("{p:?}").to_lowercase());
                let terminal = matches!(e.phase, Phase::Succeeded | Phase::Failed);
                sqlx::query(sqlx::AssertSqlSafe(insert_transition.as_str()))
                    .bind(&e.id)
                    .bind(&e.cluster)
                    .bind(&e.uid)
                    .bind(&e.namespace)
                    .bind(&e.name)
                    .bind(&e.kind)
                    .bind(&previous)
                    .bind(&phase)
                    .bind(&e.raw_phase)
                    .bind(&e.reason)
                    .bind(&e.message)
                    .bind(&at)
                    .bind(i64::from(e.synthetic))
                    .execute(&pool)
                    .await
                    .expect("transition");
                let rv: i64 = e.resource_version.parse().unwrap_or(0);
                sqlx::query(sqlx::AssertSqlSafe(upsert.as_str()))
                    .bind(&e.cluster)
                    .bind(&e.uid)
                    .bind(&e.namespace)
                    .bind(&e.name)
                    .bind(&e.api_version)
                    .bind(&e.kind)
                    .bind(&phase)
                    .bind(&e.raw_phase)
                    .bind(&e.reason)
                    .bind(&e.message)
                    .bind("2026-11-21 10:00:05")
                    .bind(terminal.then_some(at.as_str()))
                    .bind(terminal.then_some(3600i64))
                    .bind(r#"{"team":"nlp"}"#)
                    .bind(&e.resource_version)
                    .bind(&at)
                    .bind("2026-11-21 12:00:00")
                    .bind(1_000_000i64)
                    .bind(rv)
                    .execute(&pool)
                    .await
                    .expect("upsert");
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    started.elapsed()
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let url = mysql_url();
    let settings = SqlSettings {
        connections: BTreeMap::from([(
            "main".to_string(),
            SqlConnection {
                url: url.clone(),
                max_connections: concurrency() as u32,
                acquire_timeout_ms: 10_000,
                max_statement_ms: 60_000,
            },
        )]),
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let services = Services {
        sql: Databases::open(&settings, &dir.path().join("embedded")).expect("pools"),
        ..Services::default()
    };
    let rt = Runtime::with_services(
        RuntimeSettings {
            max_instances: 64,
            ..RuntimeSettings::default()
        },
        services,
    )
    .expect("runtime");
    let pool = MySqlPoolOptions::new()
        .max_connections(concurrency() as u32)
        .connect(&url)
        .await
        .expect("MariaDB");
    let jobs = events();
    let total = (JOBS * 3) as f64;
    let (mut plain_rates, mut fresh_rates, mut reused_rates) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let plain = total / run_plain(&rt, &pool, &jobs, round).await.as_secs_f64();
        let fresh = total / run_plugin(&rt, &jobs, round, 1).await.as_secs_f64();
        let reused = total / run_plugin(&rt, &jobs, round, REUSE).await.as_secs_f64();
        println!(
            "round {round}: plain {plain:.0} rows/s, plugin (fresh instance) {fresh:.0} rows/s \
             ratio {:.2}, plugin (instance_reuse {REUSE}) {reused:.0} rows/s ratio {:.2}",
            fresh / plain,
            reused / plain
        );
        plain_rates.push(plain);
        fresh_rates.push(fresh);
        reused_rates.push(reused);
    }
    let (plain, fresh, reused) = (
        median(plain_rates),
        median(fresh_rates),
        median(reused_rates),
    );
    println!(
        "median over {ROUNDS} rounds, {JOBS} jobs x 3 events, concurrency {}: plain sqlx \
         {plain:.0} rows/s; mysql-sync fresh instance {fresh:.0} rows/s (ratio {:.2}); \
         mysql-sync instance_reuse {REUSE} {reused:.0} rows/s (ratio {:.2})",
        concurrency(),
        fresh / plain,
        reused / plain
    );
    // Leave the database as it was.
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() \
         AND table_name LIKE 'bench\\_%'",
    )
    .fetch_all(&pool)
    .await
    .unwrap_or_default();
    for table in tables {
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE {table}")))
            .execute(&pool)
            .await;
    }
}
