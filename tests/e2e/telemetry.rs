//! The telemetry endpoint of a running daemon: Prometheus metrics that agree with what was
//! delivered, probes that tell ready from not ready (and why), and the JSON status.

use std::time::Duration;

use jobrelay::daemon::Daemon;
use jobrelay_e2e::*;
use jobrelay_testkit::{Flavor, JobDriver, PrivateMariaDb, ResourceKind, SimCluster};
use serde_json::Value;

use crate::shared_state::{drop_state_tables, point_at_shared_store};

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

/// Starts a daemon on `setup` and `sim` with the event-log plugin as `log`; its telemetry
/// address.
async fn start_logging(setup: &Setup, sim: &SimCluster) -> (Daemon, std::net::SocketAddr) {
    setup.install_wasm("event-log", "event-log.wasm");
    setup.write_manifest(
        "log",
        &Setup::log_manifest("event-log.wasm", "log", "events.jsonl", ""),
    );
    setup.add_cluster(sim);
    let daemon = Daemon::start(setup.config_dir()).await.expect("daemon");
    let addr = daemon.telemetry_addr().expect("telemetry endpoint");
    (daemon, addr)
}

/// Plays one job of `flavor` to its success on `sim` and waits until `setup`'s event log has
/// the success.
async fn succeeded_and_logged(
    sim: &SimCluster,
    setup: &Setup,
    flavor: Flavor,
    name: &str,
) -> JobDriver {
    let mut job = JobDriver::create(sim, flavor, "ml", name).expect("job");
    job.running().expect("running");
    job.succeeded().expect("succeeded");
    wait_for(&format!("the success of {name} delivered"), || {
        setup
            .lines("log/events.jsonl")
            .iter()
            .any(|l| uid_of(l) == job.uid() && l["phase"] == "succeeded")
            .then_some(())
    })
    .await;
    job
}

/// A kind whose resource a cluster does not serve (its CRD is not installed) is listed as not
/// installed, not a fault: the cluster stays synced, the replica ready, the other kinds are
/// delivered; and once the CRD appears, the kind is watched and its jobs delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_the_cluster_lacks_is_listed_and_picked_up_when_it_appears() {
    init_logs();
    let sim = SimCluster::start("alpha").await.expect("sim");
    let setup = Setup::new(
        "telemetry: {listen: \"127.0.0.1:0\"}\n\
         kinds:\n\
         \x20 - name: batch-job\n\
         \x20 - name: trainjob\n\
         \x20   group: example.com\n\
         \x20   version: v1\n\
         \x20   kind: TrainJob\n\
         \x20   plural: trainjobs\n\
         \x20   normalizer: {field: {path: /status/phase, phases: {Done: succeeded}}}\n",
    );
    let (daemon, addr) = start_logging(&setup, &sim).await;
    wait_plugin_serving(&daemon, "log").await;
    wait_for("alpha synced with trainjob not installed", || {
        let health = daemon.clusters().get("alpha").cloned()?;
        (health.state == jobrelay::clusters::health::HealthState::Synced
            && health.kinds_not_installed == ["trainjob"])
        .then_some(())
    })
    .await;
    let (code, body) = http_get(addr, "/readyz").await;
    assert_eq!(code, 200, "{body}");
    let (_, page) = http_get(addr, "/metrics").await;
    assert_eq!(
        sample(
            &page,
            "jobrelay_cluster_kind_not_installed{cluster=\"alpha\",kind=\"trainjob\"}"
        ),
        Some(1.0),
        "{page}"
    );
    assert_eq!(
        sample(
            &page,
            "jobrelay_cluster_health{cluster=\"alpha\",state=\"synced\"}"
        ),
        Some(1.0),
        "{page}"
    );
    // The kinds it does serve are delivered.
    succeeded_and_logged(&sim, &setup, Flavor::Batch, "served").await;

    // The CRD is installed: the kind leaves the list and its jobs are delivered.
    let kind = ResourceKind::new("example.com", "v1", "TrainJob", "trainjobs", true)
        .with_status_subresource(false);
    let gvr = kind.gvr.clone();
    sim.register_kind(kind);
    let created = sim
        .create(
            &gvr,
            serde_json::json!({
                "apiVersion": "example.com/v1",
                "kind": "TrainJob",
                "metadata": {"name": "late", "namespace": "ml"},
                "status": {"phase": "Done"},
            }),
        )
        .expect("a TrainJob");
    let uid = created["metadata"]["uid"]
        .as_str()
        .expect("uid")
        .to_string();
    wait_for("the new kind watched and its job delivered", || {
        let health = daemon.clusters().get("alpha").cloned()?;
        let delivered = setup
            .lines("log/events.jsonl")
            .iter()
            .any(|l| uid_of(l) == uid && l["phase"] == "succeeded");
        (health.kinds_not_installed.is_empty() && delivered).then_some(())
    })
    .await;
    daemon.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_probes_and_status_follow_the_daemon() {
    init_logs();
    let sim = SimCluster::start("alpha").await.expect("sim");
    let setup = Setup::new("telemetry: {listen: \"127.0.0.1:0\"}\n");
    let (daemon, addr) = start_logging(&setup, &sim).await;
    wait_synced(&daemon, "alpha").await;

    assert_eq!(http_get(addr, "/healthz").await.0, 200);
    let (code, body) = http_get(addr, "/readyz").await;
    assert_eq!(code, 200, "{body}");

    // Before any event, every series an SLO or alert reads is there at 0, labelled with the
    // configured kind's name (batch and Volcano jobs are both `Job`).
    wait_plugin_serving(&daemon, "log").await;
    let (_, page) = http_get(addr, "/metrics").await;
    for series in [
        "jobrelay_events_delivered_total{plugin=\"log\",cluster=\"alpha\",kind=\"volcano-job\"}",
        "jobrelay_events_dead_lettered_total{plugin=\"log\",cluster=\"alpha\",kind=\"batch-job\"}",
        "jobrelay_events_observed_total{cluster=\"alpha\",kind=\"mpi-job\"}",
        "jobrelay_plugin_refusals_total{plugin=\"log\",limit=\"kv_quota\"}",
        "jobrelay_plugin_log_lines_total{plugin=\"log\",level=\"error\"}",
        "jobrelay_plugin_load_failures_total{plugin=\"log\",reason=\"compile\"}",
        "jobrelay_dead_letters_stored{plugin=\"log\"}",
        "jobrelay_event_delivery_seconds_count{plugin=\"log\"}",
    ] {
        assert_eq!(sample(&page, series), Some(0.0), "{series} at 0:\n{page}");
    }
    assert_eq!(
        sample(&page, "jobrelay_plugin_up{plugin=\"log\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(&page, "jobrelay_plugin_timeout_seconds{plugin=\"log\"}"),
        Some(5.0),
        "the log manifest's timeout_ms: {page}"
    );

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
            "jobrelay_events_delivered_total{plugin=\"log\",cluster=\"alpha\",kind=\"batch-job\"}"
        ),
        Some(delivered as f64),
        "every delivery was of a batch Job on alpha: {page}"
    );
    assert_eq!(
        sample(
            &page,
            "jobrelay_events_delivered_total{plugin=\"log\",cluster=\"alpha\",kind=\"volcano-job\"}"
        ),
        Some(0.0),
        "a Volcano job is a Job too, and none was delivered: {page}"
    );
    assert!(
        sum(
            &page,
            "jobrelay_events_observed_total{cluster=\"alpha\",kind=\"batch-job\"}"
        ) >= delivered as f64,
        "{page}"
    );
    // Observed to acknowledged, once per delivered event.
    assert_eq!(
        sample(
            &page,
            "jobrelay_event_delivery_seconds_count{plugin=\"log\"}"
        ),
        Some(delivered as f64),
        "{page}"
    );
    assert_eq!(
        sample(
            &page,
            "jobrelay_event_delivery_seconds_bucket{le=\"+Inf\",plugin=\"log\"}"
        ),
        Some(delivered as f64),
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
    // Without an Accept header (curl, a browser): the classic text format, which promtool
    // reads and lints as Prometheus would.
    let (_, answer) = http_exchange(addr, "/metrics", "")
        .await
        .expect("GET /metrics");
    assert!(
        answer.contains("content-type: text/plain; version=0.0.4"),
        "{answer}"
    );
    assert!(
        page.contains("# TYPE jobrelay_events_delivered_total counter"),
        "{page}"
    );
    assert!(!page.contains("# EOF"), "{page}");
    promtool_checks(&page);
    // A scraper asking for OpenMetrics (as Prometheus does) gets it.
    let accept =
        "Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n";
    let (_, answer) = http_exchange(addr, "/metrics", accept)
        .await
        .expect("GET /metrics");
    assert!(
        answer.contains("content-type: application/openmetrics-text; version=1.0.0"),
        "{answer}"
    );
    assert!(
        answer.contains("# TYPE jobrelay_events_delivered counter"),
        "{answer}"
    );
    assert!(
        answer.trim_end().ends_with("# EOF"),
        "OpenMetrics ends with # EOF"
    );

    let (code, body) = http_get(addr, "/status").await;
    assert_eq!(code, 200);
    let status: Value = serde_json::from_str(&body).expect("status is JSON");
    assert_eq!(status["ready"], true);
    assert_eq!(status["clusters"]["alpha"]["state"], "synced");
    assert_eq!(status["plugins"]["log"]["lane"]["delivered"], delivered);

    // A cluster that cannot be reached is not this replica's fault: /status and the metrics
    // say which and why, and the replica stays ready (one bad cluster must not take every
    // replica out of service).
    let dead = setup.path("clusters/unreachable.yaml");
    let kubeconfig = sim
        .kubeconfig_yaml()
        .replace(&sim.addr().to_string(), "127.0.0.1:9");
    write_atomic(&dead, kubeconfig.as_bytes());
    let state = wait_for("the unreachable cluster's failure in /status", || {
        let health = daemon.clusters().get("unreachable").cloned()?;
        (health.state == jobrelay::clusters::health::HealthState::Error
            && health.last_error.is_some())
        .then_some(health.state)
    })
    .await;
    let (code, body) = http_get(addr, "/readyz").await;
    assert_eq!(
        code, 200,
        "a cluster that is down is not readiness: {body} ({state:?})"
    );
    let (_, body) = http_get(addr, "/status").await;
    let status: Value = serde_json::from_str(&body).expect("status is JSON");
    assert_eq!(
        status["clusters"]["unreachable"]["state"], "error",
        "{body}"
    );
    assert_eq!(status["ready"], true, "{body}");
    assert_eq!(status["state_store"]["reachable"], true, "{body}");
    let (_, page) = http_get(addr, "/metrics").await;
    assert_eq!(sample(&page, "jobrelay_ready"), Some(1.0), "{page}");
    assert_eq!(
        sample(&page, "jobrelay_state_store_up"),
        Some(1.0),
        "{page}"
    );
    assert_eq!(
        sample(
            &page,
            "jobrelay_cluster_health{cluster=\"unreachable\",state=\"error\"}"
        ),
        Some(1.0),
        "{page}"
    );
    daemon.shutdown(Duration::from_secs(5)).await;
}

/// A daemon in a coordination mode with telemetry on and the event-log plugin, watching
/// Volcano jobs (with jobrelay's finalizer), its Leases on `sim` too.
/// A replica electing through the simulated home cluster, its state store on the test MariaDB
/// under `prefix` (replicas that share the work must share the store).
async fn coordinated(
    sim: &SimCluster,
    mode: &str,
    identity: &str,
    prefix: &str,
) -> (Setup, Daemon) {
    let setup = Setup::new(&format!(
        "kinds: [{{name: volcano-job, finalizer: true}}]\n\
         telemetry: {{listen: \"127.0.0.1:0\"}}\n\
         coordination: {{mode: {mode}, identity: {identity}, kubeconfig: clusters/{}.yaml, \
         namespace: jobrelay, lease_name: relay, lease_duration_seconds: 3, \
         renew_deadline_seconds: 2, retry_period_seconds: 1}}\n",
        sim.name()
    ));
    point_at_shared_store(&setup, prefix);
    setup.install_wasm("event-log", "event-log.wasm");
    setup.write_manifest(
        "log",
        &Setup::log_manifest("event-log.wasm", "log", "events.jsonl", ""),
    );
    setup.add_cluster(sim);
    let daemon = Daemon::start(setup.config_dir()).await.expect("daemon");
    (setup, daemon)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_follower_and_shard_show_in_metrics_status_and_readiness() {
    init_logs();
    let sim = SimCluster::start("alpha").await.expect("sim");

    // Two replicas electing: one leads; the other watches too, ready, but delivers nothing and
    // leaves the finalizer to the leader.
    let prefix = format!("t{}_coord_", std::process::id());
    drop_state_tables(&prefix).await;
    let (a_setup, a) = coordinated(&sim, "leader", "a", &prefix).await;
    wait_synced(&a, "alpha").await;
    let (b_setup, b) = coordinated(&sim, "leader", "b", &prefix).await;
    let b_addr = b.telemetry_addr().expect("telemetry");
    let started = std::time::Instant::now();
    loop {
        let (_, body) = http_get(b_addr, "/status").await;
        let status: Value = serde_json::from_str(&body).expect("JSON");
        if status["coordination"]["role"] == "follower" && status["coordination"]["holder"] == "a" {
            break;
        }
        assert!(started.elapsed() < DEADLINE, "b never saw a lead: {status}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_synced(&b, "alpha").await;
    let (code, _) = http_get(b_addr, "/readyz").await;
    assert_eq!(code, 200, "a follower is ready to take over");
    let _job = succeeded_and_logged(&sim, &a_setup, Flavor::Volcano, "watched").await;
    // The follower observes the job too (its own watches, shown on its status).
    let started = std::time::Instant::now();
    let status = loop {
        let (_, body) = http_get(b_addr, "/status").await;
        let status: Value = serde_json::from_str(&body).expect("JSON");
        let seen = status["recent_events"]
            .as_array()
            .is_some_and(|r| r.iter().any(|e| e["name"] == "watched"));
        if seen {
            break status;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "the follower never saw the job: {status}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(status["clusters"]["alpha"]["state"], "synced", "{status}");
    assert!(
        b_setup.lines("log/events.jsonl").is_empty(),
        "the follower delivered"
    );
    assert_eq!(
        b.plugins()["log"].lane.as_ref().map(|l| l.delivered),
        Some(0)
    );
    // jobrelay's finalizer, once: the leader adds it, the follower leaves it alone.
    wait_for("jobrelay's finalizer on the job", || {
        let job = sim
            .get(&jobrelay_testkit::Gvr::VOLCANO_JOB, "ml", "watched")
            .ok()?;
        (job["metadata"]["finalizers"] != Value::Null).then_some(())
    })
    .await;
    let finalizers = sim
        .get(&jobrelay_testkit::Gvr::VOLCANO_JOB, "ml", "watched")
        .expect("job")["metadata"]["finalizers"]
        .clone();
    assert_eq!(
        finalizers,
        serde_json::json!(["jobrelay.io/delivery"]),
        "jobrelay's finalizer, once"
    );
    let (_, page) = http_get(b_addr, "/metrics").await;
    assert_eq!(sample(&page, "jobrelay_leader"), Some(0.0), "{page}");
    // The standby saw the job end too, but its job SLIs are the leader's to export: a
    // standby's copies would only double every series.
    assert!(
        !page.contains("jobrelay_jobs_finished_total{"),
        "a standby exports no job SLIs: {page}"
    );
    let (_, page) = http_get(a.telemetry_addr().expect("telemetry"), "/metrics").await;
    assert_eq!(sample(&page, "jobrelay_leader"), Some(1.0), "{page}");
    assert!(
        page.contains("jobrelay_jobs_finished_total{cluster=\"alpha\""),
        "the leader exports them: {page}"
    );
    let (_, html) = http_get(b_addr, "/").await;
    assert!(html.contains("follower"), "the status page says so");
    b.shutdown(Duration::from_secs(5)).await;
    a.shutdown(Duration::from_secs(5)).await;

    // One shard alone holds every cluster.
    let (_setup, shard) = coordinated(&sim, "sharded", "s", &prefix).await;
    wait_synced(&shard, "alpha").await;
    let addr = shard.telemetry_addr().expect("telemetry");
    let (_, page) = http_get(addr, "/metrics").await;
    assert_eq!(
        sample(&page, "jobrelay_shard_owned{cluster=\"alpha\"}"),
        Some(1.0),
        "{page}"
    );
    assert_eq!(sample(&page, "jobrelay_shard_members"), Some(1.0), "{page}");
    let (_, body) = http_get(addr, "/status").await;
    let status: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(status["coordination"]["role"], "sharded", "{status}");
    assert_eq!(status["coordination"]["owned"][0], "alpha", "{status}");

    // A second shard joins: one of the two holds alpha, and the other reports it at 0, so a
    // cluster held by nobody would read 0 everywhere rather than have no series.
    let (_setup_t, other) = coordinated(&sim, "sharded", "t", &prefix).await;
    let other_addr = other.telemetry_addr().expect("telemetry");
    let started = std::time::Instant::now();
    loop {
        let (_, a) = http_get(addr, "/metrics").await;
        let (_, b) = http_get(other_addr, "/metrics").await;
        let owned = |page: &str| sample(page, "jobrelay_shard_owned{cluster=\"alpha\"}");
        let members = |page: &str| sample(page, "jobrelay_shard_members");
        let both_see_two = members(&a) == Some(2.0) && members(&b) == Some(2.0);
        let mut held: Vec<Option<f64>> = vec![owned(&a), owned(&b)];
        held.sort_by(|x, y| x.partial_cmp(y).unwrap_or(std::cmp::Ordering::Equal));
        if both_see_two && held == [Some(0.0), Some(1.0)] {
            break;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "one shard holds alpha and the other reports it at 0:\n{a}\n{b}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    other.shutdown(Duration::from_secs(5)).await;
    shard.shutdown(Duration::from_secs(5)).await;
    drop_state_tables(&prefix).await;
}

/// Readiness follows the state store: with its database killed the replica cannot write
/// acknowledgements, so `/readyz` answers 503 naming the store (and `jobrelay_state_store_up`
/// is 0) within one check; with the database back it is ready again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_the_state_store() {
    init_logs();
    let db = tokio::task::spawn_blocking(|| {
        let mut db = PrivateMariaDb::init()?;
        db.start()?;
        Ok::<_, std::io::Error>(db)
    })
    .await
    .expect("task")
    .expect("a private MariaDB (mariadb-install-db and mariadbd must be installed)");
    let sim = SimCluster::start("alpha").await.expect("sim");
    let setup = Setup::new("");
    write_atomic(
        &setup.path("jobrelay.yaml"),
        format!(
            "plugin_dir: wasm\nstate: {{url: \"{}\"}}\nrescan_seconds: 2\ndebounce_ms: 100\n\
             telemetry: {{listen: \"127.0.0.1:0\"}}\n",
            db.url()
        )
        .as_bytes(),
    );
    let (daemon, addr) = start_logging(&setup, &sim).await;
    wait_plugin_serving(&daemon, "log").await;
    assert_eq!(http_get(addr, "/readyz").await.0, 200);

    let mut db = db;
    db.kill();
    let body = probe_until(addr, 503).await;
    assert!(body.contains("state store"), "{body}");
    let (_, page) = http_get(addr, "/metrics").await;
    assert_eq!(
        sample(&page, "jobrelay_state_store_up"),
        Some(0.0),
        "{page}"
    );

    let db = tokio::task::spawn_blocking(move || db.start().map(|()| db))
        .await
        .expect("task")
        .expect("restart");
    probe_until(addr, 200).await;
    daemon.shutdown(Duration::from_secs(5)).await;
    drop(db);
}

/// `/readyz` polled until it answers `code` (the store is checked every 10 s, with 5 s to
/// answer); its body.
async fn probe_until(addr: std::net::SocketAddr, code: u16) -> String {
    let started = std::time::Instant::now();
    loop {
        let (got, body) = http_get(addr, "/readyz").await;
        if got == code {
            return body;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "/readyz never answered {code}: {got} {body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The dead-letter backlog is what the store holds (stored by an earlier process here), not
/// what this process added; failed loads are counted by reason; the build and the process's
/// CPU, memory and descriptors are there under the names Prometheus users know.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stored_backlog_load_failures_build_and_process_show_in_metrics() {
    let sim = SimCluster::start("alpha").await.expect("sim");
    let setup = Setup::new("kinds: [{name: batch-job}]\ntelemetry: {listen: \"127.0.0.1:0\"}\n");
    // Two dead letters left by an earlier run, before this daemon starts.
    {
        let store = jobrelay_state::open_store(&jobrelay_state::StateBackend::Sqlite(
            setup.path("state/jobrelay.db"),
        ))
        .await
        .expect("open state");
        let event: jobrelay_contract::event::JobEvent = serde_json::from_value(serde_json::json!({
            "id": "alpha/u1/1", "cluster": "alpha", "api_version": "batch/v1", "kind": "Job",
            "namespace": "ml", "name": "train", "uid": "u1", "resource_version": "1",
            "phase": "failed", "raw_phase": "Failed", "transition_time": "2026-01-01T00:00:00Z",
            "labels": {}, "annotations": {}, "object_json": "{}"
        }))
        .expect("event");
        for _ in 0..2 {
            store
                .add_dead_letter("log", &event, "gave up", 3)
                .await
                .expect("dead letter");
        }
        store.close().await;
    }
    setup.install_wasm("not-a-plugin", "not-a-plugin.wasm");
    setup.write_manifest("broken", "wasm: not-a-plugin.wasm\n");
    let (daemon, addr) = start_logging(&setup, &sim).await;

    // The store is checked (and its dead letters counted) at start and then every 10 s.
    let mut page = String::new();
    for _ in 0..150 {
        page = http_get(addr, "/metrics").await.1;
        let counted = sample(&page, "jobrelay_dead_letters_stored{plugin=\"log\"}") == Some(2.0);
        let failed = page.contains("jobrelay_plugin_load_failures_total{plugin=\"broken\"");
        if counted && failed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        sample(&page, "jobrelay_dead_letters_stored{plugin=\"log\"}"),
        Some(2.0),
        "{page}"
    );
    assert_eq!(
        sample(
            &page,
            "jobrelay_plugin_load_failures_total{plugin=\"broken\",reason=\"wrong_world\"}"
        ),
        Some(1.0),
        "{page}"
    );
    assert_eq!(
        sample(
            &page,
            &format!(
                "jobrelay_build_info{{version=\"{}\"}}",
                env!("CARGO_PKG_VERSION")
            )
        ),
        Some(1.0),
        "{page}"
    );
    let rss = sample(&page, "process_resident_memory_bytes").unwrap_or_default();
    assert!(rss > 1e6 && rss < 1e11, "{page}");
    assert!(
        sample(&page, "process_cpu_seconds_total").is_some_and(|s| s > 0.0),
        "{page}"
    );
    assert!(
        sample(&page, "process_open_fds").is_some_and(|n| n >= 3.0),
        "{page}"
    );
    assert!(
        sample(&page, "process_start_time_seconds").is_some_and(|t| t > 1.7e9),
        "{page}"
    );
    // An unlabelled sample reads `name value`, not `name{} value`.
    assert!(
        page.lines().any(|l| l.starts_with("jobrelay_ready ")),
        "{page}"
    );
    assert!(!page.contains("{}"), "{page}");

    let (_, body) = http_get(addr, "/status").await;
    let status: Value = serde_json::from_str(&body).expect("status is JSON");
    assert_eq!(status["state_store"]["dead_letters"]["log"], 2, "{body}");
    assert_eq!(
        status["plugins"]["broken"]["load_failures"]["wrong_world"], 1,
        "{body}"
    );
    let (_, html) = http_get(addr, "/").await;
    assert!(html.contains("dead letters stored"), "{html}");
    daemon.shutdown(Duration::from_secs(5)).await;
}

/// `promtool check metrics` reads `page` (the classic text format) without a complaint.
fn promtool_checks(page: &str) {
    use std::io::Write;
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool runs (tests/tools/install.sh installs it)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(page.as_bytes())
        .expect("write the page");
    let out = child.wait_with_output().expect("promtool ends");
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{page}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
