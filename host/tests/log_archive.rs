//! The `log-archive` plugin end to end on the capability side: real pod logs from the test
//! kit's Kubernetes API simulator through the real kube client, real wasmtime, the local
//! archive store and the kv store in a real state file.

use crate::common;

use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use common::{event, runtime, spec};
use jobrelay::clusters::supervisor::build_client;
use jobrelay_capabilities::Grants;
use jobrelay_capabilities::Services;
use jobrelay_capabilities::archive::ArchiveGrant;
use jobrelay_capabilities::archive::ArchiveLocation;
use jobrelay_capabilities::archive::ArchiveStore;
use jobrelay_capabilities::pod_logs::ClusterDirectory;
use jobrelay_capabilities::pod_logs::PodLogsGrant;
use jobrelay_contract::event::{JobEvent, Phase};
use jobrelay_runtime::{PluginVersion, Runtime};
use jobrelay_state::{PluginKv, SqliteStore};
use jobrelay_testkit::{Flavor, JobDriver, SimCluster};
use jobrelay_watch::kinds::JobKind;
use kube::config::Kubeconfig;
use serde_json::Value;
use sha2::Digest;

struct Setup {
    sim: SimCluster,
    archive_root: tempfile::TempDir,
    _state: tempfile::TempDir,
    rt: Runtime,
}

async fn setup() -> Setup {
    let sim = SimCluster::start("east").await.expect("simulator");
    let kubeconfig = Kubeconfig::from_yaml(&sim.kubeconfig_yaml()).expect("kubeconfig");
    let client = build_client(&kubeconfig, None).await.expect("client");
    let directory = ClusterDirectory::default();
    directory.set_client("east", client);
    let kinds: Vec<JobKind> = ["volcano-job", "pytorch-job"]
        .iter()
        .filter_map(|k| JobKind::builtin(k))
        .collect();
    directory.set_kinds(&kinds);
    let archive_root = tempfile::tempdir().expect("tempdir");
    let state = tempfile::tempdir().expect("tempdir");
    let kv: Arc<dyn PluginKv> = Arc::new(
        SqliteStore::open(&state.path().join("state.db"))
            .await
            .expect("state file"),
    );
    let services = Services {
        kv: Some(kv),
        archive: Some(
            ArchiveStore::open(&ArchiveLocation::Local(archive_root.path().to_path_buf()))
                .expect("archive"),
        ),
        clusters: directory,
        ..Services::default()
    };
    Setup {
        sim,
        archive_root,
        _state: state,
        rt: runtime(services),
    }
}

fn grants(max_log_bytes: u64) -> Grants {
    Grants {
        pod_logs: Some(PodLogsGrant {
            max_bytes_per_container: Some(max_log_bytes),
        }),
        archive: Some(ArchiveGrant::default()),
        kv: true,
        ..Grants::default()
    }
}

async fn load(rt: &Runtime, max_log_bytes: u64) -> Arc<PluginVersion> {
    rt.load(spec(
        "log-archive",
        "log-archive",
        &[],
        grants(max_log_bytes),
    ))
    .await
    .expect("log-archive loads")
}

/// The event of `job` in `phase`, as the watcher would build it.
fn job_event(job: &JobDriver, flavor_api: &str, kind: &str, phase: Phase, rv: &str) -> JobEvent {
    let mut e = event(
        job.uid(),
        rv,
        phase,
        Some(Phase::Running),
        "2026-11-21T11:00:00Z",
    );
    e.api_version = flavor_api.into();
    e.kind = kind.into();
    e.namespace = job.namespace().into();
    e.name = job.name().into();
    e
}

fn gunzip(path: &Path) -> Vec<u8> {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(file)
        .read_to_end(&mut out)
        .expect("valid gzip");
    out
}

fn manifest(root: &Path, uid: &str) -> Value {
    let path = root.join(format!("log-archive/east/ml/{uid}/manifest.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("manifest is JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pod_and_container_is_archived_with_a_manifest() {
    let s = setup().await;
    let mut job = JobDriver::builder(Flavor::Volcano, "ml", "train")
        .workers(2)
        .create(&s.sim)
        .expect("job");
    job.running().expect("running");
    job.restarting().expect("restarting"); // the first pod gets a previous instance
    job.running().expect("running again");
    job.succeeded().expect("succeeded");
    let pods = job.pods().to_vec();
    // Logs of every kind: plain text, bytes that are not UTF-8, and one far over the cap.
    let mut expected = std::collections::BTreeMap::new();
    for (i, pod) in pods.iter().enumerate() {
        let log: Vec<u8> = match i {
            0 => b"step 1 loss=0.9\nstep 2 loss=0.5\n".to_vec(),
            1 => vec![0xff, 0xfe, b'\n', 0x80, b'o', b'k', b'\n'],
            _ => (0..3_000_000u32).map(|n| b'a' + (n % 26) as u8).collect(),
        };
        job.set_log(&pod.name, false, log.clone()).expect("log");
        expected.insert(pod.name.clone(), log);
    }
    let previous = s
        .sim
        .pod_log("ml", &pods[0].name, &pods[0].container, true)
        .expect("the restart left a previous log");

    let cap = 1 << 20;
    let plugin = load(&s.rt, cap).await;
    let succeeded = job_event(
        &job,
        "batch.volcano.sh/v1alpha1",
        "Job",
        Phase::Succeeded,
        "50",
    );
    plugin.handle(&succeeded).await.expect("archived");

    let root = s.archive_root.path();
    let dir = root.join(format!("log-archive/east/ml/{}", job.uid()));
    let m = manifest(root, job.uid());
    assert_eq!(m["phase"], "succeeded");
    assert_eq!(m["no_pods"], false);
    let listed: Vec<&str> = m["pods"]
        .as_array()
        .expect("pods")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    let mut names: Vec<&str> = pods.iter().map(|p| p.name.as_str()).collect();
    names.sort();
    assert_eq!(listed, names, "every pod of the job, sorted");

    for pod in &m["pods"].as_array().expect("pods").clone() {
        let name = pod["name"].as_str().expect("name");
        let info = pods.iter().find(|p| p.name == name).expect("known pod");
        let container = &pod["containers"][0];
        assert_eq!(container["name"], info.container.as_str());
        let current = &container["logs"][0];
        let stored = gunzip(&dir.join(format!("{name}/{}.log.gz", info.container)));
        let want = &expected[name];
        if want.len() as u64 > cap {
            assert_eq!(current["truncated"], true, "{name}");
            assert_eq!(
                stored,
                want[..cap as usize],
                "cut at the cap, nothing else lost"
            );
        } else {
            assert_eq!(current["truncated"], false, "{name}");
            assert_eq!(&stored, want, "{name}: the log byte for byte");
        }
        assert_eq!(current["bytes"], stored.len() as u64);
        let sha = hex::encode(sha2::Sha256::digest(&stored));
        assert_eq!(current["sha256"], sha.as_str());
    }
    let first = &m["pods"]
        .as_array()
        .expect("pods")
        .iter()
        .find(|p| p["name"] == pods[0].name.as_str())
        .expect("first pod")["containers"][0];
    assert!(first["restart_count"].as_u64().unwrap_or(0) >= 1, "{first}");
    assert_eq!(first["logs"][1]["previous"], true);
    let stored_previous = gunzip(&dir.join(format!(
        "{}/{}.previous.log.gz",
        pods[0].name, pods[0].container
    )));
    assert_eq!(
        stored_previous,
        previous.to_vec(),
        "the previous instance's log"
    );

    // A re-delivery rewrites the same keys with the same content.
    let before: Vec<String> = walk(&dir);
    plugin.handle(&succeeded).await.expect("re-delivered");
    assert_eq!(walk(&dir), before, "same keys");
    assert_eq!(
        gunzip(&dir.join(format!("{}/{}.log.gz", pods[0].name, pods[0].container))),
        expected[&pods[0].name]
    );

    // The deletion that follows leaves the finished job's archive alone (kv remembers it).
    let archived_at = manifest(root, job.uid())["archived_at"].clone();
    let terminating = job_event(
        &job,
        "batch.volcano.sh/v1alpha1",
        "Job",
        Phase::Terminating,
        "60",
    );
    plugin
        .handle(&terminating)
        .await
        .expect("terminating handled");
    assert_eq!(manifest(root, job.uid())["archived_at"], archived_at);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_pods_are_gone_gets_a_manifest_saying_so() {
    let s = setup().await;
    let plugin = load(&s.rt, 1 << 20).await;
    let mut gone = event(
        "u-gone",
        "9",
        Phase::Deleted,
        Some(Phase::Running),
        "2026-11-21T12:00:00Z",
    );
    gone.api_version = "kubeflow.org/v1".into();
    gone.kind = "PyTorchJob".into();
    gone.name = "vanished".into();
    plugin
        .handle(&gone)
        .await
        .expect("a job without pods is archived, not failed");
    let m = manifest(s.archive_root.path(), "u-gone");
    assert_eq!(m["no_pods"], true);
    assert_eq!(m["phase"], "deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_of_a_same_named_older_job_are_not_this_jobs() {
    let s = setup().await;
    // Two jobs' pods carry the same name label; only the uid tells them apart.
    let job = JobDriver::builder(Flavor::PyTorch, "ml", "same")
        .workers(1)
        .create(&s.sim)
        .expect("job");
    let plugin = load(&s.rt, 1 << 20).await;
    let mut other = job_event(&job, "kubeflow.org/v1", "PyTorchJob", Phase::Failed, "70");
    other.uid = "a-different-uid".into();
    other.id = JobEvent::make_id("east", "a-different-uid", "70");
    plugin.handle(&other).await.expect("handled");
    let m = manifest(s.archive_root.path(), "a-different-uid");
    assert_eq!(
        m["no_pods"], true,
        "pods owned by another uid are not listed: {m}"
    );
}

fn walk(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(
                    path.strip_prefix(dir)
                        .expect("under dir")
                        .display()
                        .to_string(),
                );
            }
        }
    }
    out.sort();
    out
}
