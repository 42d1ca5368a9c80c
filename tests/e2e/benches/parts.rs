//! The parts of the event path, each alone: what every step no design can skip costs per
//! event, measured in this process one after another (no daemon, no HTTP), to tell how low the
//! end-to-end figure of `event_path` can go with these parts.
//!
//! Input: the 22,000 watch lines of `event_path`'s stream (2,000 Volcano jobs of about 1.6 KB,
//! 11 versions each, versions of a job in order, jobs interleaved), as the simulator sends them.
//!
//! Parts:
//! - `json`: each line checked as JSON and nothing kept (`serde_json` into `IgnoredAny`): what
//!   reading a watch line costs at the least with this parser;
//! - `decode`: each line decoded as kube's watcher does, into a `WatchEvent` of jobrelay's
//!   object reading (`LenientObject`);
//! - `track`: `Tracker::observe` on the decoded objects (normalize, transition key, the event);
//! - `hand-over`: one event passed over a channel from the bench's main thread to a task on a
//!   tokio worker, while they stream; and a `round trip` (a request the same way and its answer
//!   over a oneshot, one at a time), the shape of a worker waiting for its cursor's
//!   acknowledgement;
//! - `store N`: the SQLite state store saving each event's cursor, in batches of N
//!   (`save_cursors`; the writer's batch size depends on the load);
//! - `sqlite N` and `narrow N`: the same rows written straight through rusqlite, one
//!   transaction of N single-row upserts, with the store's schema and pragmas, and with a
//!   row of only (plugin, cluster, uid, version, phase): what SQLite itself costs per row, and
//!   what a narrower row would save;
//! - `call fresh`, `call reuse`: the `noop` plugin called once per event through the runtime
//!   (a fresh instance per call; an instance serving 256 calls);
//! - `writer`, `writer + take`, `writer + stored`: the inbox's take alone. Each event's cursor
//!   saved through a lane's real `LaneWriter` on the SQLite store, 64 saves in flight as a
//!   lane's workers keep them; then the same with each event taken into the inbox first and
//!   its take settled by the save before it is due (the lane kept up: nothing is written to
//!   the inbox, the cursor is copied from the event the writer shares, as the lane does); then
//!   with every take stored before its save (a flush, as when the lane trails by more than the
//!   delay: the event encoded, its row and mark written, the mark removed by the save; the
//!   sweep of the row ten minutes later is not in the figure). The differences are what the
//!   take costs per event that does not touch the store, and per event that does.
//!
//! CPU is the process's user + system time (`getrusage`), so threads a part uses (SQLite's,
//! the engine's epoch ticker) count; wall time beside it. Each part runs 5 times after a
//! warm-up run; the median is shown with the range. The allocator is mimalloc, as in the
//! daemon.
//!
//! The last lines add the parts up: jobrelay's own parts with no hand-over between them, and
//! the least any reading, durable row and call could cost with these libraries (the JSON
//! checked once, the narrow row in large batches). The daemon's figure minus the first sum is
//! what the path spends between the parts: hand-overs, waking threads, the HTTP stream, the
//! lane's bookkeeping. A hand-over's cost depends on whether the receiving thread was asleep
//! (a round trip costs several times more on an idle machine than on a busy one).
//!
//! Run: `plugins/build.sh && cargo bench -p jobrelay-e2e --bench parts` (`-- --only writer`
//! for the `writer` parts alone).

#![expect(
    clippy::print_stdout,
    reason = "a bench's figures are its output, printed for whoever runs it"
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use jobrelay_contract::event::JobEvent;
use jobrelay_e2e::built_wasm;
use jobrelay_e2e::stream_jobs::{volcano_job, volcano_status};
use jobrelay_lanes::budget::{MemoryBudget, charge_of};
use jobrelay_lanes::lane::writer::LaneWriter;
use jobrelay_runtime::{PluginSpec, PluginVersion, Runtime, RuntimeSettings};
use jobrelay_state::{Cursor, StateBackend, open_store};
use jobrelay_watch::kinds::JobKind;
use jobrelay_watch::lenient::LenientObject;
use jobrelay_watch::object::JobObject;
use jobrelay_watch::watcher::{Observation, Tracker};
use kube::core::WatchEvent;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const JOBS: usize = 2_000;
const VERSIONS: usize = 11;
const RUNS: usize = 5;

/// The process's CPU time (user + system, all threads).
fn cpu() -> Duration {
    // SAFETY: getrusage writes into the struct it is given and reads nothing else.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1_000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// The stream's watch lines, in the order the simulator sends them.
fn watch_lines() -> Vec<Vec<u8>> {
    let mut objects: Vec<Value> = (0..JOBS)
        .map(|i| {
            let mut job = volcano_job(i);
            // What the simulator adds on creation.
            let metadata = &mut job["metadata"];
            metadata["uid"] = json!(format!("{:08x}-5e1d-4c3a-9b7f-{:012x}", i, i * 7919));
            metadata["creationTimestamp"] = json!("2026-11-26T00:00:00Z");
            metadata["generation"] = json!(1);
            job
        })
        .collect();
    let mut version = 1_000u64;
    let mut lines = Vec::with_capacity(JOBS * VERSIONS);
    for step in 0..VERSIONS {
        for object in &mut objects {
            version += 1;
            if step > 0 {
                object["status"] = volcano_status(step, step + 1 == VERSIONS);
            }
            object["metadata"]["resourceVersion"] = json!(version.to_string());
            let kind = if step == 0 { "ADDED" } else { "MODIFIED" };
            // The type first, as API servers write it (kube reads the object in place then).
            let mut text = format!(r#"{{"type":"{kind}","object":"#).into_bytes();
            serde_json::to_writer(&mut text, &object).expect("serialize");
            text.extend_from_slice(b"}\n");
            lines.push(text);
        }
    }
    lines
}

/// One part's figures over `RUNS` runs of `events` events.
struct Figures {
    cpu: Vec<f64>,
    wall: Vec<f64>,
}

impl Figures {
    fn new() -> Figures {
        Figures {
            cpu: Vec::new(),
            wall: Vec::new(),
        }
    }

    fn add(&mut self, cpu: Duration, wall: Duration, events: usize) {
        self.cpu.push(cpu.as_secs_f64() * 1e6 / events as f64);
        self.wall.push(wall.as_secs_f64() * 1e6 / events as f64);
    }

    fn median(values: &[f64]) -> f64 {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        sorted[sorted.len() / 2]
    }

    fn print(&self, part: &str) -> f64 {
        let median = Figures::median(&self.cpu);
        let low = self.cpu.iter().copied().fold(f64::INFINITY, f64::min);
        let high = self.cpu.iter().copied().fold(0.0, f64::max);
        println!(
            "{part:<16} {median:>8.2} µs CPU per event ({low:.2}–{high:.2}); wall {:.2} µs",
            Figures::median(&self.wall)
        );
        median
    }
}

/// Times `body` (which handles `events` events) `RUNS` times after one warm-up run.
async fn measure<F, Fut>(part: &str, events: usize, mut body: F) -> f64
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    body().await;
    let mut figures = Figures::new();
    for _ in 0..RUNS {
        let (cpu0, wall0) = (cpu(), Instant::now());
        body().await;
        figures.add(cpu() - cpu0, wall0.elapsed(), events);
    }
    figures.print(part)
}

fn decode(line: &[u8]) -> JobObject {
    match serde_json::from_slice::<WatchEvent<LenientObject>>(line) {
        Ok(WatchEvent::Added(LenientObject(Ok(object))))
        | Ok(WatchEvent::Modified(LenientObject(Ok(object)))) => object,
        other => panic!("a watch line of the stream did not read: {other:?}"),
    }
}

/// The events the stream makes, as the watch hands them on.
fn events(kind: &Arc<JobKind>, lines: &[Vec<u8>]) -> Vec<JobEvent> {
    let mut tracker = Tracker::new("alpha".into(), kind.clone(), None);
    let mut out = Vec::with_capacity(lines.len());
    for line in lines {
        for observation in tracker.observe(Event::Apply(decode(line))) {
            if let Observation::Version(observed) = observation {
                out.push(observed.event);
            }
        }
    }
    assert_eq!(out.len(), lines.len(), "every version is an event");
    out
}

fn plugin_spec(instance_reuse: u32) -> PluginSpec {
    PluginSpec {
        name: "noop".into(),
        version: "1".into(),
        wasm: std::fs::read(built_wasm("noop")).expect("noop.wasm").into(),
        wasm_sha256: String::new(),
        timeout: Duration::from_secs(5),
        memory_bytes: 64 << 20,
        instance_reuse,
        config: Default::default(),
        grants: Default::default(),
    }
}

async fn calls(plugin: &PluginVersion, events: &[JobEvent]) {
    for event in events {
        plugin.handle(event).await.expect("noop handles");
    }
}

/// Whether, and how, each event is taken into the inbox before its save.
#[derive(Clone, Copy, PartialEq)]
enum Take {
    None,
    Settled,
    Stored,
}

/// The `writer` parts: the three ways interleaved, run by run, so that the machine's drift
/// falls on each alike.
async fn inbox_take(dir: &std::path::Path, events: &[JobEvent]) {
    const IN_FLIGHT: usize = 64;
    let ways = [
        (Take::None, "writer"),
        (Take::Settled, "writer + take"),
        (Take::Stored, "writer + stored"),
    ];
    let mut figures: Vec<Figures> = ways.iter().map(|_| Figures::new()).collect();
    for run in 0..=RUNS {
        for (way, (take, _)) in ways.iter().enumerate() {
            let path = dir.join(format!("inbox-{way}-{run}.db"));
            let store = open_store(&StateBackend::Sqlite(path))
                .await
                .expect("store");
            let writer = LaneWriter::start("noop", store.clone(), MemoryBudget::new(128 << 20));
            let owned: Vec<JobEvent> = events.to_vec();
            let (cpu0, wall0) = (cpu(), Instant::now());
            let mut owned = owned.into_iter().peekable();
            while owned.peek().is_some() {
                let chunk: Vec<Arc<JobEvent>> =
                    owned.by_ref().take(IN_FLIGHT).map(Arc::new).collect();
                if *take != Take::None {
                    for event in &chunk {
                        writer.take(event.clone(), charge_of(event));
                    }
                }
                if *take == Take::Stored {
                    assert!(writer.flush().await, "every take stored");
                }
                let saves = chunk.into_iter().map(|event| {
                    let writer = writer.clone();
                    async move {
                        // As the lane settles a call: the fields move into the cursor unless
                        // the writer still shares the event.
                        let (cursor, id) = match Arc::try_unwrap(event) {
                            Ok(event) => Cursor::taking("noop", event),
                            Err(shared) => (Cursor::from_event("noop", &shared), shared.id.clone()),
                        };
                        writer.save(cursor, Some(id)).await.expect("save");
                    }
                });
                futures::future::join_all(saves).await;
            }
            let written = writer.written();
            if run > 0 {
                figures[way].add(cpu() - cpu0, wall0.elapsed(), events.len());
            }
            let expected = if *take == Take::Stored {
                events.len() as u64
            } else {
                0
            };
            assert_eq!(written, expected, "takes written to the inbox");
            drop(writer);
            store.close().await;
        }
    }
    let medians: Vec<f64> = ways
        .iter()
        .zip(&figures)
        .map(|((_, name), f)| f.print(name))
        .collect();
    println!(
        "the take costs {:.2} µs per event settled before it is due, {:.2} µs per event stored",
        medians[1] - medians[0],
        medians[2] - medians[0]
    );
}

/// The store's cursor schema and pragmas, for the rows written straight through rusqlite.
const WIDE: &str = "CREATE TABLE cursors (
    plugin TEXT NOT NULL, cluster TEXT NOT NULL, uid TEXT NOT NULL,
    api_version TEXT NOT NULL, kind TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
    resource_version TEXT NOT NULL, phase TEXT NOT NULL, transition_time TEXT NOT NULL,
    deleted INTEGER NOT NULL,
    PRIMARY KEY (plugin, cluster, uid)) WITHOUT ROWID";
const WIDE_UPSERT: &str =
    "INSERT INTO cursors VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
    ON CONFLICT (plugin, cluster, uid) DO UPDATE SET api_version = excluded.api_version,
    kind = excluded.kind, namespace = excluded.namespace, name = excluded.name,
    resource_version = excluded.resource_version, phase = excluded.phase,
    transition_time = excluded.transition_time, deleted = excluded.deleted";
const NARROW: &str = "CREATE TABLE cursors (
    plugin TEXT NOT NULL, cluster TEXT NOT NULL, uid TEXT NOT NULL,
    resource_version TEXT NOT NULL, phase TEXT NOT NULL,
    PRIMARY KEY (plugin, cluster, uid)) WITHOUT ROWID";
const NARROW_UPSERT: &str = "INSERT INTO cursors VALUES (?1, ?2, ?3, ?4, ?5)
    ON CONFLICT (plugin, cluster, uid) DO UPDATE SET
    resource_version = excluded.resource_version, phase = excluded.phase";

fn sqlite_rows(dir: &std::path::Path, narrow: bool, batch: usize, cursors: &[Cursor]) {
    let path = dir.join(format!("rows-{narrow}-{batch}.db"));
    let _ = std::fs::remove_file(&path);
    let mut conn = rusqlite::Connection::open(&path).expect("open");
    conn.pragma_update(None, "journal_mode", "WAL")
        .expect("wal");
    conn.pragma_update(None, "synchronous", "NORMAL")
        .expect("sync");
    conn.execute_batch(if narrow { NARROW } else { WIDE })
        .expect("schema");
    for chunk in cursors.chunks(batch) {
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .expect("begin");
        {
            let sql = if narrow { NARROW_UPSERT } else { WIDE_UPSERT };
            let mut statement = tx.prepare_cached(sql).expect("prepare");
            for c in chunk {
                if narrow {
                    statement.execute(rusqlite::params![
                        c.plugin,
                        c.cluster,
                        c.uid,
                        c.resource_version,
                        c.phase.as_str()
                    ])
                } else {
                    statement.execute(rusqlite::params![
                        c.plugin,
                        c.cluster,
                        c.uid,
                        c.api_version,
                        c.kind,
                        c.namespace,
                        c.name,
                        c.resource_version,
                        c.phase.as_str(),
                        c.transition_time,
                        c.deleted
                    ])
                }
                .expect("upsert");
            }
        }
        tx.commit().expect("commit");
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let kind = Arc::new(JobKind::builtin("volcano-job").expect("volcano-job"));
    let lines = watch_lines();
    let n = lines.len();
    let bytes: usize = lines.iter().map(Vec::len).sum();
    println!(
        "the parts of the event path alone: {n} watch lines ({JOBS} jobs x {VERSIONS} versions), \
         {} bytes a line on average; median of {RUNS} runs\n",
        bytes / n
    );
    if std::env::args().skip(1).collect::<Vec<_>>() == ["--only", "writer"] {
        let kind = Arc::new(JobKind::builtin("volcano-job").expect("volcano-job"));
        let dir = tempfile::tempdir().expect("temp dir");
        inbox_take(dir.path(), &events(&kind, &lines)).await;
        return;
    }

    let json = measure("json", n, || async {
        for line in &lines {
            serde_json::from_slice::<serde::de::IgnoredAny>(line).expect("json");
        }
    })
    .await;
    let decode_part = measure("decode", n, || async {
        for line in &lines {
            std::hint::black_box(decode(line));
        }
    })
    .await;
    let track = {
        let mut figures = Figures::new();
        for run in 0..=RUNS {
            let objects: Vec<JobObject> = lines.iter().map(|l| decode(l)).collect();
            let mut tracker = Tracker::new("alpha".into(), kind.clone(), None);
            let (cpu0, wall0) = (cpu(), Instant::now());
            for object in objects {
                std::hint::black_box(tracker.observe(Event::Apply(object)));
            }
            if run > 0 {
                figures.add(cpu() - cpu0, wall0.elapsed(), n);
            }
        }
        figures.print("track")
    };

    let events = events(&kind, &lines);

    let hand_over = {
        let mut figures = Figures::new();
        for run in 0..=RUNS {
            let batch = events.clone();
            let (tx, mut rx) = tokio::sync::mpsc::channel::<JobEvent>(256);
            let consumer = tokio::spawn(async move {
                let mut count = 0;
                while let Some(event) = rx.recv().await {
                    std::hint::black_box(event);
                    count += 1;
                }
                count
            });
            let (cpu0, wall0) = (cpu(), Instant::now());
            for event in batch {
                tx.send(event).await.expect("send");
            }
            drop(tx);
            assert_eq!(consumer.await.expect("consumer"), n);
            if run > 0 {
                figures.add(cpu() - cpu0, wall0.elapsed(), n);
            }
        }
        figures.print("hand-over")
    };
    let round_trip = {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<tokio::sync::oneshot::Sender<()>>(256);
        tokio::spawn(async move {
            while let Some(answer) = rx.recv().await {
                let _ = answer.send(());
            }
        });
        measure("round trip", n, || async {
            for _ in 0..n {
                let (answer, answered) = tokio::sync::oneshot::channel();
                tx.send(answer).await.expect("send");
                answered.await.expect("answer");
            }
        })
        .await
    };

    let cursors: Vec<Cursor> = events
        .iter()
        .map(|e| Cursor::from_event("noop", e))
        .collect();
    let dir = tempfile::tempdir().expect("temp dir");
    let mut store_by_batch = Vec::new();
    for batch in [1, 16, 256] {
        let mut figures = Figures::new();
        for run in 0..=RUNS {
            let path = dir.path().join(format!("store-{batch}-{run}.db"));
            let store = open_store(&StateBackend::Sqlite(path))
                .await
                .expect("store");
            let (cpu0, wall0) = (cpu(), Instant::now());
            for chunk in cursors.chunks(batch) {
                store.save_cursors(chunk.to_vec()).await.expect("save");
            }
            if run > 0 {
                figures.add(cpu() - cpu0, wall0.elapsed(), n);
            }
            store.close().await;
        }
        store_by_batch.push((batch, figures.print(&format!("store {batch}"))));
    }
    let mut narrow_by_batch = Vec::new();
    for narrow in [false, true] {
        for batch in [16, 256] {
            let mut figures = Figures::new();
            for run in 0..=RUNS {
                let (cpu0, wall0) = (cpu(), Instant::now());
                sqlite_rows(dir.path(), narrow, batch, &cursors);
                if run > 0 {
                    figures.add(cpu() - cpu0, wall0.elapsed(), n);
                }
            }
            let name = if narrow { "narrow" } else { "sqlite" };
            let median = figures.print(&format!("{name} {batch}"));
            if narrow {
                narrow_by_batch.push((batch, median));
            }
        }
    }

    inbox_take(dir.path(), &events).await;

    let runtime = Runtime::new(RuntimeSettings::default()).expect("runtime");
    let fresh = runtime.load(plugin_spec(1)).await.expect("noop loads");
    let call_fresh = measure("call fresh", n, || calls(&fresh, &events)).await;
    let reuse = runtime.load(plugin_spec(256)).await.expect("noop loads");
    let call_reuse = measure("call reuse", n, || calls(&reuse, &events)).await;

    let store256 = store_by_batch
        .iter()
        .find(|(b, _)| *b == 256)
        .map_or(0.0, |(_, v)| *v);
    let narrow256 = narrow_by_batch
        .iter()
        .find(|(b, _)| *b == 256)
        .map_or(0.0, |(_, v)| *v);
    let ours = decode_part + track + store256;
    let least = json + narrow256;
    println!(
        "\nthe parts alone, with no hand-over between them (decode + track + store 256 + the \
         call): fresh {:.1} µs, reuse {:.1} µs per event",
        ours + call_fresh,
        ours + call_reuse,
    );
    println!(
        "the least any reading, durable row and call can cost here (json + narrow 256 + the \
         call): fresh {:.1} µs, reuse {:.1} µs per event",
        least + call_fresh,
        least + call_reuse,
    );
    println!(
        "each hand-over between tasks adds {hand_over:.1} µs while events stream, a request \
         answered across threads {round_trip:.1} µs"
    );
}
