//! A plugin's writes to its job are taped like its reads: `plugin run --record` writes each
//! `job.annotate` / `job.label` with its arguments and answer (and `--json` shows them),
//! `--replay` and `plugin test` answer them from the tape without a cluster, and a case's
//! `calls:` asserts them. Through the real binary and the probe plugin's `job-writes`, whose
//! outcome file says what answer each write got.

use std::path::{Path, PathBuf};
use std::process::Output;

fn built(name: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/plugins")
        .join(format!("{name}.wasm"));
    assert!(p.exists(), "{} missing: run plugins/build.sh", p.display());
    p
}

async fn jobrelay(args: &[&Path]) -> Output {
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

/// The example event, asking the probe for an annotation and a label write.
fn event() -> String {
    let mut e: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/example-event.json"),
        )
        .expect("event"),
    )
    .expect("json");
    e["labels"]["jobrelay.test/behave"] = "job-writes".into();
    e["annotations"]["jobrelay.test/writes"] =
        "annotate example.com/seen yes\nlabel example.com/state done".into();
    e.to_string()
}

const MANIFEST: &str = "grants:\n  filesystem:\n    - {host: out, guest: /data, writable: true}\n  \
     job:\n    annotations: [example.com/]\n    labels: [example.com/]\n";

/// The outcome of each write the probe made, as it wrote them down (`ok`, `unavailable`, ...).
fn outcomes(file: &Path) -> Vec<String> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(' ').map(|(_, o)| o.to_string()))
        .collect()
}

#[tokio::test]
async fn job_writes_are_taped_replayed_and_asserted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    std::fs::create_dir_all(root.join("out")).expect("mkdir");
    let manifest = root.join("probe.yaml");
    std::fs::write(&manifest, MANIFEST).expect("write");
    let events = root.join("events.jsonl");
    std::fs::write(&events, format!("{}\n", event())).expect("write");
    let tape = root.join("tape.jsonl");
    let wasm = built("probe");
    let written = root.join("out/job-writes.txt");
    let base: Vec<&Path> = vec![
        Path::new("plugin"),
        Path::new("run"),
        &wasm,
        Path::new("--manifest"),
        &manifest,
        Path::new("--event"),
        &events,
    ];

    // Recorded: no cluster, so each write is answered `unavailable`, and both are on the tape
    // and in --json.
    let mut record = base.clone();
    record.extend([Path::new("--record"), &tape, Path::new("--json")]);
    let out = jobrelay(&record).await;
    assert!(out.status.success(), "{}", text(&out));
    let line: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
    let calls: Vec<&str> = line["host_calls"]
        .as_array()
        .expect("host calls")
        .iter()
        .filter_map(|c| c["call"].as_str())
        .collect();
    assert_eq!(calls, ["job.annotate", "job.label"], "{line}");
    assert_eq!(
        line["host_calls"][0]["args"],
        serde_json::json!({"key": "example.com/seen", "value": "yes"})
    );
    assert!(
        line["host_calls"][0]["answer"]["err"]["unavailable"].is_string(),
        "{line}"
    );
    assert_eq!(outcomes(&written), ["unavailable", "unavailable"]);

    // Replayed with the answers a cluster would give: the plugin gets them, offline.
    let recorded = std::fs::read_to_string(&tape).expect("tape");
    let answered: String = recorded
        .lines()
        .map(|l| {
            let mut entry: serde_json::Value = serde_json::from_str(l).expect("json");
            if entry.get("call").is_some() {
                entry["answer"] = serde_json::json!({"ok": null});
            }
            format!("{entry}\n")
        })
        .collect();
    std::fs::write(&tape, &answered).expect("write");
    std::fs::remove_file(&written).expect("rm");
    let mut replay = base.clone();
    replay.extend([Path::new("--replay"), &tape]);
    let out = jobrelay(&replay).await;
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(outcomes(&written), ["ok", "ok"], "{}", text(&out));

    // A write the plugin no longer makes as taped diverges, naming the call.
    let label_gone = answered.replace("example.com/state", "example.com/other");
    std::fs::write(&tape, &label_gone).expect("write");
    let out = jobrelay(&replay).await;
    let report = text(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(
        report.contains("diverged from the tape: call 2") && report.contains("job.label"),
        "{report}"
    );

    // A case: the tape answers, `calls:` asserts the writes.
    let case = root.join("cases/writes");
    std::fs::create_dir_all(&case).expect("mkdir");
    std::fs::copy(&events, case.join("events.jsonl")).expect("copy");
    std::fs::write(case.join("tape.jsonl"), &answered).expect("write");
    let expect = |value: &str| {
        format!(
            "outcomes: [ok]\ncalls:\n  - call: job.label\n    args: {{key: example.com/state, \
             value: {value}}}\n    count: 1\n"
        )
    };
    std::fs::write(case.join("expect.yaml"), expect("done")).expect("write");
    let cases = root.join("cases");
    let test = [
        Path::new("plugin"),
        Path::new("test"),
        &cases,
        Path::new("--wasm"),
        &wasm,
        Path::new("--manifest"),
        &manifest,
    ];
    let out = jobrelay(&test).await;
    assert!(out.status.success(), "{}", text(&out));
    std::fs::write(case.join("expect.yaml"), expect("gone")).expect("write");
    let out = jobrelay(&test).await;
    let report = text(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(
        report.contains("calls[0]") && report.contains("job.label"),
        "{report}"
    );
}
