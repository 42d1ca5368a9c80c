//! How fast clean-up deletes finished jobs, through the real daemon (release build) against
//! the simulator: 10,000 batch jobs already finished when the daemon starts, event-log in
//! scope (each job's end must be delivered before it goes), `after_finished: 0`, at a given
//! `per_cluster_per_second` — the most the config allows (1000) shows what the daemon and the
//! simulator reach together, a lower pace shows that it is held.
//!
//! Run: `plugins/build.sh && cargo bench -p jobrelay-e2e --bench cleanup_pace`.
//! The simulator runs in the same process, so the CPU figure is both of them together; its
//! garbage collector is off (it looks at every object on each deletion).

#![expect(
    clippy::print_stdout,
    reason = "a bench's figures are its output, printed for whoever runs it"
)]

use std::time::{Duration, Instant};

use jobrelay::daemon::Daemon;
use jobrelay_e2e::{Setup, finished_batch_jobs};

const JOBS: usize = 10_000;

/// User plus system CPU time of this process so far.
fn cpu() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage fills the struct it is given; RUSAGE_SELF is always valid.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

async fn run(pace: u32) {
    let sim = finished_batch_jobs(JOBS).await;
    let setup = Setup::new(&format!(
        "kinds: [{{name: batch-job}}]\n\
         cleanup: {{per_cluster_per_second: {pace}, rules: [{{kinds: [batch-job], after_finished: 0}}]}}\n"
    ));
    setup.install_wasm("event-log", "event-log.wasm");
    setup.write_manifest(
        "log",
        &Setup::log_manifest(
            "event-log.wasm",
            "log",
            "events.jsonl",
            "delivery: transitions\n",
        ),
    );
    setup.add_cluster(&sim);
    let cpu_before = cpu();
    let started = Instant::now();
    let daemon = Daemon::start(setup.config_dir())
        .await
        .expect("daemon starts");
    let want = if pace >= 1000 {
        JOBS
    } else {
        20 * pace as usize
    };
    loop {
        if sim.deletions().len() >= want {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "only {} deletions in 10 minutes",
            sim.deletions().len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let wall = started.elapsed();
    let used = cpu() - cpu_before;
    daemon.shutdown(Duration::from_secs(5)).await;
    let deletions = sim.deletions();
    let first = deletions[0].at;
    let last = deletions[want - 1].at;
    let span = last - first;
    let rate = (want - 1) as f64 / span.as_secs_f64();
    let ok = deletions.iter().take(want).all(|d| d.status == 200);
    println!(
        "pace {pace:>5}/s: {want} deletions in {:.1} s after the first ({rate:.0}/s), \
         {:.1} s from the start; CPU {:.1} s ({:.0} us a deletion, simulator included); all 200: {ok}",
        span.as_secs_f64(),
        wall.as_secs_f64(),
        used.as_secs_f64(),
        used.as_secs_f64() * 1e6 / want as f64,
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    for pace in [100, 1000] {
        run(pace).await;
    }
}
