//! What a stored take costs: the inbox's writes per event, apart from the cursor writes every
//! event costs anyway, on SQLite and on MariaDB.
//!
//! A lane that trails its watch by more than the take delay stores each event it takes (the
//! event's row and its mark) in one round of its writer, and a later round saves the event's
//! cursor and removes the mark. This bench writes those rounds through the store's own
//! [`DeliveryStore::write`], as the lane's writer does — batches of 64, each round taking 64
//! events and settling the 64 of the round before — and the same rounds with the cursors only
//! (the lane kept up: nothing stored). The difference, per event, is the stored take.
//!
//! Events: 20,000 versions of 2,000 Volcano jobs, about 1.6 KB of object each, as the event
//! path's stream has them. CPU is the process's user + system time (`getrusage`), so the
//! SQLite store's writer thread counts. Each part runs 5 times after a warm-up; the median is
//! shown with the range.
//!
//! Run: `cargo bench -p jobrelay-state --bench inbox` (MariaDB on 127.0.0.1:3306, user root, no
//! password, database `test`, or `JOBRELAY_BENCH_MYSQL_URL`; `-- --sqlite` for SQLite alone,
//! `-- --mysql` for MariaDB alone; `-- --cursors-only` or `-- --stored-only` for one part, whose
//! instructions `valgrind --tool=callgrind` counts where the machine is too busy for its time).

#![expect(
    clippy::print_stdout,
    reason = "a bench's figures are its output, printed for whoever runs it"
)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jobrelay_contract::event::{JobEvent, Phase};
use jobrelay_state::{Cursor, DeliveryStore, Settled, StateBackend, Taken, WriteBatch, open_store};

/// The daemon's allocator (host/src/main.rs): with glibc's, `malloc` and `free` were a fifth
/// of a stored take's instructions, more than the daemon pays.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const JOBS: usize = 2_000;
const VERSIONS: usize = 10;
const BATCH: usize = 64;
const RUNS: usize = 5;

fn main() {
    let sqlite_only = std::env::args().any(|a| a == "--sqlite");
    let mysql_only = std::env::args().any(|a| a == "--mysql");
    let part = if std::env::args().any(|a| a == "--cursors-only") {
        Some(false)
    } else if std::env::args().any(|a| a == "--stored-only") {
        Some(true)
    } else {
        None
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let events = events();
    println!(
        "{} events, {} bytes of object each on average",
        events.len(),
        events.iter().map(|e| e.object_json.len()).sum::<usize>() / events.len()
    );
    runtime.block_on(async {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let mut backends = Vec::new();
        if !mysql_only {
            backends.push(("sqlite", StateBackend::Sqlite(dir.path().join("state.db"))));
        }
        if !sqlite_only {
            let url = std::env::var("JOBRELAY_BENCH_MYSQL_URL")
                .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_string());
            backends.push((
                "mariadb",
                StateBackend::MySql {
                    url,
                    table_prefix: format!("bench_{}_", std::process::id()),
                },
            ));
        }
        for (name, backend) in backends {
            let store = open_store(&backend).await.expect("the store opens");
            if let Some(take) = part {
                // One part alone, for a count of its instructions (`valgrind --tool=callgrind`).
                let runs = measure(&store, &events, take).await;
                report(
                    name,
                    if take { "take stored" } else { "cursors only" },
                    &runs,
                    events.len(),
                );
                store.close().await;
                continue;
            }
            let cursors = measure(&store, &events, false).await;
            let stored = measure(&store, &events, true).await;
            report(name, "cursors only", &cursors, events.len());
            report(name, "take stored", &stored, events.len());
            let (c, s) = (median(&cursors).0, median(&stored).0);
            println!(
                "{name:8} stored take: {:.2} µs per event (median difference)",
                (s - c).as_secs_f64() * 1e6 / events.len() as f64
            );
            store.close().await;
        }
    });
}

/// CPU and wall time of writing every event's cursor through the store in rounds of
/// [`BATCH`], each round also taking its events into the inbox and settling the round before's
/// when `take`; a warm-up run first, then [`RUNS`].
async fn measure(
    store: &Arc<dyn DeliveryStore>,
    events: &[JobEvent],
    take: bool,
) -> Vec<(Duration, Duration)> {
    let mut runs = Vec::new();
    for run in 0..=RUNS {
        // Each run its own plugin: no run settles or overwrites another's rows.
        let plugin = format!("bench-{take}-{run}");
        let (cpu, wall) = (cpu_time(), Instant::now());
        let mut before: Vec<&JobEvent> = Vec::new();
        for round in events.chunks(BATCH) {
            let mut batch = WriteBatch::default();
            if take {
                batch.taken = round
                    .iter()
                    .map(|e| Taken::of(&plugin, e).expect("the event encodes"))
                    .collect();
                batch.saved = before
                    .iter()
                    .map(|e| Cursor::from_event(&plugin, e))
                    .collect();
                batch.settled = before
                    .iter()
                    .map(|e| Settled {
                        plugin: plugin.clone(),
                        event_id: e.id.clone(),
                    })
                    .collect();
            } else {
                batch.saved = round
                    .iter()
                    .map(|e| Cursor::from_event(&plugin, e))
                    .collect();
            }
            store.write(batch).await.expect("the batch is written");
            before = round.iter().collect();
        }
        if take {
            let batch = WriteBatch {
                saved: before
                    .iter()
                    .map(|e| Cursor::from_event(&plugin, e))
                    .collect(),
                ..WriteBatch::default()
            };
            store.write(batch).await.expect("the last batch is written");
        }
        if run > 0 {
            runs.push((cpu_time() - cpu, wall.elapsed()));
        }
    }
    runs
}

fn report(backend: &str, part: &str, runs: &[(Duration, Duration)], events: usize) {
    let per = |d: Duration| d.as_secs_f64() * 1e6 / events as f64;
    let mut cpu: Vec<f64> = runs.iter().map(|r| per(r.0)).collect();
    cpu.sort_by(f64::total_cmp);
    let (cpu_median, wall_median) = median(runs);
    println!(
        "{backend:8} {part:13} CPU {:7.2} µs/event ({:.2}–{:.2}), wall {:7.2} µs/event",
        per(cpu_median),
        cpu[0],
        cpu[cpu.len() - 1],
        per(wall_median)
    );
}

/// The run of median CPU time: its CPU and wall time.
fn median(runs: &[(Duration, Duration)]) -> (Duration, Duration) {
    let mut sorted = runs.to_vec();
    sorted.sort();
    sorted[sorted.len() / 2]
}

/// The process's user + system CPU time so far.
fn cpu_time() -> Duration {
    // SAFETY: `rusage` is integers and timevals, for which all zeros is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage only writes the struct it is given.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let t = |tv: libc::timeval| {
        Duration::from_secs(tv.tv_sec as u64) + Duration::from_micros(tv.tv_usec as u64)
    };
    t(usage.ru_utime) + t(usage.ru_stime)
}

/// The versions of every job, jobs interleaved, each with a Volcano object of its own.
fn events() -> Vec<JobEvent> {
    let phases = [
        Phase::Pending,
        Phase::Running,
        Phase::Running,
        Phase::Succeeded,
    ];
    let mut events = Vec::with_capacity(JOBS * VERSIONS);
    for version in 0..VERSIONS {
        for job in 0..JOBS {
            let uid = format!("4f8b2c1e-{job:04}-4c3a-9d2e-{:012}", job * 7919);
            let rv = (1_000_000 + version * JOBS + job).to_string();
            let phase = phases[version * phases.len() / VERSIONS];
            let name = format!("train-llama-{job}");
            let object = serde_json::json!({
                "apiVersion": "batch.volcano.sh/v1alpha1",
                "kind": "Job",
                "metadata": {
                    "name": name, "namespace": "team-nlp", "uid": uid,
                    "resourceVersion": rv, "generation": 1,
                    "creationTimestamp": "2026-11-30T08:00:00Z",
                    "labels": {"team": "nlp", "queue": "a100", "app": "pretrain"},
                    "annotations": {"scheduling.k8s.io/group-name": format!("{name}-pg")},
                },
                "spec": {
                    "minAvailable": 4, "schedulerName": "volcano", "queue": "a100",
                    "maxRetry": 3,
                    "tasks": [{"name": "worker", "replicas": 4, "template": {"spec": {
                        "containers": [{"name": "trainer",
                            "image": "registry.example.com/ml/trainer:2026.11.3",
                            "command": ["torchrun", "--nproc_per_node=8", "train.py",
                                "--config", "configs/llama-7b.yaml"],
                            "resources": {"limits": {"nvidia.com/gpu": 8, "memory": "480Gi",
                                "cpu": "96"}}}],
                        "restartPolicy": "OnFailure"}}}],
                    "policies": [{"event": "PodEvicted", "action": "RestartJob"}],
                },
                "status": {
                    "state": {"phase": format!("{phase:?}"),
                        "lastTransitionTime": "2026-11-30T08:01:00Z"},
                    "minAvailable": 4, "running": 4, "version": version,
                    "conditions": [
                        {"status": "Pending", "lastTransitionTime": "2026-11-30T08:00:01Z"},
                        {"status": "Running", "lastTransitionTime": "2026-11-30T08:01:00Z"}],
                },
            });
            events.push(JobEvent {
                id: JobEvent::make_id("east", &uid, &rv),
                cluster: "east".into(),
                api_version: "batch.volcano.sh/v1alpha1".into(),
                kind: "Job".into(),
                namespace: "team-nlp".into(),
                name,
                uid,
                resource_version: rv,
                generation: Some(1),
                phase,
                raw_phase: format!("{phase:?}"),
                reason: None,
                message: None,
                previous_phase: None,
                transition_time: "2026-11-30T08:01:00Z".into(),
                labels: BTreeMap::from([("team".to_string(), "nlp".to_string())]),
                annotations: BTreeMap::new(),
                object_json: Arc::from(object.to_string()),
                transition_key: String::new(),
                synthetic: false,
                story: None,
            });
        }
    }
    events
}
