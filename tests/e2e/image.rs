//! The container image, run as the chart runs it: uid 10001, a read-only root filesystem with
//! only `/tmp` writable, every capability dropped, the main file, the plugin manifests and the
//! clusters' kubeconfigs each a read-only folder mounted where the chart mounts them, the state
//! on a volume of its own, and the shipped plugins from the image. It watches a simulated
//! cluster on the host network (127.0.0.1 only): ready, its plugins serving, a Volcano job's
//! events in event-log's file on a mounted folder, a plugin added to the mounted folder loaded
//! live, SIGTERM draining to exit status 0 within the chart's grace period, and a new container
//! on the same state volume going on from its cursors (and compile cache) without a repeat.
//!
//! The image is `localhost/jobrelay:test` (`JOBRELAY_TEST_IMAGE` overrides), built by
//! `tests/image/build.sh` (tests/run.sh runs it); without podman or the image the test fails.

use std::fs;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use jobrelay_e2e::{assert_unique_ids, init_logs, read_lines, repo_root, try_http_get, uid_of};
use jobrelay_testkit::{Flavor, JobDriver, SimCluster};
use serde_json::Value;

/// The chart's `terminationGracePeriodSeconds`: SIGTERM, then SIGKILL after this long.
const GRACE_SECONDS: u64 = 30;
/// How long a start may take: every plugin is compiled (a cold cache at the first start) before
/// the HTTP endpoint answers.
const START_DEADLINE: Duration = Duration::from_secs(300);
/// How long anything else the daemon should do soon may take.
const DEADLINE: Duration = Duration::from_secs(120);
/// The uid and gid the chart runs the container as.
const UID: u32 = 10001;

fn image() -> String {
    std::env::var("JOBRELAY_TEST_IMAGE").unwrap_or_else(|_| "localhost/jobrelay:test".to_string())
}

/// `podman` with the settings this kind of machine needs (tests/image/containers.conf: runc,
/// cgroupfs, no default ulimits); the output, whatever the exit status.
async fn podman(args: &[&str]) -> Output {
    let conf = repo_root().join("tests/image/containers.conf");
    let mut command = tokio::process::Command::new("podman");
    command
        .env("CONTAINERS_CONF", &conf)
        .args(["--runtime", "runc", "--cgroup-manager", "cgroupfs"])
        .args(args)
        .kill_on_drop(true);
    let run = tokio::time::timeout(Duration::from_secs(120), command.output());
    match run.await {
        Ok(Ok(output)) => output,
        Ok(Err(e)) => panic!(
            "podman {args:?}: {e} — podman is needed for this test: run tests/image/build.sh \
             (it installs podman and builds the image)"
        ),
        Err(_) => panic!("podman {args:?} did not finish within 120 s"),
    }
}

/// `podman args`, which must succeed; its standard output, trimmed.
async fn podman_ok(args: &[&str]) -> String {
    let out = podman(args).await;
    assert!(
        out.status.success(),
        "podman {args:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A container of this test, removed when dropped (its logs printed first if the test failed).
struct Container {
    name: String,
}

impl Drop for Container {
    #[expect(
        clippy::print_stderr,
        reason = "a failed test's container logs, for the runner to show with the failure"
    )]
    fn drop(&mut self) {
        let conf = repo_root().join("tests/image/containers.conf");
        let podman = |args: &[&str]| {
            std::process::Command::new("podman")
                .env("CONTAINERS_CONF", &conf)
                .args(["--runtime", "runc", "--cgroup-manager", "cgroupfs"])
                .args(args)
                .output()
        };
        if std::thread::panicking()
            && let Ok(out) = podman(&["logs", "--tail", "200", &self.name])
        {
            eprintln!(
                "--- the last logs of container {}:\n{}{}",
                self.name,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let _ = podman(&["rm", "--force", "--time", "0", &self.name]);
    }
}

impl Container {
    async fn logs(&self) -> String {
        let out = podman(&["logs", &self.name]).await;
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    /// `(running, exit code)` from `podman inspect`.
    async fn state(&self) -> (bool, i64) {
        let text = podman_ok(&[
            "inspect",
            "--format",
            "{{.State.Running}} {{.State.ExitCode}}",
            &self.name,
        ])
        .await;
        let mut parts = text.split_whitespace();
        let running = parts.next() == Some("true");
        let code = parts.next().and_then(|c| c.parse().ok()).unwrap_or(-1);
        (running, code)
    }
}

/// The folders the chart mounts, on the host: the main file's folder, the plugin manifests,
/// the clusters' kubeconfigs (all three mounted read-only), the state volume and the folder
/// event-log writes into (both owned by uid 10001, as the chart's fsGroup makes them).
struct Folders {
    root: tempfile::TempDir,
}

impl Folders {
    fn new(sim: &SimCluster) -> Folders {
        let root = tempfile::tempdir().expect("tempdir");
        // A temp dir is the test's own (0700); the container's uid must get in.
        fs::set_permissions(root.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
        let folders = Folders { root };
        for sub in ["config", "plugins", "clusters", "state", "events"] {
            fs::create_dir(folders.path(sub)).expect("create folder");
        }
        for sub in ["state", "events"] {
            std::os::unix::fs::chown(folders.path(sub), Some(UID), Some(UID)).unwrap_or_else(|e| {
                panic!("chown {sub} to {UID}: {e} (the container test runs as root)")
            });
        }
        // The main file as the chart renders it (its keys for the mounted folders, the state,
        // cache and archive on the state volume), listening on 127.0.0.1 only, on a port the
        // kernel picks (the container's log names it).
        let main = "kinds:\n  - name: volcano-job\nwatch:\n  namespaces: []\n\
             plugin_dir: /opt/jobrelay/plugins\n\
             plugin_manifests_dir: /etc/jobrelay-plugins\n\
             clusters_dir: /etc/jobrelay-clusters\n\
             state: {path: /var/lib/jobrelay/state/jobrelay.db}\n\
             runtime: {cache_dir: /var/lib/jobrelay/cache}\n\
             archive: {local: /var/lib/jobrelay/archive}\n\
             telemetry: {listen: \"127.0.0.1:0\"}\n";
        jobrelay_e2e::write_atomic(&folders.path("config/jobrelay.yaml"), main.as_bytes());
        // The chart's two default plugins, as its values give them, and event-log writing
        // into the mounted events folder.
        folders.manifest(
            "mysql-sync",
            "wasm: mysql-sync.wasm\ndelivery: transitions\ninstance_reuse: 256\n\
             grants: {sql: [embedded]}\nconfig: {connection: embedded}\n",
        );
        folders.manifest(
            "log-archive",
            "wasm: log-archive.wasm\ndelivery: transitions\ntimeout_ms: 60000\n\
             grants: {pod_logs: {}, archive: {}, kv: true}\n",
        );
        folders.manifest(
            "event-log",
            "wasm: event-log.wasm\ntimeout_ms: 5000\nmemory_mb: 32\n\
             grants:\n  filesystem:\n    - {host: /var/log/jobrelay, guest: /data, writable: true}\n\
             config: {file: events.jsonl}\n",
        );
        // A Secret's key is the cluster's name: no extension.
        jobrelay_e2e::write_atomic(
            &folders.path(&format!("clusters/{}", sim.name())),
            sim.kubeconfig_yaml().as_bytes(),
        );
        folders
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.path().join(rel)
    }

    fn manifest(&self, name: &str, yaml: &str) {
        jobrelay_e2e::write_atomic(&self.path(&format!("plugins/{name}.yaml")), yaml.as_bytes());
    }

    fn events(&self) -> Vec<Value> {
        read_lines(&self.path("events/events.jsonl"))
    }

    /// Starts a container of the image on these folders, as the chart's pod runs it.
    async fn run(&self, name: &str) -> Container {
        let mount = |sub: &str, at: &str, options: &str| {
            format!("{}:{at}{options}", self.path(sub).display())
        };
        let mounts = [
            mount("config", "/etc/jobrelay", ":ro"),
            mount("plugins", "/etc/jobrelay-plugins", ":ro"),
            mount("clusters", "/etc/jobrelay-clusters", ":ro"),
            mount("state", "/var/lib/jobrelay", ""),
            mount("events", "/var/log/jobrelay", ""),
        ];
        let pod_name = format!("POD_NAME={name}");
        let stop_timeout = GRACE_SECONDS.to_string();
        let image = image();
        let mut args = vec![
            "run",
            "--detach",
            "--name",
            name,
            "--pull",
            "never",
            // The chart's securityContext: uid and gid 10001, read-only root, no capability,
            // no privilege escalation; /tmp an emptyDir of its own (and nothing else
            // writable: podman's default tmpfs on /run and /var/tmp is off).
            "--user",
            "10001:10001",
            "--read-only",
            "--read-only-tmpfs=false",
            "--tmpfs",
            "/tmp",
            "--cap-drop",
            "all",
            "--security-opt",
            "no-new-privileges",
            // The archive is a folder of the state volume, as the chart mounts it, not an
            // anonymous volume for the image's VOLUME.
            "--image-volume",
            "ignore",
            "--network",
            "host",
            "--stop-timeout",
            &stop_timeout,
            "--env",
            &pod_name,
            "--env",
            "POD_NAMESPACE=platform",
        ];
        for m in &mounts {
            args.extend(["--volume", m.as_str()]);
        }
        args.extend([
            image.as_str(),
            "run",
            "--config",
            "/etc/jobrelay",
            "--log-format",
            "json",
        ]);
        let container = Container {
            name: name.to_string(),
        };
        podman_ok(&args).await;
        container
    }
}

/// The address the container's telemetry endpoint listens on (host network), from its log's
/// "telemetry endpoint listening" line, once it is written.
async fn telemetry_addr(container: &Container) -> SocketAddr {
    until_up(
        container,
        START_DEADLINE,
        "the telemetry endpoint listening",
        || async {
            container.logs().await.lines().find_map(|line| {
                let entry: Value = serde_json::from_str(line).ok()?;
                let message = entry["message"].as_str()?;
                if !message.starts_with("telemetry endpoint listening") {
                    return None;
                }
                entry["address"].as_str()?.parse().ok()
            })
        },
    )
    .await
}

/// Asks until `check` gives a value, failing after `deadline` (or at once when the container
/// has stopped), saying `what`.
async fn until_up<T, F, Fut>(
    container: &Container,
    deadline: Duration,
    what: &str,
    mut check: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let started = Instant::now();
    let mut last_look = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if last_look.elapsed() > Duration::from_secs(5) {
            let (running, code) = container.state().await;
            assert!(
                running,
                "container {} exited ({code}) while waiting for {what}:\n{}",
                container.name,
                container.logs().await
            );
            last_look = Instant::now();
        }
        assert!(
            started.elapsed() < deadline,
            "timed out after {deadline:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// `/status` as JSON, if the endpoint answers.
async fn get_status(addr: SocketAddr) -> Option<Value> {
    let (code, body) = try_http_get(addr, "/status").await.ok()?;
    (code == 200)
        .then(|| serde_json::from_str(&body).ok())
        .flatten()
}

/// Waits until the container is ready (`/readyz` 200), the cluster synced and every plugin
/// named serving a version; the last `/status`.
async fn wait_ready(container: &Container, plugins: &[&str]) -> (SocketAddr, Value) {
    let addr = telemetry_addr(container).await;
    until_up(container, START_DEADLINE, "/readyz ready", || async {
        let (code, _) = try_http_get(addr, "/readyz").await.ok()?;
        (code == 200).then_some(())
    })
    .await;
    let status = until_up(
        container,
        DEADLINE,
        "the cluster synced and the shipped plugins serving",
        || async {
            let status = get_status(addr).await?;
            let synced = status["clusters"]["east"]["state"] == "synced";
            let serving = plugins
                .iter()
                .all(|p| status["plugins"][*p]["serving"].is_string());
            (status["ready"] == true && synced && serving).then_some(status)
        },
    )
    .await;
    (addr, status)
}

/// Sends SIGTERM (`podman stop`, SIGKILL after the chart's grace period) and asserts the daemon
/// drained and exited with status 0 before the grace period ran out; how long it took.
async fn stop_with_sigterm(container: &Container) -> Duration {
    let started = Instant::now();
    let grace = GRACE_SECONDS.to_string();
    podman_ok(&["stop", "--time", &grace, &container.name]).await;
    let took = started.elapsed();
    let (running, code) = container.state().await;
    let logs = container.logs().await;
    assert!(!running, "{} still runs after podman stop", container.name);
    assert_eq!(
        code, 0,
        "SIGTERM ends the daemon with status 0 (137 is SIGKILL after the grace period):\n{logs}"
    );
    assert!(
        took < Duration::from_secs(GRACE_SECONDS),
        "SIGTERM took {took:?}, past the {GRACE_SECONDS} s grace period"
    );
    assert!(
        logs.contains("stop signal received"),
        "the daemon saw SIGTERM and shut down:\n{logs}"
    );
    took
}

/// Files under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_runs_as_the_chart_runs_it() {
    init_logs();
    let started = Instant::now();
    let version = podman(&["--version"]).await;
    assert!(
        version.status.success(),
        "podman does not run: {} — run tests/image/build.sh",
        String::from_utf8_lossy(&version.stderr)
    );
    let image = image();
    let exists = podman(&["image", "exists", &image]).await;
    assert!(
        exists.status.success(),
        "the image {image} is missing: run tests/image/build.sh (tests/run.sh does it)"
    );

    let sim = SimCluster::start("east").await.expect("simulator");
    let folders = Folders::new(&sim);
    let name = format!("jobrelay-e2e-image-{}", std::process::id());
    let first = folders.run(&name).await;

    // Ready, the cluster synced, the shipped plugins loaded from the image and serving.
    let shipped = ["event-log", "mysql-sync", "log-archive"];
    let (addr, status) = wait_ready(&first, &shipped).await;
    for plugin in shipped {
        let sha = status["plugins"][plugin]["serving_wasm_sha256"]
            .as_str()
            .unwrap_or_else(|| panic!("{plugin} serves a component: {status:#}"));
        assert_eq!(sha.len(), 64, "{plugin}: {status:#}");
    }
    let ready_after = started.elapsed();

    // A Volcano job's events reach event-log's file on the mounted folder.
    let mut train = JobDriver::create(&sim, Flavor::Volcano, "ml", "train").expect("job");
    train.running().expect("running");
    train.succeeded().expect("succeeded");
    let uid = train.uid().to_string();
    until_up(
        &first,
        DEADLINE,
        "train's running and succeeded events",
        || {
            let lines = folders.events();
            let phases = |phase: &str| {
                lines
                    .iter()
                    .any(|l| uid_of(l) == uid && l["phase"] == phase)
            };
            std::future::ready((phases("running") && phases("succeeded")).then_some(()))
        },
    )
    .await;

    // A plugin added to the mounted manifests folder is loaded live: job-snapshot, written in
    // Python, starts with the current state of every job and writes the finished one into the
    // archive on the state volume.
    folders.manifest(
        "job-snapshot",
        "wasm: job-snapshot.wasm\ndelivery: transitions\ntimeout_ms: 10000\nmemory_mb: 64\n\
         instance_reuse: 64\ngrants: {archive: {}, kv: true}\n",
    );
    until_up(&first, START_DEADLINE, "job-snapshot serving", || async {
        let status = get_status(addr).await?;
        status["plugins"]["job-snapshot"]["serving"]
            .is_string()
            .then_some(())
    })
    .await;
    let snapshot = until_up(&first, DEADLINE, "train's snapshot in the archive", || {
        let found = files_under(&folders.path("state/archive"))
            .into_iter()
            .find(|p| {
                let p = p.to_string_lossy();
                p.contains(&uid) && p.ends_with("/succeeded.json")
            });
        std::future::ready(found)
    })
    .await;
    let doc: Value =
        serde_json::from_slice(&fs::read(&snapshot).expect("read the snapshot")).expect("JSON");
    assert_eq!(doc["name"], "train", "{doc:#}");
    assert_eq!(doc["phase"], "succeeded", "{doc:#}");
    // Everything delivered, nothing pending, before the stop.
    until_up(&first, DEADLINE, "every lane idle", || async {
        let status = get_status(addr).await?;
        let plugins = status["plugins"].as_object()?.clone();
        plugins
            .values()
            .all(|p| p["lane"]["pending"] == 0 && p["lane"]["in_flight"] == 0)
            .then_some(())
    })
    .await;

    // SIGTERM: the daemon drains and exits 0 within the grace period.
    let first_stop = stop_with_sigterm(&first).await;
    let before = folders.events();
    assert_unique_ids(&before, "before the restart");
    let table = folders.path("state/state/embedded/mysql-sync.db");
    assert!(
        table.exists(),
        "mysql-sync's embedded database on the state volume: {:?}",
        files_under(&folders.path("state"))
    );
    // Read from a copy: SQLite opening the file in place as root could leave a `-shm` file
    // uid 10001 cannot write, for the next container.
    let copy = folders.path("mysql-sync-copy.db");
    fs::copy(&table, &copy).expect("copy mysql-sync's database");
    let wal = PathBuf::from(format!("{}-wal", table.display()));
    if wal.exists() {
        fs::copy(&wal, folders.path("mysql-sync-copy.db-wal")).expect("copy its write-ahead log");
    }
    let db = sqlx::sqlite::SqlitePool::connect(&format!("sqlite://{}", copy.display()))
        .await
        .expect("open the copy of mysql-sync's database");
    let phase: Option<String> = sqlx::query_scalar("SELECT phase FROM jobs WHERE uid = ?")
        .bind(&uid)
        .fetch_optional(&db)
        .await
        .expect("read the jobs table");
    db.close().await;
    assert_eq!(
        phase.as_deref(),
        Some("succeeded"),
        "mysql-sync's row of train"
    );

    // While no container runs: train is deleted, and another job runs and succeeds.
    train.delete().expect("delete train");
    let mut second = JobDriver::create(&sim, Flavor::Volcano, "ml", "second").expect("job");
    second.running().expect("running");
    second.succeeded().expect("succeeded");
    let second_uid = second.uid().to_string();

    // A new container on the same state volume goes on from its cursors: train's deletion
    // (which only a daemon that knew train can tell) and the new job are delivered, and no
    // event delivered before is delivered again.
    let restarted = folders.run(&format!("{name}-restarted")).await;
    wait_ready(
        &restarted,
        &["event-log", "mysql-sync", "log-archive", "job-snapshot"],
    )
    .await;
    let after = until_up(
        &restarted,
        DEADLINE,
        "train's deletion and second's success",
        || {
            let lines = folders.events();
            let has =
                |u: &str, phase: &str| lines.iter().any(|l| uid_of(l) == u && l["phase"] == phase);
            std::future::ready(
                (has(&uid, "deleted") && has(&second_uid, "succeeded")).then_some(lines),
            )
        },
    )
    .await;
    assert!(after.len() > before.len(), "the restart delivered more");
    assert_eq!(&after[..before.len()], &before[..], "the file only grows");
    assert_unique_ids(&after, "after the restart");
    let second_stop = stop_with_sigterm(&restarted).await;
    // The compile cache is on the state volume too: nothing is compiled again.
    let logs = restarted.logs().await;
    assert!(
        !logs.contains("compiling a component"),
        "the restart compiled a plugin again, its cache on the state volume unused:\n{logs}"
    );
    assert_unique_ids(&folders.events(), "after the second stop");
    eprintln!(
        "image test: ready after {ready_after:?}, SIGTERM to exit {first_stop:?} and \
         {second_stop:?}, {:?} in all",
        started.elapsed()
    );
}
