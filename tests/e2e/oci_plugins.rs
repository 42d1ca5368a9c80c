//! A plugin whose manifest names a component in an OCI registry (`wasm: oci://…@sha256:…`),
//! in the real daemon against a real registry: it is pulled, serves events, reloads when the
//! reference changes, and a reference whose digest the registry does not have is refused
//! while the serving version stays.

use jobrelay::oci::registry::push;
use jobrelay::oci::{OciRef, OciSettings};
use jobrelay_e2e::*;
use jobrelay_testkit::{Flavor, JobDriver, LocalRegistry, SimCluster};
use sha2::Digest;

async fn push_built(registry: &LocalRegistry, built: &str, tag: &str) -> OciRef {
    let settings = OciSettings {
        plain_http: vec![registry.address.clone()],
        ..OciSettings::default()
    };
    let wasm = std::fs::read(built_wasm(built)).expect("built component");
    push(&settings, &registry.address, "plugins/log", tag, &wasm)
        .await
        .expect("pushed")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_component_is_pulled_served_and_reloaded_by_reference() {
    init_logs();
    let registry = LocalRegistry::start();
    let v1 = push_built(&registry, "event-log", "v1").await;
    let v2 = push_built(&registry, "noop", "v2").await;
    let sim = SimCluster::start("east").await.expect("simulator");
    let setup = Setup::new(&format!(
        "kinds: [{{name: volcano-job}}]\noci: {{plain_http: [\"{}\"]}}\n",
        registry.address
    ));
    let manifest = |reference: &str| {
        Setup::log_manifest(reference, "log", "events.jsonl", "delivery: transitions\n")
    };
    setup.write_manifest("log", &manifest(&v1.to_string()));
    setup.add_cluster(&sim);
    let daemon = jobrelay::daemon::Daemon::start(setup.config_dir())
        .await
        .expect("daemon starts");
    wait_synced(&daemon, "east").await;
    wait_plugin_serving(&daemon, "log").await;

    let mut job = JobDriver::builder(Flavor::Volcano, "ml", "from-oci")
        .create(&sim)
        .expect("job");
    job.running().expect("running");
    let uid = job.uid().to_string();
    wait_for("the pulled plugin's first line", || {
        setup
            .lines("log/events.jsonl")
            .iter()
            .any(|line| line["uid"] == uid.as_str())
            .then_some(())
    })
    .await;

    // Another reference: the plugin reloads to the other component.
    setup.write_manifest("log", &manifest(&v2.to_string()));
    wait_for("the version pinned by v2 serving", || {
        let status = daemon.plugins().get("log").cloned()?;
        (status.serving_oci.as_deref() == Some(v2.to_string().as_str())).then_some(())
    })
    .await;

    // A digest the registry does not have: refused (not retried), v2 keeps serving.
    let mut wrong = v2.clone();
    let last = wrong.digest_hex.pop().expect("a digit");
    wrong.digest_hex.push(if last == '0' { '1' } else { '0' });
    setup.write_manifest("log", &manifest(&wrong.to_string()));
    let error = wait_for("the wrong digest refused", || {
        let status = daemon.plugins().get("log").cloned()?;
        let last = status.last_reload?;
        (!last.ok).then_some(last.error.unwrap_or_default())
    })
    .await;
    assert!(
        error.contains("no manifest with the pinned digest"),
        "{error}"
    );
    let status = daemon.plugins().get("log").cloned().expect("status");
    assert_eq!(status.serving_oci.as_deref(), Some(v2.to_string().as_str()));
    // The component's own sha256, as for a file.
    let noop = std::fs::read(built_wasm("noop")).expect("built component");
    assert_eq!(
        status.serving_wasm_sha256.as_deref(),
        Some(hex::encode(sha2::Sha256::digest(&noop)).as_str())
    );
    assert!(
        status.waiting.is_none(),
        "a refusal is not retried: {:?}",
        status.waiting
    );
    daemon.shutdown(std::time::Duration::from_secs(10)).await;
}
