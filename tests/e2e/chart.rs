//! The Helm charts in `deploy/helm/`, rendered and linted by real Helm (`helm template`,
//! `helm lint`, `helm dependency build`), run as a process: `helm` on the PATH, or the binary
//! `JOBRELAY_TEST_HELM` names (tests/tools/install.sh installs Helm v3). Values are given as a
//! JSON values file over the chart's own `values.yaml`, so Helm merges them and checks them
//! against `values.schema.json` as it does for an install. The rendered objects are parsed and
//! checked.
//!
//! The ClusterRole is checked against what the daemon really calls: a daemon runs against the
//! simulator through job lifecycles (finalizer held and released, pod logs read by
//! log-archive), every request the simulator saw is mapped to (API group, resource, verb), and
//! that set must be exactly what the chart grants; a second run limited to one namespace is
//! held to the Role the chart then makes there. The daemon runs with leader election and
//! sharding (their state on the test MariaDB, as those modes require), so its Lease requests
//! are checked against the chart's namespaced Role the same way.
//!
//! Point 1 of issue 27 is checked twice: the chart rendered with one plugin and with two gives
//! a byte-identical Deployment (only the plugins' ConfigMap differs), and a daemon running on
//! the rendered ConfigMaps, written as the kubelet writes a mounted volume, loads the added
//! plugin live from the new ConfigMap without repeating anything the first plugin delivered.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use jobrelay::config::main_file::MainConfig;
use jobrelay::config::manifest::PluginManifest;
use jobrelay::config::sources::ClusterSource;
use jobrelay::daemon::Daemon;
use jobrelay_coordination::Mode;
use jobrelay_e2e::*;
use jobrelay_state::StateBackend;
use jobrelay_testkit::configmap::kubelet_write;
use jobrelay_testkit::{Flavor, Gvr, JobDriver, ResourceKind, SimCluster};
use jobrelay_watch::kinds::JobKind;
use serde_json::{Value, json};

use crate::shared_state::{drop_state_tables, share_state};

fn chart_dir() -> PathBuf {
    repo_root().join("deploy/helm/jobrelay")
}

fn remote_chart_dir() -> PathBuf {
    repo_root().join("deploy/helm/jobrelay-remote")
}

/// The Helm binary: `JOBRELAY_TEST_HELM`, else `helm` on the PATH. Missing is a failure, not
/// a skip: the chart is only tested through it.
fn helm_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("JOBRELAY_TEST_HELM") {
        return PathBuf::from(path);
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("helm"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "no `helm` on the PATH and JOBRELAY_TEST_HELM is not set: the chart tests run \
                 real Helm v3; tests/tools/install.sh installs it"
            )
        })
}

/// Helm's own folders (cache, config, data) for this test process, apart from the user's.
fn helm_home() -> &'static Path {
    static HOME: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    HOME.get_or_init(|| tempfile::tempdir().expect("helm home"))
        .path()
}

/// Runs `helm ARGS`: its stdout when it succeeds, else its stderr.
fn helm(args: &[&str]) -> Result<String, String> {
    let home = helm_home();
    let out = Command::new(helm_binary())
        .args(args)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", helm_binary().display()));
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        ))
    }
}

/// `helm template jobrelay CHART --namespace platform` with `overrides` as a values file over
/// the chart's `values.yaml` (JSON is YAML; `null` removes a default, as in any values file).
fn helm_template(chart: &Path, overrides: &Value, extra: &[&str]) -> Result<String, String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let values = dir.path().join("values.json");
    std::fs::write(&values, overrides.to_string()).expect("values file");
    let chart = chart.to_string_lossy();
    let values = values.to_string_lossy();
    let mut args = vec![
        "template",
        "jobrelay",
        chart.as_ref(),
        "--namespace",
        "platform",
        "--values",
        values.as_ref(),
    ];
    args.extend_from_slice(extra);
    helm(&args)
}

/// The manifests of `helm template` output: (template file, the document's text, the object).
fn manifests(output: &str) -> Vec<(String, String, Value)> {
    let mut docs = Vec::new();
    let mut file = String::new();
    let mut text = String::new();
    let mut flush = |file: &str, text: &mut String| {
        let value: Value = serde_yaml_ng::from_str(text)
            .unwrap_or_else(|e| panic!("{file} renders to invalid YAML: {e}\n{text}"));
        if !value.is_null() {
            docs.push((file.to_string(), std::mem::take(text), value));
        }
        text.clear();
    };
    for line in output.lines() {
        if line == "---" {
            flush(&file, &mut text);
        } else if let Some(source) = line.strip_prefix("# Source: ") {
            file = source
                .split_once("/templates/")
                .map(|(_, f)| f.to_string())
                .unwrap_or_else(|| source.to_string());
        } else {
            text.push_str(line);
            text.push('\n');
        }
    }
    flush(&file, &mut text);
    docs
}

/// Renders the jobrelay chart with `overrides`; the objects, each with the file it came from.
fn render(overrides: Value) -> Vec<(String, Value)> {
    let output = helm_template(&chart_dir(), &overrides, &[])
        .unwrap_or_else(|e| panic!("helm template refuses {overrides}:\n{e}"));
    manifests(&output)
        .into_iter()
        .map(|(file, _, value)| (file, value))
        .collect()
}

/// The text of each rendered manifest, by kind and name.
fn render_texts(overrides: Value) -> BTreeMap<String, String> {
    let output = helm_template(&chart_dir(), &overrides, &[])
        .unwrap_or_else(|e| panic!("helm template refuses {overrides}:\n{e}"));
    manifests(&output)
        .into_iter()
        .map(|(_, text, value)| {
            let key = format!(
                "{}/{}",
                value["kind"].as_str().unwrap_or_default(),
                value["metadata"]["name"].as_str().unwrap_or_default()
            );
            (key, text)
        })
        .collect()
}

/// Helm's refusal of `overrides` (the schema's, or a template's `fail`).
fn refused(overrides: Value) -> String {
    match helm_template(&chart_dir(), &overrides, &[]) {
        Ok(out) => panic!("helm template renders {overrides}, which it must refuse:\n{out}"),
        Err(why) => why,
    }
}

fn object<'a>(objects: &'a [(String, Value)], kind: &str) -> &'a Value {
    objects
        .iter()
        .map(|(_, o)| o)
        .find(|o| o["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} rendered"))
}

fn named<'a>(objects: &'a [(String, Value)], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .map(|(_, o)| o)
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}

/// The main file the chart renders, as the daemon reads it.
fn main_file(objects: &[(String, Value)]) -> MainConfig {
    let text = named(objects, "ConfigMap", "jobrelay-config")["data"]["jobrelay.yaml"]
        .as_str()
        .expect("main file");
    MainConfig::parse(text, Path::new("/etc/jobrelay"))
        .unwrap_or_else(|e| panic!("the daemon refuses the rendered main file: {e}\n{text}"))
}

/// Values for leader or sharded mode, which need a shared state store.
fn coordinated(mode: &str) -> Value {
    json!({
        "coordination": {"mode": mode},
        "stateUrl": "env:JOBRELAY_STATE_URL",
        "envFromSecrets": ["jobrelay-state"],
    })
}

fn merge(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                merge(b.entry(k).or_insert(Value::Null), v);
            }
        }
        (slot, v) => *slot = v,
    }
}

fn with(mut base: Value, over: Value) -> Value {
    merge(&mut base, over);
    base
}

/// (group, resource) → verbs of a role's rules.
fn granted(role: &Value) -> BTreeMap<(String, String), BTreeSet<String>> {
    let mut granted: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for rule in role["rules"].as_array().expect("rules") {
        for group in rule["apiGroups"].as_array().expect("groups") {
            for resource in rule["resources"].as_array().expect("resources") {
                let verbs = rule["verbs"]
                    .as_array()
                    .expect("verbs")
                    .iter()
                    .filter_map(|v| v.as_str().map(str::to_string));
                granted
                    .entry((
                        group.as_str().unwrap_or_default().to_string(),
                        resource.as_str().unwrap_or_default().to_string(),
                    ))
                    .or_default()
                    .extend(verbs);
            }
        }
    }
    granted
}

/// A table prefix of this process and `tag` alone.
fn unique_prefix(tag: &str) -> String {
    format!("t{}_chart_{tag}_", std::process::id())
}

#[test]
fn the_chart_renders_a_locked_down_deployment_of_a_valid_config() {
    let objects = render(json!({
        "clusters": {"secretName": "jobrelay-clusters"},
        "envFromSecrets": ["jobrelay-secrets"],
    }));
    let kinds: BTreeSet<&str> = objects
        .iter()
        .filter_map(|(_, o)| o["kind"].as_str())
        .collect();
    for kind in [
        "ServiceAccount",
        "ConfigMap",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "PersistentVolumeClaim",
    ] {
        assert!(kinds.contains(kind), "{kind} missing: {kinds:?}");
    }
    // No rights on the cluster it runs in unless that cluster is watched.
    for kind in ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"] {
        assert!(
            !kinds.contains(kind),
            "{kind} without a home cluster: {kinds:?}"
        );
    }

    let deployment = object(&objects, "Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["runAsUser"], 10001);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        container["securityContext"]["allowPrivilegeEscalation"],
        false
    );
    assert_eq!(
        container["securityContext"]["capabilities"]["drop"],
        json!(["ALL"])
    );
    assert_eq!(container["image"], "ghcr.io/example/jobrelay:0.1.0");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    // Every plugin compiles before /healthz answers: the start has its own budget, far past
    // liveness's 60 s.
    let startup = &container["startupProbe"];
    assert_eq!(startup["httpGet"]["path"], "/healthz");
    let budget = startup["periodSeconds"].as_u64().expect("period")
        * startup["failureThreshold"].as_u64().expect("threshold");
    assert!(budget >= 600, "{startup}");
    assert_eq!(container["resources"]["requests"]["memory"], "256Mi");
    assert_eq!(
        container["envFrom"][0]["secretRef"]["name"],
        "jobrelay-secrets"
    );
    let writable: BTreeSet<&str> = container["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .filter(|m| m["readOnly"] != true)
        .filter_map(|m| m["mountPath"].as_str())
        .collect();
    assert_eq!(
        writable,
        BTreeSet::from(["/tmp", "/var/lib/jobrelay"]),
        "with a read-only root, exactly these paths are writable"
    );
    // The config, the plugins' manifests and the clusters' Secret are each mounted whole: no
    // key of theirs is named in the pod's spec, so adding one never replaces the pod.
    let volumes = pod["volumes"].as_array().expect("volumes");
    let volume = |name: &str| {
        volumes
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no {name} volume: {volumes:?}"))
    };
    assert_eq!(volume("config")["configMap"]["name"], "jobrelay-config");
    assert_eq!(volume("plugins")["configMap"]["name"], "jobrelay-plugins");
    assert_eq!(
        volume("clusters")["secret"]["secretName"],
        "jobrelay-clusters"
    );
    for name in ["config", "plugins", "clusters"] {
        let text = volume(name).to_string();
        assert!(!text.contains("items"), "{name}: {text}");
    }
    let deployment_text = deployment.to_string();
    for plugin in ["mysql-sync", "log-archive"] {
        assert!(
            !deployment_text.contains(plugin),
            "the pod's spec names {plugin}"
        );
    }
    let mounts = container["volumeMounts"].as_array().expect("mounts");
    for (name, path) in [
        ("config", "/etc/jobrelay"),
        ("plugins", "/etc/jobrelay-plugins"),
        ("clusters", "/etc/jobrelay-clusters"),
    ] {
        assert!(
            mounts
                .iter()
                .any(|m| m["name"] == name && m["mountPath"] == path && m["readOnly"] == true),
            "{name} at {path}: {mounts:?}"
        );
    }

    // The config the chart writes is one jobrelay accepts, and reads the mounts.
    let main = main_file(&objects);
    assert_eq!(main.telemetry.listen.map(|a| a.port()), Some(9464));
    assert_eq!(main.clusters_dir, Path::new("/etc/jobrelay-clusters"));
    assert_eq!(
        main.plugin_manifests_dir,
        Path::new("/etc/jobrelay-plugins")
    );
    assert_eq!(
        main.state,
        StateBackend::Sqlite(Path::new("/var/lib/jobrelay/state/jobrelay.db").to_path_buf())
    );
    let manifests = &named(&objects, "ConfigMap", "jobrelay-plugins")["data"];
    let keys: Vec<&String> = manifests.as_object().expect("data").keys().collect();
    assert_eq!(keys, ["log-archive.yaml", "mysql-sync.yaml"]);
    for name in ["mysql-sync", "log-archive"] {
        let text = manifests[format!("{name}.yaml").as_str()]
            .as_str()
            .unwrap_or_else(|| panic!("{name} manifest"));
        let manifest: PluginManifest =
            serde_yaml_ng::from_str(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!manifest.wasm.as_os_str().is_empty());
    }
    let service = object(&objects, "Service");
    assert_eq!(service["spec"]["ports"][0]["port"], 9464);
}

/// A plugin added, changed or removed through the values changes the plugins' ConfigMap and
/// nothing of the pod: the Deployment renders byte for byte the same, so `helm upgrade` starts
/// no new pod (the daemon reloads from the swapped files; see the next test).
#[test]
fn a_plugin_added_by_helm_upgrade_changes_only_the_plugins_configmap() {
    let base = json!({"clusters": {"secretName": "c"}, "homeCluster": {"name": "home"}});
    let one = render_texts(with(
        base.clone(),
        json!({"plugins": {"log-archive": null}}),
    ));
    let two = render_texts(base.clone());
    let changed_manifest = render_texts(with(
        base.clone(),
        json!({"plugins": {"mysql-sync": {"timeout_ms": 9000}}}),
    ));
    assert_eq!(
        one["Deployment/jobrelay"], two["Deployment/jobrelay"],
        "adding a plugin changed the pod"
    );
    assert_eq!(
        two["Deployment/jobrelay"], changed_manifest["Deployment/jobrelay"],
        "changing a plugin changed the pod"
    );
    assert_eq!(
        one["ConfigMap/jobrelay-config"],
        two["ConfigMap/jobrelay-config"]
    );
    assert_ne!(
        one["ConfigMap/jobrelay-plugins"],
        two["ConfigMap/jobrelay-plugins"]
    );
    assert!(two["ConfigMap/jobrelay-plugins"].contains("log-archive.yaml: |"));
    assert!(!one["ConfigMap/jobrelay-plugins"].contains("log-archive"));
    assert_ne!(
        two["ConfigMap/jobrelay-plugins"],
        changed_manifest["ConfigMap/jobrelay-plugins"]
    );
    // log-archive reads pod logs: its arrival grants them on the home cluster, in the role,
    // not in the pod.
    assert!(!one["ClusterRole/jobrelay-platform-jobrelay"].contains("pods/log"));
    assert!(two["ClusterRole/jobrelay-platform-jobrelay"].contains("pods/log"));
    // No plugins at all is an empty ConfigMap, still mounted.
    let none = render(json!({"plugins": {"log-archive": null, "mysql-sync": null}}));
    assert_eq!(
        named(&none, "ConfigMap", "jobrelay-plugins")["data"],
        json!({})
    );
}

/// `helm upgrade` with a new plugin, as the pod sees it: the daemon runs on the chart's
/// rendered ConfigMaps, each written into its own folder as the kubelet writes a mounted
/// volume; the next render (one plugin more) changes only the plugins' ConfigMap, and the
/// kubelet's swap of that folder makes the running daemon load the new plugin, which
/// delivers the job's current state, while the first plugin goes on without a reload and
/// without repeating an event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_added_to_the_mounted_configmap_is_loaded_by_the_running_daemon() {
    init_logs();
    let sim = SimCluster::start("east").await.expect("sim");
    let work = tempfile::tempdir().expect("tempdir");
    let dir = |name: &str| {
        let path = work.path().join(name);
        std::fs::create_dir_all(&path).expect("folder");
        path
    };
    let (etc, manifests, clusters, var, wasm, out) = (
        work.path().join("etc"),
        work.path().join("etc-plugins"),
        dir("clusters"),
        dir("var"),
        dir("wasm"),
        dir("out"),
    );
    std::fs::copy(built_wasm("event-log"), wasm.join("event-log.wasm")).expect("component");
    std::fs::write(clusters.join("east.yaml"), sim.kubeconfig_yaml()).expect("kubeconfig");
    let log_plugin = |file: &str| {
        json!({
            "wasm": "event-log.wasm",
            "grants": {"filesystem": [{"host": out.display().to_string(), "guest": "/data", "writable": true}]},
            "config": {"file": file},
        })
    };
    let values = |plugins: Value| {
        json!({
            "config": {
                "kinds": [{"name": "batch-job"}],
                "plugin_dir": wasm.display().to_string(),
                "plugin_manifests_dir": manifests.display().to_string(),
                "clusters_dir": clusters.display().to_string(),
                "state": {"path": var.join("state.db").display().to_string()},
                "runtime": {"cache_dir": var.join("cache").display().to_string()},
                "archive": {"local": var.join("archive").display().to_string()},
                "rescan_seconds": 3600,
                "debounce_ms": 50,
            },
            "plugins": plugins,
        })
    };
    let first = values(
        json!({"log-archive": null, "mysql-sync": null, "first": log_plugin("first.jsonl")}),
    );
    let second = values(json!({
        "log-archive": null, "mysql-sync": null,
        "first": log_plugin("first.jsonl"), "second": log_plugin("second.jsonl"),
    }));
    // What the kubelet would write into each mounted folder; but the endpoint, which the
    // chart puts on metricsPort of every address (and refuses elsewhere), on a free port of
    // the loopback in this test process.
    let publish = |objects: &[(String, Value)], stamp: &str| {
        for (name, folder) in [("jobrelay-config", &etc), ("jobrelay-plugins", &manifests)] {
            let data = named(objects, "ConfigMap", name)["data"]
                .as_object()
                .expect("data")
                .iter()
                .map(|(k, v)| {
                    let text = v.as_str().expect("text");
                    let listen = "telemetry: {listen: \"0.0.0.0:9464\"}";
                    assert!(name != "jobrelay-config" || text.contains(listen), "{text}");
                    let text = text.replace(listen, "telemetry: {listen: \"127.0.0.1:0\"}");
                    (k.clone(), text)
                })
                .collect::<Vec<_>>();
            let files: Vec<(&str, &str)> =
                data.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            kubelet_write(folder, stamp, &files).expect("kubelet-style write");
        }
    };
    let v1 = render(first.clone());
    publish(&v1, "..2026_11_27_00_00_00.000000001");
    let daemon = Daemon::start(&etc).await.expect("daemon");
    wait_synced(&daemon, "east").await;
    let first_version = wait_plugin_serving(&daemon, "first").await;
    let mut job = JobDriver::create(&sim, Flavor::Batch, "ml", "train").expect("job");
    job.running().expect("running");
    let read = |file: &str| read_lines(&out.join(file));
    wait_for("the first plugin's running event", || {
        read("first.jsonl")
            .iter()
            .any(|e| e["phase"] == "running")
            .then_some(())
    })
    .await;

    let v2 = render(second.clone());
    let deployment = |objects: &[(String, Value)]| object(objects, "Deployment").clone();
    assert_eq!(deployment(&v1), deployment(&v2), "the pod did not change");
    publish(&v2, "..2026_11_27_00_05_00.000000002");
    wait_plugin_serving(&daemon, "second").await;
    wait_for(
        "the second plugin's first delivery (the job's current state)",
        || {
            read("second.jsonl")
                .iter()
                .any(|e| e["phase"] == "running")
                .then_some(())
        },
    )
    .await;
    job.succeeded().expect("succeeded");
    for file in ["first.jsonl", "second.jsonl"] {
        wait_for(&format!("{file}: the job succeeded"), || {
            read(file)
                .iter()
                .any(|e| e["phase"] == "succeeded")
                .then_some(())
        })
        .await;
    }
    assert_eq!(
        daemon.plugins()["first"].serving.as_deref(),
        Some(first_version.as_str()),
        "the first plugin was not reloaded"
    );
    assert_unique_ids(&read("first.jsonl"), "the first plugin repeats nothing");
    assert!(daemon.problems().is_empty(), "{:?}", daemon.problems());
    daemon.shutdown(Duration::from_secs(5)).await;
}

/// The state is kept by default: a claim the chart makes, so a new pod starts from the cursors
/// the old one left (and the compile cache, the embedded databases, the local archive). A
/// state volume that dies with the pod is refused unless acknowledged, and one claim is never
/// shared by several replicas.
#[test]
fn the_state_outlives_the_pod_unless_its_loss_is_acknowledged() {
    let default = render(json!({}));
    let claim = object(&default, "PersistentVolumeClaim");
    assert_eq!(claim["metadata"]["name"], "jobrelay-state");
    assert_eq!(claim["spec"]["accessModes"], json!(["ReadWriteOnce"]));
    assert_eq!(
        claim["metadata"]["annotations"]["helm.sh/resource-policy"],
        "keep"
    );
    let state = pod_volume(&default, "state");
    assert_eq!(
        state["persistentVolumeClaim"]["claimName"],
        "jobrelay-state"
    );
    assert!(state["emptyDir"].is_null(), "{state}");
    let main = main_file(&default);
    assert_eq!(
        main.runtime.cache_dir.as_deref(),
        Some(Path::new("/var/lib/jobrelay/cache"))
    );
    assert_eq!(
        main.archive,
        jobrelay_capabilities::archive::ArchiveLocation::Local("/var/lib/jobrelay/archive".into()),
        "the local archive is a folder of the state volume"
    );
    // One replica with a claim rolls by Recreate in every mode: a ReadWriteOnce claim mounts
    // on one node at a time.
    let leader = render(coordinated("leader"));
    assert_eq!(
        object(&leader, "Deployment")["spec"]["strategy"]["type"],
        "Recreate"
    );

    let sized = render(
        json!({"persistence": {"enabled": true, "size": "20Gi", "storageClassName": "fast"}}),
    );
    let claim = object(&sized, "PersistentVolumeClaim");
    assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "20Gi");
    assert_eq!(claim["spec"]["storageClassName"], "fast");

    for (values, setting) in [
        (
            json!({"persistence": {"enabled": false}}),
            "acknowledgeEphemeralState",
        ),
        (
            json!({"persistence": {"enabled": false}, "stateVolume": {"emptyDir": {}}}),
            "acknowledgeEphemeralState",
        ),
        (
            with(coordinated("leader"), json!({"replicas": 2})),
            "persistence.enabled",
        ),
        (
            with(
                coordinated("sharded"),
                json!({"replicas": 3, "persistence": {"enabled": false},
                       "stateVolume": {"persistentVolumeClaim": {"claimName": "shared"}}}),
            ),
            "stateVolume",
        ),
        (json!({"replicas": 2}), "coordination.mode"),
    ] {
        let why = refused(values.clone());
        assert!(why.contains(setting), "{values}: {why}");
    }
    let why = refused(json!({"persistence": {"enabled": false}}));
    assert!(why.contains("cursors"), "says what is lost: {why}");

    // Acknowledged: an emptyDir, no claim.
    let ephemeral =
        render(json!({"persistence": {"enabled": false}, "acknowledgeEphemeralState": true}));
    assert!(
        ephemeral
            .iter()
            .all(|(_, o)| o["kind"] != "PersistentVolumeClaim")
    );
    let state = pod_volume(&ephemeral, "state");
    assert_eq!(state["emptyDir"], json!({}));
    // Your own claim, one replica: no acknowledgement needed.
    let own = render(json!({"persistence": {"enabled": false},
        "stateVolume": {"persistentVolumeClaim": {"claimName": "mine"}}}));
    assert!(
        own.iter()
            .all(|(_, o)| o["kind"] != "PersistentVolumeClaim")
    );
    // Several replicas: each pod's own volume, the cursors in the shared store.
    let replicas = render(with(
        coordinated("sharded"),
        json!({"replicas": 3, "persistence": {"enabled": false}, "acknowledgeEphemeralState": true}),
    ));
    assert_eq!(object(&replicas, "Deployment")["spec"]["replicas"], 3);
    assert_eq!(
        object(&replicas, "Deployment")["spec"]["strategy"]["type"],
        "RollingUpdate"
    );
    // A separate archive volume, when given.
    let archive =
        render(json!({"archiveVolume": {"persistentVolumeClaim": {"claimName": "logs"}}}));
    let pod = &object(&archive, "Deployment")["spec"]["template"]["spec"];
    assert!(
        pod["containers"][0]["volumeMounts"]
            .as_array()
            .expect("mounts")
            .iter()
            .any(|m| m["name"] == "archive" && m["mountPath"] == "/var/lib/jobrelay/archive")
    );
}

/// Replicas that share the work must share the state store: leader or sharded mode without
/// one is refused by the chart (as by `jobrelay check` and the daemon), naming the setting —
/// also when `config.state` names a SQLite file.
#[test]
fn coordination_without_a_shared_state_store_is_refused() {
    for mode in ["leader", "sharded"] {
        for values in [
            json!({"coordination": {"mode": mode}}),
            json!({"coordination": {"mode": mode},
                   "config": {"state": {"path": "/var/lib/jobrelay/state.db"}}}),
        ] {
            let why = refused(values.clone());
            assert!(
                why.contains("coordination.mode") && why.contains("stateUrl"),
                "{values}: {why}"
            );
            assert!(why.contains(mode), "{why}");
        }
        // With the store given either way, it renders, and the daemon takes the main file.
        for values in [
            coordinated(mode),
            json!({"coordination": {"mode": mode},
                   "config": {"state": {"url": "env:JOBRELAY_STATE_URL"}}}),
        ] {
            let main = main_file(&render(values));
            assert!(
                matches!(main.state, StateBackend::MySql { .. }),
                "{:?}",
                main.state
            );
        }
    }
}

/// `(apiGroup, resource[/subresource], verb)` of one request the simulator saw.
fn access(method: &str, uri: &str) -> Option<(String, String, String)> {
    let (path, query) = uri.split_once('?').unwrap_or((uri, ""));
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", _version, rest @ ..] => (String::new(), rest),
        ["apis", group, _version, rest @ ..] => (group.to_string(), rest),
        _ => return None, // discovery and other non-resource paths
    };
    let rest = match rest {
        ["namespaces", _ns, rest @ ..] => rest,
        rest => rest,
    };
    let (resource, named) = match rest {
        [resource] => (resource.to_string(), false),
        [resource, _name] => (resource.to_string(), true),
        [resource, _name, sub] => (format!("{resource}/{sub}"), true),
        _ => return None,
    };
    let verb = match (method, named) {
        ("GET", false) if query.contains("watch=true") || query.contains("watch=1") => "watch",
        ("GET", false) => "list",
        ("GET", true) => "get",
        ("PATCH", _) => "patch",
        ("PUT", _) => "update",
        ("POST", _) => "create",
        ("DELETE", _) => "delete",
        _ => return None,
    };
    Some((group, resource, verb.to_string()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_role_grants_exactly_what_the_daemon_calls() {
    init_logs();
    let sim = SimCluster::start("east").await.expect("sim");
    // The simulator is the home cluster too; the release namespace is `platform`. Leader
    // election needs the shared store: the test MariaDB.
    let setup = Setup::new(
        "kinds: [{name: volcano-job, finalizer: true}, {name: pytorch-job}, {name: batch-job}, {name: mpi-job}]\n\
         coordination: {mode: leader, kubeconfig: clusters/east.yaml, namespace: platform, \
         lease_name: jobrelay, lease_duration_seconds: 3, renew_deadline_seconds: 2, \
         retry_period_seconds: 1}\n",
    );
    let prefix = unique_prefix("rbac");
    share_state(&setup, &prefix).await;
    setup.install_wasm("log-archive", "log-archive.wasm");
    setup.write_manifest(
        "log-archive",
        "wasm: log-archive.wasm\ndelivery: transitions\ntimeout_ms: 20000\n\
         grants: {pod_logs: {}, archive: {}, kv: true}\n",
    );
    setup.add_cluster(&sim);
    let daemon = Daemon::start(setup.config_dir()).await.expect("daemon");
    wait_synced(&daemon, "east").await;
    let mut volcano = JobDriver::create(&sim, Flavor::Volcano, "ml", "held").expect("job");
    volcano.running().expect("running");
    for pod in volcano.pod_names() {
        volcano.set_log(&pod, false, "training\n").expect("log");
    }
    let mut batch = JobDriver::create(&sim, Flavor::Batch, "ml", "done").expect("job");
    batch.running().expect("running");
    batch.succeeded().expect("succeeded");
    wait_for("the finalizer on the Volcano job", || {
        let obj = sim.get(&Gvr::VOLCANO_JOB, "ml", "held").ok()?;
        obj.pointer("/metadata/finalizers")?
            .as_array()?
            .iter()
            .any(|f| f == "jobrelay.io/delivery")
            .then_some(())
    })
    .await;
    volcano.delete().expect("delete");
    wait_for("the job released and gone", || {
        sim.get(&Gvr::VOLCANO_JOB, "ml", "held")
            .is_err()
            .then_some(())
    })
    .await;
    // Renewals, then the release at shutdown.
    tokio::time::sleep(Duration::from_secs(2)).await;
    daemon.shutdown(Duration::from_secs(5)).await;
    drop_state_tables(&prefix).await;

    let requests = sim.recent_requests();
    let (lease_requests, cluster_requests): (Vec<_>, Vec<_>) =
        requests.iter().partition(|r| r.uri.contains("/leases"));
    check_lease_role("leader", &lease_requests);
    let sharded = sharded_lease_calls().await;
    check_lease_role("sharded", &sharded.iter().collect::<Vec<_>>());
    let used: BTreeSet<(String, String, String)> = cluster_requests
        .iter()
        .filter_map(|r| access(&r.method, &r.uri))
        .collect();
    // The chart's defaults: the same four kinds (Volcano's held by the finalizer) and
    // log-archive, granted pod logs.
    let role = render(json!({"homeCluster": {"name": "home"}}))
        .into_iter()
        .map(|(_, o)| o)
        .find(|o| o["kind"] == "ClusterRole")
        .expect("ClusterRole");
    let granted = granted(&role);
    for (group, resource, verb) in &used {
        let allowed = granted
            .get(&(group.clone(), resource.clone()))
            .is_some_and(|verbs| verbs.contains(verb));
        assert!(
            allowed,
            "the daemon calls {verb} on {group}/{resource}, which the chart does not grant"
        );
    }
    // Nothing more than that: every verb granted on a resource the run exercised was used.
    for ((group, resource), verbs) in &granted {
        let exercised = used.iter().any(|(g, r, _)| g == group && r == resource);
        if !exercised {
            continue; // a kind this run had no job of (MPI, PyTorch) has the same rule shape
        }
        for verb in verbs {
            assert!(
                used.contains(&(group.clone(), resource.clone(), verb.clone())),
                "the chart grants {verb} on {group}/{resource}, which the daemon never calls"
            );
        }
    }
    for needed in [
        ("batch.volcano.sh", "jobs", "patch"),
        ("", "pods", "list"),
        ("", "pods/log", "get"),
    ] {
        let needed = (
            needed.0.to_string(),
            needed.1.to_string(),
            needed.2.to_string(),
        );
        assert!(used.contains(&needed), "the run exercised {needed:?}");
    }
}

/// A kind that tells its jobs' story makes the daemon watch Kueue Workloads and pods as well,
/// and the chart rendered with that kind grants exactly those watches: the run's calls are
/// all granted, and every verb granted on the resources it called was used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_that_tells_its_story_is_granted_the_watches_it_makes() {
    init_logs();
    let sim = SimCluster::start("east").await.expect("sim");
    let (group, version, kind, plural) = jobrelay_watch::story::sources::WORKLOAD;
    sim.register_kind(ResourceKind::new(group, version, kind, plural, true));
    let setup = Setup::new("kinds: [{name: batch-job, story: {kueue: true, pods: true}}]\n");
    setup.add_cluster(&sim);
    let daemon = Daemon::start(setup.config_dir()).await.expect("daemon");
    wait_synced(&daemon, "east").await;
    wait_for("the Workload and pod watches", || {
        (sim.watch_requests("workloads") > 0 && sim.watch_requests("pods") > 0).then_some(())
    })
    .await;
    daemon.shutdown(Duration::from_secs(5)).await;
    let used: BTreeSet<(String, String, String)> = sim
        .recent_requests()
        .iter()
        .filter_map(|r| access(&r.method, &r.uri))
        .collect();
    let role = render(json!({"homeCluster": {"name": "home"},
        "config": {"kinds": [{"name": "batch-job", "story": {"kueue": true, "pods": true}}]}}))
    .into_iter()
    .map(|(_, o)| o)
    .find(|o| o["kind"] == "ClusterRole")
    .expect("ClusterRole");
    let granted = granted(&role);
    for (group, resource, verb) in &used {
        assert!(
            granted
                .get(&(group.clone(), resource.clone()))
                .is_some_and(|verbs| verbs.contains(verb)),
            "the daemon calls {verb} on {group}/{resource}, which the chart does not grant"
        );
    }
    for (group, resource) in [("kueue.x-k8s.io", "workloads"), ("", "pods")] {
        let key = (group.to_string(), resource.to_string());
        let verbs = granted.get(&key).expect("granted");
        for verb in verbs {
            assert!(
                used.contains(&(key.0.clone(), key.1.clone(), verb.clone())),
                "the chart grants {verb} on {group}/{resource}, which the daemon never calls"
            );
        }
        assert!(
            verbs.contains("watch"),
            "{group}/{resource} is watched: {verbs:?}"
        );
    }
}

/// With `config.watch.namespaces`, the rights on the home cluster are a Role in each of those
/// namespaces, not a ClusterRole; a daemon watching one namespace makes every call inside it,
/// and exactly the calls that Role grants (no plugin reads pod logs here, so pods are not
/// granted either).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limited_to_namespaces_the_rights_are_a_role_in_each() {
    init_logs();
    let sim = SimCluster::start("south").await.expect("sim");
    let setup = Setup::new("kinds: [{name: batch-job}]\nwatch: {namespaces: [ml]}\n");
    setup.install_wasm("event-log", "event-log.wasm");
    setup.write_manifest(
        "log",
        &Setup::log_manifest("event-log.wasm", "log", "events.jsonl", ""),
    );
    setup.add_cluster(&sim);
    let daemon = Daemon::start(setup.config_dir()).await.expect("daemon");
    wait_synced(&daemon, "south").await;
    let mut seen = JobDriver::create(&sim, Flavor::Batch, "ml", "seen").expect("job");
    seen.running().expect("running");
    seen.succeeded().expect("succeeded");
    let mut other = JobDriver::create(&sim, Flavor::Batch, "research", "unseen").expect("job");
    other.running().expect("running");
    wait_for("the ml job delivered", || {
        setup
            .lines("log/events.jsonl")
            .iter()
            .any(|e| e["phase"] == "succeeded")
            .then_some(())
    })
    .await;
    daemon.shutdown(Duration::from_secs(5)).await;
    let mut used = BTreeSet::new();
    for r in sim.recent_requests() {
        let Some(call) = access(&r.method, &r.uri) else {
            continue;
        };
        assert!(
            r.uri.contains("/namespaces/ml/"),
            "a call outside the watched namespace: {} {}",
            r.method,
            r.uri
        );
        used.insert(call);
    }

    let objects = render(json!({
        "homeCluster": {"name": "home"},
        "config": {"kinds": [{"name": "batch-job"}], "watch": {"namespaces": ["ml"]}},
        "plugins": {"log-archive": null, "mysql-sync": null,
                    "log": {"wasm": "event-log.wasm"}},
    }));
    assert!(
        objects
            .iter()
            .all(|(_, o)| o["kind"] != "ClusterRole" && o["kind"] != "ClusterRoleBinding")
    );
    let role = named(&objects, "Role", "jobrelay-platform-jobrelay");
    assert_eq!(role["metadata"]["namespace"], "ml");
    let binding = named(&objects, "RoleBinding", "jobrelay-platform-jobrelay");
    assert_eq!(binding["metadata"]["namespace"], "ml");
    assert_eq!(binding["roleRef"]["kind"], "Role");
    assert_eq!(binding["subjects"][0]["name"], "jobrelay");
    assert_eq!(binding["subjects"][0]["namespace"], "platform");
    let mut granted_calls = BTreeSet::new();
    for ((group, resource), verbs) in granted(role) {
        for verb in verbs {
            granted_calls.insert((group.clone(), resource.clone(), verb));
        }
    }
    assert_eq!(
        granted_calls, used,
        "the Role grants exactly what the daemon calls"
    );
}

/// Every Lease request went to the release namespace with a verb (and, where the rule names
/// one, an object) the Role of `mode` grants; and every grant was used.
fn check_lease_role(mode: &str, requests: &[&jobrelay_testkit::RequestRecord]) {
    let objects = render(coordinated(mode));
    let role = object(&objects, "Role");
    assert_eq!(role["metadata"]["namespace"], "platform");
    // (verb, object name), `None` for a rule that names no object.
    let mut granted: BTreeSet<(String, Option<String>)> = BTreeSet::new();
    for rule in role["rules"].as_array().expect("rules") {
        assert_eq!(rule["apiGroups"], json!(["coordination.k8s.io"]), "{rule}");
        assert_eq!(rule["resources"], json!(["leases"]), "{rule}");
        let names: Vec<Option<String>> = match rule["resourceNames"].as_array() {
            Some(names) => names
                .iter()
                .map(|n| n.as_str().map(str::to_string))
                .collect(),
            None => vec![None],
        };
        for verb in rule["verbs"].as_array().expect("verbs") {
            for name in &names {
                granted.insert((verb.as_str().unwrap_or_default().to_string(), name.clone()));
            }
        }
    }
    let mut covered: BTreeSet<(String, Option<String>)> = BTreeSet::new();
    for r in requests {
        let path = r.uri.split('?').next().unwrap_or_default();
        let rest = path
            .strip_prefix("/apis/coordination.k8s.io/v1/namespaces/platform/leases")
            .unwrap_or_else(|| panic!("a Lease request outside the release namespace: {path}"));
        let name = rest.strip_prefix('/').map(str::to_string);
        let verb = match (r.method.as_str(), &name) {
            ("GET", Some(_)) => "get",
            ("GET", None) => "list",
            ("PUT", Some(_)) => "update",
            ("POST", None) => "create",
            ("DELETE", Some(_)) => "delete",
            _ => panic!("a Lease request no Role rule covers: {} {path}", r.method),
        };
        let named = (verb.to_string(), name);
        let any = (verb.to_string(), None);
        let grant = if granted.contains(&named) {
            named
        } else if granted.contains(&any) {
            any
        } else {
            panic!(
                "{mode}: the daemon calls {named:?} on leases, which the Role does not grant ({granted:?})"
            )
        };
        covered.insert(grant);
    }
    assert_eq!(
        covered, granted,
        "{mode}: the Role grants exactly the Lease calls the daemon makes"
    );
}

/// A sharded daemon against the simulator, its Leases on a home cluster of their own and its
/// state on the test MariaDB: the Lease calls it makes, from its first take to its clean stop.
async fn sharded_lease_calls() -> Vec<jobrelay_testkit::RequestRecord> {
    let sim = SimCluster::start("east").await.expect("sim");
    let home = SimCluster::start("home").await.expect("home");
    let setup = Setup::new(
        "kinds: [{name: batch-job}]\n\
         coordination: {mode: sharded, kubeconfig: home.kubeconfig, namespace: platform, \
         lease_name: jobrelay, lease_duration_seconds: 3, renew_deadline_seconds: 2, \
         retry_period_seconds: 1}\n",
    );
    let prefix = unique_prefix("shard");
    share_state(&setup, &prefix).await;
    std::fs::write(setup.path("home.kubeconfig"), home.kubeconfig_yaml()).expect("kubeconfig");
    setup.add_cluster(&sim);
    let daemon = Daemon::start(setup.config_dir()).await.expect("daemon");
    wait_synced(&daemon, "east").await;
    // A few renewals, then the clean stop (Leases released, the member Lease deleted).
    tokio::time::sleep(Duration::from_secs(3)).await;
    daemon.shutdown(Duration::from_secs(5)).await;
    drop_state_tables(&prefix).await;
    home.recent_requests()
        .into_iter()
        .filter(|r| r.uri.contains("/leases"))
        .collect()
}

/// The job resources come from the configured kinds: a built-in's group and resource as the
/// daemon's own table has them, a custom kind's group and plural; get and patch only where
/// `finalizer: true`; nothing for a kind whose `clusters:` does not match the home cluster;
/// pods and their logs only when a plugin is granted pod_logs.
#[test]
fn the_home_rules_follow_the_configured_kinds_and_plugins() {
    for name in JobKind::BUILTINS {
        let kind = JobKind::builtin(name).expect("built-in");
        let objects = render(json!({
            "homeCluster": {"name": "home"},
            "config": {"kinds": [{"name": name, "finalizer": true}]},
            "plugins": {"log-archive": null},
        }));
        let granted = granted(object(&objects, "ClusterRole"));
        let expected = BTreeMap::from([(
            (kind.group.clone(), kind.plural.clone()),
            BTreeSet::from(["list", "watch", "get", "patch"].map(String::from)),
        )]);
        assert_eq!(granted, expected, "{name}");
    }
    let objects = render(json!({
        "homeCluster": {"name": "home"},
        "config": {"kinds": [
            {"name": "batch-job", "clusters": ["gpu-*"]},
            {"name": "volcano-job", "clusters": ["ho*", "lab"]},
            {"name": "trainjob", "group": "example.com", "version": "v1", "kind": "TrainJob",
             "plural": "trainjobs", "finalizer": true,
             "normalizer": {"field": {"path": "/status/phase", "phases": {"Done": "succeeded"}}}},
        ]},
        "plugins": {"log-archive": null},
    }));
    main_file(&objects);
    let granted_rules = granted(object(&objects, "ClusterRole"));
    let set = |verbs: &[&str]| verbs.iter().map(|v| v.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(
        granted_rules,
        BTreeMap::from([
            (
                ("batch.volcano.sh".to_string(), "jobs".to_string()),
                set(&["list", "watch"])
            ),
            (
                ("example.com".to_string(), "trainjobs".to_string()),
                set(&["list", "watch", "get", "patch"])
            ),
        ])
    );
    // A plugin granted pod_logs adds pods (list) and pods/log (get), and only then.
    let with_logs = render(json!({"homeCluster": {"name": "home"},
        "plugins": {"log-archive": null, "mysql-sync": null,
                    "tail": {"wasm": "tail.wasm", "grants": {"pod_logs": {"max_bytes_per_container": 1024}}}}}));
    let rules = granted(object(&with_logs, "ClusterRole"));
    assert_eq!(rules[&(String::new(), "pods".to_string())], set(&["list"]));
    assert_eq!(
        rules[&(String::new(), "pods/log".to_string())],
        set(&["get"])
    );
    let without = render(json!({"homeCluster": {"name": "home"},
        "plugins": {"log-archive": null}}));
    let rules = granted(object(&without, "ClusterRole"));
    assert!(
        rules.keys().all(|(group, _)| !group.is_empty()),
        "no core resources without pod_logs: {rules:?}"
    );
    // A plugin granted `job` (annotations and labels on its jobs) adds get and patch on every
    // watched kind, and only then (the remote kit's `jobWrites` gives the same).
    let with_writes = render(json!({"homeCluster": {"name": "home"},
        "config": {"kinds": [{"name": "batch-job"}, {"name": "volcano-job"}]},
        "plugins": {"log-archive": {"wasm": "log-archive.wasm",
            "grants": {"job": {"annotations": ["archive.jobrelay.io/"]}}}}}));
    let rules = granted(object(&with_writes, "ClusterRole"));
    for resource in [("batch", "jobs"), ("batch.volcano.sh", "jobs")] {
        assert_eq!(
            rules[&(resource.0.to_string(), resource.1.to_string())],
            set(&["list", "watch", "get", "patch"]),
            "{resource:?}"
        );
    }
    // A name that is no built-in, without group and plural, is refused naming it.
    let why = refused(json!({"homeCluster": {"name": "home"},
        "config": {"kinds": [{"name": "tf-job"}]}}));
    assert!(
        why.contains("config.kinds[0]") && why.contains("tf-job"),
        "{why}"
    );
    // The old hand-kept list is gone: the schema refuses it.
    let why = refused(json!({"rbac": {"jobResources": []}}));
    assert!(why.contains("jobResources"), "{why}");
}

/// Clean-up deletes finished jobs of the kinds its rules name, so those kinds, and only those,
/// get delete; a dry run never calls DELETE and gets none, nor does a main file without
/// `cleanup:`. The section reaches the daemon's main file as given.
#[test]
fn the_home_rules_grant_delete_only_on_the_kinds_clean_up_deletes() {
    let set = |verbs: &[&str]| verbs.iter().map(|v| v.to_string()).collect::<BTreeSet<_>>();
    let batch = ("batch".to_string(), "jobs".to_string());
    let volcano = ("batch.volcano.sh".to_string(), "jobs".to_string());
    let values = |cleanup: Value| {
        let mut config = json!({"kinds": [{"name": "batch-job"}, {"name": "volcano-job"}]});
        if !cleanup.is_null() {
            config["cleanup"] = cleanup;
        }
        json!({"homeCluster": {"name": "home"}, "config": config,
            "plugins": {"log-archive": null}})
    };
    let rules = json!([{"kinds": ["volcano-job"], "after_finished": "1h"}]);
    let objects = render(values(json!({"rules": rules})));
    assert_eq!(main_file(&objects).cleanup.rules.len(), 1);
    let granted_rules = granted(object(&objects, "ClusterRole"));
    assert_eq!(granted_rules[&volcano], set(&["list", "watch", "delete"]));
    assert_eq!(granted_rules[&batch], set(&["list", "watch"]));
    // Limited to namespaces, the Role in each carries the same delete.
    let limited = render(with(
        values(json!({"rules": rules})),
        json!({"config": {"watch": {"namespaces": ["ml"]}}}),
    ));
    let role = granted(object(&limited, "Role"));
    assert_eq!(role[&volcano], set(&["list", "watch", "delete"]));
    assert_eq!(role[&batch], set(&["list", "watch"]));
    // A dry run, and no clean-up at all: nobody gets delete.
    for cleanup in [json!({"dry_run": true, "rules": rules}), Value::Null] {
        let objects = render(values(cleanup.clone()));
        main_file(&objects);
        let granted_rules = granted(object(&objects, "ClusterRole"));
        assert!(
            granted_rules
                .values()
                .all(|verbs| !verbs.contains("delete")),
            "{cleanup}: {granted_rules:?}"
        );
        assert_eq!(
            granted_rules[&volcano],
            set(&["list", "watch"]),
            "{cleanup}"
        );
    }
    // With a finalizer too, delete comes after get and patch.
    let held = render(with(
        values(json!({"rules": rules})),
        json!({"config": {"kinds": [{"name": "batch-job"},
            {"name": "volcano-job", "finalizer": true}]}}),
    ));
    let role = object(&held, "ClusterRole");
    let verbs = role["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .find(|rule| rule["apiGroups"] == json!(["batch.volcano.sh"]))
        .map(|rule| rule["verbs"].clone());
    assert_eq!(
        verbs,
        Some(json!(["list", "watch", "get", "patch", "delete"]))
    );
}

#[test]
fn with_leader_election_the_chart_adds_the_lease_role_and_rolls_pods_one_at_a_time() {
    let default = render(json!({}));
    assert!(
        default
            .iter()
            .all(|(_, o)| o["kind"] != "Role" && o["kind"] != "RoleBinding"),
        "no Lease access without leader election"
    );
    assert_eq!(main_file(&default).coordination.mode, Mode::Single);
    assert_eq!(
        object(&default, "Deployment")["spec"]["strategy"]["type"],
        "Recreate"
    );

    let objects = render(with(
        coordinated("leader"),
        json!({
            "replicas": 2,
            "persistence": {"enabled": false},
            "acknowledgeEphemeralState": true,
            "homeCluster": {"name": "home"},
        }),
    ));
    let deployment = object(&objects, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(deployment["spec"]["strategy"]["type"], "RollingUpdate");
    let env = &deployment["spec"]["template"]["spec"]["containers"][0]["env"];
    for (name, field) in [
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
    ] {
        let var = env
            .as_array()
            .expect("env")
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("{name} not set"));
        assert_eq!(var["valueFrom"]["fieldRef"]["fieldPath"], field);
    }
    let binding = named(&objects, "RoleBinding", "jobrelay-lease");
    assert_eq!(binding["roleRef"]["name"], "jobrelay-lease");
    assert_eq!(binding["subjects"][0]["name"], "jobrelay");
    assert_eq!(binding["subjects"][0]["namespace"], "platform");
    // The ClusterRole gains nothing from leader election.
    let watched_home = render(json!({"homeCluster": {"name": "home"}}));
    assert_eq!(
        object(&objects, "ClusterRole")["rules"],
        object(&watched_home, "ClusterRole")["rules"]
    );
    let main = main_file(&objects);
    assert_eq!(main.coordination.mode, Mode::Leader);
    assert_eq!(main.coordination.lease_name, "jobrelay");
    assert_eq!(main.coordination.kubeconfig, None, "in-cluster credentials");
    assert_eq!(main.coordination.lease_duration_seconds, 15);

    let sharded = render(with(
        coordinated("sharded"),
        json!({
            "replicas": 3,
            "persistence": {"enabled": false},
            "acknowledgeEphemeralState": true,
            "homeCluster": {"name": "home"},
        }),
    ));
    let main = main_file(&sharded);
    assert_eq!(main.coordination.mode, Mode::Sharded);
    let home = main.home_cluster.expect("the home cluster is watched");
    assert_eq!(home.name, "home");
    assert_eq!(
        home.service_account_dir,
        Path::new("/var/run/secrets/kubernetes.io/serviceaccount"),
        "with the mounted service account"
    );
    assert_eq!(
        object(&sharded, "Deployment")["spec"]["strategy"]["type"],
        "RollingUpdate"
    );
}

/// Every key the chart sets itself can be set from `config` instead, without a second copy of
/// the key in the main file (which the daemon refuses): an S3 archive, a state URL, telemetry,
/// the manifests' folder.
#[test]
fn config_keys_the_chart_sets_can_be_set_from_values() {
    let objects = render(json!({
        "config": {
            "archive": {"s3": {"bucket": "job-logs", "region": "eu-west-1"}},
            "state": {"url": "env:JOBRELAY_STATE_URL", "table_prefix": "relay_"},
            "telemetry": {"listen": "0.0.0.0:9464"},
            "plugin_manifests_dir": "/etc/jobrelay-plugins",
        },
    }));
    let text = named(&objects, "ConfigMap", "jobrelay-config")["data"]["jobrelay.yaml"]
        .as_str()
        .expect("main file")
        .to_string();
    for key in [
        "archive:",
        "state:",
        "telemetry:",
        "plugin_dir:",
        "plugin_manifests_dir:",
    ] {
        let times = text.lines().filter(|l| l.starts_with(key)).count();
        assert_eq!(times, 1, "`{key}` {times} times in:\n{text}");
    }
    let main = main_file(&objects);
    assert!(
        matches!(
            main.archive,
            jobrelay_capabilities::archive::ArchiveLocation::S3(_)
        ),
        "{text}"
    );
    assert!(main.state.to_string().contains("relay_"), "{text}");
}

/// RBAC: the ClusterRole and its binding exist only when the cluster jobrelay runs in is
/// watched, under a name no other release or built-in role has; `rbac.create: false` leaves
/// every role to the operator.
#[test]
fn cluster_rights_only_for_a_watched_home_cluster_under_a_name_that_cannot_collide() {
    let objects = render(json!({"homeCluster": {"name": "home"}}));
    let role = object(&objects, "ClusterRole");
    let binding = object(&objects, "ClusterRoleBinding");
    assert_eq!(role["metadata"]["name"], "jobrelay-platform-jobrelay");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    assert_eq!(binding["subjects"][0]["name"], "jobrelay");

    let none = render(with(
        coordinated("leader"),
        json!({"rbac": {"create": false}, "homeCluster": {"name": "home"}}),
    ));
    let kinds: BTreeSet<&str> = none
        .iter()
        .filter_map(|(_, o)| o["kind"].as_str())
        .collect();
    for kind in ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"] {
        assert!(
            !kinds.contains(kind),
            "{kind} with rbac.create false: {kinds:?}"
        );
    }
}

/// The Argo CD cluster source (`config.cluster_sources.argocd`) is granted get, list and watch
/// on Secrets in the namespace it reads, by a Role there bound to the pod's service account:
/// no other namespace's Secrets, and no ClusterRole on Secrets. Without the source, or when
/// `cluster_sources.kubeconfig` names other credentials, no such Role is made.
#[test]
fn the_argo_cd_source_is_granted_its_secrets_in_its_namespace_only() {
    let secrets_granted = |objects: &[(String, Value)]| -> Vec<(String, String)> {
        objects
            .iter()
            .map(|(_, o)| o)
            .filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole")
            .filter(|o| granted(o).contains_key(&(String::new(), "secrets".to_string())))
            .map(|o| {
                (
                    o["kind"].as_str().unwrap_or_default().to_string(),
                    o["metadata"]["namespace"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                )
            })
            .collect()
    };
    for (source, namespace) in [
        (json!({"argocd": {}}), "argocd"),
        (json!({"argocd": {"namespace": "gitops"}}), "gitops"),
    ] {
        let objects = render(json!({"config": {"cluster_sources": source}}));
        let name = "jobrelay-platform-argocd-clusters";
        let role = named(&objects, "Role", name);
        assert_eq!(role["metadata"]["namespace"], namespace);
        assert_eq!(
            granted(role),
            BTreeMap::from([(
                (String::new(), "secrets".to_string()),
                BTreeSet::from(["get".to_string(), "list".to_string(), "watch".to_string()])
            )])
        );
        let binding = named(&objects, "RoleBinding", name);
        assert_eq!(binding["metadata"]["namespace"], namespace);
        assert_eq!(binding["roleRef"]["kind"], "Role");
        assert_eq!(binding["roleRef"]["name"], name);
        assert_eq!(
            binding["subjects"],
            json!([{"kind": "ServiceAccount", "name": "jobrelay", "namespace": "platform"}])
        );
        assert_eq!(
            secrets_granted(&objects),
            [("Role".to_string(), namespace.to_string())],
            "Secrets are granted in {namespace} only"
        );
        let main = main_file(&objects);
        let argocd = main.cluster_sources.argocd.expect("the source is on");
        assert_eq!(argocd.namespace, namespace);
        assert_eq!(
            argocd.label_selector,
            "argocd.argoproj.io/secret-type=cluster"
        );
    }
    for values in [
        json!({}),
        json!({"config": {"cluster_sources": {"kubeconfig": "/etc/home/kubeconfig", "argocd": {}}}}),
        json!({"rbac": {"create": false}, "config": {"cluster_sources": {"argocd": {}}}}),
    ] {
        let objects = render(values.clone());
        assert!(secrets_granted(&objects).is_empty(), "{values}");
    }
    let why = refused(json!({"config": {"cluster_sources": {"argocd": {"namespace": "Argo CD"}}}}));
    assert!(
        why.contains("config.cluster_sources.argocd.namespace"),
        "{why}"
    );
}

/// The Cluster API source (`config.cluster_sources.cluster_api`) is granted get, list and
/// watch on Secrets and Cluster API's Clusters in the Clusters' namespace it reads (and on
/// nothing else), by a Role there bound to the pod's
/// service account: no other namespace's Secrets, and no ClusterRole on Secrets. With the Argo
/// CD source too, each gets its own Role in its own namespace. Without the source, or when
/// `cluster_sources.kubeconfig` names other credentials, no such Role is made; without a
/// namespace the values are refused.
#[test]
fn the_cluster_api_source_is_granted_its_secrets_in_its_namespace_only() {
    let secrets_granted = |objects: &[(String, Value)]| -> BTreeSet<(String, String)> {
        objects
            .iter()
            .map(|(_, o)| o)
            .filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole")
            .filter(|o| granted(o).contains_key(&(String::new(), "secrets".to_string())))
            .map(|o| {
                (
                    o["kind"].as_str().unwrap_or_default().to_string(),
                    o["metadata"]["namespace"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                )
            })
            .collect()
    };
    let name = "jobrelay-platform-cluster-api-clusters";
    for (sources, expected) in [
        (
            json!({"cluster_api": {"namespace": "fleet"}}),
            vec!["fleet"],
        ),
        (
            json!({"argocd": {}, "cluster_api": {"namespace": "capi-system"}}),
            vec!["argocd", "capi-system"],
        ),
    ] {
        let objects = render(json!({"config": {"cluster_sources": sources}}));
        let namespace = expected[expected.len() - 1];
        let role = named(&objects, "Role", name);
        assert_eq!(role["metadata"]["namespace"], namespace);
        let read = BTreeSet::from(["get".to_string(), "list".to_string(), "watch".to_string()]);
        assert_eq!(
            granted(role),
            BTreeMap::from([
                ((String::new(), "secrets".to_string()), read.clone()),
                (
                    ("cluster.x-k8s.io".to_string(), "clusters".to_string()),
                    read
                ),
            ])
        );
        let binding = named(&objects, "RoleBinding", name);
        assert_eq!(binding["metadata"]["namespace"], namespace);
        assert_eq!(binding["roleRef"]["kind"], "Role");
        assert_eq!(binding["roleRef"]["name"], name);
        assert_eq!(
            binding["subjects"],
            json!([{"kind": "ServiceAccount", "name": "jobrelay", "namespace": "platform"}])
        );
        assert_eq!(
            secrets_granted(&objects),
            expected
                .iter()
                .map(|ns| ("Role".to_string(), ns.to_string()))
                .collect::<BTreeSet<_>>(),
            "Secrets are granted in {expected:?} only"
        );
        let main = main_file(&objects);
        let capi = main.cluster_sources.cluster_api.expect("the source is on");
        assert_eq!(capi.namespace, namespace);
        assert_eq!(capi.label_selector, "cluster.x-k8s.io/cluster-name");
    }
    for values in [
        json!({}),
        json!({"config": {"cluster_sources": {"kubeconfig": "/etc/home/kubeconfig", "cluster_api": {"namespace": "fleet"}}}}),
        json!({"rbac": {"create": false}, "config": {"cluster_sources": {"cluster_api": {"namespace": "fleet"}}}}),
    ] {
        let objects = render(values.clone());
        assert!(secrets_granted(&objects).is_empty(), "{values}");
    }
    let why = refused(json!({"config": {"cluster_sources": {"cluster_api": {}}}}));
    assert!(why.contains("namespace"), "{why}");
    let why =
        refused(json!({"config": {"cluster_sources": {"cluster_api": {"namespace": "Fleet"}}}}));
    assert!(
        why.contains("config.cluster_sources.cluster_api.namespace"),
        "{why}"
    );
}

/// The ClusterProfile source (issue 51, item 2): a Role in the profiles' namespace granting
/// get, list and watch on `clusterprofiles` of `multicluster.x-k8s.io` and nothing else (no
/// Secret: a profile holds no credential), bound to the ServiceAccount; the access-provider
/// file mounted from a Secret with `extraVolumes`; no Role with `cluster_sources.kubeconfig`
/// or `rbac.create: false`; the namespace and the file required.
#[test]
fn the_cluster_profile_source_is_granted_its_clusterprofiles_in_its_namespace_only() {
    let name = "jobrelay-platform-cluster-profiles";
    let profiles = |objects: &[(String, Value)]| -> Vec<String> {
        objects
            .iter()
            .map(|(_, o)| o)
            .filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole")
            .filter(|o| {
                granted(o).contains_key(&(
                    "multicluster.x-k8s.io".to_string(),
                    "clusterprofiles".to_string(),
                ))
            })
            .map(|o| {
                o["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    };
    let source = json!({"namespace": "fleet-inventory",
        "access_providers": "/etc/jobrelay-providers/providers.json"});
    let objects = render(json!({
        "config": {"cluster_sources": {"cluster_profile": source}},
        "extraVolumes": [{"name": "providers", "secret": {"secretName": "jobrelay-providers"}}],
        "extraVolumeMounts": [{"name": "providers", "mountPath": "/etc/jobrelay-providers",
            "readOnly": true}],
    }));
    let role = named(&objects, "Role", name);
    assert_eq!(role["metadata"]["namespace"], "fleet-inventory");
    assert_eq!(
        granted(role),
        BTreeMap::from([(
            (
                "multicluster.x-k8s.io".to_string(),
                "clusterprofiles".to_string()
            ),
            BTreeSet::from(["get".to_string(), "list".to_string(), "watch".to_string()])
        )])
    );
    let binding = named(&objects, "RoleBinding", name);
    assert_eq!(binding["metadata"]["namespace"], "fleet-inventory");
    assert_eq!(binding["roleRef"]["name"], name);
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "jobrelay", "namespace": "platform"}])
    );
    assert_eq!(profiles(&objects), ["fleet-inventory"]);
    // No Secret is granted for this source: no Role on Secrets is rendered at all.
    assert!(
        !objects
            .iter()
            .map(|(_, o)| o)
            .any(|o| (o["kind"] == "Role" || o["kind"] == "ClusterRole")
                && granted(o).contains_key(&(String::new(), "secrets".to_string()))),
        "a Secret granted"
    );
    let pod = &object(&objects, "Deployment")["spec"]["template"]["spec"];
    assert!(
        pod["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .any(|v| v["name"] == "providers" && v["secret"]["secretName"] == "jobrelay-providers"),
        "{pod:#}"
    );
    assert!(
        pod["containers"][0]["volumeMounts"]
            .as_array()
            .expect("mounts")
            .iter()
            .any(|m| m["mountPath"] == "/etc/jobrelay-providers"),
        "{pod:#}"
    );
    for values in [
        json!({"config": {"cluster_sources": {"kubeconfig": "/etc/home/kubeconfig", "cluster_profile": source}}}),
        json!({"rbac": {"create": false}, "config": {"cluster_sources": {"cluster_profile": source}}}),
    ] {
        assert!(profiles(&render(values.clone())).is_empty(), "{values}");
    }
    let why = refused(
        json!({"config": {"cluster_sources": {"cluster_profile": {"access_providers": "p.json"}}}}),
    );
    assert!(why.contains("namespace"), "{why}");
    let why = refused(
        json!({"config": {"cluster_sources": {"cluster_profile": {"namespace": "fleet"}}}}),
    );
    assert!(why.contains("access_providers"), "{why}");
}

/// The knobs a team sets for production reach the objects: scheduling, pod annotations, image
/// pull secrets, the service account's annotations (IRSA), and the Prometheus Operator's
/// ServiceMonitor and PrometheusRule, whose alerts use only metrics docs/telemetry.md lists.
#[test]
fn scheduling_identity_and_monitoring_knobs_reach_the_objects() {
    let objects = render(json!({
        "nodeSelector": {"pool": "system"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "platform", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
        "priorityClassName": "platform-critical",
        "podAnnotations": {"example.com/owner": "platform"},
        "imagePullSecrets": ["registry-credentials"],
        "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/jobrelay"}},
        "metrics": {
            "serviceMonitor": {"enabled": true, "labels": {"release": "prometheus"}},
            "prometheusRule": {"enabled": true},
        },
    }));
    let pod = &object(&objects, "Deployment")["spec"]["template"];
    assert_eq!(pod["spec"]["nodeSelector"]["pool"], "system");
    assert_eq!(pod["spec"]["tolerations"][0]["key"], "dedicated");
    assert!(pod["spec"]["affinity"]["nodeAffinity"].is_object());
    assert_eq!(pod["spec"]["priorityClassName"], "platform-critical");
    assert_eq!(
        pod["metadata"]["annotations"]["example.com/owner"],
        "platform"
    );
    assert_eq!(
        pod["spec"]["imagePullSecrets"][0]["name"],
        "registry-credentials"
    );
    assert_eq!(
        object(&objects, "ServiceAccount")["metadata"]["annotations"]["eks.amazonaws.com/role-arn"],
        "arn:aws:iam::1:role/jobrelay"
    );
    let monitor = object(&objects, "ServiceMonitor");
    assert_eq!(monitor["metadata"]["labels"]["release"], "prometheus");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");

    let documented = std::fs::read_to_string(repo_root().join("docs/telemetry.md")).expect("docs");
    let rules = &object(&objects, "PrometheusRule")["spec"]["groups"][0]["rules"];
    let rules = rules.as_array().expect("rules");
    assert!(rules.len() >= 8, "{rules:?}");
    for rule in rules {
        let expr = rule["expr"].as_str().expect("expr");
        let metrics: Vec<&str> = expr
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| w.starts_with("jobrelay_"))
            .collect();
        // Each reads jobrelay's metrics, or `up`, Prometheus's own series of a scrape target.
        let reads_up = expr
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .any(|w| w == "up");
        assert!(!metrics.is_empty() || reads_up, "{expr}");
        for metric in metrics {
            assert!(
                documented.contains(&format!("`{metric}`")),
                "{} uses {metric}, which docs/telemetry.md does not list",
                rule["alert"]
            );
        }
        // Prometheus's own template braces come out of Helm's as written.
        let summary = rule["annotations"]["summary"].as_str().expect("summary");
        assert!(!summary.contains('"'), "{summary}");
        if rule["alert"] == "JobrelayClusterError" {
            assert!(summary.contains("{{ $labels.cluster }}"), "{summary}");
        }
    }

    // Off by default: no Prometheus Operator objects.
    let default = render(json!({}));
    assert!(
        default
            .iter()
            .all(|(_, o)| o["kind"] != "ServiceMonitor" && o["kind"] != "PrometheusRule")
    );
}

/// The knobs of issue 27, point 6, reach the pod: extra environment, volumes and mounts (after
/// the chart's own), an existing service account instead of the chart's, security contexts
/// merged over the hardened defaults, an image pinned by digest, and the start's budget.
#[test]
fn extra_environment_volumes_identity_and_image_knobs_reach_the_pod() {
    let digest = format!("sha256:{}", "ab".repeat(32));
    let objects = render(json!({
        "homeCluster": {"name": "home"},
        "image": {"digest": digest},
        "extraEnv": [
            {"name": "HTTPS_PROXY", "value": "http://proxy:3128"},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
        ],
        "extraVolumes": [{"name": "ca", "configMap": {"name": "corporate-ca"}}],
        "extraVolumeMounts": [{"name": "ca", "mountPath": "/etc/ssl/corporate", "readOnly": true}],
        "serviceAccount": {"create": false, "name": "platform-jobrelay"},
        "podSecurityContext": {"fsGroupChangePolicy": "OnRootMismatch"},
        "securityContext": {"runAsUser": 20002},
        "startupProbe": {"periodSeconds": 5, "failureThreshold": 240},
    }));
    let pod = &object(&objects, "Deployment")["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(
        container["image"],
        format!("ghcr.io/example/jobrelay@{digest}")
    );
    let env: Vec<&str> = container["env"]
        .as_array()
        .expect("env")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(
        env,
        [
            "POD_NAME",
            "POD_NAMESPACE",
            "JOBRELAY_CONFIG",
            "JOBRELAY_SERVER",
            "HTTPS_PROXY",
            "TOKEN"
        ]
    );
    assert_eq!(
        container["env"][5]["valueFrom"]["secretKeyRef"]["name"],
        "s"
    );
    assert!(
        pod["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .any(|v| v["name"] == "ca" && v["configMap"]["name"] == "corporate-ca")
    );
    assert!(
        container["volumeMounts"]
            .as_array()
            .expect("mounts")
            .iter()
            .any(|m| m["name"] == "ca" && m["mountPath"] == "/etc/ssl/corporate")
    );
    // An existing service account: none made, and every binding names it.
    assert_eq!(pod["serviceAccountName"], "platform-jobrelay");
    assert!(objects.iter().all(|(_, o)| o["kind"] != "ServiceAccount"));
    assert_eq!(
        object(&objects, "ClusterRoleBinding")["subjects"][0]["name"],
        "platform-jobrelay"
    );
    // Overrides merge over the hardened defaults instead of replacing them.
    assert_eq!(
        pod["securityContext"]["fsGroupChangePolicy"],
        "OnRootMismatch"
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(container["securityContext"]["runAsUser"], 20002);
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        container["securityContext"]["capabilities"]["drop"],
        json!(["ALL"])
    );
    assert_eq!(container["startupProbe"]["periodSeconds"], 5);
    assert_eq!(container["startupProbe"]["failureThreshold"], 240);
    // A service account of its own name, made by the chart.
    let renamed = render(json!({"serviceAccount": {"name": "relay"}}));
    assert_eq!(
        object(&renamed, "ServiceAccount")["metadata"]["name"],
        "relay"
    );
    // A digest must be one.
    let why = refused(json!({"image": {"digest": "latest"}}));
    assert!(why.contains("image.digest"), "{why}");
}

/// After install Helm prints NOTES.txt: how to reach the status page and how to add a cluster,
/// with this release's names. `helm template` leaves NOTES.txt out, so it is rendered here as
/// a template of a copy of the chart.
#[test]
fn the_notes_say_how_to_reach_the_status_and_add_a_cluster() {
    let notes = |overrides: Value| render_notes(&chart_dir(), &overrides);
    let with_clusters = notes(json!({"clusters": {"secretName": "jobrelay-clusters"}}));
    assert!(
        with_clusters.contains("port-forward svc/jobrelay-metrics 9464"),
        "{with_clusters}"
    );
    assert!(
        with_clusters.contains("Secret jobrelay-clusters"),
        "{with_clusters}"
    );
    let without = notes(json!({}));
    assert!(without.contains("set clusters.secretName"), "{without}");
}

/// NOTES.txt of `chart` rendered with `overrides`: a copy of the chart with the notes as the
/// body of a named template, printed as a JSON string in a manifest of its own.
fn render_notes(chart: &Path, overrides: &Value) -> String {
    let copy = tempfile::tempdir().expect("tempdir");
    let status = Command::new("cp")
        .arg("-r")
        .arg(chart)
        .arg(copy.path().join("chart"))
        .status()
        .expect("cp");
    assert!(status.success());
    let chart = copy.path().join("chart");
    let notes = std::fs::read_to_string(chart.join("templates/NOTES.txt")).expect("NOTES.txt");
    std::fs::write(
        chart.join("templates/zz-notes.yaml"),
        format!("{{{{- define \"test.notes\" }}}}{notes}{{{{ end }}}}\nnotes: {{{{ include \"test.notes\" . | toJson }}}}\n"),
    )
    .expect("notes template");
    let out = helm_template(
        &chart,
        overrides,
        &["--show-only", "templates/zz-notes.yaml"],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let doc: Value = serde_yaml_ng::from_str(&out).expect("notes manifest");
    doc["notes"].as_str().expect("notes").to_string()
}

/// The NetworkPolicy lets in only the metrics port (from the peers given) and keeps egress
/// open unless rules are given.
#[test]
fn the_network_policy_admits_only_the_metrics_port() {
    let objects = render(json!({
        "networkPolicy": {
            "enabled": true,
            "metricsFrom": [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}],
        },
    }));
    let policy = object(&objects, "NetworkPolicy");
    let spec = &policy["spec"];
    assert_eq!(
        spec["podSelector"]["matchLabels"]["app.kubernetes.io/instance"],
        "jobrelay"
    );
    assert_eq!(spec["ingress"].as_array().map(Vec::len), Some(1));
    assert_eq!(spec["ingress"][0]["ports"][0]["port"], 9464);
    assert_eq!(
        spec["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"]["name"],
        "monitoring"
    );
    assert_eq!(spec["egress"], json!([{}]), "egress open by default");
    let default = render(json!({}));
    assert!(default.iter().all(|(_, o)| o["kind"] != "NetworkPolicy"));
}

/// Every manifest the chart renders, under the values a production install sets, decodes as
/// its typed Kubernetes object, and loses no key doing so: a misspelt or misplaced key (which
/// the API server would drop or refuse) fails here (Helm itself checks only that the output is
/// YAML). The Prometheus Operator's objects, which k8s-openapi does not know, are held to the
/// fields their CRDs define for what the chart writes.
#[test]
fn every_rendered_manifest_is_a_valid_kubernetes_object() {
    use k8s_openapi::api::{apps, core, networking, policy, rbac};
    let knobs = json!({
        "clusters": {"secretName": "jobrelay-clusters"},
        "envFromSecrets": ["jobrelay-secrets"],
        "homeCluster": {"name": "home"},
        "config": {"archive": {"s3": {"bucket": "logs", "region": "eu-west-1"}}},
        "nodeSelector": {"pool": "system"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "platform", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
        "priorityClassName": "platform-critical",
        "podAnnotations": {"example.com/owner": "platform"},
        "imagePullSecrets": ["registry-credentials"],
        "image": {"digest": format!("sha256:{}", "0".repeat(64))},
        "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/jobrelay"}},
        "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}],
        "extraVolumes": [{"name": "ca", "configMap": {"name": "corporate-ca"}}],
        "extraVolumeMounts": [{"name": "ca", "mountPath": "/etc/ssl/corporate", "readOnly": true}],
        "networkPolicy": {"enabled": true},
        "metrics": {
            "serviceMonitor": {"enabled": true, "labels": {"release": "prometheus"}},
            "prometheusRule": {"enabled": true, "jobs": {"enabled": true},
                               "additionalRuleLabels": {"team": "platform"},
                               "alerts": {"JobrelayLaneBehind": {"severity": "critical"}}},
        },
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                       "whenUnsatisfiable": "ScheduleAnyway"}],
        "podLabels": {"team": "ml"},
        "terminationGracePeriodSeconds": 45,
        "livenessProbe": {"periodSeconds": 20},
        "readinessProbe": {"successThreshold": 2},
        "service": {"annotations": {"prometheus.io/scrape": "true"}},
    });
    let one = with(
        with(knobs.clone(), coordinated("leader")),
        json!({"persistence": {"enabled": true, "size": "20Gi", "storageClassName": "fast"}}),
    );
    let several = with(
        with(knobs, coordinated("sharded")),
        json!({"replicas": 3, "persistence": {"enabled": false}, "acknowledgeEphemeralState": true,
               "config": {"watch": {"namespaces": ["ml", "research"]}}}),
    );
    let mut seen = BTreeSet::new();
    for overrides in [json!({"clusters": {"secretName": "c"}}), one, several] {
        for (file, object) in render(overrides) {
            let kind = object["kind"].as_str().unwrap_or_default().to_string();
            let round_trip = match kind.as_str() {
                "Deployment" => typed::<apps::v1::Deployment>(&object),
                "Service" => typed::<core::v1::Service>(&object),
                "ServiceAccount" => typed::<core::v1::ServiceAccount>(&object),
                "ConfigMap" => typed::<core::v1::ConfigMap>(&object),
                "PersistentVolumeClaim" => typed::<core::v1::PersistentVolumeClaim>(&object),
                "PodDisruptionBudget" => typed::<policy::v1::PodDisruptionBudget>(&object),
                "NetworkPolicy" => typed::<networking::v1::NetworkPolicy>(&object),
                "Role" => typed::<rbac::v1::Role>(&object),
                "RoleBinding" => typed::<rbac::v1::RoleBinding>(&object),
                "ClusterRole" => typed::<rbac::v1::ClusterRole>(&object),
                "ClusterRoleBinding" => typed::<rbac::v1::ClusterRoleBinding>(&object),
                "ServiceMonitor" | "PrometheusRule" => {
                    operator_object(&kind, &object);
                    Ok(object.clone())
                }
                other => panic!("{file}: a {other:?} that this test does not know how to check"),
            };
            let round_trip = round_trip.unwrap_or_else(|e| panic!("{file}: {kind}: {e}"));
            let mut lost = Vec::new();
            lost_keys("", &object, &round_trip, &mut lost);
            assert!(
                lost.is_empty(),
                "{file}: {kind} has keys its type does not: {lost:?}"
            );
            seen.insert(kind);
        }
    }
    for kind in [
        "Deployment",
        "ClusterRole",
        "Role",
        "RoleBinding",
        "PersistentVolumeClaim",
        "NetworkPolicy",
        "ServiceMonitor",
        "PrometheusRule",
    ] {
        assert!(seen.contains(kind), "no {kind} rendered: {seen:?}");
    }

    // The check itself: a misplaced key is found, a wrong type refused.
    let mut bad = object(&render(json!({})), "Deployment").clone();
    bad["spec"]["template"]["spec"]["nodeSelectr"] = json!({"pool": "x"});
    let round_trip = typed::<apps::v1::Deployment>(&bad).expect("still decodes");
    let mut lost = Vec::new();
    lost_keys("", &bad, &round_trip, &mut lost);
    assert_eq!(lost, ["/spec/template/spec/nodeSelectr"]);
    bad["spec"]["replicas"] = json!("two");
    assert!(typed::<apps::v1::Deployment>(&bad).is_err());
}

/// `object` decoded as `T` and encoded again.
fn typed<T: serde::de::DeserializeOwned + serde::Serialize>(
    object: &Value,
) -> Result<Value, String> {
    let decoded: T = serde_json::from_value(object.clone()).map_err(|e| e.to_string())?;
    serde_json::to_value(&decoded).map_err(|e| e.to_string())
}

/// Paths of keys in `original` that `round_trip` does not have.
fn lost_keys(path: &str, original: &Value, round_trip: &Value, lost: &mut Vec<String>) {
    match (original, round_trip) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                let here = format!("{path}/{key}");
                match b.get(key) {
                    Some(other) => lost_keys(&here, value, other, lost),
                    // An empty map or list, or null, may be dropped without meaning anything.
                    None if is_empty(value) => {}
                    None => lost.push(here),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                lost_keys(&format!("{path}/{i}"), x, y, lost);
            }
        }
        _ => {}
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// The Prometheus Operator's objects, held to the fields the operator's CRDs define for the
/// parts the chart writes (monitoring.coreos.com/v1).
fn operator_object(kind: &str, object: &Value) {
    fn only(what: &str, value: &Value, allowed: &[&str]) {
        let map = value
            .as_object()
            .unwrap_or_else(|| panic!("{what} is not a map: {value}"));
        for key in map.keys() {
            assert!(
                allowed.contains(&key.as_str()),
                "{what} has an unknown field {key:?}"
            );
        }
    }
    assert_eq!(object["apiVersion"], "monitoring.coreos.com/v1", "{kind}");
    only(kind, object, &["apiVersion", "kind", "metadata", "spec"]);
    only(
        &format!("{kind}.metadata"),
        &object["metadata"],
        &["name", "namespace", "labels", "annotations"],
    );
    let spec = &object["spec"];
    if kind == "ServiceMonitor" {
        only(
            "ServiceMonitor.spec",
            spec,
            &["selector", "endpoints", "namespaceSelector", "jobLabel"],
        );
        for endpoint in spec["endpoints"].as_array().expect("endpoints") {
            only(
                "ServiceMonitor endpoint",
                endpoint,
                &[
                    "port",
                    "path",
                    "interval",
                    "scrapeTimeout",
                    "scheme",
                    "relabelings",
                ],
            );
            assert!(endpoint["port"].is_string(), "{endpoint}");
        }
    } else {
        only("PrometheusRule.spec", spec, &["groups"]);
        for group in spec["groups"].as_array().expect("groups") {
            only(
                "PrometheusRule group",
                group,
                &["name", "interval", "rules"],
            );
            for rule in group["rules"].as_array().expect("rules") {
                only(
                    "PrometheusRule rule",
                    rule,
                    &["alert", "record", "expr", "for", "labels", "annotations"],
                );
                assert!(rule["expr"].is_string(), "{rule}");
                if let Some(wait) = rule.get("for") {
                    let wait = wait.as_str().expect("`for` is a duration string");
                    assert!(
                        wait.trim_end_matches(['s', 'm', 'h'])
                            .parse::<u32>()
                            .is_ok(),
                        "{wait}"
                    );
                }
            }
        }
    }
}

/// The values schema describes every value the templates read and makes Helm refuse, before
/// rendering, unknown keys (a typo would otherwise be ignored), values of the wrong type, a
/// coordination mode that does not exist; each refusal names the value. `global`, which
/// wrapper charts pass to every subchart, is allowed.
#[test]
fn the_values_schema_refuses_typos_and_wrong_types() {
    // Every top-level value a template reads is a property of the schema.
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(chart_dir().join("values.schema.json")).expect("schema"),
    )
    .expect("schema");
    let properties = schema["properties"].as_object().expect("properties");
    for entry in std::fs::read_dir(chart_dir().join("templates"))
        .expect("templates")
        .flatten()
    {
        let text = std::fs::read_to_string(entry.path()).expect("template");
        for used in text.split(".Values.").skip(1) {
            let key: String = used
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect();
            assert!(
                properties.contains_key(&key),
                "{} reads .Values.{key}, which the schema does not describe",
                entry.path().display()
            );
        }
    }

    for (bad, named_in_error) in [
        (json!({"replica": 2}), "replica"),
        (json!({"replicas": "two"}), "replicas"),
        (
            json!({"coordination": {"mode": "leaders"}}),
            "coordination.mode",
        ),
        (json!({"persistence": {"enabeld": true}}), "enabeld"),
        (
            json!({"metrics": {"serviceMonitor": {"interval": "often"}}}),
            "metrics.serviceMonitor.interval",
        ),
        (
            json!({"plugins": {"Bad Name": {"wasm": "x.wasm"}}}),
            "plugins",
        ),
        (
            json!({"plugins": {"p": {"delivery": "transitions"}}}),
            "plugins.p",
        ),
        (
            json!({"imagePullSecrets": [{"name": "x"}]}),
            "imagePullSecrets.0",
        ),
        (
            json!({"startupProbe": {"periodSeconds": 0}}),
            "startupProbe.periodSeconds",
        ),
        (json!({"extraEnv": [{"value": "x"}]}), "extraEnv.0"),
    ] {
        let why = refused(bad.clone());
        assert!(
            why.contains("values don't meet the specifications of the schema"),
            "{bad}: refused by the schema, not later: {why}"
        );
        assert!(
            why.contains(named_in_error),
            "{bad}: should name {named_in_error}: {why}"
        );
    }
    let objects =
        render(json!({"global": {"imageRegistry": "registry.example.com", "anything": {"x": 1}}}));
    assert!(objects.iter().any(|(_, o)| o["kind"] == "Deployment"));
}

/// `helm lint --strict` of the chart, with its defaults and with the production-like values in
/// `ci/production-values.yaml`, which also render to a main file and manifests the daemon
/// accepts.
#[test]
fn helm_lint_and_template_pass_with_the_production_values() {
    let chart = chart_dir();
    let chart_arg = chart.to_string_lossy();
    let production = chart.join("ci/production-values.yaml");
    let production_arg = production.to_string_lossy();
    helm(&["lint", "--strict", &chart_arg]).unwrap_or_else(|e| panic!("helm lint: {e}"));
    helm(&["lint", "--strict", &chart_arg, "--values", &production_arg])
        .unwrap_or_else(|e| panic!("helm lint with the production values: {e}"));
    let out = helm(&[
        "template",
        "jobrelay",
        &chart_arg,
        "--namespace",
        "platform",
        "--values",
        &production_arg,
    ])
    .unwrap_or_else(|e| panic!("helm template with the production values: {e}"));
    let objects: Vec<(String, Value)> = manifests(&out)
        .into_iter()
        .map(|(file, _, value)| (file, value))
        .collect();
    let main = main_file(&objects);
    assert_ne!(
        main.coordination.mode,
        Mode::Single,
        "production runs replicas"
    );
    assert!(matches!(main.state, StateBackend::MySql { .. }));
    let manifests = named(&objects, "ConfigMap", "jobrelay-plugins")["data"]
        .as_object()
        .expect("data")
        .clone();
    assert!(!manifests.is_empty());
    for (file, text) in manifests {
        let manifest: PluginManifest = serde_yaml_ng::from_str(text.as_str().expect("text"))
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        for connection in &manifest.grants.sql {
            assert!(
                main.sql.connections.contains_key(connection),
                "{file} is granted `{connection}`, which the main file does not define"
            );
        }
    }
    let deployment = object(&objects, "Deployment");
    assert!(deployment["spec"]["replicas"].as_u64() > Some(1));
    assert!(objects.iter().any(|(_, o)| o["kind"] == "PrometheusRule"));
}

/// A wrapper chart that depends on jobrelay (and jobrelay-remote) as subcharts and passes
/// `global:` values, as Argo CD and Flux set-ups do: `helm dependency build` (a file://
/// dependency, offline), `helm lint` and `helm template` all pass. A subchart whose schema
/// refuses unknown keys refuses `global` unless it lists it (helm/helm#10392).
#[test]
fn a_wrapper_chart_with_global_values_renders_jobrelay_as_a_subchart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wrapper = dir.path().join("platform-jobrelay");
    std::fs::create_dir_all(&wrapper).expect("wrapper");
    std::fs::write(
        wrapper.join("Chart.yaml"),
        format!(
            "apiVersion: v2\nname: platform-jobrelay\nversion: 1.0.0\ndependencies:\n  \
             - name: jobrelay\n    version: 0.2.0\n    repository: file://{}\n  \
             - name: jobrelay-remote\n    version: 0.1.0\n    repository: file://{}\n",
            chart_dir().display(),
            remote_chart_dir().display()
        ),
    )
    .expect("Chart.yaml");
    std::fs::write(
        wrapper.join("values.yaml"),
        "global:\n  environment: production\n  imageRegistry: registry.example.com\n\
         jobrelay:\n  clusters: {secretName: jobrelay-clusters}\n  homeCluster: {name: home}\n\
         jobrelay-remote:\n  tokens: [\"2026-11\"]\n",
    )
    .expect("values.yaml");
    let wrapper_arg = wrapper.to_string_lossy();
    helm(&["dependency", "build", &wrapper_arg])
        .unwrap_or_else(|e| panic!("helm dependency build: {e}"));
    helm(&["lint", "--strict", &wrapper_arg]).unwrap_or_else(|e| panic!("helm lint: {e}"));
    let out = helm(&["template", "argo", &wrapper_arg, "--namespace", "platform"])
        .unwrap_or_else(|e| panic!("helm template of the wrapper: {e}"));
    let objects: Vec<(String, Value)> = manifests(&out)
        .into_iter()
        .map(|(file, _, value)| (file, value))
        .collect();
    let deployment = named(&objects, "Deployment", "argo");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["serviceAccountName"],
        "argo"
    );
    assert!(
        objects.iter().any(|(_, o)| o["kind"] == "ClusterRole"
            && o["metadata"]["name"] == "jobrelay-platform-argo")
    );
    named(&objects, "Secret", "argo-token-2026-11");

    // Without `global` in its schema, the subchart refuses the wrapper's values.
    let strict = dir.path().join("strict-jobrelay");
    let status = Command::new("cp")
        .arg("-r")
        .arg(chart_dir())
        .arg(&strict)
        .status()
        .expect("cp");
    assert!(status.success());
    let schema_path = strict.join("values.schema.json");
    let mut schema: Value =
        serde_json::from_str(&std::fs::read_to_string(&schema_path).expect("schema"))
            .expect("schema");
    schema["properties"]
        .as_object_mut()
        .expect("properties")
        .remove("global");
    std::fs::write(&schema_path, schema.to_string()).expect("schema");
    let strict_wrapper = dir.path().join("strict-wrapper");
    std::fs::create_dir_all(&strict_wrapper).expect("wrapper");
    std::fs::write(
        strict_wrapper.join("Chart.yaml"),
        format!(
            "apiVersion: v2\nname: strict-wrapper\nversion: 1.0.0\ndependencies:\n  \
             - name: jobrelay\n    version: 0.2.0\n    repository: file://{}\n",
            strict.display()
        ),
    )
    .expect("Chart.yaml");
    std::fs::write(
        strict_wrapper.join("values.yaml"),
        "global:\n  environment: production\n",
    )
    .expect("values.yaml");
    let strict_arg = strict_wrapper.to_string_lossy();
    helm(&["dependency", "build", &strict_arg]).unwrap_or_else(|e| panic!("{e}"));
    let why = helm(&["template", "argo", &strict_arg, "--namespace", "platform"])
        .expect_err("a schema without global refuses a wrapper's global values");
    assert!(why.contains("global"), "{why}");
}

/// The remote clusters' kit (deploy/helm/jobrelay-remote): lints, and makes the
/// ServiceAccount, exactly the rules the jobrelay chart gives the daemon on its home cluster
/// for the same kinds and plugins (a ClusterRole, or a Role in each namespace), the binding,
/// and a long-lived token Secret per entry of `tokens`, which is how the token is rotated.
#[test]
fn the_remote_kit_grants_what_the_daemon_calls_and_issues_rotatable_tokens() {
    let remote = remote_chart_dir();
    let remote_arg = remote.to_string_lossy();
    helm(&["lint", "--strict", &remote_arg]).unwrap_or_else(|e| panic!("helm lint: {e}"));
    let render_remote = |overrides: Value| -> Vec<(String, Value)> {
        let out = helm_template(&remote, &overrides, &[])
            .unwrap_or_else(|e| panic!("helm template refuses {overrides}:\n{e}"));
        manifests(&out)
            .into_iter()
            .map(|(file, _, value)| (file, value))
            .collect()
    };
    // `jobWrites` (a plugin granted `job`) adds get and patch on every kind.
    let set = |verbs: &[&str]| verbs.iter().map(|v| v.to_string()).collect::<BTreeSet<_>>();
    for (writes, verbs) in [
        (true, set(&["list", "watch", "get", "patch"])),
        (false, set(&["list", "watch"])),
    ] {
        let objects = render_remote(json!({"kinds": [{"name": "batch-job"}], "jobWrites": writes}));
        let rules = granted(object(&objects, "ClusterRole"));
        assert_eq!(
            rules[&("batch".to_string(), "jobs".to_string())],
            verbs,
            "{writes}"
        );
    }
    // `cleanupKinds` (the main file's cleanup.rules kinds) adds delete on those kinds only.
    let objects = render_remote(json!({
        "kinds": [{"name": "batch-job"}, {"name": "volcano-job"}],
        "cleanupKinds": ["batch-job"],
    }));
    let rules = granted(object(&objects, "ClusterRole"));
    assert_eq!(
        rules[&("batch".to_string(), "jobs".to_string())],
        set(&["list", "watch", "delete"])
    );
    assert_eq!(
        rules[&("batch.volcano.sh".to_string(), "jobs".to_string())],
        set(&["list", "watch"])
    );
    // The same as the home cluster's for a clean-up of batch jobs.
    let home = render(json!({
        "homeCluster": {"name": "home"},
        "config": {"kinds": [{"name": "batch-job"}, {"name": "volcano-job"}],
                   "cleanup": {"rules": [{"kinds": ["batch-job"], "after_finished": 3600}]}},
    }));
    assert_eq!(rules, granted(object(&home, "ClusterRole")));
    // A name that is not one of `kinds` is refused, naming it.
    let why = match helm_template(
        &remote,
        &json!({"kinds": [{"name": "batch-job"}], "cleanupKinds": ["batch-job", "volcano-job"]}),
        &[],
    ) {
        Ok(out) => panic!("a clean-up kind that is not watched renders: {out}"),
        Err(why) => why,
    };
    assert!(
        why.contains("cleanupKinds[1]") && why.contains("volcano-job"),
        "{why}"
    );
    let objects = render_remote(json!({}));
    let account = object(&objects, "ServiceAccount");
    assert_eq!(account["metadata"]["name"], "jobrelay");
    assert_eq!(account["metadata"]["namespace"], "platform");
    // The same rules as the home cluster's under the jobrelay chart's defaults (the same
    // four kinds, Volcano's held; log-archive reads pod logs), which the daemon test above
    // holds to what the daemon calls.
    let home = render(json!({"homeCluster": {"name": "home"}}));
    assert_eq!(
        granted(object(&objects, "ClusterRole")),
        granted(object(&home, "ClusterRole"))
    );
    let binding = object(&objects, "ClusterRoleBinding");
    assert_eq!(
        binding["roleRef"]["name"],
        object(&objects, "ClusterRole")["metadata"]["name"]
    );
    assert_eq!(binding["subjects"][0]["name"], "jobrelay");
    assert_eq!(binding["subjects"][0]["namespace"], "platform");
    let token = named(&objects, "Secret", "jobrelay-token-1");
    assert_eq!(token["type"], "kubernetes.io/service-account-token");
    assert_eq!(
        token["metadata"]["annotations"]["kubernetes.io/service-account.name"],
        "jobrelay"
    );
    // The same for other kinds, without pod logs, limited to namespaces.
    let kinds = json!([
        {"name": "batch-job"},
        {"name": "trainjob", "group": "example.com", "version": "v1", "kind": "TrainJob",
         "plural": "trainjobs", "finalizer": true,
         "normalizer": {"field": {"path": "/status/phase", "phases": {"Done": "succeeded"}}}},
    ]);
    let limited = render_remote(json!({
        "kinds": kinds, "namespaces": ["ml", "research"], "podLogs": false,
        "tokens": ["1", "2"],
    }));
    let home = render(json!({
        "homeCluster": {"name": "home"},
        "config": {"kinds": kinds, "watch": {"namespaces": ["ml", "research"]}},
        "plugins": {"log-archive": null},
    }));
    assert!(limited.iter().all(|(_, o)| o["kind"] != "ClusterRole"));
    for namespace in ["ml", "research"] {
        let in_ns = |objects: &[(String, Value)], kind: &str| {
            objects
                .iter()
                .map(|(_, o)| o.clone())
                .find(|o| o["kind"] == kind && o["metadata"]["namespace"] == namespace)
                .unwrap_or_else(|| panic!("no {kind} in {namespace}"))
        };
        assert_eq!(
            granted(&in_ns(&limited, "Role")),
            granted(&in_ns(&home, "Role")),
            "{namespace}"
        );
        assert_eq!(in_ns(&limited, "RoleBinding")["roleRef"]["kind"], "Role");
    }
    // Rotation: a second token beside the first, then the first removed.
    for name in ["jobrelay-token-1", "jobrelay-token-2"] {
        named(&limited, "Secret", name);
    }
    let rotated = render_remote(json!({"tokens": ["2"]}));
    let secrets: Vec<&Value> = rotated
        .iter()
        .map(|(_, o)| &o["metadata"]["name"])
        .filter(|n| n.as_str().is_some_and(|n| n.contains("token")))
        .collect();
    assert_eq!(secrets, [&json!("jobrelay-token-2")]);
    // The notes name the newest token's Secret in their commands.
    let notes = render_notes(&remote, &json!({"tokens": ["1", "2"]}));
    assert!(notes.contains("get secret jobrelay-token-2"), "{notes}");
    let why = match helm_template(&remote, &json!({"kinds": [{"name": "tf-job"}]}), &[]) {
        Ok(out) => panic!("an unknown kind renders: {out}"),
        Err(why) => why,
    };
    assert!(why.contains("tf-job"), "{why}");
}

/// docs/remote-clusters.md's script that builds a cluster's kubeconfig from the token Secret,
/// run as written by bash, with a `kubectl` that answers as a cluster would: the kubeconfig it
/// writes is one jobrelay accepts, with the token and the CA from the Secret.
#[test]
fn the_documented_kubeconfig_script_writes_a_kubeconfig_jobrelay_accepts() {
    let doc = std::fs::read_to_string(repo_root().join("docs/remote-clusters.md")).expect("doc");
    let script = doc
        .split("```sh\n")
        .skip(1)
        .filter_map(|block| block.split_once("\n```").map(|(code, _)| code))
        .find(|code| code.contains("<<EOF"))
        .expect("a script block writing the kubeconfig")
        .to_string();
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    // The Secret's `data` is base64, as kubectl prints it; the server from the kubeconfig.
    let ca_pem = TEST_CA;
    let ca_b64 = base64_encode(ca_pem.as_bytes());
    let token_b64 = base64_encode(b"eyJhbGciOiJSUzI1NiJ9.e30.sig");
    std::fs::write(
        bin.join("kubectl"),
        format!(
            "#!/bin/sh\ncase \"$*\" in\n  \
             *'get secret jobrelay-token-1 -o jsonpath={{.data.token}}'*) printf %s '{token_b64}' ;;\n  \
             *'get secret jobrelay-token-1 -o jsonpath={{.data.ca\\.crt}}'*) printf %s '{ca_b64}' ;;\n  \
             *'config view --minify -o jsonpath={{.clusters[0].cluster.server}}'*) printf %s 'https://10.1.2.3:6443' ;;\n  \
             *) echo \"unexpected kubectl $*\" >&2; exit 1 ;;\nesac\n"
        ),
    )
    .expect("kubectl");
    let status = Command::new("chmod")
        .arg("+x")
        .arg(bin.join("kubectl"))
        .status()
        .expect("chmod");
    assert!(status.success());
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .current_dir(dir.path())
        .env("PATH", path)
        .output()
        .expect("bash");
    assert!(
        out.status.success(),
        "the documented script fails: {}\n{script}",
        String::from_utf8_lossy(&out.stderr)
    );
    let written = std::fs::read_dir(dir.path())
        .expect("dir")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "kubeconfig"))
        .expect("the script writes NAME.kubeconfig");
    let file = jobrelay::config::files::read(&written);
    let name = written
        .file_stem()
        .and_then(|s| s.to_str())
        .expect("name")
        .to_string();
    let source = ClusterSource::parse(&name, &file)
        .unwrap_or_else(|e| panic!("jobrelay refuses the kubeconfig: {e}"));
    let kubeconfig = &source.kubeconfig;
    let cluster = kubeconfig.clusters[0].cluster.as_ref().expect("cluster");
    assert_eq!(cluster.server.as_deref(), Some("https://10.1.2.3:6443"));
    assert_eq!(
        cluster.certificate_authority_data.as_deref(),
        Some(ca_b64.as_str())
    );
    let text: Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(&written).expect("kubeconfig"))
            .expect("YAML");
    assert_eq!(
        text["users"][0]["user"]["token"],
        "eyJhbGciOiJSUzI1NiJ9.e30.sig"
    );
}

/// A self-signed CA certificate (no key kept), for a kubeconfig's certificate-authority-data.
const TEST_CA: &str = "-----BEGIN CERTIFICATE-----\n\
MIIBgTCCASegAwIBAgIUEuJ0m0KsDRux6wR1TvF9Ty5V1JEwCgYIKoZIzj0EAwIw\n\
FTETMBEGA1UEAwwKa3ViZXJuZXRlczAgFw0yNjExMjcwMjAxMzdaGA8yMTI2MTEw\n\
MzAyMDEzN1owFTETMBEGA1UEAwwKa3ViZXJuZXRlczBZMBMGByqGSM49AgEGCCqG\n\
SM49AwEHA0IABP1qbkn6yzFmwZlpJdUgQWHBATrmDuwizyEvVq0pPNoh4oOmnYu9\n\
/uU1qbsjcnC8aU8YGJSINWU8dBRXYYNxqGejUzBRMB0GA1UdDgQWBBSU8cPb1CPf\n\
aIHHVrO5cZbKMIXUCzAfBgNVHSMEGDAWgBSU8cPb1CPfaIHHVrO5cZbKMIXUCzAP\n\
BgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0gAMEUCIQDqhb+OyE0PDA/q72n5\n\
JNeJt8Ibg8kXvmvFdf6CrBv5ygIgOrbKMsIlenbKnKblZYUt+kHw1B8exHLH1xsW\n\
xnQ9xWQ=\n\
-----END CERTIFICATE-----\n\
";

fn base64_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Every object carries the recommended labels (name, instance, version, managed-by, chart)
/// from the chart's one definition, and every selector uses only the labels that never change
/// on upgrade.
#[test]
fn every_object_has_the_standard_labels_and_selectors_only_the_stable_ones() {
    let chart: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(chart_dir().join("Chart.yaml")).expect("Chart.yaml"),
    )
    .expect("Chart.yaml");
    let objects = render(json!({
        "clusters": {"secretName": "c"},
        "homeCluster": {"name": "home"},
        "persistence": {"enabled": true},
        "networkPolicy": {"enabled": true},
        "metrics": {"serviceMonitor": {"enabled": true}, "prometheusRule": {"enabled": true}},
    }));
    let stable = json!({
        "app.kubernetes.io/name": "jobrelay",
        "app.kubernetes.io/instance": "jobrelay",
    });
    for (file, object) in &objects {
        let labels = &object["metadata"]["labels"];
        assert_eq!(labels["app.kubernetes.io/name"], "jobrelay", "{file}");
        assert_eq!(labels["app.kubernetes.io/instance"], "jobrelay", "{file}");
        assert_eq!(labels["app.kubernetes.io/managed-by"], "Helm", "{file}");
        assert_eq!(
            labels["app.kubernetes.io/version"], chart["appVersion"],
            "{file}"
        );
        assert_eq!(
            labels["helm.sh/chart"],
            format!(
                "{}-{}",
                chart["name"].as_str().unwrap_or_default(),
                chart["version"].as_str().unwrap_or_default()
            ),
            "{file}"
        );
        for selector in [
            &object["spec"]["selector"]["matchLabels"],
            &object["spec"]["podSelector"]["matchLabels"],
        ] {
            if !selector.is_null() {
                assert_eq!(selector, &stable, "{file}");
            }
        }
        if object["kind"] == "Service" {
            assert_eq!(object["spec"]["selector"], stable, "{file}");
        }
    }
    let pod = &object(&objects, "Deployment")["spec"]["template"]["metadata"]["labels"];
    assert_eq!(pod["app.kubernetes.io/managed-by"], "Helm");
}

/// The Deployment's pod volume `name` in `objects`.
fn pod_volume<'a>(objects: &'a [(String, Value)], name: &str) -> &'a Value {
    object(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == name)
        .unwrap_or_else(|| panic!("no volume {name}"))
}

/// The Grafana dashboard: off by default; on, one ConfigMap labelled for the dashboard sidecar
/// holding valid dashboard JSON with a cluster variable, whose every query is PromQL that
/// `promtool` accepts, filters by the cluster variable or is per plugin or per replica (pod),
/// and reads only metrics docs/telemetry.md lists; jobrelay itself has its panels (replicas
/// ready and delivering, plugins serving, delivery p99, memory, CPU).
#[test]
fn the_grafana_dashboard_is_a_valid_dashboard_of_documented_metrics() {
    let objects = render(json!({}));
    assert!(
        !objects
            .iter()
            .any(|(_, o)| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "jobrelay-dashboard"),
        "off by default"
    );
    let objects = render(json!({
        "metrics": {"grafanaDashboard": {"enabled": true, "namespace": "monitoring"}},
    }));
    let map = named(&objects, "ConfigMap", "jobrelay-dashboard");
    assert_eq!(map["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(map["metadata"]["namespace"], "monitoring");
    let text = map["data"]["jobrelay-fleet.json"]
        .as_str()
        .expect("the dashboard's JSON");
    let dashboard: Value = serde_json::from_str(text).expect("valid JSON");
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .expect("variables")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert!(variables.contains(&"cluster"), "{variables:?}");
    let documented = std::fs::read_to_string(repo_root().join("docs/telemetry.md")).expect("docs");
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(panels.len() >= 8, "{}", panels.len());
    let queries: String = panels
        .iter()
        .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        .filter_map(|t| t["expr"].as_str())
        .collect();
    for itself in [
        "jobrelay_ready",
        "jobrelay_state_store_up",
        "jobrelay_leader",
        "jobrelay_plugin_up",
        "jobrelay_event_delivery_seconds_bucket",
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
    ] {
        assert!(queries.contains(itself), "no panel reads {itself}");
    }
    for panel in panels {
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{panel}");
        for (i, target) in targets.iter().enumerate() {
            let expr = target["expr"].as_str().expect("expr");
            assert!(
                expr.contains("$cluster") || expr.contains("plugin") || expr.contains("by (pod)"),
                "{}: neither per cluster, per plugin nor per replica: {expr}",
                panel["title"]
            );
            for metric in expr
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| w.starts_with("jobrelay_"))
            {
                let family = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| metric.strip_suffix(s))
                    .unwrap_or(metric);
                assert!(
                    documented.contains(&format!("`{family}`")),
                    "{} uses {metric}, which docs/telemetry.md does not list",
                    panel["title"]
                );
            }
            // As a recording rule, with the variables given values: promtool parses it.
            let concrete = expr
                .replace("$job", "jobrelay-metrics")
                .replace("$cluster", ".*");
            rules.push_str(&format!(
                "      - record: dashboard:panel{}:{i}\n        expr: {}\n",
                panel["id"],
                serde_json::to_string(&concrete).expect("quoted")
            ));
        }
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("dashboard-rules.yaml");
    std::fs::write(&file, &rules).expect("write rules");
    let out = std::process::Command::new("promtool")
        .args(["check", "rules"])
        .arg(&file)
        .output()
        .expect("promtool runs (tests/tools/install.sh installs it)");
    assert!(
        out.status.success(),
        "promtool check rules: {}{}\n{rules}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The chart's values schema (`values.schema.json`) as JSON.
fn values_schema() -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(chart_dir().join("values.schema.json")).expect("schema"),
    )
    .expect("schema")
}

/// A schema node with its `$ref` (to `#/definitions/NAME`) followed.
fn resolved<'a>(root: &'a Value, node: &'a Value) -> &'a Value {
    match node["$ref"].as_str() {
        Some(reference) => {
            let name = reference
                .strip_prefix("#/definitions/")
                .unwrap_or_else(|| panic!("a $ref outside the definitions: {reference}"));
            resolved(root, &root["definitions"][name])
        }
        None => node,
    }
}

/// A step from a schema node to one below it: a key of an object, the item of an array, the
/// value of a map's entry.
#[derive(Clone, Debug)]
enum Step {
    Key(String),
    Item,
    Entry,
}

/// Every node below `node` (itself included), with the steps that reach it.
fn schema_nodes<'a>(
    root: &'a Value,
    node: &'a Value,
    path: Vec<Step>,
    out: &mut Vec<(Vec<Step>, &'a Value)>,
) {
    let node = resolved(root, node);
    out.push((path.clone(), node));
    let below = |step: Step| {
        let mut path = path.clone();
        path.push(step);
        path
    };
    if let Some(properties) = node["properties"].as_object() {
        for (key, child) in properties {
            schema_nodes(root, child, below(Step::Key(key.clone())), out);
        }
    }
    if node["items"].is_object() {
        schema_nodes(root, &node["items"], below(Step::Item), out);
    }
    if node["additionalProperties"].is_object() {
        schema_nodes(root, &node["additionalProperties"], below(Step::Entry), out);
    }
}

/// A document holding `leaf` at `path`.
fn document_at(path: &[Step], leaf: Value) -> Value {
    path.iter().rev().fold(leaf, |inner, step| match step {
        Step::Key(key) => json!({ key.as_str(): inner }),
        Step::Item => json!([inner]),
        Step::Entry => json!({ "entry": inner }),
    })
}

fn path_text(path: &[Step]) -> String {
    path.iter()
        .map(|step| match step {
            Step::Key(key) => format!(".{key}"),
            Step::Item => "[0]".to_string(),
            Step::Entry => ".entry".to_string(),
        })
        .collect()
}

/// The names serde's error offers after `unknown field `zz_typo`, expected …` (or `unknown
/// variant`), as the daemon reports a misspelt key or value.
fn expected_names(error: &str) -> Option<BTreeSet<String>> {
    let (_, rest) = error
        .split_once("unknown field `zz_typo`, expected ")
        .or_else(|| error.split_once("unknown variant `zz_typo`, expected "))?;
    let rest = rest.split(" at line ").next().unwrap_or(rest);
    Some(
        rest.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect(),
    )
}

/// The names a schema node takes: its properties (an object's keys, or the one-key variants of
/// a map like `normalizer`), its `enum`, and the alternatives of a `^(a|b)$` pattern (the
/// names of a normalizer given as a string).
fn schema_names(node: &Value) -> BTreeSet<String> {
    let mut names: BTreeSet<String> = node["properties"]
        .as_object()
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    for value in node["enum"].as_array().into_iter().flatten() {
        names.insert(value.as_str().expect("a string enum").to_string());
    }
    if let Some(pattern) = node["pattern"].as_str()
        && let Some(inner) = pattern
            .strip_prefix("^(")
            .and_then(|p| p.strip_suffix(")$"))
    {
        names.extend(inner.split('|').map(str::to_string));
    }
    names
}

/// The schema of `config` and of each plugin's manifest in `values.schema.json` holds exactly
/// the keys (and the names of enumerations) the daemon reads, at every level: for each object
/// of the schema, a document with a key `zz_typo` there is refused by the daemon's own parsing
/// (serde, `deny_unknown_fields`), whose error lists the keys it knows there, and those are
/// exactly the schema's; and `helm template` refuses the same document, naming the key. The
/// same for each enumeration (phases, delivery modes, ...) with a value `zz_typo`.
#[test]
fn the_values_schema_holds_the_main_file_and_manifest_keys_as_the_daemon_reads_them() {
    use jobrelay::config::main_file::MainFile;
    let schema = values_schema();
    let daemon = |which: &str, document: &Value| -> Result<(), String> {
        let text = document.to_string();
        match which {
            "config" => serde_yaml_ng::from_str::<MainFile>(&text)
                .map(|_| ())
                .map_err(|e| e.to_string()),
            _ => serde_yaml_ng::from_str::<PluginManifest>(&text)
                .map(|_| ())
                .map_err(|e| e.to_string()),
        }
    };
    let mut checked = 0;
    for (which, definition) in [("config", "mainFile"), ("plugin", "manifest")] {
        let mut nodes = Vec::new();
        schema_nodes(
            &schema,
            &schema["definitions"][definition],
            Vec::new(),
            &mut nodes,
        );
        assert!(nodes.len() > 40, "{which}: {} nodes", nodes.len());
        for (path, node) in nodes {
            let is_object = node["additionalProperties"] == false;
            let is_enum = node["enum"].is_array();
            if !is_object && !is_enum {
                continue;
            }
            let leaf = if is_object {
                json!({"zz_typo": 1})
            } else {
                json!("zz_typo")
            };
            let document = document_at(&path, leaf);
            let at = format!("{which}{}", path_text(&path));
            let refusal =
                daemon(which, &document).expect_err(&format!("{at}: the daemon takes {document}"));
            let known = expected_names(&refusal)
                .unwrap_or_else(|| panic!("{at}: not refused as a misspelt name: {refusal}"));
            assert_eq!(
                schema_names(node),
                known,
                "{at}: the schema's names (left) and the daemon's (right) differ"
            );
            let (values, mut place) = match which {
                "config" => (json!({"config": document}), "config".to_string()),
                _ => (json!({"plugins": {"p": document}}), "plugins.p".to_string()),
            };
            for step in &path {
                place.push_str(&match step {
                    Step::Key(key) => format!(".{key}"),
                    Step::Item => ".0".to_string(),
                    Step::Entry => ".entry".to_string(),
                });
            }
            let why = refused(values.clone());
            // Helm's words: `PLACE: Additional property zz_typo is not allowed`, or for a
            // value `PLACE: PLACE must be one of the following: ...`.
            let named = if is_object {
                format!("{place}: Additional property zz_typo is not allowed")
            } else {
                format!("{place}: {place} must be one of the following")
            };
            assert!(
                why.contains("values don't meet the specifications of the schema")
                    && why.contains(&named),
                "{at}: not refused by the schema with `{named}`: {values}\n{why}"
            );
            checked += 1;
        }
    }
    assert!(checked > 40, "{checked} nodes checked");
}

/// The operator's report (issue 51, 4.1): a misspelt key of the main file and one of a
/// plugin's manifest rendered and installed. Both are refused by `helm template` now, at any
/// depth, each named with its place.
#[test]
fn a_misspelt_key_under_config_or_a_plugin_manifest_is_refused_by_helm_template() {
    for (values, named_in_error) in [
        (
            json!({"config": {"kindz": []}}),
            "Additional property kindz",
        ),
        (
            json!({"plugins": {"foo": {"wasm": "foo.wasm", "deliveryy": "transitions"}}}),
            "plugins.foo: Additional property deliveryy",
        ),
        (
            json!({"plugins": {"mysql-sync": {"grants": {"sql": ["embedded"], "kv_qouta": {}}}}}),
            "plugins.mysql-sync.grants: Additional property kv_qouta",
        ),
        (
            json!({"config": {"state": {"pth": "/var/lib/jobrelay/state.db"}}}),
            "config.state: Additional property pth",
        ),
        (
            json!({"config": {"kinds": [{"name": "volcano-job", "finaliser": true}]}}),
            "config.kinds.0: Additional property finaliser",
        ),
        (
            json!({"config": {"cleanup": {"rules": [{"kinds": ["volcano-job"], "after": "1h"}]}}}),
            "config.cleanup.rules.0: Additional property after",
        ),
        (
            json!({"plugins": {"log-archive": {"delivery": "transition"}}}),
            "plugins.log-archive.delivery",
        ),
        (
            json!({"plugins": {"log-archive": {"timeout_ms": "60s"}}}),
            "plugins.log-archive.timeout_ms",
        ),
    ] {
        let why = refused(values.clone());
        assert!(
            why.contains("values don't meet the specifications of the schema")
                && why.contains(named_in_error),
            "{values}: should name {named_in_error}: {why}"
        );
    }
    // The defaults, and a plugin removed with null, still pass.
    render(json!({"plugins": {"log-archive": null}}));
}

/// The YAML code blocks of a Markdown text.
fn yaml_blocks(text: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some((_, after)) = rest.split_once("```yaml\n") {
        let Some((block, after)) = after.split_once("```") else {
            break;
        };
        blocks.push(block.to_string());
        rest = after;
    }
    blocks
}

/// Every example config of the docs renders with the chart: each YAML block of README.md,
/// docs/*.md and the plugins' READMEs, and the example folder's files (config/), that the
/// daemon reads as a main file (or a fragment of one: a kind's normalizer, rules or samples),
/// as a plugin manifest (or a fragment: grants, a filter, a config) or as the chart's values,
/// is given to `helm template` as such and renders (the schema takes it). The only blocks left
/// are those that are neither (a plugin's test cases).
#[test]
fn every_example_config_in_the_docs_renders() {
    use jobrelay::config::main_file::MainFile;
    let root = repo_root();
    let mut sources: Vec<(String, String)> = Vec::new();
    let mut markdown = vec![root.join("README.md")];
    for dir in ["docs", "plugins"] {
        for entry in std::fs::read_dir(root.join(dir)).expect("folder").flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "md") {
                markdown.push(path);
            } else if path.join("README.md").is_file() {
                markdown.push(path.join("README.md"));
            }
        }
    }
    markdown.sort();
    for path in markdown {
        let text = std::fs::read_to_string(&path).expect("doc");
        let name = path
            .strip_prefix(&root)
            .unwrap_or(&path)
            .display()
            .to_string();
        for (i, block) in yaml_blocks(&text).into_iter().enumerate() {
            sources.push((format!("{name} block {}", i + 1), block));
        }
    }
    let mut example_files = vec![root.join("config/jobrelay.yaml")];
    for dir in ["config/plugins", "config/examples"] {
        for entry in std::fs::read_dir(root.join(dir)).expect("folder").flatten() {
            example_files.push(entry.path());
        }
    }
    example_files.sort();
    for path in example_files {
        let name = path
            .strip_prefix(&root)
            .unwrap_or(&path)
            .display()
            .to_string();
        sources.push((name, std::fs::read_to_string(&path).expect("example")));
    }

    let main_file_ok = |config: &Value| serde_yaml_ng::from_str::<MainFile>(&config.to_string());
    let manifest_ok = |m: &Value| serde_yaml_ng::from_str::<PluginManifest>(&m.to_string());
    // A custom kind to hold a normalizer, rules or samples given alone (each key of `over`
    // replaces the kind's own: a normalizer is one of its forms, not a merge of two).
    let kind = |over: Value| {
        let mut kind = json!({"name": "docs-example", "group": "example.com", "version": "v1",
               "kind": "Example", "plural": "examples",
               "normalizer": {"field": {"path": "/status/phase", "phases": {}}}});
        for (key, value) in over.as_object().into_iter().flatten() {
            kind[key.as_str()] = value.clone();
        }
        kind
    };
    let schema = values_schema();
    let chart_keys: BTreeSet<&String> = schema["properties"]
        .as_object()
        .expect("properties")
        .keys()
        .collect();
    let remote_schema: Value = serde_json::from_str(
        &std::fs::read_to_string(remote_chart_dir().join("values.schema.json")).expect("schema"),
    )
    .expect("schema");
    let remote_keys: BTreeSet<&String> = remote_schema["properties"]
        .as_object()
        .expect("properties")
        .keys()
        .collect();
    let (mut rendered, mut skipped) = (Vec::new(), Vec::new());
    for (source, text) in &sources {
        let Ok(block) = serde_yaml_ng::from_str::<Value>(text) else {
            skipped.push(source.clone());
            continue;
        };
        let Some(map) = block.as_object().filter(|m| !m.is_empty()) else {
            skipped.push(source.clone());
            continue;
        };
        let with_wasm = with(json!({"wasm": "docs-example.wasm"}), block.clone());
        let values = if main_file_ok(&block).is_ok() {
            json!({"config": block})
        } else if manifest_ok(&with_wasm).is_ok() {
            json!({"plugins": {"docs-example": with_wasm}})
        } else if main_file_ok(&json!({"kinds": [kind(block.clone())]})).is_ok() {
            json!({"config": {"kinds": [kind(block.clone())]}})
        } else if main_file_ok(&json!({"kinds": [kind(json!({"normalizer": {"rules": block}}))]}))
            .is_ok()
        {
            json!({"config": {"kinds": [kind(json!({"normalizer": {"rules": block}}))]}})
        } else if map.keys().all(|k| chart_keys.contains(k)) {
            block.clone()
        } else if map.keys().all(|k| remote_keys.contains(k)) {
            if let Err(why) = helm_template(&remote_chart_dir(), &block, &[]) {
                panic!("{source} does not render with the remote kit:\n{text}\n{why}");
            }
            rendered.push(source.clone());
            continue;
        } else {
            skipped.push(source.clone());
            continue;
        };
        // The example folder's main file listens on the loopback (it runs on a laptop), which
        // the probes cannot reach: the chart refuses it, naming the setting, and renders the
        // rest with its own listener.
        let listen = values["config"]["telemetry"]["listen"].as_str();
        let values = if listen.is_some_and(|l| l.starts_with("127.")) {
            let why = refused(values.clone());
            assert!(
                why.contains("config.telemetry.listen") && why.contains("loopback"),
                "{source}: {why}"
            );
            let mut values = values;
            values["config"]
                .as_object_mut()
                .expect("config")
                .remove("telemetry");
            values
        } else {
            values
        };
        if let Err(why) = helm_template(&chart_dir(), &values, &[]) {
            panic!("{source} does not render with the chart:\n{text}\nas {values}:\n{why}");
        }
        rendered.push(source.clone());
    }
    assert!(
        rendered.len() >= 30,
        "{} rendered: {rendered:?}",
        rendered.len()
    );
    for source in ["config/jobrelay.yaml", "config/plugins/mysql-sync.yaml"] {
        assert!(
            rendered.iter().any(|r| r == source),
            "{source}: {rendered:?}"
        );
    }
    // The blocks that are no config: a plugin's test cases.
    for source in &skipped {
        let text = &sources.iter().find(|(s, _)| s == source).expect("source").1;
        let known = source.starts_with("docs/plugins.md") && text.contains("outcomes:");
        assert!(known, "{source} is read as no config:\n{text}");
    }
}

/// The alert rules the chart renders with `prometheusRule` (merged over "enabled": true), by
/// alert name (JobrelayCredentialExpiry has two).
fn alert_rules(prometheus_rule: Value) -> Vec<Value> {
    let objects = render(json!({
        "metrics": {"prometheusRule": with(json!({"enabled": true}), prometheus_rule)},
    }));
    object(&objects, "PrometheusRule")["spec"]["groups"][0]["rules"]
        .as_array()
        .expect("rules")
        .clone()
}

fn alert_names(rules: &[Value]) -> BTreeSet<String> {
    rules
        .iter()
        .map(|r| r["alert"].as_str().expect("alert").to_string())
        .collect()
}

/// The alerts' switches (issue 51, 4.2): the two alerts about the users' jobs are off unless
/// `jobs.enabled`; any alert can be left out by name, re-graded and given routing labels, and
/// `additionalRuleLabels` go on every alert; the other rules are untouched; a name that is no
/// alert of the chart is refused, and so is a `severity` among the labels.
#[test]
fn alerts_can_be_switched_off_re_graded_and_labelled_from_the_values() {
    let jobs = ["JobrelayJobFailureRatioHigh", "JobrelayJobQueueWaitHigh"];
    let default = alert_rules(json!({}));
    let names = alert_names(&default);
    for alert in jobs {
        assert!(!names.contains(alert), "{alert} on by default");
    }
    assert!(names.contains("JobrelayFinalizerAddFailures"), "{names:?}");
    let with_jobs = alert_rules(json!({"jobs": {"enabled": true}}));
    let with_jobs_names = alert_names(&with_jobs);
    for alert in jobs {
        assert!(with_jobs_names.contains(alert), "{alert} with jobs.enabled");
    }
    assert_eq!(
        with_jobs_names.len(),
        names.len() + 2,
        "{with_jobs_names:?}"
    );

    let switched = alert_rules(json!({
        "jobs": {"enabled": true},
        "additionalRuleLabels": {"team": "platform"},
        "alerts": {
            "JobrelayDeliverySlow": {"enabled": false},
            "JobrelayJobQueueWaitHigh": {"enabled": false},
            "JobrelayLaneBehind": {"severity": "critical", "labels": {"receiver": "pager", "team": "delivery"}},
            "JobrelayCredentialExpiry": {"severity": "info"},
            "JobrelayAbsent": {"enabled": true},
            // An alert of another coordination mode may be set; it is not rendered here.
            "JobrelayLeaderCount": {"severity": "warning"},
        },
    }));
    let switched_names = alert_names(&switched);
    let mut expected = with_jobs_names.clone();
    expected.remove("JobrelayDeliverySlow");
    expected.remove("JobrelayJobQueueWaitHigh");
    assert_eq!(switched_names, expected);
    for (before, after) in with_jobs
        .iter()
        .filter(|r| expected.contains(r["alert"].as_str().unwrap_or_default()))
        .zip(&switched)
    {
        let name = before["alert"].as_str().expect("alert");
        assert_eq!(before["alert"], after["alert"]);
        let mut labels = before["labels"].clone();
        labels["team"] = json!("platform");
        match name {
            "JobrelayLaneBehind" => {
                labels["severity"] = json!("critical");
                labels["receiver"] = json!("pager");
                labels["team"] = json!("delivery");
            }
            "JobrelayCredentialExpiry" => labels["severity"] = json!("info"),
            _ => {}
        }
        assert_eq!(after["labels"], labels, "{name}");
        for key in ["expr", "for", "annotations"] {
            assert_eq!(before[key], after[key], "{name}: {key}");
        }
    }
    // Both rules of JobrelayCredentialExpiry (a week, a day) take its severity.
    let expiry: Vec<&Value> = switched
        .iter()
        .filter(|r| r["alert"] == "JobrelayCredentialExpiry")
        .collect();
    assert_eq!(expiry.len(), 2);
    assert!(expiry.iter().all(|r| r["labels"]["severity"] == "info"));
    // Everything off: a group with no rules.
    let all_off: serde_json::Map<String, Value> = names
        .iter()
        .map(|n| (n.clone(), json!({"enabled": false})))
        .collect();
    assert!(alert_rules(json!({"alerts": all_off})).is_empty());

    let why = refused(json!({"metrics": {"prometheusRule": {"enabled": true,
        "alerts": {"JobrelayLaneBehnd": {"enabled": false}}}}}));
    assert!(
        why.contains("metrics.prometheusRule.alerts.JobrelayLaneBehnd")
            && why.contains("JobrelayLaneBehind"),
        "{why}"
    );
    for (values, named_in_error) in [
        (
            json!({"metrics": {"prometheusRule": {"alerts": {"JobrelayLaneBehind": {"labels": {"severity": "x"}}}}}}),
            "metrics.prometheusRule.alerts.JobrelayLaneBehind.labels",
        ),
        (
            json!({"metrics": {"prometheusRule": {"additionalRuleLabels": {"severity": "x"}}}}),
            "metrics.prometheusRule.additionalRuleLabels",
        ),
        (
            json!({"metrics": {"prometheusRule": {"alerts": {"JobrelayLaneBehind": {"disabled": true}}}}}),
            "disabled",
        ),
        (
            json!({"metrics": {"prometheusRule": {"jobs": {"enabled": "yes"}}}}),
            "metrics.prometheusRule.jobs.enabled",
        ),
    ] {
        let why = refused(values.clone());
        assert!(
            why.contains("values don't meet the specifications of the schema")
                && why.contains(named_in_error),
            "{values}: {why}"
        );
    }
}

/// The main file's endpoint is the pod's probes' and the Service's (issue 51, 4.3): a
/// `config.telemetry` they cannot reach is refused, naming the setting — no `listen`, another
/// port than metricsPort, a loopback address — and one on metricsPort renders, the probes, the
/// container port, the Service and the NetworkPolicy all on it. The state store is given once:
/// `stateUrl` beside `config.state` (either `path` or `url`) is refused, each alone renders.
#[test]
fn a_telemetry_or_state_setting_that_cannot_work_is_refused_at_render_time() {
    for (config, named) in [
        (
            json!({"telemetry": {}}),
            "config.telemetry: without `listen`",
        ),
        (
            json!({"telemetry": {"listen": "0.0.0.0:9000"}}),
            "port 9000 is not metricsPort (9464)",
        ),
        (
            json!({"telemetry": {"listen": "127.0.0.1:9464"}}),
            "loopback",
        ),
        (json!({"telemetry": {"listen": "[::1]:9464"}}), "loopback"),
        (
            json!({"telemetry": {"listen": "9464"}}),
            "not an address and a port",
        ),
    ] {
        let why = refused(json!({"config": config}));
        assert!(
            why.contains("config.telemetry") && why.contains(named),
            "{config}: {why}"
        );
    }
    for (listen, port) in [("0.0.0.0:9000", 9000), ("[::]:9464", 9464)] {
        let objects = render(json!({
            "config": {"telemetry": {"listen": listen}},
            "metricsPort": port,
            "networkPolicy": {"enabled": true},
        }));
        assert_eq!(
            main_file(&objects).telemetry.listen.map(|a| a.port()),
            Some(port)
        );
        let container =
            &object(&objects, "Deployment")["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["ports"][0]["containerPort"], port);
        for probe in ["startupProbe", "livenessProbe", "readinessProbe"] {
            assert_eq!(container[probe]["httpGet"]["port"], "metrics", "{probe}");
        }
        let service = object(&objects, "Service");
        assert_eq!(service["spec"]["ports"][0]["port"], port);
        assert_eq!(service["spec"]["ports"][0]["targetPort"], "metrics");
        assert_eq!(
            object(&objects, "NetworkPolicy")["spec"]["ingress"][0]["ports"][0]["port"],
            port
        );
    }

    for state in [
        json!({"path": "/var/lib/jobrelay/state/jobrelay.db"}),
        json!({"url": "env:JOBRELAY_STATE_URL"}),
    ] {
        let why = refused(json!({"stateUrl": "env:OTHER", "config": {"state": state}}));
        assert!(
            why.contains("stateUrl and config.state") && why.contains("env:OTHER"),
            "{state}: {why}"
        );
        render(json!({"config": {"state": state}}));
    }
    let main = main_file(&render(json!({"stateUrl": "env:JOBRELAY_STATE_URL"})));
    assert!(
        matches!(main.state, StateBackend::MySql { .. }),
        "{:?}",
        main.state
    );
}

/// The pod's knobs of issue 51, 4.4 reach the objects: topology spread (a constraint without a
/// selector gets the pods'), pod labels beside the chart's (which they cannot replace), the
/// name label, the probes' tuning, the grace period, the Service's annotations; and the pod's
/// environment names the mounted config folder (JOBRELAY_CONFIG, which `jobrelay run`,
/// `check`, `dead-letters` and `finalizers release` read) and the daemon's endpoint
/// (JOBRELAY_SERVER, for `jobrelay jobs`).
#[test]
fn topology_labels_name_probes_grace_and_service_knobs_reach_the_objects() {
    let default = render(json!({}));
    let pod = &object(&default, "Deployment")["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(pod["terminationGracePeriodSeconds"], 30);
    assert!(pod["topologySpreadConstraints"].is_null());
    for (probe, period, threshold) in [
        ("startupProbe", 10, 60),
        ("livenessProbe", 10, 6),
        ("readinessProbe", 5, 3),
    ] {
        assert_eq!(container[probe]["periodSeconds"], period, "{probe}");
        assert_eq!(container[probe]["failureThreshold"], threshold, "{probe}");
        assert_eq!(container[probe]["timeoutSeconds"], 1, "{probe}");
    }
    let env = |container: &Value, name: &str| {
        container["env"]
            .as_array()
            .expect("env")
            .iter()
            .find(|v| v["name"] == name)
            .map(|v| v["value"].clone())
            .unwrap_or_else(|| panic!("{name} not set"))
    };
    assert_eq!(env(container, "JOBRELAY_CONFIG"), "/etc/jobrelay");
    assert_eq!(
        container["args"],
        json!(["run", "--config", "/etc/jobrelay", "--log-format", "json"]),
        "JOBRELAY_CONFIG is the folder the daemon runs on"
    );
    assert!(
        container["volumeMounts"]
            .as_array()
            .expect("mounts")
            .iter()
            .any(|m| m["name"] == "config" && m["mountPath"] == "/etc/jobrelay"),
        "the main file's ConfigMap is mounted there"
    );
    assert_eq!(env(container, "JOBRELAY_SERVER"), "http://127.0.0.1:9464");
    assert!(object(&default, "Service")["metadata"]["annotations"].is_null());

    let objects = render(json!({
        "nameOverride": "relay",
        "podLabels": {"team": "ml", "cost-center": "42"},
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"},
            {"maxSkew": 2, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
             "labelSelector": {"matchLabels": {"tier": "platform"}}},
        ],
        "terminationGracePeriodSeconds": 90,
        "startupProbe": {"timeoutSeconds": 3},
        "livenessProbe": {"periodSeconds": 30, "failureThreshold": 4, "timeoutSeconds": 5},
        "readinessProbe": {"periodSeconds": 15, "failureThreshold": 2, "successThreshold": 3},
        "service": {"annotations": {"prometheus.io/scrape": "true"}},
        "metricsPort": 9500,
    }));
    let deployment = object(&objects, "Deployment");
    let template = &deployment["spec"]["template"];
    let pod = &template["spec"];
    let container = &pod["containers"][0];
    let selector =
        json!({"app.kubernetes.io/name": "relay", "app.kubernetes.io/instance": "jobrelay"});
    assert_eq!(deployment["spec"]["selector"]["matchLabels"], selector);
    for (_, o) in &objects {
        assert_eq!(
            o["metadata"]["labels"]["app.kubernetes.io/name"], "relay",
            "{}",
            o["kind"]
        );
    }
    assert_eq!(object(&objects, "Service")["spec"]["selector"], selector);
    assert_eq!(
        object(&objects, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
        selector
    );
    assert_eq!(
        deployment["metadata"]["name"], "jobrelay",
        "objects keep the release's name"
    );
    let labels = &template["metadata"]["labels"];
    assert_eq!(labels["team"], "ml");
    assert_eq!(labels["cost-center"], "42");
    assert_eq!(labels["app.kubernetes.io/name"], "relay");
    assert_eq!(labels["app.kubernetes.io/instance"], "jobrelay");
    assert!(deployment["spec"]["selector"]["matchLabels"]["team"].is_null());
    let spread = pod["topologySpreadConstraints"].as_array().expect("spread");
    assert_eq!(spread.len(), 2);
    assert_eq!(spread[0]["labelSelector"]["matchLabels"], selector);
    assert_eq!(spread[0]["topologyKey"], "topology.kubernetes.io/zone");
    assert_eq!(spread[0]["whenUnsatisfiable"], "ScheduleAnyway");
    assert_eq!(
        spread[1]["labelSelector"]["matchLabels"],
        json!({"tier": "platform"})
    );
    assert_eq!(spread[1]["maxSkew"], 2);
    assert_eq!(pod["terminationGracePeriodSeconds"], 90);
    assert_eq!(container["startupProbe"]["timeoutSeconds"], 3);
    assert_eq!(
        container["startupProbe"]["failureThreshold"], 60,
        "the rest kept"
    );
    assert_eq!(container["livenessProbe"]["periodSeconds"], 30);
    assert_eq!(container["livenessProbe"]["failureThreshold"], 4);
    assert_eq!(container["livenessProbe"]["timeoutSeconds"], 5);
    assert_eq!(container["readinessProbe"]["periodSeconds"], 15);
    assert_eq!(container["readinessProbe"]["failureThreshold"], 2);
    assert_eq!(container["readinessProbe"]["successThreshold"], 3);
    assert_eq!(
        object(&objects, "Service")["metadata"]["annotations"]["prometheus.io/scrape"],
        "true"
    );
    assert_eq!(env(container, "JOBRELAY_SERVER"), "http://127.0.0.1:9500");
    // The command line reads them: `--config` of run, check, dead-letters and state
    // (cli/mod.rs) and of finalizers release (cli/ops/finalizers.rs) falls back on
    // JOBRELAY_CONFIG, and
    // `jobs --server` on JOBRELAY_SERVER (their parsing is host/src/cli's own tests').
    let cli = |file: &str| {
        std::fs::read_to_string(repo_root().join("host/src/cli").join(file)).expect("cli source")
    };
    assert_eq!(
        cli("mod.rs").matches(r#"env = "JOBRELAY_CONFIG""#).count(),
        4
    );
    assert!(cli("ops/finalizers.rs").contains(r#"env = "JOBRELAY_CONFIG""#));
    assert!(cli("mod.rs").contains(r#"env = "JOBRELAY_SERVER""#));

    for (values, named_in_error) in [
        (
            json!({"podLabels": {"app.kubernetes.io/name": "other"}}),
            "podLabels",
        ),
        (
            json!({"podLabels": {"app.kubernetes.io/instance": "other"}}),
            "podLabels",
        ),
        (json!({"nameOverride": "Relay_1"}), "nameOverride"),
        (
            json!({"livenessProbe": {"successThreshold": 2}}),
            "successThreshold",
        ),
        (
            json!({"readinessProbe": {"periodSeconds": 0}}),
            "readinessProbe.periodSeconds",
        ),
        (
            json!({"terminationGracePeriodSeconds": -1}),
            "terminationGracePeriodSeconds",
        ),
        (
            json!({"topologySpreadConstraints": [{"maxSkew": 1}]}),
            "topologySpreadConstraints.0",
        ),
        (json!({"service": {"annotation": {}}}), "annotation"),
    ] {
        let why = refused(values.clone());
        assert!(
            why.contains("values don't meet the specifications of the schema")
                && why.contains(named_in_error),
            "{values}: {why}"
        );
    }
}

/// The chart's README lists every value the schema describes (the chart's own, down to their
/// leaves; `config` and `plugins` as wholes) in its table, with the default of `values.yaml`
/// for each plain one, and no value the chart does not have.
#[test]
fn the_chart_readme_lists_every_value_with_its_default() {
    let schema = values_schema();
    let defaults: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(chart_dir().join("values.yaml")).expect("values.yaml"),
    )
    .expect("values.yaml");
    fn leaves(schema: &Value, node: &Value, path: &str, out: &mut Vec<String>) {
        let node = resolved(schema, node);
        match node["properties"].as_object() {
            Some(properties) if !matches!(path, "config" | "plugins") => {
                for (key, child) in properties {
                    let below = if path.is_empty() {
                        key.clone()
                    } else {
                        format!("{path}.{key}")
                    };
                    leaves(schema, child, &below, out);
                }
            }
            _ => out.push(path.to_string()),
        }
    }
    let mut values = Vec::new();
    leaves(&schema, &schema, "", &mut values);
    let readme =
        std::fs::read_to_string(chart_dir().join("README.md")).expect("the chart's README.md");
    // | `value` | default | what it does |
    let rows: BTreeMap<String, String> = readme
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let value = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            Some((value.to_string(), cells.get(2)?.to_string()))
        })
        .collect();
    for value in &values {
        let default = rows
            .get(value)
            .unwrap_or_else(|| panic!("README.md does not list `{value}`"));
        let given = value.split('.').fold(&defaults, |node, key| &node[key]);
        let plain = match given {
            Value::String(s) if s.is_empty() => Some("\"\"".to_string()),
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            Value::Object(m) if m.is_empty() => Some("{}".to_string()),
            Value::Array(a) if a.is_empty() => Some("[]".to_string()),
            _ => None,
        };
        if let Some(plain) = plain {
            assert_eq!(
                default,
                &format!("`{plain}`"),
                "`{value}`'s default in README.md"
            );
        }
    }
    for listed in rows.keys() {
        assert!(
            values.contains(listed),
            "README.md lists `{listed}`, which the chart does not have"
        );
    }
}

/// Which `helm upgrade` rolls the pod (the read-once checksum on the pod template).
#[path = "chart_rollout.rs"]
mod rollout;
