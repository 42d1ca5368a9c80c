//! The `job` capability in the daemon, against the simulator: a plugin writes annotations and
//! labels to the job it handles under its granted prefixes — and everything else it tries is
//! refused: another prefix, Kubernetes' own, a 1 MiB value, ten thousand writes in one call,
//! and a write for a job that was deleted and re-created under the same name meanwhile.

use std::time::Duration;

use jobrelay::daemon::Daemon;
use jobrelay_e2e::*;
use jobrelay_testkit::{Flavor, Gvr, JobDriver, SimCluster};

fn outcomes(setup: &Setup, uid: &str) -> Vec<String> {
    std::fs::read_to_string(setup.path("out/probe/job-writes.txt"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("{uid} ")).map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_writes_only_its_own_job_under_its_prefixes() {
    init_logs();
    let sim = SimCluster::start("alpha").await.expect("sim");
    let setup = Setup::new("kinds: [{name: volcano-job}]\n");
    setup.install_wasm("probe", "probe.wasm");
    setup.write_manifest(
        "probe",
        "wasm: probe.wasm\ndelivery: transitions\ntimeout_ms: 20000\n\
         retry: {max_attempts: 1}\n\
         grants:\n  filesystem:\n    - {host: out/probe, guest: /data, writable: true}\n\
         \x20 job:\n    annotations: [\"archive.jobrelay.io/\"]\n    labels: [\"jobrelay.io/\"]\n",
    );
    setup.add_cluster(&sim);
    let daemon = Daemon::start(setup.config_dir())
        .await
        .expect("daemon starts");
    wait_synced(&daemon, "alpha").await;

    let writes = "annotate archive.jobrelay.io/logs east/ml/manifest.json\n\
                  label jobrelay.io/archived yes\n\
                  annotate other.example.com/owner me\n\
                  annotate kubernetes.io/change-cause me\n\
                  label archive.jobrelay.io/x y\n\
                  annotate-big archive.jobrelay.io/big 1048576\n\
                  label jobrelay.io/bad not a value!\n\
                  flood 10000\n";
    let job = JobDriver::builder(Flavor::Volcano, "ml", "writer")
        .label("jobrelay.test/behave", "job-writes")
        .annotation("jobrelay.test/writes", writes)
        .create(&sim)
        .expect("create");
    let uid = job.uid().to_string();
    let got = wait_for("the writer's outcomes", || {
        let got = outcomes(&setup, &uid);
        (got.len() >= 8).then_some(got)
    })
    .await;
    assert_eq!(
        &got[..8],
        [
            "ok",
            "ok",
            "denied",
            "denied",
            "denied",
            "invalid",
            "invalid",
            // Two writes and the refused ones spent nothing of the call's eight; six are left.
            "flood denied=9994 ok=6",
        ],
        "{got:?}"
    );
    let obj = sim.get(&Gvr::VOLCANO_JOB, "ml", "writer").expect("the job");
    let annotations = obj["metadata"]["annotations"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let labels = obj["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        annotations["archive.jobrelay.io/logs"],
        "east/ml/manifest.json"
    );
    assert_eq!(labels["jobrelay.io/archived"], "yes");
    assert!(
        !annotations.contains_key("other.example.com/owner"),
        "{annotations:?}"
    );
    assert!(!annotations.contains_key("kubernetes.io/change-cause"));
    assert!(!annotations.contains_key("archive.jobrelay.io/big"));
    let flooded = labels
        .keys()
        .filter(|k| k.starts_with("jobrelay.io/flood-"))
        .count();
    assert_eq!(flooded, 6, "the call's write limit held: {labels:?}");
    let refusals = daemon.plugins()["probe"].refusals.clone();
    assert_eq!(
        refusals.get("job_writes"),
        Some(&(3 + 2 + 9994)),
        "{refusals:?}"
    );

    // A job deleted and re-created under the same name while its old event is being handled:
    // the old event's write carries the old uid and is refused, the new job is untouched.
    let old = JobDriver::builder(Flavor::Volcano, "ml", "again")
        .label("jobrelay.test/behave", "job-writes")
        .annotation(
            "jobrelay.test/writes",
            "sleep 3000\nannotate archive.jobrelay.io/logs old\n",
        )
        .create(&sim)
        .expect("create");
    let old_uid = old.uid().to_string();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let mut old = old;
    old.delete().expect("delete");
    let new = JobDriver::builder(Flavor::Volcano, "ml", "again")
        .create(&sim)
        .expect("re-create");
    assert_ne!(new.uid(), old_uid);
    let got = wait_for("the old event's write", || {
        let got = outcomes(&setup, &old_uid);
        (!got.is_empty()).then_some(got)
    })
    .await;
    // (Its deletion event, handled after it, tries the same and is refused the same way.)
    assert!(
        got.iter().all(|o| o == "gone"),
        "the old uid's write is refused: {got:?}"
    );
    let obj = sim
        .get(&Gvr::VOLCANO_JOB, "ml", "again")
        .expect("the new job");
    assert_eq!(obj["metadata"]["uid"], new.uid());
    assert!(
        obj["metadata"]["annotations"]
            .get("archive.jobrelay.io/logs")
            .is_none(),
        "the new job is untouched: {obj}"
    );
    daemon.shutdown(Duration::from_secs(10)).await;
}
