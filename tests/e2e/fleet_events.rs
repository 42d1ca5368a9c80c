//! Fleet events through the daemon: a simulated cluster's API server goes away and comes back,
//! fleet rules fire and resolve on jobs that fail and succeed, and the plugins that asked for
//! fleet events get each crossing exactly once — not for a blip shorter than the hysteresis,
//! not again from a restarted daemon that finds the outage still going, and as a Feishu card
//! for the chat. Real clusters' API over HTTP (the simulator), real wasmtime, real components.

use std::time::{Duration, Instant};

use jobrelay::clusters::health::HealthState;
use jobrelay::daemon::Daemon;
use jobrelay_e2e::*;
use jobrelay_fleet::availability::Availability;
use jobrelay_testkit::{FeishuReceiver, Flavor, JobDriver, SimCluster};

/// Checks every 300 ms; offline after 3 failed in a row, online after 2 good ones.
const MAIN: &str = "kinds: [{name: batch-job}]\n\
     telemetry: {listen: \"127.0.0.1:0\"}\n\
     cluster_health: {check_interval_ms: 300, offline_after: 3, online_after: 2}\n";

const PROBE: &str = "wasm: probe.wasm\nfleet_events: [clusters, rules]\n\
     retry: {max_attempts: 20, min_delay_ms: 50, max_delay_ms: 200}\n\
     grants:\n  filesystem:\n    - {host: out/probe, guest: /data, writable: true}\n";

/// The probe's fleet lines: `(kind, cluster, rule)`.
fn fleet_lines(setup: &Setup) -> Vec<(String, String, Option<String>)> {
    setup
        .lines("probe/probe.jsonl")
        .into_iter()
        .filter_map(|l| {
            Some((
                l["fleet"].as_str()?.to_string(),
                l["cluster"].as_str()?.to_string(),
                l["rule"].as_str().map(str::to_string),
            ))
        })
        .collect()
}

fn availability(daemon: &Daemon, cluster: &str) -> Option<Availability> {
    daemon.clusters().get(cluster).map(|h| h.availability)
}

async fn wait_availability(daemon: &Daemon, cluster: &str, want: Availability) {
    wait_for(&format!("{cluster} {want:?}"), || {
        (availability(daemon, cluster) == Some(want)).then_some(())
    })
    .await;
}

fn setup_with(main_extra: &str, sims: &[&SimCluster]) -> Setup {
    let setup = Setup::new(&format!("{MAIN}{main_extra}"));
    setup.install_wasm("probe", "probe.wasm");
    setup.write_manifest("probe", PROBE);
    for sim in sims {
        setup.add_cluster(sim);
    }
    setup
}

/// feishu-notify taking rule fleet events (and no job: its filter names no namespace), posting
/// to `webhook` signed with `secret`.
fn install_feishu_for_rules(setup: &Setup, webhook: &str, secret: &str) {
    setup.install_wasm("feishu-notify", "feishu-notify.wasm");
    setup.write_manifest(
        "feishu",
        &format!(
            "wasm: feishu-notify.wasm\nfleet_events: [rules]\n\
             filter: {{namespaces: [no-such-namespace]}}\n\
             grants:\n  http: {{allow: [\"http://127.0.0.1:*\"], allow_private: true}}\n  kv: true\n\
             config:\n  webhook: \"{webhook}\"\n  secret: \"{secret}\"\n"
        ),
    );
}

async fn start(setup: &Setup, sims: &[&SimCluster]) -> Daemon {
    let daemon = Daemon::start(setup.config_dir())
        .await
        .expect("daemon starts");
    for sim in sims {
        wait_synced(&daemon, sim.name()).await;
    }
    daemon
}

/// An outage is announced once when it crosses `offline_after`, not again while it lasts, not
/// again by a daemon restarted during it; its end once, after `online_after` good checks —
/// with no job changing on the cluster (a resumed, idle watch counts as in sync again). A
/// second outage is a new crossing with its own id, and its end, while the daemon was down, is
/// told by the restarted daemon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_reaches_the_plugin_once_across_a_restart() {
    init_logs();
    let east = SimCluster::start("east").await.expect("sim");
    let west = SimCluster::start("west").await.expect("sim");
    let setup = setup_with("", &[&east, &west]);
    let daemon = start(&setup, &[&east, &west]).await;
    wait_availability(&daemon, "west", Availability::Online).await;
    // A first verdict of online ends no outage: nothing to tell.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(fleet_lines(&setup), [], "nothing happened yet");

    west.outage_hard(true).expect("outage");
    let started = Instant::now();
    wait_for("the offline event", || {
        (!fleet_lines(&setup).is_empty()).then_some(())
    })
    .await;
    // Three checks 300 ms apart: not before the third.
    assert!(started.elapsed() >= Duration::from_millis(600));
    assert_eq!(
        fleet_lines(&setup),
        [("cluster-offline".to_string(), "west".to_string(), None)]
    );
    assert_eq!(availability(&daemon, "west"), Some(Availability::Offline));
    assert_eq!(availability(&daemon, "east"), Some(Availability::Online));
    let (_, status) = get_json(daemon.telemetry_addr().expect("telemetry"), "/status").await;
    assert_eq!(status["clusters"]["west"]["availability"], "offline");
    assert!(status["clusters"]["west"]["failed_checks"].as_u64() >= Some(3));
    // More failed checks: the same outage.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(fleet_lines(&setup).len(), 1);

    // Restarted during the outage: the new daemon finds west offline and announces it, and
    // the lane, which remembers what the plugin was told, keeps it from the plugin.
    daemon.shutdown(Duration::from_secs(5)).await;
    let daemon = Daemon::start(setup.config_dir())
        .await
        .expect("daemon restarts");
    wait_synced(&daemon, "east").await;
    wait_availability(&daemon, "west", Availability::Offline).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(fleet_lines(&setup).len(), 1, "{:?}", fleet_lines(&setup));

    // Back, with no job changing anywhere: online once, and the streams in sync again.
    west.outage_hard(false).expect("back");
    wait_for("the online event", || {
        (fleet_lines(&setup).len() == 2).then_some(())
    })
    .await;
    assert_eq!(
        fleet_lines(&setup)[1],
        ("cluster-online".to_string(), "west".to_string(), None)
    );
    wait_for("west's streams in sync without an event", || {
        let h = daemon.clusters().get("west").cloned()?;
        (h.state == HealthState::Synced).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(fleet_lines(&setup).len(), 2);
    let (_, metrics) = http_get(daemon.telemetry_addr().expect("telemetry"), "/metrics").await;
    for line in [
        "jobrelay_cluster_availability{cluster=\"west\",state=\"online\"} 1",
        "jobrelay_cluster_availability{cluster=\"west\",state=\"offline\"} 0",
        "jobrelay_cluster_health_checks_failed{cluster=\"west\"} 0",
    ] {
        assert!(
            metrics.contains(line),
            "no `{line}` in /metrics:\n{metrics}"
        );
    }
    assert!(metrics.contains("jobrelay_cluster_last_sync_timestamp_seconds{cluster=\"west\"}"));
    assert!(
        metrics.contains(
            "jobrelay_cluster_api_requests_total{cluster=\"west\",verb=\"get\",result=\"error\"}"
        ),
        "the failed checks are API errors:\n{metrics}"
    );

    // Down again (a new crossing, its own event), then back while the daemon is down: the
    // restarted daemon's first verdict, online, ends the outage the plugin was told of.
    west.outage_hard(true).expect("outage");
    wait_for("the second offline event", || {
        (fleet_lines(&setup).len() == 3).then_some(())
    })
    .await;
    daemon.shutdown(Duration::from_secs(5)).await;
    west.outage_hard(false).expect("back");
    let daemon = start(&setup, &[&east, &west]).await;
    wait_for("the online event of the restarted daemon", || {
        (fleet_lines(&setup).len() == 4).then_some(())
    })
    .await;
    let kinds: Vec<String> = fleet_lines(&setup).into_iter().map(|(k, _, _)| k).collect();
    assert_eq!(
        kinds,
        [
            "cluster-offline",
            "cluster-online",
            "cluster-offline",
            "cluster-online"
        ]
    );
    let ids: std::collections::BTreeSet<String> = setup
        .lines("probe/probe.jsonl")
        .iter()
        .filter_map(|l| l["id"].as_str().map(str::to_string))
        .collect();
    assert_eq!(ids.len(), 4, "each crossing its own id: {ids:?}");
    daemon.shutdown(Duration::from_secs(5)).await;
}

/// Blips shorter than the hysteresis — each fails at most two checks in a row — change
/// nothing, however many there are; the status never says offline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blips_at_the_hysteresis_edge_are_not_news() {
    init_logs();
    let east = SimCluster::start("east").await.expect("sim");
    let setup = setup_with("", &[&east]);
    let daemon = start(&setup, &[&east]).await;
    wait_availability(&daemon, "east", Availability::Online).await;
    let mut degraded = false;
    for _ in 0..8 {
        east.outage_hard(true).expect("outage");
        // Under two check intervals: at most two checks fall in it.
        tokio::time::sleep(Duration::from_millis(350)).await;
        degraded |= availability(&daemon, "east") == Some(Availability::Degraded);
        assert_ne!(availability(&daemon, "east"), Some(Availability::Offline));
        east.outage_hard(false).expect("back");
        // Three good checks reset the run.
        for _ in 0..12 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert_ne!(availability(&daemon, "east"), Some(Availability::Offline));
        }
    }
    assert!(degraded, "a failed check shows as degraded");
    assert_eq!(fleet_lines(&setup), [], "no crossing, no event");
    daemon.shutdown(Duration::from_secs(5)).await;
}

/// A fleet rule fires once its condition held for its `for`, resolves when it stops, and fires
/// again on a second wave; each is one event to the probe (which fails the first try of each,
/// so each is retried) and one Feishu card, red then green then red.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_fires_resolves_and_fires_again_as_feishu_cards() {
    init_logs();
    let east = SimCluster::start("east").await.expect("sim");
    let feishu = FeishuReceiver::start().await.expect("feishu receiver");
    let token = "fleet-bot";
    let webhook = feishu.add_bot(token, Some("SEC-fleet"), None);
    let setup = setup_with(
        "fleet:\n  evaluate_interval_ms: 200\n  rules:\n\
         \x20   - {name: batch-failures, measure: failure_ratio, above: 0.5, for: 1s, window: 1h, min_jobs: 2, kinds: [batch-job]}\n",
        &[&east],
    );
    setup.write_manifest(
        "probe",
        &PROBE.replace("grants:", "config: {fleet_behave: \"flaky:1\"}\ngrants:"),
    );
    install_feishu_for_rules(&setup, &webhook, "SEC-fleet");
    let daemon = start(&setup, &[&east]).await;
    let end_jobs = |prefix: &str, n: usize, fail: bool| {
        for i in 0..n {
            let mut job = JobDriver::builder(Flavor::Batch, "ml", &format!("{prefix}-{i}"))
                .without_pods()
                .create(&east)
                .expect("create");
            job.running().expect("running");
            if fail {
                job.failed("BackoffLimitExceeded").expect("failed");
            } else {
                job.succeeded().expect("succeeded");
            }
        }
    };
    let rule_lines = |setup: &Setup| -> Vec<String> {
        fleet_lines(setup)
            .into_iter()
            .filter(|(_, _, rule)| rule.as_deref() == Some("batch-failures"))
            .map(|(kind, _, _)| kind)
            .collect()
    };
    // 3 of 3 failed: fires (after holding 1 s).
    end_jobs("bad", 3, true);
    wait_for("the rule firing", || {
        (!rule_lines(&setup).is_empty()).then_some(())
    })
    .await;
    // 3 of 9 failed: resolves.
    end_jobs("good", 6, false);
    wait_for("the rule resolving", || {
        (rule_lines(&setup).len() >= 2).then_some(())
    })
    .await;
    // 12 of 18: fires again.
    end_jobs("worse", 9, true);
    wait_for("the rule firing again", || {
        (rule_lines(&setup).len() >= 3).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        rule_lines(&setup),
        ["rule-firing", "rule-resolved", "rule-firing"],
        "each crossing once, in order"
    );
    let lane = daemon.plugins()["probe"].lane.clone().expect("lane");
    assert!(
        lane.retried >= 3,
        "each first try failed and was retried: {lane:?}"
    );
    assert_eq!(lane.dead_lettered, 0, "{lane:?}");

    let cards = feishu
        .wait_for_messages(token, 3, Duration::from_secs(30))
        .await
        .expect("three cards");
    let headers: Vec<(String, String)> = cards
        .iter()
        .map(|c| {
            let header = &c.body["card"]["header"];
            (
                header["template"].as_str().unwrap_or_default().to_string(),
                header["title"]["content"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    assert_eq!(
        headers,
        [
            ("red".into(), "Rule batch-failures is firing on east".into()),
            (
                "green".into(),
                "Rule batch-failures resolved on east".into()
            ),
            ("red".into(), "Rule batch-failures is firing on east".into()),
        ]
    );
    assert!(cards.iter().all(|c| c.signed), "signed cards");
    assert_eq!(cards[0].field("Threshold").as_deref(), Some("0.5"));
    assert_eq!(cards[0].field("Cluster").as_deref(), Some("east"));
    let value: f64 = cards[1]
        .field("Value")
        .and_then(|v| v.parse().ok())
        .expect("a value");
    assert!((value - 1.0 / 3.0).abs() < 0.01, "3 of 9 failed: {value}");
    // The job kinds the feishu plugin takes are none: only fleet events reached it.
    assert_eq!(feishu.messages(token).len(), 3);
    let (_, metrics) = http_get(daemon.telemetry_addr().expect("telemetry"), "/metrics").await;
    assert!(
        metrics.contains("jobrelay_fleet_rule_firing{rule=\"batch-failures\",cluster=\"east\"} 1"),
        "{metrics}"
    );
    daemon.shutdown(Duration::from_secs(5)).await;
}

/// A timer on one job through the whole daemon: a batch Job left pending past
/// `longer_than` fires once, as a red Feishu card whose summary names the job and a
/// `rule-firing` line for the probe; `/metrics` counts it; a job that runs before its time
/// never fires; the stuck one running resolves, once, as a green card.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_on_a_job_fires_once_as_a_card_and_resolves_when_it_runs() {
    init_logs();
    let east = SimCluster::start("east").await.expect("sim");
    let feishu = FeishuReceiver::start().await.expect("feishu receiver");
    let token = "timer-bot";
    let webhook = feishu.add_bot(token, Some("SEC-timer"), None);
    let setup = setup_with(
        "fleet:\n  evaluate_interval_ms: 200\n  timers:\n\
         \x20   - {name: pending-long, state: pending, longer_than: 2s, kinds: [batch-job]}\n",
        &[&east],
    );
    install_feishu_for_rules(&setup, &webhook, "SEC-timer");
    let daemon = start(&setup, &[&east]).await;
    let mut stuck = JobDriver::builder(Flavor::Batch, "ml", "stuck")
        .without_pods()
        .create(&east)
        .expect("create");
    let mut quick = JobDriver::builder(Flavor::Batch, "ml", "quick")
        .without_pods()
        .create(&east)
        .expect("create");
    quick.running().expect("running");
    let timer_lines = |setup: &Setup| -> Vec<String> {
        fleet_lines(setup)
            .into_iter()
            .filter(|(_, _, rule)| rule.as_deref() == Some("pending-long"))
            .map(|(kind, _, _)| kind)
            .collect()
    };
    wait_for("the timer firing", || {
        (!timer_lines(&setup).is_empty()).then_some(())
    })
    .await;
    let addr = daemon.telemetry_addr().expect("telemetry");
    let (_, metrics) = http_get(addr, "/metrics").await;
    assert!(
        metrics.contains("jobrelay_fleet_timers_firing{timer=\"pending-long\"} 1"),
        "{metrics}"
    );
    // Many more evaluations: still one firing.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(timer_lines(&setup), ["rule-firing"]);
    // The job view filters on the firing timer and shows it.
    let names = |page: &serde_json::Value| -> Vec<(String, serde_json::Value)> {
        page["items"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .map(|j| {
                        (
                            j["name"].as_str().unwrap_or_default().to_string(),
                            j["timers"].clone(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let (_, page) = get_json(addr, "/api/v1/jobs?timer=pending-long").await;
    assert_eq!(
        names(&page),
        [("stuck".to_string(), serde_json::json!(["pending-long"]))],
        "{page}"
    );
    let (_, page) = get_json(addr, "/api/v1/jobs?timer=no-such-timer").await;
    assert_eq!(names(&page), [], "{page}");

    stuck.running().expect("running");
    wait_for("the timer resolving", || {
        (timer_lines(&setup).len() >= 2).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(timer_lines(&setup), ["rule-firing", "rule-resolved"]);
    let (_, page) = get_json(addr, "/api/v1/jobs?timer=*").await;
    assert_eq!(names(&page), [], "no timer fires any more: {page}");
    let (_, metrics) = http_get(addr, "/metrics").await;
    assert!(
        metrics.contains("jobrelay_fleet_timers_firing{timer=\"pending-long\"} 0"),
        "{metrics}"
    );

    let cards = feishu
        .wait_for_messages(token, 2, Duration::from_secs(30))
        .await
        .expect("two cards");
    let summaries: Vec<(String, String)> = cards
        .iter()
        .map(|c| {
            (
                c.body["card"]["header"]["template"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                c.field("Summary").unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(summaries.len(), 2, "{summaries:?}");
    assert_eq!(summaries[0].0, "red", "{summaries:?}");
    assert!(
        summaries[0].1.starts_with("ml/stuck pending ")
            && summaries[0].1.ends_with("on east (longer than 2s)"),
        "{summaries:?}"
    );
    assert_eq!(summaries[1].0, "green", "{summaries:?}");
    assert!(
        summaries[1]
            .1
            .starts_with("ml/stuck is no longer pending on east"),
        "{summaries:?}"
    );
    assert!(
        !summaries.iter().any(|(_, s)| s.contains("quick")),
        "a job that ran in time never fires: {summaries:?}"
    );
    daemon.shutdown(Duration::from_secs(5)).await;
}

/// A manifest asking for fleet events for a plugin built against an older world is refused
/// with the field named; the rest of the daemon runs on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_events_need_a_plugin_that_takes_them() {
    init_logs();
    let east = SimCluster::start("east").await.expect("sim");
    let setup = setup_with("", &[&east]);
    setup.install_wasm("older", "older.wasm");
    setup.write_manifest("older", "wasm: older.wasm\nfleet_events: [clusters]\n");
    let daemon = start(&setup, &[&east]).await;
    let error = wait_for("the refusal", || {
        let last = daemon.plugins().get("older")?.last_reload.clone()?;
        (!last.ok).then_some(last.error.unwrap_or_default())
    })
    .await;
    assert!(
        error.contains("fleet_events") && error.contains("jobrelay:plugin@0.2.0"),
        "{error}"
    );
    assert!(daemon.plugins()["probe"].serving.is_some());
    assert!(daemon.plugins()["older"].serving.is_none());
    daemon.shutdown(Duration::from_secs(5)).await;
}

/// A fleet event the plugin keeps failing is a dead letter like any event: kept in the store,
/// listed with its id, and delivered when the operator replays it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_fleet_event_is_dead_lettered_and_replayed() {
    use jobrelay::cli::ops::dead_letters::{DeadLettersCommand, run};
    init_logs();
    let west = SimCluster::start("west").await.expect("sim");
    let setup = setup_with("", &[&west]);
    setup.write_manifest(
        "probe",
        &PROBE
            .replace(
                "retry: {max_attempts: 20, min_delay_ms: 50, max_delay_ms: 200}",
                "retry: {max_attempts: 2, min_delay_ms: 5, max_delay_ms: 10}",
            )
            .replace(
                "grants:",
                "config: {fleet_behave.west: \"flaky:3\"}\ngrants:",
            ),
    );
    let daemon = start(&setup, &[&west]).await;
    wait_availability(&daemon, "west", Availability::Online).await;
    west.outage_hard(true).expect("outage");
    wait_for("the offline event dead-lettered", || {
        let lane = daemon.plugins().get("probe")?.lane.clone()?;
        (lane.dead_lettered == 1 && lane.pending == 0).then_some(())
    })
    .await;
    assert_eq!(
        fleet_lines(&setup),
        [],
        "two failed attempts, nothing recorded"
    );
    let store = jobrelay_state::open_store(&jobrelay_state::StateBackend::Sqlite(
        setup.path("state/jobrelay.db"),
    ))
    .await
    .expect("open state");
    let letters = store.dead_letters(Some("probe")).await.expect("list");
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].event.raw_phase, "Offline");
    assert!(letters[0].error.contains("flaky"), "{}", letters[0].error);
    let said = run(
        store.as_ref(),
        &DeadLettersCommand::Replay {
            plugin: Some("probe".into()),
            all: true,
            ids: vec![],
        },
    )
    .await
    .expect("replay")
    .text;
    assert!(said.contains('1'), "{said}");
    wait_for("the replayed event delivered", || {
        (fleet_lines(&setup).len() == 1).then_some(())
    })
    .await;
    assert_eq!(
        fleet_lines(&setup),
        [("cluster-offline".to_string(), "west".to_string(), None)]
    );
    let line = &setup.lines("probe/probe.jsonl")[0];
    assert_eq!(line["id"].as_str(), Some(letters[0].event.id.as_str()));
    store.close().await;
    daemon.shutdown(Duration::from_secs(5)).await;
}
