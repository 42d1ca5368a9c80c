//! The `mysql-sync` plugin on a real MariaDB (over TCP) and on SQLite, through the host's
//! `sql` capability and real wasmtime. Needs MariaDB at `JOBRELAY_TEST_MYSQL_URL` (default
//! root@127.0.0.1:3306/test): the tests fail, not skip, without it.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use common::{event, mysql_url, runtime, spec, unique_prefix};
use jobrelay_capabilities::Grants;
use jobrelay_capabilities::Services;
use jobrelay_capabilities::sql::Databases;
use jobrelay_capabilities::sql::{SqlConnection, SqlSettings};
use jobrelay_contract::event::{JobEvent, Phase};
use jobrelay_runtime::{CallError, LoadError, PluginVersion, Runtime};
use sqlx::Row;
use sqlx::mysql::MySqlPool;

/// Test SQL text built at run time (table names carry a per-test prefix).
macro_rules! sql {
    ($($text:tt)*) => {
        sqlx::AssertSqlSafe(format!($($text)*))
    };
}

fn services(dir: &Path) -> Services {
    let settings = SqlSettings {
        connections: BTreeMap::from([(
            "main".to_string(),
            SqlConnection {
                url: mysql_url(),
                max_connections: 8,
                acquire_timeout_ms: 5_000,
                max_statement_ms: 60_000,
            },
        )]),
    };
    Services {
        sql: Databases::open(&settings, &dir.join("embedded")).expect("pools"),
        ..Services::default()
    }
}

fn grants(connections: &[&str]) -> Grants {
    Grants {
        sql: connections.iter().map(|c| c.to_string()).collect(),
        ..Grants::default()
    }
}

async fn load(rt: &Runtime, connection: &str, prefix: &str) -> Arc<PluginVersion> {
    let jobs = format!("{prefix}_jobs");
    let transitions = format!("{prefix}_transitions");
    let config = [
        ("connection", connection),
        ("jobs_table", jobs.as_str()),
        ("transitions_table", transitions.as_str()),
        ("team_label", "team"),
    ];
    rt.load(spec(
        "mysql-sync",
        "mysql-sync",
        &config,
        grants(&[connection]),
    ))
    .await
    .expect("mysql-sync loads and creates its tables")
}

async fn mariadb() -> MySqlPool {
    MySqlPool::connect(&mysql_url())
        .await
        .expect("MariaDB must be reachable for this test (tests/run.sh starts it)")
}

/// A job's life: pending, running, then finished, with its status carrying the times.
fn lifecycle(uid: &str, base: u32, last: Phase) -> Vec<JobEvent> {
    let mut pending = event(
        uid,
        &base.to_string(),
        Phase::Pending,
        None,
        "2026-11-21T10:00:00Z",
    );
    pending.object_json = Arc::from(r#"{"status":{}}"#);
    let mut running = event(
        uid,
        &(base + 1).to_string(),
        Phase::Running,
        Some(Phase::Pending),
        "2026-11-21T10:00:05Z",
    );
    running.object_json = Arc::from(r#"{"status":{"startTime":"2026-11-21T10:00:05Z"}}"#);
    let mut done = event(
        uid,
        &(base + 2).to_string(),
        last,
        Some(Phase::Running),
        "2026-11-21T11:00:10Z",
    );
    done.reason = Some("Completed".into());
    done.message = Some("all workers finished".into());
    // The finished version's status no longer needs a start time for the duration: the
    // stored one is used.
    done.object_json = Arc::from(r#"{"status":{"completionTime":"2026-11-21T11:00:10Z"}}"#);
    vec![pending, running, done]
}

async fn handle_all(plugin: &PluginVersion, events: &[JobEvent]) {
    for e in events {
        plugin.handle(e).await.expect("handled");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_rows_follow_the_job_and_replays_change_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime(services(dir.path()));
    let prefix = unique_prefix("life");
    let plugin = load(&rt, "main", &prefix).await;
    let db = mariadb().await;

    let events = lifecycle("u-1", 100, Phase::Succeeded);
    handle_all(&plugin, &events).await;

    let row = sqlx::query(sql!(
        "SELECT phase, raw_phase, reason, message, CAST(start_time AS CHAR) AS s, \
         CAST(finish_time AS CHAR) AS f, duration_seconds, resource_version, labels_json, \
         CAST(updated_at AS CHAR) AS u FROM {prefix}_jobs WHERE cluster = 'east' AND uid = 'u-1'"
    ))
    .fetch_one(&db)
    .await
    .expect("the job has a row");
    assert_eq!(row.get::<String, _>("phase"), "succeeded");
    assert_eq!(row.get::<String, _>("resource_version"), "102");
    assert_eq!(
        row.get::<Option<String>, _>("reason").as_deref(),
        Some("Completed")
    );
    assert_eq!(row.get::<String, _>("s"), "2026-11-21 10:00:05.000");
    assert_eq!(row.get::<String, _>("f"), "2026-11-21 11:00:10.000");
    assert_eq!(row.get::<Option<i64>, _>("duration_seconds"), Some(3605));
    assert_eq!(row.get::<String, _>("labels_json"), r#"{"team":"nlp"}"#);
    let updated_at: String = row.get("u");

    let transitions = sqlx::query(sql!(
        "SELECT event_id, from_phase, to_phase FROM {prefix}_transitions ORDER BY event_id"
    ))
    .fetch_all(&db)
    .await
    .expect("transitions");
    let got: Vec<(String, Option<String>, String)> = transitions
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        got,
        vec![
            ("east/u-1/100".into(), None, "pending".into()),
            (
                "east/u-1/101".into(),
                Some("pending".into()),
                "running".into()
            ),
            (
                "east/u-1/102".into(),
                Some("running".into()),
                "succeeded".into()
            ),
        ]
    );

    // Every event again (a restart's re-delivery, a replayed dead letter), then the old
    // `running` version alone, late: nothing changes, not even `updated_at`.
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    handle_all(&plugin, &events).await;
    plugin.handle(&events[1]).await.expect("late event handled");
    let count: i64 = sqlx::query_scalar(sql!("SELECT COUNT(*) FROM {prefix}_transitions"))
        .fetch_one(&db)
        .await
        .expect("count");
    assert_eq!(
        count, 3,
        "one row per transition, whatever was re-delivered"
    );
    let (phase, again): (String, String) = sqlx::query_as(sql!(
        "SELECT phase, CAST(updated_at AS CHAR) FROM {prefix}_jobs WHERE uid = 'u-1'"
    ))
    .fetch_one(&db)
    .await
    .expect("row");
    assert_eq!(
        phase, "succeeded",
        "an older event never overwrites a newer state"
    );
    assert_eq!(again, updated_at, "a replay writes nothing");

    // The deletion is newer than everything: it is recorded.
    let mut deleted = event(
        "u-1",
        "102-deleted",
        Phase::Deleted,
        Some(Phase::Succeeded),
        "2026-11-21T12:00:00Z",
    );
    deleted.object_json = Arc::from(r#"{"status":{"completionTime":"2026-11-21T11:00:10Z"}}"#);
    plugin.handle(&deleted).await.expect("deletion handled");
    let phase: String =
        sqlx::query_scalar(sql!("SELECT phase FROM {prefix}_jobs WHERE uid = 'u-1'"))
            .fetch_one(&db)
            .await
            .expect("row");
    assert_eq!(phase, "deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_gets_the_same_rows_through_the_embedded_connection() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime(services(dir.path()));
    let prefix = unique_prefix("lite");
    let plugin = load(&rt, "embedded", &prefix).await;
    let events = lifecycle("u-2", 7, Phase::Failed);
    handle_all(&plugin, &events).await;
    handle_all(&plugin, &events).await;

    let db = sqlx::SqlitePool::connect(&format!(
        "sqlite://{}",
        dir.path().join("embedded/mysql-sync.db").display()
    ))
    .await
    .expect("sqlite");
    let (phase, duration, start): (String, Option<i64>, Option<String>) = sqlx::query_as(sql!(
        "SELECT phase, duration_seconds, start_time FROM {prefix}_jobs WHERE uid = 'u-2'"
    ))
    .fetch_one(&db)
    .await
    .expect("row");
    assert_eq!(phase, "failed");
    assert_eq!(duration, Some(3605));
    assert_eq!(start.as_deref(), Some("2026-11-21 10:00:05.000"));
    let count: i64 = sqlx::query_scalar(sql!("SELECT COUNT(*) FROM {prefix}_transitions"))
        .fetch_one(&db)
        .await
        .expect("count");
    assert_eq!(count, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_events_are_stored_not_fatal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime(services(dir.path()));
    let prefix = unique_prefix("odd");
    let plugin = load(&rt, "main", &prefix).await;
    let db = mariadb().await;

    let mut odd = event("u-3", "5", Phase::Unknown, None, "not a time");
    odd.object_json = Arc::from("this is not JSON");
    odd.message = Some("é".repeat(40_000)); // 80 KB, cut to 16 KiB at a char boundary
    odd.labels = (0..2_000)
        .map(|i| (format!("label-{i}"), "v".repeat(200)))
        .collect();
    plugin.handle(&odd).await.expect("an odd event is stored");
    let (message_len, labels): (i64, String) = sqlx::query_as(sql!(
        "SELECT LENGTH(message), labels_json FROM {prefix}_jobs WHERE uid = 'u-3'"
    ))
    .fetch_one(&db)
    .await
    .expect("row");
    assert!(message_len <= 16 * 1024, "{message_len}");
    assert!(
        labels.contains("labels-omitted"),
        "huge labels are replaced by a marker"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_granted_by_name_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime(services(dir.path()));

    // A connection the main file does not define: the load fails, naming it.
    let err = rt
        .load(spec(
            "mysql-sync",
            "mysql-sync",
            &[("connection", "other")],
            grants(&["other"]),
        ))
        .await
        .expect_err("an undefined connection is refused");
    assert!(matches!(err, LoadError::Grant { .. }), "{err}");
    assert!(err.to_string().contains("`other`"), "{err}");

    // Defined but not granted to this plugin: its init is refused with the sql error.
    let err = rt
        .load(spec(
            "mysql-sync",
            "mysql-sync",
            &[("connection", "main")],
            grants(&["embedded"]),
        ))
        .await
        .expect_err("an ungranted connection is refused");
    let text = err.to_string();
    assert!(text.contains("not granted"), "{text}");

    // A statement the database refuses is a give-up with the database's words.
    let prefix = unique_prefix("bad");
    let plugin = load(&rt, "main", &prefix).await;
    let db = mariadb().await;
    sqlx::query(sql!("DROP TABLE {prefix}_jobs"))
        .execute(&db)
        .await
        .expect("drop");
    let e = event(
        "u-4",
        "1",
        Phase::Running,
        Some(Phase::Running),
        "2026-11-21T10:00:00Z",
    );
    match plugin.handle(&e).await {
        Err(CallError::GiveUp(reason)) => assert!(reason.contains("rejected"), "{reason}"),
        other => panic!("expected a give-up, got {other:?}"),
    }
}

/// The `sql` interface itself on MariaDB, through the `intruder` test plugin: transactions are
/// all or nothing, and values come back typed (DATETIME and big unsigned integers as text,
/// DECIMAL refused with the column named).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_transactions_and_value_types() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime(services(dir.path()));
    let intruder = rt
        .load(spec("intruder", "intruder", &[], grants(&["main"])))
        .await
        .expect("intruder loads");
    for what in ["sql-tx:main", "sql-types:main"] {
        let mut e = event("u-sql", "1", Phase::Running, None, "2026-11-21T10:00:00Z");
        e.annotations
            .insert("jobrelay.test/try".into(), what.into());
        intruder
            .handle(&e)
            .await
            .unwrap_or_else(|err| panic!("{what}: {err}"));
    }
    let db = mariadb().await;
    let _ = sqlx::query("DROP TABLE intruder_tx").execute(&db).await;
}

/// Where a test's tables live: the shared MariaDB, or the `embedded` SQLite file.
/// mysql-sync loaded on a connection, its tables named after the test, and that database
/// read directly: (the folder, held so it and the embedded database in it live as long as the
/// test; the runtime; the tables' prefix; the plugin; the database).
struct Loaded(tempfile::TempDir, Runtime, String, Arc<PluginVersion>, Db);

async fn loaded(connection: &str, name: &str) -> Loaded {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime(services(dir.path()));
    let prefix = unique_prefix(name);
    let plugin = load(&rt, connection, &prefix).await;
    let db = Db::open(connection, dir.path()).await;
    Loaded(dir, rt, prefix, plugin, db)
}

enum Db {
    Maria(MySqlPool),
    Lite(sqlx::SqlitePool),
}

impl Db {
    async fn open(connection: &str, dir: &Path) -> Db {
        match connection {
            "main" => Db::Maria(mariadb().await),
            _ => Db::Lite(
                sqlx::SqlitePool::connect(&format!(
                    "sqlite://{}",
                    dir.join("embedded/mysql-sync.db").display()
                ))
                .await
                .expect("sqlite"),
            ),
        }
    }

    async fn execute(&self, statement: String) {
        match self {
            Db::Maria(pool) => sqlx::raw_sql(sqlx::AssertSqlSafe(statement))
                .execute(pool)
                .await
                .map(|_| ()),
            Db::Lite(pool) => sqlx::raw_sql(sqlx::AssertSqlSafe(statement))
                .execute(pool)
                .await
                .map(|_| ()),
        }
        .expect("statement");
    }

    /// The rows `sql` selects, on whichever database.
    async fn all<T>(&self, sql: String) -> Vec<T>
    where
        T: for<'r> sqlx::FromRow<'r, sqlx::mysql::MySqlRow>
            + for<'r> sqlx::FromRow<'r, sqlx::sqlite::SqliteRow>
            + Send
            + Unpin,
    {
        match self {
            Db::Maria(pool) => sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .fetch_all(pool)
                .await
                .expect("rows"),
            Db::Lite(pool) => sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .fetch_all(pool)
                .await
                .expect("rows"),
        }
    }

    /// The one row `sql` selects.
    async fn one<T>(&self, sql: String) -> T
    where
        T: for<'r> sqlx::FromRow<'r, sqlx::mysql::MySqlRow>
            + for<'r> sqlx::FromRow<'r, sqlx::sqlite::SqliteRow>
            + Send
            + Unpin,
    {
        let mut rows = self.all(sql).await;
        assert_eq!(rows.len(), 1, "one row");
        rows.remove(0)
    }

    /// (event_id, transition_key, to_phase) of every transition row, by event id.
    async fn transitions(&self, prefix: &str) -> Vec<(String, Option<String>, String)> {
        self.all(format!(
            "SELECT event_id, transition_key, to_phase FROM {prefix}_transitions ORDER BY event_id"
        ))
        .await
    }

    /// phase, raw_phase, outcome, finish_time, duration_seconds, deleted_at, labels_json.
    async fn job(&self, prefix: &str, uid: &str) -> JobRow {
        let times = |c: &str| match self {
            Db::Maria(_) => format!("CAST({c} AS CHAR)"),
            Db::Lite(_) => c.to_string(),
        };
        let text = format!(
            "SELECT phase, raw_phase, outcome, {}, duration_seconds, {}, labels_json \
             FROM {prefix}_jobs WHERE uid = '{uid}'",
            times("finish_time"),
            times("deleted_at")
        );
        match self {
            Db::Maria(pool) => sqlx::query_as(sqlx::AssertSqlSafe(text))
                .fetch_one(pool)
                .await
                .expect("row"),
            Db::Lite(pool) => sqlx::query_as(sqlx::AssertSqlSafe(text))
                .fetch_one(pool)
                .await
                .expect("row"),
        }
    }
}

type JobRow = (
    String,
    String,
    Option<String>,
    Option<String>,
    Option<i64>,
    Option<String>,
    String,
);

/// A deletion noticed on a re-list: no status, no labels, no raw phase (as the lane makes it).
fn deletion_noticed_on_relist(uid: &str, rv: &str, at: &str) -> JobEvent {
    let mut gone = event(uid, &format!("{rv}-gone"), Phase::Deleted, None, at);
    gone.raw_phase = String::new();
    gone.reason = Some("NotListed".into());
    gone.labels = Default::default();
    gone.object_json = Arc::from(
        r#"{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"x","namespace":"ml"}}"#,
    );
    gone
}

async fn deletion_keeps_the_outcome(connection: &str) {
    let Loaded(_dir, _rt, prefix, plugin, db) = loaded(connection, "keep").await;

    handle_all(&plugin, &lifecycle("u-k", 300, Phase::Failed)).await;
    plugin
        .handle(&deletion_noticed_on_relist(
            "u-k",
            "302",
            "2026-11-21T12:00:00Z",
        ))
        .await
        .expect("deletion handled");

    let (phase, raw, outcome, finish, duration, deleted_at, labels) = db.job(&prefix, "u-k").await;
    assert_eq!(phase, "deleted");
    assert_eq!(
        raw, "Failed",
        "a status-less deletion does not blank the raw phase"
    );
    assert_eq!(outcome.as_deref(), Some("failed"));
    assert_eq!(finish.as_deref(), Some("2026-11-21 11:00:10.000"));
    assert_eq!(duration, Some(3605));
    assert_eq!(deleted_at.as_deref(), Some("2026-11-21 12:00:00.000"));
    assert_eq!(labels, r#"{"team":"nlp"}"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_a_status_less_deletion_keeps_what_was_learned() {
    deletion_keeps_the_outcome("main").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_status_less_deletion_keeps_what_was_learned() {
    deletion_keeps_the_outcome("embedded").await;
}

/// A Volcano job (no `completionTime`) that failed, then was deleted: the finish time is the
/// failed transition's, and neither `terminating` nor `deleted` loses it.
async fn finish_survives_deletion(connection: &str) {
    let Loaded(_dir, _rt, prefix, plugin, db) = loaded(connection, "vc").await;

    let status = r#"{"status":{"conditions":[
        {"status":"Pending","lastTransitionTime":"2026-11-21T10:00:00Z"},
        {"status":"Running","lastTransitionTime":"2026-11-21T10:00:05Z"},
        {"status":"Failed","lastTransitionTime":"2026-11-21T10:30:05Z"}]}}"#;
    let mut events = vec![
        event("u-v", "500", Phase::Pending, None, "2026-11-21T10:00:00Z"),
        event(
            "u-v",
            "501",
            Phase::Running,
            Some(Phase::Pending),
            "2026-11-21T10:00:05Z",
        ),
        event(
            "u-v",
            "502",
            Phase::Failed,
            Some(Phase::Running),
            "2026-11-21T10:30:05Z",
        ),
        event(
            "u-v",
            "503",
            Phase::Terminating,
            Some(Phase::Failed),
            "2026-11-21T11:00:00Z",
        ),
        event(
            "u-v",
            "503-deleted",
            Phase::Deleted,
            Some(Phase::Terminating),
            "2026-11-21T11:00:02Z",
        ),
    ];
    for e in &mut events {
        e.kind = "Job".into();
        e.api_version = "batch.volcano.sh/v1alpha1".into();
        e.object_json = Arc::from(status);
    }
    handle_all(&plugin, &events[..4]).await;
    let (phase, _, outcome, finish, duration, deleted_at, _) = db.job(&prefix, "u-v").await;
    assert_eq!(phase, "terminating");
    assert_eq!(outcome.as_deref(), Some("failed"));
    assert_eq!(finish.as_deref(), Some("2026-11-21 10:30:05.000"));
    assert_eq!(duration, Some(1800));
    assert_eq!(deleted_at, None);

    handle_all(&plugin, &events[4..]).await;
    let (phase, raw, outcome, finish, duration, deleted_at, _) = db.job(&prefix, "u-v").await;
    assert_eq!(phase, "deleted");
    assert_eq!(
        raw, "Deleted",
        "the deletion's own raw phase, when it has one"
    );
    assert_eq!(outcome.as_deref(), Some("failed"));
    assert_eq!(finish.as_deref(), Some("2026-11-21 10:30:05.000"));
    assert_eq!(duration, Some(1800));
    assert_eq!(deleted_at.as_deref(), Some("2026-11-21 11:00:02.000"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_finish_time_survives_terminating_and_deleted() {
    finish_survives_deletion("main").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_finish_time_survives_terminating_and_deleted() {
    finish_survives_deletion("embedded").await;
}

/// A jobs table written by the previous release (no `outcome`, no `deleted_at`; a deleted
/// job's row blanked): loading this release adds the columns and fills them from the
/// transitions table, keeping every row.
async fn old_tables_are_migrated(connection: &str) {
    let Loaded(_dir, rt, prefix, plugin, db) = loaded(connection, "mig").await;
    handle_all(&plugin, &lifecycle("u-live", 10, Phase::Succeeded)).await;
    handle_all(&plugin, &lifecycle("u-gone", 20, Phase::Failed)).await;
    drop(plugin);
    // Back to the old form: the columns dropped, the deleted job's row as the old upsert
    // left it.
    for column in ["outcome", "deleted_at"] {
        db.execute(format!("ALTER TABLE {prefix}_jobs DROP COLUMN {column}"))
            .await;
    }
    let drop_index = match &db {
        Db::Maria(_) => format!(
            "ALTER TABLE {prefix}_transitions DROP INDEX {prefix}_transitions_by_transition"
        ),
        Db::Lite(_) => format!("DROP INDEX {prefix}_transitions_by_transition"),
    };
    db.execute(drop_index).await;
    db.execute(format!(
        "ALTER TABLE {prefix}_transitions DROP COLUMN transition_key"
    ))
    .await;
    db.execute(format!(
        "UPDATE {prefix}_jobs SET phase = 'deleted', raw_phase = '', \
         transition_time = '2026-11-21 12:00:00.000' WHERE uid = 'u-gone'"
    ))
    .await;

    let plugin = load(&rt, connection, &prefix).await;
    let live = db.job(&prefix, "u-live").await;
    assert_eq!(live.0, "succeeded");
    assert_eq!(live.2.as_deref(), Some("succeeded"));
    assert_eq!(live.5, None);
    let gone = db.job(&prefix, "u-gone").await;
    assert_eq!(gone.0, "deleted");
    assert_eq!(
        gone.2.as_deref(),
        Some("failed"),
        "the outcome is found in the transitions"
    );
    assert_eq!(gone.5.as_deref(), Some("2026-11-21 12:00:00.000"));
    let rows = db.transitions(&prefix).await;
    assert_eq!(rows.len(), 6, "{rows:?}");
    for (id, key, _) in &rows {
        assert_eq!(
            key.as_deref(),
            Some(id.as_str()),
            "an old row is its own transition"
        );
    }
    // Loading again changes nothing, and the migrated table takes new events.
    drop(plugin);
    let plugin = load(&rt, connection, &prefix).await;
    plugin
        .handle(&deletion_noticed_on_relist(
            "u-live",
            "12",
            "2026-11-21T13:00:00Z",
        ))
        .await
        .expect("handled");
    let live = db.job(&prefix, "u-live").await;
    assert_eq!(live.2.as_deref(), Some("succeeded"));
    assert_eq!(live.5.as_deref(), Some("2026-11-21 13:00:00.000"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_an_old_jobs_table_is_migrated() {
    old_tables_are_migrated("main").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_an_old_jobs_table_is_migrated() {
    old_tables_are_migrated("embedded").await;
}

/// A transition delivered live and again as a reconstruction after a lost acknowledgement
/// (another event id, the same transition key) is one transition row, silently. A key met
/// again from another phase (two transitions given one key) keeps the stored row and is
/// reported: a warning, counted per plugin.
async fn one_row_per_transition(connection: &str) {
    let Loaded(_dir, rt, prefix, plugin, db) = loaded(connection, "key").await;
    let mut events = lifecycle("u-k", 30, Phase::Failed);
    for e in &mut events {
        e.transition_key = format!("east/u-k/{}@{}", e.phase, e.transition_time);
    }
    handle_all(&plugin, &events).await;
    let mut rebuilt = events[2].clone();
    rebuilt.id = "east/u-k/40~failed~2".into();
    rebuilt.resource_version = "40~failed~2".into();
    rebuilt.synthetic = true;
    plugin.handle(&rebuilt).await.expect("handled");
    let rows = db.transitions(&prefix).await;
    let failed: Vec<_> = rows.iter().filter(|r| r.2 == "failed").collect();
    assert_eq!(failed.len(), 1, "{rows:?}");
    assert_eq!(failed[0].0, "east/u-k/32", "the live row stays");
    let warnings = || {
        rt.services()
            .log_lines
            .of("mysql-sync")
            .get("warn")
            .copied()
            .unwrap_or(0)
    };
    assert_eq!(warnings(), 0, "the same transition again is no news");

    let mut collided = events[2].clone();
    collided.id = "east/u-k/77".into();
    collided.resource_version = "77".into();
    collided.previous_phase = Some(Phase::Restarting);
    plugin.handle(&collided).await.expect("handled");
    let after = db.transitions(&prefix).await;
    assert_eq!(after.len(), rows.len(), "the stored row is kept: {after:?}");
    assert_eq!(
        warnings(),
        1,
        "a key met again from another phase is reported"
    );
}

/// `restarts` counts the restarting transitions stored: a replayed event and the same
/// transition rebuilt after a gap (another id, the same key) count once each.
async fn restarts_are_counted_from_the_transition_rows(connection: &str) {
    let Loaded(_dir, _rt, prefix, plugin, db) = loaded(connection, "restarts").await;
    let steps = [
        (Phase::Pending, None),
        (Phase::Running, Some(Phase::Pending)),
        (Phase::Restarting, Some(Phase::Running)),
        (Phase::Running, Some(Phase::Restarting)),
        (Phase::Restarting, Some(Phase::Running)),
        (Phase::Running, Some(Phase::Restarting)),
    ];
    let events: Vec<JobEvent> = steps
        .iter()
        .enumerate()
        .map(|(i, (phase, previous))| {
            let time = format!("2026-11-21T10:00:{:02}Z", i * 5);
            let mut e = event("u-r", &(50 + i).to_string(), *phase, *previous, &time);
            e.transition_key = format!("east/u-r/{phase}@{time}");
            e
        })
        .collect();
    handle_all(&plugin, &events).await;
    // The first restart replayed, the second rebuilt after a gap.
    plugin.handle(&events[2]).await.expect("handled");
    let mut rebuilt = events[4].clone();
    rebuilt.id = "east/u-r/60~restarting~2".into();
    rebuilt.resource_version = "60~restarting~2".into();
    rebuilt.synthetic = true;
    plugin.handle(&rebuilt).await.expect("handled");
    let sql = format!("SELECT restarts FROM {prefix}_jobs WHERE uid = 'u-r'");
    let restarts: (Option<i64>,) = db.one(sql).await;
    assert_eq!(restarts, (Some(2),));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_restarts_are_counted_from_the_transition_rows() {
    restarts_are_counted_from_the_transition_rows("main").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_restarts_are_counted_from_the_transition_rows() {
    restarts_are_counted_from_the_transition_rows("embedded").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_one_row_per_transition() {
    one_row_per_transition("main").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_one_row_per_transition() {
    one_row_per_transition("embedded").await;
}

/// A job's story (its Kueue Workload, its failing pod) fills the story columns, each kept
/// when a later event knows nothing of it; a jobs table as the release before the story wrote
/// it gains the columns at load (its rows keep theirs, the new columns empty) and takes the
/// story from then on.
async fn the_story_fills_its_columns_on_a_migrated_table(connection: &str) {
    use jobrelay_contract::story::{Counts, FailureCause, QueueState, Story, WorkloadFacts};
    let Loaded(_dir, rt, prefix, plugin, db) = loaded(connection, "story").await;
    handle_all(&plugin, &lifecycle("u-before", 10, Phase::Succeeded)).await;
    drop(plugin);
    for column in [
        "local_queue",
        "cluster_queue",
        "queue_state",
        "queued_since",
        "admitted_at",
        "queued_seconds",
        "preemptions",
        "requeues",
        "team",
        "restarts",
        "accelerators_json",
        "admitted_seconds",
        "accelerator_seconds_json",
        "failure_reason",
        "failure_exit_code",
        "failure_container",
    ] {
        db.execute(format!("ALTER TABLE {prefix}_jobs DROP COLUMN {column}"))
            .await;
    }
    let plugin = load(&rt, connection, &prefix).await;

    let at = |t: &str| chrono::DateTime::parse_from_rfc3339(t).ok();
    let workload = |state: QueueState, admitted: Option<&str>| WorkloadFacts {
        job_uid: None,
        state,
        cluster_queue: admitted.map(|_| "gpu".to_string()),
        local_queue: Some("team-a".into()),
        waiting_since: at("2026-11-21T10:00:00Z"),
        admitted_at: admitted.and_then(at),
        evicted_at: None,
        past_execution_seconds: 0,
        evictions: Counts::from([("Preempted".into(), 1)]),
        requeues: 1,
        accelerators: admitted
            .map(|_| Counts::from([("nvidia.com/gpu".to_string(), 8)]))
            .unwrap_or_default(),
    };
    let mut events = lifecycle("u-story", 30, Phase::Failed);
    events[0].story = Some(Arc::new(Story {
        workload: Some(workload(
            QueueState::Queued {
                reason: "Pending".into(),
                message: "insufficient quota".into(),
            },
            None,
        )),
        failure: None,
    }));
    events[1].story = Some(Arc::new(Story {
        workload: Some(workload(QueueState::Admitted, Some("2026-11-21T10:05:00Z"))),
        failure: None,
    }));
    // Admitted for 10 minutes before an eviction, then from 10:05:00 to the end at 11:00:10.
    let mut last = workload(QueueState::Admitted, Some("2026-11-21T10:05:00Z"));
    last.past_execution_seconds = 600;
    events[2].story = Some(Arc::new(Story {
        workload: Some(last),
        failure: Some(FailureCause {
            container: "trainer".into(),
            init: false,
            reason: "OOMKilled".into(),
            exit_code: Some(137),
            last_reason: None,
            message: None,
        }),
    }));
    // Only the last event names the job's team by the configured label (`team_label: team`);
    // the LocalQueue is its team before.
    for early in &mut events[..2] {
        early.labels.remove("team");
    }
    handle_all(&plugin, &events).await;
    // A later event without a story (a deletion noticed on a re-list) blanks none of it.
    plugin
        .handle(&deletion_noticed_on_relist(
            "u-story",
            "33",
            "2026-11-21T12:00:00Z",
        ))
        .await
        .expect("handled");

    type StoryRow = (
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<i64>,
        Option<i64>,
        Option<String>,
        Option<String>,
        Option<i64>,
        Option<i64>,
        Option<String>,
        Option<String>,
    );
    let time = |c: &str| match &db {
        Db::Maria(_) => format!("CAST({c} AS CHAR)"),
        Db::Lite(_) => c.to_string(),
    };
    let query = |uid: &str| {
        format!(
            "SELECT local_queue, cluster_queue, queue_state, {}, queued_seconds, preemptions, \
             accelerators_json, failure_reason, failure_exit_code, admitted_seconds, \
             accelerator_seconds_json, team FROM {prefix}_jobs \
             WHERE uid = '{uid}'",
            time("queued_since")
        )
    };
    let row = |uid: &str| {
        let text = query(uid);
        async { db.one::<StoryRow>(text).await }
    };
    assert_eq!(
        row("u-story").await,
        (
            Some("team-a".into()),
            Some("gpu".into()),
            Some("admitted".into()),
            Some("2026-11-21 10:00:00.000".into()),
            Some(300),
            Some(1),
            Some(r#"{"nvidia.com/gpu":8}"#.into()),
            Some("OOMKilled".into()),
            Some(137),
            Some(600 + 3_310),
            Some(r#"{"nvidia.com/gpu":31280}"#.into()),
            // The label's, kept by the deletion that had none.
            Some("nlp".into()),
        )
    );
    assert_eq!(
        row("u-before").await,
        (
            None, None, None, None, None, None, None, None, None, None, None, None
        ),
        "a row written before the story keeps its values, the new columns empty"
    );
    assert_eq!(db.job(&prefix, "u-before").await.0, "succeeded");

    // The README's two queries, as written there but for the table's name.
    if let Db::Maria(pool) = &db {
        let readme = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../plugins/mysql-sync/README.md"),
        )
        .expect("the README");
        let queries: Vec<String> = readme
            .split("```sql\n")
            .skip(1)
            .filter_map(|block| block.split("```").next())
            .map(|q| q.replace("FROM jobs ", &format!("FROM {prefix}_jobs ")))
            .collect();
        assert_eq!(queries.len(), 2, "the README's queries");
        let hours: (String, Option<String>, f64) = sqlx::query_as(sqlx::AssertSqlSafe(
            queries[0].replace("DATE(finish_time)", "CAST(DATE(finish_time) AS CHAR)"),
        ))
        .fetch_one(pool)
        .await
        .expect("the GPU-hours query runs");
        assert_eq!(
            (hours.0.as_str(), hours.1.as_deref()),
            ("nlp", Some("2026-11-21"))
        );
        // Eight GPUs over the 3,910 s admitted, not over the run from start to finish.
        assert!((hours.2 - 8.0 * 3_910.0 / 3600.0).abs() < 1e-9, "{hours:?}");
        let p95: (String, i64) = sqlx::query_as(sqlx::AssertSqlSafe(queries[1].clone()))
            .fetch_one(pool)
            .await
            .expect("the p95 query runs");
        assert_eq!(p95, ("team-a".to_string(), 300));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_the_story_fills_its_columns_on_a_migrated_table() {
    the_story_fills_its_columns_on_a_migrated_table("main").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_the_story_fills_its_columns_on_a_migrated_table() {
    the_story_fills_its_columns_on_a_migrated_table("embedded").await;
}
