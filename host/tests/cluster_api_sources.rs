//! Clusters from Cluster API's kubeconfig Secrets on the home cluster
//! (`cluster_sources.cluster_api`), as Cluster API's edits reach them: the real binary reads
//! the Secrets through the home cluster's API (a simulator, over HTTP) while jobs run on two
//! other simulated clusters the Secrets' kubeconfigs point at, and an event-log plugin shows
//! what was delivered.
//!
//! Asserted: the clusters appear from the `<cluster>-kubeconfig` Secrets of the namespace
//! (Cluster API's other Secrets of a cluster, under the same label, are passed over; a Secret
//! in another namespace is no cluster); a rotated kubeconfig restarts that cluster alone, with
//! the new token (the old one is revoked at once) and without a repeat (its cursors kept); a
//! deleted Secret takes its cluster away; a `value` edited into a kubeconfig that cannot work
//! keeps the cluster on its last good credentials and is reported by the Secret's name in
//! `/status`, the metrics and the log, the token in none of them; a cluster name a file or the
//! Argo CD source already gives is refused naming both; `cluster_api` taken out of the main
//! file takes its clusters with it and leaves Argo CD's running; and `jobrelay check` reads
//! the Secrets as the daemon does.

use std::time::Duration;

use jobrelay_testkit::{Flavor, Gvr, JobDriver, SimCluster, argocd, capi};
use serde_json::Value;

use crate::cluster_sources::{
    back_online, checked_often, delivered, fleet_told, fleet_until, free_port, restarted, starts,
    status_until, synced,
};
use crate::process::{Relay, count_ids, http_get, read_lines, write};

const NS: &str = "fleet";

/// The Argo CD test's config folder, reading Cluster API's Secrets in `fleet` instead (and
/// Argo CD's too with `with_argocd`).
fn folder(home: &SimCluster, listen: std::net::SocketAddr, with_argocd: bool) -> tempfile::TempDir {
    let dir = crate::cluster_sources::folder(home, listen);
    let main = dir.path().join("jobrelay.yaml");
    let text = std::fs::read_to_string(&main).expect("main file");
    let argocd = if with_argocd { "  argocd: {}\n" } else { "" };
    let text = text.replace(
        "  argocd: {}\n",
        &format!("{argocd}  cluster_api:\n    namespace: {NS}\n"),
    );
    write(&main, &text);
    dir
}

fn source(status: &Value) -> &Value {
    &status["cluster_sources"]["cluster_api"]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_api_secrets_add_restart_alone_and_remove_clusters_live() {
    let home = SimCluster::start("home").await.expect("home");
    let alpha = SimCluster::start("alpha").await.expect("alpha");
    let beta = SimCluster::start("beta").await.expect("beta");
    capi::put_cluster(&home, NS, "alpha", &alpha, alpha.token()).expect("secret");
    capi::put_cluster(&home, NS, "beta", &beta, beta.token()).expect("secret");
    // Cluster API's CA Secret of alpha carries the same label and type: no cluster, no
    // refusal. A kubeconfig Secret in another namespace is not read.
    argocd::put(
        &home,
        capi::secret(NS, "alpha-ca", "alpha", "not a kubeconfig"),
    )
    .expect("ca");
    argocd::put(
        &home,
        capi::kubeconfig_secret("other", "gamma", &beta.kubeconfig_yaml()),
    )
    .expect("secret");
    let mut on_alpha = JobDriver::create(&alpha, Flavor::Volcano, "ml", "a1").expect("job");
    on_alpha.running().expect("running");
    let mut on_beta = JobDriver::create(&beta, Flavor::Volcano, "ml", "b1").expect("job");
    on_beta.running().expect("running");

    let listen = free_port();
    let dir = folder(&home, listen, false);
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
    assert_eq!(
        clusters,
        ["alpha", "beta"],
        "only the kubeconfig Secrets of {NS}"
    );
    assert_eq!(source(&now)["namespace"], NS);
    assert_eq!(
        source(&now)["label_selector"],
        "cluster.x-k8s.io/cluster-name"
    );
    assert_eq!(source(&now)["clusters"]["alpha"], "fleet/alpha-kubeconfig");
    assert_eq!(source(&now)["clusters"]["beta"], "fleet/beta-kubeconfig");
    assert_eq!(
        source(&now)["refused"],
        serde_json::json!({}),
        "the CA Secret is passed over"
    );
    assert!(
        now.get("cluster_sources")
            .and_then(|s| s.get("argocd"))
            .is_none()
    );
    delivered(&relay, &events, "alpha", "running").await;
    delivered(&relay, &events, "beta", "running").await;
    assert_eq!((starts(&relay, "alpha"), starts(&relay, "beta")), (1, 1));
    let (_, metrics) = http_get(listen, "/metrics").await.expect("metrics");
    for line in [
        "jobrelay_cluster_source_up{source=\"cluster_api\"} 1",
        "jobrelay_cluster_source_clusters{source=\"cluster_api\"} 2",
    ] {
        assert!(metrics.contains(line), "{line} missing:\n{metrics}");
    }

    // The kubeconfig is rotated (a new token): the API server takes the new one, the Secret's
    // value is replaced, the old token is revoked.
    let beta_lists = beta.list_requests_for(&Gvr::VOLCANO_JOB);
    alpha.accept_token("rotated-capi-token-0001");
    capi::put_cluster(&home, NS, "alpha", &alpha, "rotated-capi-token-0001").expect("put");
    restarted(&relay, "alpha", 2).await;
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

    // The Secret is deleted (the Cluster was): its cluster goes, alpha stays as it was.
    home.delete(&Gvr::SECRET, NS, "beta-kubeconfig")
        .expect("delete");
    let now = status_until(&relay, listen, "beta gone", |s| {
        s["clusters"].get("beta").is_none()
    })
    .await;
    assert!(synced(&now, "alpha"), "{now:#?}");
    assert!(source(&now)["clusters"]["beta"].is_null());
    assert_eq!(
        starts(&relay, "alpha"),
        2,
        "alpha untouched by beta's removal"
    );
    // All it asked of the home cluster: lists and watches of the Secrets in their namespace
    // by the label (what the chart's Role grants, and no other Secret), and of the Clusters
    // there — which this home cluster does not serve (an older Cluster API): the clusters
    // run on, the source's status says why their control planes are not read.
    let asked = home.recent_requests();
    assert!(!asked.is_empty());
    for request in &asked {
        let (path, query) = request.uri.split_once('?').unwrap_or((&request.uri, ""));
        assert!(
            request.method == "GET"
                && ((path == "/api/v1/namespaces/fleet/secrets"
                    && query.contains("labelSelector=cluster.x-k8s.io%2Fcluster-name"))
                    || path == "/apis/cluster.x-k8s.io/v1beta2/namespaces/fleet/clusters"),
            "the home cluster was asked {} {}",
            request.method,
            request.uri
        );
    }
    let (_, body) = http_get(listen, "/status").await.expect("status");
    let now: Value = serde_json::from_str(&body).expect("status JSON");
    let why = source(&now)["control_planes_error"]
        .as_str()
        .unwrap_or_default();
    assert!(
        why.contains("404") || why.contains("could not find"),
        "{:#}",
        source(&now)
    );
    let errors = relay.errors();
    assert!(errors.is_empty(), "{errors:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeconfig_that_cannot_work_keeps_the_last_good_and_a_taken_name_is_named() {
    let home = SimCluster::start("home").await.expect("home");
    let alpha = SimCluster::start("alpha").await.expect("alpha");
    let beta = SimCluster::start("beta").await.expect("beta");
    capi::put_cluster(&home, NS, "alpha", &alpha, alpha.token()).expect("secret");
    let mut job = JobDriver::create(&alpha, Flavor::Volcano, "ml", "a1").expect("job");
    job.running().expect("running");
    let listen = free_port();
    let dir = folder(&home, listen, true);
    let events = dir.path().join("out/log/events.jsonl");
    let relay = Relay::start(dir.path(), "run");
    status_until(&relay, listen, "alpha synced", |s| synced(s, "alpha")).await;

    // Rotated into a kubeconfig whose current context is not there (another token in it).
    let broken = alpha
        .kubeconfig_yaml_with_token("half-rotated-token-77")
        .replace(
            "current-context: alpha",
            "current-context: alpha-admin@alpha",
        );
    assert_ne!(
        broken,
        alpha.kubeconfig_yaml_with_token("half-rotated-token-77")
    );
    argocd::put(&home, capi::kubeconfig_secret(NS, "alpha", &broken)).expect("put");
    let key = "fleet/alpha-kubeconfig";
    let now = status_until(&relay, listen, "the Secret refused", |s| {
        source(s)["refused"].get(key).is_some()
    })
    .await;
    let why = source(&now)["refused"][key].as_str().expect("a reason");
    assert!(why.starts_with("data.value: kubeconfig:"), "{why}");
    assert!(why.contains("last good credentials stay"), "{why}");
    assert!(
        now["attention"]
            .as_array()
            .expect("attention")
            .iter()
            .any(|l| l.as_str().is_some_and(
                |l| l.contains("cluster source cluster_api: Secret fleet/alpha-kubeconfig refused")
            )),
        "{now:#?}"
    );
    // Still running on the last good credentials, never restarted.
    job.succeeded().expect("succeeded");
    delivered(&relay, &events, "alpha", "succeeded").await;
    assert_eq!(starts(&relay, "alpha"), 1);
    let (_, metrics) = http_get(listen, "/metrics").await.expect("metrics");
    assert!(
        metrics.contains(
            "jobrelay_cluster_source_refused{source=\"cluster_api\",secret=\"fleet/alpha-kubeconfig\"} 1"
        ),
        "{metrics}"
    );
    let log = relay.log();
    assert!(
        log.lines().any(|l| l.contains("ERROR") && l.contains(key)),
        "{}",
        relay.tail()
    );
    let status_text = now.to_string();
    for token in ["half-rotated-token-77", alpha.token()] {
        assert!(!log.contains(token), "the log shows a token");
        assert!(!status_text.contains(token), "/status shows a token");
        assert!(!metrics.contains(token), "/metrics shows a token");
    }

    // A file names `beta`, then a Cluster API Secret does too: the file's cluster runs, the
    // Secret is refused naming the file.
    let file = dir.path().join("clusters/beta.yaml");
    write(&file, &beta.kubeconfig_yaml());
    status_until(&relay, listen, "beta from its file", |s| synced(s, "beta")).await;
    capi::put_cluster(&home, NS, "beta", &beta, beta.token()).expect("put");
    let now = status_until(&relay, listen, "the file conflict named", |s| {
        source(s)["refused"].get("fleet/beta-kubeconfig").is_some()
    })
    .await;
    let why = source(&now)["refused"]["fleet/beta-kubeconfig"]
        .as_str()
        .expect("a reason");
    assert!(
        why.contains("`beta`") && why.contains(&file.display().to_string()),
        "{why}"
    );
    assert!(source(&now)["clusters"]["beta"].is_null());
    assert_eq!(
        starts(&relay, "beta"),
        1,
        "the file's cluster was not replaced"
    );

    // Argo CD gives `gamma`, and so does a Cluster API Secret: Argo CD's runs, Cluster API's
    // is refused naming Argo CD's Secret.
    argocd::put_cluster(&home, "argocd", "gamma", "gamma", &beta, beta.token()).expect("put");
    capi::put_cluster(&home, NS, "gamma", &beta, beta.token()).expect("put");
    let now = status_until(&relay, listen, "the source conflict named", |s| {
        source(s)["refused"].get("fleet/gamma-kubeconfig").is_some() && synced(s, "gamma")
    })
    .await;
    let why = source(&now)["refused"]["fleet/gamma-kubeconfig"]
        .as_str()
        .expect("a reason");
    assert!(
        why.contains("`gamma`") && why.contains("Secret argocd/gamma of the cluster source argocd"),
        "{why}"
    );
    assert_eq!(
        now["cluster_sources"]["argocd"]["clusters"]["gamma"],
        "argocd/gamma"
    );
    assert!(source(&now)["clusters"]["gamma"].is_null(), "{now:#?}");

    // Fixed with the credentials it had: the refusal goes, and the cluster, whose kubeconfig
    // is its last good one, is not restarted.
    capi::put_cluster(&home, NS, "alpha", &alpha, alpha.token()).expect("put");
    status_until(&relay, listen, "the Secret accepted again", |s| {
        source(s)["refused"].get(key).is_none()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(starts(&relay, "alpha"), 1);

    // `cluster_api` taken out of the main file: its cluster goes, Argo CD's stays unrestarted.
    // (gamma may have started twice: from Cluster API's Secret when its watch was first,
    // then from Argo CD's, which takes the name whichever came first.)
    let gamma_starts = starts(&relay, "gamma");
    let main = dir.path().join("jobrelay.yaml");
    let text = std::fs::read_to_string(&main).expect("main file");
    let (without, _) = text.split_once("  cluster_api:").expect("the source");
    write(&main, without);
    let now = status_until(&relay, listen, "the source's clusters gone", |s| {
        s["clusters"].get("alpha").is_none()
    })
    .await;
    assert!(
        now["cluster_sources"].get("cluster_api").is_none(),
        "{now:#?}"
    );
    assert!(synced(&now, "gamma") && synced(&now, "beta"), "{now:#?}");
    assert_eq!(
        starts(&relay, "gamma"),
        gamma_starts,
        "Argo CD's cluster was not restarted"
    );
}

/// `jobrelay check` reads the Cluster API Secrets once as the daemon does: the cluster of
/// each kubeconfig Secret is checked like a file's, Cluster API's other Secrets are passed
/// over, and a Secret that is no cluster is a problem (exit 1) named by its `namespace/name`
/// and field, its token not shown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_lists_the_cluster_api_secrets_and_names_the_one_refused() {
    let home = SimCluster::start("home").await.expect("home");
    let alpha = SimCluster::start("alpha").await.expect("alpha");
    capi::put_cluster(&home, NS, "alpha", &alpha, alpha.token()).expect("secret");
    argocd::put(&home, capi::secret(NS, "alpha-ca", "alpha", "a CA")).expect("secret");
    let no_server = alpha
        .kubeconfig_yaml_with_token("leaky-capi-token-42")
        .replace(&alpha.url(), "''");
    argocd::put(&home, capi::kubeconfig_secret(NS, "broken", &no_server)).expect("secret");
    let dir = folder(&home, free_port(), false);
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
        "ok    source   cluster_api: 3 Secret(s) in fleet",
        "ok    source   cluster_api Secret fleet/alpha-kubeconfig: cluster alpha",
        "FAIL  source   cluster_api Secret fleet/broken-kubeconfig: data.value: kubeconfig: \
         cluster `alpha` has no `server`",
    ] {
        assert!(report.contains(line), "{line:?} missing:\n{report}");
    }
    assert!(!report.contains("alpha-ca"), "{report}");
    assert!(
        report
            .lines()
            .any(|l| l.starts_with("ok    cluster  alpha")),
        "the Secret's cluster is checked:\n{report}"
    );
    assert!(report.contains("1 problem(s) found"), "{report}");
    for token in ["leaky-capi-token-42", alpha.token()] {
        assert!(!report.contains(token), "{report}");
    }
}

/// A cluster Cluster API is still building — its kubeconfig Secret written, its `Cluster`'s
/// control plane not initialised — fails its health checks without an outage: it stays
/// `connecting`, its `/status` entry quoting the Cluster, and no plugin hears of it. Once the
/// Cluster says the control plane is initialised, the checks it failed are the outage at
/// once; the cluster answering, it comes online.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_still_being_built_is_connecting_not_offline() {
    let home = SimCluster::start("home").await.expect("home");
    capi::register(&home);
    let alpha = SimCluster::start("alpha").await.expect("alpha");
    alpha.outage_hard(true).expect("not up yet");
    capi::put_cluster_object(&home, NS, "alpha", false).expect("cluster");
    capi::put_cluster(&home, NS, "alpha", &alpha, alpha.token()).expect("secret");
    let listen = free_port();
    let dir = folder(&home, listen, false);
    checked_often(dir.path(), 3);
    let events = dir.path().join("out/log/events.jsonl");
    let relay = Relay::start(dir.path(), "run");
    let now = status_until(&relay, listen, "alpha failing its checks", |s| {
        s["clusters"]["alpha"]["failed_checks"].as_u64() >= Some(6)
    })
    .await;
    let entry = &now["clusters"]["alpha"];
    assert_eq!(entry["availability"], "connecting", "{entry:#}");
    assert_eq!(entry["source_says"]["state"], "provisioning", "{entry:#}");
    assert_eq!(
        entry["source_says"]["detail"],
        "Cluster API Cluster fleet/alpha: control plane not initialised yet (phase Provisioning)"
    );
    assert_eq!(source(&now)["control_planes_error"], Value::Null);
    assert!(fleet_told(&events).is_empty(), "{:?}", fleet_told(&events));

    capi::put_cluster_object(&home, NS, "alpha", true).expect("initialised");
    let offline = fleet_until(&relay, &events, 1).await;
    let (kind, summary) = &offline[0];
    assert_eq!(kind, "cluster-offline");
    let failed: u32 = summary
        .strip_prefix("cluster alpha is offline: ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{summary}"));
    assert!(
        failed >= 6,
        "the checks failed while being built count: {summary}"
    );
    assert!(!summary.contains("its source says"), "{summary}");

    alpha.outage_hard(false).expect("up");
    back_online(&relay, listen, &events, "alpha").await;
}
