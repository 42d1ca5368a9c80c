//! Throughput and latency of the lane + dispatch path, and memory per tracked job, with the
//! real lane, dispatcher (`Routes::route`) and SQLite cursor store; no Kubernetes API.
//!
//! The same harness runs two handlers behind the lane's `Handler` seam:
//! - `native`: a Rust no-op, the floor of the path (queues, mode, cursor writes);
//! - `wasm`: the `noop` component (`init` and `handle` return at once) through the runtime.
//!
//! Both are wrapped in the same `Timed` handler, which stamps when each call returns, so
//! latency (route() -> handler returned) is measured the same way for both.
//!
//! Phases: a burst of 20,000 events (2,000 jobs x 10 versions, ~2 KB objects) for events/s;
//! the same volume paced at 1,000 events/s for latency without a backlog; and 100,000 distinct
//! jobs (one version each, native handler) for RSS per tracked job.
//!
//! Run: `plugins/build.sh && cargo bench -p jobrelay-e2e --bench lane_throughput`.

#![expect(
    clippy::print_stdout,
    reason = "a bench's figures are its output, printed for whoever runs it"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use jobrelay_contract::event::{JobEvent, Phase};
use jobrelay_e2e::built_wasm;
use jobrelay_lanes::dispatcher::Routes;
use jobrelay_lanes::handler::Handler;
use jobrelay_lanes::lane::Lane;
use jobrelay_lanes::mode::DeliveryMode;
use jobrelay_lanes::settings::{LaneSettings, RetryPolicy};
use jobrelay_runtime::{CallError, PluginSpec, Runtime, RuntimeSettings};
use jobrelay_state::{
    Cursor, DeadLetter, DeliveryStore, Inbox, StateBackend, StoreError, Stored, WriteBatch,
    open_store,
};
use jobrelay_watch::kinds::JobKind;
use jobrelay_watch::watcher::{Observation, Observed};

const JOBS: usize = 2_000;
const VERSIONS: usize = 10;
const PACED_RATE: u64 = 1_000; // events/s in the latency phase
const RSS_JOBS: usize = 100_000;
const CONCURRENCY: usize = 4;

/// The Rust no-op.
struct NativeNoop;

#[async_trait::async_trait]
impl Handler for NativeNoop {
    fn name(&self) -> &str {
        "native"
    }
    fn version(&self) -> &str {
        "0"
    }
    async fn handle(&self, _event: &JobEvent) -> Result<(), CallError> {
        Ok(())
    }
}

/// Wraps a handler and records, per event (its index is carried in `generation`), the time
/// the call returned, in nanoseconds since `base`.
struct Timed {
    inner: Arc<dyn Handler>,
    base: Instant,
    done: Vec<AtomicU64>,
}

#[async_trait::async_trait]
impl Handler for Timed {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn version(&self) -> &str {
        self.inner.version()
    }
    async fn handle(&self, event: &JobEvent) -> Result<(), CallError> {
        let result = self.inner.handle(event).await;
        if let Some(i) = event.generation {
            let ns = self.base.elapsed().as_nanos() as u64;
            self.done[i as usize].store(ns, Ordering::Relaxed);
        }
        result
    }
}

/// A realistic batch/v1 Job of about 2 KB.
fn object(uid: &str, name: &str, rv: &str, phase: Phase) -> String {
    let (active, succeeded) = match phase {
        Phase::Succeeded => (0, 1),
        _ => (1, 0),
    };
    serde_json::json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name, "namespace": "team-a", "uid": uid, "resourceVersion": rv,
            "generation": 1, "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {
                "app.kubernetes.io/name": "trainer", "app.kubernetes.io/part-of": "ml-platform",
                "batch.kubernetes.io/job-name": name, "team": "team-a", "tier": "batch",
            },
            "annotations": {
                "example.com/owner": "someone@example.com",
                "example.com/cost-center": "cc-1234-research-and-development",
                "example.com/description": "x".repeat(400),
            },
        },
        "spec": {
            "parallelism": 1, "completions": 1, "backoffLimit": 6, "completionMode": "NonIndexed",
            "template": {"metadata": {"labels": {"batch.kubernetes.io/job-name": name}},
                "spec": {"restartPolicy": "Never", "containers": [{
                    "name": "main", "image": "registry.example.com/ml/trainer:2026.01.01",
                    "args": ["--epochs", "10", "--batch-size", "256", "--data", "s3://bucket/data"],
                    "env": [{"name": "MODE", "value": "train"}, {"name": "LOG", "value": "info"}],
                    "resources": {"requests": {"cpu": "4", "memory": "16Gi"},
                                  "limits": {"cpu": "8", "memory": "32Gi"}},
                }]}},
        },
        "status": {
            "startTime": "2026-01-01T00:00:05Z", "active": active, "succeeded": succeeded,
            "ready": active, "uncountedTerminatedPods": {},
            "conditions": [{"type": "Complete", "status": if succeeded == 1 { "True" } else { "False" },
                "lastProbeTime": "2026-01-01T00:10:00Z",
                "lastTransitionTime": "2026-01-01T00:10:00Z"}],
        },
    })
    .to_string()
}

/// The `v`-th version of job `job`; `index` (carried in `generation`) names it for `Timed`.
fn event(kind: &JobKind, job: usize, v: usize, versions: usize, index: usize) -> Observation {
    let uid = format!("00000000-0000-0000-0000-{job:012}");
    let name = format!("trainer-{job}");
    let rv = format!("{}", 1_000 + v);
    let phase = match v {
        0 => Phase::Pending,
        _ if v + 1 == versions => Phase::Succeeded,
        _ => Phase::Running,
    };
    let object = object(&uid, &name, &rv, phase);
    Observation::Version(Observed {
        event: JobEvent {
            id: JobEvent::make_id("bench", &uid, &rv),
            cluster: "bench".into(),
            api_version: "batch/v1".into(),
            kind: "Job".into(),
            namespace: "team-a".into(),
            name,
            uid,
            resource_version: rv,
            generation: Some(index as i64),
            phase,
            raw_phase: String::new(),
            reason: None,
            message: None,
            previous_phase: None,
            transition_time: format!("2026-01-01T00:{:02}:00Z", v % 60),
            labels: [("team".to_string(), "team-a".to_string())].into(),
            annotations: Default::default(),
            object_json: Arc::from(object),
            transition_key: String::new(),
            synthetic: false,
            story: None,
        },
        kind: Arc::new(kind.clone()),
        from_list: false,
        created: None,
    })
}

/// `jobs` x `versions` events, versions of a job in order, jobs interleaved.
fn events(kind: &JobKind, first_job: usize, jobs: usize, versions: usize) -> Vec<Observation> {
    let mut out = Vec::with_capacity(jobs * versions);
    for v in 0..versions {
        for j in 0..jobs {
            out.push(event(kind, first_job + j, v, versions, out.len()));
        }
    }
    out
}

fn settings() -> LaneSettings {
    LaneSettings {
        mode: DeliveryMode::EveryVersion,
        concurrency: CONCURRENCY,
        retry: RetryPolicy::default(),
        rate_limits: Vec::new(),
        kinds: Vec::new(),
        filter: Default::default(),
        max_queued_per_job: usize::MAX,
        max_inbox_events: u64::MAX,
        fleet_events: Default::default(),
    }
}

/// A fresh store and routes with one lane running `handler`.
async fn lane(dir: &tempfile::TempDir, name: &str, handler: Arc<dyn Handler>) -> (Routes, Lane) {
    let store = open_store(&StateBackend::Sqlite(dir.path().join(format!("{name}.db"))))
        .await
        .expect("store");
    let lane = Lane::open(name, handler, settings(), store, None)
        .await
        .expect("lane");
    let routes = Routes::default();
    routes.insert(name, lane.clone());
    (routes, lane)
}

struct Run {
    events_per_s: f64,
    p50: Duration,
    p99: Duration,
}

/// Feed `batch` through one lane, all at once (`pace`: None) or at a fixed rate, and wait
/// until the lane is idle.
async fn run(
    dir: &tempfile::TempDir,
    name: &str,
    handler: Arc<dyn Handler>,
    batch: Vec<Observation>,
    pace: Option<u64>,
) -> Run {
    let n = batch.len();
    let base = Instant::now();
    let timed = Arc::new(Timed {
        inner: handler,
        base,
        done: (0..n).map(|_| AtomicU64::new(0)).collect(),
    });
    let (routes, lane) = lane(dir, name, timed.clone()).await;
    let mut sent = vec![0u64; n];
    let started = Instant::now();
    for (i, observation) in batch.into_iter().enumerate() {
        if let Some(rate) = pace {
            let at = started + Duration::from_nanos(i as u64 * 1_000_000_000 / rate);
            tokio::time::sleep_until(at.into()).await;
        }
        sent[i] = base.elapsed().as_nanos() as u64;
        routes.route(observation);
    }
    lane.idle().await;
    let elapsed = started.elapsed();
    let stats = lane.stats();
    assert_eq!(stats.delivered, n as u64, "{stats:?}");
    lane.close().await;
    let mut latencies: Vec<Duration> = timed
        .done
        .iter()
        .zip(&sent)
        .map(|(done, sent)| Duration::from_nanos(done.load(Ordering::Relaxed) - sent))
        .collect();
    latencies.sort();
    Run {
        events_per_s: n as f64 / elapsed.as_secs_f64(),
        p50: latencies[n / 2],
        p99: latencies[n * 99 / 100],
    }
}

/// A cursor store that keeps nothing: with it, RSS growth is the lane's own per-job state,
/// without SQLite's page cache.
struct NullStore;

#[async_trait::async_trait]
impl DeliveryStore for NullStore {
    async fn cursors(&self, _plugin: &str) -> Result<Vec<Cursor>, StoreError> {
        Ok(Vec::new())
    }
    async fn save_cursor(&self, _cursor: &Cursor) -> Result<(), StoreError> {
        Ok(())
    }
    async fn note_first_sight(&self, _cursor: &Cursor) -> Result<(), StoreError> {
        Ok(())
    }
    async fn install_time(&self, _plugin: &str, now: &str) -> Result<String, StoreError> {
        Ok(now.to_string())
    }
    async fn save_cursors(&self, _cursors: Vec<Cursor>) -> Result<(), StoreError> {
        Ok(())
    }
    async fn write(&self, _batch: WriteBatch) -> Result<(), StoreError> {
        Ok(())
    }
    async fn inbox_page(&self, _: &str, _: i64, _: u32) -> Result<Inbox, StoreError> {
        Ok(Inbox::default())
    }
    async fn inbox_event(&self, _: &str) -> Result<Stored, StoreError> {
        Ok(Stored::Missing)
    }
    async fn remove_cursor(&self, _: &str, _: &str, _: &str) -> Result<(), StoreError> {
        Ok(())
    }
    async fn add_dead_letter(
        &self,
        _: &str,
        _: &JobEvent,
        _: &str,
        _: u32,
    ) -> Result<i64, StoreError> {
        Ok(0)
    }
    async fn dead_letters(&self, _: Option<&str>) -> Result<Vec<DeadLetter>, StoreError> {
        Ok(Vec::new())
    }
    async fn drop_dead_letters(
        &self,
        _: Option<&str>,
        _: &[i64],
        _: bool,
    ) -> Result<u64, StoreError> {
        Ok(0)
    }
    async fn request_replay(&self, _: Option<&str>, _: &[i64], _: bool) -> Result<u64, StoreError> {
        Ok(0)
    }
    async fn take_replays(
        &self,
        _: &str,
        _: Option<&[String]>,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        Ok(Vec::new())
    }
    async fn dead_letter_counts(
        &self,
    ) -> Result<std::collections::BTreeMap<String, u64>, StoreError> {
        Ok(Default::default())
    }

    async fn check(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

/// Resident set size of this process after returning freed heap to the system, in bytes.
fn trimmed_rss() -> u64 {
    // SAFETY: malloc_trim only releases free memory of glibc's heap; no pointer is involved.
    unsafe { libc::malloc_trim(0) };
    rss()
}

/// Resident set size of this process, in bytes.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|resident| resident.parse().ok())
        .expect("statm's second field, the resident pages");
    pages * 4096
}

/// RSS growth per job after `jobs` distinct jobs (one version each) went through a lane with
/// the native handler. Fed in batches of 1,000 with the lane idle in between, so transient
/// events do not pile up and the growth is mostly what the path keeps per job.
async fn rss_per_job(
    dir: &tempfile::TempDir,
    kind: &JobKind,
    jobs: usize,
    null_store: bool,
) -> (u64, u64, f64) {
    let (routes, lane) = if null_store {
        let lane = Lane::open(
            "rss-null",
            Arc::new(NativeNoop),
            settings(),
            Arc::new(NullStore),
            None,
        )
        .await
        .expect("lane");
        let routes = Routes::default();
        routes.insert("rss-null", lane.clone());
        (routes, lane)
    } else {
        lane(dir, "rss", Arc::new(NativeNoop)).await
    };
    // Warm the store, allocator and runtime with jobs that stay tracked, then measure.
    for o in events(kind, 10_000_000, 1_000, 1) {
        routes.route(o);
    }
    lane.idle().await;
    tokio::time::sleep(Duration::from_millis(200)).await; // background `note_first_sight` writes
    let before = trimmed_rss();
    for chunk in (0..jobs).step_by(1_000) {
        for o in events(kind, chunk, 1_000.min(jobs - chunk), 1) {
            routes.route(o);
        }
        lane.idle().await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = trimmed_rss();
    assert_eq!(lane.stats().jobs, (jobs + 1_000) as u64);
    lane.close().await;
    (
        before,
        after,
        after.saturating_sub(before) as f64 / jobs as f64,
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let kind = JobKind::builtin("batch-job").expect("batch-job");
    let dir = tempfile::tempdir().expect("temp dir");
    let wasm = std::fs::read(built_wasm("noop")).expect("noop.wasm");
    let runtime = Runtime::new(RuntimeSettings::default()).expect("runtime");
    let plugin = runtime
        .load(PluginSpec {
            name: "noop".into(),
            version: "1".into(),
            wasm: wasm.into(),
            wasm_sha256: String::new(),
            timeout: Duration::from_secs(5),
            memory_bytes: 64 << 20,
            instance_reuse: 1,
            config: Default::default(),
            grants: Default::default(),
        })
        .await
        .expect("noop loads");
    let handlers: [(&str, Arc<dyn Handler>); 2] =
        [("native", Arc::new(NativeNoop)), ("wasm", plugin)];

    let n = JOBS * VERSIONS;
    let size = match &events(&kind, 0, 1, 1)[0] {
        Observation::Version(observed) => observed.event.object_json.len(),
        _ => 0,
    };
    println!(
        "jobrelay lane + dispatch: one lane, concurrency {CONCURRENCY}, every-version, SQLite \
         cursor store; {n} events ({JOBS} jobs x {VERSIONS} versions), object {size} bytes\n"
    );
    println!(
        "{:<8} {:<26} {:>12} {:>12} {:>12}",
        "handler", "phase", "events/s", "p50", "p99"
    );
    let ms = |d: Duration| format!("{:.3} ms", d.as_secs_f64() * 1000.0);
    let mut burst_rates = Vec::new();
    for (label, handler) in &handlers {
        // Warm-up: first calls, pool slots, SQLite file growth.
        run(
            &dir,
            &format!("{label}-warm"),
            handler.clone(),
            events(&kind, 5_000_000, 200, 5),
            None,
        )
        .await;
        let burst = run(
            &dir,
            &format!("{label}-burst"),
            handler.clone(),
            events(&kind, 0, JOBS, VERSIONS),
            None,
        )
        .await;
        println!(
            "{label:<8} {:<26} {:>12.0} {:>12} {:>12}",
            "burst (all queued at once)",
            burst.events_per_s,
            ms(burst.p50),
            ms(burst.p99)
        );
        burst_rates.push(burst.events_per_s);
        let paced = run(
            &dir,
            &format!("{label}-paced"),
            handler.clone(),
            events(&kind, 0, JOBS, VERSIONS),
            Some(PACED_RATE),
        )
        .await;
        println!(
            "{label:<8} {:<26} {:>12.0} {:>12} {:>12}",
            format!("paced at {PACED_RATE}/s"),
            paced.events_per_s,
            ms(paced.p50),
            ms(paced.p99)
        );
    }
    let ratio = burst_rates[1] / burst_rates[0];
    println!(
        "\nwasm / native events/s: {ratio:.2} (target >= 0.50: {})",
        if ratio >= 0.5 { "met" } else { "NOT met" }
    );

    for (label, null_store) in [
        ("lane alone (no-op store)", true),
        ("lane + SQLite store", false),
    ] {
        let (before, after, per_job) = rss_per_job(&dir, &kind, RSS_JOBS, null_store).await;
        println!(
            "\nRSS with {RSS_JOBS} tracked jobs, {label}, native handler, after malloc_trim: \
             before {:.1} MiB, after {:.1} MiB, {per_job:.0} bytes per job (target < 1024: {})",
            before as f64 / (1 << 20) as f64,
            after as f64 / (1 << 20) as f64,
            if per_job < 1024.0 { "met" } else { "NOT met" }
        );
    }
}
