//! A stream that keeps failing backs off for real: a cluster whose API answers 503, one that
//! refuses the token (401) and a kind the cluster does not serve (404) are each tried a
//! handful of times in 20 s — not once a second, as when kube's watcher's `Init` before every
//! list attempt reset the backoff — and a stream that recovers is watched again.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use jobrelay::clusters::supervisor::build_client;
use jobrelay_testkit::{Flavor, JobDriver, SimCluster};
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
    let client = build_client(&kubeconfig).await.expect("client");
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
    let kubeconfig = Kubeconfig::from_yaml(&down.kubeconfig_yaml()).expect("kubeconfig");
    let client = build_client(&kubeconfig).await.expect("client");
    let (sink, mut events) = mpsc::channel(64);
    let synced = Arc::new(AtomicUsize::new(0));
    let seen = synced.clone();
    let stream = tokio::spawn(watcher::run(
        client,
        target("down", volcano()),
        sink,
        move |p| {
            if p == Progress::Synced {
                seen.fetch_add(1, Ordering::SeqCst);
            }
        },
    ));
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
