//! `job-snapshot`, the plugin written in Python, under the same host checks as the Rust ones:
//! its config is refused naming the key, an ungranted capability is refused, a transition is
//! written once, and its calls record and replay like any plugin's.

use std::path::Path;

use crate::common::{event, plugins_dir};
use jobrelay::cli::plugin::run::{PluginRunArgs, PluginRunOutcome, plugin_run};
use jobrelay_contract::event::Phase;

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write");
}

async fn run(args: PluginRunArgs) -> anyhow::Result<PluginRunOutcome> {
    plugin_run(&args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_plugin_obeys_config_grants_and_its_tape() {
    let dir = tempfile::tempdir().expect("tempdir");
    let failed = event(
        "u-py",
        "9",
        Phase::Failed,
        Some(Phase::Running),
        "2026-11-26T05:00:00Z",
    );
    let line = serde_json::to_string(&failed).expect("json");
    let events = dir.path().join("events.jsonl");
    // The same version twice, as after a host restart.
    write(&events, &format!("{line}\n{line}\n"));
    let wasm = plugins_dir().join("job-snapshot.wasm");
    let manifest = dir.path().join("job-snapshot.yaml");
    let args = |manifest: &Path| PluginRunArgs {
        manifest: Some(manifest.to_path_buf()),
        state_dir: Some(dir.path().join("state")),
        ..PluginRunArgs::new(wasm.clone(), events.clone())
    };

    write(
        &manifest,
        "grants: {archive: {}, kv: true}\nconfig: {phases: \"failed,runing\"}\n",
    );
    let refused = run(args(&manifest))
        .await
        .expect_err("a bad phase refuses the config");
    let message = format!("{refused:#}");
    assert!(
        message.contains("config `phases`") && message.contains("runing"),
        "{message}"
    );

    write(&manifest, "grants: {kv: true}\n");
    let denied = run(args(&manifest)).await.expect("loads");
    assert_eq!(denied.status(), "give_up", "{denied}");
    assert!(
        denied
            .message()
            .is_some_and(|m| m.contains("grants.archive")),
        "{denied}"
    );

    write(&manifest, "grants: {archive: {}, kv: true}\n");
    let tape = dir.path().join("tape.jsonl");
    let written = run(PluginRunArgs {
        record: Some(tape.clone()),
        ..args(&manifest)
    })
    .await
    .expect("loads");
    assert!(written.is_ok(), "{written}");
    let calls: Vec<Vec<&str>> = written
        .calls
        .iter()
        .map(|c| c.host_calls.iter().map(|e| e.call.as_str()).collect())
        .collect();
    assert_eq!(
        calls,
        [vec!["kv.get", "archive.put", "kv.set"], vec!["kv.get"]],
        "written once, then first_sights"
    );
    let document = dir
        .path()
        .join("state/archive/job-snapshot/east/ml/train-u-py/u-py/failed.json");
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&document).expect("the snapshot")).expect("JSON");
    assert_eq!(saved["phase"], "failed");
    assert_eq!(saved["event_id"], failed.id.as_str());

    let replayed = run(PluginRunArgs {
        replay: Some(tape),
        state_dir: Some(dir.path().join("replayed")),
        ..args(&manifest)
    })
    .await
    .expect("loads");
    assert!(replayed.is_ok(), "{replayed}");
    assert_eq!(replayed.tape(), written.tape());
}
