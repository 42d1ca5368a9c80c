//! A job's story through real watches: the simulator serves a batch Job, its Kueue Workload
//! and its pod over HTTP; the Workload and pod streams feed the cluster's book, and the job
//! stream's events carry the book's snapshot. The Workload is seen before its job (kept as an
//! orphan, joined when the job comes), a later admission reaches the job's next version, a
//! failing pod's cause reaches the one after, and a kind that asks for no story carries none.
//! Then the test kit's own Kueue (`SimKueue`) and failing pods (`PodFailure`), read by the same
//! watches: what other tests build stories from is read as Kueue and the kubelet write it.

use std::sync::Arc;
use std::time::Duration;

use jobrelay::clusters::supervisor::build_client;
use jobrelay_contract::event::JobEvent;
use jobrelay_contract::story::{Counts, FailureCause, QueueState, Story, WorkloadFacts};
use jobrelay_testkit::{
    Flavor, Gvr, JobDriver, KueueStep, PodFailure, ResourceKind, SimCluster, SimKueue, Workload,
};
use jobrelay_watch::kinds::{JobKind, StorySources};
use jobrelay_watch::story::book::BookLimits;
use jobrelay_watch::story::sources::{self, Stories};
use jobrelay_watch::watcher::{self, Observation, WatchTarget};
use kube::config::Kubeconfig;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

fn workload_gvr() -> Gvr {
    let (group, version, _, plural) = sources::WORKLOAD;
    Gvr::new(group, version, plural)
}

fn batch_job(story: StorySources) -> JobKind {
    JobKind {
        story,
        ..JobKind::builtin("batch-job").expect("a built-in kind")
    }
}

/// The next event of the stream for job `name`, within 10 s.
async fn next_event(events: &mut mpsc::Receiver<Observation>, name: &str) -> JobEvent {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let seen = tokio::time::timeout_at(deadline, events.recv())
            .await
            .unwrap_or_else(|_| panic!("no event for {name} within 10 s"))
            .expect("the stream runs");
        if let Observation::Version(seen) = seen
            && seen.event.name == name
        {
            return seen.event;
        }
    }
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..200 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what}: not within 10 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_events_carry_its_workload_and_its_failing_pod() {
    let sim = SimCluster::start("story").await.expect("sim");
    let (group, version, kind, plural) = sources::WORKLOAD;
    sim.register_kind(ResourceKind::new(group, version, kind, plural, true));
    let kubeconfig = Kubeconfig::from_yaml(&sim.kubeconfig_yaml()).expect("kubeconfig");
    let client = build_client(&kubeconfig, None).await.expect("client");
    let cluster: Arc<str> = Arc::from("story");
    let stories = Stories::new(BookLimits::default());
    let workloads = tokio::spawn(sources::watch_workloads(
        client.clone(),
        None,
        stories.clone(),
        cluster.clone(),
        None,
    ));
    let pods = tokio::spawn(sources::watch_pods(
        client.clone(),
        None,
        stories.clone(),
        cluster.clone(),
        None,
    ));

    // The job exists, its Workload is seen, and only then the job stream starts: the
    // Workload waits in the book as an orphan until the job is seen.
    let job = sim
        .create(
            &Gvr::BATCH_JOB,
            json!({"apiVersion": "batch/v1", "kind": "Job",
                   "metadata": {"name": "llama-ft", "namespace": "ml",
                                "labels": {"kueue.x-k8s.io/queue-name": "team-a"}},
                   "spec": {"suspend": true, "template": {"spec": {"containers": []}}}}),
        )
        .expect("job created");
    let uid = job["metadata"]["uid"].as_str().expect("a uid").to_string();
    sim.create(
        &workload_gvr(),
        json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
               "metadata": {"name": "job-llama-ft", "namespace": "ml",
                            "labels": {"kueue.x-k8s.io/job-uid": uid}},
               "spec": {"queueName": "team-a"},
               "status": {"conditions": [{"type": "QuotaReserved", "status": "False",
                   "reason": "Pending", "message": "insufficient quota for nvidia.com/gpu",
                   "lastTransitionTime": "2026-12-02T10:00:00Z"}]}}),
    )
    .expect("workload created");
    until("the Workload is kept as an orphan", || {
        stories.orphans().1 == 1
    })
    .await;

    let (sink, mut events) = mpsc::channel(64);
    let target = |kind: JobKind| WatchTarget {
        cluster: cluster.clone(),
        kind: Arc::new(kind),
        namespace: None,
        label_selector: None,
        timeout_seconds: 30,
        finalizer: None,
        stories: Some(stories.clone()),
        back: None,
    };
    let telling = target(batch_job(StorySources {
        kueue: true,
        pods: true,
    }));
    let stream = tokio::spawn(watcher::run(client.clone(), telling, sink, |_| {}));
    let first = next_event(&mut events, "llama-ft").await;
    let story = first
        .story
        .clone()
        .expect("the orphan Workload joined the job");
    let facts = story.workload.as_ref().expect("its Workload");
    assert_eq!(facts.local_queue.as_deref(), Some("team-a"));
    assert_eq!(
        facts.state,
        QueueState::Queued {
            reason: "Pending".into(),
            message: "insufficient quota for nvidia.com/gpu".into()
        }
    );
    assert_eq!(stories.orphans().1, 0, "joined, no longer an orphan");

    // Admitted: Kueue writes the Workload, then unsuspends the job, whose next version
    // carries the admission.
    sim.patch_status(
        &workload_gvr(),
        "ml",
        "job-llama-ft",
        json!({"status": {
            "admission": {"clusterQueue": "gpu", "podSetAssignments": [
                {"name": "main", "resourceUsage": {"nvidia.com/gpu": "8", "cpu": "16"}}]},
            "conditions": [
                {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                 "lastTransitionTime": "2026-12-02T10:05:00Z"},
                {"type": "Admitted", "status": "True", "reason": "Admitted",
                 "lastTransitionTime": "2026-12-02T10:05:00Z"}]}}),
    )
    .expect("admitted");
    until("the admission is in the book", || {
        let mut probe = first_probe(&uid);
        stories.job_version(&mut probe, None, true);
        probe
            .story
            .as_ref()
            .and_then(|s| s.workload.as_ref())
            .map(|w| &w.state)
            == Some(&QueueState::Admitted)
    })
    .await;
    sim.patch_merge(
        &Gvr::BATCH_JOB,
        "ml",
        "llama-ft",
        json!({"spec": {"suspend": false}}),
    )
    .expect("unsuspended");
    let admitted = next_event(&mut events, "llama-ft").await;
    let facts = admitted
        .story
        .as_ref()
        .and_then(|s| s.workload.clone())
        .expect("its Workload");
    assert_eq!(facts.state, QueueState::Admitted);
    assert_eq!(facts.cluster_queue.as_deref(), Some("gpu"));
    assert_eq!(facts.accelerators.get("nvidia.com/gpu"), Some(&8));
    assert!(
        first.story.is_some() && !Arc::ptr_eq(&story, admitted.story.as_ref().expect("a story")),
        "the earlier event keeps its own snapshot"
    );

    // A pod of the job dies of OOM: the job's next version says why.
    sim.create(
        &Gvr::POD,
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "llama-ft-0", "namespace": "ml",
                   "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                       "name": "llama-ft", "uid": uid, "controller": true}]},
               "spec": {"containers": [{"name": "trainer", "image": "x"}]},
               "status": {"phase": "Failed", "containerStatuses": [{"name": "trainer",
                   "image": "x", "imageID": "", "ready": false, "restartCount": 0,
                   "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}}),
    )
    .expect("pod created");
    until("the pod's cause is in the book", || {
        let mut probe = first_probe(&uid);
        stories.job_version(&mut probe, None, true);
        probe.story.as_ref().is_some_and(|s| s.failure.is_some())
    })
    .await;
    sim.patch_status(
        &Gvr::BATCH_JOB,
        "ml",
        "llama-ft",
        json!({"status": {"failed": 1, "conditions": [{"type": "Failed", "status": "True",
               "reason": "BackoffLimitExceeded",
               "message": "Job has reached the specified backoff limit"}]}}),
    )
    .expect("failed");
    let failed = next_event(&mut events, "llama-ft").await;
    let cause = failed
        .story
        .as_ref()
        .and_then(|s| s.failure.clone())
        .expect("a failure cause");
    assert_eq!(
        (
            cause.container.as_str(),
            cause.reason.as_str(),
            cause.exit_code
        ),
        ("trainer", "OOMKilled", Some(137))
    );
    let head = failed.head_json().expect("the head encodes");
    let back = JobEvent::from_parts(&head, failed.object_json.clone()).expect("decodes");
    assert_eq!(back.story, failed.story, "the inbox's head keeps the story");
    stream.abort();

    // The same job seen by a stream whose kind asks for no story: no story on its events.
    let (sink, mut events) = mpsc::channel(64);
    let quiet = tokio::spawn(watcher::run(
        client.clone(),
        target(batch_job(StorySources::default())),
        sink,
        |_| {},
    ));
    let plain = next_event(&mut events, "llama-ft").await;
    assert!(
        plain.story.is_none(),
        "a kind without story sources carries none"
    );
    quiet.abort();
    workloads.abort();
    pods.abort();
}

/// An event of the job `uid`, to read the book's current story through its public door.
fn first_probe(uid: &str) -> JobEvent {
    JobEvent::from_parts(
        &json!({"id": "probe", "cluster": "story", "api_version": "batch/v1", "kind": "Job",
                "namespace": "ml", "name": "llama-ft", "uid": uid, "resource_version": "0",
                "phase": "running", "transition_time": "2026-12-02T10:00:00Z"})
        .to_string(),
        Arc::from("{}"),
    )
    .expect("a probe event")
}

/// The whole daemon: a kind with `story: {kueue: true, pods: true}` in the main file, its
/// Workload and pod streams started by the cluster's supervisor, event-log writing each
/// event's story as `story.get()` gives it. The job is touched (a label) until a line says
/// what the Workload or pod said: separate streams keep no order between them, so a version
/// made just before the book learned a fact carries it on the next one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_writes_a_jobs_story_through_event_log() {
    use crate::process::{DEADLINE, plugin_dir, read_lines, write};
    use jobrelay::daemon::Daemon;

    let sim = SimCluster::start("alpha").await.expect("sim");
    let (group, version, kind, plural) = sources::WORKLOAD;
    sim.register_kind(ResourceKind::new(group, version, kind, plural, true));
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    write(
        &root.join("jobrelay.yaml"),
        &format!(
            "plugin_dir: {}\nstate: {{path: state/jobrelay.db}}\ndebounce_ms: 100\n\
             kinds:\n  - {{name: batch-job, story: {{kueue: true, pods: true}}}}\n",
            plugin_dir().display()
        ),
    );
    write(&root.join("clusters/alpha.yaml"), &sim.kubeconfig_yaml());
    write(
        &root.join("plugins/log.yaml"),
        "wasm: event-log.wasm\ndelivery: every-version\n\
         grants:\n  filesystem:\n    - {host: out, guest: /data, writable: true}\n",
    );
    let daemon = Daemon::start(root).await.expect("daemon starts");

    let job = sim
        .create(
            &Gvr::BATCH_JOB,
            json!({"apiVersion": "batch/v1", "kind": "Job",
                   "metadata": {"name": "llama-ft", "namespace": "ml"},
                   "spec": {"suspend": true, "template": {"spec": {"containers": []}}}}),
        )
        .expect("job created");
    let uid = job["metadata"]["uid"].as_str().expect("a uid").to_string();
    sim.create(
        &workload_gvr(),
        json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
               "metadata": {"name": "job-llama-ft", "namespace": "ml",
                            "labels": {"kueue.x-k8s.io/job-uid": uid}},
               "spec": {"queueName": "team-a"},
               "status": {
                   "admission": {"clusterQueue": "gpu", "podSetAssignments": [
                       {"name": "main", "resourceUsage": {"nvidia.com/gpu": "8"}}]},
                   "conditions": [{"type": "Admitted", "status": "True", "reason": "Admitted",
                       "lastTransitionTime": "2026-12-02T10:05:00Z"}]}}),
    )
    .expect("workload created");
    sim.create(
        &Gvr::POD,
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "llama-ft-0", "namespace": "ml",
                   "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                       "name": "llama-ft", "uid": uid, "controller": true}]},
               "spec": {"containers": [{"name": "trainer", "image": "x"}]},
               "status": {"phase": "Running", "containerStatuses": [{"name": "trainer",
                   "image": "x", "imageID": "", "ready": false, "restartCount": 2,
                   "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                   "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}}),
    )
    .expect("pod created");

    let out = root.join("out/events.jsonl");
    let started = tokio::time::Instant::now();
    let mut touch = 0;
    let story = loop {
        let told = read_lines(&out)
            .0
            .into_iter()
            .filter(|l| l["name"] == "llama-ft")
            .filter_map(|l| l.get("story").cloned())
            .find(|s| s["workload"]["state"] == "admitted" && !s["failure"].is_null());
        if let Some(story) = told {
            break story;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "no line with the Workload and the pod's cause: {:?}",
            read_lines(&out).0
        );
        touch += 1;
        sim.patch_merge(
            &Gvr::BATCH_JOB,
            "ml",
            "llama-ft",
            json!({"metadata": {"labels": {"touch": touch.to_string()}}}),
        )
        .expect("touched");
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert_eq!(story["workload"]["local_queue"], "team-a");
    assert_eq!(story["workload"]["cluster_queue"], "gpu");
    assert_eq!(
        story["workload"]["accelerators"],
        json!({"nvidia.com/gpu": 8})
    );
    assert_eq!(
        story["failure"],
        json!({"container": "trainer", "init": false, "reason": "CrashLoopBackOff",
               "exit_code": 137, "last_reason": "OOMKilled", "message": null})
    );
    daemon.shutdown(Duration::from_secs(5)).await;
}

/// The real readers of the kit's objects on one cluster: its Workload and pod streams feeding
/// its book, and a stream of its batch Jobs whose events tell their stories (stopped when
/// dropped).
struct Readers {
    sim: SimCluster,
    events: mpsc::Receiver<Observation>,
    tasks: Vec<JoinHandle<()>>,
}

impl Readers {
    async fn start(sim: &SimCluster) -> Readers {
        let kubeconfig = Kubeconfig::from_yaml(&sim.kubeconfig_yaml()).expect("kubeconfig");
        let client = build_client(&kubeconfig, None).await.expect("client");
        let cluster: Arc<str> = Arc::from(sim.name());
        let stories = Stories::new(BookLimits::default());
        let (sink, events) = mpsc::channel(64);
        let story = StorySources {
            kueue: true,
            pods: true,
        };
        let target = WatchTarget {
            cluster: cluster.clone(),
            kind: Arc::new(batch_job(story)),
            namespace: None,
            label_selector: None,
            timeout_seconds: 30,
            finalizer: None,
            stories: Some(stories.clone()),
            back: None,
        };
        let (c, s) = (client.clone(), stories.clone());
        let tasks = vec![
            tokio::spawn(sources::watch_workloads(c, None, s, cluster.clone(), None)),
            tokio::spawn(sources::watch_pods(
                client.clone(),
                None,
                stories,
                cluster,
                None,
            )),
            tokio::spawn(watcher::run(client, target, sink, |_| {})),
        ];
        Readers {
            sim: sim.clone(),
            events,
            tasks,
        }
    }

    /// The story of the first event of `job` that `done` accepts, within 10 s. The story rides
    /// the job's versions and a change of its Workload or pods alone makes none (nor is it
    /// ordered with them), so the job is touched (a label) whenever no event came for 200 ms.
    async fn story(
        &mut self,
        job: &JobDriver,
        what: &str,
        done: impl Fn(&Story) -> bool,
    ) -> Arc<Story> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let (mut touch, mut last) = (0, None);
        loop {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: no event of {} within 10 s says so; the last story: {last:#?}",
                job.name()
            );
            match tokio::time::timeout(Duration::from_millis(200), self.events.recv()).await {
                Ok(Some(Observation::Version(seen))) if seen.event.name == job.name() => {
                    match seen.event.story {
                        Some(story) if done(&story) => return story,
                        story => last = story,
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) => panic!("the job stream ended"),
                Err(_) => {
                    touch += 1;
                    let labels = json!({"metadata": {"labels": {"touch": touch.to_string()}}});
                    (self.sim)
                        .patch_merge(&job.gvr(), job.namespace(), job.name(), labels)
                        .expect("touched");
                }
            }
        }
    }

    /// The Workload's facts of the first event of `job` whose facts `done` accepts.
    async fn workload(
        &mut self,
        job: &JobDriver,
        what: &str,
        done: impl Fn(&WorkloadFacts) -> bool,
    ) -> WorkloadFacts {
        let story = self.story(job, what, |s| s.workload.as_ref().is_some_and(&done));
        story.await.workload.clone().expect("accepted")
    }

    /// The failure cause of the first event of `job` that has one.
    async fn failure(&mut self, job: &JobDriver, what: &str) -> FailureCause {
        let story = self.story(job, what, |s| s.failure.is_some()).await;
        story.failure.clone().expect("accepted")
    }
}

impl Drop for Readers {
    fn drop(&mut self) {
        self.tasks.iter().for_each(JoinHandle::abort);
    }
}

/// Seconds since the epoch of a fact's time.
fn secs(t: Option<chrono::DateTime<chrono::FixedOffset>>) -> Option<i64> {
    t.map(|t| t.timestamp())
}

/// The time of the last step of `workload` that `which` accepts, in seconds since the epoch.
fn logged(workload: &Workload, which: impl Fn(&KueueStep) -> bool) -> Option<i64> {
    workload.last(which).map(|t| t.timestamp())
}

/// The kit's Kueue and failing pod read by the real watches: a batch Job created suspended is
/// queued, admitted, preempted, requeued and admitted again by the kit's Kueue, then its pod is
/// OOM-killed and it fails. Each step's facts reach the job's events as the readers read them,
/// at the times the kit's log has (none made up by the test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kits_kueue_and_failing_pods_are_read_as_kueue_and_kubelet_write_them() {
    let sim = SimCluster::start("kueue").await.expect("sim");
    let kueue = SimKueue::install(&sim);
    let mut readers = Readers::start(&sim).await;
    let mut job = JobDriver::builder(Flavor::Batch, "ml", "llama-ft")
        .workers(1)
        .label(jobrelay_testkit::kueue::QUEUE_NAME_LABEL, "team-a")
        .created_suspended()
        .create(&sim)
        .expect("created suspended");
    let mut workload = kueue.submit(&job, "team-a").expect("submitted");

    fn pending(f: &WorkloadFacts) -> bool {
        matches!(&f.state, QueueState::Queued { reason, .. } if reason == "Pending")
    }
    let f = readers.workload(&job, "queued", pending).await;
    let QueueState::Queued { message, .. } = &f.state else {
        unreachable!("accepted")
    };
    assert!(
        message.contains("insufficient unused quota for nvidia.com/gpu"),
        "{message}"
    );
    assert_eq!(f.local_queue.as_deref(), Some("team-a"));
    assert_eq!(
        secs(f.waiting_since),
        logged(&workload, |s| *s == KueueStep::Created)
    );
    assert!(f.cluster_queue.is_none() && f.accelerators.is_empty());

    let gpus = [("nvidia.com/gpu", 8), ("cpu", 16)];
    workload.admit(&mut job, "a100", &gpus).expect("admitted");
    let admitted = logged(&workload, |s| matches!(s, KueueStep::Admitted { .. }));
    let f = readers
        .workload(&job, "admitted", |f| f.state == QueueState::Admitted)
        .await;
    assert_eq!(f.cluster_queue.as_deref(), Some("a100"));
    assert_eq!(
        f.accelerators,
        Counts::from([("nvidia.com/gpu".to_string(), 8)]),
        "no cpu"
    );
    assert_eq!(secs(f.admitted_at), admitted);

    let preemptor = "9c0d-the-preemptors-job";
    workload
        .preempt(&mut job, "InClusterQueue", preemptor)
        .expect("preempted");
    let released = |f: &WorkloadFacts| {
        matches!(f.state, QueueState::Evicted { .. }) && f.past_execution_seconds > 0
    };
    let f = readers
        .workload(&job, "preempted, its quota released", released)
        .await;
    let QueueState::Evicted {
        reason,
        preempted: Some(how),
        ..
    } = &f.state
    else {
        panic!("evicted by a preemption: {:?}", f.state)
    };
    assert_eq!(
        (reason.as_str(), how.reason.as_str()),
        ("Preempted", "InClusterQueue")
    );
    assert!(
        how.message.contains(&format!("JobUID: {preemptor}")),
        "{}",
        how.message
    );
    assert!(
        f.cluster_queue.is_none() && f.accelerators.is_empty(),
        "no quota held"
    );
    let held = logged(&workload, |s| *s == KueueStep::Released)
        .zip(admitted)
        .map(|(r, a)| r - a);
    assert_eq!(
        Some(f.past_execution_seconds),
        held,
        "admitted until released"
    );
    assert_eq!(
        (f.preemptions(), f.requeues),
        (1, 1),
        "requeues counted as the backoff begins"
    );

    workload.requeue().expect("requeued");
    let requeued = logged(&workload, |s| *s == KueueStep::Requeued);
    let f = readers
        .workload(&job, "requeued", |f| secs(f.waiting_since) == requeued)
        .await;
    assert_eq!((f.preemptions(), f.requeues), (1, 1));
    // Kueue keeps `Evicted=True` until it reserves quota again; requeued and holding no
    // quota, the Workload is back in its queue, waiting since its requeue.
    assert!(
        matches!(&f.state, QueueState::Queued { reason, .. } if reason == "Pending"),
        "{:?}",
        f.state
    );

    workload
        .admit(&mut job, "a100", &gpus[..1])
        .expect("admitted again");
    let again = logged(&workload, |s| matches!(s, KueueStep::Admitted { .. }));
    let readmitted =
        |f: &WorkloadFacts| f.state == QueueState::Admitted && secs(f.admitted_at) == again;
    let f = readers.workload(&job, "admitted again", readmitted).await;
    assert_eq!(f.accelerators.get("nvidia.com/gpu"), Some(&8));
    assert_eq!((f.preemptions(), f.requeues), (1, 1), "its past is kept");
    assert_eq!(Some(f.past_execution_seconds), held);
    assert_eq!(secs(f.waiting_since), requeued, "the wait it ended");

    job.pod_fails(PodFailure::OomKilled).expect("OOM-killed");
    job.failed("").expect("failed");
    let cause = readers.failure(&job, "the pod's cause").await;
    let oom = FailureCause {
        container: "trainer".into(),
        init: false,
        reason: "OOMKilled".into(),
        exit_code: Some(137),
        last_reason: None,
        message: None,
    };
    assert_eq!(cause, oom);
    let limit = "Job has reached the specified backoff limit";
    workload.finish(false, limit).expect("finished");
    let finished = |s: &Story| {
        s.workload
            .as_ref()
            .is_some_and(|f| matches!(f.state, QueueState::Finished { .. }))
    };
    let story = readers.story(&job, "finished", finished).await;
    let failed = QueueState::Finished {
        reason: "Failed".into(),
        message: limit.into(),
    };
    assert_eq!(story.workload.as_ref().map(|f| &f.state), Some(&failed));
    assert_eq!(story.failure, Some(oom), "the first cause is kept");
}

/// The kit's other pod failures read by the real pod stream: a pod whose image cannot be
/// pulled and one restarting in a loop, each its job's cause, with the kubelet's message and
/// (for the loop) the last termination.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kits_stuck_and_crash_looping_pods_are_read_with_their_causes() {
    let sim = SimCluster::start("pods").await.expect("sim");
    SimKueue::install(&sim);
    let mut readers = Readers::start(&sim).await;
    let mut pulling = JobDriver::create(&sim, Flavor::Batch, "ml", "pull").expect("created");
    pulling.pending().expect("pending");
    pulling
        .pod_fails(PodFailure::ImagePullBackOff)
        .expect("its image not pulled");
    let mut looping = JobDriver::create(&sim, Flavor::Batch, "ml", "loop").expect("created");
    looping.running().expect("running");
    looping
        .pod_fails(PodFailure::CrashLoopBackOff)
        .expect("in a crash loop");

    let cause = readers.failure(&pulling, "the image").await;
    let found = (
        cause.container.as_str(),
        cause.reason.as_str(),
        cause.exit_code,
    );
    assert_eq!(found, ("trainer", "ImagePullBackOff", None));
    let message = cause.message.unwrap_or_default();
    let image = "registry.example.com/ml/train:1.4.2";
    assert!(
        message.starts_with(&format!("Back-off pulling image \"{image}\"")),
        "{message}"
    );

    let cause = readers.failure(&looping, "the loop").await;
    let last = cause.last_reason.as_deref();
    assert_eq!(
        (cause.reason.as_str(), cause.exit_code, last),
        ("CrashLoopBackOff", Some(1), Some("Error"))
    );
    let message = cause.message.unwrap_or_default();
    assert!(
        message.starts_with("back-off 40s restarting failed container=trainer pod=loop-"),
        "{message}"
    );
}
