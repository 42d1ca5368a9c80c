//! Fleet events without a daemon: `plugin sample-event --fleet` makes one as the daemon does,
//! and `plugin run` calls the plugin's `handle-fleet` with it, judged by the manifest's
//! `fleet_events` and the subject's state as a lane judges it, refusing as the daemon does a
//! manifest asking fleet events of a component that cannot take them. All through the real
//! binary, with the real event-log plugin.

use std::path::{Path, PathBuf};
use std::process::Output;

fn built(name: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/plugins")
        .join(format!("{name}.wasm"));
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

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// What `plugin sample-event` prints for `args`, as one JSON line.
async fn sample(args: &[&str]) -> String {
    let mut all = vec!["plugin", "sample-event"];
    all.extend(args);
    let out = jobrelay(&all).await;
    assert!(out.status.success(), "{}", text(&out));
    let event: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    event.to_string()
}

/// The `fleet` field of each line event-log wrote (its fleet events), in order.
fn fleet_lines(file: &Path) -> Vec<String> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let line: serde_json::Value = serde_json::from_str(l).expect("a JSON line");
            line["fleet"].as_str().unwrap_or("a job line").to_string()
        })
        .collect()
}

/// An outage, the same outage announced again, a rule firing and the cluster back: with
/// `fleet_events: [clusters]` the plugin's `handle-fleet` gets the outage and the return, and
/// `plugin run` says why it skipped the other two; `--all` calls every one; a 0.1.0
/// component (served as 0.2.0, as the daemon serves it) with that manifest is refused as the daemon refuses it.
#[tokio::test]
async fn plugin_run_calls_handle_fleet_with_sampled_fleet_events() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    std::fs::create_dir_all(root.join("out")).expect("mkdir");
    let manifest = root.join("fleet.yaml");
    std::fs::write(
        &manifest,
        "grants:\n  filesystem:\n    - {host: out, guest: /data, writable: true}\n\
         config:\n  file: fleet.jsonl\nfleet_events: [clusters]\n",
    )
    .expect("write");
    let offline = sample(&["--fleet", "cluster-offline", "--cluster", "east"]).await;
    assert!(
        offline.contains("\"kind\":\"cluster-offline\""),
        "{offline}"
    );
    assert!(offline.contains("\"id\":\"east/"), "{offline}");
    let events = root.join("fleet.jsonl");
    std::fs::write(
        &events,
        format!(
            "{offline}\n{offline}\n{}\n{}\n",
            sample(&["--fleet", "rule-firing", "--cluster", "east"]).await,
            sample(&["--fleet", "cluster-online", "--cluster", "east"]).await,
        ),
    )
    .expect("write");
    let wasm = built("event-log");
    let (wasm, manifest_s, events_s) = (
        wasm.to_str().expect("utf-8"),
        manifest.to_str().expect("utf-8"),
        events.to_str().expect("utf-8"),
    );
    let run = [
        "plugin",
        "run",
        wasm,
        "--manifest",
        manifest_s,
        "--event",
        events_s,
    ];
    let out = jobrelay(&run).await;
    let report = text(&out);
    assert!(out.status.success(), "{report}");
    let log = root.join("out/fleet.jsonl");
    assert_eq!(
        fleet_lines(&log),
        ["cluster-offline", "cluster-online"],
        "{report}"
    );
    assert!(
        report.contains(
            "fleet_events: cluster-offline after cluster-offline: the state did not change"
        ),
        "{report}"
    );
    assert!(
        report.contains(
            "fleet_events: the manifest does not ask for a rule's fleet events (fleet_events: \
             [clusters])"
        ),
        "{report}"
    );
    assert!(report.contains("2 of 4 events skipped"), "{report}");

    let mut all = run.to_vec();
    all.push("--all");
    let out = jobrelay(&all).await;
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        fleet_lines(&log),
        [
            "cluster-offline",
            "cluster-online",
            "cluster-offline",
            "cluster-offline",
            "rule-firing",
            "cluster-online"
        ]
    );

    let older = built("older");
    let refused = [
        "plugin",
        "run",
        older.to_str().expect("utf-8"),
        "--manifest",
        manifest_s,
        "--event",
        events_s,
    ];
    let out = jobrelay(&refused).await;
    let report = text(&out);
    assert!(!out.status.success(), "{report}");
    assert!(
        report.contains("fleet_events: the component targets jobrelay:plugin@0.2.0")
            && report.contains("which has no handle-fleet; build it against jobrelay:plugin@0.2.1"),
        "{report}"
    );
}

/// An unknown fleet kind is refused naming the four; `--fleet` with `--kind` is refused.
#[tokio::test]
async fn sample_event_refuses_an_unknown_fleet_kind() {
    let out = jobrelay(&["plugin", "sample-event", "--fleet", "offline"]).await;
    let report = text(&out);
    assert!(!out.status.success(), "{report}");
    assert!(
        report.contains(
            "`offline` is no fleet event; one of cluster-offline, cluster-online, rule-firing, \
             rule-resolved"
        ),
        "{report}"
    );
    let out = jobrelay(&[
        "plugin",
        "sample-event",
        "--fleet",
        "rule-firing",
        "--kind",
        "batch-job",
    ])
    .await;
    assert!(!out.status.success(), "{}", text(&out));
}
