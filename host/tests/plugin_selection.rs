//! `plugin run`, `plugin test` and `plugin dev` give a plugin the events the daemon would give
//! it — the manifest's kinds, filter and delivery judged before any call, what is skipped said
//! with its reason, `--all` to call every event anyway — `plugin dev --manifest` runs a dev
//! manifest instead of the project's own, and `plugin inspect` into a pipe whose reader went
//! away ends cleanly. All through the real binary.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn built(name: &str) -> PathBuf {
    let p = repo().join("target/plugins").join(format!("{name}.wasm"));
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

fn write(path: &Path, content: &str) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, content).expect("write");
}

/// The example event (a Volcano job that succeeded, after running) as version `rv` of its job,
/// in `phase`, as one JSON line.
fn version(rv: u32, phase: &str) -> String {
    let mut event: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("plugins/example-event.json")).expect("event"),
    )
    .expect("json");
    event["resource_version"] = rv.to_string().into();
    event["id"] = format!("example/u/{rv}").into();
    event["phase"] = phase.into();
    event.to_string()
}

/// An event-log manifest writing `file` into `out/` beside it, with `extra` (kinds, filter,
/// delivery).
fn event_log_manifest(file: &str, extra: &str) -> String {
    format!(
        "grants:\n  filesystem:\n    - {{host: out, guest: /data, writable: true}}\n\
         config:\n  file: {file}\n{extra}"
    )
}

/// The lines event-log wrote into `file`, by event id (none if it was never called).
fn logged(file: &Path) -> Vec<String> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let line: serde_json::Value = serde_json::from_str(l).expect("a JSON line");
            line["id"].as_str().expect("an id").to_string()
        })
        .collect()
}

/// A succeeded job against a manifest whose filter takes failed jobs only: `plugin run` does
/// not call the plugin, and says it skipped the event and why, in text and in `--json`; a
/// failed version is called; `--all` calls both; the manifest's kinds and delivery skip too.
#[tokio::test]
async fn plugin_run_skips_what_the_manifest_does_not_take_and_says_why() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let manifest = root.join("failures.yaml");
    write(
        &manifest,
        &event_log_manifest("run.jsonl", "filter:\n  phases: [failed]\n"),
    );
    let succeeded = root.join("succeeded.json");
    write(&succeeded, &version(1, "succeeded"));
    let wasm = built("event-log");
    let log = root.join("out/run.jsonl");

    let run = |event: PathBuf, more: &'static [&'static str]| {
        let (wasm, manifest) = (wasm.clone(), manifest.clone());
        async move {
            let mut args: Vec<&Path> = vec![
                Path::new("plugin"),
                Path::new("run"),
                &wasm,
                Path::new("--event"),
                &event,
                Path::new("--manifest"),
                &manifest,
            ];
            args.extend(more.iter().map(Path::new));
            jobrelay(&args).await
        }
    };
    let out = run(succeeded.clone(), &[]).await;
    let report = text(&out);
    assert!(out.status.success(), "a skip is no failure: {report}");
    assert!(
        report.contains(
            "skipped: plugin failures on event example/u/1: filter.phases: the filter takes \
             [failed], not succeeded"
        ),
        "{report}"
    );
    assert!(report.contains("1 of 1 events skipped"), "{report}");
    assert!(report.contains("--all"), "{report}");
    assert!(logged(&log).is_empty(), "the plugin was called: {report}");

    let out = run(succeeded.clone(), &["--json"]).await;
    let line: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("one JSON object for the event");
    assert_eq!(line["status"], "skipped", "{line}");
    assert_eq!(line["skipped"]["by"], "filter.phases", "{line}");
    assert_eq!(line["host_calls"], serde_json::json!([]), "{line}");
    assert!(logged(&log).is_empty());

    // Both versions: the failure is called, the success skipped, in order.
    let both = root.join("both.jsonl");
    write(
        &both,
        &format!("{}\n{}\n", version(2, "failed"), version(3, "succeeded")),
    );
    let out = run(both.clone(), &["--json"]).await;
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let statuses: Vec<&str> = lines.iter().filter_map(|l| l["status"].as_str()).collect();
    assert_eq!(statuses, ["ok", "skipped"], "{}", text(&out));
    assert_eq!(lines[0]["skipped"], serde_json::Value::Null);
    assert_eq!(logged(&log), ["example/u/2"]);

    // --all: every event, judged by nothing.
    let out = run(both, &["--all"]).await;
    let report = text(&out);
    assert!(out.status.success(), "{report}");
    assert!(!report.contains("skipped"), "{report}");
    assert_eq!(logged(&log), ["example/u/2", "example/u/2", "example/u/3"]);

    // The kinds: the example is a volcano-job.
    write(
        &manifest,
        &event_log_manifest("run.jsonl", "kinds: [batch-job]\n"),
    );
    let report = text(&run(succeeded.clone(), &[]).await);
    assert!(
        report.contains(
            "kinds: the manifest takes [batch-job], not volcano-job (batch.volcano.sh/v1alpha1 Job)"
        ),
        "{report}"
    );
    // The delivery: `terminal` takes no running version.
    let running = root.join("running.json");
    write(&running, &version(4, "running"));
    write(
        &manifest,
        &event_log_manifest("run.jsonl", "delivery: terminal\n"),
    );
    let report = text(&run(running, &[]).await);
    assert!(
        report.contains("delivery: terminal: running is no end"),
        "{report}"
    );
    assert_eq!(logged(&log).len(), 3, "nothing more called: {report}");

    // A filter the daemon refuses is refused here too, naming the manifest and the field.
    write(
        &manifest,
        &event_log_manifest("run.jsonl", "filter:\n  expression: 'event.name +'\n"),
    );
    let out = run(succeeded, &[]).await;
    let report = text(&out);
    assert_eq!(out.status.code(), Some(2), "{report}");
    assert!(
        report.contains("failures.yaml") && report.contains("filter.expression"),
        "{report}"
    );
}

/// `plugin test`: an event the case's manifest does not take is `skipped` — the plugin is not
/// called with it — and a case expecting a call says which field skipped it; `--all` calls it.
#[tokio::test]
async fn plugin_test_cases_skip_what_the_manifest_does_not_take() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cases = dir.path().join("cases");
    let case = |name: &str, expect: &str| {
        let folder = cases.join(name);
        write(
            &folder.join("events.jsonl"),
            &format!("{}\n{}\n", version(1, "succeeded"), version(2, "failed")),
        );
        write(
            &folder.join("manifest.yaml"),
            &event_log_manifest("case.jsonl", "filter:\n  phases: [failed]\n"),
        );
        write(&folder.join("expect.yaml"), expect);
        folder
    };
    let skips = case("1-skips-the-success", "outcomes: [skipped, ok]\n");
    let expects_both = case("2-expects-both-calls", "outcomes: [ok, ok]\n");
    let wasm = built("event-log");
    let args = |all: bool| {
        let mut args: Vec<&Path> = vec![
            Path::new("plugin"),
            Path::new("test"),
            &cases,
            Path::new("--wasm"),
            &wasm,
        ];
        if all {
            args.push(Path::new("--all"));
        }
        args
    };

    let out = jobrelay(&args(false)).await;
    let report = text(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(
        report.contains("ok   1-skips-the-success (2 events, 1 skipped, 0 host calls)"),
        "{report}"
    );
    assert!(
        report.contains(
            "event 1 (example/u/1): expected ok, got skipped: filter.phases: the filter takes \
             [failed], not succeeded"
        ),
        "{report}"
    );
    assert_eq!(logged(&skips.join("out/case.jsonl")), ["example/u/2"]);
    assert_eq!(
        logged(&expects_both.join("out/case.jsonl")),
        ["example/u/2"]
    );

    let out = jobrelay(&args(true)).await;
    let report = text(&out);
    assert!(
        report.contains("event 1 (example/u/1): expected skipped, got ok")
            && report.contains("ok   2-expects-both-calls (2 events, 0 host calls)"),
        "{report}"
    );
    assert_eq!(
        logged(&expects_both.join("out/case.jsonl")),
        ["example/u/2", "example/u/1", "example/u/2"]
    );
}

/// A plugin project whose build.sh puts event-log in place as NAME.wasm (no compiler needed),
/// with a production manifest NAME.yaml that its init refuses and sample events.
fn project(parent: &Path) -> PathBuf {
    let dir = parent.join("audit");
    let build = dir.join("build.sh");
    write(
        &build,
        &format!(
            "#!/bin/sh\ncp '{}' audit.wasm\n",
            built("event-log").display()
        ),
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&build, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    // The production manifest: a key only production has, which this build does not know.
    write(
        &dir.join("audit.yaml"),
        "config:\n  webhook: https://hooks.example.com/prod\n",
    );
    write(
        &dir.join("events/a.json"),
        &format!("{}\n{}\n", version(1, "succeeded"), version(2, "failed")),
    );
    dir
}

/// `plugin dev --manifest FILE` runs the samples (and cases without their own manifest) with
/// the dev manifest instead of the project's own — whose config this build refuses, so without
/// it every round is red — and applies its filter.
#[tokio::test]
async fn plugin_dev_uses_the_dev_manifest_it_is_given() {
    let parent = tempfile::tempdir().expect("tempdir");
    let dir = project(parent.path());
    let dev = parent.path().join("dev.yaml");
    write(
        &dev,
        &event_log_manifest("dev.jsonl", "filter:\n  phases: [failed]\n"),
    );
    let cases = dir.join("tests/cases/first");
    write(
        &cases.join("events.jsonl"),
        &format!("{}\n", version(3, "failed")),
    );
    write(&cases.join("expect.yaml"), "outcomes: [ok]\n");

    let once = |manifest: Option<&Path>| {
        let dir = dir.clone();
        let manifest = manifest.map(Path::to_path_buf);
        async move {
            let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_jobrelay"));
            command.args(["plugin", "dev", "--once"]).arg(&dir);
            if let Some(manifest) = manifest {
                command.arg("--manifest").arg(manifest);
            }
            command
                .env("RUST_LOG", "warn")
                .output()
                .await
                .expect("plugin dev runs")
        }
    };
    let out = once(None).await;
    let report = text(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(
        report.contains("init refused the configuration") && report.contains("── FAILED"),
        "{report}"
    );

    let out = once(Some(&dev)).await;
    let report = text(&out);
    assert!(out.status.success(), "{report}");
    assert!(
        report.contains(&format!(
            "── sample events (plugin run audit.wasm --event events/ --manifest {})",
            dev.display()
        )),
        "{report}"
    );
    assert!(
        report.contains("skipped: plugin dev on event example/u/1: filter.phases"),
        "{report}"
    );
    assert!(report.contains("1 case: 1 passed"), "{report}");
    assert!(report.contains("── all passed"), "{report}");
    // The dev manifest's grant and file: the failures of the samples and of the case.
    assert_eq!(
        logged(&parent.path().join("out/dev.jsonl")),
        ["example/u/2", "example/u/3"]
    );

    // Watching: the dev manifest, outside the project, is watched too; an edit of it starts
    // a round with it as it is now.
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_jobrelay"))
        .args(["plugin", "dev"])
        .arg(&dir)
        .arg("--manifest")
        .arg(&dev)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("plugin dev starts");
    let stdout = child.stdout.take().expect("piped");
    let (lines, mut said) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        use tokio::io::AsyncBufReadExt;
        let mut reader = tokio::io::BufReader::new(stdout).lines();
        while let Ok(Some(line)) = reader.next_line().await {
            let _ = lines.send(line);
        }
    });
    let mut seen = String::new();
    let mut wait_for = async |what: &str| {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
        while !seen.contains(what) {
            match tokio::time::timeout_at(deadline, said.recv()).await {
                Ok(Some(line)) => {
                    seen.push_str(&line);
                    seen.push('\n');
                }
                _ => panic!("never said {what:?}:\n{seen}"),
            }
        }
        std::mem::take(&mut seen)
    };
    let first = wait_for("watching ").await;
    assert!(first.contains("── all passed"), "{first}");
    // A key event-log does not know: its init refuses the load.
    write(
        &dev,
        "grants:\n  filesystem:\n    - {host: out, guest: /data, writable: true}\n\
         config:\n  fiel: typo\n",
    );
    let second = wait_for("watching ").await;
    assert!(
        second.contains("── building") && second.contains("── FAILED"),
        "{second}"
    );
    child.kill().await.expect("stop plugin dev");
}

/// `plugin inspect PLUGIN.wasm | head`: the reader is gone before anything is written; the
/// command ends with its own status, without a panic.
#[tokio::test]
async fn plugin_inspect_into_a_closed_pipe_ends_cleanly() {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_jobrelay"))
        .args(["plugin", "inspect"])
        .arg(built("event-log"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("jobrelay runs");
    // Inspecting compiles the component first: the reader is gone long before it writes.
    drop(child.stdout.take());
    let out = child.wait_with_output().await.expect("ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}
