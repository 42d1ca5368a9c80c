//! Clusters from SIG-Multicluster ClusterProfiles on the home cluster
//! (`cluster_sources.cluster_profile`) with an access-provider file, as a cluster manager's
//! edits reach them: the real binary reads the profiles through the home cluster's API (a
//! simulator serving the ClusterProfile CRD, over HTTP), runs the provider's exec plugin (a
//! script written here) for the credential, and watches jobs on two other simulated
//! clusters; an event-log plugin shows what was delivered.
//!
//! Asserted: the clusters appear from the profiles of the namespace (one in another namespace
//! is not read), reached only with the plugin's token (the clusters' own are revoked) and the
//! plugin given each cluster's server in `KUBERNETES_EXEC_INFO`; a profile whose access
//! provider moves to a new server restarts that cluster alone, without a repeat; a deleted
//! profile takes its cluster away; a profile whose providers the file does not know, or
//! without a server, keeps the last good and is named in `/status`, the metrics, the log;
//! a cluster name a file or the Argo CD source gives is refused naming both; and `jobrelay
//! check` reads the profiles as the daemon does.

use std::path::Path;

use jobrelay_testkit::{Flavor, Gvr, JobDriver, SimCluster, argocd, cluster_profile};
use serde_json::{Value, json};

use crate::cluster_sources::{
    back_online, checked_often, delivered, fleet_until, free_port, restarted, starts, status_until,
    synced,
};
use crate::process::{Relay, count_ids, http_get, read_lines, write};

const NS: &str = "inventory";
const PROVIDER: &str = "kit-token";
const TOKEN: &str = "profile-plugin-token-31";

/// The Argo CD test's config folder, reading the ClusterProfiles of `inventory` instead (and
/// Argo CD's Secrets too with `with_argocd`), with the exec plugin and its provider file.
fn folder(home: &SimCluster, listen: std::net::SocketAddr, with_argocd: bool) -> tempfile::TempDir {
    let dir = crate::cluster_sources::folder(home, listen);
    let root = dir.path();
    let plugin = root.join("kit-token.sh");
    cluster_profile::write_exec_plugin(&plugin, TOKEN, &root.join("plugin-calls"), true)
        .expect("plugin");
    write(
        &root.join("providers.json"),
        &cluster_profile::provider_file(PROVIDER, &plugin, true),
    );
    let main = root.join("jobrelay.yaml");
    let text = std::fs::read_to_string(&main).expect("main file");
    let argocd = if with_argocd { "  argocd: {}\n" } else { "" };
    let text = text.replace(
        "  argocd: {}\n",
        &format!(
            "{argocd}  cluster_profile:\n    namespace: {NS}\n    access_providers: providers.json\n"
        ),
    );
    write(&main, &text);
    dir
}

fn source(status: &Value) -> &Value {
    &status["cluster_sources"]["cluster_profile"]
}

/// A simulated cluster that takes only the plugin's token.
async fn cluster(name: &str) -> SimCluster {
    let sim = SimCluster::start(name).await.expect("cluster");
    sim.accept_token(TOKEN);
    sim.revoke_token(sim.token());
    sim
}

fn calls(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("plugin-calls")).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_profiles_add_run_the_plugin_restart_alone_and_remove_clusters_live() {
    let home = SimCluster::start("home").await.expect("home");
    cluster_profile::register(&home);
    let alpha = cluster("alpha").await;
    let beta = cluster("beta").await;
    cluster_profile::put_cluster(&home, NS, "alpha", PROVIDER, &alpha).expect("profile");
    cluster_profile::put_cluster(&home, NS, "beta", PROVIDER, &beta).expect("profile");
    cluster_profile::put_cluster(&home, "other", "gamma", PROVIDER, &beta).expect("profile");
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
    assert_eq!(clusters, ["alpha", "beta"], "only the profiles of {NS}");
    assert_eq!(source(&now)["namespace"], NS);
    assert_eq!(source(&now)["clusters"]["alpha"], "inventory/alpha");
    assert_eq!(source(&now)["clusters"]["beta"], "inventory/beta");
    assert_eq!(source(&now)["refused"], json!({}));
    // Reached with the plugin's token alone, the plugin told each cluster's server.
    let ran = calls(dir.path());
    for sim in [&alpha, &beta] {
        assert!(
            ran.lines().any(|l| l == sim.url()),
            "the plugin was not given {}: {ran:?}",
            sim.url()
        );
    }
    assert!(!ran.lines().any(|l| l == "none"), "{ran:?}");
    delivered(&relay, &events, "alpha", "running").await;
    delivered(&relay, &events, "beta", "running").await;
    assert_eq!((starts(&relay, "alpha"), starts(&relay, "beta")), (1, 1));
    let (_, metrics) = http_get(listen, "/metrics").await.expect("metrics");
    for line in [
        "jobrelay_cluster_source_up{source=\"cluster_profile\"} 1",
        "jobrelay_cluster_source_clusters{source=\"cluster_profile\"} 2",
    ] {
        assert!(metrics.contains(line), "{line} missing:\n{metrics}");
    }

    // The manager moves alpha's access provider to another server address (same API server,
    // a new URL): alpha alone restarts, from its cursors.
    let beta_lists = beta.list_requests_for(&Gvr::VOLCANO_JOB);
    let moved = alpha.url().replace("127.0.0.1", "localhost");
    cluster_profile::put(
        &home,
        cluster_profile::profile(
            NS,
            "alpha",
            json!([cluster_profile::access(PROVIDER, &moved)]),
        ),
    )
    .expect("put");
    restarted(&relay, "alpha", 2).await;
    on_alpha.succeeded().expect("succeeded");
    delivered(&relay, &events, "alpha", "succeeded").await;
    on_beta.succeeded().expect("succeeded");
    delivered(&relay, &events, "beta", "succeeded").await;
    assert!(
        calls(dir.path()).lines().any(|l| l == moved),
        "the plugin was given the new server"
    );
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

    // The profile is deleted (the cluster left the inventory): its cluster goes.
    home.delete(&cluster_profile::GVR, NS, "beta")
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
    // All it asked of the home cluster: lists and watches of the profiles in the namespace.
    let asked = home.recent_requests();
    assert!(!asked.is_empty());
    for request in &asked {
        let path = request
            .uri
            .split_once('?')
            .map_or(request.uri.as_str(), |(p, _)| p);
        assert!(
            request.method == "GET"
                && path
                    == "/apis/multicluster.x-k8s.io/v1alpha1/namespaces/inventory/clusterprofiles",
            "the home cluster was asked {} {}",
            request.method,
            request.uri
        );
    }
    let errors = relay.errors();
    assert!(errors.is_empty(), "{errors:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_without_a_known_provider_keeps_the_last_good_and_a_taken_name_is_named() {
    let home = SimCluster::start("home").await.expect("home");
    cluster_profile::register(&home);
    let alpha = cluster("alpha").await;
    let beta = SimCluster::start("beta").await.expect("beta");
    beta.accept_token(TOKEN);
    cluster_profile::put_cluster(&home, NS, "alpha", PROVIDER, &alpha).expect("profile");
    let mut job = JobDriver::create(&alpha, Flavor::Volcano, "ml", "a1").expect("job");
    job.running().expect("running");
    let listen = free_port();
    let dir = folder(&home, listen, true);
    let events = dir.path().join("out/log/events.jsonl");
    let relay = Relay::start(dir.path(), "run");
    status_until(&relay, listen, "alpha synced", |s| synced(s, "alpha")).await;

    // The manager offers only a provider this consumer's file does not have.
    cluster_profile::put(
        &home,
        cluster_profile::profile(
            NS,
            "alpha",
            json!([cluster_profile::access("gke", &beta.url())]),
        ),
    )
    .expect("put");
    let key = "inventory/alpha";
    let now = status_until(&relay, listen, "the profile refused", |s| {
        source(s)["refused"].get(key).is_some()
    })
    .await;
    let why = source(&now)["refused"][key].as_str().expect("a reason");
    assert!(
        why.starts_with(
            "status.accessProviders: none of [gke] is a provider of the access-provider file \
             (it has [kit-token])"
        ) && why.contains("last good credentials stay"),
        "{why}"
    );
    assert!(
        now["attention"]
            .as_array()
            .expect("attention")
            .iter()
            .any(|l| l.as_str().is_some_and(|l| l.contains(
                "cluster source cluster_profile: ClusterProfile inventory/alpha refused"
            ))),
        "{now:#?}"
    );
    job.succeeded().expect("succeeded");
    delivered(&relay, &events, "alpha", "succeeded").await;
    assert_eq!(
        starts(&relay, "alpha"),
        1,
        "kept on its last good, never restarted"
    );
    let (_, metrics) = http_get(listen, "/metrics").await.expect("metrics");
    assert!(
        metrics.contains(
            "jobrelay_cluster_source_refused{source=\"cluster_profile\",secret=\"inventory/alpha\"} 1"
        ),
        "{metrics}"
    );
    assert!(
        relay
            .log()
            .lines()
            .any(|l| l.contains("ERROR") && l.contains(key)),
        "{}",
        relay.tail()
    );
    // Then a known provider without a server: refused naming the field.
    cluster_profile::put(
        &home,
        cluster_profile::profile(NS, "alpha", json!([{ "name": PROVIDER, "cluster": {} }])),
    )
    .expect("put");
    let now = status_until(&relay, listen, "no server named", |s| {
        source(s)["refused"][key]
            .as_str()
            .is_some_and(|w| w.starts_with("status.accessProviders[name=kit-token].cluster.server"))
    })
    .await;
    assert!(synced(&now, "alpha"), "{now:#?}");
    let text = format!("{now}{metrics}{}", relay.log());
    assert!(!text.contains(TOKEN), "a token shown");

    // A file names `beta`, then a profile does too: the file's cluster runs, the profile is
    // refused naming the file.
    let file = dir.path().join("clusters/beta.yaml");
    write(&file, &beta.kubeconfig_yaml());
    status_until(&relay, listen, "beta from its file", |s| synced(s, "beta")).await;
    cluster_profile::put_cluster(&home, NS, "beta", PROVIDER, &beta).expect("put");
    let now = status_until(&relay, listen, "the file conflict named", |s| {
        source(s)["refused"].get("inventory/beta").is_some()
    })
    .await;
    let why = source(&now)["refused"]["inventory/beta"]
        .as_str()
        .expect("a reason");
    assert!(
        why.contains("`beta`") && why.contains(&file.display().to_string()),
        "{why}"
    );
    assert_eq!(
        starts(&relay, "beta"),
        1,
        "the file's cluster was not replaced"
    );

    // Argo CD gives `gamma`, and so does a profile: Argo CD's runs, the profile is refused
    // naming Argo CD's Secret.
    argocd::put_cluster(&home, "argocd", "gamma", "gamma", &beta, beta.token()).expect("put");
    cluster_profile::put_cluster(&home, NS, "gamma", PROVIDER, &beta).expect("put");
    let now = status_until(&relay, listen, "the source conflict named", |s| {
        source(s)["refused"].get("inventory/gamma").is_some() && synced(s, "gamma")
    })
    .await;
    let why = source(&now)["refused"]["inventory/gamma"]
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
}

/// `jobrelay check` reads the ClusterProfiles once as the daemon does: each profile's cluster
/// is checked like a file's (the plugin run for its token), and a profile that is no cluster
/// is a problem (exit 1) named by its `namespace/name` and field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_lists_the_cluster_profiles_and_names_the_one_refused() {
    let home = SimCluster::start("home").await.expect("home");
    cluster_profile::register(&home);
    let alpha = cluster("alpha").await;
    cluster_profile::put_cluster(&home, NS, "alpha", PROVIDER, &alpha).expect("profile");
    cluster_profile::put(
        &home,
        cluster_profile::profile(
            NS,
            "broken",
            json!([cluster_profile::access("gke", "https://x")]),
        ),
    )
    .expect("profile");
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
        "ok    source   cluster_profile: 2 ClusterProfile(s) in inventory",
        "ok    source   cluster_profile ClusterProfile inventory/alpha: cluster alpha",
        "FAIL  source   cluster_profile ClusterProfile inventory/broken: status.accessProviders: \
         none of [gke]",
    ] {
        assert!(report.contains(line), "{line:?} missing:\n{report}");
    }
    assert!(
        report
            .lines()
            .any(|l| l.starts_with("ok    cluster  alpha")),
        "the profile's cluster is checked with the plugin's token:\n{report}"
    );
    assert!(!report.contains(TOKEN), "{report}");
}

/// A manager that reports the control plane unhealthy (`ControlPlaneHealthy` False) feeds
/// the cluster's availability, without restarting it: while the cluster answers it is
/// `degraded`, its `/status` entry quoting the manager; one failed check is then the outage
/// (here 20 would be needed otherwise), told to the plugins with the manager's words; the
/// manager healthy again and the cluster answering, it is back online.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_plane_reported_unhealthy_feeds_the_clusters_availability() {
    let home = SimCluster::start("home").await.expect("home");
    cluster_profile::register(&home);
    let alpha = cluster("alpha").await;
    cluster_profile::put_cluster(&home, NS, "alpha", PROVIDER, &alpha).expect("profile");
    let listen = free_port();
    let dir = folder(&home, listen, false);
    checked_often(dir.path(), 20);
    let events = dir.path().join("out/log/events.jsonl");
    let relay = Relay::start(dir.path(), "run");
    status_until(&relay, listen, "alpha online", |s| {
        s["clusters"]["alpha"]["availability"] == "online"
    })
    .await;

    let with_health = |status: &str, reason: &str| {
        let mut object = cluster_profile::profile(
            NS,
            "alpha",
            json!([cluster_profile::access(PROVIDER, &alpha.url())]),
        );
        object["status"]["conditions"][0]["status"] = json!(status);
        object["status"]["conditions"][0]["reason"] = json!(reason);
        object["status"]["conditions"][0]["message"] = json!("2 of 3 control plane nodes down");
        object
    };
    cluster_profile::put(&home, with_health("False", "ApiServerDown")).expect("put");
    let said = "ClusterProfile inventory/alpha: ControlPlaneHealthy is False (ApiServerDown): 2 \
                of 3 control plane nodes down";
    let now = status_until(&relay, listen, "alpha degraded by its source", |s| {
        s["clusters"]["alpha"]["availability"] == "degraded"
    })
    .await;
    let entry = &now["clusters"]["alpha"];
    assert_eq!(entry["source_says"]["state"], "unhealthy", "{entry:#}");
    assert_eq!(entry["source_says"]["detail"], said);
    assert_eq!(entry["failed_checks"], 0, "it answers: {entry:#}");
    assert_eq!(starts(&relay, "alpha"), 1, "a condition restarts nothing");

    alpha.outage_hard(true).expect("outage");
    let offline = fleet_until(&relay, &events, 1).await;
    assert_eq!(offline.len(), 1, "{offline:?}");
    let (kind, summary) = &offline[0];
    assert_eq!(kind, "cluster-offline");
    assert!(
        summary.starts_with("cluster alpha is offline: 1 health checks failed in a row"),
        "offline at the first failed check: {summary}"
    );
    assert!(
        summary.ends_with(&format!("; its source says: {said}")),
        "{summary}"
    );

    cluster_profile::put(&home, with_health("True", "Healthy")).expect("put");
    alpha.outage_hard(false).expect("back");
    back_online(&relay, listen, &events, "alpha").await;
    assert_eq!(starts(&relay, "alpha"), 1);
}

/// An edit of the access-provider file alone — the main file untouched — is followed: a
/// provider moved to another plugin restarts the clusters it reaches, on the new plugin's
/// credential; a provider file edited into one that cannot be read is refused naming it,
/// and the clusters run on with the last good providers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_of_the_provider_file_alone_is_followed_and_a_bad_one_refused() {
    let home = SimCluster::start("home").await.expect("home");
    cluster_profile::register(&home);
    let alpha = cluster("alpha").await;
    cluster_profile::put_cluster(&home, NS, "alpha", PROVIDER, &alpha).expect("profile");
    let mut job = JobDriver::create(&alpha, Flavor::Volcano, "ml", "a1").expect("job");
    job.running().expect("running");
    let listen = free_port();
    let dir = folder(&home, listen, false);
    let root = dir.path();
    let events = root.join("out/log/events.jsonl");
    let relay = Relay::start(root, "run");
    status_until(&relay, listen, "alpha synced", |s| synced(s, "alpha")).await;
    delivered(&relay, &events, "alpha", "running").await;

    // Another plugin, another token: the cluster takes only the new one once it is in use.
    let second = root.join("kit-token-2.sh");
    let rotated = "profile-plugin-token-rotated-77";
    cluster_profile::write_exec_plugin(&second, rotated, &root.join("second-calls"), true)
        .expect("plugin");
    alpha.accept_token(rotated);
    write(
        &root.join("providers.json"),
        &cluster_profile::provider_file(PROVIDER, &second, true),
    );
    restarted(&relay, "alpha", 2).await;
    alpha.revoke_token(TOKEN);
    job.succeeded().expect("succeeded");
    delivered(&relay, &events, "alpha", "succeeded").await;
    let second_calls = std::fs::read_to_string(root.join("second-calls")).unwrap_or_default();
    assert!(
        second_calls.lines().any(|l| l == alpha.url()),
        "the new plugin gave the credential: {second_calls:?}"
    );

    write(&root.join("providers.json"), "{ not a provider file");
    let main_key = root.join("jobrelay.yaml").display().to_string();
    let now = status_until(&relay, listen, "the provider file refused", |s| {
        s["problems"][&main_key]
            .as_str()
            .is_some_and(|why| why.contains("providers.json"))
    })
    .await;
    let why = now["problems"][&main_key].as_str().unwrap_or_default();
    assert!(
        why.contains("cluster_sources.cluster_profile.access_providers"),
        "{why}"
    );
    assert!(synced(&now, "alpha"), "{now:#}");
    assert_eq!(starts(&relay, "alpha"), 2, "the last good providers stay");
    let errors = relay.errors();
    assert!(
        errors.iter().all(|e| e.contains("config file refused")),
        "{errors:#?}"
    );
}
