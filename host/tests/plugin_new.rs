//! `plugin new`: the project it makes builds into a component with its own build script,
//! handles every sample event under `plugin run`, and passes its own recorded case under
//! `plugin test` — which fails when the case's expectation does not hold.

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use jobrelay::cli::plugin::new::{Lang, PluginNewArgs, plugin_new};
use jobrelay::cli::plugin::run::{PluginRunArgs, plugin_run};
use jobrelay::cli::plugin::test::{PluginTestArgs, plugin_test};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_rust_project_builds_runs_and_passes_its_case() {
    new_project_builds_runs_and_passes_its_case(Lang::Rust).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_python_project_builds_runs_and_passes_its_case() {
    new_project_builds_runs_and_passes_its_case(Lang::Python).await;
}

async fn new_project_builds_runs_and_passes_its_case(lang: Lang) {
    let parent = tempfile::tempdir().expect("tempdir");
    let project = plugin_new(&PluginNewArgs {
        name: "gpu-alerts".into(),
        lang,
        dir: parent.path().to_path_buf(),
        sdk: None,
    })
    .expect("the project is made");
    let dir = project.dir.clone();
    let wit = match lang {
        Lang::Rust => "jobrelay-guest/wit/plugin.wit",
        Lang::Python => "wit/plugin.wit",
    };
    assert!(dir.join(wit).is_file(), "the project carries the WIT");

    // The project's own build script, as an author runs it; a shared target folder keeps
    // repeated runs of this test warm.
    let target = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugin-new");
    let built = Command::new(dir.join("build.sh"))
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .expect("build.sh runs");
    assert!(
        built.status.success(),
        "build.sh failed:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    // With a target folder elsewhere the script copies from there.
    let wasm = dir.join("gpu-alerts.wasm");
    assert!(wasm.is_file(), "{}", String::from_utf8_lossy(&built.stdout));

    // Built against the current world, fleet events included.
    let runtime = jobrelay_runtime::Runtime::new(jobrelay_runtime::RuntimeSettings {
        max_instances: 8,
        max_memory_mb: 64,
        ..jobrelay_runtime::RuntimeSettings::default()
    })
    .expect("runtime builds");
    let bytes = std::fs::read(&wasm).expect("the component reads");
    let inspected = runtime.inspect(bytes.into()).await.expect("inspects");
    assert_eq!(
        inspected.world.ok(),
        Some(jobrelay_runtime::world::SERVED[0])
    );
    assert!(inspected.exports.iter().any(|e| e == "handle-fleet"));

    let run = plugin_run(&PluginRunArgs::new(wasm.clone(), dir.join("events")))
        .await
        .expect("the plugin loads");
    assert!(run.is_ok(), "{run}");
    assert_eq!(run.calls.len(), 4, "one call per sample event: {run}");
    let counted: Vec<usize> = run.calls.iter().map(|c| c.host_calls.len()).collect();
    assert_eq!(
        counted,
        [0, 2, 0, 0],
        "only the failure is counted (kv.get, kv.set): {run}"
    );
    assert_eq!(
        run.manifest.as_deref(),
        Some(dir.join("gpu-alerts.yaml").as_path()),
        "the manifest beside the component is used"
    );

    // The declared config keys, beside the component: the project's own config keeps to
    // them, a typo does not.
    let schema = jobrelay::config::config_schema::ConfigSchema::beside(&wasm)
        .expect("a valid schema")
        .expect("the project declares its config keys");
    let phases =
        |value: &str| std::collections::BTreeMap::from([("phases".to_string(), value.to_string())]);
    assert!(schema.check(&phases("failed,restarting")).is_empty());
    assert!(!schema.check(&phases("failed,runing")).is_empty());

    if lang == Lang::Python {
        webhook_posts_through_wasi_http_within_its_grant(&dir, &wasm).await;
    }

    let suite = |dir: std::path::PathBuf| PluginTestArgs {
        dir,
        wasm: wasm.clone(),
        manifest: None,
        update: false,
    };
    let result = plugin_test(&suite(dir.join("tests/cases")))
        .await
        .expect("the suite runs");
    assert!(result.passed(), "{result}");

    // The case fails when its expectation is wrong.
    std::fs::write(
        dir.join("tests/cases/first/expect.yaml"),
        "outcomes: [retry, ok]\n",
    )
    .expect("expect");
    let result = plugin_test(&suite(dir.join("tests/cases")))
        .await
        .expect("the suite runs");
    assert!(!result.passed(), "{result}");
}

/// `plugin dev`: one round builds the new project and passes its samples and case; an edit of
/// the case starts another round on its own, which fails naming the case; `--once` gives the
/// round's status as its exit code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_dev_builds_runs_and_picks_up_an_edit() {
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};
    use tokio::io::{AsyncBufReadExt, BufReader};

    let parent = tempfile::tempdir().expect("tempdir");
    let project = plugin_new(&PluginNewArgs {
        name: "dev-loop".into(),
        lang: Lang::Rust,
        dir: parent.path().to_path_buf(),
        sdk: None,
    })
    .expect("the project is made");
    let dir = project.dir.clone();
    let target = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugin-new");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_jobrelay"))
        .args(["plugin", "dev"])
        .arg(&dir)
        .env("CARGO_TARGET_DIR", &target)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("plugin dev starts");
    let output = Arc::new(Mutex::new(String::new()));
    let sink = output.clone();
    let stdout = child.stdout.take().expect("piped");
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut text = sink.lock().unwrap_or_else(|p| p.into_inner());
            text.push_str(&line);
            text.push('\n');
        }
    });
    let text = || output.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let wait_for = |what: &'static str, from: usize| {
        async move {
            // The first build compiles the SDK: minutes on a cold, busy machine.
            let started = Instant::now();
            while !text()[from..].contains(what) {
                assert!(
                    started.elapsed() < Duration::from_secs(600),
                    "never said {what:?}:\n{}",
                    text()
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    wait_for("watching ", 0).await;
    // What a round writes (target/, the .wasm) does not start another: a loop of rounds
    // would show here as a second build.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let first = text();
    assert_eq!(first.matches("── building").count(), 1, "{first}");
    assert!(first.contains("── all passed"), "{first}");
    assert!(first.contains("1 case: 1 passed"), "{first}");

    std::fs::write(
        dir.join("tests/cases/first/expect.yaml"),
        "outcomes: [retry, ok]\n",
    )
    .expect("edit the case");
    let from = first.len();
    wait_for("── FAILED", from).await;
    assert!(text()[from..].contains("FAIL first"), "{}", text());
    child.kill().await.expect("stop plugin dev");

    let once = tokio::process::Command::new(env!("CARGO_BIN_EXE_jobrelay"))
        .args(["plugin", "dev", "--once"])
        .arg(&dir)
        .env("CARGO_TARGET_DIR", &target)
        .env("RUST_LOG", "warn")
        .output()
        .await
        .expect("plugin dev --once runs");
    assert_eq!(once.status.code(), Some(1), "{once:?}");
}

/// The Python template with `webhook_url`: the failure is posted through `wasi:http` to a
/// local receiver the manifest grants, and refused (the call asks to be retried, nothing
/// arrives) when the grant is missing.
async fn webhook_posts_through_wasi_http_within_its_grant(dir: &Path, wasm: &Path) {
    let (url, received) = receiver();
    let manifest = |grant: &str| {
        format!(
            "wasm: gpu-alerts.wasm\nconfig:\n  phases: failed\n  webhook_url: {url}/hook\n\
             grants:\n  kv: true\n{grant}"
        )
    };
    let granted = dir.join("granted.yaml");
    let allow = format!("  http:\n    allow: [\"{url}\"]\n    allow_private: true\n");
    std::fs::write(&granted, manifest(&allow)).expect("manifest");
    let mut args = PluginRunArgs::new(wasm.to_path_buf(), dir.join("events"));
    args.manifest = Some(granted);
    let run = plugin_run(&args).await.expect("the plugin loads");
    assert!(run.is_ok(), "{run}");
    let bodies = received.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert_eq!(bodies.len(), 1, "one failure, one post: {bodies:?}");
    let posted: serde_json::Value = serde_json::from_str(&bodies[0]).expect("JSON was posted");
    assert_eq!(posted["name"], "sample-volcano-job", "{posted}");
    assert_eq!(posted["phase"], "failed", "{posted}");

    // Without the grant the host refuses the request: nothing arrives, the call fails.
    let ungranted = dir.join("ungranted.yaml");
    std::fs::write(&ungranted, manifest("")).expect("manifest");
    args.manifest = Some(ungranted);
    let run = plugin_run(&args).await.expect("the plugin loads");
    assert!(
        !run.is_ok(),
        "a request outside the grant went through: {run}"
    );
    let text = run.to_string();
    assert!(text.contains("webhook"), "{text}");
    assert_eq!(
        received.lock().unwrap_or_else(|p| p.into_inner()).len(),
        1,
        "nothing more arrived"
    );
}

/// The template's `webhook.py` in a component of its own: an app that posts each event's
/// message as the whole body (to `webhook_url` + `/` + the job's name) sends bodies of 0, 4,095,
/// 4,096, 4,097 bytes, 64 KiB and 1 MiB whole, with their `content-length`, to a local receiver;
/// and the answer's headers come back, so a 429's `Retry-After` reaches the app. A helper that
/// wrote the body before handing the request over would stop at about 4 KiB and time out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_templates_webhook_posts_bodies_of_any_size() {
    use crate::common::receiver::{BODY_SIZES, Receiver, whole};
    use jobrelay_contract::event::Phase;

    let receiver = Receiver::answering(|request| match request.target.as_str() {
        "/busy" => (
            429,
            vec![("retry-after".into(), "7".into())],
            b"slow down".to_vec(),
        ),
        _ => (204, Vec::new(), Vec::new()),
    })
    .await;
    let parent = tempfile::tempdir().expect("tempdir");
    let project = plugin_new(&PluginNewArgs {
        name: "poster".into(),
        lang: Lang::Python,
        dir: parent.path().to_path_buf(),
        sdk: None,
    })
    .expect("the project is made");
    let dir = project.dir.clone();
    std::fs::write(dir.join("app.py"), POSTER_APP).expect("the poster app");
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugin-new");
    let built = Command::new(dir.join("build.sh"))
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .expect("build.sh runs");
    assert!(
        built.status.success(),
        "build.sh failed:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let manifest = dir.join("poster.yaml");
    std::fs::write(
        &manifest,
        format!(
            "wasm: poster.wasm\ntimeout_ms: 30000\nmemory_mb: 128\nconfig:\n  webhook_url: {}\n\
             grants:\n  http:\n    allow: [\"{}\"]\n    allow_private: true\n",
            receiver.url, receiver.url
        ),
    )
    .expect("manifest");
    let message = |size: usize| -> String {
        (0..size)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect()
    };
    let mut lines = String::new();
    for (n, name) in BODY_SIZES
        .iter()
        .map(|size| format!("s{size}"))
        .chain(["busy".to_string()])
        .enumerate()
    {
        let mut job = crate::common::event(
            &format!("u-{n}"),
            "2",
            Phase::Failed,
            Some(Phase::Running),
            "2026-11-21T09:32:03Z",
        );
        job.name = name;
        job.message = Some(message(BODY_SIZES.get(n).copied().unwrap_or(5)));
        lines.push_str(&serde_json::to_string(&job).expect("JSON"));
        lines.push('\n');
    }
    let events = dir.join("bodies.jsonl");
    std::fs::write(&events, lines).expect("events");
    let mut args = PluginRunArgs::new(dir.join("poster.wasm"), events);
    args.manifest = Some(manifest);
    let run = plugin_run(&args).await.expect("the plugin loads");

    let statuses: Vec<&str> = run.calls.iter().map(|c| c.status()).collect();
    assert_eq!(
        statuses,
        ["ok", "ok", "ok", "ok", "ok", "ok", "give_up"],
        "{run}"
    );
    let refused = run.calls[6].result.as_ref().err().map(|e| e.to_string());
    assert!(
        refused
            .as_deref()
            .is_some_and(|m| m.contains("status 429, retry-after 7, body b'slow down'")),
        "the answer's headers reach the app: {refused:?}"
    );
    let requests = receiver.requests();
    for size in BODY_SIZES {
        let request = requests
            .iter()
            .find(|r| r.target == format!("/s{size}"))
            .unwrap_or_else(|| panic!("no request of {size} bytes: {run}"));
        if let Err(why) = whole(request, message(size).as_bytes()) {
            panic!("{size} bytes: {why}");
        }
    }
}

/// The app of [`the_python_templates_webhook_posts_bodies_of_any_size`]: the template's
/// `webhook.py` as an author calls it.
const POSTER_APP: &str = r#"# Posts each event's message to `webhook_url`/<job name> through the template's webhook.py.

import webhook
import wit_world
from componentize_py_types import Err
from wit_world.imports import jobrelay_plugin_types as types

url = None


class WitWorld(wit_world.WitWorld):
    def init(self, config):
        global url
        url = dict(config)["webhook_url"]

    def handle(self, event):
        try:
            status, headers, body = webhook.post(
                f"{url}/{event.name}",
                (event.message or "").encode(),
                [("content-type", "text/plain")],
            )
        except Err as error:
            raise Err(types.HandlerError_Retry(f"webhook: {error.value}"))
        if status != 204:
            wait = dict(headers).get("retry-after")
            raise Err(types.HandlerError_GiveUp(f"status {status}, retry-after {wait}, body {body!r}"))

    def handle_fleet(self, event):
        return
"#;

/// A local HTTP receiver answering 200 to every POST: its base URL and the bodies received.
fn receiver() -> (String, Arc<Mutex<Vec<String>>>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let url = format!("http://{}", listener.local_addr().expect("bound"));
    let received = Arc::new(Mutex::new(Vec::new()));
    let sink = received.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream);
            let mut length = 0usize;
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                let lower = line.to_ascii_lowercase();
                if let Some(v) = lower.strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
                line.clear();
            }
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_ok() {
                let text = String::from_utf8_lossy(&body).to_string();
                sink.lock().unwrap_or_else(|p| p.into_inner()).push(text);
            }
            let mut stream = reader.into_inner();
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
        }
    });
    (url, received)
}
