//! `webhook-notify`, the shipped Python sink, in the daemon: the component componentize-py built
//! from `plugins/webhook-notify/` (its stdlib signing and JSON included) is loaded like any
//! plugin, takes the transitions of jobs on the simulator and posts them through `wasi:http`
//! to the test kit's webhook receiver, which checks the CloudEvents HTTP binding and the
//! Standard Webhooks signatures.
//!
//! One daemon serves five manifests of the one component, each filtered to its own namespace
//! and posting to its own hook, so the 18 MB component is compiled once for every case:
//! structured and signed, binary with a template, throttled then delivered, refused for a
//! wrong secret, and a destination the manifest does not grant (both given up, dead-lettered).
//!
//! And bodies of any size, through the runtime alone: the job's message as the whole body
//! (binary mode, a `${message}` text template) at 0, 4,095, 4,096, 4,097 bytes, 64 KiB and
//! 1 MiB, and a real-sized job object with `include_object`, each checked byte for byte with its
//! `content-length` by a local receiver.

use std::time::{Duration, Instant};

use base64::Engine as _;
use jobrelay::daemon::Daemon;
use jobrelay_state::{StateBackend, open_store};
use jobrelay_testkit::chat::{ChatReceiver, Provider, Received};
use jobrelay_testkit::{Flavor, JobDriver, SimCluster};
use serde_json::{Value, json};

use crate::common::plugins_dir;
use crate::process::write;

/// Loading compiles the component (tens of seconds for a debug host, more beside a build).
const LOAD_DEADLINE: Duration = Duration::from_secs(600);
/// Anything else the daemon should do "soon".
const DEADLINE: Duration = Duration::from_secs(90);

const SECRET: &str = "a-shared-signing-secret";
const WRONG_SECRET: &str = "not-the-shared-secret";

/// The config folder: cluster `alpha` on `sim`, PyTorchJobs watched, one manifest per case.
fn folder(sim: &SimCluster, manifests: &[(&str, String)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let plugins = plugins_dir();
    assert!(
        plugins.join("webhook-notify.wasm").is_file(),
        "{} has no webhook-notify.wasm: run plugins/build.sh",
        plugins.display()
    );
    // Compiled code kept across runs of this test, under its own folder in target/.
    let cache = plugins.join("../test-cache/webhook-notify");
    write(
        &root.join("jobrelay.yaml"),
        &format!(
            "plugin_dir: {}\nstate: {{path: state/jobrelay.db}}\ndebounce_ms: 100\n\
             rescan_seconds: 2\nruntime: {{cache_dir: {}}}\nkinds:\n  - {{name: pytorch-job}}\n",
            plugins.display(),
            cache.display()
        ),
    );
    write(&root.join("clusters/alpha.yaml"), &sim.kubeconfig_yaml());
    for (name, manifest) in manifests {
        write(&root.join(format!("plugins/{name}.yaml")), manifest);
    }
    dir
}

/// A manifest of webhook-notify taking the jobs of namespace `name`, with `config` lines.
fn manifest(name: &str, config: &[(&str, &str)]) -> String {
    manifest_granting(name, "http://127.0.0.1:*", config)
}

/// [`manifest`] with `allow` as the one origin of `grants.http.allow`.
fn manifest_granting(name: &str, allow: &str, config: &[(&str, &str)]) -> String {
    let mut text = format!(
        "wasm: webhook-notify.wasm\ndelivery: transitions\ntimeout_ms: 20000\nmemory_mb: 64\n\
         instance_reuse: 16\nretry: {{max_attempts: 8, min_delay_ms: 200, max_delay_ms: 1000}}\n\
         filter: {{namespaces: [{name}]}}\n\
         grants:\n  http: {{allow: [\"{allow}\"], allow_private: true}}\nconfig:\n"
    );
    for (key, value) in config {
        // Single-quoted YAML: only a quote itself needs doubling.
        text.push_str(&format!("  {key}: '{}'\n", value.replace('\'', "''")));
    }
    text
}

async fn wait_until<T>(what: &str, deadline: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(started.elapsed() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn lane(daemon: &Daemon, plugin: &str) -> jobrelay_lanes::lane::LaneStats {
    daemon.plugins()[plugin]
        .lane
        .clone()
        .expect("the plugin has a lane")
}

fn job(sim: &SimCluster, namespace: &str, name: &str) -> JobDriver {
    JobDriver::builder(Flavor::PyTorch, namespace, name)
        .workers(1)
        .without_pods()
        .create(sim)
        .expect("job created")
}

/// Waits for `token`'s `n`-th accepted message.
async fn messages(hooks: &ChatReceiver, token: &str, n: usize) -> Vec<Received> {
    hooks
        .wait_for_messages(token, n, DEADLINE)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"))
}

fn header<'a>(message: &'a Received, name: &str) -> &'a str {
    message
        .header(name)
        .unwrap_or_else(|| panic!("no {name} header in {:?}", message.headers))
}

fn phases(events: &[Received]) -> Vec<String> {
    events
        .iter()
        .map(|m| {
            m.body["data"]["phase"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloudevents_signed_templated_retried_and_refused() {
    let sim = SimCluster::start("alpha").await.expect("simulator");
    let hooks = ChatReceiver::start(Provider::Webhook)
        .await
        .expect("receiver");
    let signed_url = hooks.add_bot("signed-hook", Some(SECRET));
    // A `whsec_` secret: the key is the base64-decoded part.
    let raw_key = b"\x00\x01binary key bytes\xfe\xff";
    let whsec = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(raw_key)
    );
    let binary_url = hooks.add_bot("binary-hook", Some(&whsec));
    let throttled_url = hooks.add_bot("throttled-hook", None);
    let wrong_url = hooks.add_bot("wrong-hook", Some(SECRET));
    let ungranted_url = hooks.add_bot("ungranted-hook", None);
    let template = r#"{"text": "${kind} ${namespace}/${name} is ${phase}", "why": "${reason}", "said": "${message}", "id": "${id}", "key": "${transition_key}"}"#;
    let dir = folder(
        &sim,
        &[
            (
                "signed",
                manifest("signed", &[("url", &signed_url), ("secret", SECRET)]),
            ),
            (
                "binary",
                manifest(
                    "binary",
                    &[
                        ("url", &binary_url),
                        ("secret", &whsec),
                        ("mode", "binary"),
                        ("phases", "failed"),
                        ("template", template),
                        ("source", "urn:jobrelay:${cluster}:${namespace}"),
                    ],
                ),
            ),
            (
                "throttled",
                manifest("throttled", &[("url", &throttled_url)]),
            ),
            (
                "wrong",
                manifest("wrong", &[("url", &wrong_url), ("secret", WRONG_SECRET)]),
            ),
            (
                "ungranted",
                manifest_granting(
                    "ungranted",
                    "https://hooks.example.com",
                    &[("url", &ungranted_url)],
                ),
            ),
        ],
    );
    let root = dir.path();
    let daemon = Daemon::start(root).await.expect("daemon starts");
    wait_until("cluster alpha synced", DEADLINE, || {
        daemon
            .clusters()
            .get("alpha")
            .is_some_and(|h| h.state == jobrelay::clusters::health::HealthState::Synced)
            .then_some(())
    })
    .await;
    for plugin in ["signed", "binary", "throttled", "wrong", "ungranted"] {
        wait_until(&format!("plugin {plugin} serving"), LOAD_DEADLINE, || {
            let status = daemon.plugins().get(plugin).cloned()?;
            if let Some(reload) = status.last_reload.as_ref().filter(|r| !r.ok) {
                panic!("{plugin} did not load: {:?}", reload.error);
            }
            status.serving
        })
        .await;
    }

    // (1) Structured mode with a secret: one signed CloudEvent per transition, running twice.
    let mut signed = job(&sim, "signed", "train-signed");
    let uid = signed.uid().to_string();
    messages(&hooks, "signed-hook", 1).await;
    signed.running().expect("running");
    messages(&hooks, "signed-hook", 2).await;
    signed.restarting().expect("restarting");
    messages(&hooks, "signed-hook", 3).await;
    signed.running().expect("running again");
    messages(&hooks, "signed-hook", 4).await;
    signed.failed("OOMKilled").expect("failed");
    messages(&hooks, "signed-hook", 5).await;
    signed.delete().expect("deleted");
    let events = messages(&hooks, "signed-hook", 6).await;
    assert_eq!(
        phases(&events),
        [
            "pending",
            "running",
            "restarting",
            "running",
            "failed",
            "deleted"
        ]
    );
    let mut keys = Vec::new();
    for event in &events {
        let body = &event.body;
        let data = &body["data"];
        let phase = data["phase"].as_str().expect("a phase");
        assert!(event.signed, "the receiver verified the signature: {body}");
        assert_eq!(
            header(event, "content-type"),
            "application/cloudevents+json"
        );
        assert_eq!(body["specversion"], "1.0");
        assert_eq!(body["type"], format!("io.jobrelay.job.{phase}"), "{body}");
        assert_eq!(body["subject"], "signed/train-signed");
        assert_eq!(body["source"], "/jobrelay/alpha");
        assert_eq!(body["datacontenttype"], "application/json");
        assert_eq!(body["id"], data["id"]);
        assert_eq!(
            header(event, "webhook-id"),
            data["id"].as_str().expect("id")
        );
        assert_eq!(body["time"], data["transition_time"]);
        assert_eq!(body["transitionkey"], data["transition_key"]);
        assert_eq!(data["uid"], uid.as_str());
        assert_eq!(data["cluster"], "alpha");
        assert_eq!(data["kind"], "PyTorchJob");
        assert!(
            data.get("object").is_none(),
            "no object unless asked: {data}"
        );
        let key = body["transitionkey"].as_str().expect("a key").to_string();
        let expected = match phase {
            "pending" => format!("alpha/{uid}/pending@created"),
            "deleted" => format!("alpha/{uid}/deleted"),
            _ => format!("alpha/{uid}/{phase}@"),
        };
        assert!(key.starts_with(&expected), "{key} for {phase}");
        keys.push(key);
    }
    let mut distinct = keys.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), keys.len(), "one key per stay: {keys:?}");
    assert_eq!(events[4].body["data"]["reason"], "OOMKilled");
    assert_eq!(events[4].body["data"]["previous_phase"], "running");

    // (2) Binary mode with a template, only `failed`: ce-* headers and the rendered data.
    let mut binary = job(&sim, "binary", "train-binary");
    binary.running().expect("running");
    binary.failed("OOMKilled").expect("failed");
    let events = messages(&hooks, "binary-hook", 1).await;
    let event = &events[0];
    assert!(event.signed, "signed with the whsec_ key");
    assert_eq!(
        event.cloudevents_mode(),
        Some(jobrelay_testkit::chat::webhook::Mode::Binary)
    );
    assert_eq!(header(event, "content-type"), "application/json");
    assert_eq!(header(event, "ce-specversion"), "1.0");
    assert_eq!(header(event, "ce-type"), "io.jobrelay.job.failed");
    assert_eq!(header(event, "ce-subject"), "binary/train-binary");
    assert_eq!(header(event, "ce-source"), "urn:jobrelay:alpha:binary");
    assert!(
        chrono::DateTime::parse_from_rfc3339(header(event, "ce-time")).is_ok(),
        "{:?}",
        event.headers
    );
    let id = header(event, "ce-id");
    assert_eq!(header(event, "webhook-id"), id);
    assert!(id.starts_with(&format!("alpha/{}/", binary.uid())), "{id}");
    let key = header(event, "ce-transitionkey");
    assert!(
        key.starts_with(&format!("alpha/{}/failed@", binary.uid())),
        "{key}"
    );
    let said = event.body["said"]
        .as_str()
        .expect("the message, escaped into a string");
    assert_eq!(
        event.body,
        json!({
            "text": "PyTorchJob binary/train-binary is failed",
            "why": "OOMKilled",
            "said": said,
            "id": id,
            "key": key,
        })
    );
    // The later deletion is not in `phases`: handled, nothing sent.
    binary.delete().expect("deleted");

    // (3) Throttled three times (HTTP 429, `Retry-After: 1`): deferred, then delivered in order,
    // nothing lost or doubled.
    let mut throttled = job(&sim, "throttled", "train-throttled");
    messages(&hooks, "throttled-hook", 1).await;
    hooks.throttle_next("throttled-hook", 3);
    throttled.running().expect("running");
    throttled.succeeded().expect("succeeded");
    let events = messages(&hooks, "throttled-hook", 3).await;
    assert_eq!(phases(&events), ["pending", "running", "succeeded"]);
    let refusals = hooks.refusals("throttled-hook");
    assert_eq!(refusals.len(), 3, "{refusals:?}");
    assert!(refusals.iter().all(|r| r.contains("429")), "{refusals:?}");
    assert_eq!(hooks.attempts("throttled-hook"), 6, "3 refused, 3 accepted");
    let ids: Vec<&Value> = events.iter().map(|e| &e.body["id"]).collect();
    assert!(ids[0] != ids[1] && ids[1] != ids[2], "{ids:?}");
    assert!(
        events
            .iter()
            .all(|e| !e.signed && e.header("webhook-signature").is_none())
    );

    // (4) A wrong secret: the receiver refuses (401), the plugin gives up, the host
    // dead-letters each event at once — no retry, nothing accepted.
    let mut wrong = job(&sim, "wrong", "train-wrong");
    wait_until("the first dead letter", DEADLINE, || {
        (lane(&daemon, "wrong").dead_lettered >= 1).then_some(())
    })
    .await;
    wrong.running().expect("running");
    wait_until("the second dead letter", DEADLINE, || {
        (lane(&daemon, "wrong").dead_lettered >= 2).then_some(())
    })
    .await;
    assert!(hooks.messages("wrong-hook").is_empty());
    let refusals = hooks.refusals("wrong-hook");
    assert_eq!(refusals.len(), 2, "{refusals:?}");
    assert!(
        refusals
            .iter()
            .all(|r| r.starts_with("HTTP 401: bad signature")),
        "{refusals:?}"
    );

    // (5) A destination the manifest does not grant: the host refuses the request, the
    // plugin gives up saying what to grant; nothing reaches the receiver.
    job(&sim, "ungranted", "train-ungranted");
    wait_until("the refused event's dead letter", DEADLINE, || {
        (lane(&daemon, "ungranted").dead_lettered >= 1).then_some(())
    })
    .await;
    assert_eq!(hooks.attempts("ungranted-hook"), 0);

    daemon.idle().await;
    let stats = lane(&daemon, "throttled");
    assert_eq!(
        (
            stats.delivered,
            stats.deferred,
            stats.retried,
            stats.failed_calls,
            stats.dead_lettered
        ),
        (3, 3, 0, 0, 0),
        "a 429 is deferred for its Retry-After, not failed: {stats:?}"
    );
    let stats = lane(&daemon, "wrong");
    assert_eq!((stats.retried, stats.dead_lettered), (0, 2), "{stats:?}");
    assert_eq!(hooks.attempts("wrong-hook"), 2, "a refusal is not retried");
    assert_eq!(
        hooks.messages("binary-hook").len(),
        1,
        "only `failed` is posted"
    );
    assert_eq!(
        hooks.attempts("signed-hook"),
        6,
        "no request refused or sent twice"
    );
    daemon.shutdown(Duration::from_secs(10)).await;

    let store = open_store(&StateBackend::Sqlite(root.join("state/jobrelay.db")))
        .await
        .expect("the state file");
    let letters = store
        .dead_letters(Some("wrong"))
        .await
        .expect("dead letters");
    assert_eq!(letters.len(), 2, "{letters:?}");
    for letter in &letters {
        assert_eq!(letter.event.namespace, "wrong");
        let error = &letter.error;
        assert!(
            error.contains("HTTP 401") && error.contains("bad signature"),
            "{error}"
        );
        assert!(error.contains("`secret`"), "says what to check: {error}");
        assert!(
            error.contains(&format!("http://{}", hooks.addr())),
            "{error}"
        );
        for hidden in [WRONG_SECRET, SECRET, "/hooks/", "wrong-hook"] {
            assert!(!error.contains(hidden), "{hidden} in {error}");
        }
    }
    let refused = store
        .dead_letters(Some("ungranted"))
        .await
        .expect("dead letters");
    assert_eq!(refused.len(), 1, "{refused:?}");
    let error = &refused[0].error;
    let origin = format!("http://{}", hooks.addr());
    assert!(
        error.contains("grants.http.allow") && error.contains(&format!("\"{origin}\"")),
        "says what to grant: {error}"
    );
    assert!(!error.contains("/hooks/"), "{error}");
    let others = store.dead_letters(None).await.expect("dead letters");
    assert!(
        others
            .iter()
            .all(|l| l.plugin == "wrong" || l.plugin == "ungranted"),
        "nothing else was given up: {others:?}"
    );
}

/// A real-sized PyTorchJob as the API server returns it: two replica specs with their
/// containers, environment, volumes and resources, the last-applied annotation that repeats the
/// spec, managed fields, and a status with conditions — tens of KB, like the objects of
/// `include_object` in production.
fn real_sized_object(name: &str) -> Value {
    let env: Vec<Value> = (0..60)
        .map(|n| json!({"name": format!("TRAINING_SETTING_{n:02}"), "value": format!("value-{n}-{}", "x".repeat(40))}))
        .collect();
    let replica = |role: &str, replicas: u32| {
        json!({
            "replicas": replicas,
            "restartPolicy": "OnFailure",
            "template": {
                "metadata": {"labels": {"team": "nlp", "role": role}},
                "spec": {
                    "containers": [{
                        "name": "pytorch",
                        "image": "registry.example.com/ml/llama-train:2026.11.3",
                        "command": ["torchrun", "--nnodes=8", "--nproc-per-node=8", "train.py"],
                        "args": (0..40).map(|n| format!("--option-{n}=value-{n}")).collect::<Vec<_>>(),
                        "env": env,
                        "resources": {"limits": {"nvidia.com/gpu": "8", "memory": "900Gi", "cpu": "96"}},
                        "volumeMounts": (0..12).map(|n| json!({"name": format!("data-{n}"), "mountPath": format!("/data/shard-{n}")})).collect::<Vec<_>>(),
                    }],
                    "volumes": (0..12).map(|n| json!({"name": format!("data-{n}"), "persistentVolumeClaim": {"claimName": format!("shard-{n}")}})).collect::<Vec<_>>(),
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                },
            },
        })
    };
    let spec = json!({
        "pytorchReplicaSpecs": {"Master": replica("master", 1), "Worker": replica("worker", 7)},
        "runPolicy": {"backoffLimit": 3, "cleanPodPolicy": "None"},
    });
    json!({
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": "u-object",
            "resourceVersion": "77",
            "labels": {"team": "nlp"},
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": serde_json::to_string(&spec).unwrap_or_default(),
            },
            "managedFields": (0..6).map(|n| json!({"manager": format!("controller-{n}"), "operation": "Update", "time": "2026-11-21T09:00:00Z", "fieldsV1": {"f:status": {"f:conditions": {}}}})).collect::<Vec<_>>(),
        },
        "spec": spec,
        "status": {
            "startTime": "2026-11-21T08:30:00Z",
            "conditions": (0..8).map(|n| json!({"type": if n % 2 == 0 { "Running" } else { "Restarting" }, "status": "True", "reason": "PyTorchJobRunning", "message": format!("PyTorchJob {name} is running (restart {n}): {}", "worker log tail ".repeat(20)), "lastTransitionTime": "2026-11-21T09:00:00Z"})).collect::<Vec<_>>(),
            "replicaStatuses": {"Master": {"active": 1}, "Worker": {"active": 7, "failed": 1}},
        },
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_of_any_size_and_a_real_sized_object_are_posted_whole() {
    use std::sync::Arc;

    use jobrelay_capabilities::Grants;
    use jobrelay_capabilities::http::HttpGrant;
    use jobrelay_contract::event::Phase;
    use jobrelay_runtime::{PluginSpec, Runtime, RuntimeSettings};

    use crate::common::receiver::{BODY_SIZES, Receiver, whole};
    use crate::common::{MIB, event, wasm};

    let receiver = Receiver::start().await;
    let runtime = Runtime::new(RuntimeSettings {
        max_instances: 8,
        max_memory_mb: 256,
        cache_dir: Some(plugins_dir().join("../test-cache/webhook-notify-bodies")),
        ..RuntimeSettings::default()
    })
    .expect("runtime builds");
    let load = |name: &str, config: &[(&str, String)]| {
        runtime.load(PluginSpec {
            name: name.into(),
            version: format!("{name}-v1"),
            wasm: wasm("webhook-notify"),
            wasm_sha256: String::new(),
            timeout: Duration::from_secs(30),
            memory_bytes: 128 * MIB,
            instance_reuse: 1,
            config: config
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
            grants: Grants {
                http: Some(HttpGrant {
                    allow: vec!["http://127.0.0.1:*".into()],
                    allow_private: true,
                    ..HttpGrant::default()
                }),
                ..Grants::default()
            },
        })
    };

    // The job's message is the whole body: binary mode, a text template of it alone.
    let raw = load(
        "bodies",
        &[
            ("url", format!("{}/hooks/bodies", receiver.url)),
            ("mode", "binary".into()),
            ("template", "${message}".into()),
            ("content_type", "text/plain".into()),
        ],
    )
    .await
    .unwrap_or_else(|e| panic!("webhook-notify loads: {e}"));
    for (n, size) in BODY_SIZES.into_iter().enumerate() {
        let mut job = event(
            &format!("u-{size}"),
            "2",
            Phase::Failed,
            Some(Phase::Running),
            "2026-11-21T09:32:03Z",
        );
        let message: String = (0..size)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        job.message = Some(message.clone());
        let started = Instant::now();
        raw.handle(&job)
            .await
            .unwrap_or_else(|e| panic!("{size} bytes: {e}"));
        let requests = receiver.wait_for(n + 1, DEADLINE).await;
        let request = &requests[n];
        assert_eq!(request.header("content-type"), Some("text/plain"));
        assert_eq!(request.header("ce-type"), Some("io.jobrelay.job.failed"));
        if let Err(why) = whole(request, message.as_bytes()) {
            panic!("{size} bytes: {why}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{size} bytes took {:?}",
            started.elapsed()
        );
    }

    // Structured mode with the job's object: a real-sized one arrives whole, as the object.
    let whole_object = load(
        "objects",
        &[
            ("url", format!("{}/hooks/objects", receiver.url)),
            ("include_object", "true".into()),
        ],
    )
    .await
    .unwrap_or_else(|e| panic!("webhook-notify loads: {e}"));
    let object = real_sized_object("llama-70b-pretrain");
    let mut job = event(
        "u-object",
        "77",
        Phase::Failed,
        Some(Phase::Running),
        "2026-11-21T09:32:03Z",
    );
    job.object_json = Arc::from(serde_json::to_string(&object).expect("JSON"));
    assert!(
        job.object_json.len() > 30_000,
        "{} bytes of object",
        job.object_json.len()
    );
    whole_object.handle(&job).await.expect("posted");
    let requests = receiver.wait_for(BODY_SIZES.len() + 1, DEADLINE).await;
    let request = requests.last().expect("the object's request");
    assert_eq!(request.target, "/hooks/objects");
    if let Err(why) = whole(request, &request.body) {
        panic!("the object's event: {why}");
    }
    let posted: Value = serde_json::from_slice(&request.body).expect("a JSON CloudEvent");
    assert_eq!(posted["data"]["object"], object);
    assert!(
        request.body.len() > job.object_json.len(),
        "{}",
        request.body.len()
    );
}
