//! The plugin runtime against real components and real wasmtime.
//!
//! The components come from `target/plugins/` (built by `plugins/build.sh`): `event-log`, the
//! misbehaving test plugin `probe`, `not-a-plugin`, a WASI command, and the plugins of older
//! worlds, `older` (0.2.0) and `noop` (0.1.0).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use jobrelay::cli::plugin::run::{PluginRunArgs, plugin_run};
use jobrelay_capabilities::Grants;
use jobrelay_capabilities::filesystem::DirGrant;
use jobrelay_contract::event::{JobEvent, Phase};
use jobrelay_contract::fleet::{FleetEvent, FleetEventKind};
use jobrelay_runtime::{
    CallError, CompileError, ComponentSource, LoadError, PluginSpec, PluginVersion, Runtime,
    RuntimeSettings,
};

const MIB: u64 = 1 << 20;

fn plugins_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("target")
        .join("plugins")
}

fn wasm(name: &str) -> Arc<[u8]> {
    let path = plugins_dir().join(format!("{name}.wasm"));
    match std::fs::read(&path) {
        Ok(bytes) => bytes.into(),
        Err(e) => panic!(
            "cannot read {} ({e}): build the test components first with `plugins/build.sh`",
            path.display()
        ),
    }
}

fn runtime() -> Runtime {
    Runtime::new(RuntimeSettings {
        max_instances: 64,
        max_memory_mb: 64,
        ..RuntimeSettings::default()
    })
    .expect("runtime builds")
}

fn data_grant(dir: &Path) -> Grants {
    Grants {
        filesystem: vec![DirGrant {
            host: dir.to_path_buf(),
            guest: "/data".into(),
            writable: true,
        }],
        ..Grants::default()
    }
}

fn spec(name: &str, component: &str, grants: Grants) -> PluginSpec {
    PluginSpec {
        name: name.into(),
        version: format!("{name}-v1"),
        wasm: wasm(component),
        wasm_sha256: String::new(),
        timeout: Duration::from_secs(5),
        memory_bytes: 32 * MIB,
        instance_reuse: 1,
        config: BTreeMap::new(),
        grants,
    }
}

fn event(rv: u32, behave: Option<&str>) -> JobEvent {
    let mut labels = BTreeMap::from([("team".to_string(), "nlp".to_string())]);
    if let Some(behave) = behave {
        labels.insert("jobrelay.test/behave".into(), behave.into());
    }
    JobEvent {
        id: JobEvent::make_id("c1", "u-1", &rv.to_string()),
        cluster: "c1".into(),
        api_version: "batch/v1".into(),
        kind: "Job".into(),
        namespace: "ml".into(),
        name: "train-1".into(),
        uid: "u-1".into(),
        resource_version: rv.to_string(),
        generation: Some(3),
        phase: Phase::Running,
        raw_phase: "Running".into(),
        reason: None,
        message: Some("said \"hi\" → ok\n".into()),
        previous_phase: Some(Phase::Pending),
        transition_time: "2026-11-21T10:00:00Z".into(),
        labels,
        annotations: BTreeMap::from([("note".to_string(), "x".to_string())]),
        object_json: Arc::from(r#"{"kind":"Job","spec":{"parallelism":2}}"#),
        transition_key: String::new(),
        synthetic: false,
        story: None,
    }
}

async fn load_probe(rt: &Runtime, dir: &Path, version: &str) -> Arc<PluginVersion> {
    let mut s = spec("probe", "probe", data_grant(dir));
    s.version = version.into();
    s.timeout = Duration::from_millis(200);
    s.memory_bytes = 16 * MIB;
    rt.load(s).await.expect("probe loads")
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_log_appends_one_exact_json_line_per_event() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime();
    let mut s = spec("event-log", "event-log", data_grant(dir.path()));
    s.config.insert("file".into(), "jobs.jsonl".into());
    let plugin = rt.load(s).await.expect("event-log loads");

    plugin.handle(&event(100, None)).await.expect("first event");
    let file = dir.path().join("jobs.jsonl");
    let text = std::fs::read_to_string(&file).expect("file written");
    let expected = concat!(
        r#"{"id":"c1/u-1/100","transition_key":"c1/u-1/running@rv=100","#,
        r#""cluster":"c1","api_version":"batch/v1","kind":"Job","#,
        r#""namespace":"ml","name":"train-1","uid":"u-1","resource_version":"100","#,
        r#""generation":3,"phase":"running","raw_phase":"Running","reason":null,"#,
        r#""message":"said \"hi\" → ok\n","previous_phase":"pending","#,
        r#""transition_time":"2026-11-21T10:00:00Z","labels":{"team":"nlp"}}"#,
        "\n"
    );
    assert_eq!(text, expected);

    let mut second = event(101, None);
    second.phase = Phase::Succeeded;
    second.previous_phase = Some(Phase::Running);
    plugin.handle(&second).await.expect("second event");
    let all = lines(&file);
    assert_eq!(all.len(), 2);
    assert_eq!(format!("{}\n", all[0]), expected);
    let parsed: serde_json::Value = serde_json::from_str(&all[1]).expect("json line");
    assert_eq!(parsed["id"], "c1/u-1/101");
    assert_eq!(parsed["phase"], "succeeded");
    assert_eq!(parsed["previous_phase"], "running");

    // The transition key the host computed reaches the plugin as it is.
    let mut keyed = event(102, None);
    keyed.transition_key = "c1/u-1/running@2026-11-21T10:00:00Z".into();
    plugin.handle(&keyed).await.expect("keyed event");
    let parsed: serde_json::Value = serde_json::from_str(&lines(&file)[2]).expect("json line");
    assert_eq!(
        parsed["transition_key"],
        "c1/u-1/running@2026-11-21T10:00:00Z"
    );
}

/// A plugin built against the older world (`noop` targets `jobrelay:plugin@0.1.0`) loads and
/// handles events next to current ones: the host serves both worlds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_built_against_the_older_world_still_runs() {
    let rt = runtime();
    let plugin = rt
        .load(spec("noop", "noop", Grants::default()))
        .await
        .expect("a 0.1.0 plugin loads");
    for rv in 1..=3 {
        plugin.handle(&event(rv, None)).await.expect("handled");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let current = load_probe(&rt, dir.path(), "probe-v1").await;
    current.handle(&event(4, None)).await.expect("handled");
}

fn fleet_event(kind: FleetEventKind, cluster: &str, rule: Option<&str>) -> FleetEvent {
    FleetEvent {
        id: String::new(),
        kind,
        cluster: cluster.into(),
        rule: rule.map(str::to_string),
        job_uid: None,
        group: None,
        value: rule.map(|_| 0.31),
        threshold: rule.map(|_| 0.15),
        since: "2026-11-28T10:00:00Z".into(),
        time: "2026-11-28T10:00:30Z".into(),
        summary: "connection refused".into(),
    }
}

/// The JSON lines of `probe.jsonl` that record fleet events.
fn fleet_lines(dir: &Path) -> Vec<serde_json::Value> {
    lines(&dir.join("probe.jsonl"))
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("a JSON line"))
        .filter(|l| l.get("fleet").is_some())
        .collect()
}

/// A fleet event reaches a current plugin through `handle-fleet`, not `handle`: the carrier the
/// lanes deliver is unwrapped by the runtime, and the probe records the fleet event it got.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_events_reach_a_current_plugin_through_handle_fleet() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime();
    let inspected = rt.inspect(wasm("probe")).await.expect("inspects");
    assert_eq!(inspected.world.ok(), Some("jobrelay:plugin@0.2.2"));
    assert!(inspected.exports.iter().any(|e| e == "handle-fleet"));
    let probe = load_probe(&rt, dir.path(), "fleet").await;
    assert_eq!(probe.package(), "jobrelay:plugin@0.2.2");
    assert!(probe.takes_fleet_events());

    let offline = fleet_event(FleetEventKind::ClusterOffline, "east", None).into_job_event(7);
    let firing =
        fleet_event(FleetEventKind::RuleFiring, "west", Some("failure-ratio")).into_job_event(8);
    probe.handle(&offline).await.expect("offline handled");
    probe.handle(&firing).await.expect("firing handled");
    // A job event still goes to `handle`, next to them.
    probe.handle(&event(9, None)).await.expect("job handled");

    let recorded = fleet_lines(dir.path());
    assert_eq!(recorded.len(), 2, "{recorded:?}");
    assert_eq!(recorded[0]["fleet"], "cluster-offline");
    assert_eq!(recorded[0]["id"], offline.id.as_str());
    assert_eq!(recorded[0]["cluster"], "east");
    assert_eq!(recorded[0]["since"], "2026-11-28T10:00:00Z");
    assert!(recorded[0].get("rule").is_none(), "{}", recorded[0]);
    assert_eq!(recorded[1]["fleet"], "rule-firing");
    assert_eq!(recorded[1]["id"], firing.id.as_str());
    assert_eq!(recorded[1]["rule"], "failure-ratio");
    let all = lines(&dir.path().join("probe.jsonl"));
    assert_eq!(all.len(), 3);
    assert!(all[2].contains("\"id\":\"c1/u-1/9\""), "{}", all[2]);

    // A carrier whose object is no fleet event is given up, naming the event, without a trap.
    let mut unreadable = offline.clone();
    unreadable.object_json = Arc::from(r#"{"kind": 3}"#);
    match probe.handle(&unreadable).await {
        Err(CallError::GiveUp(reason)) => assert!(reason.contains(&offline.id), "{reason}"),
        other => panic!("expected GiveUp, got {other:?}"),
    }
    assert_eq!(fleet_lines(dir.path()).len(), 2);
}

/// The probe's failure knobs hold for fleet events too (set in its config, as a fleet event
/// has no labels), so the daemon's tests can make them retry, give up or fail a few times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_fails_fleet_events_on_request() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime();
    let mut s = spec("probe", "probe", data_grant(dir.path()));
    s.config.insert("fleet_behave".into(), "flaky:2".into());
    s.config.insert("fleet_behave.west".into(), "giveup".into());
    s.config.insert("fleet_behave.north".into(), "retry".into());
    let probe = rt.load(s).await.expect("probe loads");

    let east = fleet_event(FleetEventKind::ClusterOffline, "east", None).into_job_event(1);
    for _ in 0..2 {
        assert_eq!(
            probe.handle(&east).await,
            Err(CallError::Retry(
                "probe is flaky: failing the first 2 calls".into()
            ))
        );
    }
    probe
        .handle(&east)
        .await
        .expect("the third call goes through");
    let west = fleet_event(FleetEventKind::ClusterOffline, "west", None).into_job_event(2);
    assert_eq!(
        probe.handle(&west).await,
        Err(CallError::GiveUp("probe was asked to give up".into()))
    );
    let north = fleet_event(FleetEventKind::ClusterOnline, "north", None).into_job_event(3);
    assert_eq!(
        probe.handle(&north).await,
        Err(CallError::Retry("probe was asked to retry".into()))
    );
    // Job events keep their own knobs: this one has none and is recorded.
    probe.handle(&event(4, None)).await.expect("job handled");

    let recorded = fleet_lines(dir.path());
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0]["id"], east.id.as_str());
    assert_eq!(lines(&dir.path().join("probe.jsonl")).len(), 2);
}

/// A plugin built against `jobrelay:plugin@0.2.0` (`older`) loads: its imports, named
/// `…@0.2.0`, link to the host's `…@0.2.1` definitions by semver, and its `handle` gets the job
/// event whole. It takes no fleet events: a carrier given to it anyway is a give-up naming its
/// world, not a trap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_built_against_0_2_0_runs_and_takes_no_fleet_events() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime();
    let inspected = rt.inspect(wasm("older")).await.expect("inspects");
    assert_eq!(inspected.world.ok(), Some("jobrelay:plugin@0.2.0"));
    assert!(
        inspected
            .imports
            .iter()
            .any(|i| i == "jobrelay:plugin/log@0.2.0"),
        "{:?}",
        inspected.imports
    );
    assert!(!inspected.exports.iter().any(|e| e == "handle-fleet"));

    let older = rt
        .load(spec("older", "older", data_grant(dir.path())))
        .await
        .expect("a 0.2.0 plugin loads");
    assert_eq!(older.package(), "jobrelay:plugin@0.2.0");
    assert!(!older.takes_fleet_events());
    let mut job = event(1, None);
    job.transition_key = "c1/u-1/running@2026-11-21T10:00:00Z".into();
    older.handle(&job).await.expect("handled");
    older.handle(&event(2, None)).await.expect("handled");
    assert_eq!(
        lines(&dir.path().join("older.txt")),
        [
            "c1/u-1/1 c1/u-1/running@2026-11-21T10:00:00Z",
            "c1/u-1/2 c1/u-1/running@rv=2",
        ]
    );

    let carrier = fleet_event(FleetEventKind::ClusterOffline, "east", None).into_job_event(3);
    match older.handle(&carrier).await {
        Err(CallError::GiveUp(reason)) => {
            assert!(reason.contains(&carrier.id), "{reason}");
            assert!(reason.contains("jobrelay:plugin@0.2.0"), "{reason}");
            assert!(reason.contains("no handle-fleet"), "{reason}");
        }
        other => panic!("expected GiveUp, got {other:?}"),
    }
    assert_eq!(lines(&dir.path().join("older.txt")).len(), 2);

    // The same for the oldest world.
    let noop = rt
        .load(spec("noop", "noop", Grants::default()))
        .await
        .expect("a 0.1.0 plugin loads");
    assert_eq!(noop.package(), "jobrelay:plugin@0.1.0");
    assert!(!noop.takes_fleet_events());
    match noop.handle(&carrier).await {
        Err(CallError::GiveUp(reason)) => {
            assert!(reason.contains("jobrelay:plugin@0.1.0"), "{reason}");
        }
        other => panic!("expected GiveUp, got {other:?}"),
    }
}

/// A job's story reaches a plugin through `story.get` (the WIT's `story` interface): event-log
/// writes what it gets, field for field as the host holds it; an event without a story
/// gets `none`, and the line has no `story`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_reads_its_events_story_through_the_story_interface() {
    use jobrelay_contract::story::{
        Counts, FailureCause, Preemption, QueueState, Story, WorkloadFacts,
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime();
    let plugin = rt
        .load(spec("event-log", "event-log", data_grant(dir.path())))
        .await
        .expect("event-log loads");
    let mut told = event(200, None);
    told.story = Some(Arc::new(Story {
        workload: Some(WorkloadFacts {
            job_uid: None,
            state: QueueState::Evicted {
                reason: "Preempted".into(),
                message: "Preempted to accommodate a workload (UID: w-9) due to reclamation".into(),
                preempted: Some(Preemption {
                    reason: "InCohortReclamation".into(),
                    message: "<@U999> [x](http://evil.example)".into(),
                }),
            },
            cluster_queue: Some("gpu".into()),
            local_queue: Some("team-a".into()),
            waiting_since: chrono::DateTime::parse_from_rfc3339("2026-12-02T10:00:00Z").ok(),
            admitted_at: None,
            evicted_at: None,
            past_execution_seconds: 3595,
            evictions: Counts::from([("Preempted".into(), 2)]),
            requeues: 2,
            accelerators: Counts::from([("nvidia.com/gpu".into(), 8)]),
        }),
        failure: Some(FailureCause {
            container: "trainer".into(),
            init: false,
            reason: "CrashLoopBackOff".into(),
            exit_code: Some(137),
            last_reason: Some("OOMKilled".into()),
            message: None,
        }),
    }));
    plugin.handle(&told).await.expect("told");
    plugin.handle(&event(201, None)).await.expect("untold");
    let all = lines(&dir.path().join("events.jsonl"));
    let line: serde_json::Value = serde_json::from_str(&all[0]).expect("json line");
    assert_eq!(
        line["story"],
        serde_json::json!({
            "workload": {
                "state": "evicted",
                "reason": "Preempted",
                "message": "Preempted to accommodate a workload (UID: w-9) due to reclamation",
                "preempted": {"reason": "InCohortReclamation",
                              "message": "<@U999> [x](http://evil.example)"},
                "cluster_queue": "gpu",
                "local_queue": "team-a",
                "waiting_since": "2026-12-02T10:00:00+00:00",
                "admitted_at": null,
                "past_execution_seconds": 3595,
                "evictions": {"Preempted": 2},
                "requeues": 2,
                "accelerators": {"nvidia.com/gpu": 8},
            },
            "failure": {
                "container": "trainer",
                "init": false,
                "reason": "CrashLoopBackOff",
                "exit_code": 137,
                "last_reason": "OOMKilled",
                "message": null,
            },
        })
    );
    let untold: serde_json::Value = serde_json::from_str(&all[1]).expect("json line");
    assert!(
        untold.get("story").is_none(),
        "no story, no field: {untold}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_log_refuses_unknown_config_and_retries_on_io_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime();
    let mut s = spec("event-log", "event-log", data_grant(dir.path()));
    s.config.insert("fiel".into(), "typo.jsonl".into());
    let err = rt.load(s).await.expect_err("unknown key refused");
    assert!(matches!(err, LoadError::InitRefused { .. }), "{err}");
    assert!(err.to_string().contains("fiel"), "{err}");

    // A read-only grant: the append fails, which the plugin reports as retryable.
    let mut s = spec("event-log", "event-log", data_grant(dir.path()));
    s.grants.filesystem[0].writable = false;
    let plugin = rt.load(s).await.expect("loads");
    match plugin.handle(&event(1, None)).await {
        Err(CallError::Retry(msg)) => assert!(msg.contains("events.jsonl"), "{msg}"),
        other => panic!("expected Retry, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misbehaving_calls_fail_alone() {
    let bad_dir = tempfile::tempdir().expect("tempdir");
    let good_dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime();
    let bad = load_probe(&rt, bad_dir.path(), "bad").await;
    let good = rt
        .load(spec("event-log", "event-log", data_grant(good_dir.path())))
        .await
        .expect("event-log loads");

    // Normal traffic of another plugin version while the probe misbehaves.
    let traffic = {
        let good = good.clone();
        tokio::spawn(async move {
            let mut results = Vec::new();
            for rv in 0..40 {
                results.push(good.handle(&event(rv, None)).await);
                tokio::task::yield_now().await;
            }
            results
        })
    };

    let mut rv = 1000;
    for behave in ["trap", "loop", "oom", "trap"] {
        rv += 1;
        let result = bad.handle(&event(rv, Some(behave))).await;
        match (behave, &result) {
            ("trap", Err(CallError::Trap(msg))) => {
                assert!(msg.contains("probe was asked to trap"), "{msg}");
            }
            ("loop", Err(CallError::Timeout(limit))) => {
                assert_eq!(*limit, Duration::from_millis(200));
            }
            ("oom", Err(CallError::MemoryLimit { limit_bytes })) => {
                assert_eq!(*limit_bytes, 16 * MIB);
            }
            _ => panic!("{behave}: unexpected result {result:?}"),
        }
        assert!(result.as_ref().err().is_some_and(CallError::is_retryable));
        // The same version handles the next event normally.
        rv += 1;
        bad.handle(&event(rv, None))
            .await
            .unwrap_or_else(|e| panic!("normal event after {behave}: {e}"));
    }

    let results = traffic.await.expect("traffic task");
    assert_eq!(results.len(), 40);
    for r in &results {
        assert!(r.is_ok(), "{r:?}");
    }
    assert_eq!(lines(&good_dir.path().join("events.jsonl")).len(), 40);
    // The probe recorded exactly the normal events.
    assert_eq!(lines(&bad_dir.path().join("probe.jsonl")).len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_of_one_version_are_isolated() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime();
    let probe = load_probe(&rt, dir.path(), "conc").await;
    let mut tasks = Vec::new();
    for rv in 0..24u32 {
        let probe = probe.clone();
        let behave = match rv % 4 {
            0 => Some("trap"),
            1 => Some("oom"),
            _ => None,
        };
        tasks.push(tokio::spawn(async move {
            (behave, probe.handle(&event(rv, behave)).await)
        }));
    }
    let mut ok = 0;
    for task in tasks {
        let (behave, result) = task.await.expect("task");
        match behave {
            None => {
                assert!(result.is_ok(), "{result:?}");
                ok += 1;
            }
            Some("trap") => assert!(matches!(result, Err(CallError::Trap(_))), "{result:?}"),
            Some(_) => assert!(
                matches!(result, Err(CallError::MemoryLimit { .. })),
                "{result:?}"
            ),
        }
    }
    assert_eq!(lines(&dir.path().join("probe.jsonl")).len(), ok);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_and_give_up_map_to_call_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime();
    let probe = load_probe(&rt, dir.path(), "answers").await;
    let retry = probe.handle(&event(1, Some("retry"))).await;
    assert_eq!(
        retry,
        Err(CallError::Retry("probe was asked to retry".into()))
    );
    assert!(retry.as_ref().err().is_some_and(CallError::is_retryable));
    let give_up = probe.handle(&event(2, Some("giveup"))).await;
    assert_eq!(
        give_up,
        Err(CallError::GiveUp("probe was asked to give up".into()))
    );
    assert!(!give_up.as_ref().err().is_some_and(CallError::is_retryable));
    // Nothing was recorded for either.
    assert!(lines(&dir.path().join("probe.jsonl")).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_but_in_time_calls_succeed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime();
    let mut s = spec("probe", "probe", data_grant(dir.path()));
    s.timeout = Duration::from_secs(10);
    let probe = rt.load(s).await.expect("loads");
    probe
        .handle(&event(1, Some("sleep-ms:50")))
        .await
        .expect("a slow call within its limit succeeds");
    assert_eq!(lines(&dir.path().join("probe.jsonl")).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chatty_plugin_is_throttled_not_failed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime();
    let mut s = spec("probe", "probe", data_grant(dir.path()));
    s.timeout = Duration::from_secs(10);
    let probe = rt.load(s).await.expect("loads");
    probe
        .handle(&event(1, Some("spam")))
        .await
        .expect("1 MiB of output and 2,000 log lines do not fail the call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_world_corrupt_bytes_and_refused_init_fail_the_load() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime();

    let err = rt
        .load(spec("cmd-plugin", "not-a-plugin", Grants::default()))
        .await
        .expect_err("a command is not a plugin");
    assert!(matches!(err, LoadError::WrongWorld { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("cmd-plugin"), "{text}");
    assert!(
        text.contains("`init`") && text.contains("`handle`"),
        "{text}"
    );

    let mut corrupt = spec("broken", "probe", Grants::default());
    corrupt.wasm = Arc::from(&corrupt.wasm[..corrupt.wasm.len() / 2]);
    let err = rt.load(corrupt).await.expect_err("truncated bytes");
    assert!(matches!(err, LoadError::Compile { .. }), "{err}");
    assert!(err.to_string().contains("broken"), "{err}");

    let mut garbage = spec("garbage", "probe", Grants::default());
    garbage.wasm = Arc::from(&b"definitely not wasm"[..]);
    let err = rt.load(garbage).await.expect_err("not wasm");
    assert!(matches!(err, LoadError::Compile { .. }), "{err}");
    let cause = std::error::Error::source(&err).map(ToString::to_string);
    assert!(
        cause
            .as_deref()
            .is_some_and(|c| !c.is_empty() && err.to_string().ends_with(c)),
        "wasmtime's refusal is the error's source: {err:?}"
    );

    let mut refused = spec("picky", "probe", data_grant(dir.path()));
    refused.config.insert("fail_init".into(), "true".into());
    let err = rt.load(refused).await.expect_err("init refuses");
    assert!(matches!(err, LoadError::InitRefused { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("picky"), "{text}");
    assert!(text.contains("fail_init=true"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_and_grants_are_checked_at_load() {
    let rt = runtime();
    let mut s = spec("greedy", "probe", Grants::default());
    s.memory_bytes = 65 * MIB; // the test runtime's ceiling is 64 MiB
    let err = rt.load(s).await.expect_err("above the ceiling");
    assert!(matches!(err, LoadError::Limits { .. }), "{err}");
    assert!(err.to_string().contains("greedy"), "{err}");

    // Below the component's own initial memory: no instance can even be created.
    let mut s = spec("tiny", "probe", Grants::default());
    s.memory_bytes = 512 * 1024;
    let err = rt
        .load(s)
        .await
        .expect_err("initial memory above the limit");
    assert!(err.to_string().contains("memory limit"), "{err}");

    let mut s = spec("slow", "probe", Grants::default());
    s.timeout = Duration::from_secs(24 * 3600);
    let err = rt.load(s).await.expect_err("absurd time limit");
    assert!(matches!(err, LoadError::Limits { .. }), "{err}");

    let mut s = spec("relative", "probe", Grants::default());
    s.grants = data_grant(Path::new("not/absolute"));
    let err = rt.load(s).await.expect_err("relative host path");
    assert!(matches!(err, LoadError::Grant { .. }), "{err}");
    assert!(err.to_string().contains("relative"), "{err}");

    let mut s = spec("sha", "probe", Grants::default());
    s.wasm_sha256 = "00".repeat(32);
    let err = rt.load(s).await.expect_err("sha mismatch");
    assert!(matches!(err, LoadError::Compile { .. }), "{err}");
    assert!(
        matches!(
            &err,
            LoadError::Compile {
                source: CompileError::Sha256Mismatch { .. },
                ..
            }
        ),
        "the cause is kept as a typed source: {err:?}"
    );

    // A granted directory that does not exist yet is created.
    let dir = tempfile::tempdir().expect("tempdir");
    let nested = dir.path().join("a/b/c");
    let probe = rt
        .load(spec("nested", "probe", data_grant(&nested)))
        .await
        .expect("loads");
    probe.handle(&event(1, None)).await.expect("writes");
    assert_eq!(lines(&nested.join("probe.jsonl")).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_sees_only_its_grant() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("inside.txt"), b"hello").expect("write");
    let outside = tempfile::tempdir().expect("tempdir");
    std::fs::write(outside.path().join("secret.txt"), b"secret").expect("write");
    let rt = runtime();
    let probe = load_probe(&rt, dir.path(), "fs").await;

    let read = |path: String| {
        let probe = probe.clone();
        async move {
            match probe.handle(&event(1, Some(&format!("read:{path}")))).await {
                Err(CallError::GiveUp(msg)) => msg,
                other => panic!("expected the probe's give-up answer, got {other:?}"),
            }
        }
    };

    let msg = read("/data/inside.txt".into()).await;
    assert!(msg.starts_with("read succeeded: 5 bytes"), "{msg}");

    for path in [
        "/etc/hostname".to_string(),
        "/etc/passwd".to_string(),
        "/data/../etc/passwd".to_string(),
        outside.path().join("secret.txt").display().to_string(),
        "secret.txt".to_string(),
    ] {
        let msg = read(path.clone()).await;
        assert!(msg.starts_with("read failed"), "{path}: {msg}");
    }

    // No grant at all: even the would-be data folder is unreachable.
    let mut s = spec("probe-nofs", "probe", Grants::default());
    s.version = "nofs".into();
    let bare = rt.load(s).await.expect("loads");
    match bare.handle(&event(2, None)).await {
        Err(CallError::Retry(msg)) => assert!(msg.contains("/data/probe.jsonl"), "{msg}"),
        other => panic!("expected Retry, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_grant_refuses_writes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime();
    let mut s = spec("probe", "probe", data_grant(dir.path()));
    s.grants.filesystem[0].writable = false;
    let probe = rt.load(s).await.expect("loads");
    assert!(matches!(
        probe.handle(&event(1, None)).await,
        Err(CallError::Retry(_))
    ));
    assert!(!dir.path().join("probe.jsonl").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compiled_components_are_cached_in_memory_and_on_disk() {
    let cache = tempfile::tempdir().expect("tempdir");
    let data = tempfile::tempdir().expect("tempdir");
    let settings = RuntimeSettings {
        max_instances: 16,
        max_memory_mb: 64,
        cache_dir: Some(cache.path().join("cwasm")),
        ..RuntimeSettings::default()
    };

    let first = Runtime::new(settings.clone()).expect("runtime");
    let v1 = first
        .load(spec("probe", "probe", data_grant(data.path())))
        .await
        .expect("loads");
    assert_eq!(v1.source(), ComponentSource::Compiled);
    let file = first.cache_file(v1.wasm_sha256()).expect("disk cache on");
    assert!(file.is_file(), "{} written", file.display());

    // A manifest-only change (new version id, new config) reuses the compiled code.
    let mut changed = spec("probe", "probe", data_grant(data.path()));
    changed.version = "probe-v2".into();
    changed.config.insert("any".into(), "thing".into());
    let v2 = first.load(changed).await.expect("loads");
    assert_eq!(v2.source(), ComponentSource::MemoryCache);
    assert_eq!(first.cache_stats().compiled, 1);

    // A new runtime (a restart) finds the component on disk.
    let second = Runtime::new(settings.clone()).expect("runtime");
    let v3 = second
        .load(spec("probe", "probe", data_grant(data.path())))
        .await
        .expect("loads from disk");
    assert_eq!(v3.source(), ComponentSource::DiskCache);
    assert!(v3.from_cache());
    assert_eq!(second.cache_stats().disk_hits, 1);
    assert_eq!(second.cache_stats().compiled, 0);
    v3.handle(&event(1, None)).await.expect("cached code runs");

    // A damaged cache file is not trusted: it is rejected and rebuilt.
    let mut bytes = std::fs::read(&file).expect("read cache file");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&file, &bytes).expect("damage");
    let third = Runtime::new(settings).expect("runtime");
    let v4 = third
        .load(spec("probe", "probe", data_grant(data.path())))
        .await
        .expect("loads after recompiling");
    assert_eq!(v4.source(), ComponentSource::Compiled);
    assert_eq!(third.cache_stats().disk_rejected, 1);
    v4.handle(&event(2, None))
        .await
        .expect("recompiled code runs");
    let fourth_bytes = std::fs::read(&file).expect("rewritten");
    assert_ne!(fourth_bytes, bytes, "the damaged file was replaced");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_run_calls_a_plugin_once_from_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let event_file = dir.path().join("event.json");
    std::fs::write(
        &event_file,
        serde_json::to_vec(&event(7, None)).expect("json"),
    )
    .expect("write event");
    let manifest = dir.path().join("event-log.yaml");
    std::fs::write(
        &manifest,
        "wasm: ignored.wasm\ntimeout_ms: 2000\nmemory_mb: 32\nconfig:\n  file: run.jsonl\n\
         grants:\n  filesystem:\n    - host: out\n      guest: /data\n      writable: true\n",
    )
    .expect("write manifest");

    let outcome = plugin_run(&PluginRunArgs {
        manifest: Some(manifest),
        state_dir: None,
        ..PluginRunArgs::new(plugins_dir().join("event-log.wasm"), event_file.clone())
    })
    .await
    .expect("runs");
    assert!(outcome.is_ok(), "{outcome}");
    assert_eq!(outcome.status(), "ok");
    assert_eq!(outcome.plugin, "event-log");
    assert_eq!(lines(&dir.path().join("out/run.jsonl")).len(), 1);

    // Without a manifest the probe has no /data: its append fails and it asks to retry.
    let outcome = plugin_run(&PluginRunArgs {
        manifest: None,
        state_dir: None,
        ..PluginRunArgs::new(plugins_dir().join("probe.wasm"), event_file.clone())
    })
    .await
    .expect("runs");
    assert_eq!(outcome.status(), "retry", "{outcome}");

    // A plugin that needs SQL runs on the embedded connection of the given state folder.
    let manifest = dir.path().join("mysql-sync.yaml");
    std::fs::write(
        &manifest,
        "wasm: ignored.wasm
grants: {sql: [embedded]}
config: {connection: embedded}
",
    )
    .expect("write manifest");
    let state = dir.path().join("run-state");
    let outcome = plugin_run(&PluginRunArgs {
        manifest: Some(manifest),
        state_dir: Some(state.clone()),
        ..PluginRunArgs::new(plugins_dir().join("mysql-sync.wasm"), event_file)
    })
    .await
    .expect("runs");
    assert!(outcome.is_ok(), "{outcome}");
    let db = sqlx::SqlitePool::connect(&format!(
        "sqlite://{}",
        state.join("embedded/mysql-sync.db").display()
    ))
    .await
    .expect("the embedded database exists");
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM jobs")
        .fetch_one(&db)
        .await
        .expect("the jobs table exists");
    assert_eq!(rows, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_instance_pool_fails_calls_with_a_retryable_host_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = Runtime::new(RuntimeSettings {
        max_instances: 2,
        max_memory_mb: 64,
        ..RuntimeSettings::default()
    })
    .expect("runtime");
    let probe = load_probe(&rt, dir.path(), "pool").await;
    let mut tasks = Vec::new();
    for rv in 0..6 {
        let probe = probe.clone();
        tasks.push(tokio::spawn(async move {
            probe.handle(&event(rv, Some("sleep-ms:150"))).await
        }));
    }
    let mut ok = 0;
    for task in tasks {
        match task.await.expect("task") {
            Ok(()) => ok += 1,
            Err(CallError::Host(msg)) => {
                assert!(msg.contains("limit"), "{msg}");
                assert!(CallError::Host(msg).is_retryable());
            }
            Err(other) => panic!("only the pool may refuse a call, got {other:?}"),
        }
    }
    assert!(ok >= 1);
    // The pool recovers: instances are returned when calls end.
    probe
        .handle(&event(99, None))
        .await
        .expect("a call after the burst");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reused_instances_serve_a_bounded_number_of_calls_and_retire_on_failure() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime();
    let calls_per_line = |path: &Path| -> Vec<u64> {
        lines(path)
            .iter()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).expect("json line");
                v["instance_calls"].as_u64().expect("instance_calls")
            })
            .collect()
    };
    let out = dir.path().join("probe.jsonl");

    // Default: a fresh instance for every event.
    let fresh = load_probe(&rt, dir.path(), "fresh").await;
    for rv in 1..=3 {
        fresh.handle(&event(rv, None)).await.expect("handled");
    }
    assert_eq!(calls_per_line(&out), vec![1, 1, 1]);
    std::fs::remove_file(&out).expect("reset");

    // Reuse for 3 calls: one instance serves three events, then a new one takes over.
    let mut s = spec("probe", "probe", data_grant(dir.path()));
    s.version = "reused".into();
    s.instance_reuse = 3;
    let reused = rt.load(s).await.expect("probe loads");
    for rv in 1..=5 {
        reused.handle(&event(rv, None)).await.expect("handled");
    }
    assert_eq!(calls_per_line(&out), vec![1, 2, 3, 1, 2]);

    // A failure retires the instance: the next event gets a fresh one.
    match reused.handle(&event(6, Some("trap"))).await {
        Err(CallError::Trap(_)) => {}
        other => panic!("expected a trap, got {other:?}"),
    }
    reused.handle(&event(7, None)).await.expect("handled");
    match reused.handle(&event(8, Some("giveup"))).await {
        Err(CallError::GiveUp(_)) => {}
        other => panic!("expected a give-up, got {other:?}"),
    }
    reused.handle(&event(9, None)).await.expect("handled");
    assert_eq!(calls_per_line(&out), vec![1, 2, 3, 1, 2, 1, 1]);

    // A kept instance still obeys the time limit on its next call.
    let mut s = spec("probe", "probe", data_grant(dir.path()));
    s.version = "reused-slow".into();
    s.instance_reuse = 10;
    s.timeout = Duration::from_millis(200);
    let slow = rt.load(s).await.expect("probe loads");
    slow.handle(&event(10, None)).await.expect("handled");
    match slow.handle(&event(11, Some("loop"))).await {
        Err(CallError::Timeout(_)) => {}
        other => panic!("expected a timeout, got {other:?}"),
    }
}

/// 0.2.2 gave `phase` the cases `queued` and `preempted`. A current plugin (`event-log`) gets
/// them as they are; one built against 0.2.1 (`before-queued`) still loads — its imports link
/// to the 0.2.2 definitions by semver, its exports are bound with its own nine-case `phase` —,
/// still takes fleet events, and is given `pending` for `queued` and `suspended` for
/// `preempted`, in `phase` and `previous-phase` alike; every other phase as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_phases_reach_current_plugins_and_older_ones_get_the_phases_they_know() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime();
    let mut queued = event(1, None);
    queued.phase = Phase::Queued;
    queued.previous_phase = Some(Phase::Preempted);
    queued.transition_key = "c1/u-1/queued@2026-12-07T10:00:00Z".into();

    let mut s = spec("event-log", "event-log", data_grant(dir.path()));
    s.config.insert("file".into(), "jobs.jsonl".into());
    let current = rt.load(s).await.expect("event-log loads");
    assert_eq!(current.package(), "jobrelay:plugin@0.2.2");
    current.handle(&queued).await.expect("handled");
    let logged: serde_json::Value = serde_json::from_str(
        &lines(&dir.path().join("jobs.jsonl"))
            .first()
            .cloned()
            .expect("a line"),
    )
    .expect("JSON");
    assert_eq!(logged["phase"], "queued");
    assert_eq!(logged["previous_phase"], "preempted");
    assert_eq!(
        logged["transition_key"],
        "c1/u-1/queued@2026-12-07T10:00:00Z"
    );

    let inspected = rt.inspect(wasm("before-queued")).await.expect("inspects");
    assert_eq!(inspected.world.ok(), Some("jobrelay:plugin@0.2.1"));
    let older = rt
        .load(spec(
            "before-queued",
            "before-queued",
            data_grant(dir.path()),
        ))
        .await
        .expect("a 0.2.1 plugin loads");
    assert_eq!(older.package(), "jobrelay:plugin@0.2.1");
    assert!(older.takes_fleet_events());
    older.handle(&queued).await.expect("handled");
    let mut preempted = event(2, None);
    preempted.phase = Phase::Preempted;
    preempted.previous_phase = Some(Phase::Running);
    preempted.transition_key = "c1/u-1/preempted@2026-12-07T11:30:00Z".into();
    older.handle(&preempted).await.expect("handled");
    older.handle(&event(3, None)).await.expect("handled");
    let offline = fleet_event(FleetEventKind::ClusterOffline, "east", None).into_job_event(4);
    older.handle(&offline).await.expect("a fleet event handled");
    assert_eq!(
        lines(&dir.path().join("before-queued.txt")),
        [
            "c1/u-1/1 pending suspended c1/u-1/queued@2026-12-07T10:00:00Z".to_string(),
            "c1/u-1/2 suspended running c1/u-1/preempted@2026-12-07T11:30:00Z".to_string(),
            "c1/u-1/3 running pending c1/u-1/running@rv=3".to_string(),
            format!("fleet {}", offline.id),
        ]
    );
}
