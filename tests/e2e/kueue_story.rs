//! A job's story end to end: the test kit's Kueue queues, admits, preempts, requeues and admits
//! again a batch Job's Workload, and its pods fail (OOM-killed, an image that will not pull, a
//! container crash-looping); the real daemon, watching Workloads and pods for the kind, tells
//! it to `mysql-sync` (real MariaDB over TCP) and `feishu-notify` (real HTTP to the kit's
//! receiver), shows it in the job view's timeline, counts it in the SLIs and fires the fleet
//! rules judged per ClusterQueue and per cause.
//!
//! Every figure asserted is computed here from what the kit wrote (its Workload's log, its
//! objects' times), not from what jobrelay says: the waits for quota, the seconds admitted
//! and the GPU-seconds.
//!
//! The story rides the job's versions, and Workloads and pods are separate streams: after each
//! Kueue step the test touches the job (a label) until the job view shows the step, so every
//! step reaches a version of the job before the next — except the requeue after the
//! preemption, which Kueue makes with no change of the job: its `queued` stay must reach
//! mysql-sync from the Workload alone, the job untouched.
//!
//! Needs MariaDB at `JOBRELAY_TEST_MYSQL_URL` (default root@127.0.0.1:3306/test); fails
//! without it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chrono::{DateTime, SecondsFormat, Utc};
use jobrelay::daemon::Daemon;
use jobrelay_e2e::*;
use jobrelay_testkit::{
    FeishuReceiver, Flavor, JobDriver, KueueStep, PodFailure, SimCluster, SimKueue, Workload,
};
use serde_json::{Value, json};
use sqlx::mysql::MySqlPool;

fn mysql_url() -> String {
    std::env::var("JOBRELAY_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_string())
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn secs(text: &str) -> i64 {
    DateTime::parse_from_rfc3339(text)
        .expect("an RFC 3339 time")
        .timestamp()
}

/// When the kit's Workload last did `which`.
fn logged(workload: &Workload, which: impl Fn(&KueueStep) -> bool) -> DateTime<Utc> {
    workload.last(which).expect("the step is in the kit's log")
}

/// The job view's detail of `ml/NAME` on east (`null` while the view has not seen it).
async fn detail(addr: std::net::SocketAddr, name: &str) -> Value {
    let (code, shown) = get_json(addr, &format!("/api/v1/jobs/east/ml/{name}")).await;
    assert!(code == 200 || code == 404, "{code}: {shown}");
    shown["job"].clone()
}

/// The Kueue marks of a job's timeline: `(mark, at, queue)`.
fn marks(job: &Value) -> Vec<(String, String, String)> {
    job["timeline"]
        .as_array()
        .map(|entries| {
            entries
                .iter()
                .filter(|e| e["event"] == "kueue")
                .map(|e| {
                    let text = |k: &str| e[k].as_str().unwrap_or_default().to_string();
                    (text("mark"), text("at"), text("queue"))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Touches `job` (a new label value, so a new version) until the job view's detail of it
/// passes `done`.
async fn touch_until(
    addr: std::net::SocketAddr,
    sim: &SimCluster,
    job: &JobDriver,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let started = Instant::now();
    for touch in 0u32.. {
        let shown = detail(addr, job.name()).await;
        if done(&shown) {
            return shown;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{}: {what} never showed: {shown}",
            job.name()
        );
        sim.patch_merge(
            &job.gvr(),
            job.namespace(),
            job.name(),
            json!({"metadata": {"labels": {"touch": touch.to_string()}}}),
        )
        .expect("touched");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    unreachable!("the loop returns or fails")
}

/// One `/metrics` sample's value.
fn sample(metrics: &str, name_and_labels: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name_and_labels)?.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kueue_story_and_pod_causes_reach_mysql_sync_chat_the_view_and_the_rules() {
    init_logs();
    let sim = SimCluster::start("east").await.expect("simulator");
    let kueue = SimKueue::install(&sim);
    let feishu = FeishuReceiver::start().await.expect("feishu receiver");
    let token = format!("story-{}", std::process::id());
    let webhook = feishu.add_bot(&token, None, None);
    let prefix = format!("story{}", std::process::id());
    // SAFETY: set once, before the daemon starts; nothing else in this test binary reads it.
    unsafe { std::env::set_var("JOBRELAY_E2E_STORY_MYSQL_URL", mysql_url()) };
    let setup = Setup::new(
        "kinds: [{name: batch-job, story: {kueue: true, pods: true}}]\n\
         telemetry: {listen: \"127.0.0.1:0\"}\n\
         sql:\n  connections:\n    main: {url: \"env:JOBRELAY_E2E_STORY_MYSQL_URL\", max_connections: 4}\n\
         fleet:\n  evaluate_interval_ms: 200\n  rules:\n\
         \x20   - {name: preemptions, measure: preemptions_per_hour, above: 0, window: 1h}\n\
         \x20   - {name: oom, measure: failures_per_hour, above: 0, window: 1h, causes: [OOMKilled]}\n\
         \x20 timers:\n\
         \x20   - {name: queued-long, state: queued, longer_than: 1s, namespaces: [idle]}\n\
         \x20   - {name: preempted-often, counts: preempted, more_than: 0, within: 1h, namespaces: [ml]}\n",
    );
    setup.install_wasm("feishu-notify", "feishu-notify.wasm");
    // Every transition delivered, as delivered (mysql-sync keeps one row per key, so a stay
    // told twice shows only here).
    setup.install_wasm("event-log", "event-log.wasm");
    setup.write_manifest(
        "log",
        &Setup::log_manifest(
            "event-log.wasm",
            "log",
            "events.jsonl",
            "delivery: transitions\n",
        ),
    );
    let (jobs_table, transitions_table) = setup.install_mysql_sync(&prefix);
    setup.write_manifest(
        "feishu-notify",
        &format!(
            "wasm: feishu-notify.wasm\ndelivery: transitions\nfleet_events: [rules]\n\
             grants:\n  http: {{allow: [\"http://127.0.0.1:*\"], allow_private: true}}\n  kv: true\n\
             config:\n  webhook: \"{webhook}\"\n  phases: \"failed,preempted\"\n"
        ),
    );
    setup.add_cluster(&sim);
    let daemon = Daemon::start(setup.config_dir())
        .await
        .expect("daemon starts");
    wait_synced(&daemon, "east").await;
    let addr = daemon.telemetry_addr().expect("telemetry");
    let db = MySqlPool::connect(&mysql_url())
        .await
        .expect("MariaDB must be reachable (tests/run.sh starts it)");

    let suspended = |name: &str| {
        JobDriver::builder(Flavor::Batch, "ml", name)
            .workers(1)
            .created_suspended()
            .create(&sim)
            .expect("a suspended job")
    };
    let has = |mark: &'static str, at: String| {
        move |job: &Value| marks(job).iter().any(|(m, t, _)| m == mark && *t == at)
    };
    let gpus = [("nvidia.com/gpu", 8)];

    // --- waiting: submitted after the job was seen, and never touched again — Kueue's
    // Workload alone says it waits, and the queued timer fires on it all the same.
    let waiting = JobDriver::builder(Flavor::Batch, "idle", "waiting")
        .workers(1)
        .created_suspended()
        .create(&sim)
        .expect("a suspended job");
    until("the job view to hold idle/waiting", || async {
        let (code, _) = get_json(addr, "/api/v1/jobs/east/idle/waiting").await;
        (code == 200).then_some(())
    })
    .await;
    let _waiting_wl = kueue.submit(&waiting, "team-c").expect("submitted");

    // --- llama-ft: queued, admitted, preempted, requeued, admitted again, OOM-killed.
    let mut llama = suspended("llama-ft");
    let mut llama_wl = kueue.submit(&llama, "team-a").expect("submitted");
    let created = logged(&llama_wl, |s| *s == KueueStep::Created);
    touch_until(
        addr,
        &sim,
        &llama,
        "queued",
        has("queued", rfc3339(created)),
    )
    .await;
    llama_wl.admit(&mut llama, "a100", &gpus).expect("admitted");
    let first_admission = logged(&llama_wl, |s| matches!(s, KueueStep::Admitted { .. }));
    let first = has("admitted", rfc3339(first_admission));
    touch_until(addr, &sim, &llama, "admitted", first).await;
    llama_wl
        .preempt(&mut llama, "InClusterQueue", "uid-of-the-preemptor")
        .expect("preempted");
    let preempted = logged(&llama_wl, |s| matches!(s, KueueStep::Preempted { .. }));
    touch_until(addr, &sim, &llama, "preempted", |job| {
        job["preemptions"] == 1 && marks(job).iter().any(|(m, _, _)| m == "preempted")
    })
    .await;
    llama_wl.requeue().expect("requeued");
    let requeued = logged(&llama_wl, |s| *s == KueueStep::Requeued);
    // Kueue leaves the job as it is when it requeues it (suspended since the preemption): the
    // queued stay reaches plugins from the Workload alone, the job read again, untouched.
    // The wait after the first eviction is the second, by Kueue's count (`#2`).
    let requeued_key = format!("east/{}/queued@{}#2", llama.uid(), rfc3339(requeued));
    until("mysql-sync to hold the requeued stay, the job untouched", || {
        let (db, key) = (db.clone(), requeued_key.clone());
        let query = format!(
            "SELECT COUNT(*) FROM {transitions_table} WHERE transition_key = ? AND to_phase = 'queued'"
        );
        async move {
            let (n,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(query))
                .bind(&key)
                .fetch_one(&db)
                .await
                .expect("transitions");
            (n == 1).then_some(())
        }
    })
    .await;
    let shown = detail(addr, llama.name()).await;
    assert!(has("queued", rfc3339(requeued))(&shown), "{shown}");
    llama_wl
        .admit(&mut llama, "a100", &gpus)
        .expect("admitted again");
    let second_admission = logged(&llama_wl, |s| matches!(s, KueueStep::Admitted { .. }));
    let second = has("admitted", rfc3339(second_admission));
    let shown = touch_until(addr, &sim, &llama, "admitted again", second).await;
    assert_eq!(
        marks(&shown),
        [
            ("queued".to_string(), rfc3339(created), "team-a".to_string()),
            ("admitted".into(), rfc3339(first_admission), "a100".into()),
            ("preempted".into(), rfc3339(preempted), "a100".into()),
            ("queued".into(), rfc3339(requeued), "team-a".into()),
            ("admitted".into(), rfc3339(second_admission), "a100".into()),
        ],
        "one mark per thing Kueue did, in order, each at Kueue's time, the preemption in \
         the queue of the admission it ended"
    );
    llama.pod_fails(PodFailure::OomKilled).expect("OOM-killed");
    touch_until(addr, &sim, &llama, "the cause", |job| {
        job["cause"] == "OOMKilled"
    })
    .await;
    llama.failed("").expect("failed");

    // --- Two more, each admitted once, failing with the other causes.
    let mut others = BTreeMap::new();
    for (name, cause, word) in [
        ("pull-bad", PodFailure::ImagePullBackOff, "ImagePullBackOff"),
        ("crashy", PodFailure::CrashLoopBackOff, "CrashLoopBackOff"),
    ] {
        let mut job = suspended(name);
        let mut wl = kueue.submit(&job, "team-b").expect("submitted");
        wl.admit(&mut job, "a100", &[("nvidia.com/gpu", 1)])
            .expect("admitted");
        let at = logged(&wl, |s| matches!(s, KueueStep::Admitted { .. }));
        touch_until(addr, &sim, &job, "admitted", has("admitted", rfc3339(at))).await;
        job.pod_fails(cause).expect("the pod fails");
        touch_until(addr, &sim, &job, "the cause", |j| j["cause"] == word).await;
        job.failed("").expect("failed");
        let created = logged(&wl, |s| *s == KueueStep::Created);
        others.insert(name, (job, wl, (at - created).num_seconds()));
    }

    // --- mysql-sync: the story's columns, computed from what the kit wrote.
    let past =
        llama_wl.object().expect("the Workload")["status"]["accumulatedPastExecutionTimeSeconds"]
            .as_i64()
            .expect("Kueue's count of the first admission");
    assert!(past >= 1, "the first admission lasted: {past}");
    // A batch Job fails at `FailureTarget` (docs/job-kinds.md): the outcome is decided there.
    let failed_at = llama.object().expect("the job")["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "FailureTarget"))
        .and_then(|c| c["lastTransitionTime"].as_str())
        .map(secs)
        .expect("the job's FailureTarget time");
    let admitted_seconds = past + (failed_at - second_admission.timestamp());
    type StoryRow = (
        String,
        Option<String>,
        Option<String>,
        Option<i64>,
        Option<i64>,
        Option<i64>,
        Option<i64>,
        Option<String>,
        Option<String>,
        Option<i64>,
    );
    let query = format!(
        "SELECT phase, local_queue, cluster_queue, queued_seconds, preemptions, requeues, \
         admitted_seconds, accelerator_seconds_json, failure_reason, failure_exit_code \
         FROM {jobs_table} WHERE uid = ?"
    );
    let row = |uid: String| {
        let (db, query) = (db.clone(), query.clone());
        async move {
            let started = Instant::now();
            loop {
                let row: Option<StoryRow> = sqlx::query_as(sqlx::AssertSqlSafe(query.clone()))
                    .bind(&uid)
                    .fetch_optional(&db)
                    .await
                    .expect("the jobs row");
                if let Some(row) = row.filter(|r| r.0 == "failed") {
                    return row;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(60),
                    "{uid} never failed"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    assert_eq!(
        row(llama.uid().to_string()).await,
        (
            "failed".to_string(),
            Some("team-a".to_string()),
            Some("a100".to_string()),
            Some((second_admission - requeued).num_seconds()),
            Some(1),
            Some(1),
            Some(admitted_seconds),
            Some(format!("{{\"nvidia.com/gpu\":{}}}", 8 * admitted_seconds)),
            Some("OOMKilled".to_string()),
            Some(137),
        )
    );
    for (name, (job, _, _)) in &others {
        let got = row(job.uid().to_string()).await;
        let want = if *name == "pull-bad" {
            "ImagePullBackOff"
        } else {
            "CrashLoopBackOff"
        };
        assert_eq!(got.8.as_deref(), Some(want), "{name}: {got:?}");
    }
    // Each transition of llama-ft once.
    let keys: Vec<(String, String)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT to_phase, transition_key FROM {transitions_table} WHERE uid = ? \
         ORDER BY recorded_at, transition_time"
    )))
    .bind(llama.uid())
    .fetch_all(&db)
    .await
    .expect("transitions");
    let distinct: std::collections::BTreeSet<&String> = keys.iter().map(|(_, k)| k).collect();
    assert_eq!(distinct.len(), keys.len(), "{keys:?}");
    assert_eq!(
        keys.last().map(|(p, _)| p.as_str()),
        Some("failed"),
        "{keys:?}"
    );
    // Its stays in Kueue's queue are transitions of their own, each keyed by Kueue's time and
    // count: queued from the Workload's creation, preempted from the eviction, queued again
    // from the requeue (the wait after one eviction: the second).
    let stay = |phase: &str, at: DateTime<Utc>, n: &str| {
        (
            phase.to_string(),
            format!("east/{}/{phase}@{}{n}", llama.uid(), rfc3339(at)),
        )
    };
    let in_queue: Vec<(String, String)> = keys
        .iter()
        .filter(|(p, _)| p == "queued" || p == "preempted")
        .cloned()
        .collect();
    assert_eq!(
        in_queue,
        [
            stay("queued", created, ""),
            stay("preempted", preempted, ""),
            stay("queued", requeued, "#2"),
        ],
        "{keys:?}"
    );

    // --- Feishu: each failed card names its cause; each rule fires, per queue and cause.
    let cards = feishu
        .wait_for_messages(&token, 9, Duration::from_secs(60))
        .await
        .expect("three failed cards, a preempted one, two rule cards and three of timers");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let texts: Vec<String> = feishu
        .messages(&token)
        .iter()
        .map(|c| c.body.to_string())
        .collect();
    assert_eq!(
        (texts.len(), cards.len()),
        (9, 9),
        "no card twice: {texts:#?}"
    );
    assert!(
        texts
            .iter()
            .any(|t| t.contains("Rule queued-long is firing on east")
                && t.contains("idle/waiting queued")),
        "the timer on the job whose Workload alone said it waits: {texts:#?}"
    );
    // The counting timer: llama-ft's one preemption, dated at Kueue's eviction, fires it; the
    // job's failure resolves it.
    assert!(
        texts
            .iter()
            .any(|t| t.contains("Rule preempted-often is firing on east")
                && t.contains("ml/llama-ft preempted 1 time in 1h on east (more than 0)")),
        "the counting timer on llama-ft: {texts:#?}"
    );
    assert!(
        texts
            .iter()
            .any(|t| t.contains("Rule preempted-often resolved on east")
                && t.contains("ml/llama-ft is no longer preempted more than 0 times in 1h")),
        "its resolution once llama-ft failed: {texts:#?}"
    );
    assert!(
        texts.iter().any(|t| t.contains("llama-ft")
            && t.contains("preempted")
            && t.contains("InClusterQueue")
            && t.contains("uid-of-the-preemptor")),
        "a preempted card for llama-ft naming Kueue's reason and the preemptor: {texts:#?}"
    );
    for (name, cause) in [
        ("llama-ft", "OOMKilled"),
        ("pull-bad", "ImagePullBackOff"),
        ("crashy", "CrashLoopBackOff"),
    ] {
        assert!(
            texts.iter().any(|t| t.contains(name) && t.contains(cause)),
            "a failed card for {name} naming {cause}: {texts:#?}"
        );
    }
    for (rule, scope) in [
        ("preemptions", "cluster queue a100"),
        ("oom", "cause OOMKilled"),
    ] {
        let title = format!("Rule {rule} is firing on east");
        assert!(
            texts
                .iter()
                .any(|t| t.contains(&title) && t.contains(scope)),
            "{title} ({scope}): {texts:#?}"
        );
    }

    // --- /metrics: the SLIs by queue and cause, and the rules' verdicts by group.
    let (_, metrics) = http_get(addr, "/metrics").await;
    let labels = "cluster=\"east\",job_namespace=\"ml\",kind=\"batch-job\"";
    let waits = [
        (first_admission - created).num_seconds(),
        (second_admission - requeued).num_seconds(),
    ]
    .into_iter()
    .chain(others.values().map(|(_, _, wait)| *wait));
    let (count, sum) = waits.fold((0.0, 0.0), |(n, s), w| (n + 1.0, s + w as f64));
    let queue = format!("{labels},cluster_queue=\"a100\"}}");
    assert_eq!(
        sample(
            &metrics,
            &format!("jobrelay_job_admission_wait_seconds_count{{{queue}")
        ),
        Some(count),
        "{metrics}"
    );
    assert_eq!(
        sample(
            &metrics,
            &format!("jobrelay_job_admission_wait_seconds_sum{{{queue}")
        ),
        Some(sum)
    );
    assert_eq!(
        sample(
            &metrics,
            &format!("jobrelay_job_preemptions_total{{{queue}")
        ),
        Some(1.0)
    );
    for cause in ["OOMKilled", "ImagePullBackOff", "CrashLoopBackOff"] {
        let name = format!("jobrelay_jobs_failed_by_cause_total{{{labels},cause=\"{cause}\"}}");
        assert_eq!(sample(&metrics, &name), Some(1.0), "{name}");
    }
    for (rule, group) in [("preemptions", "a100"), ("oom", "OOMKilled")] {
        let name = format!(
            "jobrelay_fleet_rule_firing{{rule=\"{rule}\",cluster=\"east\",group=\"{group}\"}}"
        );
        assert_eq!(sample(&metrics, &name), Some(1.0), "{name}: {metrics}");
    }
    // --- idle/waiting: submitted after its job was seen, never touched — its queued stay
    // reached mysql-sync from the Workload alone. After a restart the job streams list once
    // the Workloads have, so the job is seen queued at once: no flap through its status's
    // phase (suspended, then queued again) reaches mysql-sync.
    let rows = |uid: String| {
        let db = db.clone();
        let query = format!(
            "SELECT to_phase, transition_key FROM {transitions_table} WHERE uid = ? \
             ORDER BY recorded_at, transition_time"
        );
        async move {
            let rows: Vec<(String, String)> = sqlx::query_as(sqlx::AssertSqlSafe(query))
                .bind(&uid)
                .fetch_all(&db)
                .await
                .expect("transitions");
            rows
        }
    };
    let waited = until("idle/waiting's queued stay in mysql-sync", || {
        let rows = rows(waiting.uid().to_string());
        async move {
            let rows = rows.await;
            rows.iter().any(|(p, _)| p == "queued").then_some(rows)
        }
    })
    .await;
    let delivered = |uid: &str| {
        setup
            .lines("log/events.jsonl")
            .into_iter()
            .filter(|l| l["uid"] == uid)
            .map(|l| (l["phase"].to_string(), l["transition_key"].to_string()))
            .collect::<Vec<_>>()
    };
    let told = delivered(waiting.uid());
    assert!(told.iter().any(|(p, _)| p == "\"queued\""), "{told:?}");
    daemon.shutdown(Duration::from_secs(5)).await;
    // The Workloads listed well after the jobs would be (a large list, a busy apiserver).
    sim.answer_late("/workloads", Duration::from_secs(2));
    let daemon = Daemon::start(setup.config_dir())
        .await
        .expect("the daemon starts again");
    wait_synced(&daemon, "east").await;
    let addr = daemon.telemetry_addr().expect("telemetry");
    until(
        "the job view to hold idle/waiting again, queued",
        || async {
            let (code, job) = get_json(addr, "/api/v1/jobs/east/idle/waiting").await;
            (code == 200 && job["job"]["phase"] == "queued").then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    sim.answer_promptly();
    assert_eq!(
        rows(waiting.uid().to_string()).await,
        waited,
        "a restart adds no transition"
    );
    assert_eq!(
        delivered(waiting.uid()),
        told,
        "nor tells one: the job is seen queued at once"
    );

    for (_, (_, mut wl, _)) in others {
        wl.finish(false, "Job failed").expect("finished");
    }
    llama_wl.finish(false, "Job failed").expect("finished");
    daemon.shutdown(Duration::from_secs(5)).await;
}
