//! The fault-injection soak: the real `jobrelay run` process, the four shipped plugins, two
//! simulated clusters running seeded job lifecycles of every kind, and random faults — watch
//! drops, compactions (410 Gone on resume), bursts of 503, API outages, SIGKILLs of the daemon
//! restarted a moment later, the plugins' MariaDB killed and restarted (a private server on its
//! own port and data folder, never the shared one), and the Feishu bot answering 11232
//! (throttled). The database is cut once with a SIGKILL of the daemon while it is down, so a
//! restart meets a plugin whose load fails for a passing reason.
//!
//! A burst of 503s or of throttling is a number of requests *within a few seconds*, as a real
//! server's brief trouble is: a count alone, met by a client that backs off (a quiet cluster
//! sees little but the watches' retries and the finalizer adders'), outlives any real burst —
//! bursts set again every few seconds then refuse every request for minutes, an outage the
//! schedule never meant; the outages are a fault of their own.
//!
//! Then the outcome is checked against what the driver did (its ground truth):
//! - every job's final state is in the event log (`every-version`), and the plugin's cursors
//!   match the clusters: nothing is left in a lane;
//! - MySQL: every job's row has its outcome (`succeeded`/`failed`), a deleted job's row has
//!   `deleted_at`, and `job_transitions` has the job's `running` and terminal transitions —
//!   for a Volcano job, whose status records every entry, exactly one `restarting` row per
//!   restart and one `running` row more; half the restarts run again within the second
//!   (the controllers stamp whole seconds of the wall clock), which the transition keys must
//!   tell apart;
//! - Feishu: every job's terminal card arrived; more than one is counted as the at-least-once
//!   window (a kill between the post and its record) and bounded by the kills;
//! - the archive: every job has a manifest listing every pod it had when it finished, each
//!   pod's log stored;
//! - no run logged a panic.
//!
//! `JOBRELAY_SOAK_SEED=<n>` replays one schedule (the seed is printed); `JOBRELAY_SOAK_JOBS`
//! and `JOBRELAY_SOAK_KILLS` make the long run (see `docs/BENCHMARKS.md`).

use crate::process::{
    CONCURRENCY, DEADLINE, Played, Relay, Rng, cursors, cursors_behind, drive_with, missing_finals,
    plan_jobs_over, plugin_dir, read_lines, soak_seed, state_file, str_of, write,
};

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jobrelay_testkit::{FeishuReceiver, Flavor, PrivateMariaDb, SimCluster};
use serde_json::Value;
use sqlx::mysql::MySqlPool;

const TOKEN: &str = "soak";

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What the fault schedule did.
#[derive(Debug, Default)]
struct Faults {
    watch_drops: usize,
    compactions: usize,
    error_bursts: usize,
    outages: usize,
    kills: usize,
    db_outages: usize,
    throttles: usize,
}

/// The config folder: both clusters, every kind held by jobrelay's finalizer, the four plugins.
fn config_folder(root: &Path, sims: &[SimCluster], db_url: &str, webhook: &str) {
    write(
        &root.join("jobrelay.yaml"),
        &format!(
            // A budget of 1 MiB: bursts spill events to the inbox, read back under the faults.
            "plugin_dir: {}\nstate: {{path: state/jobrelay.db}}\ndebounce_ms: 100\nrescan_seconds: 2\n\
             event_memory_mb: 1\n\
             kinds:\n  - {{name: volcano-job, finalizer: true}}\n  - {{name: pytorch-job, finalizer: true}}\n  \
             - {{name: mpi-job, finalizer: true}}\n  - {{name: batch-job, finalizer: true}}\n\
             sql:\n  connections:\n    main: {{url: \"{db_url}\", max_connections: 4, acquire_timeout_ms: 1000}}\n\
             archive: {{local: archive}}\n",
            plugin_dir().display()
        ),
    );
    for sim in sims {
        write(
            &root.join(format!("clusters/{}.yaml", sim.name())),
            &sim.kubeconfig_yaml(),
        );
    }
    write(
        &root.join("plugins/log.yaml"),
        &format!(
            "wasm: event-log.wasm\ndelivery: every-version\nconcurrency: {CONCURRENCY}\n\
             grants:\n  filesystem:\n    - {{host: out/log, guest: /data, writable: true}}\n\
             config:\n  file: events.jsonl\n"
        ),
    );
    write(
        &root.join("plugins/mysql-sync.yaml"),
        &format!(
            "wasm: mysql-sync.wasm\ndelivery: transitions\nconcurrency: {CONCURRENCY}\n\
             grants: {{sql: [main]}}\nconfig: {{connection: main}}\n"
        ),
    );
    write(
        &root.join("plugins/feishu-notify.yaml"),
        &format!(
            "wasm: feishu-notify.wasm\ndelivery: transitions\nconcurrency: {CONCURRENCY}\n\
             rate_limits: [{{per_second: 50}}]\n\
             grants:\n  http: {{allow: [\"http://127.0.0.1:*\"], allow_private: true}}\n  kv: true\n\
             config:\n  webhook: \"{webhook}\"\n  phases: \"succeeded,failed\"\n"
        ),
    );
    write(
        &root.join("plugins/log-archive.yaml"),
        &format!(
            "wasm: log-archive.wasm\ndelivery: transitions\nconcurrency: {CONCURRENCY}\n\
             timeout_ms: 20000\ngrants: {{pod_logs: {{}}, archive: {{}}, kv: true}}\n"
        ),
    );
}

/// How many plugins have a recorded install (a lane) in the state file.
async fn installed_plugins(state: &Path) -> i64 {
    let Ok(pool) =
        sqlx::SqlitePool::connect(&format!("sqlite://{}?mode=ro", state.display())).await
    else {
        return 0;
    };
    let count = sqlx::query_scalar("SELECT COUNT(*) FROM plugin_installs")
        .fetch_one(&pool)
        .await
        .unwrap_or(0);
    pool.close().await;
    count
}

/// Terminal cards per (cluster, job name, phase).
fn cards(feishu: &FeishuReceiver) -> BTreeMap<(String, String, String), usize> {
    let mut counted = BTreeMap::new();
    for message in feishu.messages(TOKEN) {
        let field = |label: &str| message.field(label).unwrap_or_default();
        let key = (field("Cluster"), field("Job"), message.phase());
        *counted.entry(key).or_default() += 1;
    }
    counted
}

/// One job's rows in MySQL: (phase, outcome, deleted_at set) and its transitions' phases.
type MySqlView = BTreeMap<(String, String), (String, Option<String>, bool, Vec<String>)>;

/// cluster, uid, phase, outcome, deleted_at.
type JobRow = (String, String, String, Option<String>, Option<String>);

async fn mysql_view(pool: &MySqlPool) -> Result<MySqlView, String> {
    let jobs: Vec<JobRow> =
        sqlx::query_as("SELECT cluster, uid, phase, outcome, CAST(deleted_at AS CHAR) FROM jobs")
            .fetch_all(pool)
            .await
            .map_err(|e| format!("reading jobs: {e}"))?;
    let transitions: Vec<(String, String, String)> =
        sqlx::query_as("SELECT cluster, uid, to_phase FROM job_transitions")
            .fetch_all(pool)
            .await
            .map_err(|e| format!("reading job_transitions: {e}"))?;
    let mut view: MySqlView = jobs
        .into_iter()
        .map(|(c, u, phase, outcome, deleted)| {
            ((c, u), (phase, outcome, deleted.is_some(), Vec::new()))
        })
        .collect();
    for (c, u, to) in transitions {
        if let Some(row) = view.get_mut(&(c, u)) {
            row.3.push(to);
        }
    }
    Ok(view)
}

/// What is still missing of one job's outcome in each plugin; empty when all is there.
fn missing_for(
    cluster: &str,
    job: &Played,
    mysql: &MySqlView,
    cards: &BTreeMap<(String, String, String), usize>,
    archive: &Path,
) -> Vec<String> {
    let mut missing = Vec::new();
    let name = format!("{cluster}/{}", job.name);
    if job.unseen {
        missing.push(format!(
            "{name}: deleted without ever carrying jobrelay's finalizer"
        ));
    }
    match mysql.get(&(cluster.to_string(), job.uid.clone())) {
        None => missing.push(format!("{name}: no MySQL row")),
        Some((phase, outcome, deleted_at, transitions)) => {
            if outcome.as_deref() != Some(job.terminal) {
                missing.push(format!(
                    "{name}: MySQL outcome {outcome:?} (phase {phase}), expected {}",
                    job.terminal
                ));
            }
            if job.deleted && !deleted_at {
                missing.push(format!("{name}: deleted, MySQL has no deleted_at"));
            }
            for wanted in ["running", job.terminal] {
                if !transitions.iter().any(|t| t == wanted) {
                    missing.push(format!("{name}: no {wanted} row in job_transitions"));
                }
            }
            // A Volcano job's status records every entry: each restart and each return to
            // running is a row of its own, however fast it came and whatever the faults.
            if job.flavor == Flavor::Volcano {
                let count = |phase: &str| transitions.iter().filter(|t| *t == phase).count();
                let (restarting, running) = (count("restarting"), count("running"));
                if restarting != job.restarts || running != job.restarts + 1 {
                    missing.push(format!(
                        "{name}: {restarting} restarting and {running} running rows in \
                         job_transitions for {} restarts",
                        job.restarts
                    ));
                }
            }
        }
    }
    let card = (
        cluster.to_string(),
        job.name.clone(),
        job.terminal.to_string(),
    );
    if !cards.contains_key(&card) {
        missing.push(format!("{name}: no {} card", job.terminal));
    }
    let manifest = archive.join(format!(
        "log-archive/{cluster}/{}/{}/manifest.json",
        job.namespace, job.uid
    ));
    match std::fs::read(&manifest)
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
    {
        None => missing.push(format!("{name}: no archive manifest")),
        Some(m) => {
            let pods: Vec<&str> = m["pods"]
                .as_array()
                .map(|p| p.iter().map(|p| str_of(p, "name")).collect())
                .unwrap_or_default();
            for pod in &job.pods {
                if !pods.contains(&pod.as_str()) {
                    missing.push(format!("{name}: pod {pod} not in the archive"));
                }
            }
            for pod in m["pods"].as_array().into_iter().flatten() {
                let key = pod["containers"][0]["logs"][0]["key"].as_str();
                let stored = key.is_some_and(|k| {
                    std::fs::metadata(archive.join("log-archive").join(k))
                        .is_ok_and(|meta| meta.len() > 0)
                });
                if !stored {
                    missing.push(format!(
                        "{name}: pod {} has no stored log",
                        str_of(pod, "name")
                    ));
                }
            }
        }
    }
    missing
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_kills_and_a_database_outage_lose_no_outcome() {
    let clusters = env_number("JOBRELAY_SOAK_CLUSTERS", 2);
    let jobs_per_cluster = env_number("JOBRELAY_SOAK_JOBS", 12);
    let max_kills = env_number("JOBRELAY_SOAK_KILLS", 4);
    // Creations spread over this many seconds (the lifecycles end up to ~20 s later).
    let span_ms = env_number("JOBRELAY_SOAK_SECONDS", 9) as u64 * 1000;
    // One database outage in a short run; about one a minute in a long one.
    let db_outages = (span_ms / 60_000).max(1);
    let started = Instant::now();
    let seed = soak_seed();
    println!("fault soak seed {seed} (JOBRELAY_SOAK_SEED={seed} replays this schedule)");
    let mut rng = Rng(seed);

    let db = tokio::task::spawn_blocking(|| {
        let mut db = PrivateMariaDb::init()?;
        db.start()?;
        Ok::<_, std::io::Error>(db)
    })
    .await
    .expect("task")
    .expect("a private MariaDB (mariadb-install-db and mariadbd must be installed)");
    let db_url = db.url();
    let db = Arc::new(Mutex::new(db));
    let feishu = FeishuReceiver::start().await.expect("feishu receiver");
    let webhook = feishu.add_bot(TOKEN, None, None);
    let mut sims = Vec::new();
    for i in 0..clusters {
        let name = ["alpha", "beta"]
            .get(i)
            .map_or_else(|| format!("c{i}"), |n| n.to_string());
        sims.push(SimCluster::start(&name).await.expect("simulator"));
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().to_path_buf();
    config_folder(&config, &sims, &db_url, &webhook);

    // The jobs start once the plugins are installed: a job older than a plugin's install
    // gets its current state, not its history (the first-install rule).
    let mut relay = Relay::start(&config, "run 1");
    let installs = config.join("state/jobrelay.db");
    let started_wait = Instant::now();
    while installed_plugins(&installs).await < 4 {
        assert!(
            started_wait.elapsed() < DEADLINE,
            "the plugins never got their lanes\n{}",
            relay.tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut drivers = Vec::new();
    for sim in &sims {
        let plans = plan_jobs_over(&mut rng, jobs_per_cluster, span_ms, true);
        drivers.push(tokio::spawn(drive_with(
            sim.clone(),
            plans,
            Some("jobrelay.io/delivery"),
        )));
    }

    // ----- the fault schedule, while the drivers play the lifecycles -----
    let mut faults = Faults::default();
    let mut logs: Vec<String> = Vec::new();
    let mut outage_ends: Vec<Option<Instant>> = vec![None; sims.len()];
    let mut db_back_at: Option<Instant> = None;
    // The database is cut at this step of the schedule, with a kill of the daemon while down.
    let db_cut_at = rng.range(2, 6);
    let mut step = 0;
    // Kills spread over the whole schedule.
    let kill_gap = Duration::from_millis(span_ms / max_kills.max(1) as u64);
    let mut last_kill = Instant::now();
    let set_db = |up: bool| {
        let db = db.clone();
        tokio::task::spawn_blocking(move || {
            let mut db = db.lock().unwrap_or_else(|p| p.into_inner());
            if up {
                db.start()
            } else {
                db.kill();
                Ok(())
            }
        })
    };
    while !drivers.iter().all(|d| d.is_finished()) {
        tokio::time::sleep(Duration::from_millis(rng.range(500, 1500))).await;
        step += 1;
        let now = Instant::now();
        for (sim, end) in sims.iter().zip(outage_ends.iter_mut()) {
            if end.is_some_and(|e| e <= now) {
                sim.set_outage(false);
                *end = None;
            }
        }
        if db_back_at.is_some_and(|t| t <= now) {
            set_db(true).await.expect("task").expect("MariaDB restarts");
            db_back_at = None;
        }
        if let Some(status) = relay.child.try_wait().expect("try_wait") {
            panic!("a run ended by itself: {status}\n{}", relay.tail());
        }
        let which = rng.range(0, sims.len() as u64 - 1) as usize;
        let sim = &sims[which];
        if step == db_cut_at {
            set_db(false).await.expect("task").expect("MariaDB killed");
            faults.db_outages += 1;
            db_back_at = Some(now + Duration::from_millis(rng.range(8000, 14000)));
            // The daemon killed while the database is down: its restart cannot load
            // mysql-sync until the database is back.
            relay.sigkill().await;
            logs.push(relay.log());
            tokio::time::sleep(Duration::from_millis(rng.range(500, 1500))).await;
            faults.kills += 1;
            relay = Relay::start(&config, &format!("run {}", faults.kills + 1));
            continue;
        }
        match rng.range(0, 9) {
            0 | 1 => {
                sim.drop_watches();
                faults.watch_drops += 1;
            }
            2 => {
                sim.compact();
                faults.compactions += 1;
            }
            3 | 4 => {
                let window = Duration::from_millis(rng.range(1000, 4000));
                sim.fail_burst(rng.range(3, 12) as usize, 503, window);
                faults.error_bursts += 1;
            }
            5 if outage_ends[which].is_none() => {
                sim.set_outage(true);
                outage_ends[which] = Some(now + Duration::from_millis(rng.range(2000, 6000)));
                faults.outages += 1;
            }
            8 if db_back_at.is_none() && (faults.db_outages as u64) < db_outages => {
                set_db(false).await.expect("task").expect("MariaDB killed");
                faults.db_outages += 1;
                db_back_at = Some(now + Duration::from_millis(rng.range(5000, 15000)));
            }
            6 | 7 if faults.kills < max_kills && last_kill.elapsed() >= kill_gap => {
                last_kill = Instant::now();
                relay.sigkill().await;
                logs.push(relay.log());
                tokio::time::sleep(Duration::from_millis(rng.range(1000, 3000))).await;
                faults.kills += 1;
                relay = Relay::start(&config, &format!("run {}", faults.kills + 1));
            }
            _ => {
                let window = Duration::from_millis(rng.range(1000, 5000));
                feishu.throttle_burst(TOKEN, rng.range(3, 10) as usize, window);
                faults.throttles += 1;
            }
        }
    }
    for sim in &sims {
        sim.set_outage(false);
    }
    if db_back_at.is_some() {
        set_db(true).await.expect("task").expect("MariaDB restarts");
    }
    let mut played: Vec<(String, Vec<Played>)> = Vec::new();
    for (sim, driver) in sims.iter().zip(drivers) {
        let jobs = driver
            .await
            .expect("driver task")
            .expect("driver plays every step");
        played.push((sim.name().to_string(), jobs));
    }
    let driven = started.elapsed();

    // ----- the invariants, once the last run has caught up -----
    let events = config.join("out/log/events.jsonl");
    let archive = config.join("archive");
    let pool = MySqlPool::connect(&db_url)
        .await
        .expect("the private MariaDB is back");
    let jobs: usize = played.iter().map(|(_, j)| j.len()).sum();
    let caught_up = {
        let deadline = Instant::now() + DEADLINE * 2 + Duration::from_millis(jobs as u64 * 20);
        loop {
            let (lines, _) = read_lines(&events);
            let mysql = mysql_view(&pool).await.unwrap_or_default();
            let cards = cards(&feishu);
            let mut missing = Vec::new();
            let cursors = cursors(&state_file(&config), "log").await;
            for (cluster, jobs) in &played {
                let lines: Vec<Value> = lines
                    .iter()
                    .filter(|l| str_of(l, "cluster") == cluster)
                    .cloned()
                    .collect();
                missing.extend(
                    missing_finals(jobs, &lines)
                        .into_iter()
                        .map(|m| format!("{cluster}/{m}: not in the event log")),
                );
                for job in jobs {
                    missing.extend(missing_for(cluster, job, &mysql, &cards, &archive));
                }
                let sim = sims.iter().find(|s| s.name() == cluster).expect("sim");
                missing.extend(
                    cursors_behind(sim, cluster, &cursors, jobs)
                        .into_iter()
                        .map(|m| format!("{cluster}: event-log lane: {m}")),
                );
            }
            if missing.is_empty() {
                break Ok(());
            }
            if Instant::now() > deadline {
                break Err(missing.join("\n"));
            }
            tokio::time::sleep(Duration::from_millis(500 + jobs as u64)).await;
        }
    };
    if let Err(missing) = caught_up {
        logs.push(relay.log());
        let saved = std::env::temp_dir().join(format!("jobrelay-fault-soak-{seed}.log"));
        let _ = std::fs::write(&saved, logs.join("\n----- next run -----\n"));
        panic!(
            "seed {seed}: after the faults ({faults:?}) these outcomes never arrived:\n{missing}\n\
             every run's log: {}",
            saved.display()
        );
    }
    relay.signal("TERM");
    let status = relay.exit_within(Duration::from_secs(30)).await;
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "SIGTERM ends the last run with code 0\n{}",
        relay.tail()
    );
    logs.push(relay.log());

    // ----- figures and the bounds -----
    let (lines, torn) = read_lines(&events);
    assert!(torn.is_empty(), "torn event log lines: {torn:#?}");
    let cards = cards(&feishu);
    let duplicated: Vec<_> = cards.iter().filter(|(_, n)| **n > 1).collect();
    let terminal_cards = played
        .iter()
        .flat_map(|(c, jobs)| {
            jobs.iter()
                .map(move |j| (c.clone(), j.name.clone(), j.terminal.to_string()))
        })
        .filter(|k| cards.contains_key(k))
        .count();
    let panics: Vec<&str> = logs
        .iter()
        .flat_map(|l| l.lines())
        .filter(|l| l.contains("panicked"))
        .collect();
    let deleted: usize = played
        .iter()
        .map(|(_, j)| j.iter().filter(|j| j.deleted).count())
        .sum();
    println!("--- fault soak figures ---");
    println!("seed:              {seed}");
    println!("clusters:          {clusters}");
    println!("jobs:              {jobs} ({deleted} deleted)");
    println!("faults:            {faults:?}");
    println!("event log lines:   {}", lines.len());
    let all_jobs = || played.iter().flat_map(|(_, jobs)| jobs.iter());
    let restarts: usize = all_jobs().map(|j| j.restarts).sum();
    let fast: usize = all_jobs().map(|j| j.fast_restarts).sum();
    let volcano: usize = all_jobs()
        .filter(|j| j.flavor == Flavor::Volcano)
        .map(|j| j.restarts)
        .sum();
    println!(
        "restarts played:   {restarts} ({fast} running again less than a second after restarting; {volcano} of \
         Volcano jobs, each checked row for row in job_transitions)"
    );
    println!("terminal cards:    {terminal_cards} of {jobs} jobs; duplicated: {duplicated:?}");
    println!("feishu requests:   {}", feishu.attempts(TOKEN));
    println!("panics:            {}", panics.len());
    println!("driver finished:   {:.1} s", driven.as_secs_f64());
    println!(
        "elapsed:           {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(panics.is_empty(), "panics: {panics:#?}");
    // The at-least-once window: a card posted by a call the kill cut before it recorded the
    // post. At most the calls in flight at each kill.
    let window = faults.kills * CONCURRENCY;
    assert!(
        duplicated.len() <= window && duplicated.iter().all(|(_, n)| **n == 2),
        "duplicate cards beyond the at-least-once window ({window}): {duplicated:?}"
    );
    pool.close().await;
    let mut db = db.lock().unwrap_or_else(|p| p.into_inner());
    db.kill();
}
