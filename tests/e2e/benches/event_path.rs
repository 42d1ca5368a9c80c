//! The whole event path of the real release daemon, as a separate process: the simulator's
//! HTTP watch stream → decode and normalize → lane → the no-op wasm plugin → cursor durable.
//! CPU and memory are those of the daemon process alone, read from `/proc/<pid>`; the
//! simulator and the job writes run in this bench process and are not counted.
//!
//! Run: `plugins/build.sh && cargo build --release -p jobrelay && cargo bench -p jobrelay-e2e
//! --bench event_path` (options after `--`: `--jobs N`, `--versions N`, `--memory-jobs N`,
//! `--memory-object full|small`, `--backlog-rate N`, `--only stream|memory|backlog|latency`, `--rate N`, `--seconds N`, `--clusters N`,
//! `--plugin stamp|noop`, `--perf FILE` to record a profile of the daemon over each run,
//! `--story` to have the kind tell its story: see [`Story`]).
//!
//! - **stream**: the daemon watches Volcano jobs on one simulated cluster, with the `noop`
//!   plugin in `every-version` mode. Once it is ready, this bench creates `--jobs` jobs (about
//!   1.6 KB each) and moves each through `--versions` - 1 status changes, jobs interleaved, as
//!   fast as the simulator takes them; it waits until the plugin's lane has delivered every
//!   version. CPU per event = the daemon's user + system CPU time over that window / events.
//!   Run with a fresh instance per event (the default) and with `instance_reuse: 256`.
//! - **memory**: a daemon with the same plugin is started on an empty cluster, its RSS read
//!   once ready; then `--memory-jobs` jobs are created (one version each, `--memory-object`
//!   `full` or `small`), paced so that at most 10,000 events wait in the lane, with the RSS
//!   printed every 100,000; its RSS is read again once the lane tracks them all and has
//!   delivered them, and 30 s later. Per tracked job = growth / jobs: everything the process
//!   keeps for them (watcher, lane, SQLite page cache and connection memory for their cursors,
//!   and what the allocator holds after the transient events were freed).
//! - **backlog**: see [`backlog`].
//! - **latency**: see [`latency`].

#![expect(
    clippy::print_stdout,
    reason = "a bench's figures are its output, printed for whoever runs it"
)]

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use jobrelay_e2e::stream_jobs::{small_volcano_job, volcano_job, volcano_status};
use jobrelay_e2e::{built_wasm, repo_root, write_atomic};
use jobrelay_testkit::{Gvr, SimCluster, SimOptions};
use serde_json::Value;

struct Options {
    /// Record a `perf` profile of the daemon over the stream window into this file.
    perf: Option<String>,
    jobs: usize,
    versions: usize,
    memory_jobs: usize,
    /// `full` (the 1.6 KB job) or `small` (metadata and a three-field spec): the daemon keeps
    /// no objects, so its memory per job should not depend on this, while the simulator's
    /// does (about 18 KB per full job as JSON trees), which is what a million-job run needs.
    memory_object: String,
    rate: usize,
    /// Calls per second the noop plugin is held to in the backlog run.
    backlog_rate: usize,
    seconds: usize,
    clusters: usize,
    /// `stamp` (latency and CPU) or `noop` (CPU only: the plugin does nothing).
    plugin: String,
    only: Option<String>,
    /// `--story`: the stream and memory runs watch the kind with `story: {kueue: true, pods:
    /// true}`, and give each job an admitted Kueue Workload and an OOM-killed pod.
    story: bool,
}

fn options() -> Options {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let number = |flag: &str, default: usize| {
        value(flag)
            .map(|v| {
                v.parse()
                    .unwrap_or_else(|_| panic!("{flag} takes a number"))
            })
            .unwrap_or(default)
    };
    Options {
        perf: value("--perf"),
        jobs: number("--jobs", 2_000),
        versions: number("--versions", 11),
        memory_jobs: number("--memory-jobs", 100_000),
        memory_object: value("--memory-object").unwrap_or_else(|| "full".to_string()),
        rate: number("--rate", 5_000),
        backlog_rate: number("--backlog-rate", 500),
        seconds: number("--seconds", 10),
        clusters: number("--clusters", 10),
        plugin: value("--plugin").unwrap_or_else(|| "stamp".to_string()),
        only: value("--only"),
        story: args.iter().any(|a| a == "--story"),
    }
}

/// What `--story` adds: the Workload kind served by the simulator, and for each job created its
/// Workload (admitted to a cluster queue, 8 GPUs, one preemption behind it) and one pod of it
/// whose container was OOM-killed — the story's every source, each read and joined.
struct Story;

impl Story {
    const KIND: &'static str = "kinds: [{name: volcano-job, story: {kueue: true, pods: true}}]";

    fn serve(sim: &SimCluster) {
        jobrelay_testkit::SimKueue::install(sim);
    }

    /// The Workload and pod of the job `created` (the simulator's answer to its creation).
    fn tell(sim: &SimCluster, created: &Value) {
        let name = created["metadata"]["name"].as_str().expect("a name");
        let uid = created["metadata"]["uid"].as_str().expect("a uid");
        let owner = serde_json::json!([{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "name": name, "uid": uid, "controller": true}]);
        sim.create(
            &Gvr::KUEUE_WORKLOAD,
            serde_json::json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                "metadata": {"name": format!("job-{name}"), "namespace": "ml",
                    "labels": {"kueue.x-k8s.io/job-uid": uid}, "ownerReferences": owner},
                "spec": {"queueName": "team-a"},
                "status": {
                    "admission": {"clusterQueue": "a100", "podSetAssignments": [
                        {"name": "main", "count": 1, "resourceUsage": {"nvidia.com/gpu": "8"}}]},
                    "conditions": [
                        {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                         "message": "", "lastTransitionTime": "2026-12-01T10:00:00Z"},
                        {"type": "Admitted", "status": "True", "reason": "Admitted",
                         "message": "", "lastTransitionTime": "2026-12-01T10:00:00Z"}],
                    "schedulingStats": {"evictions": [
                        {"reason": "Preempted", "underlyingCause": "", "count": 1}]},
                    "accumulatedPastExecutionTimeSeconds": 600}}),
        )
        .expect("a Workload");
        sim.create(
            &Gvr::POD,
            serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("{name}-0"), "namespace": "ml", "ownerReferences": owner},
                "spec": {"containers": [{"name": "trainer", "image": "trainer:1"}]},
                "status": {"phase": "Failed", "containerStatuses": [{"name": "trainer",
                    "image": "trainer:1", "imageID": "", "ready": false, "restartCount": 0,
                    "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}}),
        )
        .expect("a pod");
    }
}

fn daemon_binary() -> PathBuf {
    let path = repo_root().join("target/release/jobrelay");
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --release -p jobrelay` first",
        path.display()
    );
    path
}

/// User + system CPU seconds of process `pid`.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/pid/stat");
    let after = &stat[stat.rfind(')').expect("comm") + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 =
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    ticks as f64 / 100.0
}

/// Resident set of process `pid`, bytes.
fn rss_bytes(pid: u32) -> u64 {
    status_bytes(pid, "VmRSS")
}

/// One size field of `/proc/<pid>/status` (`VmRSS`, `RssAnon`, `RssFile`, …), bytes.
fn status_bytes(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kb| kb.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"))
        * 1024
}

/// A free port on the loopback address.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// `perf record` of the daemon, from `start` until `stop`.
struct Profile(std::process::Child);

impl Profile {
    fn start(pid: u32, file: &str) -> Profile {
        let child = std::process::Command::new("perf")
            // DWARF unwinding from `.eh_frame`: the release build keeps no frame pointers,
            // so `-g` would attribute nearly every sample to its leaf alone.
            .args([
                "record",
                "-F",
                "1000",
                "--call-graph",
                "dwarf,16384",
                "-o",
                file,
                "-p",
            ])
            .arg(pid.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("perf");
        // perf takes a moment to attach.
        std::thread::sleep(Duration::from_millis(500));
        Profile(child)
    }

    /// SIGINT, so perf writes its file, then waits for it.
    fn stop(self) {
        let _ = std::process::Command::new("kill")
            .args(["-INT", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait_with_output();
    }
}

/// The main file's kinds without a story.
const KINDS: &str = "kinds: [{name: volcano-job}]";

/// A daemon process on a config folder of its own.
struct Running {
    child: tokio::process::Child,
    pid: u32,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Running {
    async fn start(sim: &SimCluster, instance_reuse: u32, story: bool) -> Running {
        let manifest =
            format!("wasm: noop.wasm\ndelivery: every-version\ninstance_reuse: {instance_reuse}\n");
        let kinds = if story {
            Story::serve(sim);
            Story::KIND
        } else {
            KINDS
        };
        Running::start_kinds(&[sim], "noop", &manifest, kinds).await
    }

    /// A daemon watching Volcano jobs on `sims`, with one plugin `name` of `manifest`.
    async fn start_with(sims: &[&SimCluster], name: &str, manifest: &str) -> Running {
        Running::start_kinds(sims, name, manifest, KINDS).await
    }

    /// As [`Running::start_with`], with the main file's `kinds` line.
    async fn start_kinds(sims: &[&SimCluster], name: &str, manifest: &str, kinds: &str) -> Running {
        let dir = tempfile::tempdir().expect("tempdir");
        // As the chart lays it out: the state on a volume of its own, not in the config folder.
        let state = dir.path().join("state/jobrelay.db");
        let root = &dir.path().join("config");
        let port = free_port();
        let plugins = built_wasm("noop");
        let plugin_dir = plugins.parent().expect("plugin folder");
        write_atomic(
            &root.join("jobrelay.yaml"),
            format!(
                "plugin_dir: {}\nstate: {{path: {}}}\n{kinds}\n\
                 telemetry: {{listen: \"127.0.0.1:{port}\"}}\n",
                plugin_dir.display(),
                state.display()
            )
            .as_bytes(),
        );
        write_atomic(
            &root.join(format!("plugins/{name}.yaml")),
            manifest
                .replace("{dir}", &dir.path().display().to_string())
                .as_bytes(),
        );
        for sim in sims {
            write_atomic(
                &root.join(format!("clusters/{}.yaml", sim.name())),
                sim.kubeconfig_yaml().as_bytes(),
            );
        }
        let log = std::fs::File::create(root.join("daemon.log")).expect("log file");
        let child = spawn_daemon(root, log);
        let pid = child.id().expect("pid");
        let running = Running {
            child,
            pid,
            port,
            _dir: dir,
        };
        let names: Vec<String> = sims.iter().map(|s| s.name().to_string()).collect();
        running
            .wait("ready and synced", Duration::from_secs(60), |s| {
                s["ready"] == true
                    && names
                        .iter()
                        .all(|n| s["clusters"][n.as_str()]["state"] == "synced")
            })
            .await;
        running
    }

    /// SIGKILLs the daemon and starts a new one on the same folder and state, with plugin
    /// `name`'s manifest replaced by `manifest`; returns once the new one answers `/status`.
    async fn kill_and_restart(&mut self, name: &str, manifest: &str) {
        let _ = self.child.kill().await;
        let root = self.dir().join("config");
        write_atomic(
            &root.join(format!("plugins/{name}.yaml")),
            manifest.as_bytes(),
        );
        let log = std::fs::OpenOptions::new()
            .append(true)
            .open(root.join("daemon.log"))
            .expect("log file");
        self.child = spawn_daemon(&root, log);
        self.pid = self.child.id().expect("pid");
    }

    /// The daemon's folder (config, state, and what a manifest's `{dir}` stands for).
    fn dir(&self) -> &std::path::Path {
        self._dir.path()
    }

    async fn status(&self) -> Option<Value> {
        let (code, body) =
            jobrelay_e2e::try_http_get(([127, 0, 0, 1], self.port).into(), "/status")
                .await
                .ok()?;
        (code == 200 || code == 503)
            .then(|| serde_json::from_str(&body).ok())
            .flatten()
    }

    /// Polls `/status` every 200 ms until `done` holds.
    async fn wait(&self, what: &str, limit: Duration, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.status().await
                && done(&status)
            {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the daemon was not {what} within {limit:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn stop(mut self) {
        // SIGTERM, so the daemon shuts down as in production; killed if it takes too long.
        let _ = std::process::Command::new("kill")
            .arg(self.pid.to_string())
            .status();
        if tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

fn spawn_daemon(root: &std::path::Path, log: std::fs::File) -> tokio::process::Child {
    tokio::process::Command::new(daemon_binary())
        .args(["run", "--config"])
        .arg(root)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .expect("start the daemon")
}

fn lane(status: &Value, field: &str) -> u64 {
    lane_of(status, "noop", field)
}

fn lane_of(status: &Value, plugin: &str, field: &str) -> u64 {
    status["plugins"][plugin]["lane"][field]
        .as_u64()
        .unwrap_or(0)
}

/// Jobs per cluster of the latency run.
const LATENCY_JOBS: usize = 500;

/// Latency: `--rate` status changes per second (default 5,000) spread round-robin over
/// `--clusters` (default 10) simulated clusters of 500 jobs each, for `--seconds` (default 10),
/// against the `stamp` plugin (`every-version`, a fresh instance per event), which appends each event id and the
/// wall-clock time its call began. Latency of a change = that time − the time just before the
/// change was written to the simulator: it includes the simulator's own fan-out and the HTTP
/// stream, so it bounds arrival-to-call from above. Each write waits for its due time (k / rate
/// after the start); the achieved rate is printed beside the asked one. With `--plugin noop`
/// only the daemon's CPU per change is measured, for a plugin that does nothing.
async fn latency(options: &Options) {
    let clusters = options.clusters;
    let plugin = options.plugin.as_str();
    assert!(
        plugin == "stamp" || plugin == "noop",
        "--plugin is stamp or noop"
    );
    let mut sims = Vec::new();
    for c in 0..clusters {
        sims.push(
            SimCluster::start(&format!("c{c:02}"))
                .await
                .expect("simulator"),
        );
    }
    let refs: Vec<&SimCluster> = sims.iter().collect();
    let manifest = if plugin == "stamp" {
        "wasm: stamp.wasm\ndelivery: every-version\n\
         grants:\n  filesystem:\n    - {host: \"{dir}/stamps\", guest: /data, writable: true}\n"
    } else {
        "wasm: noop.wasm\ndelivery: every-version\n"
    };
    let daemon = Running::start_with(&refs, plugin, manifest).await;
    let gvr = Gvr::VOLCANO_JOB;
    for sim in &sims {
        for i in 0..LATENCY_JOBS {
            sim.create(&gvr, volcano_job(i)).expect("create");
        }
    }
    let created = (clusters * LATENCY_JOBS) as u64;
    daemon
        .wait("delivering the creations", Duration::from_secs(300), |s| {
            lane_of(s, plugin, "delivered") >= created && lane_of(s, plugin, "pending") == 0
        })
        .await;

    let total = options.rate * options.seconds;
    let perf = options
        .perf
        .as_ref()
        .map(|file| Profile::start(daemon.pid, &format!("{file}.latency")));
    let cpu_before = cpu_seconds(daemon.pid);
    let mut written: std::collections::HashMap<String, u128> =
        std::collections::HashMap::with_capacity(total);
    let started = Instant::now();
    for k in 0..total {
        let due = started + Duration::from_nanos(k as u64 * 1_000_000_000 / options.rate as u64);
        let now = Instant::now();
        if now < due {
            std::thread::sleep(due - now);
        }
        let cluster = k % clusters;
        let job = (k / clusters) % LATENCY_JOBS;
        let step = 1 + k / (clusters * LATENCY_JOBS);
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let object = sims[cluster]
            .update_status(
                &gvr,
                "ml",
                &format!("train-{job:07}"),
                volcano_status(step + 1, false),
            )
            .expect("status");
        let uid = object["metadata"]["uid"].as_str().unwrap_or_default();
        let rv = object["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default();
        written.insert(format!("c{cluster:02}/{uid}/{rv}"), at);
    }
    let writing = started.elapsed();
    daemon
        .wait("delivering every change", Duration::from_secs(600), |s| {
            lane_of(s, plugin, "delivered") >= created + total as u64
                && lane_of(s, plugin, "pending") == 0
        })
        .await;
    let cpu = cpu_seconds(daemon.pid) - cpu_before;
    if let Some(perf) = perf {
        perf.stop();
    }
    let first_write = written.values().min().copied().unwrap_or(0);
    if plugin == "noop" {
        println!(
            "paced   {total} changes over {clusters} clusters at {:.0}/s, noop plugin: daemon CPU \
             {:.1} µs per change",
            total as f64 / writing.as_secs_f64(),
            cpu * 1e6 / total as f64,
        );
        daemon.stop().await;
        for sim in sims {
            sim.shutdown().await;
        }
        return;
    }
    let stamps = std::fs::read_to_string(daemon.dir().join("stamps/stamps")).expect("stamps");
    // (seconds since the first write, latency ms) of every matched change.
    let mut timed: Vec<(usize, f64)> = stamps
        .lines()
        .filter_map(|line| {
            let (id, ns) = line.split_once(' ')?;
            let called: u128 = ns.parse().ok()?;
            let at = written.get(id)?;
            let second = ((at - first_write) / 1_000_000_000) as usize;
            Some((second, called.saturating_sub(*at) as f64 / 1e6))
        })
        .collect();
    let percentile = |values: &mut Vec<f64>, q: f64| {
        values.sort_by(f64::total_cmp);
        values[((values.len() as f64 * q) as usize).min(values.len() - 1)]
    };
    let mut latencies: Vec<f64> = timed.iter().map(|(_, l)| *l).collect();
    // The worst second by its own p99: a stall shows as one or two bad seconds, a backlog as
    // many.
    timed.sort_by_key(|(second, _)| *second);
    let mut worst = (0, 0.0f64);
    let mut over_20 = 0;
    for second in 0..=timed.last().map_or(0, |(s, _)| *s) {
        let mut those: Vec<f64> = timed
            .iter()
            .filter(|(s, _)| *s == second)
            .map(|(_, l)| *l)
            .collect();
        if those.is_empty() {
            continue;
        }
        let p99 = percentile(&mut those, 0.99);
        if p99 > 20.0 {
            over_20 += 1;
        }
        if p99 > worst.1 {
            worst = (second, p99);
        }
    }
    println!(
        "latency {} changes over {clusters} clusters, asked {}/s, written at {:.0}/s: \
         write → plugin call p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} matched); \
         daemon CPU {:.1} µs per change; worst second {} (p99 {:.1} ms), {} seconds with p99 over 20 ms",
        total,
        options.rate,
        total as f64 / writing.as_secs_f64(),
        percentile(&mut latencies, 0.50),
        percentile(&mut latencies, 0.90),
        percentile(&mut latencies, 0.99),
        latencies.last().copied().unwrap_or(0.0),
        latencies.len(),
        cpu * 1e6 / total as f64,
        worst.0,
        worst.1,
        over_20,
    );
    daemon.stop().await;
    for sim in sims {
        sim.shutdown().await;
    }
}

async fn stream(options: &Options, instance_reuse: u32) {
    let events = (options.jobs * options.versions) as u64;
    // The whole burst stays in the simulator's history, as it would in an API server's (etcd
    // keeps some five minutes of changes): with the kit's default of 10,000, a watch that
    // trails a 66,000-event burst by more than that is told its version expired and lists
    // again, its jobs' skipped versions are never delivered, and the wait below never ends.
    let history = SimOptions {
        history_limit: events as usize + 10_000,
        ..SimOptions::default()
    };
    let sim = SimCluster::start_with("alpha", history)
        .await
        .expect("simulator");
    let daemon = Running::start(&sim, instance_reuse, options.story).await;
    let gvr = Gvr::VOLCANO_JOB;

    let perf = options
        .perf
        .as_ref()
        .map(|file| Profile::start(daemon.pid, &format!("{file}.reuse{instance_reuse}")));
    let cpu_before = cpu_seconds(daemon.pid);
    let started = Instant::now();
    for i in 0..options.jobs {
        let created = sim.create(&gvr, volcano_job(i)).expect("create");
        if options.story {
            Story::tell(&sim, &created);
        }
    }
    for step in 1..options.versions {
        for i in 0..options.jobs {
            sim.update_status(
                &gvr,
                "ml",
                &format!("train-{i:07}"),
                volcano_status(step, step + 1 == options.versions),
            )
            .expect("status");
        }
    }
    let written = started.elapsed();
    let done = daemon
        .wait("done delivering", Duration::from_secs(900), |s| {
            lane(s, "delivered") >= events && lane(s, "pending") == 0
        })
        .await;
    let elapsed = started.elapsed();
    let cpu = cpu_seconds(daemon.pid) - cpu_before;
    let rss = rss_bytes(daemon.pid);
    if let Some(perf) = perf {
        perf.stop();
    }
    println!(
        "stream{}  instance_reuse {instance_reuse:>3}: {events} events in {:.2} s (written in {:.2} s) \
         = {:.0} events/s; daemon CPU {cpu:.2} s = {:.1} µs per event; RSS {:.1} MiB; \
         {} written to the inbox, {} read back from it",
        if options.story { " (story)" } else { "" },
        elapsed.as_secs_f64(),
        written.as_secs_f64(),
        events as f64 / elapsed.as_secs_f64(),
        cpu * 1e6 / events as f64,
        rss as f64 / (1 << 20) as f64,
        lane(&done, "inbox_written"),
        lane(&done, "read_back"),
    );
    daemon.stop().await;
    sim.shutdown().await;
}

/// Jobs created between two looks at how far the daemon got.
const MEMORY_CHUNK: usize = 10_000;

async fn memory(options: &Options) {
    // The creations are paced (below) so the daemon's watch never falls behind the
    // simulator's history (a watch that did would be sent every change it missed at once,
    // serialized in one go, and then re-list a million objects), and so that the events
    // waiting for the plugin stay a few thousand: the lanes hold every event not yet
    // delivered, whole, and a million of them would be gigabytes (see BENCHMARKS.md).
    let history = SimOptions {
        history_limit: 4 * MEMORY_CHUNK,
        ..SimOptions::default()
    };
    let sim = SimCluster::start_with("alpha", history)
        .await
        .expect("simulator");
    let daemon = Running::start(&sim, 1, options.story).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = rss_bytes(daemon.pid);
    let gvr = Gvr::VOLCANO_JOB;
    let jobs = options.memory_jobs;
    let started = Instant::now();
    let job = match options.memory_object.as_str() {
        "full" => volcano_job,
        "small" => small_volcano_job,
        other => panic!("--memory-object takes full or small, not {other}"),
    };
    for i in 0..jobs {
        let created = sim.create(&gvr, job(i)).expect("create");
        if options.story {
            Story::tell(&sim, &created);
        }
        if (i + 1) % MEMORY_CHUNK == 0 {
            let behind = (i + 1 - MEMORY_CHUNK) as u64;
            daemon
                .wait("keeping up", Duration::from_secs(600), |s| {
                    lane(s, "jobs") >= behind && lane(s, "pending") <= MEMORY_CHUNK as u64
                })
                .await;
            if (i + 1) % (10 * MEMORY_CHUNK) == 0 {
                // The growth between two of these lines is free of the constant share (the
                // events in flight, what the allocator keeps after them).
                let status = daemon.status().await.unwrap_or_default();
                println!(
                    "        {} created, {} delivered, {} pending: RSS {:.1} MiB",
                    i + 1,
                    lane(&status, "delivered"),
                    lane(&status, "pending"),
                    rss_bytes(daemon.pid) as f64 / (1 << 20) as f64
                );
            }
        }
    }
    daemon
        .wait("tracking every job", Duration::from_secs(1800), |s| {
            lane(s, "jobs") >= jobs as u64
                && lane(s, "delivered") >= jobs as u64
                && lane(s, "pending") == 0
        })
        .await;
    let loaded = started.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = rss_bytes(daemon.pid);
    println!(
        "memory{}  {jobs} tracked jobs ({} objects, delivered in {:.1} s): RSS {:.1} MiB → {:.1} MiB = {:.0} bytes per job (this bench process, simulator included: {:.0} MiB)",
        if options.story { " (story)" } else { "" },
        options.memory_object,
        loaded.as_secs_f64(),
        before as f64 / (1 << 20) as f64,
        after as f64 / (1 << 20) as f64,
        (after.saturating_sub(before)) as f64 / jobs as f64,
        rss_bytes(std::process::id()) as f64 / (1 << 20) as f64,
    );
    let mib = |field: &str| status_bytes(daemon.pid, field) as f64 / (1 << 20) as f64;
    println!(
        "        of which anonymous {:.1} MiB, file-backed {:.1} MiB, shared memory {:.1} MiB",
        mib("RssAnon"),
        mib("RssFile"),
        mib("RssShmem"),
    );
    tokio::time::sleep(Duration::from_secs(30)).await;
    println!(
        "        30 s later: RSS {:.1} MiB",
        rss_bytes(daemon.pid) as f64 / (1 << 20) as f64
    );
    daemon.stop().await;
    sim.shutdown().await;
}

/// Backlog and restart: `--memory-jobs` jobs (small objects) are created as fast as the
/// simulator takes them — no pacing — while the noop plugin is held to `--backlog-rate` calls a
/// second, so most of their events wait: past the event memory budget (the default 128 MiB),
/// only in the inbox. Once the lane tracks every job, the daemon's peak RSS (`VmHWM`) is read
/// and it is SIGKILLed with its backlog; a new process starts on the same state with the rate
/// limit lifted, and the bench reads its time to ready and synced, its time until the backlog
/// is delivered, and its own peak RSS.
async fn backlog(options: &Options) {
    let jobs = options.memory_jobs;
    let rate = options.backlog_rate;
    // Every change stays in the simulator's history: a watch behind it re-lists, and the bench
    // is about the daemon's backlog, not about re-lists.
    let history = SimOptions {
        history_limit: jobs + 10_000,
        ..SimOptions::default()
    };
    let sim = SimCluster::start_with("alpha", history)
        .await
        .expect("simulator");
    let limited = format!(
        "wasm: noop.wasm\ndelivery: every-version\nrate_limits: [{{per_second: {rate}}}]\n"
    );
    let mut daemon = Running::start_with(&[&sim], "noop", &limited).await;
    let mib = |bytes: u64| bytes as f64 / (1 << 20) as f64;
    let ready_rss = rss_bytes(daemon.pid);
    let gvr = Gvr::VOLCANO_JOB;
    let started = Instant::now();
    for i in 0..jobs {
        sim.create(&gvr, small_volcano_job(i)).expect("create");
    }
    let created = started.elapsed();
    let status = daemon
        .wait("tracking every job", Duration::from_secs(3600), |s| {
            lane(s, "jobs") >= jobs as u64
        })
        .await;
    let tracked = started.elapsed();
    let (pending, spilled) = (lane(&status, "pending"), lane(&status, "spilled"));
    println!(
        "backlog {jobs} jobs created in {:.1} s, tracked in {:.1} s, plugin held to {rate}/s: \
         {pending} events waiting ({spilled} only in the inbox), {:.1} MiB of events held; \
         RSS {:.1} MiB once ready, {:.1} MiB now, peak {:.1} MiB",
        created.as_secs_f64(),
        tracked.as_secs_f64(),
        mib(status["event_memory"]["held_bytes"].as_u64().unwrap_or(0)),
        mib(ready_rss),
        mib(rss_bytes(daemon.pid)),
        mib(status_bytes(daemon.pid, "VmHWM")),
    );
    let unlimited = "wasm: noop.wasm\ndelivery: every-version\n";
    let killed = Instant::now();
    daemon.kill_and_restart("noop", unlimited).await;
    // The restart's course, a line every 10 s: when it is ready against how far the backlog is.
    let (mut ready, mut printed) = (None, Duration::ZERO);
    let status = loop {
        let Some(status) = daemon.status().await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let now = killed.elapsed();
        if ready.is_none()
            && status["ready"] == true
            && status["clusters"]["alpha"]["state"] == "synced"
        {
            ready = Some(now);
        }
        if now >= printed + Duration::from_secs(5) {
            printed = now;
            println!(
                "  {:>5.1} s: cluster {}, ready {}, {} jobs, {} waiting ({} only in the inbox), \
                 {} delivered, {} read back, {:.1} MiB of events held, RSS {:.1} MiB",
                now.as_secs_f64(),
                status["clusters"]["alpha"]["state"],
                status["ready"],
                lane(&status, "jobs"),
                lane(&status, "pending"),
                lane(&status, "spilled"),
                lane(&status, "delivered"),
                lane(&status, "read_back"),
                mib(status["event_memory"]["held_bytes"].as_u64().unwrap_or(0)),
                mib(rss_bytes(daemon.pid)),
            );
        }
        if ready.is_some() && lane(&status, "jobs") >= jobs as u64 && lane(&status, "pending") == 0
        {
            break status;
        }
        assert!(now < Duration::from_secs(7200), "not caught up within 2 h");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let ready = ready.unwrap_or_default();
    let caught_up = killed.elapsed();
    println!(
        "restart SIGKILLed with {pending} events undelivered, {jobs} jobs tracked: ready and \
         synced in {:.1} s, backlog delivered in {:.1} s ({} delivered by the new process, {} \
         of them read back from the inbox); RSS now {:.1} MiB, peak {:.1} MiB",
        ready.as_secs_f64(),
        caught_up.as_secs_f64(),
        lane(&status, "delivered"),
        lane(&status, "read_back"),
        mib(rss_bytes(daemon.pid)),
        mib(status_bytes(daemon.pid, "VmHWM")),
    );
    daemon.stop().await;
    sim.shutdown().await;
}

fn main() {
    let options = options();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let only = options.only.as_deref();
        if only.is_none_or(|o| o == "stream") {
            stream(&options, 1).await;
            stream(&options, 256).await;
        }
        if only.is_none_or(|o| o == "memory") {
            memory(&options).await;
        }
        if only == Some("backlog") {
            backlog(&options).await;
        }
        if only.is_none_or(|o| o == "latency") {
            latency(&options).await;
        }
    });
}
