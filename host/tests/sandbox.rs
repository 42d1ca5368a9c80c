//! What a plugin was not granted stays out of reach: every attempt of the `intruder` test
//! plugin is refused with an error that says what and why, and the host keeps serving.
//! Outbound HTTP refusals are proven in `http_capability.rs`.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::{event, runtime, spec};
use jobrelay::clusters::supervisor::build_client;
use jobrelay_capabilities::Grants;
use jobrelay_capabilities::Services;
use jobrelay_capabilities::archive::ArchiveGrant;
use jobrelay_capabilities::archive::ArchiveLocation;
use jobrelay_capabilities::archive::ArchiveStore;
use jobrelay_capabilities::pod_logs::ClusterDirectory;
use jobrelay_capabilities::pod_logs::PodLogsGrant;
use jobrelay_capabilities::sql::Databases;
use jobrelay_capabilities::sql::{SqlConnection, SqlSettings};
use jobrelay_contract::event::{JobEvent, Phase};
use jobrelay_runtime::{CallError, PluginVersion, Runtime};
use jobrelay_state::{PluginKv, SqliteStore};
use jobrelay_testkit::{Flavor, JobDriver, SimCluster};
use jobrelay_watch::kinds::JobKind;
use kube::config::Kubeconfig;

struct Setup {
    _sim: SimCluster,
    mine: JobDriver,
    theirs: JobDriver,
    dir: tempfile::TempDir,
    rt: Runtime,
    archive: ArchiveStore,
}

async fn setup() -> Setup {
    let sim = SimCluster::start("east").await.expect("simulator");
    let mine = JobDriver::builder(Flavor::PyTorch, "ml", "mine")
        .workers(1)
        .create(&sim)
        .expect("job");
    let theirs = JobDriver::builder(Flavor::PyTorch, "ml", "theirs")
        .workers(1)
        .create(&sim)
        .expect("job");
    for job in [&mine, &theirs] {
        for pod in job.pod_names() {
            job.set_log(&pod, false, format!("log of {pod}\n"))
                .expect("log");
        }
    }
    let kubeconfig = Kubeconfig::from_yaml(&sim.kubeconfig_yaml()).expect("kubeconfig");
    let client = build_client(&kubeconfig, None).await.expect("client");
    let directory = ClusterDirectory::default();
    directory.set_client("east", client);
    directory.set_kinds(
        &JobKind::builtin("pytorch-job")
            .into_iter()
            .collect::<Vec<_>>(),
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let secret_db = format!("sqlite://{}", dir.path().join("secret.db").display());
    let sql = SqlSettings {
        connections: BTreeMap::from([
            (
                "secret-db".to_string(),
                SqlConnection {
                    url: secret_db,
                    max_connections: 1,
                    acquire_timeout_ms: 1_000,
                    max_statement_ms: 1_000,
                },
            ),
            (
                "maria".to_string(),
                SqlConnection {
                    url: common::mysql_url(),
                    max_connections: 2,
                    acquire_timeout_ms: 5_000,
                    max_statement_ms: 1_000,
                },
            ),
        ]),
    };
    let kv: Arc<dyn PluginKv> = Arc::new(
        SqliteStore::open(&dir.path().join("state.db"))
            .await
            .expect("state"),
    );
    let archive =
        ArchiveStore::open(&ArchiveLocation::Local(dir.path().join("archive"))).expect("archive");
    let services = Services {
        sql: Databases::open(&sql, &dir.path().join("embedded")).expect("pools"),
        kv: Some(kv),
        archive: Some(archive.clone()),
        clusters: directory,
        refusals: Default::default(),
        log_lines: Default::default(),
        tape: None,
    };
    Setup {
        _sim: sim,
        mine,
        theirs,
        rt: runtime(services),
        dir,
        archive,
    }
}

async fn intruder(rt: &Runtime, grants: Grants) -> Arc<PluginVersion> {
    rt.load(spec("intruder", "intruder", &[], grants))
        .await
        .expect("intruder loads")
}

fn attempt(job: &JobDriver, what: &str) -> JobEvent {
    let mut e = event(
        job.uid(),
        "10",
        Phase::Failed,
        Some(Phase::Running),
        "2026-11-21T10:00:00Z",
    );
    e.api_version = "kubeflow.org/v1".into();
    e.kind = "PyTorchJob".into();
    e.name = job.name().into();
    e.namespace = job.namespace().into();
    e.annotations
        .insert("jobrelay.test/try".into(), what.into());
    e
}

/// The refusal's text; panics if the attempt was not refused as a give-up.
async fn refused(plugin: &PluginVersion, e: &JobEvent) -> String {
    match plugin.handle(e).await {
        Err(CallError::GiveUp(reason)) => {
            assert!(reason.starts_with("refused:"), "{reason}");
            reason
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ungranted_reach_is_refused_and_granted_reach_works() {
    let s = setup().await;
    let granted = Grants {
        sql: vec!["embedded".into()],
        pod_logs: Some(PodLogsGrant::default()),
        archive: Some(ArchiveGrant::default()),
        ..Grants::default()
    };
    let plugin = intruder(&s.rt, granted).await;
    let mine = &s.mine;

    // SQL: only the granted connection.
    let text = refused(&plugin, &attempt(mine, "sql:secret-db")).await;
    assert!(
        text.contains("Denied") && text.contains("`secret-db` is not granted"),
        "{text}"
    );
    plugin
        .handle(&attempt(mine, "sql:embedded"))
        .await
        .expect("the granted connection works");
    // Transactions are all or nothing, and values come back with their types (the plugin
    // checks and gives up saying what differed).
    plugin
        .handle(&attempt(mine, "sql-tx:embedded"))
        .await
        .expect("a broken transaction leaves nothing, a good one commits");
    plugin
        .handle(&attempt(mine, "sql-types:embedded"))
        .await
        .expect("SQLite values keep their types");

    // Pod logs: the job's own pods only.
    let their_pod = s.theirs.pod_names()[0].clone();
    let their_container = s.theirs.pods()[0].container.clone();
    let text = refused(
        &plugin,
        &attempt(mine, &format!("pod-log:{their_pod}:{their_container}")),
    )
    .await;
    assert!(
        text.contains("Denied") && text.contains("is not one of the pods of job ml/mine"),
        "{text}"
    );
    let my_pod = mine.pod_names()[0].clone();
    let my_container = mine.pods()[0].container.clone();
    plugin
        .handle(&attempt(mine, &format!("pod-log:{my_pod}:{my_container}")))
        .await
        .expect("the job's own pod log is readable");
    let text = refused(
        &plugin,
        &attempt(mine, &format!("pod-log:{my_pod}:sidecar")),
    )
    .await;
    assert!(text.contains("has no container `sidecar`"), "{text}");

    // Archive: keys stay under the plugin's prefix.
    for bad in ["../escape", "/etc/evil", "a/../../b", "a//b", "./x"] {
        for verb in ["archive-put", "archive-create"] {
            let text = refused(&plugin, &attempt(mine, &format!("{verb}:{bad}"))).await;
            assert!(text.contains("InvalidKey"), "{verb}:{bad}: {text}");
        }
    }
    assert!(!s.dir.path().join("escape").exists());
    assert!(!s.dir.path().join("archive/escape").exists());
    assert!(!s.dir.path().join("archive/b").exists());
    plugin
        .handle(&attempt(mine, "archive-put:ok/key"))
        .await
        .expect("a key under the prefix is written");
    assert_eq!(
        std::fs::read(s.dir.path().join("archive/intruder/ok/key")).expect("written"),
        b"x"
    );
    // A log with no output is an empty object, not an error.
    plugin
        .handle(&attempt(mine, "archive-empty:ok/empty"))
        .await
        .expect("an empty object is written");
    assert_eq!(
        std::fs::read(s.dir.path().join("archive/intruder/ok/empty")).expect("written"),
        b""
    );

    // Key-value and files: not granted at all.
    let text = refused(&plugin, &attempt(mine, "kv")).await;
    assert!(text.contains("not granted"), "{text}");
    let secret = s.dir.path().join("secret.db");
    let text = refused(
        &plugin,
        &attempt(mine, &format!("read:{}", secret.display())),
    )
    .await;
    assert!(!text.is_empty());
    refused(&plugin, &attempt(mine, "read:/etc/passwd")).await;

    // The host is unharmed: an ordinary event is handled.
    plugin
        .handle(&attempt(mine, ""))
        .await
        .expect("still serving");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_granted_by_default() {
    let s = setup().await;
    let plugin = intruder(&s.rt, Grants::default()).await;
    let mine = &s.mine;
    for what in [
        "sql:embedded",
        "pods",
        "archive-put:k",
        "archive-create:k",
        "kv",
        "annotate:archive.jobrelay.io/logs",
    ] {
        let text = refused(&plugin, &attempt(mine, what)).await;
        assert!(text.contains("not granted"), "{what}: {text}");
    }
    plugin
        .handle(&attempt(mine, ""))
        .await
        .expect("still serving");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_kv_keeps_values_per_plugin() {
    let s = setup().await;
    let grants = Grants {
        kv: true,
        ..Grants::default()
    };
    let plugin = intruder(&s.rt, grants).await;
    plugin
        .handle(&attempt(&s.mine, "kv"))
        .await
        .expect("kv set and get");
}

/// The `embedded` SQLite connection reaches its own database and nothing else: no other
/// database file (the daemon's state with every plugin's secrets, or a new file anywhere),
/// no copy written elsewhere, no pragma that changes where or how files are written, no
/// extension.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_sql_cannot_reach_beyond_its_own_database() {
    let s = setup().await;
    let grants = Grants {
        sql: vec!["embedded".into()],
        ..Grants::default()
    };
    let plugin = intruder(&s.rt, grants).await;
    let state = s.dir.path().join("state.db");
    let elsewhere = s.dir.path().join("created-by-plugin.db");
    let attacks = [
        format!("ATTACH DATABASE '{}' AS stolen", state.display()),
        format!("ATTACH '{}' AS fresh", elsewhere.display()),
        format!("VACUUM INTO '{}'", elsewhere.display()),
        "PRAGMA writable_schema = ON".to_string(),
        "PRAGMA temp_store_directory = '/tmp'".to_string(),
        "PRAGMA cache_size = -2000000".to_string(),
        "PRAGMA journal_mode = OFF".to_string(),
        "SELECT load_extension('/usr/lib/x86_64-linux-gnu/libm.so.6')".to_string(),
        "DETACH DATABASE main".to_string(),
    ];
    for attack in &attacks {
        let why = refused(
            &plugin,
            &attempt(&s.mine, &format!("sql-exec:embedded:{attack}")),
        )
        .await;
        assert!(
            why.contains("not authorized")
                || why.contains("authorization denied")
                || why.contains("too many attached"),
            "{attack}: {why}"
        );
    }
    assert!(
        !elsewhere.exists(),
        "no file was created outside the plugin's database"
    );
    // Its own tables, and the pragmas that read them, still work.
    for fine in [
        "CREATE TABLE IF NOT EXISTS mine (id INTEGER PRIMARY KEY)",
        "SELECT * FROM pragma_table_info('mine')",
        "PRAGMA table_info(mine)",
        "PRAGMA user_version",
    ] {
        plugin
            .handle(&attempt(&s.mine, &format!("sql-exec:embedded:{fine}")))
            .await
            .unwrap_or_else(|e| panic!("{fine}: {e}"));
    }
}

/// Two plugins granted `embedded` each get a database of their own: one cannot read, write
/// or even see the tables of the other, nor hold the other's connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_plugin_has_its_own_embedded_database() {
    let s = setup().await;
    let grants = Grants {
        sql: vec!["embedded".into()],
        ..Grants::default()
    };
    let keeper =
        s.rt.load(spec("keeper", "intruder", &[], grants.clone()))
            .await
            .expect("keeper loads");
    let snoop =
        s.rt.load(spec("snoop", "intruder", &[], grants))
            .await
            .expect("snoop loads");
    for statement in [
        "CREATE TABLE secrets (token TEXT)",
        "INSERT INTO secrets VALUES ('hunter2')",
        "SELECT token FROM secrets",
    ] {
        keeper
            .handle(&attempt(&s.mine, &format!("sql-exec:embedded:{statement}")))
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
    for attack in [
        "SELECT token FROM secrets",
        "INSERT INTO secrets VALUES ('forged')",
        "DROP TABLE secrets",
    ] {
        let why = refused(
            &snoop,
            &attempt(&s.mine, &format!("sql-exec:embedded:{attack}")),
        )
        .await;
        assert!(why.contains("no such table"), "{attack}: {why}");
    }
    let files: Vec<String> = std::fs::read_dir(s.dir.path().join("embedded"))
        .expect("the embedded folder")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".db"))
        .collect();
    let mut files = files;
    files.sort();
    assert_eq!(files, ["keeper.db", "snoop.db"]);
}

/// A statement that outlives its call's time limit is interrupted: the call ends as a time-out
/// and the connection is free for the next call at once (the pool here has one connection, so
/// a statement left running would make the next call wait for it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runaway_query_stops_with_its_call() {
    let s = setup().await;
    let grants = Grants {
        sql: vec!["secret-db".into()],
        ..Grants::default()
    };
    let mut runaway = spec("intruder", "intruder", &[], grants.clone());
    runaway.timeout = std::time::Duration::from_millis(500);
    let plugin = s.rt.load(runaway).await.expect("loads");
    let endless = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) \
                   SELECT count(*) FROM n";
    let started = std::time::Instant::now();
    let outcome = plugin
        .handle(&attempt(&s.mine, &format!("sql-exec:secret-db:{endless}")))
        .await;
    assert!(
        matches!(
            &outcome,
            Err(CallError::Timeout(_)) | Err(CallError::GiveUp(_))
        ),
        "{outcome:?}"
    );
    // The next call gets the pool's only connection and runs (its acquire time-out is 1 s:
    // a statement still running would make it fail with a pool time-out).
    plugin
        .handle(&attempt(&s.mine, "sql-exec:secret-db:SELECT 1"))
        .await
        .expect("the connection is free again");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "the runaway statement did not hold the test hostage"
    );
}

/// On MySQL/MariaDB, a statement whose call timed out is ended by the server at the
/// connection's statement time limit (`max_statement_ms`), not run to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_statement_ends_on_the_server_too() {
    let s = setup().await;
    let grants = Grants {
        sql: vec!["maria".into()],
        ..Grants::default()
    };
    let mut slow = spec("intruder", "intruder", &[], grants);
    slow.timeout = std::time::Duration::from_millis(300);
    let plugin = s.rt.load(slow).await.expect("loads");
    let marker = format!("abandoned-{}", std::process::id());
    let sleeper = format!("SELECT SLEEP(30), '{marker}'");
    let outcome = plugin
        .handle(&attempt(&s.mine, &format!("sql-exec:maria:{sleeper}")))
        .await;
    assert!(matches!(outcome, Err(CallError::Timeout(_))), "{outcome:?}");
    let db = sqlx::MySqlPool::connect(&common::mysql_url())
        .await
        .expect("MariaDB must be reachable (tests/run.sh starts it)");
    let running = || async {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
             WHERE INFO LIKE CONCAT('%', ?, '%') AND INFO NOT LIKE '%PROCESSLIST%'",
        )
        .bind(&marker)
        .fetch_one(&db)
        .await
        .expect("processlist");
        n
    };
    let started = std::time::Instant::now();
    while running().await > 0 {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "the abandoned statement still runs on the server"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// A plugin's reason is cut and escaped before the host keeps it: a 16 MiB give-up full of
/// newlines and terminal escapes becomes a few KiB on one line, in the error, its log line and
/// its dead-letter row alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_forged_reason_is_cut_and_escaped() {
    let s = setup().await;
    let plugin = intruder(&s.rt, Grants::default()).await;
    let outcome = plugin
        .handle(&attempt(&s.mine, &format!("huge-error:{}", 16 << 20)))
        .await;
    let Err(CallError::GiveUp(reason)) = outcome else {
        panic!("expected a give-up, got {outcome:?}");
    };
    assert!(reason.len() <= 4096 + 64, "{} bytes kept", reason.len());
    assert!(reason.contains("more bytes cut"), "{reason}");
    assert!(!reason.contains(['\n', '\r', '\u{1b}']), "{reason}");
    assert!(reason.contains("\\n2026-11-24"), "{reason}");
}

/// Archive writers a call leaves open end with the call, also on a kept instance
/// (`instance_reuse`): a plugin that forgets its writers cannot pile up host memory (each
/// holds up to a 5 MiB part) call after call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_left_open_end_with_their_call() {
    let s = setup().await;
    let grants = Grants {
        archive: Some(ArchiveGrant::default()),
        ..Grants::default()
    };
    let mut kept = spec("intruder", "intruder", &[], grants);
    kept.instance_reuse = 8;
    let plugin = s.rt.load(kept).await.expect("loads");
    for call in 1..=5 {
        plugin
            .handle(&attempt(&s.mine, "archive-leak:4"))
            .await
            .unwrap_or_else(|e| panic!("call {call}: {e}"));
        // Only the last call's writers may still be open (its instance is kept, idle).
        assert!(
            s.archive.open_writers() <= 4,
            "after call {call}: {} writers open",
            s.archive.open_writers()
        );
    }
}

/// Pod logs a call opens are bounded (each is an HTTP stream from the API server) and end with
/// the call, also on a kept instance: a plugin that forgets its handles cannot hold streams
/// open call after call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_pod_logs_are_bounded_and_end_with_their_call() {
    let s = setup().await;
    let grants = Grants {
        pod_logs: Some(PodLogsGrant::default()),
        ..Grants::default()
    };
    let mut kept = spec("intruder", "intruder", &[], grants);
    kept.instance_reuse = 8;
    let plugin = s.rt.load(kept).await.expect("loads");
    let pod = s.mine.pod_names()[0].clone();
    let container = s.mine.pods()[0].container.clone();
    let max = jobrelay_capabilities::pod_logs::MAX_OPEN_LOGS;
    for call in 1..=3 {
        plugin
            .handle(&attempt(
                &s.mine,
                &format!("pod-log-leak:{pod}:{container}:{max}"),
            ))
            .await
            .unwrap_or_else(|e| panic!("call {call}: the call's own {max} logs: {e}"));
    }
    match plugin
        .handle(&attempt(
            &s.mine,
            &format!("pod-log-leak:{pod}:{container}:{}", max + 1),
        ))
        .await
    {
        Err(CallError::GiveUp(reason)) => assert!(
            reason.starts_with(&format!("opened {max}; refused:")) && reason.contains("at most"),
            "{reason}"
        ),
        other => panic!("the log past the bound must be refused, got {other:?}"),
    }
}

/// A plugin opening files in a loop cannot take the process's file descriptors: one store
/// holds at most `MAX_STORE_RESOURCES` handles, and the call that wants more fails, while
/// one well under the bound works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cannot_hold_more_than_its_share_of_host_handles() {
    let s = setup().await;
    let data = s.dir.path().join("data");
    std::fs::create_dir_all(&data).expect("dir");
    std::fs::write(data.join("f"), b"x").expect("file");
    let grants = Grants {
        filesystem: vec![jobrelay_capabilities::filesystem::DirGrant {
            host: data,
            guest: "/data".into(),
            writable: false,
        }],
        ..Grants::default()
    };
    let plugin = intruder(&s.rt, grants).await;
    let max = jobrelay_runtime::MAX_STORE_RESOURCES;
    plugin
        .handle(&attempt(&s.mine, &format!("fs-leak:/data/f:{}", max / 2)))
        .await
        .expect("half the bound is fine");
    match plugin
        .handle(&attempt(&s.mine, &format!("fs-leak:/data/f:{}", max * 4)))
        .await
    {
        Ok(()) => panic!("{} open files in one call were allowed", max * 4),
        Err(CallError::Trap(_)) => {}
        Err(CallError::GiveUp(reason)) => {
            let opened: usize = reason
                .strip_prefix("opened ")
                .and_then(|r| r.split(';').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(usize::MAX);
            assert!(opened <= max, "{reason}");
        }
        Err(other) => panic!("unexpected: {other}"),
    }
}

/// A plugin cannot fill the archive: what its prefix holds (what was there before this
/// process included) is bounded by `grants.archive.max_total_bytes`; a refused stream gives
/// its reservation back, a replaced object its old size; another prefix is unaffected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_archive_quota_bounds_what_a_plugin_keeps() {
    let s = setup().await;
    let old = s.dir.path().join("archive/filler/old.bin");
    std::fs::create_dir_all(old.parent().expect("parent")).expect("mkdir");
    std::fs::write(&old, [1u8; 300]).expect("an object from before");
    let grants = |max_total_bytes: u64| Grants {
        archive: Some(ArchiveGrant {
            max_total_bytes: Some(max_total_bytes),
            ..ArchiveGrant::default()
        }),
        ..Grants::default()
    };
    let filler =
        s.rt.load(spec("filler", "intruder", &[], grants(1000)))
            .await
            .expect("loads");
    let write = |what: &str| attempt(&s.mine, &format!("archive-write:{what}"));
    filler
        .handle(&write("a.bin:500:put"))
        .await
        .expect("300 + 500");
    let why = refused(&filler, &write("b.bin:500")).await;
    assert!(why.contains("max_total_bytes"), "{why}");
    assert!(!s.dir.path().join("archive/filler/b.bin").exists());
    filler
        .handle(&write("c.bin:200"))
        .await
        .expect("the refused stream gave its bytes back: 1000");
    let why = refused(&filler, &write("e.bin:1:put")).await;
    assert!(why.contains("max_total_bytes"), "{why}");
    filler
        .handle(&write("a.bin:100:put"))
        .await
        .expect("a replacement counts its own size, not the old one's");
    filler.handle(&write("d.bin:400")).await.expect("600 + 400");
    let why = refused(&filler, &write("e.bin:1")).await;
    assert!(why.contains("max_total_bytes"), "{why}");

    let other =
        s.rt.load(spec("other", "intruder", &[], grants(1000)))
            .await
            .expect("loads");
    other
        .handle(&write("x.bin:900"))
        .await
        .expect("another prefix has its own quota");
    let refusals = &s.rt.services().refusals;
    assert_eq!(refusals.of("filler").get("archive_quota"), Some(&3));
    assert!(refusals.of("other").is_empty());
}

/// A plugin cannot fill the state store: past its quota (`grants.kv_quota`), a write is
/// refused with an error value saying so, reads go on, and another plugin is unaffected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kv_quota_stops_a_plugin_filling_the_store() {
    let s = setup().await;
    let grants = Grants {
        kv: true,
        kv_quota: Some(jobrelay_capabilities::kv::KvQuota {
            max_entries: Some(40),
            max_bytes: None,
        }),
        ..Grants::default()
    };
    let plugin = intruder(&s.rt, grants.clone()).await;
    let outcome = plugin.handle(&attempt(&s.mine, "kv-fill:1000")).await;
    let Err(CallError::GiveUp(report)) = outcome else {
        panic!("expected the fill's report, got {outcome:?}");
    };
    assert!(report.contains("stored 40;"), "{report}");
    assert!(report.contains("kv quota"), "{report}");

    // By bytes too: 20 KiB allow about 19 entries of 1 KiB with their keys.
    let by_bytes = Grants {
        kv: true,
        kv_quota: Some(jobrelay_capabilities::kv::KvQuota {
            max_entries: None,
            max_bytes: Some(20 << 10),
        }),
        ..Grants::default()
    };
    let small =
        s.rt.load(spec("small", "intruder", &[], by_bytes))
            .await
            .expect("loads");
    let outcome = small.handle(&attempt(&s.mine, "kv-fill:1000")).await;
    let Err(CallError::GiveUp(report)) = outcome else {
        panic!("expected the fill's report, got {outcome:?}");
    };
    assert!(report.contains("stored 19;"), "{report}");
    assert_eq!(
        s.rt.services().refusals.of("small").get("kv_quota"),
        Some(&1),
        "each refusal is counted for the operator"
    );

    // The full plugin still reads and rewrites what it has.
    let other =
        s.rt.load(spec("other", "intruder", &[], grants))
            .await
            .expect("loads");
    other
        .handle(&attempt(&s.mine, "kv"))
        .await
        .expect("another plugin's kv is unaffected");
}
