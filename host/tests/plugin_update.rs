//! `plugin test --update` through the real binary: a case that passes is left as it is, byte
//! for byte; a failing case's outcomes are rewritten in the file's own text, the author's
//! comments and layout kept, each rewrite said on standard error (`case C: event N (ID): old
//! -> new`); and an outcome the case's own run confirms is never turned into another — when
//! the update run disagrees with it, the case is left as it was and fails saying so.

use std::path::{Path, PathBuf};
use std::process::Output;

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

fn write(path: &Path, content: &str) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, content).expect("write");
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).expect("read")
}

/// The example event as a job of its own (`uid`), failed, whose probe label asks for
/// `behave`: one JSON line.
fn failed_job(uid: &str, behave: &str) -> String {
    let mut event: serde_json::Value =
        serde_json::from_str(&read(&repo().join("plugins/example-event.json"))).expect("json");
    event["uid"] = uid.into();
    event["name"] = format!("job-{uid}").into();
    event["id"] = format!("example/{uid}/7").into();
    event["phase"] = "failed".into();
    event["labels"]["jobrelay.test/behave"] = behave.into();
    event.to_string()
}

/// A case folder: its events, a manifest granting probe its `/data` (`out/` beside it), and
/// `expect`.
fn case(cases: &Path, name: &str, events: &[String], expect: &str) -> PathBuf {
    let folder = cases.join(name);
    write(&folder.join("events.jsonl"), &(events.join("\n") + "\n"));
    write(
        &folder.join("manifest.yaml"),
        "grants:\n  filesystem:\n    - {host: out, guest: /data, writable: true}\n",
    );
    write(&folder.join("expect.yaml"), expect);
    folder
}

#[tokio::test]
async fn update_keeps_comments_rewrites_only_failing_cases_and_says_each_change() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cases = dir.path().join("cases");
    let passing_text = "# The label asks for a retry, then a give-up.\n\
                        outcomes: [retry, give_up]   # both on purpose\n";
    let passing = case(
        &cases,
        "1-passing",
        &[failed_job("a1", "retry"), failed_job("a2", "giveup")],
        passing_text,
    );
    let stale = case(
        &cases,
        "2-stale",
        &[
            failed_job("b1", "retry"),
            failed_job("b2", "giveup"),
            failed_job("b3", "retry"),
        ],
        "# Why this case: a give-up between two retries.\n\
         outcomes:\n  \
           - retry     # asked for by the label\n  \
           # the one the plugin changed:\n  \
           - ok        # was ok before\n  \
           - retry\n",
    );
    // The first event fails once, then passes (probe counts its calls in /data, which both
    // runs share): the case's run confirms `retry`, the update run would make it `ok`.
    let flaky = case(
        &cases,
        "3-flaky",
        &[failed_job("c1", "flaky:1"), failed_job("c2", "giveup")],
        "outcomes: [retry, ok]  # the second is stale\n",
    );
    let flaky_text = read(&flaky.join("expect.yaml"));
    let wasm = built("probe");
    let out = jobrelay(&[
        Path::new("plugin"),
        Path::new("test"),
        &cases,
        Path::new("--wasm"),
        &wasm,
        Path::new("--update"),
    ])
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report = format!("{stdout}{stderr}");
    assert_eq!(out.status.code(), Some(1), "{report}");

    // A passing case is not rewritten.
    assert!(
        stdout.contains("ok   1-passing (2 events, 0 host calls)"),
        "{report}"
    );
    assert_eq!(read(&passing.join("expect.yaml")), passing_text);

    // A failing one: only the failing outcome changes, in place; its comments stay.
    assert_eq!(
        read(&stale.join("expect.yaml")),
        "# Why this case: a give-up between two retries.\n\
         outcomes:\n  \
           - retry     # asked for by the label\n  \
           # the one the plugin changed:\n  \
           - give_up        # was ok before\n  \
           - retry\n",
    );
    assert!(stdout.contains("upd  2-stale"), "{report}");
    assert!(
        stdout
            .contains("expect.yaml: outcomes were [retry, ok, retry], now [retry, give_up, retry]"),
        "{report}"
    );
    assert!(
        stderr.contains("case 2-stale: event 2 (example/b2/7): ok -> give_up"),
        "{report}"
    );
    assert_eq!(
        stderr.matches("case 2-stale:").count(),
        1,
        "only the outcome that changed is said: {report}"
    );

    // An outcome the case's run confirmed is not turned into another.
    assert!(stdout.contains("FAIL 3-flaky"), "{report}");
    assert!(
        stdout.contains(
            "cannot update: event 1 (example/c1/7) ends retry as the case expects, but ok with \
             the tape updated; the case is left as it was"
        ),
        "{report}"
    );
    assert_eq!(read(&flaky.join("expect.yaml")), flaky_text);
    assert!(!stderr.contains("case 3-flaky"), "{report}");

    // The rewritten case passes as it is now.
    let again = jobrelay(&[
        Path::new("plugin"),
        Path::new("test"),
        &cases,
        Path::new("--wasm"),
        &wasm,
    ])
    .await;
    let report = String::from_utf8_lossy(&again.stdout);
    assert!(
        report.contains("ok   2-stale (3 events, 0 host calls)"),
        "{report}"
    );
}
