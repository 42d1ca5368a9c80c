//! What the job view costs at fleet scale: memory per job, list latency over a million jobs on
//! twenty clusters, and what feeding it adds to the event path, with and without queries
//! running beside it.
//!
//! Run: `cargo bench -p jobrelay-fleet --bench job_view` (`-- --jobs N` for another size).
//! Results and method: docs/BENCHMARKS.md, "Job view".

#![expect(
    clippy::print_stdout,
    reason = "a bench's figures are its output, printed for whoever runs it"
)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use jobrelay_contract::event::{JobEvent, Phase};
use jobrelay_fleet::jobs::{JobView, ViewSettings};
use jobrelay_fleet::query::JobQuery;
use jobrelay_fleet::timers::{Counted, Measure, TimedState, Timer, Timers};
use jobrelay_watch::kinds::JobKind;
use jobrelay_watch::tracker::Observed;

mod common;

use common::{Counting, LIVE};

#[global_allocator]
static ALLOC: Counting = Counting;

const CLUSTERS: usize = 20;
const T0: i64 = 1_790_000_000;

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

fn kinds() -> Vec<Arc<JobKind>> {
    ["batch-job", "volcano-job", "pytorch-job"]
        .iter()
        .map(|n| Arc::new(JobKind::builtin(n).expect("built-in")))
        .collect()
}

/// Job `i`'s version in `phase` at `at`. Labels: a team and a queue from small sets, and with
/// `unique` a label whose value only this job has (a run id).
fn observed(i: usize, phase: Phase, at: i64, kinds: &[Arc<JobKind>], unique: bool) -> Observed {
    let cluster = format!("cluster-{:02}", i % CLUSTERS);
    let uid = format!("{:08x}-0000-4000-8000-{:012x}", i, i);
    let mut labels = BTreeMap::new();
    labels.insert("team".to_string(), format!("t{}", i % 8));
    labels.insert("queue".to_string(), format!("q{}", (i / 8) % 4));
    if unique {
        labels.insert("run-id".to_string(), format!("run-{i:08}"));
    }
    let time = chrono::DateTime::from_timestamp(at, 0)
        .expect("time")
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    Observed {
        event: JobEvent {
            id: JobEvent::make_id(&cluster, &uid, &at.to_string()),
            transition_key: String::new(),
            cluster,
            api_version: "batch/v1".into(),
            kind: "Job".into(),
            namespace: format!("ns-{}", (i / 3) % 10),
            name: format!("train-{i:07}"),
            uid,
            resource_version: at.to_string(),
            generation: None,
            phase,
            raw_phase: format!("{phase:?}"),
            reason: None,
            message: None,
            previous_phase: None,
            transition_time: time,
            labels,
            annotations: BTreeMap::new(),
            object_json: Arc::from("{}"),
            synthetic: false,
            story: None,
        },
        kind: kinds[i % kinds.len()].clone(),
        from_list: false,
        created: Some(T0 + (i as i64 % 86_400)),
    }
}

/// The phases job `i` goes through: pending, running, then (most) an end.
fn path_of(i: usize) -> &'static [Phase] {
    match i % 20 {
        0..=11 => &[Phase::Pending, Phase::Running, Phase::Succeeded],
        12..=13 => &[Phase::Pending, Phase::Running, Phase::Failed],
        14..=18 => &[Phase::Pending, Phase::Running],
        _ => &[Phase::Pending],
    }
}

fn fill(view: &JobView, jobs: usize, kinds: &[Arc<JobKind>], unique: bool) {
    for i in 0..jobs {
        let created = T0 + (i as i64 % 86_400);
        for (step, phase) in path_of(i).iter().enumerate() {
            view.observe(&observed(
                i,
                *phase,
                created + step as i64 * 60,
                kinds,
                unique,
            ));
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

const QUERIES: &[&str] = &[
    "limit=100",
    "phase=failed&limit=100",
    "cluster=cluster-07&phase=running",
    "labelSelector=team%3Dt3,queue%20in%20(q1,q2)&limit=100",
    "name=train-00042",
    "sort=-created&limit=100",
    "sort=-finished&phase=succeeded,failed&limit=50",
    "namespace=ns-3&kind=pytorch-job&sort=name&limit=100",
];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let jobs = args
        .iter()
        .position(|a| a == "--jobs")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(1_000_000usize);
    let kinds = kinds();

    // Memory: the view's live heap bytes, and the process's RSS, per job.
    for unique in [false, true] {
        let before = LIVE.load(Ordering::Relaxed);
        let rss_before = rss_bytes();
        let view = JobView::new(ViewSettings::default());
        let started = Instant::now();
        fill(&view, jobs, &kinds, unique);
        let took = started.elapsed();
        let live = LIVE.load(Ordering::Relaxed) - before;
        let rss = rss_bytes().saturating_sub(rss_before);
        println!(
            "memory, {} label set{}: {} jobs held, {:.1} heap bytes/job ({:.1} MiB), RSS +{:.1} bytes/job; fed {} events in {:.2} s",
            if unique { "a unique" } else { "a shared" },
            if unique { " per job" } else { "" },
            view.len(),
            live as f64 / jobs as f64,
            live as f64 / (1024.0 * 1024.0),
            rss as f64 / jobs as f64,
            (0..jobs).map(|i| path_of(i).len()).sum::<usize>(),
            took.as_secs_f64(),
        );
        if unique {
            break;
        }
        drop(view);
    }

    let view = Arc::new(JobView::new(ViewSettings::default()));
    fill(&view, jobs, &kinds, false);

    // List latency.
    println!("\nlist latency over {jobs} jobs on {CLUSTERS} clusters (50 runs each):");
    println!("| query | items | remaining | p50 | p99 | max |");
    println!("|---|---|---|---|---|---|");
    for text in QUERIES {
        let query = JobQuery::parse(text).expect("query");
        let mut times = Vec::new();
        let mut page = view.list(&query);
        for _ in 0..50 {
            let started = Instant::now();
            page = view.list(&query);
            times.push(started.elapsed());
        }
        times.sort();
        println!(
            "| `{text}` | {} | {} | {:.1} ms | {:.1} ms | {:.1} ms |",
            page.items.len(),
            page.remaining,
            percentile(&times, 0.5).as_secs_f64() * 1e3,
            percentile(&times, 0.99).as_secs_f64() * 1e3,
            times.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
        );
    }
    // Deep paging: ten pages by creation time, each from the previous one's token.
    let mut times = Vec::new();
    let mut token: Option<String> = None;
    for _ in 0..10 {
        let text = match &token {
            Some(t) => format!("sort=created&limit=100&continue={t}"),
            None => "sort=created&limit=100".to_string(),
        };
        let query = JobQuery::parse(&text).expect("query");
        let started = Instant::now();
        let page = view.list(&query);
        times.push(started.elapsed());
        token = page.next;
    }
    times.sort();
    println!(
        "| ten pages by `sort=created`, each continued | 100 | | {:.1} ms | {:.1} ms | {:.1} ms |",
        percentile(&times, 0.5).as_secs_f64() * 1e3,
        percentile(&times, 0.99).as_secs_f64() * 1e3,
        times.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );

    // Timers: ten over every job, judged as the daemon's evaluation task does — a first
    // pass that finds every long stay (the firings, allocated), then passes with nothing new.
    let mut timers = Timers::default();
    let timer =
        |name: &str, state, longer_than, clusters: &[&str], namespaces: &[&str], kinds: &[&str]| {
            Timer {
                name: name.to_string(),
                measure: Measure::Stay { state, longer_than },
                clusters: clusters.iter().map(|c| c.to_string()).collect(),
                namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
                kinds: kinds.iter().map(|k| k.to_string()).collect(),
            }
        };
    let mut set = vec![
        timer("pending-long", TimedState::Pending, 3600, &[], &[], &[]),
        timer("running-long", TimedState::Running, 86_400, &[], &[], &[]),
        timer("queued-long", TimedState::Queued, 3600, &[], &[], &[]),
    ];
    for i in 0..7 {
        set.push(timer(
            &format!("scoped-{i}"),
            if i % 2 == 0 {
                TimedState::Pending
            } else {
                TimedState::Running
            },
            7200,
            &["cluster-0*"],
            &[&format!("ns-{i}")],
            &["pytorch-job"],
        ));
    }
    // And two counting timers: one job in a hundred of those still running restarted four
    // times in the last hour (the view's history holds them), none preempted.
    set.push(Timer {
        measure: Measure::Count {
            counted: Counted::Restarted,
            more_than: 3,
            within: 3600,
        },
        ..timer("restarts-often", TimedState::Running, 1, &[], &[], &[])
    });
    set.push(Timer {
        measure: Measure::Count {
            counted: Counted::Preempted,
            more_than: 3,
            within: 3600,
        },
        ..timer("preempted-often", TimedState::Running, 1, &[], &[], &[])
    });
    let mut flapping = 0;
    for i in (0..jobs).filter(|i| i % 100 == 14) {
        for r in 0..4 {
            let at = T0 + 86_400 + 600 + r * 120;
            view.observe(&observed(i, Phase::Restarting, at, &kinds, false));
            view.observe(&observed(i, Phase::Running, at + 60, &kinds, false));
        }
        flapping += 1;
    }
    timers.set_timers(set);
    timers.load_counts(Vec::new());
    let now = u32::try_from(T0 + 86_400 + 3600).expect("secs");
    let before = LIVE.load(Ordering::Relaxed);
    let judge = |timers: &mut Timers, at: u32| {
        let cpu = thread_cpu();
        let started = Instant::now();
        let mut pass = timers.pass(at);
        view.judge_timers(&mut pass);
        let changes = pass.end().len();
        // As the daemon does once it wrote them to the state store.
        let unsaved = timers.unsaved_counts();
        timers.counts_saved(&unsaved);
        (started.elapsed(), thread_cpu() - cpu, changes)
    };
    let (first_wall, first_cpu, fired) = judge(&mut timers, now);
    let held = LIVE.load(Ordering::Relaxed) - before;
    let mut walls = Vec::new();
    let mut cpus = Vec::new();
    let mut later = 0;
    for step in 1..=20 {
        // 15 s apart, the default interval: a few stays come of age in between.
        let (wall, cpu, changes) = judge(&mut timers, now + step * 15);
        later += changes;
        walls.push(wall);
        cpus.push(cpu);
    }
    walls.sort();
    cpus.sort();
    println!(
        "\ntimers: 12 over {jobs} jobs ({flapping} restarted 4 times); first pass {:.1} ms wall \
         ({:.1} ms CPU), {fired} firings; then p50 {:.1} ms wall, {:.1} ms CPU, p99 {:.1} ms \
         wall per pass ({later} changes in 20 passes); held {:.1} MiB ({:.0} bytes per firing \
         or counted job; {} jobs' counted times)",
        first_wall.as_secs_f64() * 1e3,
        first_cpu.as_secs_f64() * 1e3,
        percentile(&walls, 0.5).as_secs_f64() * 1e3,
        percentile(&cpus, 0.5).as_secs_f64() * 1e3,
        percentile(&walls, 0.99).as_secs_f64() * 1e3,
        held as f64 / (1024.0 * 1024.0),
        held as f64 / (timers.firing_count() + timers.counted_jobs()).max(1) as f64,
        timers.counted_jobs(),
    );
    drop(timers);

    // The event path's share: observing versions of tracked jobs (a phase change each), alone
    // and while another thread lists 50 times a second.
    println!("\nfeeding the view (one version of a tracked job each):");
    let events: Vec<Observed> = (0..200_000)
        .map(|i| {
            let j = (i * 7_919) % jobs;
            observed(j, Phase::Restarting, T0 + 90_000 + i as i64, &kinds, false)
        })
        .collect();
    for queried in [false, true] {
        let stop = Arc::new(AtomicBool::new(false));
        let asker = queried.then(|| {
            let view = view.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut n = 0usize;
                let mut asked = 0u64;
                let start = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    let query = JobQuery::parse(QUERIES[n % QUERIES.len()]).expect("query");
                    let _ = view.list(&query);
                    asked += 1;
                    n += 1;
                    // 50 a second.
                    let next = start + Duration::from_millis(20 * n as u64);
                    if let Some(wait) = next.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                }
                asked
            })
        });
        let cpu_before = thread_cpu();
        let started = Instant::now();
        for event in &events {
            view.observe(event);
        }
        let wall = started.elapsed();
        let cpu = thread_cpu() - cpu_before;
        stop.store(true, Ordering::Relaxed);
        let asked = asker.map(|t| t.join().unwrap_or(0));
        println!(
            "{}: {:.0} ns CPU per event ({:.0} ns wall){}",
            if queried {
                "while listed 50 times a second"
            } else {
                "alone"
            },
            cpu.as_nanos() as f64 / events.len() as f64,
            wall.as_nanos() as f64 / events.len() as f64,
            asked
                .map(|n| format!("; {n} lists meanwhile"))
                .unwrap_or_default(),
        );
    }
}

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the pointer given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
