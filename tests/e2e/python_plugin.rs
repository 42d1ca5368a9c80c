//! `job-snapshot`, the plugin written in Python, in the real daemon: the component
//! componentize-py built from `plugins/job-snapshot/app.py` is loaded like the Rust ones (same
//! compile, link and grant checks), handles the lifecycles of jobs on the simulator, and
//! writes one document per finished job through the archive grant and remembers it in kv.

use std::time::Duration;

use jobrelay_e2e::*;
use jobrelay_testkit::{Flavor, JobDriver, SimCluster};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_plugin_snapshots_finished_jobs() {
    init_logs();
    let sim = SimCluster::start("east").await.expect("simulator");
    let setup = Setup::new(
        "kinds: [{name: volcano-job}, {name: pytorch-job}]\narchive: {local: archive}\n",
    );
    setup.install_wasm("job-snapshot", "job-snapshot.wasm");
    setup.write_manifest(
        "job-snapshot",
        "wasm: job-snapshot.wasm\ndelivery: transitions\ntimeout_ms: 10000\nmemory_mb: 64\n\
         grants: {archive: {}, kv: true}\nconfig: {phases: \"failed,succeeded\"}\n",
    );
    setup.add_cluster(&sim);
    let daemon = jobrelay::daemon::Daemon::start(setup.config_dir())
        .await
        .expect("daemon starts");
    wait_synced(&daemon, "east").await;
    wait_plugin_serving(&daemon, "job-snapshot").await;

    let mut failed = JobDriver::builder(Flavor::Volcano, "ml", "py-failed")
        .workers(2)
        .create(&sim)
        .expect("job");
    failed.running().expect("running");
    failed.failed("OOMKilled").expect("failed");
    let mut done = JobDriver::builder(Flavor::PyTorch, "ml", "py-done")
        .workers(1)
        .create(&sim)
        .expect("job");
    done.running().expect("running");
    done.succeeded().expect("succeeded");

    let document = |job: &JobDriver, phase: &str| -> Option<Value> {
        let path = setup.path(&format!(
            "archive/job-snapshot/east/ml/{}/{}/{phase}.json",
            job.name(),
            job.uid()
        ));
        let text = std::fs::read_to_string(path).ok()?;
        serde_json::from_str(&text).ok()
    };
    let failed_doc = wait_for("the failed job's snapshot", || document(&failed, "failed")).await;
    let done_doc = wait_for("the succeeded job's snapshot", || {
        document(&done, "succeeded")
    })
    .await;
    assert_eq!(failed_doc["previous_phase"], "running");
    assert_eq!(failed_doc["uid"], failed.uid());
    assert_eq!(
        failed_doc["object"]["metadata"]["name"], "py-failed",
        "the job's whole object is kept"
    );
    assert!(failed_doc["object"]["status"].is_object(), "{failed_doc}");
    assert_eq!(done_doc["kind"], "PyTorchJob");

    // Nothing for phases the config does not name; one document per finished job.
    let job_dir = |job: &JobDriver| {
        setup.path(&format!(
            "archive/job-snapshot/east/ml/{}/{}",
            job.name(),
            job.uid()
        ))
    };
    let files = |job: &JobDriver| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(job_dir(job))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    // A moment for anything written twice to show (the jobs have no events after their end).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(files(&failed), ["failed.json"]);
    assert_eq!(files(&done), ["succeeded.json"]);
    daemon.shutdown(Duration::from_secs(10)).await;
}
