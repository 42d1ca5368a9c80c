//! A running daemon's main file edited in a section it reads once at start (issue 51, item 3).
//! Each edit is judged as the next start will judge it: a value the next start would refuse
//! refuses the whole edit — the main file and the field named in `/status` (`problems`,
//! `attention`), `jobrelay_config_files_refused` at 1, the last good file running on — and a
//! valid one is taken as pending a restart (`restart_pending`, `jobrelay_restart_pending` at 1
//! for its section), until the section is edited back.
//!
//! Every read-once section is edited both ways, through the config folder's re-read
//! ([`ConfigState::refresh`], what the daemon runs on every file event) and through a real
//! daemon's folder watch and telemetry endpoint.

use std::time::{Duration, Instant};

use jobrelay::config::main_file::READ_ONCE_SECTIONS;
use jobrelay::config::state::ConfigState;
use jobrelay::daemon::Daemon;
use serde_json::Value;

/// A variable no test sets: a secret reference to it does not resolve.
const UNSET: &str = "JOBRELAY_TEST_READ_ONCE_UNSET";

/// The main file the daemon starts with, as (top-level key, value) lines.
const BASE: [(&str, &str); 3] = [
    ("kinds", "[{name: batch-job}]"),
    ("state", "{path: state/jobrelay.db}"),
    ("telemetry", "{listen: \"127.0.0.1:0\"}"),
];

/// The main file: [`BASE`] with `overrides` replacing or adding top-level keys.
fn main_file(overrides: &[(&str, &str)]) -> String {
    let mut lines: Vec<(&str, &str)> = BASE.to_vec();
    for (key, value) in overrides {
        match lines.iter_mut().find(|(k, _)| k == key) {
            Some(line) => line.1 = value,
            None => lines.push((key, value)),
        }
    }
    lines.iter().map(|(k, v)| format!("{k}: {v}\n")).collect()
}

/// One read-once section's edits: one the next start would refuse (and the text its refusal
/// must hold: the field), and one it takes.
struct Case {
    section: &'static str,
    invalid: String,
    field: &'static str,
    valid: String,
}

/// Every read-once section. `blocker` is a file of the config folder where a folder would
/// have to be.
fn cases() -> Vec<Case> {
    let unresolvable = format!("{{connections: {{db: {{url: \"env:{UNSET}\"}}}}}}");
    let case = |section, invalid: &[(&str, &str)], field, valid: &[(&str, &str)]| Case {
        section,
        invalid: main_file(invalid),
        field,
        valid: main_file(valid),
    };
    vec![
        case(
            "runtime",
            &[("runtime", "{max_instances: 0}")],
            "runtime.max_instances",
            &[("runtime", "{max_instances: 8}")],
        ),
        case(
            "state",
            &[("state", "{path: blocker/state.db}")],
            "state.path",
            &[("state", "{path: state/other.db}")],
        ),
        case(
            "coordination",
            // Leader election needs a shared store: the URL is judged (it parses; it is not
            // connected to), the home cluster's kubeconfig is not there.
            &[
                (
                    "state",
                    "{url: \"mysql://relay:hunter2@127.0.0.1:1/relay\"}",
                ),
                (
                    "coordination",
                    "{mode: leader, kubeconfig: missing.kubeconfig}",
                ),
            ],
            "coordination.kubeconfig",
            &[("coordination", "{lease_name: other}")],
        ),
        case(
            "sql",
            &[("sql", unresolvable.as_str())],
            "sql.connections.db: url",
            &[("sql", "{connections: {db: {url: \"sqlite://db/x.db\"}}}")],
        ),
        case(
            "archive",
            &[("archive", "{local: blocker/archive}")],
            "archive.local",
            &[("archive", "{local: archive-elsewhere}")],
        ),
        case(
            "telemetry",
            &[("telemetry", "{listen: \"not an address\"}")],
            "telemetry.listen",
            &[("telemetry", "{listen: \"127.0.0.1:1\"}")],
        ),
        case(
            "oci",
            &[("oci", "{plain_http: \"registry:5000\"}")],
            "oci.plain_http",
            &[("oci", "{plain_http: [\"registry:5000\"]}")],
        ),
        case(
            "event_memory_mb",
            &[("event_memory_mb", "0")],
            "event_memory_mb",
            &[("event_memory_mb", "64")],
        ),
        case(
            "clusters_dir",
            &[("clusters_dir", "blocker")],
            "clusters_dir",
            &[("clusters_dir", "clusters-elsewhere")],
        ),
        case(
            "plugin_manifests_dir",
            &[("plugin_manifests_dir", "blocker")],
            "plugin_manifests_dir",
            &[("plugin_manifests_dir", "plugins-elsewhere")],
        ),
    ]
}

/// A config folder with the base main file and the file in the way.
fn folder() -> tempfile::TempDir {
    let root = tempfile::tempdir().expect("tempdir");
    std::fs::write(root.path().join("jobrelay.yaml"), main_file(&[])).expect("main file");
    std::fs::write(root.path().join("blocker"), "a file, not a folder").expect("blocker");
    root
}

/// Every case through the config folder's re-read: the refused edit leaves the last good main
/// file in force (equal to the one before) and nothing pending; the valid edit is pending;
/// the base file again is nothing pending.
#[test]
fn each_read_once_section_is_refused_when_the_next_start_would_refuse_it() {
    assert_eq!(cases().len(), READ_ONCE_SECTIONS.len());
    let root = folder();
    let main = root.path().join("jobrelay.yaml");
    let (mut state, _) = ConfigState::load(root.path()).expect("loads");
    for case in cases() {
        let before = state.main().as_ref().clone();
        std::fs::write(&main, &case.invalid).expect("edit");
        state.refresh();
        let why = state
            .problems()
            .get(&main)
            .unwrap_or_else(|| panic!("{}: the edit is taken:\n{}", case.section, case.invalid))
            .clone();
        assert!(why.contains(case.field), "{}: {why}", case.section);
        assert!(!why.contains("hunter2"), "never the password: {why}");
        assert_eq!(
            **state.main(),
            before,
            "{}: the last good file",
            case.section
        );
        assert!(state.restart_pending().is_empty(), "{}", case.section);

        std::fs::write(&main, &case.valid).expect("edit");
        state.refresh();
        assert_eq!(
            state.problems().get(&main),
            None,
            "{}: {}",
            case.section,
            case.valid
        );
        assert_eq!(state.restart_pending(), [case.section]);

        std::fs::write(&main, main_file(&[])).expect("edit back");
        state.refresh();
        assert!(state.restart_pending().is_empty(), "{}", case.section);
    }
    // Judged, not made: the folders the valid edits name do not exist.
    for made in [
        "archive-elsewhere",
        "clusters-elsewhere",
        "plugins-elsewhere",
        "db",
    ] {
        assert!(!root.path().join(made).exists(), "{made} was made");
    }
}

/// The body of `GET path` from the daemon at `addr`.
async fn get(addr: std::net::SocketAddr, path: &str) -> String {
    let (head, body) = crate::process::http_get(addr, path)
        .await
        .expect("a response");
    assert!(head.contains(" 200 "), "{path}: {head}");
    body
}

/// Polls `/status` until `done` takes it, for up to 20 s.
async fn status_until(
    addr: std::net::SocketAddr,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status: Value = serde_json::from_str(&get(addr, "/status").await).expect("JSON");
        if done(&status) {
            return status;
        }
        assert!(Instant::now() < deadline, "{what}; /status: {status:#}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The value of the metric line `name` (its labels included) in `/metrics`.
async fn metric(addr: std::net::SocketAddr, name: &str) -> Option<String> {
    let text = get(addr, "/metrics").await;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ').map(str::to_string))
}

/// Every case through a running daemon: the refused edit (which also turns clean-up on, a live
/// section) is in `/status` `problems` under the main file with the field, in `attention` and
/// in the refused-files metric, clean-up stays off and nothing is pending; the valid edit is
/// `restart_pending` and `jobrelay_restart_pending{section}` 1, the rest at 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_daemon_refuses_what_its_next_start_would_and_counts_what_waits_for_it() {
    let root = folder();
    let main = root.path().join("jobrelay.yaml");
    let main_key = main.display().to_string();
    let daemon = Daemon::start(root.path()).await.expect("starts");
    let addr = daemon.telemetry_addr().expect("telemetry");
    let cleanup = "{rules: [{kinds: [batch-job], after_finished: 1h}]}";
    for case in cases() {
        let invalid = format!("{}cleanup: {cleanup}\n", case.invalid);
        std::fs::write(&main, &invalid).expect("edit");
        let status = status_until(addr, &format!("{} refused", case.section), |s| {
            s["problems"][&main_key]
                .as_str()
                .is_some_and(|why| why.contains(case.field))
        })
        .await;
        assert!(
            status["attention"]
                .as_array()
                .expect("attention")
                .iter()
                .any(|l| l
                    .as_str()
                    .is_some_and(|l| l.contains(&main_key) && l.contains(case.field))),
            "{status:#}"
        );
        assert_eq!(status["cleanup"]["on"], false, "the last good file runs on");
        assert_eq!(status.get("restart_pending"), None, "{status:#}");
        assert_eq!(
            metric(addr, "jobrelay_config_files_refused")
                .await
                .as_deref(),
            Some("1")
        );
        let label = format!("jobrelay_restart_pending{{section=\"{}\"}}", case.section);
        assert_eq!(metric(addr, &label).await.as_deref(), Some("0"));

        std::fs::write(&main, &case.valid).expect("edit");
        let status = status_until(addr, &format!("{} pending", case.section), |s| {
            s["restart_pending"] == serde_json::json!([case.section])
        })
        .await;
        assert_eq!(status["problems"], serde_json::json!({}), "{status:#}");
        assert!(
            status["attention"]
                .as_array()
                .expect("attention")
                .iter()
                .any(|l| l
                    .as_str()
                    .is_some_and(|l| l.contains("next restart") && l.contains(case.section))),
            "{status:#}"
        );
        assert_eq!(
            metric(addr, "jobrelay_config_files_refused")
                .await
                .as_deref(),
            Some("0")
        );
        for section in READ_ONCE_SECTIONS {
            let label = format!("jobrelay_restart_pending{{section=\"{section}\"}}");
            let expected = if section == case.section { "1" } else { "0" };
            assert_eq!(
                metric(addr, &label).await.as_deref(),
                Some(expected),
                "{label}"
            );
        }

        std::fs::write(&main, main_file(&[])).expect("edit back");
        status_until(addr, &format!("{} no longer pending", case.section), |s| {
            s.get("restart_pending").is_none() && s["problems"] == serde_json::json!({})
        })
        .await;
    }
    // The same file with clean-up, taken: the refused edits' live part was what kept it off.
    std::fs::write(&main, format!("{}cleanup: {cleanup}\n", main_file(&[]))).expect("edit");
    status_until(addr, "clean-up on", |s| s["cleanup"]["on"] == true).await;
    daemon.shutdown(Duration::from_secs(5)).await;
}
