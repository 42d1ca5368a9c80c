//! Plugin filters, end to end: the daemon in-process on the simulator, event-log plugins with
//! and without a `filter:` section, and the events each one wrote.
//!
//! Each test attacks one promise: a filtered event never reaches the plugin (and is counted);
//! a filter changed while the lane has a backlog keeps what it had taken, takes nothing more
//! of the jobs it lets go, and gives the jobs it newly takes their current state rather than
//! their history; a finalizer waits only for the plugins whose filter takes the job.

use std::path::Path;
use std::time::{Duration, Instant};

use jobrelay::daemon::Daemon;
use jobrelay_testkit::{Flavor, JobDriver, SimCluster};
use serde_json::Value;

use crate::process::{DEADLINE, http_get, plugin_dir, read_lines, str_of, write};

/// A config folder on `sim` (cluster `alpha`) watching Volcano jobs, with telemetry.
fn folder(sim: &SimCluster, finalizer: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        &dir.path().join("jobrelay.yaml"),
        &format!(
            "plugin_dir: {}\nstate: {{path: state/jobrelay.db}}\ndebounce_ms: 100\n\
             rescan_seconds: 2\ntelemetry: {{listen: \"127.0.0.1:0\"}}\n\
             kinds:\n  - {{name: volcano-job, finalizer: {finalizer}}}\n",
            plugin_dir().display()
        ),
    );
    write(
        &dir.path().join("clusters/alpha.yaml"),
        &sim.kubeconfig_yaml(),
    );
    dir
}

/// An event-log plugin `name` writing to `out/NAME/events.jsonl`, with `extra` manifest lines.
fn event_log(root: &Path, name: &str, extra: &str) {
    write(
        &root.join(format!("plugins/{name}.yaml")),
        &format!(
            "wasm: event-log.wasm\ndelivery: every-version\n\
             grants:\n  filesystem:\n    - {{host: out/{name}, guest: /data, writable: true}}\n\
             config:\n  file: events.jsonl\n{extra}"
        ),
    );
}

fn lines(root: &Path, plugin: &str) -> Vec<Value> {
    read_lines(&root.join(format!("out/{plugin}/events.jsonl"))).0
}

/// `name phase` of every line, in order, synthetic ones marked.
fn seen(root: &Path, plugin: &str) -> Vec<String> {
    lines(root, plugin)
        .iter()
        .map(|l| {
            let synthetic = if l["synthetic"] == Value::Bool(true) {
                " (synthetic)"
            } else {
                ""
            };
            format!("{} {}{synthetic}", str_of(l, "name"), str_of(l, "phase"))
        })
        .collect()
}

/// Waits until `plugin` has written a line for each `name phase` in `want`.
async fn wait_seen(root: &Path, plugin: &str, want: &[&str]) {
    let started = Instant::now();
    loop {
        let seen = seen(root, plugin);
        if want.iter().all(|w| seen.iter().any(|s| s == w)) {
            return;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "{plugin} never wrote all of {want:?}; it wrote {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn start(root: &Path) -> Daemon {
    let daemon = Daemon::start(root).await.expect("daemon starts");
    let started = Instant::now();
    while !daemon
        .clusters()
        .get("alpha")
        .is_some_and(|h| h.state == jobrelay::clusters::health::HealthState::Synced)
    {
        assert!(started.elapsed() < DEADLINE, "alpha never synced");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    daemon
}

fn lane(daemon: &Daemon, plugin: &str) -> jobrelay_lanes::lane::LaneStats {
    daemon.plugins()[plugin]
        .lane
        .clone()
        .expect("the plugin has a lane")
}

fn job(sim: &SimCluster, namespace: &str, name: &str, labels: &[(&str, &str)]) -> JobDriver {
    let mut builder = JobDriver::builder(Flavor::Volcano, namespace, name);
    for (k, v) in labels {
        builder = builder.label(k, v);
    }
    builder.create(sim).expect("job created")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_takes_only_the_jobs_and_versions_it_names_and_counts_the_rest() {
    let sim = SimCluster::start("alpha").await.expect("simulator");
    let dir = folder(&sim, false);
    let root = dir.path();
    event_log(root, "all", "");
    event_log(
        root,
        "picky",
        "filter:\n  namespaces: ['team-*']\n  exclude: {namespaces: [team-sandbox]}\n  \
         labels: 'queue=gpu'\n  phases: [failed, succeeded]\n",
    );
    // No `has()` guard: a job without the label makes the expression fail, which is counted.
    event_log(
        root,
        "expr",
        "filter:\n  expression: \"event.labels['queue'] == 'gpu' && event.name.endsWith('-a')\"\n",
    );
    let daemon = start(root).await;

    let mut a = job(&sim, "team-a", "train-a", &[("queue", "gpu")]);
    let mut sandbox = job(&sim, "team-sandbox", "sandbox-a", &[("queue", "gpu")]);
    let mut other = job(&sim, "ml", "other-a", &[("queue", "gpu")]);
    let mut cpu = job(&sim, "team-a", "cpu-a", &[("queue", "cpu")]);
    let mut bare = job(&sim, "team-a", "bare-a", &[]);
    for j in [&mut a, &mut sandbox, &mut other, &mut cpu, &mut bare] {
        j.running().expect("running");
    }
    a.failed("OOMKilled").expect("failed");
    for j in [&mut sandbox, &mut other, &mut cpu, &mut bare] {
        j.succeeded().expect("succeeded");
    }
    // The unfiltered plugin shows the daemon read every terminal version.
    wait_seen(
        root,
        "all",
        &[
            "train-a failed",
            "sandbox-a succeeded",
            "other-a succeeded",
            "cpu-a succeeded",
            "bare-a succeeded",
        ],
    )
    .await;
    wait_seen(root, "picky", &["train-a failed"]).await;
    daemon.idle().await;

    assert_eq!(seen(root, "picky"), ["train-a failed"], "picky");
    let expr = seen(root, "expr");
    let gpu_a = ["train-a ", "sandbox-a ", "other-a "];
    assert!(
        expr.iter().all(|s| gpu_a.iter().any(|p| s.starts_with(p))),
        "expr took a job its expression does not: {expr:?}"
    );
    for line in ["train-a failed", "sandbox-a succeeded", "other-a succeeded"] {
        assert!(expr.contains(&line.to_string()), "{line}: {expr:?}");
    }

    let all = lines(root, "all").len() as u64;
    let picky = lane(&daemon, "picky");
    assert_eq!(picky.delivered, 1);
    assert_eq!(
        picky.filtered,
        all - 1,
        "every version the plugin did not get is counted as filtered"
    );
    assert_eq!(picky.filter_errors, 0);
    // The status shows the filter a plugin runs with, and none for one without.
    let shown = picky.filter.as_ref().map(|f| f.namespaces.clone());
    assert_eq!(shown, Some(vec!["team-*".to_string()]));
    assert!(lane(&daemon, "all").filter.is_none());
    let expr_lane = lane(&daemon, "expr");
    assert_eq!(expr_lane.filtered, all - expr.len() as u64);
    // bare-a has no `queue` label: every version of it failed the expression.
    let bare_versions = lines(root, "all")
        .iter()
        .filter(|l| str_of(l, "name") == "bare-a")
        .count() as u64;
    assert_eq!(expr_lane.filter_errors, bare_versions);

    let addr = daemon.telemetry_addr().expect("telemetry listens");
    let (_, metrics) = http_get(addr, "/metrics").await.expect("metrics");
    let line = format!(
        "jobrelay_events_filtered_total{{plugin=\"picky\"}} {}",
        all - 1
    );
    assert!(metrics.contains(&line), "no `{line}` in\n{metrics}");
    let line = format!("jobrelay_events_filter_errors_total{{plugin=\"expr\"}} {bare_versions}");
    assert!(metrics.contains(&line), "no `{line}` in\n{metrics}");
    daemon.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_changed_during_a_backlog_keeps_what_it_took_and_gives_new_jobs_their_current_state()
 {
    const JOBS: usize = 8;
    let sim = SimCluster::start("alpha").await.expect("simulator");
    let dir = folder(&sim, false);
    let root = dir.path();
    event_log(root, "all", "");
    // Two calls a second: the versions of team-a's jobs make a backlog of several seconds.
    let limited = "rate_limits: [{per_second: 2, burst: 1}]\n";
    event_log(
        root,
        "picky",
        &format!("{limited}filter:\n  namespaces: [team-a]\n"),
    );
    let daemon = start(root).await;
    // Install times are kept to the second, and only a job created after its plugin's install
    // would get its recorded history: these jobs are, so only the filter's change keeps
    // late-0's history from picky.
    tokio::time::sleep(Duration::from_millis(1100)).await;

    let mut kept: Vec<JobDriver> = (0..JOBS)
        .map(|i| job(&sim, "team-a", &format!("kept-{i}"), &[]))
        .collect();
    for j in &mut kept {
        j.running().expect("running");
    }
    // late-0's status records its pending and running phases: a history picky could be given.
    let mut late = job(&sim, "team-b", "late-0", &[]);
    late.pending().expect("pending");
    late.running().expect("running");
    let want: Vec<String> = kept
        .iter()
        .map(|j| format!("{} running", j.name()))
        .chain(["late-0 running".to_string()])
        .collect();
    let want: Vec<&str> = want.iter().map(String::as_str).collect();
    wait_seen(root, "all", &want).await;
    let backlog = lane(&daemon, "picky").pending;
    assert!(
        backlog > 0,
        "the test needs a backlog in picky's lane when its filter changes"
    );

    // The filter now takes team-b only.
    event_log(
        root,
        "picky",
        &format!("{limited}filter:\n  namespaces: [team-b]\n"),
    );
    // The new filter takes late-0, which it skipped so far: its current state comes.
    wait_seen(root, "picky", &["late-0 running"]).await;
    for j in &mut kept {
        j.succeeded().expect("succeeded");
    }
    late.succeeded().expect("succeeded");
    let want: Vec<String> = kept
        .iter()
        .map(|j| format!("{} succeeded", j.name()))
        .chain(["late-0 succeeded".to_string()])
        .collect();
    let want: Vec<&str> = want.iter().map(String::as_str).collect();
    wait_seen(root, "all", &want).await;
    wait_seen(root, "picky", &["late-0 succeeded"]).await;
    daemon.idle().await;

    let picky = seen(root, "picky");
    // Every version taken before the change was delivered — nothing the lane held was lost.
    for j in &kept {
        for phase in ["pending", "running"] {
            let line = format!("{} {phase}", j.name());
            assert!(
                picky.contains(&line),
                "{line} was taken before the change but never delivered: {picky:?}"
            );
        }
    }
    // Nothing of team-a after the change.
    assert!(
        !picky
            .iter()
            .any(|s| s.starts_with("kept-") && s.ends_with("succeeded")),
        "picky got versions of jobs its new filter does not take: {picky:?}"
    );
    // late-0: its current state when the filter changed and every version after it, not its
    // history: all of what `all` got but the `pending` versions before the change, and none
    // synthetic.
    let versions = |plugin: &str| -> Vec<String> {
        lines(root, plugin)
            .iter()
            .filter(|l| str_of(l, "name") == "late-0")
            .map(|l| {
                let synthetic = if l["synthetic"] == Value::Bool(true) {
                    " synthetic"
                } else {
                    ""
                };
                format!(
                    "{} {}{synthetic}",
                    str_of(l, "phase"),
                    str_of(l, "resource_version")
                )
            })
            .collect()
    };
    let all_late = versions("all");
    let since_change: Vec<String> = all_late
        .iter()
        .skip_while(|v| v.starts_with("pending "))
        .cloned()
        .collect();
    assert!(since_change.len() < all_late.len(), "{all_late:?}");
    assert_eq!(versions("picky"), since_change, "{picky:?}");
    // Each version once.
    let mut ids: Vec<String> = lines(root, "picky")
        .iter()
        .map(|l| str_of(l, "id").to_string())
        .collect();
    let delivered = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), delivered, "repeats: {picky:?}");

    // The jobs let go are forgotten. A job let go while its queue was busy goes when its
    // worker takes its next step, just after the last settle that `idle` waits for: polled.
    let started = Instant::now();
    loop {
        let stats = lane(&daemon, "picky");
        if stats.jobs == 1 {
            break;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "picky still tracks jobs it let go: {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    daemon.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finalizer_waits_only_for_the_plugins_whose_filter_takes_the_job() {
    finalizer_case(false).await;
}

/// The same, but picky's filter changes to take neither job while `mine` is held for it: what
/// picky took of `mine` before the change is still delivered, then the hold lets go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_job_a_changed_filter_no_longer_takes_goes_once_what_was_taken_is_delivered() {
    finalizer_case(true).await;
}

async fn finalizer_case(change_filter: bool) {
    let sim = SimCluster::start("alpha").await.expect("simulator");
    let dir = folder(&sim, true);
    let root = dir.path();
    event_log(root, "all", "");
    // One call every two seconds: team-a's versions wait in picky's lane a good while.
    event_log(
        root,
        "picky",
        "rate_limits: [{per_minute: 30, burst: 1}]\nfilter:\n  namespaces: [team-a]\n",
    );
    let daemon = start(root).await;

    let mut mine = job(&sim, "team-a", "mine", &[]);
    let mut theirs = job(&sim, "team-b", "theirs", &[]);
    for j in [&mut mine, &mut theirs] {
        j.running().expect("running");
        j.succeeded().expect("succeeded");
    }
    let carries = |j: &JobDriver| {
        sim.get(&j.gvr(), j.namespace(), j.name())
            .ok()
            .is_some_and(|o| {
                o["metadata"]["finalizers"]
                    .to_string()
                    .contains("jobrelay.io")
            })
    };
    let started = Instant::now();
    while !(carries(&mine) && carries(&theirs)) {
        assert!(
            started.elapsed() < DEADLINE,
            "the finalizer was never added"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_seen(root, "all", &["mine succeeded", "theirs succeeded"]).await;
    assert!(
        lane(&daemon, "picky").pending > 0,
        "picky must lag for this test"
    );

    mine.delete().expect("delete");
    theirs.delete().expect("delete");
    // theirs is picky's to ignore: gone once `all` has its deletion, whatever picky's backlog.
    let started = Instant::now();
    while sim.get(&theirs.gvr(), "team-b", "theirs").is_ok() {
        assert!(
            started.elapsed() < DEADLINE,
            "the job no filter of picky takes is held for picky"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let picky_when_released = seen(root, "picky");
    assert!(
        !picky_when_released
            .iter()
            .any(|s| s == "mine deleted" || s == "mine terminating"),
        "picky had caught up already; the test proves nothing: {picky_when_released:?}"
    );
    assert!(
        sim.get(&mine.gvr(), "team-a", "mine").is_ok(),
        "the job picky takes was released before picky handled it"
    );
    if change_filter {
        event_log(
            root,
            "picky",
            "rate_limits: [{per_minute: 30, burst: 1}]\nfilter:\n  namespaces: [team-c]\n",
        );
    }
    // mine waits for picky, then goes.
    let started = Instant::now();
    while sim.get(&mine.gvr(), "team-a", "mine").is_ok() {
        assert!(
            started.elapsed() < DEADLINE,
            "mine was never released: {:?}",
            seen(root, "picky")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let picky = seen(root, "picky");
    assert!(
        picky.iter().all(|s| s.starts_with("mine ")),
        "picky got a job of team-b: {picky:?}"
    );
    assert!(
        picky.contains(&"mine succeeded".to_string()),
        "mine was released before its terminal version reached picky: {picky:?}"
    );
    if change_filter {
        // Its deletion request was taken before the change: delivered, though the new
        // filter takes nothing of mine; the deletion itself came after and is not.
        assert!(
            picky.contains(&"mine terminating".to_string()),
            "a version taken before the change was lost: {picky:?}"
        );
        assert!(
            !picky.contains(&"mine deleted".to_string()),
            "picky got a version after its filter let mine go: {picky:?}"
        );
    }
    daemon.shutdown(Duration::from_secs(5)).await;
}

/// A job deleted while jobrelay was away is found missing at the next start and its deletion
/// made up for every plugin that knew it: through the filter too, so a plugin that takes only
/// `failed` versions is not handed a `deleted` one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_found_at_start_goes_through_the_filter() {
    let sim = SimCluster::start("alpha").await.expect("simulator");
    let dir = folder(&sim, false);
    let root = dir.path();
    event_log(root, "all", "");
    event_log(root, "picky", "filter:\n  phases: [failed]\n");
    let daemon = start(root).await;
    let mut gone = job(&sim, "team-a", "gone-a", &[]);
    gone.running().expect("running");
    gone.failed("OOMKilled").expect("failed");
    wait_seen(root, "all", &["gone-a failed"]).await;
    wait_seen(root, "picky", &["gone-a failed"]).await;
    daemon.idle().await;
    daemon.shutdown(Duration::from_secs(5)).await;

    gone.delete().expect("deleted while jobrelay is away");
    let daemon = start(root).await;
    // `all` is told of the deletion, so it was found; picky is not, and it is counted.
    wait_seen(root, "all", &["gone-a deleted"]).await;
    daemon.idle().await;
    assert_eq!(seen(root, "picky"), ["gone-a failed"], "picky");
    assert!(lane(&daemon, "picky").filtered >= 1);
    daemon.shutdown(Duration::from_secs(5)).await;
}
