//! The telemetry endpoint of a running daemon: Prometheus metrics that agree with what was
//! delivered, probes that tell ready from not ready (and why), and the JSON status.

use std::time::Duration;

use jobrelay::daemon::Daemon;
use jobrelay_e2e::*;
use jobrelay_testkit::{Flavor, JobDriver, SimCluster};
use serde_json::Value;

/// The sum of every sample line starting with `prefix` (a name and the first labels).
fn sum(page: &str, prefix: &str) -> f64 {
    page.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next())
        .filter_map(|v| v.parse::<f64>().ok())
        .sum()
}

/// The value of one sample line `name{labels} value` in a Prometheus text page.
fn sample(page: &str, name_and_labels: &str) -> Option<f64> {
    page.lines()
        .find(|l| l.starts_with(name_and_labels))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_probes_and_status_follow_the_daemon() {
    init_logs();
    let sim = SimCluster::start("alpha").await.expect("sim");
    let setup = Setup::new("telemetry: {listen: \"127.0.0.1:0\"}\n");
    setup.install_wasm("event-log", "event-log.wasm");
    setup.write_manifest(
        "log",
        &Setup::log_manifest("event-log.wasm", "log", "events.jsonl", ""),
    );
    setup.add_cluster(&sim);
    let daemon = Daemon::start(setup.config_dir()).await.expect("daemon");
    let addr = daemon.telemetry_addr().expect("telemetry endpoint");
    wait_synced(&daemon, "alpha").await;

    assert_eq!(http_get(addr, "/healthz").await.0, 200);
    let (code, body) = http_get(addr, "/readyz").await;
    assert_eq!(code, 200, "{body}");

    let mut jobs = Vec::new();
    for i in 0..3 {
        let mut d = JobDriver::create(&sim, Flavor::Batch, "ml", &format!("m-{i}")).expect("job");
        d.running().expect("running");
        d.succeeded().expect("succeeded");
        jobs.push(d);
    }
    wait_for("every job's success delivered", || {
        let lines = setup.lines("log/events.jsonl");
        jobs.iter()
            .all(|d| {
                lines
                    .iter()
                    .any(|l| uid_of(l) == d.uid() && l["phase"] == "succeeded")
            })
            .then_some(())
    })
    .await;
    let delivered = wait_for("the lane to settle", || {
        let stats = daemon.plugins().get("log")?.lane.clone()?;
        (stats.pending == 0).then_some(stats.delivered)
    })
    .await;
    assert_eq!(delivered as usize, setup.lines("log/events.jsonl").len());

    let (code, page) = http_get(addr, "/metrics").await;
    assert_eq!(code, 200);
    assert_eq!(
        sum(&page, "jobrelay_events_delivered_total{plugin=\"log\""),
        delivered as f64,
        "{page}"
    );
    assert_eq!(
        sample(
            &page,
            "jobrelay_events_delivered_total{plugin=\"log\",cluster=\"alpha\",kind=\"Job\"}"
        ),
        Some(delivered as f64),
        "every delivery was of a batch Job on alpha: {page}"
    );
    assert!(
        sum(
            &page,
            "jobrelay_events_observed_total{cluster=\"alpha\",kind=\"Job\"}"
        ) >= delivered as f64,
        "{page}"
    );
    assert_eq!(
        sample(&page, "jobrelay_lane_pending_events{plugin=\"log\"}"),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &page,
            "jobrelay_cluster_health{cluster=\"alpha\",state=\"synced\"}"
        ),
        Some(1.0),
        "{page}"
    );
    assert_eq!(sample(&page, "jobrelay_ready"), Some(1.0));
    assert!(
        page.contains("# TYPE jobrelay_events_delivered counter"),
        "{page}"
    );
    assert!(
        page.trim_end().ends_with("# EOF"),
        "OpenMetrics ends with # EOF"
    );

    let (code, body) = http_get(addr, "/status").await;
    assert_eq!(code, 200);
    let status: Value = serde_json::from_str(&body).expect("status is JSON");
    assert_eq!(status["ready"], true);
    assert_eq!(status["clusters"]["alpha"]["state"], "synced");
    assert_eq!(status["plugins"]["log"]["lane"]["delivered"], delivered);

    // A cluster that cannot be reached: not ready, and the probe says which and why.
    let dead = setup.path("clusters/unreachable.yaml");
    let kubeconfig = sim
        .kubeconfig_yaml()
        .replace(&sim.addr().to_string(), "127.0.0.1:9");
    write_atomic(&dead, kubeconfig.as_bytes());
    let mut refused = None;
    for _ in 0..200 {
        let (code, body) = http_get(addr, "/readyz").await;
        if code == 503 {
            refused = Some(body);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let body = refused.expect("readyz turns 503 with an unreachable cluster");
    assert!(body.contains("cluster unreachable"), "{body}");
    let (_, page) = http_get(addr, "/metrics").await;
    assert_eq!(sample(&page, "jobrelay_ready"), Some(0.0), "{page}");
    daemon.shutdown(Duration::from_secs(5)).await;
}
