//! The `jobrelay run` process as an operator's supervisor treats it: killed with SIGKILL in the
//! middle of a stream of job changes and restarted, stopped with SIGTERM while a plugin call is
//! running, stopped at once by a second signal, and starved of file handles.
//!
//! The simulated cluster lives in the test process; the daemon is the real binary in a child
//! process. Every child is wrapped in [`Relay`], whose `Drop` kills it, so a failing assertion
//! never leaves a daemon behind. Deadlines are generous (the machines are noisy); the only
//! timing asserted is "exits within N seconds", with N far from the expected value.
//!
//! `JOBRELAY_SOAK_SEED=<n>` replays one schedule of the soak (the seed is printed).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jobrelay_testkit::{Flavor, JobDriver, Pace, SimCluster};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

/// The head and body of `GET path` from the daemon's telemetry endpoint at `addr`.
pub(crate) async fn http_get(
    addr: std::net::SocketAddr,
    path: &str,
) -> std::io::Result<(String, String)> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut socket = tokio::net::TcpStream::connect(addr).await?;
    socket
        .write_all(format!("GET {path} HTTP/1.0\r\nhost: localhost\r\n\r\n").as_bytes())
        .await?;
    let mut response = String::new();
    socket.read_to_string(&mut response).await?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    Ok((head.to_string(), body.to_string()))
}

/// `/status` of the daemon listening at `addr`; `None` while it does not answer.
pub(crate) async fn status(addr: std::net::SocketAddr) -> Option<Value> {
    let (_, body) = http_get(addr, "/status").await.ok()?;
    serde_json::from_str(&body).ok()
}

/// Deadline for anything the daemon should do "soon".
pub(crate) const DEADLINE: Duration = Duration::from_secs(90);
/// The plugins' concurrency in these tests: at most this many calls are in flight at a kill.
pub(crate) const CONCURRENCY: usize = 4;
const BEHAVE: &str = "jobrelay.test/behave";

// ----- the daemon as a child process -----------------------------------------------------------

/// One `jobrelay run` child. Its stderr (the logs) is collected in memory; dropping the guard
/// kills the process (SIGKILL), so no test leaves a daemon running.
pub(crate) struct Relay {
    what: String,
    pub(crate) child: Child,
    pub(crate) pid: u32,
    log: Arc<Mutex<String>>,
    reader: Option<JoinHandle<()>>,
}

impl Relay {
    pub(crate) fn start(config: &Path, what: &str) -> Relay {
        let mut child = Command::new(env!("CARGO_BIN_EXE_jobrelay"))
            .arg("run")
            .arg("--config")
            .arg(config)
            .env(
                "RUST_LOG",
                std::env::var("JOBRELAY_TEST_RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .env_remove("JOBRELAY_LOG_FORMAT")
            .env_remove("JOBRELAY_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("jobrelay starts");
        let pid = child.id().expect("a running child has a pid");
        let log = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().expect("stderr is piped");
        let sink = log.clone();
        let reader = tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut log = sink.lock().unwrap_or_else(|p| p.into_inner());
                log.push_str(&line);
                log.push('\n');
            }
        });
        Relay {
            what: what.to_string(),
            child,
            pid,
            log,
            reader: Some(reader),
        }
    }

    pub(crate) fn log(&self) -> String {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The last lines of the log, for failure messages.
    pub(crate) fn tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        let from = lines.len().saturating_sub(40);
        format!(
            "--- last log lines of {} ---\n{}",
            self.what,
            lines[from..].join("\n")
        )
    }

    /// The log lines at ERROR level, prefixed with the run they come from.
    pub(crate) fn errors(&self) -> Vec<String> {
        self.log()
            .lines()
            .filter(|l| l.contains("ERROR"))
            .map(|l| format!("{}: {l}", self.what))
            .collect()
    }

    /// Sends a signal by name (`TERM`, `INT`) with the system's `kill` command.
    pub(crate) fn signal(&self, name: &str) {
        let status = std::process::Command::new("kill")
            .arg("-s")
            .arg(name)
            .arg(self.pid.to_string())
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -s {name} {} failed", self.pid);
    }

    /// SIGKILL (what `Child::kill` sends), and reap the process.
    pub(crate) async fn sigkill(&mut self) {
        self.child.kill().await.expect("SIGKILL the daemon");
        self.drain_log().await;
    }

    /// Waits for the process to exit; `None` if it is still running after `within`.
    pub(crate) async fn exit_within(&mut self, within: Duration) -> Option<ExitStatus> {
        let status = tokio::time::timeout(within, self.child.wait()).await.ok()?;
        let status = status.expect("wait for the daemon");
        self.drain_log().await;
        Some(status)
    }

    /// After the exit: wait until every line the process wrote has been read.
    async fn drain_log(&mut self) {
        if let Some(reader) = self.reader.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), reader).await;
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        // Already reaped or already gone: nothing to do.
        let _ = self.child.start_kill();
    }
}

// ----- config folder ---------------------------------------------------------------------------

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub(crate) fn plugin_dir() -> PathBuf {
    let dir = repo().join("target/plugins");
    for name in ["event-log", "probe"] {
        let wasm = dir.join(format!("{name}.wasm"));
        assert!(
            wasm.exists(),
            "{} is missing: run plugins/build.sh",
            wasm.display()
        );
    }
    dir
}

pub(crate) fn write(path: &Path, content: &str) {
    std::fs::create_dir_all(path.parent().expect("a parent folder")).expect("mkdir");
    std::fs::write(path, content).expect("write");
}

/// A config folder watching every built-in kind on `sim` (as cluster `alpha`) with one plugin
/// `plugins/<plugin>.yaml` given by `manifest`.
pub(crate) fn config_folder(sim: &SimCluster, plugin: &str, manifest: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    write(
        &root.join("jobrelay.yaml"),
        &format!(
            "plugin_dir: {}\nstate: {{path: state/jobrelay.db}}\ndebounce_ms: 100\nrescan_seconds: 2\n",
            plugin_dir().display()
        ),
    );
    write(&root.join("clusters/alpha.yaml"), &sim.kubeconfig_yaml());
    write(&root.join(format!("plugins/{plugin}.yaml")), manifest);
    dir
}

/// JSON lines of a plugin's output file, and the lines that are not JSON (a torn write).
pub(crate) fn read_lines(path: &Path) -> (Vec<Value>, Vec<String>) {
    let Ok(text) = std::fs::read_to_string(path) else {
        return (Vec::new(), Vec::new());
    };
    let mut good = Vec::new();
    let mut torn = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str(line) {
            Ok(v) => good.push(v),
            Err(_) => torn.push(line.to_string()),
        }
    }
    (good, torn)
}

pub(crate) fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or_default()
}

/// Polls `check` every 200 ms until it returns `Some`; `Err` with the last `Err` of `check`
/// after `deadline`.
pub(crate) async fn poll<T>(
    deadline: Duration,
    mut check: impl FnMut() -> Result<T, String>,
) -> Result<T, String> {
    let started = Instant::now();
    loop {
        match check() {
            Ok(v) => return Ok(v),
            Err(why) if started.elapsed() > deadline => return Err(why),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Waits until `relay`'s log says `what`; panics with its log after the deadline. Returns how
/// long it took.
pub(crate) async fn wait_log(relay: &Relay, what: &str) -> Duration {
    let started = Instant::now();
    let found = poll(DEADLINE, || {
        if relay.log().contains(what) {
            Ok(())
        } else {
            Err(String::new())
        }
    })
    .await;
    assert!(found.is_ok(), "never logged {what:?}\n{}", relay.tail());
    started.elapsed()
}

/// The plugin's cursors by job uid, read from the state file after the daemon exited.
pub(crate) async fn cursors(
    state: &jobrelay_state::StateBackend,
    plugin: &str,
) -> Vec<jobrelay_state::Cursor> {
    let store = jobrelay_state::open_store(state)
        .await
        .expect("open the state store");
    let cursors = store.cursors(plugin).await.expect("read cursors");
    store.close().await;
    cursors
}

/// The state file of a config folder made by [`config_folder`].
pub(crate) fn state_file(config: &Path) -> jobrelay_state::StateBackend {
    jobrelay_state::StateBackend::Sqlite(config.join("state/jobrelay.db"))
}

// ----- a small seeded PRNG (splitmix64) --------------------------------------------------------

pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    pub(crate) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    pub(crate) fn percent(&mut self, p: u64) -> bool {
        self.next() % 100 < p
    }
}

pub(crate) fn soak_seed() -> u64 {
    if let Some(seed) = std::env::var("JOBRELAY_SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return seed;
    }
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(7)
}

// ----- the job lifecycles of the soak ----------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Pending,
    Running,
    Restarting,
    Succeeded,
    Failed,
    Delete,
}

/// One job's life: created at `start_ms`, then each step at its time (ms from the start).
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    flavor: Flavor,
    /// How the job's controller clock moves (see [`Pace`]).
    pace: Pace,
    namespace: &'static str,
    pub(crate) name: String,
    start_ms: u64,
    steps: Vec<(u64, Step)>,
}

impl Plan {
    fn terminal(&self) -> &'static str {
        if self.steps.iter().any(|(_, s)| *s == Step::Failed) {
            "failed"
        } else {
            "succeeded"
        }
    }

    fn deleted(&self) -> bool {
        self.steps.iter().any(|(_, s)| *s == Step::Delete)
    }

    fn end_ms(&self) -> u64 {
        self.steps.last().map_or(self.start_ms, |(at, _)| *at)
    }
}

/// `jobs` lifecycles over all four flavours: created within the first 9 s, steps 0.4–1.8 s
/// apart, some pending first, some restarting once or twice, a third failing, a third deleted
/// a little after finishing. The whole schedule spans roughly 15–22 s.
pub(crate) fn plan_jobs(rng: &mut Rng, jobs: usize) -> Vec<Plan> {
    plan_jobs_over(rng, jobs, 9000, false)
}

/// Like [`plan_jobs`], with the creations spread over `span_ms` (a long soak). With `fast`,
/// the controllers stamp each step with the wall time in whole seconds ([`Pace::Wall`]) and
/// half of the restarts run again 50–400 ms after restarting: a job often re-enters `running`
/// within the second it left it, which its status's times cannot tell apart.
pub(crate) fn plan_jobs_over(rng: &mut Rng, jobs: usize, span_ms: u64, fast: bool) -> Vec<Plan> {
    (0..jobs)
        .map(|i| {
            let flavor = Flavor::ALL[i % Flavor::ALL.len()];
            let start_ms = rng.range(0, span_ms);
            let mut at = start_ms;
            let mut steps = Vec::new();
            const CALM: (u64, u64) = (400, 1800);
            let mut step = |rng: &mut Rng, s: Step, gap: (u64, u64)| {
                at += rng.range(gap.0, gap.1);
                steps.push((at, s));
            };
            if rng.percent(50) {
                step(rng, Step::Pending, CALM);
            }
            step(rng, Step::Running, CALM);
            let restarts = match rng.range(0, 9) {
                0..=5 => 0,
                6..=8 => 1,
                _ => 2,
            };
            for _ in 0..restarts {
                step(rng, Step::Restarting, CALM);
                let gap = if fast && rng.percent(50) {
                    (50, 400)
                } else {
                    CALM
                };
                step(rng, Step::Running, gap);
            }
            let end = if rng.percent(33) {
                Step::Failed
            } else {
                Step::Succeeded
            };
            step(rng, end, CALM);
            if i % 3 == 1 {
                step(rng, Step::Delete, CALM);
            }
            Plan {
                flavor,
                pace: if fast { Pace::Wall } else { Pace::Seconds },
                namespace: if i % 2 == 0 { "ml" } else { "research" },
                name: format!("{}-{i}", format!("{flavor:?}").to_lowercase()),
                start_ms,
                steps,
            }
        })
        .collect()
}

/// What the driver did to one job.
#[derive(Debug, Clone)]
pub(crate) struct Played {
    pub(crate) name: String,
    pub(crate) flavor: Flavor,
    /// Restarts played (each a `restarting`, then `running` again).
    pub(crate) restarts: usize,
    /// Of those, the ones that ran again less than a second after restarting.
    pub(crate) fast_restarts: usize,
    pub(crate) namespace: &'static str,
    pub(crate) uid: String,
    pub(crate) terminal: &'static str,
    /// The resourceVersion of the succeeded/failed write (the job's last version, unless it
    /// was deleted afterwards).
    pub(crate) terminal_rv: String,
    pub(crate) deleted: bool,
    /// The job's pods when it finished (each given a log while it ran).
    pub(crate) pods: Vec<String>,
    /// Deleted without ever carrying jobrelay's finalizer (see [`drive_with`]).
    pub(crate) unseen: bool,
}

/// Plays the plans in time order against the simulator.
pub(crate) async fn drive(sim: SimCluster, plans: Vec<Plan>) -> anyhow::Result<Vec<Played>> {
    drive_with(sim, plans, None).await
}

/// How long after its end a job's deletion waits for the job to carry the daemon's finalizer.
/// The adder retries on its own timer up to 30 s apart (jittered); an API that refuses the
/// patch and the read in between for one whole gap and then some (bursts of 503 fall mostly on
/// the few requests a quiet cluster sees, which are the adders') can hold the finalizer off
/// past 30 s. 90 s is two of the longest gaps plus the longest outage: a job not held by then
/// was kept from jobrelay by the API for longer than any retry policy would bridge.
const HOLD_WAIT: Duration = Duration::from_secs(90);

/// Like [`drive`]; with `hold` (a finalizer name), a job is deleted only once it carries that
/// finalizer — once jobrelay has seen it — or after [`HOLD_WAIT`], when it is marked `unseen`:
/// a job created and deleted while no jobrelay ran is beyond anyone's reach.
pub(crate) async fn drive_with(
    sim: SimCluster,
    plans: Vec<Plan>,
    hold: Option<&'static str>,
) -> anyhow::Result<Vec<Played>> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    // (at, job, step index); step index 0 creates the job.
    let mut timeline: BinaryHeap<Reverse<(u64, usize, usize)>> = BinaryHeap::new();
    for (job, plan) in plans.iter().enumerate() {
        timeline.push(Reverse((plan.start_ms, job, 0)));
        for (n, (at, _)) in plan.steps.iter().enumerate() {
            timeline.push(Reverse((*at, job, n + 1)));
        }
    }
    let t0 = tokio::time::Instant::now();
    let mut drivers: Vec<Option<JobDriver>> = plans.iter().map(|_| None).collect();
    let mut terminal_rvs: Vec<String> = vec![String::new(); plans.len()];
    let mut terminal_pods: Vec<Vec<String>> = vec![Vec::new(); plans.len()];
    let mut unseen: Vec<bool> = vec![false; plans.len()];
    while let Some(Reverse((at, job, n))) = timeline.pop() {
        tokio::time::sleep_until(t0 + Duration::from_millis(at)).await;
        let plan = &plans[job];
        if n == 0 {
            drivers[job] = Some(
                JobDriver::builder(plan.flavor, plan.namespace, &plan.name)
                    .pace(plan.pace)
                    .create(&sim)?,
            );
            continue;
        }
        let driver = drivers[job].as_mut().expect("created before its steps");
        match plan.steps[n - 1].1 {
            Step::Pending => {
                driver.pending()?;
            }
            Step::Running => {
                driver.running()?;
                for pod in driver.pods() {
                    let log = format!("{} {} step {n}\n", plan.name, pod.name);
                    driver.set_log(&pod.name, false, log.into_bytes())?;
                }
            }
            Step::Restarting => {
                driver.restarting()?;
            }
            Step::Succeeded => {
                terminal_rvs[job] = driver.succeeded()?;
                terminal_pods[job] = driver.pod_names();
            }
            Step::Failed => {
                terminal_rvs[job] = driver.failed("OOMKilled")?;
                terminal_pods[job] = driver.pod_names();
            }
            Step::Delete => {
                if let Some(finalizer) = hold {
                    let held = driver.object()?["metadata"]["finalizers"]
                        .as_array()
                        .is_some_and(|f| f.iter().any(|f| f == finalizer));
                    let waited = Duration::from_millis(at.saturating_sub(plan.end_ms()));
                    if !held && waited < HOLD_WAIT {
                        timeline.push(Reverse((at + 500, job, n)));
                        continue;
                    }
                    unseen[job] = !held;
                }
                driver.delete()?;
            }
        }
    }
    Ok(plans
        .iter()
        .zip(drivers)
        .zip(terminal_rvs.into_iter().zip(terminal_pods))
        .zip(unseen)
        .map(|(((plan, driver), (terminal_rv, pods)), unseen)| Played {
            name: plan.name.clone(),
            flavor: plan.flavor,
            restarts: plan
                .steps
                .iter()
                .filter(|(_, s)| *s == Step::Restarting)
                .count(),
            fast_restarts: plan
                .steps
                .windows(2)
                .filter(|w| {
                    w[0].1 == Step::Restarting && w[1].1 == Step::Running && w[1].0 - w[0].0 < 1000
                })
                .count(),
            namespace: plan.namespace,
            uid: driver.expect("every job was created").uid().to_string(),
            terminal: plan.terminal(),
            terminal_rv,
            deleted: plan.deleted(),
            pods,
            unseen,
        })
        .collect())
}

/// Jobs whose final state is not in the event log yet: for a job still there, its terminal
/// version; for a deleted job, any deletion event.
pub(crate) fn missing_finals(played: &[Played], lines: &[Value]) -> Vec<String> {
    // The phases seen per job, each with the number its resource version starts with (a
    // rebuilt event's version extends the version it was rebuilt from), so each job is one
    // lookup.
    let mut seen: HashMap<&str, Vec<(&str, u64)>> = HashMap::new();
    for l in lines {
        let rv = str_of(l, "resource_version");
        let number = rv
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        seen.entry(str_of(l, "uid"))
            .or_default()
            .push((str_of(l, "phase"), number));
    }
    played
        .iter()
        .filter(|job| {
            let phases = seen.get(job.uid.as_str()).map(Vec::as_slice).unwrap_or(&[]);
            if job.deleted {
                !phases.iter().any(|(phase, _)| *phase == "deleted")
            } else {
                // The terminal write itself, or a later version still carrying its phase: a
                // version superseded before jobrelay could read it (the finalizer's patch
                // follows it at once) is never observed, and no watcher can deliver it.
                let terminal: u64 = job.terminal_rv.parse().unwrap_or(u64::MAX);
                !phases
                    .iter()
                    .any(|(phase, rv)| *phase == job.terminal && *rv >= terminal)
            }
        })
        .map(|job| {
            if job.deleted {
                format!("{}: deleted", job.name)
            } else {
                format!("{}: {} at {}", job.name, job.terminal, job.terminal_rv)
            }
        })
        .collect()
}

/// How often each event id (`cluster/uid/resourceVersion`) was delivered, and the ids
/// delivered more than once with their counts.
pub(crate) fn count_ids(lines: &[Value]) -> (BTreeMap<&str, usize>, Vec<(&str, usize)>) {
    let mut per_id: BTreeMap<&str, usize> = BTreeMap::new();
    for l in lines {
        *per_id.entry(str_of(l, "id")).or_default() += 1;
    }
    let repeated = per_id
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(id, n)| (*id, *n))
        .collect();
    (per_id, repeated)
}

/// Waits until every job's final state is in the event log at `events`; the ones still
/// missing after [`DEADLINE`] otherwise.
pub(crate) async fn finals_delivered(played: &[Played], events: &Path) -> Result<(), String> {
    poll(DEADLINE, || {
        let (lines, _) = read_lines(events);
        let missing = missing_finals(played, &lines);
        if missing.is_empty() {
            Ok(())
        } else {
            Err(missing.join(", "))
        }
    })
    .await
}

// ----- 1. SIGKILL soak -------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_stream_loses_nothing_and_repeats_only_calls_in_flight() {
    const JOBS: usize = 24;
    const KILLS: usize = 5;
    let started = Instant::now();
    let seed = soak_seed();
    println!("soak seed {seed} (JOBRELAY_SOAK_SEED={seed} replays this schedule)");
    let mut rng = Rng(seed);
    let plans = plan_jobs(&mut rng, JOBS);
    let span = plans.iter().map(Plan::end_ms).max().unwrap_or(0);
    println!(
        "{JOBS} jobs, lifecycles spread over {:.1} s",
        span as f64 / 1000.0
    );

    let sim = SimCluster::start("alpha").await.expect("simulator");
    let manifest = format!(
        "wasm: event-log.wasm\ndelivery: every-version\ntimeout_ms: 5000\nconcurrency: {CONCURRENCY}\n\
         grants:\n  filesystem:\n    - {{host: out/log, guest: /data, writable: true}}\n\
         config:\n  file: events.jsonl\n"
    );
    let dir = config_folder(&sim, "log", &manifest);
    let config = dir.path().to_path_buf();
    let events = config.join("out/log/events.jsonl");

    let driver = tokio::spawn(drive(sim.clone(), plans.clone()));
    let mut runs = Vec::new();
    let mut errors = Vec::new();
    for round in 1..=KILLS {
        let mut relay = Relay::start(&config, &format!("run {round}"));
        let ms = rng.range(500, 3000);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        let (lines, _) = read_lines(&events);
        if let Some(status) = relay.child.try_wait().expect("try_wait") {
            panic!("run {round} ended by itself: {status}\n{}", relay.tail());
        }
        relay.sigkill().await;
        errors.extend(relay.errors());
        println!(
            "run {round}: SIGKILL after {ms} ms ({} event lines so far)",
            lines.len()
        );
        runs.push(ms);
    }
    let mut last = Relay::start(&config, &format!("run {} (the last)", KILLS + 1));
    let played = driver
        .await
        .expect("driver task")
        .expect("driver plays every step");
    let driven = started.elapsed();

    let waited = finals_delivered(&played, &events).await;
    if let Err(missing) = waited {
        panic!(
            "after {DEADLINE:?} these final states are still not delivered: {missing}\n{}",
            last.tail()
        );
    }
    // The last run catches up on what the killed ones delivered but did not acknowledge
    // before it is stopped.
    let state = state_file(&config);
    let started_wait = Instant::now();
    loop {
        let behind = cursors_behind(&sim, "alpha", &cursors(&state, "log").await, &played);
        if behind.is_empty() {
            break;
        }
        assert!(
            started_wait.elapsed() < DEADLINE,
            "the last run never caught up:\n{}\n{}",
            behind.join("\n"),
            last.tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    last.signal("TERM");
    let status = last.exit_within(Duration::from_secs(30)).await;
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "SIGTERM ends the last run with code 0 ({status:?})\n{}",
        last.tail()
    );
    errors.extend(last.errors());

    // --- the event log across all runs ---
    let (lines, torn) = read_lines(&events);
    assert!(
        torn.is_empty(),
        "lines of events.jsonl that are not JSON (torn by a kill?): {torn:#?}"
    );
    let (per_id, duplicated) = count_ids(&lines);
    let synthetic = lines.iter().filter(|l| l["synthetic"] == true).count();
    let gone = lines
        .iter()
        .filter(|l| str_of(l, "resource_version").ends_with("-gone"))
        .count();
    let bound = CONCURRENCY * KILLS;
    println!("--- soak figures ---");
    println!("seed:               {seed}");
    println!(
        "runs:               {} (SIGKILL after {runs:?} ms, then SIGTERM)",
        KILLS + 1
    );
    println!(
        "jobs:               {JOBS} ({} deleted)",
        played.iter().filter(|j| j.deleted).count()
    );
    println!(
        "events delivered:   {} lines, {} distinct ids ({synthetic} synthetic catch-up, {gone} deletions found by re-list)",
        lines.len(),
        per_id.len()
    );
    println!(
        "duplicated ids:     {} (bound: concurrency {CONCURRENCY} x {KILLS} kills = {bound})",
        duplicated.len()
    );
    for (id, n) in &duplicated {
        println!("  {id} x{n}");
    }
    println!("error log lines:    {}", errors.len());
    for line in errors.iter().take(10) {
        println!("  {line}");
    }
    println!("driver finished at: {:.1} s", driven.as_secs_f64());
    println!(
        "elapsed:            {:.1} s",
        started.elapsed().as_secs_f64()
    );

    assert!(
        duplicated.iter().all(|(_, n)| *n <= 2),
        "an event was delivered more than twice: {duplicated:?}"
    );
    assert!(
        duplicated.len() <= bound,
        "{} duplicated ids exceed concurrency x kills = {bound}: {duplicated:?}",
        duplicated.len()
    );
    let missing = missing_finals(&played, &lines);
    assert!(
        missing.is_empty(),
        "final states not delivered: {missing:?}"
    );
    let known: BTreeSet<&str> = played.iter().map(|j| j.uid.as_str()).collect();
    let strangers: Vec<&Value> = lines
        .iter()
        .filter(|l| !known.contains(str_of(l, "uid")))
        .collect();
    assert!(
        strangers.is_empty(),
        "events of unknown jobs: {strangers:?}"
    );
    let deleted_without_terminal: Vec<&str> = played
        .iter()
        .filter(|j| {
            j.deleted
                && !lines
                    .iter()
                    .any(|l| str_of(l, "uid") == j.uid && str_of(l, "phase") == j.terminal)
        })
        .map(|j| j.name.as_str())
        .collect();
    // Allowed by the guarantees (a job that finished and was deleted while jobrelay was down
    // leaves only its deletion), but worth seeing.
    println!("deleted jobs whose terminal phase was never seen: {deleted_without_terminal:?}");

    // --- nothing left in a lane: the state file matches the cluster ---
    let cursors = cursors(&state_file(&config), "log").await;
    assert_cursors_current(&sim, "alpha", &cursors, &played);
}

/// After the last run: every job still in the cluster has the plugin's cursor at its current
/// version (every-version delivers every version), and no deleted job has a cursor left.
#[expect(
    clippy::print_stdout,
    reason = "the run's figures, beside those its tests print, for whoever runs it"
)]
pub(crate) fn assert_cursors_current(
    sim: &SimCluster,
    cluster: &str,
    cursors: &[jobrelay_state::Cursor],
    played: &[Played],
) {
    let left = cursors_behind(sim, cluster, cursors, played);
    assert!(
        left.is_empty(),
        "left in the lane after the final SIGTERM:\n{}",
        left.join("\n")
    );
    println!(
        "cursors:            {} of {cluster} in the state store, each at its job's current version",
        cursors.iter().filter(|c| c.cluster == cluster).count()
    );
}

/// Jobs of `cluster` whose cursor is not at the job's current version, and deleted jobs that
/// still have one.
pub(crate) fn cursors_behind(
    sim: &SimCluster,
    cluster: &str,
    cursors: &[jobrelay_state::Cursor],
    played: &[Played],
) -> Vec<String> {
    let cursors: HashMap<&str, &jobrelay_state::Cursor> = cursors
        .iter()
        .filter(|c| c.cluster == cluster)
        .map(|c| (c.uid.as_str(), c))
        .collect();
    let mut left = Vec::new();
    let mut present = BTreeSet::new();
    for flavor in Flavor::ALL {
        for job in sim.list(&flavor.gvr(), None).expect("list jobs") {
            let meta = &job["metadata"];
            let (uid, rv) = (str_of(meta, "uid"), str_of(meta, "resourceVersion"));
            present.insert(uid.to_string());
            // every-version delivers every version, so the cursor must be the current one.
            match cursors.get(uid) {
                Some(c) if c.resource_version == rv => {}
                Some(c) => left.push(format!(
                    "{}: cursor at {:?} ({}), job at {rv}",
                    str_of(meta, "name"),
                    c.resource_version,
                    c.phase
                )),
                None => left.push(format!("{}: no cursor, job at {rv}", str_of(meta, "name"))),
            }
        }
    }
    for job in played.iter().filter(|j| j.deleted) {
        if present.contains(&job.uid) {
            // Still held by a finalizer, or the deletion is not through yet.
            left.push(format!("{}: deleted, but still listed", job.name));
            continue;
        }
        // A delivered deletion removes the job's cursor.
        if let Some(c) = cursors.get(job.uid.as_str()) {
            left.push(format!(
                "{}: deleted, but a cursor remains at {:?} ({})",
                job.name, c.resource_version, c.phase
            ));
        }
    }
    left
}

// ----- 1b. a stop signal during start-up --------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_signal_during_start_up_is_a_clean_stop() {
    let sim = SimCluster::start("alpha").await.expect("simulator");
    let manifest = "wasm: event-log.wasm\ngrants:\n  filesystem:\n    - {host: out/log, guest: /data, writable: true}\n\
                    config:\n  file: events.jsonl\n";
    let dir = config_folder(&sim, "log", manifest);
    let mut relay = Relay::start(dir.path(), "stopped while starting");
    // Signal as soon as it says it is starting, while it still loads its plugin.
    let begun = Instant::now();
    while !relay.log().contains("starting") {
        assert!(
            begun.elapsed() < DEADLINE,
            "never started\n{}",
            relay.tail()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    relay.signal("TERM");
    let status = relay.exit_within(Duration::from_secs(30)).await;
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "a SIGTERM while starting is a clean stop ({status:?})\n{}",
        relay.tail()
    );
}

// ----- 2. SIGTERM lets the call in flight finish -----------------------------------------------

fn probe_manifest(timeout_ms: u64) -> String {
    format!(
        "wasm: probe.wasm\ntimeout_ms: {timeout_ms}\nconcurrency: {CONCURRENCY}\n\
         grants:\n  filesystem:\n    - {{host: out/probe, guest: /data, writable: true}}\n"
    )
}

/// Waits until the daemon logs that the probe started handling `id`.
async fn wait_call_started(relay: &Relay, id: &str) {
    wait_log(relay, &format!("probe handling {id}")).await;
}

fn ids_in(path: &Path, id: &str) -> usize {
    read_lines(path)
        .0
        .iter()
        .filter(|l| str_of(l, "id") == id)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_the_call_in_flight_finish_and_acknowledges_it() {
    let sim = SimCluster::start("alpha").await.expect("simulator");
    let dir = config_folder(&sim, "probe", &probe_manifest(10_000));
    let config = dir.path();
    let output = config.join("out/probe/probe.jsonl");
    let slow = JobDriver::builder(Flavor::Batch, "ml", "slow")
        .label(BEHAVE, "sleep-ms:2500")
        .create(&sim)
        .expect("create the slow job");
    let id = format!("alpha/{}/{}", slow.uid(), slow.resource_version());

    let mut relay = Relay::start(config, "first run");
    wait_call_started(&relay, &id).await;
    assert_eq!(ids_in(&output, &id), 0, "the call is still running");
    relay.signal("TERM");
    let signalled = Instant::now();
    let status = relay.exit_within(Duration::from_secs(30)).await;
    println!(
        "SIGTERM during a 2.5 s call: {} after {:.2} s",
        status.map_or("still running".to_string(), |s| s.to_string()),
        signalled.elapsed().as_secs_f64()
    );
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "SIGTERM exits 0 ({status:?})\n{}",
        relay.tail()
    );
    assert_eq!(
        ids_in(&output, &id),
        1,
        "the call in flight finished before the exit\n{}",
        relay.tail()
    );
    let cursor = cursors(&state_file(config), "probe")
        .await
        .into_iter()
        .find(|c| c.uid == slow.uid());
    assert_eq!(
        cursor.map(|c| c.resource_version),
        Some(slow.resource_version().to_string()),
        "the finished call's cursor was written before the exit"
    );

    // A restart does not deliver it again. A quick job created now is handled after the slow
    // job would have been re-queued (the first list holds both, or the slow one before it);
    // stopping with SIGTERM after that lets any such call finish, so it would show.
    let mut again = Relay::start(config, "second run");
    let marker = JobDriver::create(&sim, Flavor::Volcano, "ml", "marker").expect("marker job");
    let marker_id = format!("alpha/{}/{}", marker.uid(), marker.resource_version());
    let delivered = poll(DEADLINE, || {
        if ids_in(&output, &marker_id) > 0 {
            Ok(())
        } else {
            Err(String::new())
        }
    })
    .await;
    assert!(
        delivered.is_ok(),
        "the marker job is delivered after the restart\n{}",
        again.tail()
    );
    again.signal("TERM");
    let status = again.exit_within(Duration::from_secs(30)).await;
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "SIGTERM exits 0 ({status:?})\n{}",
        again.tail()
    );
    assert!(
        !again.log().contains(&format!("probe handling {id}")),
        "the restart called the plugin again for {id}\n{}",
        again.tail()
    );
    assert_eq!(ids_in(&output, &id), 1, "{id} was delivered once in all");
}

// ----- 3. a second signal exits at once ----------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_exits_at_once_with_130() {
    let sim = SimCluster::start("alpha").await.expect("simulator");
    // The call would take 15 s, well inside both its timeout and the 20 s shutdown grace.
    let dir = config_folder(&sim, "probe", &probe_manifest(30_000));
    let config = dir.path();
    let output = config.join("out/probe/probe.jsonl");
    let slow = JobDriver::builder(Flavor::PyTorch, "ml", "very-slow")
        .label(BEHAVE, "sleep-ms:15000")
        .create(&sim)
        .expect("create the slow job");
    let id = format!("alpha/{}/{}", slow.uid(), slow.resource_version());

    let mut relay = Relay::start(config, "the run");
    wait_call_started(&relay, &id).await;
    relay.signal("TERM");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        relay.child.try_wait().expect("try_wait").is_none(),
        "the first signal waits for the call in flight\n{}",
        relay.tail()
    );
    relay.signal("TERM");
    let signalled = Instant::now();
    let status = relay.exit_within(Duration::from_secs(10)).await;
    println!(
        "second SIGTERM during a 15 s call: {} after {:.2} s",
        status.map_or("still running".to_string(), |s| s.to_string()),
        signalled.elapsed().as_secs_f64()
    );
    assert!(
        status.is_some(),
        "the second signal ends the process within 10 s (the call would take 15 s)\n{}",
        relay.tail()
    );
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(130),
        "a second signal exits with 130\n{}",
        relay.tail()
    );
    assert_eq!(
        ids_in(&output, &id),
        0,
        "the interrupted call did not finish"
    );
    // Not acknowledged, so the next start delivers it again (at-least-once).
    let cursor = cursors(&state_file(config), "probe")
        .await
        .into_iter()
        .find(|c| c.uid == slow.uid());
    assert!(
        cursor
            .as_ref()
            .is_none_or(|c| c.resource_version != slow.resource_version()),
        "the interrupted call's cursor was not advanced: {cursor:?}"
    );
}

// ----- 4. out of file handles -------------------------------------------------------------------

/// Sets the soft open-file limit of a running process with util-linux `prlimit`.
fn set_open_file_limit(pid: u32, soft: &str) {
    let status = std::process::Command::new("prlimit")
        .arg("--pid")
        .arg(pid.to_string())
        .arg(format!("--nofile={soft}:"))
        .status()
        .expect("prlimit runs (util-linux)");
    assert!(status.success(), "prlimit --pid {pid} --nofile={soft}:");
}

/// The daemon runs out of file handles (its open-file limit lowered below the fds it holds, so
/// every `open` and `read_dir` fails with EMFILE) through several periodic re-scans: a folder it
/// cannot list says nothing about what the folder holds, so no plugin and no cluster is
/// removed, and once handles are back the same plugin delivers the next jobs without a reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_out_of_file_handles_removes_nothing() {
    let sim = SimCluster::start("alpha").await.expect("simulator");
    let manifest = "wasm: event-log.wasm\ndelivery: every-version\n\
                    grants:\n  filesystem:\n    - {host: out/log, guest: /data, writable: true}\n\
                    config:\n  file: events.jsonl\n";
    let dir = config_folder(&sim, "log", manifest);
    let events = dir.path().join("out/log/events.jsonl");
    let relay = Relay::start(dir.path(), "out of file handles");
    wait_log(&relay, "plugin version serving").await;
    wait_log(&relay, "cluster started").await;

    let limits = std::fs::read_to_string(format!("/proc/{}/limits", relay.pid)).expect("limits");
    let soft = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .expect("the soft open-file limit")
        .to_string();
    // Below every fd it holds (0, 1 and 2 included), so no new one can be had; the ones it
    // holds keep working.
    set_open_file_limit(relay.pid, "3");
    // The re-scan runs every 2 s: a few of them meet the limit.
    tokio::time::sleep(Duration::from_secs(8)).await;
    set_open_file_limit(relay.pid, &soft);

    let mut rng = Rng(7);
    let played = drive(sim.clone(), plan_jobs(&mut rng, 2))
        .await
        .expect("driver plays every step");
    if let Err(missing) = finals_delivered(&played, &events).await {
        panic!(
            "after the handles came back these final states were not delivered: {missing}\n{}",
            relay.tail()
        );
    }
    let log = relay.log();
    assert!(!log.contains("plugin removed"), "{}", relay.tail());
    assert_eq!(
        log.matches("plugin version serving").count(),
        1,
        "the plugin was not loaded again\n{}",
        relay.tail()
    );
    assert_eq!(
        log.matches("cluster started").count(),
        1,
        "the cluster was not started again\n{}",
        relay.tail()
    );
    assert!(
        log.matches("cannot read a config folder").count() >= 2,
        "the unreadable folder is reported at each re-scan\n{}",
        relay.tail()
    );
    assert!(!log.contains("panicked"), "{}", relay.tail());
}

/// A kind the cluster does not serve (its CRD is missing, or the kind is written wrong) is
/// said in the log — once, as a warning naming the cluster, the kind and its resource — not
/// left to `/status` alone, and not repeated at every check the backoff makes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_no_cluster_serves_is_said_once_in_the_log() {
    let sim = SimCluster::start("east").await.expect("simulator");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path();
    write(
        &config.join("jobrelay.yaml"),
        "state: {path: state/jobrelay.db}\nkinds:\n  - name: batch-job\n  - name: trainjob\n    \
         group: example.com\n    version: v1\n    kind: TrainJob\n    plural: trainjobs\n    \
         normalizer: {field: {path: /status/phase, phases: {Done: succeeded}}}\n",
    );
    write(&config.join("clusters/east.yaml"), &sim.kubeconfig_yaml());
    let relay = Relay::start(config, "run");
    let said = |log: &str| {
        log.lines()
            .filter(|l| l.contains("WARN") && l.contains("does not serve this kind"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let started = Instant::now();
    while said(&relay.log()).is_empty() {
        assert!(
            started.elapsed() < DEADLINE,
            "the missing kind was never said\n{}",
            relay.tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Long enough for several checks of the backoff (2 s, 4 s, …).
    let refused = || {
        sim.recent_requests()
            .iter()
            .filter(|r| r.uri.contains("/trainjobs") && r.status == 404)
            .count()
    };
    while refused() < 3 {
        assert!(started.elapsed() < DEADLINE, "{}", relay.tail());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let lines = said(&relay.log());
    assert_eq!(lines.len(), 1, "said once: {lines:#?}");
    for part in ["east/trainjob", "example.com/v1/trainjobs"] {
        assert!(lines[0].contains(part), "{part} in {}", lines[0]);
    }
}
