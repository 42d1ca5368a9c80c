//! What telling a job's story costs: the book's memory per job (seen only, and with a
//! Workload's facts and a failure cause), the time one job event takes to link its job and
//! take the book's snapshot, the time to read the queue phase from it (`queue_stay`), and the
//! time to read one Workload and one pod version.
//!
//! Run: `cargo bench -p jobrelay-watch --bench story` (`-- --jobs N` for another size).
//! Results and method: docs/BENCHMARKS.md, "A job's story".

#![expect(
    clippy::print_stdout,
    reason = "a bench's figures are its output, printed for whoever runs it"
)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use jobrelay_contract::event::{JobEvent, Phase};
use jobrelay_watch::story::book::BookLimits;
use jobrelay_watch::story::queue_phase::queue_stay;
use jobrelay_watch::story::sources::Stories;
use jobrelay_watch::story::{pod_cause, workload};

// The fleet crate's counting allocator, shared rather than copied.
#[path = "../../fleet/benches/common/mod.rs"]
mod common;

use common::{Counting, LIVE};

#[global_allocator]
static ALLOC: Counting = Counting;

fn event(uid: &str) -> JobEvent {
    JobEvent {
        id: format!("c/{uid}/1"),
        transition_key: String::new(),
        cluster: "c".into(),
        api_version: "batch/v1".into(),
        kind: "Job".into(),
        namespace: "ml".into(),
        name: format!("job-{uid}"),
        uid: uid.into(),
        resource_version: "1".into(),
        generation: None,
        phase: Phase::Running,
        raw_phase: String::new(),
        reason: None,
        message: None,
        previous_phase: None,
        transition_time: "2026-12-02T10:00:00Z".into(),
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
        object_json: Arc::from("{}"),
        synthetic: false,
        story: None,
    }
}

fn uid(i: usize) -> String {
    format!("{i:08x}-0000-4000-8000-{i:012x}")
}

fn workload_json(job_uid: &str) -> String {
    serde_json::json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": format!("job-{job_uid}"), "namespace": "ml",
                     "uid": "w", "resourceVersion": "9", "creationTimestamp": "2026-12-02T09:00:00Z",
                     "labels": {"kueue.x-k8s.io/job-uid": job_uid}},
        "spec": {"queueName": "team-a", "podSets": [{"name": "main", "count": 8}]},
        "status": {
            "admission": {"clusterQueue": "gpu", "podSetAssignments": [
                {"name": "main", "count": 8, "flavors": {"nvidia.com/gpu": "a100"},
                 "resourceUsage": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"}}]},
            "conditions": [
                {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                 "message": "Quota reserved in ClusterQueue gpu", "lastTransitionTime": "2026-12-02T09:05:00Z"},
                {"type": "Admitted", "status": "True", "reason": "Admitted",
                 "message": "The workload is admitted", "lastTransitionTime": "2026-12-02T09:05:00Z"},
                {"type": "PodsReady", "status": "True", "reason": "Started",
                 "message": "All pods reached readiness", "lastTransitionTime": "2026-12-02T09:06:00Z"}],
            "schedulingStats": {"evictions": [{"reason": "Preempted", "underlyingCause": "", "count": 1}]},
            "requeueState": {"count": 1}
        }
    })
    .to_string()
}

fn pod_json() -> String {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "job-0", "namespace": "ml", "uid": "p",
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "job",
                                 "uid": "j", "controller": true}]},
        "spec": {"containers": [{"name": "trainer", "image": "registry.example/train:1"}]},
        "status": {"phase": "Failed", "containerStatuses": [{"name": "trainer",
            "image": "registry.example/train:1", "imageID": "", "ready": false, "restartCount": 3,
            "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}
    })
    .to_string()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let jobs = args
        .iter()
        .position(|a| a == "--jobs")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(100_000usize);
    let uids: Vec<String> = (0..jobs).map(uid).collect();
    let texts: Vec<String> = uids.iter().map(|u| workload_json(u)).collect();
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_str(&pod_json()).expect("a pod");
    assert!(pod_cause::failure_cause(&pod).is_some(), "the pod fails");
    let pods: Vec<_> = uids
        .iter()
        .map(|u| {
            let mut owned = pod.clone();
            if let Some(owner) = owned
                .metadata
                .owner_references
                .as_mut()
                .and_then(|o| o.first_mut())
            {
                owner.uid = u.clone();
            }
            owned
        })
        .collect();
    let mut events: Vec<JobEvent> = uids.iter().map(|u| event(u)).collect();
    let live = || LIVE.load(Ordering::Relaxed);

    // Memory, as the heap grows while the book is filled (the events exist before): every job
    // seen once, then each job's Workload read and joined and a failing pod's cause noted.
    let before = live();
    let stories = Stories::new(BookLimits::default());
    for e in &mut events {
        stories.job_version(e, None, true);
    }
    let seen = live() - before;
    for text in &texts {
        stories.workload(workload::read(text).expect("reads"));
    }
    for pod in &pods {
        stories.pod(pod);
    }
    for e in &mut events {
        stories.job_version(e, None, true);
    }
    let told = live() - before;
    println!(
        "book, {jobs} jobs seen: {:.0} bytes per job; with a Workload's facts and a failure \
         cause each: {:.0} bytes per job",
        seen as f64 / jobs as f64,
        told as f64 / jobs as f64
    );

    let start = Instant::now();
    for text in &texts {
        std::hint::black_box(workload::read(text).expect("reads"));
    }
    println!(
        "Workload read (a {} byte admitted Workload): {:.2} us each",
        texts[0].len(),
        start.elapsed().as_secs_f64() * 1e6 / jobs as f64
    );

    // Time per job event: seen and the snapshot taken (an Arc clone), over every job, 5
    // rounds; then with a controlling owner to link as well (a JobSet's TrainJob).
    let rounds = 5;
    for owner in [None, Some("owner")] {
        let start = Instant::now();
        for _ in 0..rounds {
            for e in &mut events {
                stories.job_version(e, owner, true);
            }
        }
        let per_event = start.elapsed().as_secs_f64() * 1e9 / (rounds * jobs) as f64;
        let linked = if owner.is_some() {
            ", owner linked"
        } else {
            ""
        };
        println!("job event, story taken{linked}: {per_event:.0} ns each");
    }

    // The queue phase each event of such a kind reads from its story: nothing to refine for
    // an admitted Workload and a running job; for a queued one, the stay with Kueue's reason
    // and message copied out for the event.
    let admitted = events[0].story.clone().expect("a story");
    let mut waiting = (*admitted).clone();
    if let Some(w) = waiting.workload.as_mut() {
        w.state = workload::QueueState::Queued {
            reason: "Pending".into(),
            message: "couldn't assign flavors to pod set main: insufficient quota for                       nvidia.com/gpu in flavor a100, 8 more needed"
                .into(),
        };
    }
    for (label, phase, story) in [
        ("admitted, the job running", Phase::Running, &*admitted),
        ("queued, the job suspended", Phase::Suspended, &waiting),
    ] {
        let n = 1_000_000;
        let start = Instant::now();
        for _ in 0..n {
            std::hint::black_box(queue_stay(
                std::hint::black_box(phase),
                Some(std::hint::black_box(story)),
            ));
        }
        println!(
            "queue phase read ({label}): {:.0} ns each",
            start.elapsed().as_secs_f64() * 1e9 / n as f64
        );
    }

    let text = pod_json();
    let n = 20_000;
    let start = Instant::now();
    for _ in 0..n {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_str(&text).expect("a pod");
        std::hint::black_box(pod_cause::failure_cause(&pod));
    }
    println!(
        "pod read and judged (a {} byte failed pod): {:.2} us each",
        text.len(),
        start.elapsed().as_secs_f64() * 1e6 / n as f64
    );
}
