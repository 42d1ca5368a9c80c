//! The SQLite file: files the store must refuse, its cursor thread, its permissions,
//! migrations, and two processes on one file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use jobrelay_contract::event::Phase;
use jobrelay_state::{Cursor, DeliveryStore, PluginKv, SCHEMA_VERSION, SqliteStore, StoreError};
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection};

use crate::support::{cursor, event, open, temp_db};

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
        matches!(err, StoreError::NewerSchema { found, .. } if found == SCHEMA_VERSION + 1),
        "{err}"
    );
    let text = err.to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(
        text.contains(&format!("schema version {}", SCHEMA_VERSION + 1)),
        "{text}"
    );
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

/// Cursors are written by a thread of the store's own with a connection of its own. Closing
/// the store ends that thread and closes its connection, so the write-ahead log is folded
/// back into the file (it would stay beside it while any connection is open); a cursor saved
/// after close fails naming the file instead of waiting for a thread that is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_ends_the_cursor_thread_and_folds_the_log_back() {
    let (_dir, path) = temp_db();
    let store = open(&path).await;
    let batch: Vec<Cursor> = (0..100)
        .map(|i| cursor("p", "c", &format!("u{i}"), "1", Phase::Running))
        .collect();
    store.save_cursors(batch.clone()).await.expect("save");
    store
        .note_first_sights(&batch[..3])
        .await
        .expect("remember");
    let wal = PathBuf::from(format!("{}-wal", path.display()));
    assert!(wal.exists(), "a write in WAL mode leaves a log while open");
    store.close().await;
    assert!(
        !wal.exists(),
        "the log stayed after close: a connection is still open"
    );
    let after = tokio::time::timeout(
        Duration::from_secs(10),
        store.save_cursors(batch[..1].to_vec()),
    )
    .await
    .expect("a save after close answers at once");
    let err = after.expect_err("a save after close fails");
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
    let reopened = open(&path).await;
    assert_eq!(reopened.cursors("p").await.expect("load").len(), 100);
    reopened.close().await;
}

/// Every store opened holds one cursor thread, and closing or dropping it gives the thread
/// back: stores opened and closed over and over (a CLI run, a readiness check, a test) do not
/// pile up threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opening_and_closing_stores_does_not_pile_up_threads() {
    fn threads() -> usize {
        std::fs::read_dir("/proc/self/task")
            .expect("/proc/self/task")
            .count()
    }
    async fn close(store: &SqliteStore) {
        tokio::time::timeout(Duration::from_secs(30), store.close())
            .await
            .expect("close returns once the cursor thread has ended");
    }
    let (_dir, path) = temp_db();
    close(&open(&path).await).await;
    let before = threads();
    for round in 0..40 {
        let store = open(&path).await;
        store
            .save_cursors(vec![cursor(
                "p",
                "c",
                "u",
                &round.to_string(),
                Phase::Running,
            )])
            .await
            .expect("save");
        if round % 2 == 0 {
            close(&store).await;
        }
        drop(store);
    }
    // A dropped thread handle ends its thread soon after; give the last ones a moment.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while threads() > before + 4 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let after = threads();
    assert!(
        after <= before + 4,
        "{before} threads before 40 stores, {after} after"
    );
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
            .save_cursors(batch.clone())
            .await
            .expect("child saves cursors");
        if round % 20 == 0 {
            store
                .take_replays("p", None)
                .await
                .expect("child takes replays");
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
        .args([
            "sqlite::child_process_writer",
            "--exact",
            "--test-threads=1",
        ])
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
    sqlx::raw_sql(
        "DROP TABLE plugin_kv; DROP TABLE plugin_installs; DROP TABLE inbox_events; \
         DROP TABLE inbox_marks; UPDATE schema_version SET version = 1;",
    )
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
    store
        .install_time("p", "2026-01-01T00:00:00Z")
        .await
        .expect("the install table exists again");
    crate::support::assert_inbox_works(&store).await;
}

/// A file whose inbox is in version 6's shape (events with `AUTOINCREMENT` and an age index,
/// marks keyed plugin first with a by-event index) is narrowed to version 7's with every event
/// and mark kept: each plugin's inbox reads back in the order it took its events, a new mark
/// is numbered after the old ones, and the old indexes are gone.
#[tokio::test]
async fn a_version_6_inbox_is_narrowed_with_its_events_and_order() {
    use jobrelay_state::{Taken, WriteBatch};
    let (_dir, path) = temp_db();
    open(&path).await.close().await;
    let events: Vec<_> = (0..4)
        .map(|i| {
            event(
                "c",
                &format!("v{i}"),
                &format!("{}", 80 + i),
                Phase::Running,
            )
        })
        .collect();
    let mut conn = SqliteConnectOptions::new()
        .filename(&path)
        .connect()
        .await
        .expect("raw connection");
    sqlx::raw_sql(
        "DROP TABLE inbox_events; DROP TABLE inbox_marks;
         CREATE TABLE inbox_events (seq INTEGER PRIMARY KEY AUTOINCREMENT,
             event_id TEXT NOT NULL UNIQUE, event_json TEXT NOT NULL, at INTEGER NOT NULL,
             object TEXT);
         CREATE INDEX inbox_events_by_age ON inbox_events (at);
         CREATE TABLE inbox_marks (seq INTEGER PRIMARY KEY AUTOINCREMENT,
             plugin TEXT NOT NULL, event_id TEXT NOT NULL, UNIQUE (plugin, event_id));
         CREATE INDEX inbox_marks_by_event ON inbox_marks (event_id);
         UPDATE schema_version SET version = 6;",
    )
    .execute(&mut conn)
    .await
    .expect("a version 6 inbox");
    for e in &events {
        let t = Taken::of("a", e).expect("an event encodes");
        sqlx::query(
            "INSERT INTO inbox_events (event_id, event_json, object, at) \
             VALUES (?, ?, ?, unixepoch())",
        )
        .bind(&t.event_id)
        .bind(&t.head_json)
        .bind(&*t.object_json)
        .execute(&mut conn)
        .await
        .expect("an event row");
    }
    // Plugin a took them in reverse, b only the second: the marks' order, not the events'.
    for (plugin, e) in [
        ("a", &events[3]),
        ("b", &events[1]),
        ("a", &events[2]),
        ("a", &events[1]),
        ("a", &events[0]),
    ] {
        sqlx::query("INSERT INTO inbox_marks (plugin, event_id) VALUES (?, ?)")
            .bind(plugin)
            .bind(&e.id)
            .execute(&mut conn)
            .await
            .expect("a mark");
    }
    conn.close().await.expect("close");

    let store = open(&path).await;
    let read = |plugin: &'static str| {
        let store = &store;
        async move {
            let inbox = store.inbox(plugin).await.expect("the inbox reads");
            assert!(inbox.damaged.is_empty(), "{:?}", inbox.damaged);
            inbox.events
        }
    };
    let a = read("a").await;
    let expected: Vec<_> = events.iter().rev().cloned().collect();
    assert_eq!(a, expected, "a's events whole, in the order a took them");
    assert_eq!(read("b").await, [events[1].clone()]);
    let late = event("c", "v9", "99", Phase::Succeeded);
    store
        .write(WriteBatch {
            taken: vec![Taken::of("b", &late).expect("an event encodes")],
            ..WriteBatch::default()
        })
        .await
        .expect("a take after the migration");
    assert_eq!(read("b").await, [events[1].clone(), late]);
    store.close().await;

    let mut conn = SqliteConnectOptions::new()
        .filename(&path)
        .connect()
        .await
        .expect("raw connection");
    let shapes: Vec<(String, Option<String>)> = sqlx::query_as(
        "SELECT name, sql FROM sqlite_master WHERE tbl_name IN ('inbox_events', 'inbox_marks') \
         ORDER BY name",
    )
    .fetch_all(&mut conn)
    .await
    .expect("the schema");
    conn.close().await.expect("close");
    let names: Vec<&str> = shapes.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "inbox_events",
            "inbox_marks",
            "sqlite_autoindex_inbox_events_1",
            "sqlite_autoindex_inbox_marks_1"
        ],
        "no age index, no by-event index"
    );
    let events_sql = shapes[0].1.as_deref().unwrap_or_default();
    assert!(!events_sql.contains("AUTOINCREMENT"), "{events_sql}");
    let marks_sql = shapes[1].1.as_deref().unwrap_or_default();
    assert!(
        marks_sql.contains("UNIQUE (event_id, plugin)"),
        "{marks_sql}"
    );
    crate::support::assert_inbox_works(&open(&path).await).await;
}
