//! Clean-up of finished jobs, against the simulator with real plugins: a finished job is
//! deleted once every plugin has delivered its end — after log-archive stored its logs — and
//! never while a plugin still owes it (dead letter, pending retry), never outside the rules'
//! kinds and namespaces, never a job re-created under the same name; a dry run deletes
//! nothing; 10,000 jobs finishing at once are deleted at the configured pace.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use jobrelay::cli::ops::dead_letters::{DeadLettersCommand, run};
use jobrelay::daemon::Daemon;
use jobrelay_e2e::*;
use jobrelay_testkit::{Flavor, Gvr, JobDriver, SimCluster};

/// The probe stands for a plugin that can fail: `giveup` dead-letters at once, `retry` keeps
/// its event pending (a thousand attempts, a second apart at most).
const PROBE: &str = "wasm: probe.wasm\ndelivery: transitions\ntimeout_ms: 20000\n\
     retry: {max_attempts: 1000, min_delay_ms: 100, max_delay_ms: 1000}\n\
     grants:\n  filesystem:\n    - {host: out/probe, guest: /data, writable: true}\n";

const ARCHIVE: &str = "wasm: log-archive.wasm\ndelivery: transitions\ntimeout_ms: 20000\n\
     grants: {pod_logs: {}, archive: {}, kv: true, job: {annotations: [\"archive.jobrelay.io/\"]}}\n";

fn exists(sim: &SimCluster, gvr: &Gvr, ns: &str, name: &str) -> bool {
    sim.get(gvr, ns, name).is_ok()
}

/// Deleted (`outcome`) counts by outcome, all clusters and kinds.
fn outcomes(daemon: &Daemon) -> BTreeMap<String, u64> {
    let mut counted = BTreeMap::new();
    for o in daemon.cleanup().outcomes {
        let name = serde_json::to_value(o.outcome)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        *counted.entry(name).or_default() += o.count;
    }
    counted
}

/// The held jobs' reasons by job name.
fn held(daemon: &Daemon) -> BTreeMap<String, String> {
    daemon
        .cleanup()
        .schedule
        .held
        .iter()
        .map(|h| {
            let why = serde_json::to_value(&h.held).unwrap_or_default();
            (
                h.name.clone(),
                format!(
                    "{} {}",
                    why["reason"].as_str().unwrap_or(""),
                    why["detail"].as_str().unwrap_or("")
                ),
            )
        })
        .collect()
}

/// `jobrelay dead-letters …` on the daemon's state file, as an operator runs it beside the
/// daemon.
async fn operator(setup: &Setup, command: DeadLettersCommand) {
    let store = jobrelay_state::open_store(&jobrelay_state::StateBackend::Sqlite(
        setup.path("state/jobrelay.db"),
    ))
    .await
    .expect("open state");
    run(store.as_ref(), &command).await.expect("dead-letters");
}

fn finished(sim: &SimCluster, flavor: Flavor, ns: &str, name: &str, behave: &str) -> JobDriver {
    let mut job = JobDriver::builder(flavor, ns, name)
        .label("jobrelay.test/behave", behave)
        .create(sim)
        .expect("create");
    job.running().expect("running");
    for pod in job.pods() {
        job.set_log(
            &pod.name,
            false,
            format!("{} step 1 loss=0.5\n", pod.name).into_bytes(),
        )
        .expect("log");
    }
    job.succeeded().expect("succeeded");
    job
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_job_goes_once_its_plugins_delivered_it_and_never_before() {
    init_logs();
    let sim = SimCluster::start("east").await.expect("sim");
    let setup = Setup::new(
        "kinds: [{name: volcano-job}, {name: batch-job}]\narchive: {local: archive}\n\
         cleanup:\n  per_cluster_per_second: 20\n  rules:\n\
         \x20   - {kinds: [volcano-job], namespaces: ['team-*'], after_finished: 1s}\n",
    );
    setup.install_wasm("probe", "probe.wasm");
    setup.install_wasm("log-archive", "log-archive.wasm");
    setup.write_manifest("probe", PROBE);
    setup.write_manifest("log-archive", ARCHIVE);
    setup.add_cluster(&sim);
    let daemon = Daemon::start(setup.config_dir())
        .await
        .expect("daemon starts");
    wait_synced(&daemon, "east").await;
    assert!(daemon.cleanup().on);

    let done = finished(&sim, Flavor::Volcano, "team-a", "done", "");
    let dead = finished(&sim, Flavor::Volcano, "team-a", "dead", "giveup");
    let pending = finished(&sim, Flavor::Volcano, "team-b", "pending", "retry");
    let mut running = JobDriver::builder(Flavor::Volcano, "team-a", "running")
        .create(&sim)
        .expect("create");
    running.running().expect("running");
    let _prod = finished(&sim, Flavor::Volcano, "prod", "elsewhere", "");
    let _batch = finished(&sim, Flavor::Batch, "team-a", "other-kind", "");

    // The delivered job goes, and its logs were archived before.
    wait_for("the delivered job deleted", || {
        (!exists(&sim, &Gvr::VOLCANO_JOB, "team-a", "done")).then_some(())
    })
    .await;
    let manifest = setup.path(&format!(
        "archive/log-archive/east/team-a/{}/manifest.json",
        done.uid()
    ));
    assert!(
        manifest.exists(),
        "the archive is complete before the job goes"
    );

    // The dead-lettered and the pending job are held, with their reasons.
    let reasons = wait_for("both held with their reasons", || {
        let reasons = held(&daemon);
        (reasons.len() == 2).then_some(reasons)
    })
    .await;
    assert_eq!(reasons["dead"], "dead_lettered probe", "{reasons:?}");
    assert_eq!(reasons["pending"], "pending_delivery probe", "{reasons:?}");
    // Given time to go wrong: nothing held, running or outside the rules is deleted.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for (gvr, ns, name) in [
        (&Gvr::VOLCANO_JOB, "team-a", "dead"),
        (&Gvr::VOLCANO_JOB, "team-b", "pending"),
        (&Gvr::VOLCANO_JOB, "team-a", "running"),
        (&Gvr::VOLCANO_JOB, "prod", "elsewhere"),
        (&Gvr::BATCH_JOB, "team-a", "other-kind"),
    ] {
        assert!(exists(&sim, gvr, ns, name), "{ns}/{name} must stay");
    }
    let jobs = &daemon.cleanup().schedule.jobs["east"];
    assert_eq!(jobs.get("dead_lettered"), Some(&1), "{jobs:?}");

    // The operator drops the dead letter: that is a decision, and the job goes.
    operator(
        &setup,
        DeadLettersCommand::Drop {
            plugin: Some("probe".into()),
            all: true,
            ids: vec![],
        },
    )
    .await;
    wait_for("the dropped job deleted", || {
        (!exists(&sim, &Gvr::VOLCANO_JOB, "team-a", "dead")).then_some(())
    })
    .await;
    assert!(exists(&sim, &Gvr::VOLCANO_JOB, "team-b", "pending"));

    // Each deletion once, with the job's uid as its precondition, in the background.
    let deletions = sim.deletions();
    assert_eq!(deletions.len(), 2, "{deletions:#?}");
    for (record, job) in deletions.iter().zip([&done, &dead]) {
        assert_eq!(record.name, job.name());
        assert_eq!(record.precondition_uid.as_deref(), Some(job.uid()));
        assert_eq!(record.propagation.as_deref(), Some("Background"));
        assert_eq!(record.status, 200);
    }
    wait_for("both deletions counted", || {
        (outcomes(&daemon).get("deleted") == Some(&2)).then_some(())
    })
    .await;
    let _ = pending;
    daemon.shutdown(Duration::from_secs(5)).await;
}

/// log-archive cannot store the archive (its folder was replaced by a file): its retries end
/// in a dead letter, and the job stays, held for it. Once the archive is writable again and
/// the operator replays the letter, the logs are archived, and only then is the job deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_archive_failed_stays_until_it_is_archived() {
    init_logs();
    let sim = SimCluster::start("east").await.expect("sim");
    let setup = Setup::new(
        "kinds: [{name: volcano-job}]\narchive: {local: archive}\n\
         cleanup: {rules: [{kinds: [volcano-job], after_finished: 0}]}\n",
    );
    setup.install_wasm("log-archive", "log-archive.wasm");
    setup.write_manifest(
        "log-archive",
        &format!("{ARCHIVE}retry: {{max_attempts: 3, min_delay_ms: 200, max_delay_ms: 400}}\n"),
    );
    setup.add_cluster(&sim);
    let daemon = Daemon::start(setup.config_dir())
        .await
        .expect("daemon starts");
    wait_synced(&daemon, "east").await;
    let blocked = setup.path("archive/log-archive");
    write_atomic(&blocked, b"not a folder");

    let job = finished(&sim, Flavor::Volcano, "ml", "unarchived", "");
    wait_for("the job held by log-archive's dead letter", || {
        (held(&daemon).get("unarchived").map(String::as_str) == Some("dead_lettered log-archive"))
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        exists(&sim, &Gvr::VOLCANO_JOB, "ml", "unarchived"),
        "a job whose archive failed stays"
    );
    assert!(sim.deletions().is_empty());

    std::fs::remove_file(&blocked).expect("the archive writable again");
    operator(
        &setup,
        DeadLettersCommand::Replay {
            plugin: Some("log-archive".into()),
            all: true,
            ids: vec![],
        },
    )
    .await;
    wait_for("the job deleted once archived", || {
        (!exists(&sim, &Gvr::VOLCANO_JOB, "ml", "unarchived")).then_some(())
    })
    .await;
    let manifest = setup.path(&format!(
        "archive/log-archive/east/ml/{}/manifest.json",
        job.uid()
    ));
    assert!(manifest.exists(), "archived before it was deleted");
    assert_eq!(sim.deletions().len(), 1);
    daemon.shutdown(Duration::from_secs(5)).await;
}

/// Clean-up is turned on in a running daemon's main file, as a dry run, after five jobs
/// finished: the edit lists the clusters again, so the dry run counts those five (once each)
/// and deletes nothing; turned off, they are deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turned_on_live_a_dry_run_counts_every_finished_job_once_and_deletes_nothing() {
    init_logs();
    let sim = SimCluster::start("east").await.expect("sim");
    let main = |cleanup: &str| format!("kinds: [{{name: batch-job}}]\n{cleanup}");
    let rules = |dry: bool| {
        format!(
            "cleanup:\n  dry_run: {dry}\n  per_cluster_per_second: 50\n\
             \x20 rules: [{{kinds: [batch-job], after_finished: 0}}]\n"
        )
    };
    let setup = Setup::new(&main(""));
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
    setup.add_cluster(&sim);
    let daemon = Daemon::start(setup.config_dir())
        .await
        .expect("daemon starts");
    wait_synced(&daemon, "east").await;
    let jobs: Vec<JobDriver> = (0..5)
        .map(|i| finished(&sim, Flavor::Batch, "ml", &format!("job-{i}"), ""))
        .collect();
    wait_for("five ends delivered", || {
        let lines = setup.lines("log/events.jsonl");
        (lines.iter().filter(|l| l["phase"] == "succeeded").count() == 5).then_some(())
    })
    .await;
    assert!(!daemon.cleanup().on);

    let edit = |text: String| {
        let mut whole = std::fs::read_to_string(setup.path("jobrelay.yaml")).expect("main file");
        if let Some(at) = whole.find("cleanup:") {
            whole.truncate(at);
        }
        whole.push_str(&text);
        write_atomic(&setup.path("jobrelay.yaml"), whole.as_bytes());
    };
    edit(rules(true));
    wait_for("five would-be deletions counted", || {
        (outcomes(&daemon).get("would_delete") == Some(&5)).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        outcomes(&daemon).get("would_delete"),
        Some(&5),
        "each job counted once"
    );
    assert!(sim.deletions().is_empty(), "a dry run calls no DELETE");
    assert!(
        jobs.iter()
            .all(|j| exists(&sim, &Gvr::BATCH_JOB, "ml", j.name()))
    );
    assert_eq!(daemon.cleanup().schedule.jobs["east"]["would_delete"], 5);
    let delivered = setup.lines("log/events.jsonl").len();

    // Turned off: now they go.
    edit(rules(false));
    wait_for("all five deleted", || {
        jobs.iter()
            .all(|j| !exists(&sim, &Gvr::BATCH_JOB, "ml", j.name()))
            .then_some(())
    })
    .await;
    assert_eq!(sim.deletions().len(), 5);
    wait_for("five deletions counted", || {
        (outcomes(&daemon).get("deleted") == Some(&5)).then_some(())
    })
    .await;
    // The re-list repeated nothing to the plugin: only the deletions are new.
    let lines = setup.lines("log/events.jsonl");
    assert!(
        lines[..delivered].iter().all(|l| l["phase"] != "deleted"),
        "nothing deleted before the dry run ended"
    );
    assert_eq!(
        lines.iter().filter(|l| l["phase"] == "succeeded").count(),
        5,
        "the re-list delivered no end twice"
    );
    let _ = main;
    daemon.shutdown(Duration::from_secs(5)).await;
}

/// The daemon does not see the job deleted and re-created (its watch is stalled): its schedule
/// still names the old uid when it comes due. The API server refuses the deletion on the uid
/// precondition, and the new job stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_recreated_under_its_name_is_never_deleted_by_the_old_schedule() {
    init_logs();
    let sim = SimCluster::start("east").await.expect("sim");
    let setup = Setup::new(
        "kinds: [{name: batch-job}]\n\
         cleanup: {rules: [{kinds: [batch-job], after_finished: 3s}]}\n",
    );
    setup.add_cluster(&sim);
    let daemon = Daemon::start(setup.config_dir())
        .await
        .expect("daemon starts");
    wait_synced(&daemon, "east").await;
    let old = finished(&sim, Flavor::Batch, "ml", "same", "");
    wait_for("the old job scheduled", || {
        let status = daemon.cleanup();
        (status.schedule.jobs.get("east")?.get("scheduled") == Some(&1)).then_some(())
    })
    .await;
    sim.stall_watches(true);
    sim.delete(&Gvr::BATCH_JOB, "ml", "same").expect("delete");
    let mut new = JobDriver::builder(Flavor::Batch, "ml", "same")
        .create(&sim)
        .expect("re-create");
    new.running().expect("running");
    assert_ne!(old.uid(), new.uid());

    wait_for("the old schedule's deletion refused", || {
        (outcomes(&daemon).get("replaced") == Some(&1)).then_some(())
    })
    .await;
    let deletions = sim.deletions();
    assert_eq!(deletions.len(), 1, "{deletions:#?}");
    assert_eq!(deletions[0].precondition_uid.as_deref(), Some(old.uid()));
    assert_eq!(deletions[0].status, 409);
    let standing = sim
        .get(&Gvr::BATCH_JOB, "ml", "same")
        .expect("the new job stays");
    assert_eq!(standing["metadata"]["uid"].as_str(), Some(new.uid()));
    assert!(
        daemon
            .cleanup()
            .schedule
            .jobs
            .values()
            .all(|s| s.is_empty())
    );
    sim.stall_watches(false);
    daemon.shutdown(Duration::from_secs(5)).await;
}

/// 10,000 jobs already finished when the daemon starts all come due at once: their deletions
/// are spaced at the configured pace (50 a second here), never in a burst.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_jobs_finishing_at_once_are_deleted_at_the_configured_pace() {
    const JOBS: usize = 10_000;
    const RATE: usize = 50;
    init_logs();
    let sim = finished_batch_jobs(JOBS).await;
    let setup = Setup::new(&format!(
        "kinds: [{{name: batch-job}}]\n\
         cleanup: {{per_cluster_per_second: {RATE}, rules: [{{kinds: [batch-job], after_finished: 0}}]}}\n"
    ));
    setup.add_cluster(&sim);
    let daemon = Daemon::start(setup.config_dir())
        .await
        .expect("daemon starts");
    wait_synced(&daemon, "east").await;
    let scheduled = wait_for("all 10,000 scheduled", || {
        let status = daemon.cleanup();
        let n: u64 = status.schedule.jobs.get("east")?.values().sum();
        (n as usize + sim.deletions().len() >= JOBS).then_some(n)
    })
    .await;
    assert!(scheduled > 0);
    let started = Instant::now();
    let deletions = loop {
        let deletions = sim.deletions();
        if deletions.len() >= 15 * RATE {
            break deletions;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "only {} deletions in two minutes",
            deletions.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    daemon.shutdown(Duration::from_secs(5)).await;
    let _ = deletions;
    let deletions = sim.deletions();
    let mut seen = std::collections::HashSet::new();
    let mut times = Vec::new();
    for d in &deletions {
        assert!(seen.insert(d.name.clone()), "{} deleted twice", d.name);
        assert_eq!(d.status, 200, "{d:?}");
        times.push(d.at);
    }
    times.sort();
    // In any two seconds, at most two seconds' worth of deletions and the one the limiter
    // lets through at once, with a quarter second's slack for requests bunched in transit.
    let window = Duration::from_secs(2);
    let most = 2 * RATE + 1 + RATE / 4;
    let mut start = 0;
    for (end, at) in times.iter().enumerate() {
        while *at - times[start] >= window {
            start += 1;
        }
        let within = end - start + 1;
        assert!(
            within <= most,
            "{within} deletions within two seconds (at most {most} allowed at {RATE}/s)"
        );
    }
    let span = times[times.len() - 1] - times[0];
    let pace = (times.len() - 1) as f64 / span.as_secs_f64();
    assert!(
        pace <= RATE as f64 * 1.05,
        "{pace:.1} deletions a second over {} deletions",
        times.len()
    );
}

/// Six Volcano jobs fail at once and wait their turns at one deletion a second; the last one
/// is restarted by its policy (failed → restarting → running) while it waits. Its turn comes
/// with it running again: it is not deleted, though it was already queued for deletion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_restarted_while_it_waits_its_turn_is_not_deleted() {
    init_logs();
    let sim = SimCluster::start("east").await.expect("sim");
    let setup = Setup::new(
        "kinds: [{name: volcano-job}]\n\
         cleanup: {per_cluster_per_second: 1, rules: [{kinds: [volcano-job], after_finished: 0}]}\n",
    );
    setup.add_cluster(&sim);
    let daemon = Daemon::start(setup.config_dir())
        .await
        .expect("daemon starts");
    wait_synced(&daemon, "east").await;
    let mut jobs: Vec<JobDriver> = (0..6)
        .map(|i| {
            let mut job = JobDriver::builder(Flavor::Volcano, "ml", &format!("f{i}"))
                .pace(jobrelay_testkit::Pace::Wall)
                .create(&sim)
                .expect("create");
            job.running().expect("running");
            job.failed("PodFailed").expect("failed");
            job
        })
        .collect();
    wait_for("the backlog queued for deletion", || {
        let status = daemon.cleanup();
        (status.schedule.jobs.get("east")?.get("due").copied()? >= 5).then_some(())
    })
    .await;
    let last = jobs.last_mut().expect("six jobs");
    last.restarting().expect("restarting");
    last.running().expect("running");
    wait_for("the five others deleted", || {
        (sim.deletions().len() == 5).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        exists(&sim, &Gvr::VOLCANO_JOB, "ml", "f5"),
        "the restarted job runs on"
    );
    let deletions = sim.deletions();
    assert_eq!(deletions.len(), 5, "{deletions:#?}");
    assert!(deletions.iter().all(|d| d.name != "f5"));
    daemon.shutdown(Duration::from_secs(5)).await;
}
