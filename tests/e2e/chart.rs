//! The Helm chart in `deploy/helm/jobrelay`, rendered without Helm (which cannot be installed
//! here): the templates are Go templates, rendered with `gtmpl` plus the Helm and Sprig
//! functions they use (`toYaml`, `indent`, `nindent`, `quote`, `hasKey`, and `include` of the
//! named templates in `_helpers.tpl`), then parsed as Kubernetes objects and checked.
//!
//! The ClusterRole is checked against what the daemon really calls: a daemon runs against the
//! simulator through job lifecycles (finalizer held and released, pod logs read by
//! log-archive), every request the simulator saw is mapped to (API group, resource, verb), and
//! that set must be exactly what the chart grants. The daemon runs with leader election, so
//! its Lease requests are checked against the chart's namespaced Role the same way.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use gtmpl::{Context, FuncError, Template, Value as Tv};
use jobrelay::config::main_file::MainConfig;
use jobrelay::config::manifest::PluginManifest;
use jobrelay::daemon::Daemon;
use jobrelay_coordination::Mode;
use jobrelay_e2e::*;
use jobrelay_state::StateBackend;
use jobrelay_testkit::{Flavor, Gvr, JobDriver};
use serde_json::{Value, json};

fn chart_dir() -> PathBuf {
    repo_root().join("deploy/helm/jobrelay")
}

fn to_template_value(v: &Value) -> Tv {
    match v {
        Value::Null => Tv::Nil,
        Value::Bool(b) => Tv::from(*b),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Tv::from(i),
            (None, Some(f)) => Tv::from(f),
            _ => Tv::Nil,
        },
        Value::String(s) => Tv::from(s.clone()),
        Value::Array(a) => Tv::Array(a.iter().map(to_template_value).collect()),
        Value::Object(o) => Tv::Object(
            o.iter()
                .map(|(k, v)| (k.clone(), to_template_value(v)))
                .collect(),
        ),
    }
}

fn from_template_value(v: &Tv) -> Value {
    match v {
        Tv::NoValue | Tv::Nil | Tv::Function(_) => Value::Null,
        Tv::Bool(b) => json!(b),
        Tv::String(s) => json!(s),
        Tv::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => json!(i),
            (None, Some(f)) => json!(f),
            _ => Value::Null,
        },
        Tv::Array(a) => Value::Array(a.iter().map(from_template_value).collect()),
        Tv::Object(o) | Tv::Map(o) => Value::Object(
            o.iter()
                .map(|(k, v)| (k.clone(), from_template_value(v)))
                .collect(),
        ),
    }
}

/// Helm's `toYaml`: the value as YAML, without the trailing newline.
fn to_yaml(args: &[Tv]) -> Result<Tv, FuncError> {
    let value = args
        .first()
        .ok_or(FuncError::ExactlyXArgs("toYaml".into(), 1))?;
    let text = serde_yaml_ng::to_string(&from_template_value(value))
        .map_err(|e| FuncError::Generic(e.to_string()))?;
    Ok(Tv::from(text.trim_end_matches('\n').to_string()))
}

/// Helm's `indent N text`: every line prefixed with N spaces.
fn indent(args: &[Tv]) -> Result<Tv, FuncError> {
    let (Some(Tv::Number(n)), Some(Tv::String(text))) = (args.first(), args.get(1)) else {
        return Err(FuncError::Generic(
            "indent takes a number and a string".into(),
        ));
    };
    let pad = " ".repeat(n.as_u64().unwrap_or(0) as usize);
    let lines: Vec<String> = text.lines().map(|l| format!("{pad}{l}")).collect();
    Ok(Tv::from(lines.join("\n")))
}

/// Helm's `nindent N text`: a newline, then `indent N text`.
fn nindent(args: &[Tv]) -> Result<Tv, FuncError> {
    let Tv::String(indented) = indent(args)? else {
        return Err(FuncError::Generic("indent returned no text".into()));
    };
    Ok(Tv::from(format!("\n{indented}")))
}

/// The named templates of `templates/_helpers.tpl`: `{{- define "NAME" -}} … {{- end }}`,
/// each body trimmed as those markers trim it. A body may use `include` but no block of its
/// own (`if`, `range`), whose `end` this reader would take for the define's.
fn helpers() -> &'static BTreeMap<String, String> {
    static HELPERS: std::sync::OnceLock<BTreeMap<String, String>> = std::sync::OnceLock::new();
    HELPERS.get_or_init(|| {
        let text = std::fs::read_to_string(chart_dir().join("templates/_helpers.tpl"))
            .expect("_helpers.tpl");
        let mut named = BTreeMap::new();
        for part in text.split("{{- define \"").skip(1) {
            let (name, rest) = part.split_once('"').expect("a define's name");
            let body = rest
                .split_once("-}}")
                .expect("a define's opening")
                .1
                .split_once("{{- end }}")
                .expect("a define's end")
                .0;
            assert!(
                !body.contains("{{- if") && !body.contains("{{ if") && !body.contains("range"),
                "{name}: blocks inside a define are not supported by this renderer"
            );
            named.insert(name.to_string(), body.trim().to_string());
        }
        named
    })
}

/// Helm's `include NAME CONTEXT`: a named template of `_helpers.tpl`, rendered.
fn include(args: &[Tv]) -> Result<Tv, FuncError> {
    let (Some(Tv::String(name)), Some(context)) = (args.first(), args.get(1)) else {
        return Err(FuncError::Generic(
            "include takes a name and a context".into(),
        ));
    };
    let body = helpers()
        .get(name)
        .ok_or_else(|| FuncError::Generic(format!("no template named {name:?}")))?;
    let mut template = template_engine();
    template
        .parse(body)
        .map_err(|e| FuncError::Generic(format!("{name}: {e}")))?;
    let text = template
        .render(&Context::from(context.clone()))
        .map_err(|e| FuncError::Generic(format!("{name}: {e}")))?;
    Ok(Tv::from(text))
}

/// A template engine with the Helm and Sprig functions the chart uses.
fn template_engine() -> Template {
    let mut template = Template::default();
    template.add_func("toYaml", to_yaml);
    template.add_func("indent", indent);
    template.add_func("nindent", nindent);
    template.add_func("quote", quote);
    template.add_func("hasKey", has_key);
    template.add_func("include", include);
    template
}

/// Helm's `quote`: a double-quoted string.
fn quote(args: &[Tv]) -> Result<Tv, FuncError> {
    let value = args.first().map(from_template_value).unwrap_or(Value::Null);
    let text = match value {
        Value::String(s) => s,
        other => other.to_string(),
    };
    Ok(Tv::from(serde_json::to_string(&text).unwrap_or_default()))
}

/// Sprig's `hasKey MAP KEY`, as Helm has it: whether the map has the key.
fn has_key(args: &[Tv]) -> Result<Tv, FuncError> {
    let (Some(Tv::Map(map) | Tv::Object(map)), Some(Tv::String(key))) = (args.first(), args.get(1))
    else {
        return Err(FuncError::Generic("hasKey takes a map and a string".into()));
    };
    Ok(Tv::from(map.contains_key(key)))
}

/// What the templates see: `overrides` merged over the chart's `values.yaml`, and the release.
fn context(overrides: Value) -> Value {
    let defaults: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(chart_dir().join("values.yaml")).expect("values.yaml"),
    )
    .expect("values.yaml parses");
    let mut values = defaults;
    merge(&mut values, overrides);
    // Helm refuses values its schema refuses before rendering anything; so does every render
    // here.
    if let Err(problems) = schema_problems(&values) {
        panic!("values.schema.json refuses these values:\n{problems}");
    }
    let chart: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(chart_dir().join("Chart.yaml")).expect("Chart.yaml"),
    )
    .expect("Chart.yaml parses");
    json!({
        "Values": values,
        "Release": {"Name": "jobrelay", "Namespace": "platform", "Service": "Helm"},
        "Chart": {
            "Name": chart["name"],
            "Version": chart["version"],
            "AppVersion": chart["appVersion"],
        },
    })
}

/// The chart's values schema's verdict on `values`: every problem, one a line, with its path.
fn schema_problems(values: &Value) -> Result<(), String> {
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(chart_dir().join("values.schema.json")).expect("schema"),
    )
    .expect("values.schema.json is JSON");
    let validator = jsonschema::draft7::new(&schema).expect("a valid draft-07 schema");
    let problems: Vec<String> = validator
        .iter_errors(values)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

/// One template file rendered as text.
fn render_file(file: &Path, context: &Value) -> String {
    let name = file.display();
    let text = std::fs::read_to_string(file).expect("template");
    let mut template = template_engine();
    template
        .parse(text)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    template
        .render(&Context::from(to_template_value(context)))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Renders every manifest template with `overrides` merged over the chart's `values.yaml`;
/// returns the objects, each with the file it came from.
fn render(overrides: Value) -> Vec<(String, Value)> {
    let context = context(overrides);
    let mut objects = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(chart_dir().join("templates"))
        .expect("templates")
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    for file in files {
        let name = file
            .file_name()
            .expect("name")
            .to_string_lossy()
            .to_string();
        if name == "NOTES.txt" || name.starts_with('_') {
            continue; // printed after install, or named templates only: not manifests
        }
        let out = render_file(&file, &context);
        for doc in serde_yaml_ng::Deserializer::from_str(&out) {
            let value: Value = serde::Deserialize::deserialize(doc)
                .unwrap_or_else(|e| panic!("{name} renders to invalid YAML: {e}\n{out}"));
            if !value.is_null() {
                objects.push((name.clone(), value));
            }
        }
    }
    objects
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

fn object<'a>(objects: &'a [(String, Value)], kind: &str) -> &'a Value {
    objects
        .iter()
        .map(|(_, o)| o)
        .find(|o| o["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} rendered"))
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
    ] {
        assert!(kinds.contains(kind), "{kind} missing: {kinds:?}");
    }
    // No rights on the cluster it runs in unless that cluster is watched.
    for kind in ["ClusterRole", "ClusterRoleBinding"] {
        assert!(
            !kinds.contains(kind),
            "{kind} without a home cluster: {kinds:?}"
        );
    }

    let deployment = object(&objects, "Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        container["securityContext"]["allowPrivilegeEscalation"],
        false
    );
    assert_eq!(
        container["securityContext"]["capabilities"]["drop"],
        json!(["ALL"])
    );
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
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
        BTreeSet::from(["/tmp", "/var/lib/jobrelay", "/var/lib/jobrelay/archive"]),
        "with a read-only root, exactly these paths are writable"
    );
    let sources = &pod["volumes"][0]["projected"]["sources"];
    let paths: BTreeSet<&str> = sources
        .as_array()
        .expect("sources")
        .iter()
        .flat_map(|s| {
            s.as_object()
                .and_then(|o| o.values().next())
                .and_then(|v| v["items"].as_array())
                .into_iter()
                .flatten()
                .filter_map(|i| i["path"].as_str())
        })
        .collect();
    for path in [
        "jobrelay.yaml",
        "plugins/mysql-sync.yaml",
        "plugins/log-archive.yaml",
    ] {
        assert!(
            paths.contains(path),
            "{path} not in the config folder: {paths:?}"
        );
    }
    // The clusters' Secret is mounted whole, so a key added to it is a new cluster.
    let clusters = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == "clusters")
        .expect("the clusters volume");
    assert_eq!(clusters["secret"]["secretName"], "jobrelay-clusters");
    assert!(clusters["secret"]["items"].is_null(), "{clusters}");
    let mounts = container["volumeMounts"].as_array().expect("mounts");
    assert!(
        mounts
            .iter()
            .any(|m| m["name"] == "clusters" && m["mountPath"] == "/etc/jobrelay-clusters"),
        "{mounts:?}"
    );

    // The config the chart writes is one jobrelay accepts.
    let data = &object(&objects, "ConfigMap")["data"];
    let main = MainConfig::parse(
        data["jobrelay.yaml"].as_str().expect("main file"),
        Path::new("/etc/jobrelay"),
    )
    .expect("the rendered main file is valid");
    assert_eq!(main.telemetry.listen.map(|a| a.port()), Some(9464));
    assert_eq!(main.clusters_dir, Path::new("/etc/jobrelay-clusters"));
    assert_eq!(
        main.state,
        StateBackend::Sqlite(Path::new("/var/lib/jobrelay/state/jobrelay.db").to_path_buf())
    );
    for name in ["mysql-sync", "log-archive"] {
        let text = data[format!("plugin-{name}.yaml").as_str()]
            .as_str()
            .unwrap_or_else(|| panic!("{name} manifest"));
        let manifest: PluginManifest =
            serde_yaml_ng::from_str(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!manifest.wasm.as_os_str().is_empty());
    }
    let service = object(&objects, "Service");
    assert_eq!(service["spec"]["ports"][0]["port"], 9464);
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
    let sim = jobrelay_testkit::SimCluster::start("east")
        .await
        .expect("sim");
    // The simulator is the home cluster too; the release namespace is `platform`.
    let setup = Setup::new(
        "kinds: [{name: volcano-job, finalizer: true}, {name: pytorch-job}, {name: batch-job}, {name: mpi-job}]\n\
         coordination: {mode: leader, kubeconfig: clusters/east.yaml, namespace: platform, \
         lease_name: jobrelay, lease_duration_seconds: 3, renew_deadline_seconds: 2, \
         retry_period_seconds: 1}\n",
    );
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

    let requests = sim.recent_requests();
    let (lease_requests, cluster_requests): (Vec<_>, Vec<_>) =
        requests.iter().partition(|r| r.uri.contains("/leases"));
    check_lease_role("leader", &lease_requests);
    let sharded = sharded_lease_calls(&sim).await;
    check_lease_role("sharded", &sharded.iter().collect::<Vec<_>>());
    let used: BTreeSet<(String, String, String)> = cluster_requests
        .iter()
        .filter_map(|r| access(&r.method, &r.uri))
        .collect();
    let role = render(json!({"homeCluster": {"name": "home"}}))
        .into_iter()
        .map(|(_, o)| o)
        .find(|o| o["kind"] == "ClusterRole")
        .expect("ClusterRole");
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

/// Every Lease request went to the release namespace with a verb (and, where the rule names
/// one, an object) the Role of `mode` grants; and every grant was used.
fn check_lease_role(mode: &str, requests: &[&jobrelay_testkit::RequestRecord]) {
    let objects = render(json!({"coordination": {"mode": mode}}));
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

/// A sharded daemon against the simulator, its Leases on a home cluster of their own: the
/// Lease calls it makes, from its first take to its clean stop.
async fn sharded_lease_calls(
    sim: &jobrelay_testkit::SimCluster,
) -> Vec<jobrelay_testkit::RequestRecord> {
    let home = jobrelay_testkit::SimCluster::start("home")
        .await
        .expect("home");
    let setup = Setup::new(
        "kinds: [{name: batch-job}]\n\
         coordination: {mode: sharded, kubeconfig: home.kubeconfig, namespace: platform, \
         lease_name: jobrelay, lease_duration_seconds: 3, renew_deadline_seconds: 2, \
         retry_period_seconds: 1}\n",
    );
    std::fs::write(setup.path("home.kubeconfig"), home.kubeconfig_yaml()).expect("kubeconfig");
    setup.add_cluster(sim);
    let daemon = Daemon::start(setup.config_dir()).await.expect("daemon");
    wait_synced(&daemon, "east").await;
    // A few renewals, then the clean stop (Leases released, the member Lease deleted).
    tokio::time::sleep(Duration::from_secs(3)).await;
    daemon.shutdown(Duration::from_secs(5)).await;
    home.recent_requests()
        .into_iter()
        .filter(|r| r.uri.contains("/leases"))
        .collect()
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
    let main = MainConfig::parse(
        object(&default, "ConfigMap")["data"]["jobrelay.yaml"]
            .as_str()
            .expect("main file"),
        Path::new("/etc/jobrelay"),
    )
    .expect("valid");
    assert_eq!(main.coordination.mode, Mode::Single);
    assert_eq!(
        object(&default, "Deployment")["spec"]["strategy"]["type"],
        "Recreate"
    );

    let objects = render(json!({
        "replicas": 2,
        "coordination": {"mode": "leader"},
        "stateUrl": "env:JOBRELAY_STATE_URL",
        "envFromSecrets": ["jobrelay-state"],
        "homeCluster": {"name": "home"},
    }));
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
    let binding = object(&objects, "RoleBinding");
    assert_eq!(binding["roleRef"]["name"], "jobrelay-lease");
    assert_eq!(binding["subjects"][0]["name"], "jobrelay");
    assert_eq!(binding["subjects"][0]["namespace"], "platform");
    // The ClusterRole gains nothing from leader election.
    let watched_home = render(json!({"homeCluster": {"name": "home"}}));
    assert_eq!(
        object(&objects, "ClusterRole")["rules"],
        object(&watched_home, "ClusterRole")["rules"]
    );
    let main = MainConfig::parse(
        object(&objects, "ConfigMap")["data"]["jobrelay.yaml"]
            .as_str()
            .expect("main file"),
        Path::new("/etc/jobrelay"),
    )
    .expect("the rendered main file with leader election is valid");
    assert_eq!(main.coordination.mode, Mode::Leader);
    assert_eq!(main.coordination.lease_name, "jobrelay");
    assert_eq!(main.coordination.kubeconfig, None, "in-cluster credentials");
    assert_eq!(main.coordination.lease_duration_seconds, 15);

    let sharded = render(json!({
        "replicas": 3,
        "coordination": {"mode": "sharded"},
        "homeCluster": {"name": "home"},
    }));
    let main = MainConfig::parse(
        object(&sharded, "ConfigMap")["data"]["jobrelay.yaml"]
            .as_str()
            .expect("main file"),
        Path::new("/etc/jobrelay"),
    )
    .expect("the rendered main file with sharding is valid");
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
/// the key in the main file (which the daemon refuses): an S3 archive, a state URL, telemetry.
#[test]
fn config_keys_the_chart_sets_can_be_set_from_values() {
    let objects = render(json!({
        "config": {
            "archive": {"s3": {"bucket": "job-logs", "region": "eu-west-1"}},
            "state": {"url": "env:JOBRELAY_STATE_URL", "table_prefix": "relay_"},
            "telemetry": {"listen": "0.0.0.0:9464"},
        },
        "stateUrl": "env:IGNORED_WHEN_CONFIG_SETS_STATE",
    }));
    let text = object(&objects, "ConfigMap")["data"]["jobrelay.yaml"]
        .as_str()
        .expect("main file")
        .to_string();
    for key in ["archive:", "state:", "telemetry:", "plugin_dir:"] {
        let times = text.lines().filter(|l| l.starts_with(key)).count();
        assert_eq!(times, 1, "`{key}` {times} times in:\n{text}");
    }
    assert!(!text.contains("IGNORED_WHEN_CONFIG_SETS_STATE"), "{text}");
    let main = MainConfig::parse(&text, std::path::Path::new("/etc/jobrelay"))
        .unwrap_or_else(|e| panic!("the daemon refuses the rendered main file: {e}\n{text}"));
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

    let none = render(json!({
        "rbac": {"create": false},
        "homeCluster": {"name": "home"},
        "coordination": {"mode": "leader"},
        "replicas": 2,
        "stateUrl": "env:JOBRELAY_STATE_URL",
    }));
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
        assert!(!metrics.is_empty(), "{expr}");
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

/// The state volume can be a claim the chart makes, and the compile cache lives on it by
/// default, so a restarted pod neither loses its cursors nor compiles its plugins again.
#[test]
fn the_state_and_the_compile_cache_can_outlive_the_pod() {
    let objects = render(
        json!({"persistence": {"enabled": true, "size": "20Gi", "storageClassName": "fast"}}),
    );
    let claim = object(&objects, "PersistentVolumeClaim");
    assert_eq!(claim["metadata"]["name"], "jobrelay-state");
    assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "20Gi");
    assert_eq!(claim["spec"]["storageClassName"], "fast");
    assert_eq!(
        claim["metadata"]["annotations"]["helm.sh/resource-policy"],
        "keep"
    );
    let volumes = &object(&objects, "Deployment")["spec"]["template"]["spec"]["volumes"];
    let state = volumes
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == "state")
        .expect("state volume");
    assert_eq!(
        state["persistentVolumeClaim"]["claimName"],
        "jobrelay-state"
    );
    assert!(state["emptyDir"].is_null(), "{state}");

    let main = MainConfig::parse(
        object(&objects, "ConfigMap")["data"]["jobrelay.yaml"]
            .as_str()
            .expect("main file"),
        Path::new("/etc/jobrelay"),
    )
    .expect("valid");
    assert_eq!(
        main.runtime.cache_dir.as_deref(),
        Some(Path::new("/var/lib/jobrelay/cache"))
    );
    // Without persistence: no claim, the state volume as given.
    let default = render(json!({}));
    assert!(
        default
            .iter()
            .all(|(_, o)| o["kind"] != "PersistentVolumeClaim")
    );
}

/// After install Helm prints NOTES.txt: how to reach the status page and how to add a cluster,
/// with this release's names.
#[test]
fn the_notes_say_how_to_reach_the_status_and_add_a_cluster() {
    let notes_file = chart_dir().join("templates/NOTES.txt");
    let notes = render_file(
        &notes_file,
        &context(json!({"clusters": {"secretName": "jobrelay-clusters"}})),
    );
    assert!(
        notes.contains("port-forward svc/jobrelay-metrics 9464"),
        "{notes}"
    );
    assert!(notes.contains("Secret jobrelay-clusters"), "{notes}");
    let without = render_file(&notes_file, &context(json!({})));
    assert!(without.contains("set clusters.secretName"), "{without}");
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
/// the API server would drop or refuse) fails here, since no Helm binary can run in this
/// test (none is installable from the package registries) to lint against the schemas. The
/// Prometheus Operator's objects, which k8s-openapi does not know, are held to the fields
/// their CRDs define for what the chart writes.
#[test]
fn every_rendered_manifest_is_a_valid_kubernetes_object() {
    use k8s_openapi::api::{apps, core, networking, policy, rbac};
    let full = json!({
        "clusters": {"secretName": "jobrelay-clusters"},
        "envFromSecrets": ["jobrelay-secrets"],
        "replicas": 2,
        "coordination": {"mode": "leader"},
        "homeCluster": {"name": "home"},
        "config": {"archive": {"s3": {"bucket": "logs", "region": "eu-west-1"}}},
        "persistence": {"enabled": true, "size": "20Gi", "storageClassName": "fast"},
        "nodeSelector": {"pool": "system"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "platform", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
        "priorityClassName": "platform-critical",
        "podAnnotations": {"example.com/owner": "platform"},
        "imagePullSecrets": ["registry-credentials"],
        "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/jobrelay"}},
        "networkPolicy": {"enabled": true},
        "metrics": {
            "serviceMonitor": {"enabled": true, "labels": {"release": "prometheus"}},
            "prometheusRule": {"enabled": true},
        },
    });
    let mut seen = BTreeSet::new();
    for overrides in [json!({"clusters": {"secretName": "c"}}), full] {
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

/// The values schema describes every value the templates read and refuses what Helm should
/// refuse before rendering: unknown keys (a typo would otherwise be ignored), values of the
/// wrong type, a coordination mode that does not exist.
#[test]
fn the_values_schema_refuses_typos_and_wrong_types() {
    let defaults: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(chart_dir().join("values.yaml")).expect("values.yaml"),
    )
    .expect("values.yaml parses");
    schema_problems(&defaults).expect("values.yaml itself passes");

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

    for (bad, path) in [
        (json!({"replica": 2}), ""),
        (json!({"replicas": "two"}), "/replicas"),
        (
            json!({"coordination": {"mode": "leaders"}}),
            "/coordination/mode",
        ),
        (json!({"persistence": {"enabeld": true}}), "/persistence"),
        (
            json!({"metrics": {"serviceMonitor": {"interval": "often"}}}),
            "/metrics/serviceMonitor/interval",
        ),
        (
            json!({"plugins": {"Bad Name": {"wasm": "x.wasm"}}}),
            "/plugins",
        ),
        (
            json!({"plugins": {"p": {"delivery": "transitions"}}}),
            "/plugins/p",
        ),
        (
            json!({"imagePullSecrets": [{"name": "x"}]}),
            "/imagePullSecrets/0",
        ),
    ] {
        let mut values = defaults.clone();
        merge(&mut values, bad.clone());
        let problems = schema_problems(&values).expect_err(&format!("{bad} must be refused"));
        assert!(
            problems.lines().any(|l| l.starts_with(&format!("{path}:"))),
            "{bad}: the problem should be at {path:?}: {problems}"
        );
    }
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
