//! What judging the fleet rules costs: one evaluation of 100 rules over the job SLIs of 20
//! clusters (10 namespaces and 3 kinds each: 600 series with histograms), the rules' measures
//! mixed (failure ratio, queue-wait and run-time p95) and scoped (all, one kind, one
//! namespace), and the memory their windows keep once full.
//!
//! Run: `cargo bench -p jobrelay-fleet --bench rules`.
//! Results and method: docs/BENCHMARKS.md, "Fleet rules".

#![expect(
    clippy::print_stdout,
    reason = "a bench's figures are its output, printed for whoever runs it"
)]

use std::sync::atomic::Ordering;
use std::time::Instant;

use jobrelay_fleet::rules::{Measure, Rule, Rules};
use jobrelay_fleet::sli::{Sample, Slis};

mod common;

use common::{Counting, LIVE};

#[global_allocator]
static ALLOC: Counting = Counting;

const KINDS: [&str; 3] = ["batch-job", "volcano-job", "pytorch-job"];

fn thread_cpu() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to write into.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

fn main() {
    let slis = Slis::new(50);
    let mut n = 0u64;
    let mut feed = |slis: &Slis| {
        for c in 0..20 {
            for ns in 0..10 {
                for kind in KINDS {
                    n += 1;
                    let (cluster, namespace) = (format!("cluster-{c:02}"), format!("ns-{ns}"));
                    slis.record(
                        &cluster,
                        &namespace,
                        kind,
                        Sample::Started {
                            waited: (n % 900) as f64,
                        },
                    );
                    slis.record(
                        &cluster,
                        &namespace,
                        kind,
                        Sample::Ended {
                            succeeded: !n.is_multiple_of(7),
                            ran: Some((n % 20_000) as f64),
                            cause: None,
                        },
                    );
                }
            }
        }
    };
    feed(&slis);
    let measures = [
        Measure::FailureRatio,
        Measure::QueueWaitP95,
        Measure::RunTimeP95,
    ];
    let rules: Vec<Rule> = (0..100)
        .map(|i| Rule {
            groups: vec![],
            name: format!("rule-{i}"),
            measure: measures[i % 3],
            above: if i % 3 == 0 { 0.1 } else { 600.0 },
            for_seconds: 120,
            window_seconds: 600,
            min_jobs: 5,
            clusters: if i % 4 == 0 {
                vec!["cluster-0*".into()]
            } else {
                vec![]
            },
            namespaces: if i % 5 == 0 {
                vec![format!("ns-{}", i % 10)]
            } else {
                vec![]
            },
            kinds: if i % 2 == 0 {
                vec![KINDS[i % 3].to_string()]
            } else {
                vec![]
            },
        })
        .collect();
    let before = LIVE.load(Ordering::Relaxed);
    let mut judge = Rules::new(rules);
    // Every 15 s (the default) for two windows' worth, the SLIs growing between evaluations.
    let mut wall = Vec::new();
    let mut cpu = Vec::new();
    let mut changes = 0;
    for step in 0..120i64 {
        feed(&slis);
        let started = (Instant::now(), thread_cpu());
        let rows = slis.snapshot();
        changes += judge.evaluate(&rows, step * 15).len();
        wall.push(started.0.elapsed().as_secs_f64() * 1e3);
        cpu.push((thread_cpu() - started.1) * 1e3);
    }
    let kept = LIVE.load(Ordering::Relaxed) - before;
    wall.sort_by(f64::total_cmp);
    cpu.sort_by(f64::total_cmp);
    let pct = |v: &[f64], p: f64| v[((v.len() - 1) as f64 * p) as usize];
    println!(
        "fleet rules: 100 rules x 20 clusters (600 SLI series), evaluated 120 times, 15 s apart"
    );
    println!(
        "  per evaluation (SLI snapshot included): wall p50 {:.2} ms, p99 {:.2} ms; CPU p50 {:.2} ms",
        pct(&wall, 0.5),
        pct(&wall, 0.99),
        pct(&cpu, 0.5)
    );
    println!(
        "  kept: {} evaluations, {:.1} MiB live heap for the windows and verdicts; {changes} verdict changes",
        judge.history_len(),
        kept as f64 / 1_048_576.0
    );
}
