//! The durable state store on real SQLite files: cursors, dead letters, replay requests, two
//! processes' worth of stores on one file, and the files it must refuse.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use jobrelay::cli::dead_letters::{self, DeadLettersCommand};
use jobrelay::state::{
    Cursor, CursorStore, PluginKv, SCHEMA_VERSION, SqliteStore, StoreError, open_store,
};
use jobrelay::watch::event::{JobEvent, Phase};
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection};

fn temp_db() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    // A folder that does not exist yet: opening must create it.
    let path = dir.path().join("nested").join("state.db");
    (dir, path)
}

async fn open(path: &Path) -> SqliteStore {
    SqliteStore::open(path).await.expect("open the state file")
}

fn cursor(plugin: &str, cluster: &str, uid: &str, rv: &str, phase: Phase) -> Cursor {
    Cursor {
        plugin: plugin.into(),
        cluster: cluster.into(),
        uid: uid.into(),
        api_version: "batch/v1".into(),
        kind: "Job".into(),
        namespace: "ml".into(),
        name: format!("job-{uid}"),
        resource_version: rv.into(),
        phase,
        transition_time: "2026-01-02T03:04:05Z".into(),
        deleted: phase == Phase::Deleted,
    }
}

fn event(cluster: &str, uid: &str, rv: &str, phase: Phase) -> JobEvent {
    JobEvent {
        id: JobEvent::make_id(cluster, uid, rv),
        cluster: cluster.into(),
        api_version: "batch.volcano.sh/v1alpha1".into(),
        kind: "Job".into(),
        namespace: "team-a".into(),
        name: format!("train-{uid}"),
        uid: uid.into(),
        resource_version: rv.into(),
        generation: Some(3),
        phase,
        raw_phase: "Completed".into(),
        reason: Some("AllTasksDone".into()),
        message: None,
        previous_phase: Some(Phase::Running),
        transition_time: "2026-01-02T03:04:05.123Z".into(),
        labels: BTreeMap::from([("team".into(), "ml".into())]),
        annotations: BTreeMap::from([("note".into(), "ünïcode \"quoted\"".into())]),
        // Odd spacing and key order on purpose: the text must come back byte for byte.
        object_json: Arc::from(r#"{"spec": {"b":2, "a":[1,2.50,"x"]},"status":{}}"#),
        synthetic: true,
    }
}

#[tokio::test]
async fn cursor_upsert_overwrites_and_plugins_are_isolated() {
    let (_dir, path) = temp_db();
    let store = open(&path).await;
    assert!(store.cursors("a").await.expect("empty").is_empty());

    store
        .save_cursor(&cursor("a", "c1", "u1", "10", Phase::Pending))
        .await
        .expect("save");
    store
        .save_cursor(&cursor("b", "c1", "u1", "11", Phase::Running))
        .await
        .expect("save");
    let newer = cursor("a", "c1", "u1", "12", Phase::Succeeded);
    store.save_cursor(&newer).await.expect("overwrite");

    assert_eq!(store.cursors("a").await.expect("load a"), vec![newer]);
    let b = store.cursors("b").await.expect("load b");
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].resource_version, "11");
    assert_eq!(b[0].phase, Phase::Running);
    assert!(store.cursors("c").await.expect("load c").is_empty());

    // The same uid on another cluster is another job.
    store
        .save_cursor(&cursor("a", "c2", "u1", "5", Phase::Deleted))
        .await
        .expect("save");
    let a = store.cursors("a").await.expect("load a");
    assert_eq!(a.len(), 2);
    assert!(a[1].deleted);

    store.remove_cursor("a", "c1", "u1").await.expect("remove");
    store
        .remove_cursor("a", "c1", "nope")
        .await
        .expect("removing a missing cursor is fine");
    let a = store.cursors("a").await.expect("load a");
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].cluster, "c2");
    assert_eq!(store.cursors("b").await.expect("load b").len(), 1);
}

#[tokio::test]
async fn cursor_from_event_records_the_delivered_version() {
    let ev = event("c", "u", "7", Phase::Deleted);
    let c = Cursor::from_event("p", &ev);
    assert_eq!(c.plugin, "p");
    assert_eq!(c.resource_version, "7");
    assert_eq!(c.name, ev.name);
    assert!(c.deleted);
}

#[tokio::test]
async fn batch_save_is_all_or_nothing() {
    let (_dir, path) = temp_db();
    let store = open(&path).await;
    let batch: Vec<Cursor> = (0..50)
        .map(|i| cursor("p", "c", &format!("u{i}"), &i.to_string(), Phase::Running))
        .collect();
    store.save_cursors(&batch).await.expect("batch");
    store
        .save_cursors(&[])
        .await
        .expect("an empty batch is a no-op");
    assert_eq!(store.cursors("p").await.expect("load").len(), 50);

    // Make one upsert in the middle of a batch fail (a trigger refuses it) and check that the
    // upserts before it were rolled back with it.
    let mut conn = SqliteConnectOptions::new()
        .filename(&path)
        .connect()
        .await
        .expect("raw connection");
    sqlx::raw_sql(
        "CREATE TRIGGER refuse_poison BEFORE INSERT ON cursors WHEN NEW.uid = 'poison'
         BEGIN SELECT RAISE(ABORT, 'poisoned'); END;",
    )
    .execute(&mut conn)
    .await
    .expect("trigger");
    conn.close().await.expect("close");

    let mut failing: Vec<Cursor> = (0..50)
        .map(|i| cursor("p", "c", &format!("u{i}"), "999", Phase::Failed))
        .collect();
    failing.insert(25, cursor("p", "c", "poison", "1", Phase::Failed));
    let err = store
        .save_cursors(&failing)
        .await
        .expect_err("the poisoned row fails the batch");
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
    let after = store.cursors("p").await.expect("load");
    assert_eq!(after.len(), 50);
    assert!(
        after.iter().all(|c| c.resource_version != "999"),
        "a failed batch left some of its upserts behind"
    );
}

#[tokio::test]
async fn everything_survives_closing_and_reopening() {
    let (_dir, path) = temp_db();
    let ev = event("c", "u", "3", Phase::Failed);
    {
        let store = open(&path).await;
        store
            .save_cursors(&[
                cursor("p", "c", "u1", "1", Phase::Running),
                cursor("p", "c", "u2", "2", Phase::Succeeded),
            ])
            .await
            .expect("save");
        store
            .add_dead_letter("p", &ev, "boom", 5)
            .await
            .expect("dead letter");
        store.close().await;
    }
    let store = open_store(&path).await.expect("reopen");
    let cursors = store.cursors("p").await.expect("load");
    assert_eq!(cursors.len(), 2);
    assert_eq!(cursors[1].phase, Phase::Succeeded);
    let letters = store.dead_letters(None).await.expect("list");
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].event, ev);
    assert_eq!(letters[0].attempts, 5);
}

#[tokio::test]
async fn dead_letter_event_round_trips_exactly() {
    let (_dir, path) = temp_db();
    let store = open(&path).await;
    let ev = event("c", "u", "42", Phase::Succeeded);
    let seq = store
        .add_dead_letter("p", &ev, "line one\nline two", 3)
        .await
        .expect("add");
    let letters = store.dead_letters(Some("p")).await.expect("list");
    assert_eq!(letters.len(), 1);
    let l = &letters[0];
    assert_eq!(l.seq, seq);
    assert_eq!(l.plugin, "p");
    assert_eq!(l.event, ev);
    assert_eq!(&*l.event.object_json, &*ev.object_json);
    assert!(l.event.synthetic);
    assert_eq!(l.error, "line one\nline two");
    assert_eq!(l.attempts, 3);
    assert!(!l.replay_requested);
    assert!(
        chrono::DateTime::parse_from_rfc3339(&l.at).is_ok(),
        "at is RFC 3339: {}",
        l.at
    );
}

#[tokio::test]
async fn dead_letters_drop_by_seq_by_plugin_and_all() {
    let (_dir, path) = temp_db();
    let store = open(&path).await;
    let mut seqs = Vec::new();
    for (plugin, uid) in [("a", "1"), ("a", "2"), ("b", "3"), ("b", "4"), ("c", "5")] {
        let seq = store
            .add_dead_letter(plugin, &event("c", uid, "1", Phase::Failed), "err", 1)
            .await
            .expect("add");
        seqs.push(seq);
    }
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "seqs grow: {seqs:?}");
    assert_eq!(store.dead_letters(None).await.expect("all").len(), 5);
    assert_eq!(store.dead_letters(Some("b")).await.expect("b").len(), 2);

    // Refusals: nothing selected, or ids and --all together.
    for (plugin, ids, all) in [(None, &[][..], false), (None, &seqs[..1], true)] {
        let err = store
            .drop_dead_letters(plugin, ids, all)
            .await
            .expect_err("refused");
        assert!(matches!(err, StoreError::InvalidSelection(_)), "{err}");
    }
    assert_eq!(store.dead_letters(None).await.expect("all").len(), 5);

    // By seq, restricted to a plugin: b's seq is not a's.
    assert_eq!(
        store
            .drop_dead_letters(Some("a"), &[seqs[0], seqs[2]], false)
            .await
            .expect("drop"),
        1
    );
    // By seq alone.
    assert_eq!(
        store
            .drop_dead_letters(None, &[seqs[2], 9999], false)
            .await
            .expect("drop"),
        1
    );
    // A whole plugin.
    assert_eq!(
        store
            .drop_dead_letters(Some("b"), &[], false)
            .await
            .expect("drop"),
        1
    );
    let left: Vec<i64> = store
        .dead_letters(None)
        .await
        .expect("list")
        .iter()
        .map(|l| l.seq)
        .collect();
    assert_eq!(left, vec![seqs[1], seqs[4]]);
    // Everything, explicitly.
    assert_eq!(
        store
            .drop_dead_letters(None, &[], true)
            .await
            .expect("drop"),
        2
    );
    assert!(store.dead_letters(None).await.expect("list").is_empty());

    // Seqs are never reused after a drop.
    let next = store
        .add_dead_letter("a", &event("c", "6", "1", Phase::Failed), "err", 1)
        .await
        .expect("add");
    assert!(next > seqs[4]);
}

#[tokio::test]
async fn replay_marks_and_take_removes_once() {
    let (_dir, path) = temp_db();
    let store = open(&path).await;
    let mut seqs = Vec::new();
    for (plugin, uid) in [("a", "1"), ("a", "2"), ("a", "3"), ("b", "4")] {
        seqs.push(
            store
                .add_dead_letter(plugin, &event("c", uid, "1", Phase::Failed), "err", 2)
                .await
                .expect("add"),
        );
    }
    assert!(store.take_replays("a").await.expect("take").is_empty());
    let err = store
        .request_replay(None, &[], false)
        .await
        .expect_err("refused");
    assert!(matches!(err, StoreError::InvalidSelection(_)));

    assert_eq!(
        store
            .request_replay(Some("a"), &[seqs[2], seqs[0], seqs[3]], false)
            .await
            .expect("mark"),
        2
    );
    let listed = store.dead_letters(Some("a")).await.expect("list");
    assert_eq!(
        listed
            .iter()
            .map(|l| l.replay_requested)
            .collect::<Vec<_>>(),
        vec![true, false, true]
    );

    let taken = store.take_replays("a").await.expect("take");
    assert_eq!(
        taken.iter().map(|l| l.seq).collect::<Vec<_>>(),
        vec![seqs[0], seqs[2]]
    );
    assert_eq!(taken[0].event.uid, "1");
    assert!(
        store
            .take_replays("a")
            .await
            .expect("take again")
            .is_empty()
    );
    assert!(
        store
            .take_replays("b")
            .await
            .expect("b unmarked")
            .is_empty()
    );
    assert_eq!(store.dead_letters(None).await.expect("list").len(), 2);

    assert_eq!(store.request_replay(None, &[], true).await.expect("all"), 2);
    assert_eq!(store.take_replays("b").await.expect("take b").len(), 1);
    assert_eq!(store.take_replays("a").await.expect("take a").len(), 1);
    assert!(store.dead_letters(None).await.expect("list").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_takers_never_get_the_same_dead_letter() {
    const N: usize = 120;
    let (_dir, path) = temp_db();
    let producer = Arc::new(open(&path).await);
    let takers = [Arc::new(open(&path).await), Arc::new(open(&path).await)];

    // Each taker loops until all N were taken by someone.
    let taken = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for taker in takers {
        let taken = taken.clone();
        handles.push(tokio::spawn(async move {
            let mut got = Vec::new();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            while taken.load(Ordering::SeqCst) < N && tokio::time::Instant::now() < deadline {
                let batch = taker.take_replays("p").await.expect("take");
                taken.fetch_add(batch.len(), Ordering::SeqCst);
                got.extend(batch.into_iter().map(|l| l.seq));
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            got
        }));
    }
    for i in 0..N {
        let seq = producer
            .add_dead_letter(
                "p",
                &event("c", &i.to_string(), "1", Phase::Failed),
                "err",
                1,
            )
            .await
            .expect("add");
        producer
            .request_replay(Some("p"), &[seq], false)
            .await
            .expect("mark");
    }
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.expect("taker task"));
    }
    let unique: BTreeSet<i64> = all.iter().copied().collect();
    assert_eq!(unique.len(), all.len(), "a dead letter was taken twice");
    assert_eq!(unique.len(), N, "every dead letter is taken once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemon_and_cli_share_the_file_without_lock_errors() {
    let (_dir, path) = temp_db();
    // Opened at once, as a daemon and a CLI starting together on a new file would.
    let (daemon, cli) = tokio::join!(SqliteStore::open(&path), SqliteStore::open(&path));
    let daemon = Arc::new(daemon.expect("daemon opens"));
    let cli = Arc::new(cli.expect("cli opens"));

    let seqs: Vec<i64> = {
        let mut v = Vec::new();
        for i in 0..40 {
            v.push(
                daemon
                    .add_dead_letter("p", &event("c", &i.to_string(), "1", Phase::Failed), "e", 1)
                    .await
                    .expect("add"),
            );
        }
        v
    };

    let writer = {
        let daemon = daemon.clone();
        tokio::spawn(async move {
            for round in 0..150 {
                let batch: Vec<Cursor> = (0..20)
                    .map(|j| {
                        cursor(
                            "p",
                            "c",
                            &format!("u{j}"),
                            &round.to_string(),
                            Phase::Running,
                        )
                    })
                    .collect();
                daemon.save_cursors(&batch).await?;
                daemon
                    .save_cursor(&cursor(
                        "q",
                        "c",
                        "solo",
                        &round.to_string(),
                        Phase::Running,
                    ))
                    .await?;
                if round % 10 == 0 {
                    daemon.take_replays("p").await?;
                }
            }
            Ok::<_, StoreError>(())
        })
    };
    let operator = {
        let cli = cli.clone();
        tokio::spawn(async move {
            for (i, seq) in seqs.iter().enumerate() {
                cli.request_replay(Some("p"), &[*seq], false).await?;
                cli.dead_letters(None).await?;
                cli.cursors("p").await?;
                if i % 5 == 0 {
                    cli.request_replay(None, &[], true).await?;
                }
            }
            Ok::<_, StoreError>(())
        })
    };
    writer
        .await
        .expect("writer task")
        .expect("the daemon's writes never fail");
    operator
        .await
        .expect("operator task")
        .expect("the CLI's writes never fail");

    let cursors = cli.cursors("p").await.expect("load");
    assert_eq!(cursors.len(), 20);
    assert!(cursors.iter().all(|c| c.resource_version == "149"));
}

#[tokio::test]
async fn a_newer_schema_is_refused() {
    let (_dir, path) = temp_db();
    open(&path).await.close().await;
    let mut conn = SqliteConnectOptions::new()
        .filename(&path)
        .connect()
        .await
        .expect("raw connection");
    sqlx::query("UPDATE schema_version SET version = ?")
        .bind(SCHEMA_VERSION + 1)
        .execute(&mut conn)
        .await
        .expect("bump the version");
    conn.close().await.expect("close");

    let err = SqliteStore::open(&path)
        .await
        .expect_err("a newer schema is refused");
    assert!(
        matches!(err, StoreError::NewerSchema { found: 3, .. }),
        "{err}"
    );
    let text = err.to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(text.contains("schema version 3"), "{text}");
}

#[tokio::test]
async fn a_foreign_sqlite_database_is_refused() {
    let (dir, _) = temp_db();
    let path = dir.path().join("other.db");
    let mut conn = SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .connect()
        .await
        .expect("raw connection");
    sqlx::raw_sql("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
        .execute(&mut conn)
        .await
        .expect("foreign table");
    conn.close().await.expect("close");

    let err = SqliteStore::open(&path).await.expect_err("refused");
    assert!(matches!(err, StoreError::NotAStateFile { .. }), "{err}");
    assert!(err.to_string().contains(&path.display().to_string()));
}

#[tokio::test]
async fn a_corrupt_file_or_a_folder_gives_an_error_naming_the_path() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("garbage.db");
    let junk: Vec<u8> = (0..8192_u32).map(|i| (i * 7 + 3) as u8).collect();
    std::fs::write(&path, junk).expect("write junk");
    let err = SqliteStore::open(&path).await.expect_err("not SQLite");
    let text = err.to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");

    let folder = dir.path().join("a-folder");
    std::fs::create_dir(&folder).expect("folder");
    let err = SqliteStore::open(&folder).await.expect_err("a folder");
    let text = err.to_string();
    assert!(text.contains(&folder.display().to_string()), "{text}");
}

#[cfg(unix)]
#[tokio::test]
async fn a_new_file_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let (_dir, path) = temp_db();
    open(&path).await.close().await;
    let mode = std::fs::metadata(&path)
        .expect("metadata")
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, "mode {mode:o}");
}

#[tokio::test]
async fn cli_lists_replays_and_drops() {
    let (_dir, path) = temp_db();
    let store = open(&path).await;
    let s1 = store
        .add_dead_letter(
            "notify",
            &event("prod", "u1", "10", Phase::Failed),
            "webhook said 500\nwith a long body",
            4,
        )
        .await
        .expect("add");
    let s2 = store
        .add_dead_letter(
            "archive",
            &event("prod", "u2", "11", Phase::Succeeded),
            "gave up",
            1,
        )
        .await
        .expect("add");

    let table = dead_letters::list(&store, None, false).await.expect("list");
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(lines[0].starts_with("SEQ"), "{table}");
    assert!(
        lines[1].contains("notify") && lines[1].contains("prod/u1/10"),
        "{table}"
    );
    assert!(
        lines[1].contains("failed") && lines[1].contains("webhook said 500…"),
        "{table}"
    );
    assert!(
        !table.contains("long body"),
        "errors are cut to one line: {table}"
    );
    assert!(
        lines[2].contains("archive") && lines[2].contains("succeeded"),
        "{table}"
    );

    let only = dead_letters::list(&store, Some("archive"), false)
        .await
        .expect("list");
    assert_eq!(only.lines().count(), 2, "{only}");
    let none = dead_letters::list(&store, Some("nobody"), false)
        .await
        .expect("list");
    assert!(none.contains("no dead letters"), "{none}");

    let json = dead_letters::list(&store, None, true).await.expect("json");
    let parsed: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect();
    assert_eq!(parsed.len(), 2);
    assert_eq!(parsed[0]["seq"], s1);
    assert_eq!(parsed[0]["plugin"], "notify");
    assert_eq!(parsed[0]["event"]["id"], "prod/u1/10");
    assert_eq!(parsed[0]["event"]["object"]["spec"]["b"], 2);
    assert_eq!(parsed[0]["error"], "webhook said 500\nwith a long body");
    assert_eq!(parsed[0]["replay_requested"], false);

    // Neither ids nor --all: refused, nothing changes.
    let err = dead_letters::replay(&store, Some("notify"), &[], false)
        .await
        .expect_err("refused");
    assert!(err.to_string().contains("--all"), "{err}");
    let err = dead_letters::drop(&store, None, &[], false)
        .await
        .expect_err("refused");
    assert!(err.to_string().contains("--all"), "{err}");

    let msg = dead_letters::replay(&store, None, &[s1, 999], false)
        .await
        .expect("replay");
    assert!(msg.starts_with("1 dead letter marked for replay"), "{msg}");
    assert!(msg.contains("1 of the 2 ids do not exist"), "{msg}");
    let table = dead_letters::list(&store, Some("notify"), false)
        .await
        .expect("list");
    assert!(table.contains("requested"), "{table}");

    // Through the clap command, as `main` will call it.
    let msg = dead_letters::run(
        &store,
        &DeadLettersCommand::Drop {
            plugin: Some("archive".into()),
            all: true,
            ids: vec![],
        },
    )
    .await
    .expect("drop");
    assert_eq!(msg, "1 dead letter dropped\n");
    let msg = dead_letters::run(
        &store,
        &DeadLettersCommand::Replay {
            plugin: None,
            all: true,
            ids: vec![],
        },
    )
    .await
    .expect("replay all");
    assert!(msg.starts_with("1 dead letter marked"), "{msg}");
    let left = store.dead_letters(None).await.expect("list");
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].seq, s1);
    assert_ne!(s1, s2);
}

#[test]
fn clap_parses_the_subcommands() {
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Top {
        #[command(subcommand)]
        command: DeadLettersCommand,
    }
    let t = Top::try_parse_from(["x", "replay", "--plugin", "p", "3", "4"]).expect("parse");
    assert_eq!(
        t.command,
        DeadLettersCommand::Replay {
            plugin: Some("p".into()),
            all: false,
            ids: vec![3, 4]
        }
    );
    let t = Top::try_parse_from(["x", "list", "--json"]).expect("parse");
    assert_eq!(
        t.command,
        DeadLettersCommand::List {
            plugin: None,
            json: true
        }
    );
    assert!(Top::try_parse_from(["x", "drop", "--all", "3"]).is_err());
}

/// Set in the child process of [`two_processes_share_the_file`]: the state file to write to.
const CHILD_ENV: &str = "JOBRELAY_STATE_STORE_TEST_CHILD";

/// Plays the daemon in a second process; does nothing when run as an ordinary test.
#[tokio::test]
async fn child_process_writer() {
    let Some(path) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let store = open(Path::new(&path)).await;
    for round in 0..200 {
        let batch: Vec<Cursor> = (0..10)
            .map(|j| {
                cursor(
                    "p",
                    "c",
                    &format!("u{j}"),
                    &round.to_string(),
                    Phase::Running,
                )
            })
            .collect();
        store
            .save_cursors(&batch)
            .await
            .expect("child saves cursors");
        if round % 20 == 0 {
            store.take_replays("p").await.expect("child takes replays");
        }
    }
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_share_the_file() {
    let (_dir, path) = temp_db();
    let store = open(&path).await;
    let exe = std::env::current_exe().expect("test binary");
    let mut child = tokio::process::Command::new(exe)
        .args(["state_store::child_process_writer", "--exact", "--test-threads=1"])
        .env(CHILD_ENV, &path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn the child");
    let mut rounds = 0;
    loop {
        let seq = store
            .add_dead_letter(
                "p",
                &event("c", "x", &rounds.to_string(), Phase::Failed),
                "e",
                1,
            )
            .await
            .expect("the parent adds while the child writes");
        store
            .request_replay(Some("p"), &[seq], false)
            .await
            .expect("the parent marks while the child writes");
        rounds += 1;
        if let Some(status) = child.try_wait().expect("child status") {
            assert!(status.success(), "the child failed: {status}");
            break;
        }
    }
    let output = child.wait_with_output().await.expect("child output");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("1 passed"),
        "the child ran its writer: {stdout}"
    );
    let cursors = store.cursors("p").await.expect("load");
    assert_eq!(cursors.len(), 10);
    assert!(cursors.iter().all(|c| c.resource_version == "199"));
    assert!(rounds > 1, "the two processes overlapped");
}

#[tokio::test]
async fn remembering_a_job_never_overwrites_a_delivered_cursor() {
    let (_dir, path) = temp_db();
    let store = open(&path).await;
    // First sight: stored with an empty version ("nothing delivered").
    store
        .remember_job(&cursor("p", "c", "seen", "5", Phase::Running))
        .await
        .expect("remember");
    // Delivered first, remembered late: the delivered cursor wins.
    store
        .save_cursor(&cursor("p", "c", "done", "9", Phase::Succeeded))
        .await
        .expect("save");
    store
        .remember_job(&cursor("p", "c", "done", "3", Phase::Pending))
        .await
        .expect("remember");
    let mut all = store.cursors("p").await.expect("cursors");
    all.sort_by(|a, b| a.uid.cmp(&b.uid));
    assert_eq!(all.len(), 2);
    assert_eq!(
        (all[0].uid.as_str(), all[0].resource_version.as_str()),
        ("done", "9")
    );
    assert_eq!(all[0].phase, Phase::Succeeded);
    assert_eq!(
        (all[1].uid.as_str(), all[1].resource_version.as_str()),
        ("seen", "")
    );
}

#[tokio::test]
async fn plugin_kv_entries_are_per_plugin_and_expire() {
    let (_dir, path) = temp_db();
    let store = open(&path).await;
    store.kv_set("a", "k", b"one", None).await.expect("set");
    store.kv_set("b", "k", b"two", None).await.expect("set");
    assert_eq!(
        store.kv_get("a", "k").await.expect("get"),
        Some(b"one".to_vec())
    );
    assert_eq!(
        store.kv_get("b", "k").await.expect("get"),
        Some(b"two".to_vec())
    );
    store
        .kv_set("a", "k", b"three", None)
        .await
        .expect("replace");
    assert_eq!(
        store.kv_get("a", "k").await.expect("get"),
        Some(b"three".to_vec())
    );
    assert!(store.kv_delete("a", "k").await.expect("delete"));
    assert!(!store.kv_delete("a", "k").await.expect("delete again"));
    assert_eq!(store.kv_get("a", "k").await.expect("get"), None);
    assert_eq!(
        store.kv_get("b", "k").await.expect("get"),
        Some(b"two".to_vec()),
        "untouched"
    );

    // An entry with a zero TTL is expired at once: invisible, and swept by later writes.
    store
        .kv_set("a", "short", b"x", Some(0))
        .await
        .expect("set");
    assert_eq!(store.kv_get("a", "short").await.expect("get"), None);
    store
        .kv_set("a", "other", b"y", Some(3600))
        .await
        .expect("set");
    assert_eq!(
        store.kv_get("a", "other").await.expect("get"),
        Some(b"y".to_vec())
    );
    store.close().await;

    // Entries survive a reopen.
    let store = open(&path).await;
    assert_eq!(
        store.kv_get("b", "k").await.expect("get"),
        Some(b"two".to_vec())
    );
    let rows: i64 = {
        let mut conn = SqliteConnectOptions::new()
            .filename(&path)
            .connect()
            .await
            .expect("raw connection");
        sqlx::query_scalar("SELECT COUNT(*) FROM plugin_kv WHERE key = 'short'")
            .fetch_one(&mut conn)
            .await
            .expect("count")
    };
    assert_eq!(rows, 0, "the expired entry was swept");
}

#[tokio::test]
async fn a_version_1_file_is_migrated_and_keeps_its_cursors() {
    let (_dir, path) = temp_db();
    let store = open(&path).await;
    store
        .save_cursor(&cursor("p", "c", "u1", "5", Phase::Running))
        .await
        .expect("cursor");
    store.close().await;
    // Turn the file back into a version 1 file: no kv table, version 1.
    let mut conn = SqliteConnectOptions::new()
        .filename(&path)
        .connect()
        .await
        .expect("raw connection");
    sqlx::raw_sql("DROP TABLE plugin_kv; UPDATE schema_version SET version = 1;")
        .execute(&mut conn)
        .await
        .expect("downgrade");
    conn.close().await.expect("close");

    let store = open(&path).await;
    assert_eq!(store.cursors("p").await.expect("cursors").len(), 1);
    store
        .kv_set("p", "k", b"v", None)
        .await
        .expect("the kv table exists again");
}
