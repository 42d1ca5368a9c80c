//! `plugin run --record` and `--replay` with real plugins: what a recording holds, that a
//! replay touches no service and gives the plugin the recorded answers, and that a replay
//! whose calls differ from the tape fails.

use crate::common;

use std::path::{Path, PathBuf};

use common::{event, plugins_dir};
use jobrelay::cli::plugin::run::{PluginRunArgs, PluginRunOutcome, plugin_run};
use jobrelay_capabilities::tape::{self, Entry};
use jobrelay_contract::event::{JobEvent, Phase};
use jobrelay_testkit::{Flavor, JobDriver, SimCluster};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

fn write_events(path: &Path, events: &[JobEvent]) {
    let lines: Vec<String> = events
        .iter()
        .map(|e| serde_json::to_string(e).expect("json"))
        .collect();
    std::fs::write(path, lines.join("\n")).expect("write events");
}

fn calls(entries: &[Entry]) -> Vec<&str> {
    entries.iter().map(|e| e.call.as_str()).collect()
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(next) = stack.pop() {
        for entry in std::fs::read_dir(&next).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found
}

async fn run(args: PluginRunArgs) -> PluginRunOutcome {
    plugin_run(&args).await.expect("the plugin loads")
}

/// log-archive reads a job's pods and logs from the simulator, writes the archive and a kv
/// note; the replay does all of it again with the simulator gone and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_run_replays_offline_and_a_changed_answer_diverges() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = SimCluster::start("east").await.expect("simulator");
    let kubeconfig = dir.path().join("east.yaml");
    sim.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let mut job = JobDriver::builder(Flavor::Volcano, "ml", "train")
        .workers(2)
        .create(&sim)
        .expect("job");
    job.running().expect("running");
    job.succeeded().expect("succeeded");
    for (i, pod) in job.pods().to_vec().iter().enumerate() {
        job.set_log(
            &pod.name,
            false,
            format!("worker {i}: loss=0.{i}\n").into_bytes(),
        )
        .expect("log");
    }
    let mut done = event(
        job.uid(),
        "50",
        Phase::Succeeded,
        Some(Phase::Running),
        "2026-11-26T05:00:00Z",
    );
    done.api_version = "batch.volcano.sh/v1alpha1".into();
    done.namespace = job.namespace().into();
    done.name = job.name().into();
    let events = dir.path().join("events.jsonl");
    write_events(&events, &[done]);
    let manifest = dir.path().join("log-archive.yaml");
    std::fs::write(
        &manifest,
        "grants:\n  pod_logs: {}\n  archive: {}\n  kv: true\n",
    )
    .expect("manifest");
    let tape_file = dir.path().join("tape.jsonl");

    let recorded = run(PluginRunArgs {
        manifest: Some(manifest.clone()),
        kubeconfig: Some(kubeconfig),
        record: Some(tape_file.clone()),
        state_dir: Some(dir.path().join("recorded")),
        ..PluginRunArgs::new(plugins_dir().join("log-archive.wasm"), events.clone())
    })
    .await;
    assert!(recorded.is_ok(), "{recorded}");
    let written = tape::read_file(&tape_file).expect("the tape reads back");
    let names = calls(&written.entries);
    for call in [
        "pod-logs.pods",
        "pod-logs.open",
        "pod-logs.read",
        "archive.create",
        "archive.write",
        "archive.finish",
        "archive.put",
        "kv.set",
    ] {
        assert!(names.contains(&call), "{call} is on the tape: {names:?}");
    }
    assert_eq!(
        written.entries,
        recorded.tape(),
        "the file is the run's calls"
    );
    let log_text = written
        .entries
        .iter()
        .find(|e| e.call == "pod-logs.read" && e.answer["ok"]["text"] != "")
        .map(|e| e.answer["ok"]["text"].clone())
        .expect("a read with bytes");
    assert!(
        log_text.as_str().is_some_and(|t| t.contains("loss=")),
        "{log_text}"
    );
    assert!(
        !files_under(&dir.path().join("recorded/archive")).is_empty(),
        "recording ran for real"
    );

    // The cluster is gone; the replay gets every answer from the tape and writes nothing.
    drop(job);
    drop(sim);
    let replay_dir = dir.path().join("replayed");
    let replayed = run(PluginRunArgs {
        manifest: Some(manifest.clone()),
        replay: Some(tape_file.clone()),
        state_dir: Some(replay_dir.clone()),
        ..PluginRunArgs::new(plugins_dir().join("log-archive.wasm"), events.clone())
    })
    .await;
    assert!(replayed.is_ok(), "{replayed}");
    assert_eq!(
        replayed.tape(),
        written.entries,
        "the same calls, the same answers"
    );
    assert!(
        files_under(&replay_dir.join("archive")).is_empty(),
        "a replay touches no service: {:?}",
        files_under(&replay_dir.join("archive"))
    );

    // A log that reads differently makes the plugin write different bytes: the replay fails
    // at the first write that differs from the recording.
    let mut changed = written.clone();
    let read = changed
        .entries
        .iter_mut()
        .find(|e| e.call == "pod-logs.read" && e.answer["ok"]["text"] != "")
        .expect("a read with bytes");
    read.answer = json!({ "ok": { "text": "something else entirely\n" } });
    let changed_file = dir.path().join("changed.jsonl");
    tape::write_file(&changed_file, &changed).expect("written");
    let diverged = run(PluginRunArgs {
        manifest: Some(manifest.clone()),
        replay: Some(changed_file.clone()),
        ..PluginRunArgs::new(plugins_dir().join("log-archive.wasm"), events.clone())
    })
    .await;
    assert!(!diverged.is_ok());
    assert_eq!(diverged.status(), "diverged", "{diverged}");
    assert!(
        diverged.divergences[0].reason.contains("archive.write"),
        "{:?}",
        diverged.divergences
    );

    // A recorded call the plugin does not make any more, and a call the tape does not have.
    let mut shorter = written.clone();
    let last = shorter.entries.pop().expect("a call");
    tape::write_file(&changed_file, &shorter).expect("written");
    let extra = run(PluginRunArgs {
        manifest: Some(manifest.clone()),
        replay: Some(changed_file.clone()),
        ..PluginRunArgs::new(plugins_dir().join("log-archive.wasm"), events.clone())
    })
    .await;
    assert_eq!(extra.status(), "diverged");
    assert!(
        extra.divergences[0].reason.contains("no more calls")
            && extra.divergences[0].reason.contains(&last.call),
        "{:?}",
        extra.divergences
    );
    let mut longer = written.clone();
    longer.entries.push(last);
    tape::write_file(&changed_file, &longer).expect("written");
    let missing = run(PluginRunArgs {
        manifest: Some(manifest),
        replay: Some(changed_file),
        ..PluginRunArgs::new(plugins_dir().join("log-archive.wasm"), events)
    })
    .await;
    assert_eq!(missing.status(), "diverged");
    assert!(
        missing.divergences[0].reason.contains("did not make"),
        "{:?}",
        missing.divergences
    );
}

/// A server that answers every request with `status` and `body`, then closes.
async fn serve(status: &str, body: &str) -> (u16, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
    let port = listener.local_addr().expect("address").port();
    let answer = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let task = tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = socket.write_all(answer.as_bytes()).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    (port, task)
}

/// The probe GETs a URL and asks for a retry unless the status is 2xx. Recorded against a
/// server that answers 200, replayed with the server gone: the same outcome. Replayed from a
/// tape whose answer says 503: the plugin sees 503, so the answers come from the tape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_answers_come_from_the_tape() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (port, server) = serve("200 OK", "hello from the webhook").await;
    let url = format!("http://127.0.0.1:{port}/hook?token=abc");
    let mut get = event(
        "u-http",
        "1",
        Phase::Failed,
        Some(Phase::Running),
        "2026-11-26T05:00:00Z",
    );
    get.labels
        .insert("jobrelay.test/behave".into(), "http-get".into());
    get.annotations
        .insert("jobrelay.test/url".into(), url.clone());
    let events = dir.path().join("events.jsonl");
    write_events(&events, &[get]);
    let manifest = dir.path().join("probe.yaml");
    std::fs::write(
        &manifest,
        format!(
            "grants:\n  http:\n    allow: [\"http://127.0.0.1:{port}\"]\n    allow_private: true\n"
        ),
    )
    .expect("manifest");
    let tape_file = dir.path().join("tape.jsonl");
    let args = |replay: Option<PathBuf>, record: Option<PathBuf>| PluginRunArgs {
        manifest: Some(manifest.clone()),
        replay,
        record,
        ..PluginRunArgs::new(plugins_dir().join("probe.wasm"), events.clone())
    };

    let recorded = run(args(None, Some(tape_file.clone()))).await;
    assert!(recorded.is_ok(), "{recorded}");
    let written = tape::read_file(&tape_file).expect("tape");
    let [exchange] = &written.entries[..] else {
        panic!("one exchange: {:?}", written.entries);
    };
    assert_eq!(exchange.call, "http.request");
    assert_eq!(exchange.args["method"], "GET");
    assert_eq!(exchange.args["url"], Value::String(url.clone()));
    assert_eq!(exchange.answer["ok"]["status"], 200);
    assert_eq!(
        exchange.answer["ok"]["body"]["text"],
        "hello from the webhook"
    );

    server.abort();
    let replayed = run(args(Some(tape_file.clone()), None)).await;
    assert!(replayed.is_ok(), "{replayed}");
    assert_eq!(replayed.tape(), written.entries);

    let mut unavailable = written.clone();
    unavailable.entries[0].answer["ok"]["status"] = json!(503);
    tape::write_file(&tape_file, &unavailable).expect("written");
    let replayed = run(args(Some(tape_file.clone()), None)).await;
    assert!(replayed.divergences.is_empty(), "{replayed}");
    assert_eq!(replayed.status(), "retry", "{replayed}");
    assert!(
        replayed.message().is_some_and(|m| m.contains("status 503")),
        "{replayed}"
    );

    // The allow-list still holds on replay: the same tape against a manifest without the
    // grant is refused before the tape is asked.
    std::fs::write(&manifest, "grants: {}\n").expect("manifest");
    let refused = run(args(Some(tape_file), None)).await;
    assert!(refused.calls[0].host_calls.is_empty(), "{refused}");
    assert!(
        refused
            .message()
            .is_some_and(|m| m.contains("HttpRequestDenied")),
        "{refused}"
    );
}

/// `plugin test`: cases made from a recording of mysql-sync pass; a case whose expected
/// outcome is wrong, whose plugin makes other statements than its tape, or whose expectation
/// is malformed fails with the reason, and the suite goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suite_of_recorded_cases_passes_and_each_kind_of_mismatch_fails() {
    use jobrelay::cli::plugin::test::{PluginTestArgs, plugin_test};

    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("mysql-sync.yaml");
    std::fs::write(
        &manifest,
        "grants: {sql: [embedded]}\nconfig: {connection: embedded}\n",
    )
    .expect("manifest");
    let running = event(
        "u-suite",
        "7",
        Phase::Running,
        Some(Phase::Pending),
        "2026-11-26T05:00:00Z",
    );
    let failed = event(
        "u-suite",
        "8",
        Phase::Failed,
        Some(Phase::Running),
        "2026-11-26T05:10:00Z",
    );
    let events = dir.path().join("events.jsonl");
    write_events(&events, &[running.clone(), failed.clone()]);
    let tape_file = dir.path().join("tape.jsonl");
    let recorded = run(PluginRunArgs {
        manifest: Some(manifest.clone()),
        record: Some(tape_file.clone()),
        ..PluginRunArgs::new(plugins_dir().join("mysql-sync.wasm"), events.clone())
    })
    .await;
    assert!(recorded.is_ok(), "{recorded}");
    let written = tape::read_file(&tape_file).expect("tape");
    assert!(
        calls(&written.entries).contains(&"sql.execute"),
        "{:?}",
        calls(&written.entries)
    );

    let suite = dir.path().join("cases");
    let case = |name: &str, tape: &tape::TapeFile, expect: &str, events: &[JobEvent]| {
        let folder = suite.join(name);
        std::fs::create_dir_all(&folder).expect("case folder");
        write_events(&folder.join("events.jsonl"), events);
        tape::write_file(&folder.join("tape.jsonl"), tape).expect("tape");
        std::fs::write(folder.join("expect.yaml"), expect).expect("expect");
    };
    // 1. The recording as it is.
    case(
        "1-as-recorded",
        &written,
        "outcomes: [ok, ok]\n",
        &[running.clone(), failed.clone()],
    );
    // 2. The database was down for the second event's write: the plugin asks for a retry.
    let mut down = written.clone();
    let last_write = down
        .entries
        .iter_mut()
        .rev()
        .find(|e| e.call == "sql.execute")
        .expect("a write");
    last_write.answer = json!({"err": {"unavailable": "database: connection refused"}});
    case(
        "2-database-down",
        &down,
        "outcomes: [ok, retry]\n",
        &[running.clone(), failed.clone()],
    );
    // 3. The same tape, expecting the wrong outcome.
    case(
        "3-wrong-expectation",
        &down,
        "outcomes: [ok, ok]\n",
        &[running.clone(), failed.clone()],
    );
    // 4. Another event than recorded: the plugin writes other rows than the tape holds.
    let mut other = failed.clone();
    other.phase = Phase::Succeeded;
    case(
        "4-other-event",
        &written,
        "outcomes: [ok, ok]\n",
        &[running.clone(), other],
    );
    // 5. An expectation that names no status.
    case(
        "5-bad-expectation",
        &written,
        "outcomes: [fine, ok]\n",
        &[running, failed],
    );

    let result = plugin_test(&PluginTestArgs {
        dir: suite,
        wasm: plugins_dir().join("mysql-sync.wasm"),
        manifest: Some(manifest),
        update: false,
    })
    .await
    .expect("the suite runs");
    let report = result.to_string();
    let passed: Vec<bool> = result.cases.iter().map(|c| c.passed()).collect();
    assert_eq!(passed, [true, true, false, false, false], "{report}");
    assert!(!result.passed());
    assert!(
        report.contains("event 2 (east/u-suite/8): expected ok, got retry"),
        "{report}"
    );
    assert!(report.contains("diverged from the tape: call"), "{report}");
    assert!(report.contains("`fine` is not a status"), "{report}");
    assert!(report.contains("5 cases: 2 passed, 3 failed"), "{report}");
}

/// feishu-notify recorded against a local receiver that answers as Feishu does: the event
/// (handled `copies` times), the manifest granting the receiver, and the tape written.
struct FeishuRecording {
    /// The receiver's port (it answered the recording; it is gone since).
    port: u16,
    event: JobEvent,
    events: PathBuf,
    manifest: PathBuf,
    tape_file: PathBuf,
    tape: tape::TapeFile,
}

async fn record_feishu(dir: &Path, uid: &str, copies: usize) -> FeishuRecording {
    let (port, server) = serve("200 OK", r#"{"code":0,"msg":"success"}"#).await;
    let failed = event(
        uid,
        "5",
        Phase::Failed,
        Some(Phase::Running),
        "2026-11-26T05:00:00Z",
    );
    let events = dir.join("events.jsonl");
    write_events(&events, &vec![failed.clone(); copies]);
    let manifest = dir.join("feishu-notify.yaml");
    std::fs::write(
        &manifest,
        format!(
            "grants:\n  http:\n    allow: [\"http://127.0.0.1:{port}\"]\n    allow_private: \
             true\n  kv: true\nconfig:\n  webhook: http://127.0.0.1:{port}/hook\n"
        ),
    )
    .expect("manifest");
    let tape_file = dir.join("tape.jsonl");
    let recorded = run(feishu_args(
        &manifest,
        &events,
        None,
        Some(tape_file.clone()),
    ))
    .await;
    assert!(recorded.is_ok(), "{recorded}");
    server.abort();
    FeishuRecording {
        port,
        event: failed,
        events,
        manifest,
        tape: tape::read_file(&tape_file).expect("tape"),
        tape_file,
    }
}

fn feishu_args(
    manifest: &Path,
    events: &Path,
    replay: Option<PathBuf>,
    record: Option<PathBuf>,
) -> PluginRunArgs {
    PluginRunArgs {
        manifest: Some(manifest.to_path_buf()),
        replay,
        record,
        ..PluginRunArgs::new(
            plugins_dir().join("feishu-notify.wasm"),
            events.to_path_buf(),
        )
    }
}

/// `tape` with the posted card's title set to `title`; returns the title it had.
fn retitled(tape: &mut tape::TapeFile, title: &str) -> String {
    let post = tape
        .entries
        .iter_mut()
        .find(|e| e.call == "http.request")
        .expect("the card was posted");
    let body = post.args["body"]["text"].as_str().expect("a text body");
    let mut card: Value = serde_json::from_str(body).expect("a JSON card");
    let old = card
        .pointer_mut("/card/header/title/content")
        .expect("a card title");
    let was = old.as_str().expect("a title").to_string();
    *old = json!(title);
    post.args["body"]["text"] = json!(card.to_string());
    was
}

/// A replay that diverges on one field of a request's JSON body says that field — its path
/// inside the body's document and both values — once, in a few lines: not the whole escaped
/// body, and no follow-on divergences (the call after it, the calls the plugin no longer
/// makes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_diverging_on_one_field_names_that_field_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let recording = record_feishu(dir.path(), "u-card", 2).await;
    // The recorded card says another word in its title than the plugin sends.
    let mut edited = recording.tape.clone();
    let sent = retitled(&mut edited, "a title the plugin does not send");
    tape::write_file(&recording.tape_file, &edited).expect("written");

    let replayed = run(feishu_args(
        &recording.manifest,
        &recording.events,
        Some(recording.tape_file.clone()),
        None,
    ))
    .await;
    assert_eq!(replayed.status(), "diverged", "{replayed}");
    assert_eq!(replayed.divergences.len(), 1, "{:?}", replayed.divergences);
    let reason = &replayed.divergences[0].reason;
    assert!(
        reason.contains(".body.text (JSON).card.header.title.content: the tape has \"a title the plugin does not send\""),
        "{reason}"
    );
    assert!(
        reason.contains(&serde_json::to_string(&sent).expect("json")),
        "{reason}"
    );
    assert_eq!(reason.lines().count(), 2, "{reason}");
    let report = replayed.to_string();
    assert_eq!(report.matches("the tape has").count(), 1, "{report}");
}

/// `plugin test --update`: a card whose title changed on purpose, a recorded call the plugin
/// no longer makes and an outcome that changed are written into the case (and said, one line
/// each), after which the case passes as it is; a case whose plugin makes a call the tape has
/// no answer for is not rewritten and says to record it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_rewrites_a_case_to_what_the_plugin_does_now() {
    use jobrelay::cli::plugin::test::{PluginTestArgs, plugin_test};

    let dir = tempfile::tempdir().expect("tempdir");
    let recording = record_feishu(dir.path(), "u-upd", 1).await;
    let written = recording.tape.clone();
    // The case as it was before the plugin changed: another title, one more call, a retry.
    let mut old = written.clone();
    retitled(&mut old, "the old title");
    let extra = old.entries.last().expect("a call").clone();
    old.entries.push(extra);
    let suite = dir.path().join("cases");
    let case = |name: &str, tape: &tape::TapeFile| {
        let folder = suite.join(name);
        std::fs::create_dir_all(&folder).expect("case folder");
        write_events(
            &folder.join("events.jsonl"),
            std::slice::from_ref(&recording.event),
        );
        tape::write_file(&folder.join("tape.jsonl"), tape).expect("tape");
        std::fs::write(folder.join("expect.yaml"), "outcomes: [retry]\n").expect("expect");
        folder
    };
    let changed = case("1-changed", &old);
    // A first call the plugin does not make: no recorded answer for what it does make.
    let mut other = written.clone();
    other.entries[0].call = "kv.delete".into();
    let unanswerable = case("2-other-call", &other);
    // An assertion the plugin breaks: rewriting the tape does not make the case pass.
    let asserting = case("3-assertion", &written);
    std::fs::write(
        asserting.join("expect.yaml"),
        "outcomes: [ok]\ncalls:\n  - {call: http.request, json: {msg_type: text}}\n",
    )
    .expect("expect");

    let args = |update: bool| PluginTestArgs {
        dir: suite.clone(),
        wasm: plugins_dir().join("feishu-notify.wasm"),
        manifest: Some(recording.manifest.clone()),
        update,
    };
    let result = plugin_test(&args(true)).await.expect("the suite runs");
    let report = result.to_string();
    let [first, second, third] = &result.cases[..] else {
        panic!("three cases: {report}")
    };
    assert!(!third.passed(), "{report}");
    assert!(
        third.failures[0].contains("3-assertion/expect.yaml: calls[0]: "),
        "the failure names the case's file: {report}"
    );
    assert!(first.passed(), "{report}");
    assert_eq!(first.updated.len(), 3, "{report}");
    assert!(
        first.updated[0].contains(".card.header.title.content: was \"the old title\", now"),
        "{report}"
    );
    assert!(first.updated[1].contains("dropped"), "{report}");
    assert!(
        first.updated[2].contains("outcomes were [retry], now [ok]"),
        "{report}"
    );
    assert!(report.contains("upd  1-changed"), "{report}");
    assert_eq!(
        tape::read_file(&changed.join("tape.jsonl"))
            .expect("tape")
            .entries,
        written.entries,
        "the rewritten tape is what the plugin does now"
    );
    assert!(!second.passed(), "{report}");
    assert!(report.contains("record the case again"), "{report}");
    assert_eq!(
        tape::read_file(&unanswerable.join("tape.jsonl"))
            .expect("tape")
            .entries,
        other.entries,
        "a case that cannot be updated is left as it was"
    );

    std::fs::remove_dir_all(&unanswerable).expect("remove");
    std::fs::remove_dir_all(&asserting).expect("remove");
    let again = plugin_test(&args(false)).await.expect("the suite runs");
    assert!(again.passed(), "{again}");
}

/// A case that asserts on its calls: with `tape: answers` the tape only answers (a changed
/// title does not fail it), and `calls:` says what the case is about — a POST to the webhook
/// whose JSON body is an interactive card, exactly once — which a wrong assertion fails,
/// naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_case_asserts_on_its_calls_and_uses_the_tape_for_answers() {
    use jobrelay::cli::plugin::test::{PluginTestArgs, plugin_test};

    let dir = tempfile::tempdir().expect("tempdir");
    let recording = record_feishu(dir.path(), "u-assert", 1).await;
    let failed = recording.event.clone();
    let manifest = recording.manifest.clone();
    let port = recording.port;
    let mut tape_with_old_title = recording.tape.clone();
    retitled(&mut tape_with_old_title, "the old title");

    let suite = dir.path().join("cases");
    let case = |name: &str, expect: &str| {
        let folder = suite.join(name);
        std::fs::create_dir_all(&folder).expect("case folder");
        write_events(&folder.join("events.jsonl"), std::slice::from_ref(&failed));
        tape::write_file(&folder.join("tape.jsonl"), &tape_with_old_title).expect("tape");
        std::fs::write(folder.join("expect.yaml"), expect).expect("expect");
    };
    let posts = format!(
        "calls:\n  - call: http.request\n    args: {{method: POST, url: \"http://127.0.0.1:{port}/*\"}}\n    json: {{msg_type: interactive}}\n    count: 1\n"
    );
    case(
        "1-asserts",
        &format!("outcomes: [ok]\ntape: answers\n{posts}"),
    );
    case("2-exact-tape", &format!("outcomes: [ok]\n{posts}"));
    case(
        "3-wrong-assertion",
        "outcomes: [ok]\ntape: answers\ncalls:\n  - call: http.request\n    json: {msg_type: text}\n",
    );
    // A list of another length than the call's: said where, naming the case's file.
    case(
        "4-wrong-length",
        "outcomes: [ok]\ntape: answers\ncalls:\n  - call: http.request\n    json: {card: {elements: []}}\n",
    );
    let result = plugin_test(&PluginTestArgs {
        dir: suite,
        wasm: plugins_dir().join("feishu-notify.wasm"),
        manifest: Some(manifest),
        update: false,
    })
    .await
    .expect("the suite runs");
    let report = result.to_string();
    let passed: Vec<bool> = result.cases.iter().map(|c| c.passed()).collect();
    assert_eq!(passed, [true, false, false, false], "{report}");
    assert!(
        report.contains(
            "4-wrong-length/expect.yaml: calls[0]: expected at least one http.request call whose \
             JSON body has {\"card\":{\"elements\":[]}}, found 0 (1 http.request calls in all); \
             the first differs at json.card.elements: the case lists 0 items, the call has"
        ),
        "{report}"
    );
    assert!(
        report.contains(".card.header.title.content: the tape has \"the old title\""),
        "the exact case diverges on the title: {report}"
    );
    assert!(
        report.contains(
            "calls[0]: expected at least one http.request call whose JSON body has {\"msg_type\":\"text\"}, found 0"
        ),
        "{report}"
    );
}
