//! A stream that keeps failing backs off for real: a cluster whose API answers 503, one that
//! refuses the token (401) and a kind the cluster does not serve (404) are each tried a
//! handful of times in 20 s — not once a second, as when kube's watcher's `Init` before every
//! list attempt reset the backoff — and a stream that recovers is watched again.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use jobrelay::clusters::supervisor::build_client;
use jobrelay_testkit::{Flavor, Gvr, JobDriver, SimCluster};
use jobrelay_watch::kinds::JobKind;
use jobrelay_watch::watcher::{self, Progress, WatchTarget};
use kube::config::Kubeconfig;
use tokio::sync::mpsc;

fn target(cluster: &str, kind: JobKind) -> WatchTarget {
    WatchTarget {
        cluster: Arc::from(cluster),
        kind: Arc::new(kind),
        namespace: None,
        label_selector: None,
        timeout_seconds: 30,
        finalizer: None,
        stories: None,
        back: None,
    }
}

/// Runs one stream for `window`; the requests for `plural` the simulator answered `status`.
async fn attempts(
    sim: &SimCluster,
    kubeconfig: &str,
    target: WatchTarget,
    plural: &str,
    status: u16,
    window: Duration,
) -> usize {
    let kubeconfig = Kubeconfig::from_yaml(kubeconfig).expect("kubeconfig");
    let client = build_client(&kubeconfig, None).await.expect("client");
    let (sink, mut events) = mpsc::channel(64);
    tokio::spawn(async move { while events.recv().await.is_some() {} });
    let stream = tokio::spawn(watcher::run(client, target, sink, |_| {}));
    tokio::time::sleep(window).await;
    stream.abort();
    sim.recent_requests()
        .iter()
        .filter(|r| r.uri.contains(&format!("/{plural}")) && r.status == status)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_streams_back_off_and_a_missing_kind_is_looked_for_rarely() {
    let window = Duration::from_secs(20);
    let down = SimCluster::start("down").await.expect("sim");
    down.set_outage(true);
    let refusing = SimCluster::start("refusing").await.expect("sim");
    let lacking = SimCluster::start("lacking").await.expect("sim");
    let volcano = || JobKind::builtin("volcano-job").expect("kind");
    let trainjob: JobKind = serde_yaml_ng::from_str(
        "{name: trainjob, group: example.com, version: v1, kind: TrainJob, plural: trainjobs, \
         normalizer: {field: {path: /status/phase, phases: {Done: succeeded}}}}",
    )
    .expect("a kind");
    let (down_config, refusing_config, lacking_config) = (
        down.kubeconfig_yaml(),
        refusing.kubeconfig_yaml_with_token("not-the-token"),
        lacking.kubeconfig_yaml(),
    );
    let (outage, unauthorized, missing) = tokio::join!(
        attempts(
            &down,
            &down_config,
            target("down", volcano()),
            "jobs",
            503,
            window
        ),
        attempts(
            &refusing,
            &refusing_config,
            target("refusing", volcano()),
            "jobs",
            401,
            window
        ),
        attempts(
            &lacking,
            &lacking_config,
            target("lacking", trainjob),
            "trainjobs",
            404,
            window
        ),
    );
    println!("attempts in {window:?}: 503 {outage}, 401 {unauthorized}, 404 {missing}");
    // 0.8 s doubling (with up to as much again at random): at most 5 in 20 s, at least 3.
    for (what, n) in [("503", outage), ("401", unauthorized)] {
        assert!((2..=6).contains(&n), "{what}: {n} attempts in {window:?}");
    }
    // 2 s doubling: at most 4.
    assert!(
        (1..=4).contains(&missing),
        "404: {missing} attempts in {window:?}"
    );

    // The outage ends: the stream is watched again and delivers.
    down.set_outage(false);
    let (stream, mut events, synced) = watched(&down, target("down", volcano())).await;
    let mut job = JobDriver::create(&down, Flavor::Volcano, "ml", "back").expect("job");
    job.running().expect("running");
    let got = tokio::time::timeout(Duration::from_secs(30), events.recv())
        .await
        .expect("an event once the API answers");
    assert!(got.is_some());
    // The list's objects come before its end, which is when the stream says it is in sync.
    let started = std::time::Instant::now();
    while synced.load(Ordering::SeqCst) == 0 {
        assert!(started.elapsed() < Duration::from_secs(30), "never in sync");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stream.abort();
}

/// A watch resumed from a version the API server has compacted away ends with `410 Gone`: the
/// server answered, so the stream lists again at once — even after earlier failures had grown
/// its waits (treated as one more failure, the re-list waited 13 to 26 s here, up to a minute
/// in the fault soak, and every change meanwhile went unseen).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_watch_lists_again_at_once_whatever_failed_before() {
    let sim = SimCluster::start("compacting").await.expect("sim");
    let (stream, mut events, synced) = watched(
        &sim,
        target("compacting", JobKind::builtin("volcano-job").expect("kind")),
    )
    .await;
    let started = std::time::Instant::now();
    while synced.load(Ordering::SeqCst) == 0 {
        assert!(started.elapsed() < Duration::from_secs(30), "never in sync");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Four failed watch starts in a row, no data between: the next wait would be 6.4 s or more.
    sim.fail_next(4, 503);
    sim.drop_watches();
    let failed = std::time::Instant::now();
    while sim
        .recent_requests()
        .iter()
        .filter(|r| r.uri.contains("/jobs") && r.status == 503)
        .count()
        < 4
    {
        assert!(
            failed.elapsed() < Duration::from_secs(60),
            "the failures never happened"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Wait for the resumed watch to open (after the last failure's wait), then compact its
    // version away and add a job.
    let watches = sim.watch_requests_for(&Gvr::VOLCANO_JOB);
    while sim.watch_requests_for(&Gvr::VOLCANO_JOB) == watches || sim.open_watches() == 0 {
        assert!(
            failed.elapsed() < Duration::from_secs(90),
            "never watched again"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The open watch hears nothing of the new job, so the version it resumes from is older
    // than the compaction.
    let lists = sim.list_requests_for(&Gvr::VOLCANO_JOB);
    sim.stall_watches(true);
    let mut job = JobDriver::create(&sim, Flavor::Volcano, "ml", "after-compaction").expect("job");
    job.running().expect("running");
    sim.compact();
    sim.drop_watches();
    sim.stall_watches(false);
    let cut = std::time::Instant::now();
    loop {
        let got = tokio::time::timeout(Duration::from_secs(60), events.recv())
            .await
            .expect("the job after the compaction, within a minute")
            .expect("the stream runs");
        if let watcher::Observation::Version(observed) = got
            && observed.event.name == "after-compaction"
        {
            break;
        }
    }
    let took = cut.elapsed();
    assert!(
        sim.list_requests_for(&Gvr::VOLCANO_JOB) > lists,
        "the stream listed again"
    );
    println!("the job after the compaction seen {took:?} after the watch was cut");
    assert!(
        took < Duration::from_secs(5),
        "a 410 is an answer, not a failure to wait after: {took:?}"
    );
    stream.abort();
}

/// A stream of `target` on `sim`, running: its task, what it observes, and how many times it
/// said it is in sync.
async fn watched(
    sim: &SimCluster,
    target: WatchTarget,
) -> (
    tokio::task::JoinHandle<()>,
    mpsc::Receiver<watcher::Observation>,
    Arc<AtomicUsize>,
) {
    let kubeconfig = Kubeconfig::from_yaml(&sim.kubeconfig_yaml()).expect("kubeconfig");
    let client = build_client(&kubeconfig, None).await.expect("client");
    let (sink, events) = mpsc::channel(256);
    let synced = Arc::new(AtomicUsize::new(0));
    let seen = synced.clone();
    let stream = tokio::spawn(watcher::run(client, target, sink, move |p| {
        if p == Progress::Synced {
            seen.fetch_add(1, Ordering::SeqCst);
        }
    }));
    (stream, events, synced)
}

/// A refused token's failure is said as the API server's answer — what `/status` shows as the
/// cluster's `last_error` and the log as the stream's error — not as kube's text for it,
/// which appends the whole `Status` in Rust's debug notation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_token_is_said_as_the_answer_without_a_debug_dump() {
    let sim = SimCluster::start("refusing").await.expect("sim");
    let kubeconfig = Kubeconfig::from_yaml(&sim.kubeconfig_yaml()).expect("kubeconfig");
    sim.revoke_token(sim.token());
    let client = build_client(&kubeconfig, None).await.expect("client");
    let (sink, mut events) = mpsc::channel(64);
    tokio::spawn(async move { while events.recv().await.is_some() {} });
    let (said, mut heard) = mpsc::unbounded_channel();
    let kind = JobKind::builtin("volcano-job").expect("kind");
    let stream = tokio::spawn(watcher::run(
        client,
        target("refusing", kind),
        sink,
        move |progress| {
            if let Progress::Error(text) = progress {
                let _ = said.send(text);
            }
        },
    ));
    let text = tokio::time::timeout(Duration::from_secs(20), heard.recv())
        .await
        .expect("an error within 20 s")
        .expect("an error");
    stream.abort();
    assert!(
        text.contains("the API server answered 401 Unauthorized"),
        "{text}"
    );
    assert!(
        !text.contains("Status {") && !text.contains("ApiError"),
        "{text}"
    );
}

/// A stream waiting out its backoff after failures is told when the cluster answers again
/// (the supervisor's health check does it) and tries at once: watched again within a moment,
/// not at the end of a wait that has grown to several seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_told_the_cluster_is_back_tries_at_once() {
    let sim = SimCluster::start("back").await.expect("sim");
    sim.set_outage(true);
    let kubeconfig = Kubeconfig::from_yaml(&sim.kubeconfig_yaml()).expect("kubeconfig");
    let client = build_client(&kubeconfig, None).await.expect("client");
    let (sink, mut events) = mpsc::channel(64);
    tokio::spawn(async move { while events.recv().await.is_some() {} });
    let back = Arc::new(tokio::sync::Notify::new());
    let mut target = target("back", JobKind::builtin("volcano-job").expect("kind"));
    target.back = Some(back.clone());
    let (said, mut synced) = mpsc::unbounded_channel();
    let stream = tokio::spawn(watcher::run(client, target, sink, move |p| {
        if p == Progress::Synced {
            let _ = said.send(());
        }
    }));
    // Four failed lists: the next wait is at least 6.4 s (0.8 s doubling, plus a random part).
    let failed = || {
        sim.recent_requests()
            .iter()
            // Only the stream asks this cluster anything.
            .filter(|r| r.status == 503)
            .count()
    };
    let started = std::time::Instant::now();
    while failed() < 4 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{} failures",
            failed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Let the stream settle into its wait (a notice reaches only those waiting, as the
    // health check's reaches the streams in backoff).
    tokio::time::sleep(Duration::from_millis(300)).await;
    sim.set_outage(false);
    let told = std::time::Instant::now();
    back.notify_waiters();
    tokio::time::timeout(Duration::from_secs(3), synced.recv())
        .await
        .expect("in sync within 3 s of being told, not at the end of its wait")
        .expect("synced");
    println!("in sync {:?} after being told", told.elapsed());
    stream.abort();
}
