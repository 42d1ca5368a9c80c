//! The `jobrelay` binary itself: `check` and `plugin run`, as an operator runs them.

use std::path::{Path, PathBuf};
use std::process::Output;

use jobrelay_testkit::SimCluster;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn built(name: &str) -> PathBuf {
    let p = repo().join("target/plugins").join(format!("{name}.wasm"));
    assert!(p.exists(), "{} missing: run plugins/build.sh", p.display());
    p
}

async fn jobrelay(args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_jobrelay"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .await
        .expect("jobrelay runs")
}

/// The example event the plugins' docs use, as a command-line argument.
fn example_event() -> String {
    repo()
        .join("plugins/example-event.json")
        .to_string_lossy()
        .to_string()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn write(path: &Path, content: &str) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, content).expect("write");
}

fn folder(sim: &SimCluster) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    write(
        &root.join("jobrelay.yaml"),
        &format!(
            "plugin_dir: {}\nkinds: [{{name: volcano-job}}, {{name: batch-job}}]\n\
             state: {{path: state/jobrelay.db}}\n",
            repo().join("target/plugins").display()
        ),
    );
    write(&root.join("clusters/alpha.yaml"), &sim.kubeconfig_yaml());
    write(
        &root.join("plugins/log.yaml"),
        "wasm: event-log.wasm\ngrants:\n  filesystem:\n    - {host: out, guest: /data, writable: true}\n",
    );
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_passes_on_a_good_folder() {
    let sim = SimCluster::start("alpha").await.expect("sim");
    let dir = folder(&sim);
    let config = dir.path().to_string_lossy().to_string();
    let out = jobrelay(&["check", "--config", &config]).await;
    let report = text(&out);
    assert!(out.status.success(), "{report}");
    assert!(report.contains("ok    cluster  alpha: v1."), "{report}");
    assert!(
        report.contains("can list volcano-job, batch-job"),
        "{report}"
    );
    assert!(report.contains("ok    plugin   log: version"), "{report}");
    // The state file is not there yet: its folder can be made, and the check makes nothing.
    let state = dir.path().join("state/jobrelay.db");
    assert!(
        report.contains(&format!(
            "ok    state    the SQLite file {}: not there yet, made at first start",
            state.display()
        )),
        "{report}"
    );
    assert!(!state.exists(), "the check made the state file");
    assert!(report.contains("all checks passed"), "{report}");
}

/// A fleet where one cluster does not serve a kind yet (its CRD is not installed there) passes
/// `check`, as `run` treats it: a warning naming the cluster and the kind, exit 0. A kind
/// limited to other clusters is not asked of this one at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_passes_on_a_mixed_fleet_with_a_warning_naming_the_cluster() {
    let alpha = SimCluster::start("alpha").await.expect("sim");
    let beta = SimCluster::start("beta").await.expect("sim");
    assert!(beta.unregister_kind(&jobrelay_testkit::Gvr::VOLCANO_JOB));
    let dir = folder(&alpha);
    let root = dir.path();
    write(&root.join("clusters/beta.yaml"), &beta.kubeconfig_yaml());
    write(
        &root.join("jobrelay.yaml"),
        &format!(
            "plugin_dir: {}\nkinds: [{{name: volcano-job}}, {{name: batch-job}}, \
             {{name: pytorch-job, clusters: [alpha]}}]\nstate: {{path: state/jobrelay.db}}\n",
            repo().join("target/plugins").display()
        ),
    );
    alpha.unregister_kind(&jobrelay_testkit::Gvr::PYTORCH_JOB);
    let config = root.to_string_lossy().to_string();
    let out = jobrelay(&["check", "--config", &config]).await;
    let report = text(&out);
    assert!(out.status.success(), "{report}");
    assert!(
        report.contains("ok    cluster  beta: v1.") && report.contains("can list batch-job"),
        "{report}"
    );
    assert!(
        report.contains("warn  cluster  beta: does not serve volcano-job"),
        "{report}"
    );
    // pytorch-job is watched on alpha only, where it is not served either.
    assert!(
        report.contains("warn  cluster  alpha: does not serve pytorch-job"),
        "{report}"
    );
    assert!(
        !report.contains("beta: does not serve pytorch-job"),
        "{report}"
    );
    assert!(report.contains("all checks passed"), "{report}");
}

/// `check` runs each plugin's load-time `init` as the daemon would; `--no-init` runs no plugin
/// code at all: a config only `init` refuses passes, and what `init` would write is not
/// written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_no_init_runs_no_plugin_code() {
    let sim = SimCluster::start("alpha").await.expect("sim");
    let dir = folder(&sim);
    let root = dir.path();
    // The probe writes /data/init-ran in `init` (its `init_marker` setting), and refuses its
    // config when `fail_init` is set.
    write(
        &root.join("plugins/picky.yaml"),
        "wasm: probe.wasm\nconfig:\n  fail_init: \"true\"\n",
    );
    write(
        &root.join("plugins/marker.yaml"),
        "wasm: probe.wasm\nconfig:\n  init_marker: \"true\"\ngrants:\n  filesystem:\n    - {host: marker, guest: /data, writable: true}\n",
    );
    let config = root.to_string_lossy().to_string();

    let out = jobrelay(&["check", "--config", &config, "--no-init"]).await;
    let report = text(&out);
    assert!(out.status.success(), "{report}");
    for name in ["picky", "marker", "log"] {
        assert!(
            report.contains(&format!("ok    plugin   {name}: version")),
            "{report}"
        );
    }
    assert!(report.contains("init not run"), "{report}");
    let marker_dir = root.join("marker");
    let written = std::fs::read_dir(&marker_dir)
        .map(|d| d.count())
        .unwrap_or_default();
    assert_eq!(
        written, 0,
        "no plugin code ran, so nothing was written: {report}"
    );

    let out = jobrelay(&["check", "--config", &config]).await;
    let report = text(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(report.contains("FAIL  plugin   picky"), "{report}");
    assert!(report.contains("fail_init"), "{report}");
    assert!(
        report.contains("ok    plugin   marker: version"),
        "{report}"
    );
    let written = std::fs::read_dir(&marker_dir)
        .map(|d| d.count())
        .unwrap_or_default();
    assert!(written > 0, "init ran and wrote its marker: {report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_names_every_bad_file_and_exits_1() {
    let sim = SimCluster::start("alpha").await.expect("sim");
    let dir = folder(&sim);
    let root = dir.path();
    write(
        &root.join("clusters/broken.yaml"),
        "apiVersion: v1\nclusters: {{{\n",
    );
    write(&root.join("clusters/Bad Name.yaml"), &sim.kubeconfig_yaml());
    write(
        &root.join("clusters/wrong-token.yaml"),
        &sim.kubeconfig_yaml_with_token("nope"),
    );
    write(
        &root.join("plugins/wrong.yaml"),
        "wasm: not-a-plugin.wasm\n",
    );
    write(
        &root.join("plugins/typo.yaml"),
        "wasm: event-log.wasm\nconcurency: 3\n",
    );
    let config = root.to_string_lossy().to_string();
    let out = jobrelay(&["check", "--config", &config, "--cluster-timeout", "20"]).await;
    let report = text(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(
        report.contains("ok    cluster  alpha"),
        "good files still pass: {report}"
    );
    for needle in [
        "broken.yaml: cannot parse",
        "Bad Name.yaml: invalid: cluster name `Bad Name`",
        "typo.yaml: cannot parse",
        "concurency",
        "FAIL  plugin   wrong",
        "FAIL  cluster  wrong-token",
        "5 problem(s) found",
    ] {
        assert!(
            report.contains(needle),
            "report lacks {needle:?}:\n{report}"
        );
    }
    assert!(
        !report.contains("nope"),
        "credentials never appear in the report:\n{report}"
    );
}

/// Every problem the check finds is exit code 1, as documented, including a connection whose
/// secret cannot be resolved (once exit code 2, as if the command itself had failed), and a
/// label selector no API server would accept.
#[tokio::test]
async fn check_exits_1_for_every_problem_it_finds() {
    for (main, needle) in [
        (
            "sql: {connections: {main: {url: \"env:JOBRELAY_TEST_NO_SUCH_VARIABLE\"}}}\n",
            "JOBRELAY_TEST_NO_SUCH_VARIABLE",
        ),
        (
            "watch: {label_selector: \"team in ml\"}\n",
            "watch.label_selector",
        ),
        (
            "plugin_defaults: {concurrency: 1000000000000}\n",
            "plugin_defaults.concurrency",
        ),
        ("# nothing but a comment\n", "empty"),
        // Replicas sharing the work on a SQLite file each would deliver everything again
        // at a fail-over: refused, naming the settings.
        (
            "coordination: {mode: leader, kubeconfig: home.yaml}\n",
            "state.url",
        ),
        (
            "coordination: {mode: sharded, kubeconfig: home.yaml}\nstate: {path: s.db}\n",
            "coordination.mode: `sharded`",
        ),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        write(&dir.path().join("jobrelay.yaml"), main);
        let config = dir.path().to_string_lossy().to_string();
        let out = jobrelay(&["check", "--config", &config]).await;
        let report = text(&out);
        assert_eq!(out.status.code(), Some(1), "{main}: {report}");
        assert!(
            report.contains("jobrelay.yaml") && report.contains(needle),
            "{main}: {report}"
        );
    }
}

#[tokio::test]
async fn check_refuses_a_broken_main_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        &dir.path().join("jobrelay.yaml"),
        "kinds: [{name: tf-job}]\n",
    );
    let config = dir.path().to_string_lossy().to_string();
    let out = jobrelay(&["check", "--config", &config]).await;
    let report = text(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(
        report.contains("jobrelay.yaml") && report.contains("tf-job"),
        "{report}"
    );
}

/// A cluster whose API server is not listening fails the check with the refused connection
/// itself, not only kube's kind of failure (`ServiceError: client error (Connect)`), and the
/// token stays out of the report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_says_why_a_cluster_cannot_be_reached() {
    let sim = SimCluster::start("alpha").await.expect("sim");
    let dir = folder(&sim);
    // A port nobody listens on: bound, then let go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    write(
        &dir.path().join("clusters/dead.yaml"),
        &jobrelay_testkit::kubeconfig::render(&jobrelay_testkit::kubeconfig::KubeconfigSpec {
            name: "dead",
            server: &format!("http://127.0.0.1:{port}"),
            token: "s3cret-token",
            namespace: None,
        }),
    );
    let config = dir.path().to_string_lossy().to_string();
    let out = jobrelay(&["check", "--config", &config, "--cluster-timeout", "20"]).await;
    let report = text(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    let line = report
        .lines()
        .find(|l| l.starts_with("FAIL  cluster  dead"))
        .unwrap_or_else(|| panic!("no line for the dead cluster:\n{report}"));
    assert!(line.contains("dead.yaml"), "{line}");
    assert!(
        line.contains(&format!("http://127.0.0.1:{port}")),
        "the server is named: {line}"
    );
    assert!(
        line.to_lowercase().contains("connection refused"),
        "the cause beneath kube's error is said: {line}"
    );
    assert!(report.contains("ok    cluster  alpha"), "{report}");
    assert!(!report.contains("s3cret-token"), "{report}");
}

#[tokio::test]
async fn plugin_run_calls_a_plugin_once_without_a_cluster() {
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("log.yaml");
    write(
        &manifest,
        "wasm: ignored.wasm\ngrants:\n  filesystem:\n    - {host: out, guest: /data, writable: true}\nconfig:\n  file: one.jsonl\n",
    );
    let wasm = built("event-log").to_string_lossy().to_string();
    let event = example_event();
    let m = manifest.to_string_lossy().to_string();
    let out = jobrelay(&["plugin", "run", &wasm, "--event", &event, "--manifest", &m]).await;
    let report = text(&out);
    assert!(out.status.success(), "{report}");
    assert!(report.starts_with("ok: plugin"), "{report}");
    let written = std::fs::read_to_string(dir.path().join("out/one.jsonl")).expect("line written");
    let line: serde_json::Value = serde_json::from_str(written.trim()).expect("one JSON line");
    assert_eq!(line["phase"], "succeeded");
    assert_eq!(
        line["id"],
        "example/0b0e8d6c-5f41-4d53-9d1a-1f1b0c0a2a11/48213"
    );

    // A plugin that traps: exit 1 and the reason.
    let mut event_json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&event).expect("event")).expect("json");
    event_json["labels"]["jobrelay.test/behave"] = "trap".into();
    let trap_event = dir.path().join("trap.json");
    std::fs::write(&trap_event, event_json.to_string()).expect("write");
    let probe = built("probe").to_string_lossy().to_string();
    let t = trap_event.to_string_lossy().to_string();
    let out = jobrelay(&["plugin", "run", &probe, "--event", &t]).await;
    let report = text(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(report.starts_with("trap: plugin"), "{report}");

    // A config the plugin's load-time init refuses: the plugin does not load, exit 2 with
    // the init's reason (naming the key, through the guest crate's typed config).
    let refused = dir.path().join("refused.yaml");
    write(
        &refused,
        "wasm: ignored.wasm\nconfig:\n  fiel: typo.jsonl\n",
    );
    let r = refused.to_string_lossy().to_string();
    let out = jobrelay(&["plugin", "run", &wasm, "--event", &event, "--manifest", &r]).await;
    let report = text(&out);
    assert_eq!(out.status.code(), Some(2), "{report}");
    assert!(
        report.contains("init refused the configuration")
            && report.contains("unknown field `fiel`"),
        "{report}"
    );

    // A secret reference whose variable is not set: said as that, naming the manifest's key
    // and the variable, with what to do — not as a refusal by init, which never ran.
    let secret = dir.path().join("secret.yaml");
    write(
        &secret,
        "wasm: ignored.wasm\nconfig:\n  file: env:JOBRELAY_TEST_UNSET_SECRET_VAR\n",
    );
    let s = secret.to_string_lossy().to_string();
    let out = jobrelay(&["plugin", "run", &wasm, "--event", &event, "--manifest", &s]).await;
    let report = text(&out);
    assert_eq!(out.status.code(), Some(2), "{report}");
    assert!(
        report.contains("`config.file`")
            && report.contains("`JOBRELAY_TEST_UNSET_SECRET_VAR` is not set")
            && report.contains("set the variable in jobrelay's environment")
            && !report.contains("init refused"),
        "{report}"
    );

    // A broken event file: exit 2, naming the file.
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"id\": 3}").expect("write");
    let b = bad.to_string_lossy().to_string();
    let out = jobrelay(&["plugin", "run", &probe, "--event", &b]).await;
    let report = text(&out);
    assert_eq!(out.status.code(), Some(2), "{report}");
    assert!(report.contains("bad.json"), "{report}");
}

#[tokio::test]
async fn json_logs_name_the_refused_file_and_a_missing_folder_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(&dir.path().join("clusters/broken.yaml"), "clusters: [\n");
    let config = dir.path().to_string_lossy().to_string();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_jobrelay"))
        .args(["--log-format", "json", "check", "--config", &config])
        .env("RUST_LOG", "info")
        .output()
        .await
        .expect("jobrelay runs");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let refused: Vec<serde_json::Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .filter(|v: &serde_json::Value| v["level"] == "ERROR")
        .collect();
    assert_eq!(refused.len(), 1, "{stderr}");
    assert!(
        refused[0]["file"]
            .as_str()
            .is_some_and(|f| f.ends_with("clusters/broken.yaml")),
        "{stderr}"
    );
    assert!(
        refused[0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("parse")),
        "{stderr}"
    );

    let missing = dir.path().join("nowhere").to_string_lossy().to_string();
    let out = jobrelay(&["run", "--config", &missing]).await;
    let report = text(&out);
    assert_eq!(out.status.code(), Some(2), "{report}");
    assert!(
        report.contains("nowhere") && report.contains("does not exist"),
        "{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_example_config_checks_clean() {
    // The example folder as shipped (no cluster files), with its plugins: event-log,
    // mysql-sync on the embedded SQLite connection, and log-archive.
    let config = repo().join("config");
    let out = jobrelay(&["check", "--config", &config.to_string_lossy()]).await;
    let report = text(&out);
    assert!(out.status.success(), "{report}");
    for plugin in ["event-log", "mysql-sync", "log-archive"] {
        assert!(
            report.contains(&format!("ok    plugin   {plugin}: version")),
            "{plugin}: {report}"
        );
    }
}

/// `jobrelay demo` playing `jobs` jobs in `folder`, on a free port, with the built plugins.
#[cfg(feature = "demo")]
async fn demo(folder: &Path, jobs: usize) -> Output {
    jobrelay(&[
        "demo",
        "--jobs",
        &jobs.to_string(),
        "--interval-ms",
        "100",
        "--listen",
        "127.0.0.1:0",
        "--dir",
        &folder.to_string_lossy(),
        "--plugins",
        &repo().join("target/plugins").to_string_lossy(),
    ])
    .await
}

#[cfg(feature = "demo")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_plays_jobs_through_the_three_plugins_and_sums_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let folder = dir.path().join("demo");
    let out = demo(&folder, 4).await;
    let report = text(&out);
    assert!(out.status.success(), "{report}");
    assert!(report.contains("status:   http://127.0.0.1:"), "{report}");
    assert!(
        report.contains("(JSON: /status, metrics: /metrics)"),
        "{report}"
    );
    assert!(report.contains("mysql-sync (SQLite): 4 jobs"), "{report}");
    assert!(report.contains("log-archive: 4 job archives"), "{report}");
    assert!(report.contains("feishu card (signed):"), "{report}");
    // The one Volcano job of four is left to jobrelay's clean-up, which deletes it after its
    // archive and row.
    assert!(report.contains("cleaned up ml/volcano-1"), "{report}");
    assert!(
        report.contains("clean-up: 1 finished jobs deleted"),
        "{report}"
    );
    assert!(folder.join("state/embedded/mysql-sync.db").exists());

    // A folder an earlier demo made is emptied and used again.
    let again = demo(&folder, 1).await;
    let report = text(&again);
    assert!(again.status.success(), "{report}");
    assert!(report.contains("mysql-sync (SQLite): 1 jobs"), "{report}");
}

/// `demo --dir` empties only a folder an earlier demo made: pointed at a folder with other
/// files, it refuses, names the folder and leaves the files alone.
#[cfg(feature = "demo")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_refuses_to_empty_a_folder_it_did_not_make() {
    let dir = tempfile::tempdir().expect("tempdir");
    let precious = dir.path().join("thesis.tex");
    std::fs::write(&precious, "years of work").expect("write");
    let out = demo(dir.path(), 1).await;
    let report = text(&out);
    assert!(!out.status.success(), "{report}");
    assert!(
        report.contains(&dir.path().display().to_string())
            && report.contains("was not made by `jobrelay demo`"),
        "{report}"
    );
    assert_eq!(
        std::fs::read_to_string(&precious).expect("still there"),
        "years of work"
    );
}

/// Under `--log-format json` a fatal error is a JSON line like every other, naming the cause;
/// the human format keeps the plain `error:` line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fatal_error_follows_the_log_format() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("no-such-folder");
    let missing = missing.to_string_lossy();
    let out = jobrelay(&["--log-format", "json", "run", "--config", &missing]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let last = lines.last().expect("a line");
    assert_eq!(last["level"], "ERROR", "{stderr}");
    assert_eq!(last["message"], "fatal", "{stderr}");
    assert!(
        last["error"]
            .as_str()
            .is_some_and(|e| e.contains("no-such-folder")),
        "{stderr}"
    );

    let out = jobrelay(&["run", "--config", &missing]).await;
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("error: ") && stderr.contains("no-such-folder"),
        "{stderr}"
    );
}

/// `completions` prints a script for the shell that knows the commands.
#[tokio::test]
async fn completions_know_the_commands() {
    let out = jobrelay(&["completions", "bash"]).await;
    assert!(out.status.success(), "{}", text(&out));
    let script = String::from_utf8_lossy(&out.stdout);
    for word in ["dead-letters", "finalizers", "check", "--config"] {
        assert!(
            script.contains(word),
            "{word} missing from the bash completions"
        );
    }
    let out = jobrelay(&["completions", "tcsh"]).await;
    assert_eq!(out.status.code(), Some(2), "an unknown shell is refused");
}

/// `plugin run` takes several events — JSON lines on standard input, or a folder — calls the
/// plugin once per event in order, finds `NAME.yaml` beside `NAME.wasm` when no manifest is
/// given, prints one JSON object per call with `--json`, and exits 1 if any call failed.
#[tokio::test]
async fn plugin_run_takes_many_events_from_stdin_or_a_folder_and_reports_json() {
    use tokio::io::AsyncWriteExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    std::fs::copy(built("event-log"), root.join("log.wasm")).expect("copy");
    write(
        &root.join("log.yaml"),
        "grants:\n  filesystem:\n    - {host: out, guest: /data, writable: true}\nconfig:\n  file: run.jsonl\n",
    );
    let example: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("plugins/example-event.json")).expect("event"),
    )
    .expect("json");
    let version = |rv: &str, behave: Option<&str>| {
        let mut e = example.clone();
        e["resource_version"] = rv.into();
        e["id"] = format!("example/u/{rv}").into();
        if let Some(b) = behave {
            e["labels"]["jobrelay.test/behave"] = b.into();
        }
        e.to_string()
    };

    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_jobrelay"))
        .args(["plugin", "run"])
        .arg(root.join("log.wasm"))
        .args(["--event", "-", "--json"])
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("jobrelay runs");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(format!("{}\n{}\n", version("1", None), version("2", None)).as_bytes())
        .await
        .expect("events");
    drop(stdin);
    let out = child.wait_with_output().await.expect("ends");
    let report = text(&out);
    assert!(out.status.success(), "{report}");
    let calls: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line per call"))
        .collect();
    assert_eq!(calls.len(), 2, "{report}");
    assert_eq!(calls[0]["event"], "example/u/1");
    assert_eq!(calls[1]["event"], "example/u/2");
    assert!(
        calls
            .iter()
            .all(|c| c["status"] == "ok" && c["plugin"] == "log"),
        "{report}"
    );
    assert!(report.contains("found beside the component"), "{report}");
    let written = std::fs::read_to_string(root.join("out/run.jsonl")).expect("written");
    assert_eq!(
        written.lines().count(),
        2,
        "the manifest beside it granted /data"
    );

    // A folder, in name order, with a call that traps: both run, exit 1.
    let events = root.join("events");
    write(&events.join("a.json"), &version("3", None));
    write(&events.join("b.json"), &version("4", Some("trap")));
    let probe = root.join("probe.wasm");
    std::fs::copy(built("probe"), &probe).expect("copy");
    write(
        &root.join("probe.yaml"),
        "grants:\n  filesystem:\n    - {host: probe-out, guest: /data, writable: true}\n",
    );
    let out = jobrelay(&[
        "plugin",
        "run",
        &probe.to_string_lossy(),
        "--event",
        &events.to_string_lossy(),
    ])
    .await;
    let report = text(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    let lines: Vec<&str> = report
        .lines()
        .filter(|l| l.contains(": plugin probe on event"))
        .collect();
    assert_eq!(lines.len(), 2, "{report}");
    assert!(
        lines[0].starts_with("ok: plugin probe on event example/u/3"),
        "{report}"
    );
    assert!(
        lines[1].starts_with("trap: plugin probe on event example/u/4"),
        "{report}"
    );
}

/// `plugin sample-event` prints an event as the daemon would make it, which `plugin run` takes
/// from standard input as it is; a kind or phase that does not exist is refused by name.
#[tokio::test]
async fn a_sample_event_feeds_plugin_run() {
    use tokio::io::AsyncWriteExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let out = jobrelay(&[
        "plugin",
        "sample-event",
        "--kind",
        "volcano-job",
        "--phase",
        "failed",
        "--previous",
        "running",
    ])
    .await;
    assert!(out.status.success(), "{}", text(&out));
    let event: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one event");
    assert_eq!(event["phase"], "failed");
    assert_eq!(event["previous_phase"], "running");
    assert_eq!(event["api_version"], "batch.volcano.sh/v1alpha1");

    let manifest = dir.path().join("log.yaml");
    write(
        &manifest,
        "grants:\n  filesystem:\n    - {host: out, guest: /data, writable: true}\nconfig:\n  file: s.jsonl\n",
    );
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_jobrelay"))
        .args(["plugin", "run"])
        .arg(built("event-log"))
        .args(["--event", "-", "--manifest"])
        .arg(&manifest)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("jobrelay runs");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(&out.stdout).await.expect("event");
    drop(stdin);
    let run = child.wait_with_output().await.expect("ends");
    assert!(run.status.success(), "{}", text(&run));
    let line = std::fs::read_to_string(dir.path().join("out/s.jsonl")).expect("written");
    let line: serde_json::Value = serde_json::from_str(line.trim()).expect("json");
    assert_eq!(line["phase"], "failed");

    for (flag, value, named) in [
        ("--kind", "spark-job", "volcano-job"),
        ("--phase", "exploded", "succeeded"),
    ] {
        let mut args = vec![
            "plugin",
            "sample-event",
            "--kind",
            "batch-job",
            "--phase",
            "running",
        ];
        let at = args.iter().position(|a| *a == flag).expect("flag") + 1;
        args[at] = value;
        let out = jobrelay(&args).await;
        let report = text(&out);
        assert_eq!(out.status.code(), Some(2), "{report}");
        assert!(report.contains(value) && report.contains(named), "{report}");
    }
}

/// `plugin push` prints a pinned reference; `check` pulls what a manifest's `oci://` names and
/// loads it, and fails naming the plugin when the registry has no such digest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_prints_a_reference_that_check_pulls_and_a_wrong_digest_fails() {
    let registry = jobrelay_testkit::LocalRegistry::start();
    let target = format!("oci://{}/plugins/event-log:v1", registry.address);
    let wasm = built("event-log");
    let out = jobrelay(&[
        "plugin",
        "push",
        wasm.to_str().expect("utf-8 path"),
        &target,
        "--plain-http",
    ])
    .await;
    assert!(out.status.success(), "{}", text(&out));
    let pinned = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(pinned.starts_with(&format!("{target}@sha256:")), "{pinned}");

    let sim = SimCluster::start("alpha").await.expect("sim");
    let dir = folder(&sim);
    let root = dir.path();
    let main = std::fs::read_to_string(root.join("jobrelay.yaml")).expect("main file");
    write(
        &root.join("jobrelay.yaml"),
        &format!("{main}\noci: {{plain_http: [\"{}\"]}}\n", registry.address),
    );
    write(
        &root.join("plugins/pulled.yaml"),
        &format!(
            "wasm: {pinned}\ngrants:\n  filesystem:\n    - {{host: out, guest: /data, writable: true}}\n"
        ),
    );
    let config = root.to_string_lossy().to_string();
    let out = jobrelay(&["check", "--config", &config]).await;
    let report = text(&out);
    assert!(out.status.success(), "{report}");
    assert!(
        report.contains("ok    plugin   pulled: version"),
        "{report}"
    );

    let digest_at = pinned.len() - 1;
    let flipped = if pinned.ends_with('0') { '1' } else { '0' };
    let wrong = format!("{}{flipped}", &pinned[..digest_at]);
    write(
        &root.join("plugins/pulled.yaml"),
        &format!("wasm: {wrong}\n"),
    );
    let out = jobrelay(&["check", "--config", &config]).await;
    let report = text(&out);
    assert!(!out.status.success(), "{report}");
    assert!(
        report.contains("FAIL  plugin   pulled")
            && report.contains("no manifest with the pinned digest"),
        "{report}"
    );
}

/// `dead-letters list | head -1` ends cleanly (the reader went away: not an error, no panic),
/// and `dead-letters drop` of an id that does not exist says so and exits 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_in_a_pipeline_and_ids_that_do_not_exist() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path();
    write(
        &config.join("jobrelay.yaml"),
        "state: {path: state/jobrelay.db}\n",
    );
    store_dead_letters(&config.join("state/jobrelay.db"), 3000).await;
    let config_arg = config.display().to_string();

    // A reader that takes one line and goes: the rest of the table meets a closed pipe.
    let mut list = std::process::Command::new(env!("CARGO_BIN_EXE_jobrelay"))
        .args(["dead-letters", "list", "--config", &config_arg])
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("jobrelay runs");
    let mut first = String::new();
    {
        use std::io::BufRead as _;
        let stdout = list.stdout.take().expect("stdout");
        std::io::BufReader::new(stdout)
            .read_line(&mut first)
            .expect("a line");
    }
    let out = list.wait_with_output().expect("it ends");
    assert!(first.starts_with("SEQ"), "{first}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");

    let drop = jobrelay(&["dead-letters", "drop", "--config", &config_arg, "987654"]).await;
    assert_eq!(drop.status.code(), Some(1), "{}", text(&drop));
    assert!(
        text(&drop).contains("1 of the 1 ids do not exist"),
        "{}",
        text(&drop)
    );
}

/// A config folder with nothing but a main file.
fn main_only(main: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    write(&dir.path().join("jobrelay.yaml"), main);
    dir
}

/// `check` tries a MySQL state store as the daemon opens it (tables made if missing) and says
/// how many dead letters it holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_tries_a_reachable_mysql_state_store() {
    let url = crate::common::mysql_url();
    let prefix = crate::common::unique_prefix("check");
    let dir = main_only(&format!(
        "state: {{url: \"{url}\", table_prefix: {prefix}}}\n"
    ));
    let out = jobrelay(&["check", "--config", &dir.path().to_string_lossy()]).await;
    let report = text(&out);
    let dropped = crate::common::store::drop_tables(&url, &prefix).await;
    assert!(out.status.success(), "{report}");
    assert!(
        report.contains("ok    state    the MySQL database")
            && report.contains(&format!("(tables {prefix}*) (0 dead letters stored)")),
        "{report}"
    );
    assert!(report.contains("all checks passed"), "{report}");
    dropped.expect("the test's tables are dropped");
}

/// A state store that cannot be reached is a problem of the check (exit 1) that names the
/// store, and never shows the password of its URL, written out or behind a secret reference;
/// a reference to a variable that is not set names the variable.
#[tokio::test]
async fn check_fails_on_a_state_store_it_cannot_open() {
    let secret_file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(
        secret_file.path(),
        "mysql://relay:file-s3cret-pw@127.0.0.1:9/jobrelay\n",
    )
    .expect("write the secret");
    for (state, shown) in [
        (
            "{url: \"mysql://relay:s3cret-pw@127.0.0.1:9/jobrelay\"}".to_string(),
            "FAIL  state    the MySQL database mysql://relay@127.0.0.1:9/jobrelay (tables jobrelay_*): "
                .to_string(),
        ),
        (
            format!("{{url: \"file:{}\"}}", secret_file.path().display()),
            format!(
                "FAIL  state    the MySQL database file:{} (tables jobrelay_*): ",
                secret_file.path().display()
            ),
        ),
        (
            "{url: \"env:JOBRELAY_TEST_NO_SUCH_STATE_URL\"}".to_string(),
            "FAIL  state    the MySQL database env:JOBRELAY_TEST_NO_SUCH_STATE_URL (tables \
             jobrelay_*): "
                .to_string(),
        ),
    ] {
        let dir = main_only(&format!("state: {state}\n"));
        let out = jobrelay(&[
            "check",
            "--config",
            &dir.path().to_string_lossy(),
            "--cluster-timeout",
            "20",
        ])
        .await;
        let report = text(&out);
        assert_eq!(out.status.code(), Some(1), "{state}: {report}");
        assert!(report.contains(&shown), "{state}: {report}");
        assert!(report.contains("1 problem(s) found"), "{state}: {report}");
        assert!(
            !report.contains("s3cret-pw"),
            "{state}: a password is shown: {report}"
        );
    }
    // What is wrong is said: the closed port, the variable that is not set.
    let dir = main_only("state: {url: \"env:JOBRELAY_TEST_NO_SUCH_STATE_URL\"}\n");
    let report = text(&jobrelay(&["check", "--config", &dir.path().to_string_lossy()]).await);
    let line = report
        .lines()
        .find(|l| l.starts_with("FAIL  state"))
        .unwrap_or_default();
    assert!(
        line.matches("JOBRELAY_TEST_NO_SUCH_STATE_URL").count() >= 2,
        "the error itself names the variable: {report}"
    );
    let dir = main_only("state: {url: \"mysql://relay:s3cret-pw@127.0.0.1:9/jobrelay\"}\n");
    let report = text(&jobrelay(&["check", "--config", &dir.path().to_string_lossy()]).await);
    assert!(
        report.to_lowercase().contains("refused"),
        "the connection's error is said: {report}"
    );
}

/// An SQLite state file that exists is opened, beside the running daemon that uses it, and its
/// dead letters counted; the daemon and the file are none the worse. A state file whose folder
/// cannot be made fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_counts_the_dead_letters_of_an_sqlite_state_file() {
    let dir = main_only("state: {path: state/jobrelay.db}\n");
    let config = dir.path();
    let path = config.join("state/jobrelay.db");
    store_dead_letters(&path, 2).await;

    let daemon = jobrelay::daemon::Daemon::start(config)
        .await
        .expect("the daemon starts on the file");
    let out = jobrelay(&["check", "--config", &config.to_string_lossy()]).await;
    let report = text(&out);
    assert!(out.status.success(), "{report}");
    assert!(
        report.contains(&format!(
            "ok    state    the SQLite file {} (2 dead letters stored)",
            path.display()
        )),
        "{report}"
    );
    // The daemon kept its file: stopped, it leaves it answering, with its letters.
    daemon.shutdown(std::time::Duration::from_secs(5)).await;
    let store = jobrelay_state::open_store(&jobrelay_state::StateBackend::Sqlite(path.clone()))
        .await
        .expect("reopens");
    store.check().await.expect("the file answers");
    let counts = store.dead_letter_counts().await.expect("counts");
    assert_eq!(counts.get("notify"), Some(&2));
    store.close().await;

    // A file in the way of the state file's folder.
    let dir = main_only("state: {path: in-the-way/state.db}\n");
    write(&dir.path().join("in-the-way"), "a file, not a folder\n");
    let out = jobrelay(&["check", "--config", &dir.path().to_string_lossy()]).await;
    let report = text(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(
        report.contains(&format!(
            "FAIL  state    the SQLite file {}: {} is not a folder",
            dir.path().join("in-the-way/state.db").display(),
            dir.path().join("in-the-way").display()
        )),
        "{report}"
    );
}

/// `n` dead letters of the plugin `notify` in the SQLite state file at `path`.
async fn store_dead_letters(path: &std::path::Path, n: usize) {
    let backend = jobrelay_state::StateBackend::Sqlite(path.to_path_buf());
    let store = jobrelay_state::open_store(&backend).await.expect("store");
    for n in 0..n {
        let event = crate::common::event(
            &format!("u-{n}"),
            "1",
            jobrelay_contract::event::Phase::Failed,
            None,
            "2026-11-26T10:00:00Z",
        );
        store
            .add_dead_letter("notify", &event, "webhook said 500", 3)
            .await
            .expect("a dead letter");
    }
    store.close().await;
}

/// `plugin run` says that it compiles before it does (a Python component takes seconds, which
/// passed in silence), and how long it took; a second run of the same component reads the
/// compile cache and says nothing of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_run_says_it_is_compiling_once() {
    let cache = tempfile::tempdir().expect("tempdir");
    let wasm = built("probe-debug").to_string_lossy().to_string();
    let event = example_event();
    let run = || async {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_jobrelay"))
            .args(["plugin", "run", &wasm, "--event", &event])
            .env_remove("RUST_LOG")
            .env("XDG_CACHE_HOME", cache.path())
            .output()
            .await
            .expect("jobrelay runs");
        text(&out)
    };
    let first = run().await;
    let compiling = first
        .find("compiling a component")
        .unwrap_or_else(|| panic!("not said: {first}"));
    let compiled = first
        .find(" compiled ")
        .unwrap_or_else(|| panic!("not said: {first}"));
    assert!(compiling < compiled, "{first}");
    assert!(first.contains("megabytes="), "{first}");
    let second = run().await;
    assert!(!second.contains("compiling a component"), "{second}");
}

/// A case's own `manifest.yaml` does not name the plugin "manifest": the component does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_yaml_leaves_the_plugin_named_by_its_component() {
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("case/manifest.yaml");
    write(
        &manifest,
        "wasm: ignored.wasm\ngrants:\n  filesystem:\n    - {host: out, guest: /data, writable: true}\n",
    );
    let wasm = built("event-log").to_string_lossy().to_string();
    let event = example_event();
    let m = manifest.to_string_lossy().to_string();
    let out = jobrelay(&["plugin", "run", &wasm, "--event", &event, "--manifest", &m]).await;
    let report = text(&out);
    assert!(report.contains("plugin event-log on event"), "{report}");
    assert!(!report.contains("plugin manifest"), "{report}");
}

/// `plugin bench`: one line per mode (a fresh instance per call, instances reused), with
/// calls per second, µs per call and the linear memory one call used; a plugin whose calls
/// fail says how many and why the first did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_bench_measures_both_modes_and_says_why_calls_fail() {
    let event = example_event();
    let noop = built("noop").to_string_lossy().to_string();
    let out = jobrelay(&["plugin", "bench", &noop, "--event", &event, "--calls", "50"]).await;
    let report = text(&out);
    assert_eq!(out.status.code(), Some(0), "{report}");
    let lines: Vec<&str> = report.lines().collect();
    assert_eq!(lines.len(), 2, "{report}");
    assert!(
        lines[0].starts_with("fresh instance per call: 50 calls in ")
            && lines[1].starts_with("instances reused (256): 50 calls in "),
        "{report}"
    );
    for line in &lines {
        assert!(line.contains(" calls/s; per call mean "), "{line}");
        assert!(
            line.contains("; 0 failed; linear memory high water "),
            "{line}"
        );
        let megabytes: f64 = line
            .rsplit(' ')
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("a figure: {line}"));
        assert!(megabytes > 0.0, "{line}");
    }

    // event-log without its filesystem grant fails every call.
    let log = built("event-log").to_string_lossy().to_string();
    let out = jobrelay(&["plugin", "bench", &log, "--event", &event, "--calls", "20"]).await;
    let report = text(&out);
    assert!(report.contains("; 20 failed;"), "{report}");
    assert!(
        report.contains("the first failed call: plugin asked to retry: cannot append"),
        "{report}"
    );
}

/// `demo --config DIR` runs a user's own folder on simulated clusters, one per file of its
/// clusters/ folder under the same name: its plugin gets the jobs of both, its files land in
/// the demo folder, and the user's folder is left as it was.
#[cfg(feature = "demo")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_runs_a_users_config_folder_on_simulated_clusters() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = dir.path().join("mine");
    write(
        &source.join("jobrelay.yaml"),
        &format!(
            "plugin_dir: {}\nkinds: [{{name: volcano-job}}, {{name: batch-job}}, {{name: \
             pytorch-job}}, {{name: mpi-job}}]\nstate: {{url: \"env:NOT_USED_BY_THE_DEMO\"}}\n",
            repo().join("target/plugins").display()
        ),
    );
    write(
        &source.join("plugins/log.yaml"),
        "wasm: event-log.wasm\ngrants:\n  filesystem:\n    - {host: out, guest: /data, \
         writable: true}\nconfig:\n  file: events.jsonl\n",
    );
    write(
        &source.join("clusters/east.yaml"),
        "not read: the demo simulates it\n",
    );
    // A kubeconfig is any visible file of clusters/, named by its stem, as the daemon reads
    // the folder.
    write(&source.join("clusters/west"), "not read either\n");
    // What would touch the user's world: a plugin posting to a real service, one writing a
    // folder outside the demo, the archive and an SQL connection of the user's. None of it
    // is reached: the plugins are not run, the archive and the connection are the demo's.
    let outside = dir.path().join("real-archive");
    let hook = crate::common::receiver::Receiver::start().await;
    write(
        &source.join("plugins/hook.yaml"),
        &format!(
            "wasm: webhook-notify.wasm\ngrants:\n  http:\n    allow: [\"{}\"]\nconfig:\n  \
             url: \"{}/hook\"\n",
            hook.url, hook.url
        ),
    );
    write(
        &source.join("plugins/away.yaml"),
        &format!(
            "wasm: event-log.wasm\ngrants:\n  filesystem:\n    - {{host: {}, guest: /data, \
             writable: true}}\nconfig:\n  file: events.jsonl\n",
            outside.join("log").display()
        ),
    );
    let main_text = std::fs::read_to_string(source.join("jobrelay.yaml")).expect("main");
    write(
        &source.join("jobrelay.yaml"),
        &format!(
            "{main_text}archive: {{local: {}}}\nsql:\n  connections:\n    warehouse: {{url: \
             \"mysql://nobody:secret@127.0.0.1:1/real\"}}\n",
            outside.display()
        ),
    );
    let before: Vec<_> = std::fs::read_dir(&source)
        .expect("list")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    let folder = dir.path().join("demo");
    let out = jobrelay(&[
        "demo",
        "--config",
        &source.to_string_lossy(),
        "--jobs",
        "2",
        "--interval-ms",
        "100",
        "--listen",
        "127.0.0.1:0",
        "--dir",
        &folder.to_string_lossy(),
    ])
    .await;
    let report = text(&out);
    assert!(out.status.success(), "{report}");
    assert!(report.contains("cluster:  east, simulated"), "{report}");
    assert!(report.contains("cluster:  west, simulated"), "{report}");
    assert!(report.contains("plugin log: "), "{report}");
    let events = std::fs::read_to_string(folder.join("out/events.jsonl")).expect("events");
    for cluster in ["east", "west"] {
        assert!(
            events.contains(&format!("\"cluster\":\"{cluster}\"")),
            "no event of {cluster}: {events}"
        );
    }
    let after: Vec<_> = std::fs::read_dir(&source)
        .expect("list")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(before, after, "the user's folder is untouched");
    for plugin in ["hook", "away"] {
        assert!(
            report.contains(&format!("not run:  plugin {plugin}: ")),
            "{plugin} left out and said: {report}"
        );
    }
    assert!(!outside.exists(), "nothing written outside the demo folder");
    assert!(
        hook.requests().is_empty(),
        "nothing posted to the real service"
    );
}

/// `check --no-init` refuses a manifest whose config breaks the plugin's declared schema
/// (`event-log.schema.json` beside the component), naming each key, without running the
/// plugin; a config that keeps to it passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_no_init_refuses_a_config_that_breaks_the_plugins_schema() {
    let sim = SimCluster::start("alpha").await.expect("simulator");
    let dir = folder(&sim);
    let manifest = dir.path().join("plugins/log.yaml");
    write(
        &manifest,
        "wasm: event-log.wasm\ngrants:\n  filesystem:\n    - {host: out, guest: /data, writable: true}\n\
         config:\n  file: nested/events.jsonl\n  fiel: typo.jsonl\n",
    );
    let config = dir.path().to_string_lossy().to_string();
    let out = jobrelay(&["check", "--config", &config, "--no-init"]).await;
    let report = text(&out);
    assert!(!out.status.success(), "{report}");
    assert!(
        report.contains("FAIL  plugin   log (") && report.contains("event-log.schema.json"),
        "{report}"
    );
    assert!(report.contains("config.file: "), "{report}");
    // Told in the schema's own description, not as its raw regex.
    assert!(
        report.contains("a plain name without `/`") && !report.contains("^[^/]+$"),
        "{report}"
    );
    assert!(
        report.contains("config: ") && report.contains("fiel"),
        "{report}"
    );

    write(
        &manifest,
        "wasm: event-log.wasm\ngrants:\n  filesystem:\n    - {host: out, guest: /data, writable: true}\n\
         config:\n  file: events.jsonl\n",
    );
    let out = jobrelay(&["check", "--config", &config, "--no-init"]).await;
    let report = text(&out);
    assert!(report.contains("ok    plugin   log: version"), "{report}");
}

/// The manifest each shipped sink's README gives to copy is one `check` passes as written, its
/// `init` included, with its `env:` references set as a deployment would set them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sinks_readme_manifest_checks_as_written() {
    let sim = SimCluster::start("alpha").await.expect("sim");
    let env = [
        (
            "DINGTALK_WEBHOOK",
            "https://oapi.dingtalk.com/robot/send?access_token=0123456789abcdef",
        ),
        ("DINGTALK_SECRET", "SEC0123456789abcdef"),
        (
            "WECOM_WEBHOOK",
            "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=0123-4567-89ab",
        ),
        (
            "SLACK_WEBHOOK",
            "https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXX",
        ),
        ("WEBHOOK_URL", "https://hooks.example.com/jobs"),
        ("WEBHOOK_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
    ];
    for plugin in [
        "dingtalk-notify",
        "wecom-notify",
        "slack-notify",
        "webhook-notify",
    ] {
        built(plugin);
        let readme = std::fs::read_to_string(repo().join(format!("plugins/{plugin}/README.md")))
            .expect("README");
        let after = readme
            .split_once("## Manifest")
            .map(|(_, rest)| rest)
            .expect("a Manifest section");
        let yaml = after
            .split_once("```yaml\n")
            .and_then(|(_, rest)| rest.split_once("```"))
            .map(|(block, _)| block)
            .expect("a yaml block");
        let dir = folder(&sim);
        write(&dir.path().join(format!("plugins/{plugin}.yaml")), yaml);
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_jobrelay"))
            .args(["check", "--config", &dir.path().to_string_lossy()])
            .envs(env)
            .env("RUST_LOG", "warn")
            .output()
            .await
            .expect("jobrelay runs");
        let report = text(&out);
        assert!(out.status.success(), "{plugin}:\n{yaml}\n{report}");
        assert!(
            report.contains(&format!("ok    plugin   {plugin}: version")),
            "{plugin}: {report}"
        );
    }
}

/// `check --offline` dials nothing and resolves no secret — the state store and an SQL
/// connection behind environment variables that are not set, a cluster nobody listens for —
/// and still judges the files and compiles and links every plugin, SQL grant included; the
/// full check of the same folder fails on exactly what the offline one leaves out. A bad
/// manifest fails offline too, naming the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_offline_judges_the_files_and_dials_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    write(
        &root.join("jobrelay.yaml"),
        &format!(
            "plugin_dir: {}\nkinds: [{{name: volcano-job}}]\n\
             state: {{url: \"env:JOBRELAY_TEST_OFFLINE_STATE_UNSET\"}}\n\
             sql:\n  connections:\n    warehouse: {{url: \"env:JOBRELAY_TEST_OFFLINE_SQL_UNSET\"}}\n",
            repo().join("target/plugins").display()
        ),
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    write(
        &root.join("clusters/dead.yaml"),
        &jobrelay_testkit::kubeconfig::render(&jobrelay_testkit::kubeconfig::KubeconfigSpec {
            name: "dead",
            server: &format!("http://127.0.0.1:{port}"),
            token: "t",
            namespace: None,
        }),
    );
    write(
        &root.join("plugins/log.yaml"),
        "wasm: event-log.wasm\ngrants:\n  filesystem:\n    - {host: out, guest: /data, writable: true}\n",
    );
    write(
        &root.join("plugins/sync.yaml"),
        "wasm: mysql-sync.wasm\ngrants: {sql: [warehouse]}\nconfig: {connection: warehouse}\n",
    );
    let config = root.to_string_lossy().to_string();
    let offline = jobrelay(&["check", "--offline", "--config", &config]).await;
    let report = text(&offline);
    assert_eq!(offline.status.code(), Some(0), "{report}");
    for line in [
        "skip  state    ",
        "skip  clusters 1 cluster(s)",
        "ok    plugin   log",
        "ok    plugin   sync",
        "all checks passed",
    ] {
        assert!(report.contains(line), "{line} missing:\n{report}");
    }
    assert!(!report.contains("FAIL"), "{report}");

    let full = jobrelay(&["check", "--config", &config, "--cluster-timeout", "5"]).await;
    let report = text(&full);
    assert_eq!(full.status.code(), Some(1), "{report}");
    assert!(report.contains("FAIL  state"), "{report}");

    write(
        &root.join("plugins/log.yaml"),
        "wasm: event-log.wasm\ndeliveryy: every-version\n",
    );
    let bad = jobrelay(&["check", "--offline", "--config", &config]).await;
    let report = text(&bad);
    assert_eq!(bad.status.code(), Some(1), "{report}");
    assert!(
        report
            .lines()
            .any(|l| l.starts_with("FAIL") && l.contains("log.yaml") && l.contains("deliveryy")),
        "{report}"
    );
}
