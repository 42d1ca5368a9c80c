//! Clusters from Argo CD's cluster Secrets on the home cluster (`cluster_sources.argocd`), as a
//! platform team's edits reach them: the real binary reads the Secrets through the home
//! cluster's API (a simulator, over HTTP) while jobs run on two other simulated clusters the
//! Secrets point at, and an event-log plugin shows what was delivered.
//!
//! Asserted: the clusters appear from the Secrets (a Secret without Argo CD's label, or in
//! another namespace, is no cluster); a rotated token restarts that cluster alone (the other's
//! supervisor is not started again and its API is not listed again), with the new token (the
//! old one is revoked at once) and without a repeat (its cursors kept); a deleted Secret takes
//! its cluster away; a Secret edited into something that is no cluster keeps its cluster on
//! the last good credentials and is reported by its name in `/status`, the metrics and the
//! log, the token in none of them; a Secret naming a cluster a file names is refused naming
//! the file; an `execProviderConfig` is run for the token; a home cluster that stops
//! answering keeps the clusters as last read and says so; and `jobrelay check` reads the
//! Secrets as the daemon does.

use std::path::Path;
use std::time::Duration;

use jobrelay_testkit::argocd::{self, cluster_secret};
use jobrelay_testkit::{Flavor, Gvr, JobDriver, SimCluster};
use serde_json::Value;

use crate::process::{
    DEADLINE, Relay, count_ids, http_get, plugin_dir, poll, read_lines, status, str_of, write,
};

pub(crate) const NS: &str = "argocd";

pub(crate) fn free_port() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
}

/// A config folder reading Argo CD's Secrets from `home`, watching Volcano jobs, with an
/// event-log plugin writing `out/log/events.jsonl`.
pub(crate) fn folder(home: &SimCluster, listen: std::net::SocketAddr) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    write(
        &root.join("jobrelay.yaml"),
        &format!(
            "plugin_dir: {}\nstate: {{path: state/jobrelay.db}}\ndebounce_ms: 100\n\
             rescan_seconds: 2\nkinds: [{{name: volcano-job}}]\n\
             telemetry: {{listen: \"{listen}\"}}\n\
             cluster_sources:\n  kubeconfig: home.yaml\n  argocd: {{}}\n",
            plugin_dir().display()
        ),
    );
    write(&root.join("home.yaml"), &home.kubeconfig_yaml());
    write(
        &root.join("plugins/log.yaml"),
        "wasm: event-log.wasm\ndelivery: every-version\ngrants:\n  filesystem:\n    \
         - {host: out/log, guest: /data, writable: true}\nconfig:\n  file: events.jsonl\n",
    );
    dir
}

/// How many times the log says the cluster was started.
pub(crate) fn starts(relay: &Relay, cluster: &str) -> usize {
    let field = format!("cluster={cluster} ");
    relay
        .log()
        .lines()
        .filter(|l| l.contains("cluster started") && l.contains(&field))
        .count()
}

/// Waits until `/status` satisfies `check`; the last status otherwise.
pub(crate) async fn status_until(
    relay: &Relay,
    listen: std::net::SocketAddr,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let started = std::time::Instant::now();
    loop {
        let now = status(listen).await;
        if let Some(now) = &now
            && check(now)
        {
            return now.clone();
        }
        assert!(
            started.elapsed() < DEADLINE,
            "never {what}; last /status: {now:#?}\n{}",
            relay.tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub(crate) fn synced(status: &Value, cluster: &str) -> bool {
    status["clusters"][cluster]["state"] == "synced"
}

/// Checks the folder's clusters every 300 ms, offline after `offline_after` failed in a
/// row, online after 2 good; and gives the event-log plugin the clusters' fleet events.
pub(crate) fn checked_often(dir: &Path, offline_after: u32) {
    let main = dir.join("jobrelay.yaml");
    let text = std::fs::read_to_string(&main).expect("main file");
    write(
        &main,
        &format!(
            "{text}cluster_health: {{check_interval_ms: 300, offline_after: {offline_after}, \
             online_after: 2}}\n"
        ),
    );
    let manifest = dir.join("plugins/log.yaml");
    let text = std::fs::read_to_string(&manifest).expect("manifest");
    write(&manifest, &format!("fleet_events: [clusters]\n{text}"));
}

/// The fleet events in the event log, oldest first: (kind, summary).
pub(crate) fn fleet_told(events: &Path) -> Vec<(String, String)> {
    read_lines(events)
        .0
        .iter()
        .filter(|l| l.get("fleet").is_some())
        .map(|l| {
            (
                str_of(l, "fleet").to_string(),
                str_of(l, "summary").to_string(),
            )
        })
        .collect()
}

/// Waits until the event log holds `n` fleet events; they are returned.
pub(crate) async fn fleet_until(relay: &Relay, events: &Path, n: usize) -> Vec<(String, String)> {
    let told = poll(DEADLINE, || {
        let told = fleet_told(events);
        if told.len() >= n {
            Ok(told)
        } else {
            Err(format!("{told:?}"))
        }
    })
    .await;
    told.unwrap_or_else(|e| panic!("not {n} fleet events: {e}\n{}", relay.tail()))
}

/// Waits until the log says `cluster` was started `n` times; panics with its log after the
/// deadline.
pub(crate) async fn restarted(relay: &Relay, cluster: &str, n: usize) {
    let started = poll(DEADLINE, || {
        (starts(relay, cluster) == n)
            .then_some(())
            .ok_or_else(String::new)
    })
    .await;
    assert!(
        started.is_ok(),
        "{cluster} never restarted\n{}",
        relay.tail()
    );
}

/// Waits until `cluster` is online again after an outage its source spoke of: its source
/// says nothing against it any more, and the event log holds the outage and its end, once
/// each.
pub(crate) async fn back_online(
    relay: &Relay,
    listen: std::net::SocketAddr,
    events: &Path,
    cluster: &str,
) {
    let now = status_until(relay, listen, &format!("{cluster} online again"), |s| {
        s["clusters"][cluster]["availability"] == "online"
    })
    .await;
    assert!(
        now["clusters"][cluster].get("source_says").is_none(),
        "{now:#}"
    );
    let told: Vec<String> = fleet_told(events).into_iter().map(|(k, _)| k).collect();
    assert_eq!(told, ["cluster-offline", "cluster-online"]);
}

/// Waits until the event log has an event of `cluster` in `phase`.
pub(crate) async fn delivered(relay: &Relay, events: &Path, cluster: &str, phase: &str) {
    let found = poll(DEADLINE, || {
        let (lines, _) = read_lines(events);
        if lines
            .iter()
            .any(|l| str_of(l, "cluster") == cluster && str_of(l, "phase") == phase)
        {
            Ok(())
        } else {
            Err(format!("{} lines", lines.len()))
        }
    })
    .await;
    assert!(
        found.is_ok(),
        "no {phase} event of {cluster}: {found:?}\n{}",
        relay.tail()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn argo_cd_secrets_add_restart_alone_and_remove_clusters_live() {
    let home = SimCluster::start("home").await.expect("home");
    let alpha = SimCluster::start("alpha").await.expect("alpha");
    let beta = SimCluster::start("beta").await.expect("beta");
    argocd::put_cluster(&home, NS, "alpha", "alpha", &alpha, alpha.token()).expect("secret");
    argocd::put_cluster(&home, NS, "beta", "beta", &beta, beta.token()).expect("secret");
    // Neither is Argo CD's: one lacks its label, one is in another namespace.
    let mut unlabelled = cluster_secret(NS, "gamma", "gamma", &beta.url(), "{}");
    unlabelled["metadata"]["labels"] = serde_json::json!({});
    argocd::put(&home, unlabelled).expect("secret");
    argocd::put(
        &home,
        cluster_secret("other", "delta", "delta", &beta.url(), "{}"),
    )
    .expect("secret");
    let mut on_alpha = JobDriver::create(&alpha, Flavor::Volcano, "ml", "a1").expect("job");
    on_alpha.running().expect("running");
    let mut on_beta = JobDriver::create(&beta, Flavor::Volcano, "ml", "b1").expect("job");
    on_beta.running().expect("running");

    let listen = free_port();
    let dir = folder(&home, listen);
    let events = dir.path().join("out/log/events.jsonl");
    let relay = Relay::start(dir.path(), "run");
    let now = status_until(&relay, listen, "both clusters synced", |s| {
        synced(s, "alpha") && synced(s, "beta")
    })
    .await;
    let clusters: Vec<&String> = now["clusters"]
        .as_object()
        .expect("clusters")
        .keys()
        .collect();
    assert_eq!(clusters, ["alpha", "beta"], "only Argo CD's Secrets");
    let source = &now["cluster_sources"]["argocd"];
    assert_eq!(source["namespace"], NS);
    assert_eq!(
        source["label_selector"],
        "argocd.argoproj.io/secret-type=cluster"
    );
    assert_eq!(source["clusters"]["alpha"], "argocd/alpha");
    assert_eq!(source["clusters"]["beta"], "argocd/beta");
    delivered(&relay, &events, "alpha", "running").await;
    delivered(&relay, &events, "beta", "running").await;
    assert_eq!((starts(&relay, "alpha"), starts(&relay, "beta")), (1, 1));

    // The token is rotated: the API server takes the new one, the Secret is edited, the old
    // one is revoked.
    let beta_lists = beta.list_requests_for(&Gvr::VOLCANO_JOB);
    alpha.accept_token("rotated-token-0001");
    let edited = std::time::Instant::now();
    argocd::put_cluster(&home, NS, "alpha", "alpha", &alpha, "rotated-token-0001").expect("put");
    restarted(&relay, "alpha", 2).await;
    println!(
        "Secret edited -> alpha restarted in {} ms",
        edited.elapsed().as_millis()
    );
    alpha.revoke_token(alpha.token());
    on_alpha.succeeded().expect("succeeded");
    delivered(&relay, &events, "alpha", "succeeded").await;
    on_beta.succeeded().expect("succeeded");
    delivered(&relay, &events, "beta", "succeeded").await;
    assert_eq!(starts(&relay, "beta"), 1, "beta was not restarted");
    assert_eq!(
        beta.list_requests_for(&Gvr::VOLCANO_JOB),
        beta_lists,
        "beta was not listed again"
    );
    let (lines, torn) = read_lines(&events);
    assert!(torn.is_empty(), "{torn:?}");
    let (_, repeated) = count_ids(&lines);
    assert!(
        repeated.is_empty(),
        "the restart repeated nothing: {repeated:?}"
    );

    // The Secret is deleted: its cluster goes.
    let deleted = std::time::Instant::now();
    home.delete(&Gvr::SECRET, NS, "beta").expect("delete");
    let now = status_until(&relay, listen, "beta gone", |s| {
        s["clusters"].get("beta").is_none()
    })
    .await;
    println!(
        "Secret deleted -> beta gone from /status in {} ms",
        deleted.elapsed().as_millis()
    );
    assert!(synced(&now, "alpha"), "{now:#?}");
    assert!(now["cluster_sources"]["argocd"]["clusters"]["beta"].is_null());
    assert_eq!(
        starts(&relay, "alpha"),
        2,
        "alpha untouched by beta's removal"
    );
    // All it asked of the home cluster: lists and watches of Argo CD's Secrets in their
    // namespace, by the label (what the chart's Role grants, and no other Secret).
    let asked = home.recent_requests();
    assert!(!asked.is_empty());
    for request in &asked {
        let (path, query) = request.uri.split_once('?').unwrap_or((&request.uri, ""));
        assert!(
            request.method == "GET"
                && path == "/api/v1/namespaces/argocd/secrets"
                && query.contains("labelSelector=argocd.argoproj.io%2Fsecret-type%3Dcluster"),
            "the home cluster was asked {} {}",
            request.method,
            request.uri
        );
    }
    let errors = relay.errors();
    assert!(errors.is_empty(), "{errors:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_secret_keeps_its_last_good_credentials_and_a_file_name_is_never_taken() {
    let home = SimCluster::start("home").await.expect("home");
    let alpha = SimCluster::start("alpha").await.expect("alpha");
    let beta = SimCluster::start("beta").await.expect("beta");
    argocd::put_cluster(&home, NS, "alpha", "alpha", &alpha, alpha.token()).expect("secret");
    let mut job = JobDriver::create(&alpha, Flavor::Volcano, "ml", "a1").expect("job");
    job.running().expect("running");
    let listen = free_port();
    let dir = folder(&home, listen);
    let events = dir.path().join("out/log/events.jsonl");
    let relay = Relay::start(dir.path(), "run");
    status_until(&relay, listen, "alpha synced", |s| synced(s, "alpha")).await;

    // Edited into JSON that does not parse (a paste cut short), with another token in it.
    let broken = r#"{"bearerToken":"half-pasted-token-77","tlsClientConfig":{"#;
    argocd::put(
        &home,
        cluster_secret(NS, "alpha", "alpha", &alpha.url(), broken),
    )
    .expect("put");
    let now = status_until(&relay, listen, "the Secret refused", |s| {
        s["cluster_sources"]["argocd"]["refused"]
            .get("argocd/alpha")
            .is_some()
    })
    .await;
    let why = now["cluster_sources"]["argocd"]["refused"]["argocd/alpha"]
        .as_str()
        .expect("a reason");
    assert!(why.starts_with("data.config: not JSON"), "{why}");
    assert!(why.contains("last good credentials stay"), "{why}");
    assert!(
        now["attention"]
            .as_array()
            .expect("attention")
            .iter()
            .any(|l| l
                .as_str()
                .is_some_and(|l| l.contains("Secret argocd/alpha refused"))),
        "{now:#?}"
    );
    // Still running on the last good credentials, never restarted.
    job.succeeded().expect("succeeded");
    delivered(&relay, &events, "alpha", "succeeded").await;
    assert_eq!(starts(&relay, "alpha"), 1);
    let (_, metrics) = http_get(listen, "/metrics").await.expect("metrics");
    assert!(
        metrics.contains(
            "jobrelay_cluster_source_refused{source=\"argocd\",secret=\"argocd/alpha\"} 1"
        ),
        "{metrics}"
    );
    assert!(metrics.contains("jobrelay_cluster_source_up{source=\"argocd\"} 1"));
    let log = relay.log();
    assert!(
        log.lines()
            .any(|l| l.contains("ERROR") && l.contains("argocd/alpha")),
        "{}",
        relay.tail()
    );
    let status_text = now.to_string();
    for token in ["half-pasted-token-77", alpha.token()] {
        assert!(!log.contains(token), "the log shows a token");
        assert!(!status_text.contains(token), "/status shows a token");
        assert!(!metrics.contains(token), "/metrics shows a token");
    }

    // A file names `beta`, then a Secret does too: the file's cluster runs, the Secret is
    // refused naming the file.
    let file = dir.path().join("clusters/beta.yaml");
    write(&file, &beta.kubeconfig_yaml());
    status_until(&relay, listen, "beta from its file", |s| synced(s, "beta")).await;
    argocd::put_cluster(&home, NS, "beta-inventory", "beta", &beta, beta.token()).expect("put");
    let now = status_until(&relay, listen, "the name conflict named", |s| {
        s["cluster_sources"]["argocd"]["refused"]
            .get("argocd/beta-inventory")
            .is_some()
    })
    .await;
    let why = now["cluster_sources"]["argocd"]["refused"]["argocd/beta-inventory"]
        .as_str()
        .expect("a reason");
    assert!(
        why.contains("`beta`") && why.contains(&file.display().to_string()),
        "{why}"
    );
    assert!(now["cluster_sources"]["argocd"]["clusters"]["beta"].is_null());
    assert_eq!(
        starts(&relay, "beta"),
        1,
        "the file's cluster was not replaced"
    );

    // Fixed with the credentials it had: the refusal goes, and the cluster, whose
    // credentials are the same as its last good ones, is not restarted.
    argocd::put_cluster(&home, NS, "alpha", "alpha", &alpha, alpha.token()).expect("put");
    status_until(&relay, listen, "the Secret accepted again", |s| {
        s["cluster_sources"]["argocd"]["refused"]
            .get("argocd/alpha")
            .is_none()
    })
    .await;
    assert_eq!(starts(&relay, "alpha"), 1);
}

/// `jobrelay check` reads the source once as the daemon does: the cluster of each good Secret
/// is checked like a file's, and a Secret that is no cluster is a problem (exit 1) named by
/// its `namespace/name` and field, its token not shown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_lists_the_secrets_and_names_the_one_refused() {
    let home = SimCluster::start("home").await.expect("home");
    let alpha = SimCluster::start("alpha").await.expect("alpha");
    argocd::put_cluster(&home, NS, "alpha", "alpha", &alpha, alpha.token()).expect("secret");
    argocd::put(
        &home,
        cluster_secret(
            NS,
            "broken",
            "broken",
            &alpha.url(),
            r#"{"bearerToken":"leaky-token-42""#,
        ),
    )
    .expect("secret");
    let dir = folder(&home, free_port());
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_jobrelay"))
        .args(["check", "--config"])
        .arg(dir.path())
        .args(["--cluster-timeout", "20"])
        .env_remove("JOBRELAY_CONFIG")
        .output()
        .await
        .expect("jobrelay check runs");
    let report = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(1), "{report}");
    for line in [
        "ok    source   argocd: 2 Secret(s) in argocd",
        "ok    source   argocd Secret argocd/alpha: cluster alpha",
        "FAIL  source   argocd Secret argocd/broken: data.config: not JSON",
    ] {
        assert!(report.contains(line), "{line:?} missing:\n{report}");
    }
    assert!(
        report
            .lines()
            .any(|l| l.starts_with("ok    cluster  alpha")),
        "the Secret's cluster is checked:\n{report}"
    );
    assert!(report.contains("1 problem(s) found"), "{report}");
    for token in ["leaky-token-42", alpha.token()] {
        assert!(!report.contains(token), "{report}");
    }
}

/// A Secret whose `config` has an `execProviderConfig` (as Argo CD writes it for GKE, EKS or
/// AKS): the client runs the command, here a script that prints an `ExecCredential`, and the
/// cluster is watched with the token it gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_provider_in_the_secret_is_run_for_the_token() {
    use std::os::unix::fs::PermissionsExt as _;
    let home = SimCluster::start("home").await.expect("home");
    let alpha = SimCluster::start("alpha").await.expect("alpha");
    let listen = free_port();
    let dir = folder(&home, listen);
    let plugin = dir.path().join("bin/credential-plugin");
    write(
        &plugin,
        &format!(
            "#!/bin/sh\n[ \"$1\" = token ] && [ \"$REGION\" = eu ] || exit 3\nprintf '%s' \
             '{{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\",\
             \"kind\":\"ExecCredential\",\"status\":{{\"token\":\"{}\"}}}}'\n",
            alpha.token()
        ),
    );
    std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let config = serde_json::json!({
        "execProviderConfig": {
            "command": plugin.display().to_string(),
            "args": ["token"],
            "env": {"REGION": "eu"},
            "apiVersion": "client.authentication.k8s.io/v1beta1",
        }
    })
    .to_string();
    argocd::put(
        &home,
        cluster_secret(NS, "alpha", "alpha", &alpha.url(), &config),
    )
    .expect("secret");
    let mut job = JobDriver::create(&alpha, Flavor::Volcano, "ml", "a1").expect("job");
    job.running().expect("running");
    let relay = Relay::start(dir.path(), "run");
    status_until(&relay, listen, "alpha synced", |s| synced(s, "alpha")).await;
    delivered(
        &relay,
        &dir.path().join("out/log/events.jsonl"),
        "alpha",
        "running",
    )
    .await;
}

/// The home cluster stops answering: the source's clusters run on as last read, `/status`
/// says why the Secrets cannot be read and `jobrelay_cluster_source_up` is 0; once it answers
/// again the watch lists them again by itself, restarting nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_home_cluster_that_stops_answering_keeps_the_clusters_as_last_read() {
    let home = SimCluster::start("home").await.expect("home");
    let alpha = SimCluster::start("alpha").await.expect("alpha");
    argocd::put_cluster(&home, NS, "alpha", "alpha", &alpha, alpha.token()).expect("secret");
    let listen = free_port();
    let dir = folder(&home, listen);
    let relay = Relay::start(dir.path(), "run");
    status_until(&relay, listen, "alpha synced", |s| synced(s, "alpha")).await;
    home.set_outage(true);
    home.drop_watches();
    let now = status_until(&relay, listen, "the source's error said", |s| {
        s["cluster_sources"]["argocd"]["error"].is_string()
    })
    .await;
    assert!(synced(&now, "alpha"), "alpha runs on: {now:#?}");
    assert_eq!(
        now["cluster_sources"]["argocd"]["clusters"]["alpha"],
        "argocd/alpha"
    );
    let (_, metrics) = http_get(listen, "/metrics").await.expect("metrics");
    assert!(
        metrics.contains("jobrelay_cluster_source_up{source=\"argocd\"} 0"),
        "{metrics}"
    );
    home.set_outage(false);
    status_until(&relay, listen, "the source read again", |s| {
        s["cluster_sources"]["argocd"]["error"].is_null()
    })
    .await;
    assert_eq!(starts(&relay, "alpha"), 1, "nothing restarted");
}

/// `cluster_sources:` is read live: taken out of the main file, its clusters go; put back with
/// another selector, the watch starts again with it and takes only the Secrets it selects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_of_the_section_is_followed_live() {
    let home = SimCluster::start("home").await.expect("home");
    let alpha = SimCluster::start("alpha").await.expect("alpha");
    let beta = SimCluster::start("beta").await.expect("beta");
    argocd::put_cluster(&home, NS, "alpha", "alpha", &alpha, alpha.token()).expect("secret");
    let mut team = cluster_secret(
        NS,
        "beta",
        "beta",
        &beta.url(),
        &argocd::token_config(beta.token()),
    );
    team["metadata"]["labels"]["team"] = "ml".into();
    argocd::put(&home, team).expect("secret");
    let listen = free_port();
    let dir = folder(&home, listen);
    let relay = Relay::start(dir.path(), "run");
    status_until(&relay, listen, "both synced", |s| {
        synced(s, "alpha") && synced(s, "beta")
    })
    .await;
    let main = dir.path().join("jobrelay.yaml");
    let text = std::fs::read_to_string(&main).expect("main file");
    let (without, _) = text.split_once("cluster_sources:").expect("the section");
    write(&main, without);
    let now = status_until(&relay, listen, "the source's clusters gone", |s| {
        s["clusters"].as_object().is_some_and(|c| c.is_empty())
    })
    .await;
    assert!(now.get("cluster_sources").is_none(), "{now:#?}");
    write(
        &main,
        &format!(
            "{without}cluster_sources:\n  kubeconfig: home.yaml\n  argocd:\n    \
             label_selector: argocd.argoproj.io/secret-type=cluster,team=ml\n"
        ),
    );
    let now = status_until(&relay, listen, "beta back alone", |s| synced(s, "beta")).await;
    let clusters: Vec<&String> = now["clusters"]
        .as_object()
        .expect("clusters")
        .keys()
        .collect();
    assert_eq!(clusters, ["beta"], "{now:#?}");
    assert_eq!(
        now["cluster_sources"]["argocd"]["label_selector"],
        "argocd.argoproj.io/secret-type=cluster,team=ml"
    );
}

/// A cluster whose token is revoked is offline as one whose API server is down is, but says
/// why apart: `unauthorized` in `/status` and `jobrelay_cluster_unauthorized` 1 (which its own
/// alert reads), its `last_error` the API server's answer in words, not kube's debug dump.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_token_is_unauthorized_and_a_dead_server_is_not() {
    let home = SimCluster::start("home").await.expect("home");
    let alpha = SimCluster::start("alpha").await.expect("alpha");
    let beta = SimCluster::start("beta").await.expect("beta");
    argocd::put_cluster(&home, NS, "alpha", "alpha", &alpha, alpha.token()).expect("secret");
    argocd::put_cluster(&home, NS, "beta", "beta", &beta, beta.token()).expect("secret");
    let listen = free_port();
    let dir = folder(&home, listen);
    checked_often(dir.path(), 2);
    let relay = Relay::start(dir.path(), "run");
    status_until(&relay, listen, "both online", |s| {
        s["clusters"]["alpha"]["availability"] == "online"
            && s["clusters"]["beta"]["availability"] == "online"
    })
    .await;

    alpha.revoke_token(alpha.token());
    beta.outage_hard(true).expect("outage");
    let now = status_until(&relay, listen, "both offline", |s| {
        s["clusters"]["alpha"]["availability"] == "offline"
            && s["clusters"]["beta"]["availability"] == "offline"
    })
    .await;
    let alpha_now = &now["clusters"]["alpha"];
    assert_eq!(alpha_now["unauthorized"], true, "{alpha_now:#}");
    let why = alpha_now["last_error"].as_str().unwrap_or_default();
    assert!(
        why.contains("the API server answered 401 Unauthorized"),
        "{why}"
    );
    assert!(why.contains(&alpha.url()), "the server is named: {why}");
    assert!(
        !why.contains("Status {") && !why.contains("ApiError"),
        "{why}"
    );
    assert_eq!(now["clusters"]["beta"]["unauthorized"], false, "{now:#}");
    let (_, metrics) = http_get(listen, "/metrics").await.expect("metrics");
    for line in [
        "jobrelay_cluster_unauthorized{cluster=\"alpha\"} 1",
        "jobrelay_cluster_unauthorized{cluster=\"beta\"} 0",
    ] {
        assert!(metrics.contains(line), "{line} missing:\n{metrics}");
    }
}
