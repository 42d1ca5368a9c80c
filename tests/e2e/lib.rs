//! Helpers for the end-to-end tests: a config folder in a temp dir, the real plugins built by
//! `plugins/build.sh`, and patient waiting (the machines running these tests are noisy, so
//! every wait has a generous deadline and no test asserts on timing).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use jobrelay::daemon::Daemon;
use jobrelay_testkit::SimCluster;
use serde_json::Value;

pub mod stream_jobs;

/// Generous deadline for anything the daemon should do "soon".
pub const DEADLINE: Duration = Duration::from_secs(60);

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A component built by `plugins/build.sh`.
pub fn built_wasm(name: &str) -> PathBuf {
    let path = repo_root()
        .join("target/plugins")
        .join(format!("{name}.wasm"));
    assert!(
        path.exists(),
        "{} is missing: run plugins/build.sh (tests/run.sh does it)",
        path.display()
    );
    path
}

/// Logs for the test binary, once, captured per test (shown for failing tests only);
/// `RUST_LOG` tunes them.
pub fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

/// `component` with a custom section named `name` appended: the same code in a different
/// file, so a new plugin version (and a real compile, never a cache hit).
pub fn with_custom_section(component: &[u8], name: &str) -> Vec<u8> {
    let mut body = Vec::new();
    leb128(&mut body, name.len());
    body.extend_from_slice(name.as_bytes());
    let mut out = component.to_vec();
    out.push(0); // a custom section's id
    leb128(&mut out, body.len());
    out.extend_from_slice(&body);
    out
}

/// `n` as an unsigned LEB128 number, as wasm writes sizes.
fn leb128(out: &mut Vec<u8>, mut n: usize) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// Write a file the way a careful tool does: a hidden temp file, then an atomic rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) {
    let dir = path.parent().expect("file has a parent");
    fs::create_dir_all(dir).expect("create parent");
    let name = path.file_name().expect("file name").to_string_lossy();
    let tmp = dir.join(format!(".{name}.tmp"));
    fs::write(&tmp, bytes).expect("write temp file");
    fs::rename(&tmp, path).expect("rename into place");
}

/// A config folder in a temp dir, with its own plugin folder and output folder.
pub struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    /// A config folder whose main file is `main_yaml` plus `plugin_dir: wasm` (a folder of this
    /// setup, so tests can replace components without touching the build output).
    pub fn new(main_yaml: &str) -> Setup {
        let dir = tempfile::tempdir().expect("tempdir");
        let setup = Setup { dir };
        for sub in ["clusters", "plugins", "wasm", "out"] {
            fs::create_dir_all(setup.path(sub)).expect("create folder");
        }
        let main = format!(
            "plugin_dir: wasm\nstate: {{path: state/jobrelay.db}}\nrescan_seconds: 2\ndebounce_ms: 100\n{main_yaml}"
        );
        write_atomic(&setup.path("jobrelay.yaml"), main.as_bytes());
        setup
    }

    pub fn config_dir(&self) -> &Path {
        self.dir.path()
    }

    /// A path inside the config folder.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Copy a built component into this setup's plugin folder as `file_name`, atomically.
    pub fn install_wasm(&self, built: &str, file_name: &str) {
        let bytes = fs::read(built_wasm(built)).expect("read built component");
        write_atomic(&self.path(&format!("wasm/{file_name}")), &bytes);
    }

    /// Write a plugin manifest `plugins/NAME.yaml`.
    pub fn write_manifest(&self, name: &str, yaml: &str) {
        write_atomic(&self.path(&format!("plugins/{name}.yaml")), yaml.as_bytes());
    }

    /// mysql-sync installed, taking transitions through the granted connection `main`, into
    /// the tables `PREFIX_jobs` and `PREFIX_tr`: their names.
    pub fn install_mysql_sync(&self, prefix: &str) -> (String, String) {
        self.install_wasm("mysql-sync", "mysql-sync.wasm");
        let (jobs, transitions) = (format!("{prefix}_jobs"), format!("{prefix}_tr"));
        self.write_manifest(
            "mysql-sync",
            &format!(
                "wasm: mysql-sync.wasm\ndelivery: transitions\ngrants: {{sql: [main]}}\n\
                 config: {{connection: main, jobs_table: {jobs}, transitions_table: {transitions}}}\n"
            ),
        );
        (jobs, transitions)
    }

    /// An event-log style manifest writing into `out/<out_sub>/<file>`.
    pub fn log_manifest(wasm_file: &str, out_sub: &str, file: &str, extra: &str) -> String {
        format!(
            "wasm: {wasm_file}\ntimeout_ms: 5000\nmemory_mb: 32\nconcurrency: 4\n\
             grants:\n  filesystem:\n    - host: out/{out_sub}\n      guest: /data\n      writable: true\n\
             config:\n  file: {file}\n{extra}"
        )
    }

    /// Write `clusters/NAME.yaml` for a simulated cluster.
    pub fn add_cluster(&self, sim: &SimCluster) {
        let path = self.path(&format!("clusters/{}.yaml", sim.name()));
        write_atomic(&path, sim.kubeconfig_yaml().as_bytes());
    }

    pub fn remove_cluster(&self, name: &str) {
        fs::remove_file(self.path(&format!("clusters/{name}.yaml"))).expect("remove kubeconfig");
    }

    /// JSON lines written so far to `out/<rel>` (none if the file does not exist yet).
    pub fn lines(&self, rel: &str) -> Vec<Value> {
        read_lines(&self.path(&format!("out/{rel}")))
    }
}

pub fn read_lines(path: &Path) -> Vec<Value> {
    let Ok(text) = fs::read_to_string(path) else {
        return Vec::new();
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad line {l:?}: {e}")))
        .collect()
}

/// Watch connections opened so far to a simulator, over the four built-in kinds.
pub fn watches_opened(sim: &SimCluster) -> usize {
    use jobrelay_testkit::Gvr;
    [
        Gvr::BATCH_JOB,
        Gvr::VOLCANO_JOB,
        Gvr::PYTORCH_JOB,
        Gvr::MPI_JOB_V2,
    ]
    .iter()
    .map(|g| sim.watch_requests_for(g))
    .sum()
}

/// A config folder with the event-log plugin as `log` (writing `out/log/events.jsonl`) and
/// the given clusters, and a daemon running on it with every cluster synced.
pub async fn start_with_event_log(main_yaml: &str, sims: &[&SimCluster]) -> (Setup, Daemon) {
    let setup = Setup::new(main_yaml);
    setup.install_wasm("event-log", "event-log.wasm");
    setup.write_manifest(
        "log",
        &Setup::log_manifest("event-log.wasm", "log", "events.jsonl", ""),
    );
    for sim in sims {
        setup.add_cluster(sim);
    }
    let daemon = Daemon::start(setup.config_dir())
        .await
        .expect("daemon starts");
    for sim in sims {
        wait_synced(&daemon, sim.name()).await;
    }
    (setup, daemon)
}

/// Assert that no event id appears twice in the lines.
pub fn assert_unique_ids(lines: &[Value], why: &str) {
    let mut seen = std::collections::BTreeSet::new();
    for l in lines {
        let id = l["id"].as_str().expect("id");
        assert!(seen.insert(id), "{why}: {id} appears twice");
    }
}

/// Poll `check` every 50 ms until it returns `Some`, or panic after `DEADLINE` saying `what`.
pub async fn wait_for<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        if started.elapsed() > DEADLINE {
            panic!("timed out after {DEADLINE:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Wait until the daemon reports the cluster synced.
pub async fn wait_synced(daemon: &Daemon, cluster: &str) {
    wait_for(&format!("cluster {cluster} synced"), || {
        let h = daemon.clusters().get(cluster).cloned()?;
        (h.state == jobrelay::clusters::health::HealthState::Synced).then_some(())
    })
    .await
}

/// Wait until a plugin serves the given number of successful reloads worth of version, i.e.
/// until its last reload attempt is for `version_differs_from` no more.
pub async fn wait_plugin_serving(daemon: &Daemon, plugin: &str) -> String {
    wait_for(&format!("plugin {plugin} serving"), || {
        daemon.plugins().get(plugin).and_then(|s| s.serving.clone())
    })
    .await
}

/// Event lines grouped by job uid, in file order.
pub fn by_job(lines: &[Value]) -> BTreeMap<String, Vec<Value>> {
    let mut jobs: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for l in lines {
        let uid = uid_of(l);
        jobs.entry(uid).or_default().push(l.clone());
    }
    jobs
}

/// The phases of a job's events with consecutive repeats folded.
pub fn phase_path(events: &[Value]) -> Vec<String> {
    let mut path: Vec<String> = Vec::new();
    for e in events {
        let p = e["phase"].as_str().expect("phase").to_string();
        if path.last() != Some(&p) {
            path.push(p);
        }
    }
    path
}

/// The job uid inside an event id (`cluster/uid/resourceVersion`).
pub fn uid_of(event: &Value) -> String {
    let id = event["id"].as_str().expect("id");
    id.split('/')
        .nth(1)
        .expect("id has three parts")
        .to_string()
}

/// Resource versions of the simulator are numbers; their order is the order of writes.
pub fn rv_of(event: &Value) -> u64 {
    event["resource_version"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("numeric resource_version in {event}"))
}

/// Waits until the JSON lines in `out/<rel>` hold, for every `(uid, phase)` of `expect`, an
/// event of that job in that phase; returns the lines.
pub async fn wait_for_phases(setup: &Setup, rel: &str, expect: &[(String, &str)]) -> Vec<Value> {
    wait_for("every expected phase delivered", || {
        let lines = setup.lines(rel);
        expect
            .iter()
            .all(|(uid, phase)| {
                lines
                    .iter()
                    .any(|l| uid_of(l) == *uid && l["phase"] == *phase)
            })
            .then_some(lines)
    })
    .await
}

/// A plain HTTP/1.1 GET (for the telemetry endpoint); returns the status code and the body.
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    try_http_get(addr, path)
        .await
        .unwrap_or_else(|e| panic!("GET http://{addr}{path}: {e}"))
}

/// [`http_get`] that reports a refused connection or a broken answer instead of panicking,
/// for a server that may not listen yet.
pub async fn try_http_get(
    addr: std::net::SocketAddr,
    path: &str,
) -> std::io::Result<(u16, String)> {
    http_get_with(addr, path, "").await
}

/// A GET with `headers` (`Name: value` lines, each ending in `\r\n`); the status code and the
/// whole answer, headers included.
pub async fn http_get_with(
    addr: std::net::SocketAddr,
    path: &str,
    headers: &str,
) -> std::io::Result<(u16, String)> {
    let (code, text) = http_exchange(addr, path, headers).await?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((code, body))
}

/// The status code and the whole answer (head and body) of a GET with `headers`.
pub async fn http_exchange(
    addr: std::net::SocketAddr,
    path: &str,
    headers: &str,
) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    let text = String::from_utf8_lossy(&response).into_owned();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other("no status line"))?;
    Ok((code, text))
}

/// A simulated cluster `east` holding `jobs` batch jobs in `ml` that have already finished
/// (`j00000`, `j00001`, …; no pods), for clean-up at scale. Its garbage collector is off: it
/// looks at every object on each deletion, and would be the limit, not the daemon.
pub async fn finished_batch_jobs(jobs: usize) -> SimCluster {
    let sim = SimCluster::start_with(
        "east",
        jobrelay_testkit::SimOptions {
            garbage_collection: false,
            ..jobrelay_testkit::SimOptions::default()
        },
    )
    .await
    .expect("sim");
    for i in 0..jobs {
        let mut job = jobrelay_testkit::JobDriver::builder(
            jobrelay_testkit::Flavor::Batch,
            "ml",
            &format!("j{i:05}"),
        )
        .without_pods()
        .create(&sim)
        .expect("create");
        job.running().expect("running");
        job.succeeded().expect("succeeded");
    }
    sim
}

/// The headless Chromium the browser tests render pages with (`JOBRELAY_TEST_CHROMIUM`, else
/// the first of the usual names on the PATH).
pub fn chromium() -> PathBuf {
    let candidates = ["chromium", "chromium-browser", "google-chrome"];
    std::env::var_os("JOBRELAY_TEST_CHROMIUM")
        .map(PathBuf::from)
        .or_else(|| {
            candidates.iter().find_map(|name| {
                std::env::var_os("PATH").and_then(|paths| {
                    std::env::split_paths(&paths)
                        .map(|dir| dir.join(name))
                        .find(|p| p.exists())
                })
            })
        })
        .expect("headless Chromium is needed for this test (tests/run.sh installs `chromium`)")
}

/// Pixels of a screenshot (`channels` bytes each) with exactly this colour.
pub fn count_colour(pixels: &[u8], channels: usize, rgb: [u8; 3]) -> usize {
    pixels
        .chunks_exact(channels)
        .filter(|p| p[0] == rgb[0] && p[1] == rgb[1] && p[2] == rgb[2])
        .count()
}

/// A GET whose answer is JSON: the status code and the value.
pub async fn get_json(addr: std::net::SocketAddr, path: &str) -> (u16, Value) {
    let (code, body) = http_get(addr, path).await;
    let value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"));
    (code, value)
}

/// Asks until `check` gives a value (a minute at most): [`wait_for`] for checks that are
/// themselves asynchronous (an HTTP request).
pub async fn until<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `cluster/namespace/name` of each job of a job view answer (`/api/v1/jobs`), in its order.
pub fn job_names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|j| {
            format!(
                "{}/{}/{}",
                j["cluster"].as_str().unwrap_or(""),
                j["namespace"].as_str().unwrap_or(""),
                j["name"].as_str().unwrap_or("")
            )
        })
        .collect()
}
