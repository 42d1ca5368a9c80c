//! MySQL and MariaDB: databases the store must refuse, migrations, the server's own rules, and
//! the readiness check with the server going away.

use std::time::Duration;

use jobrelay_contract::event::Phase;
use jobrelay_state::{
    DeliveryStore, MySqlStore, SCHEMA_VERSION, StateBackend, StoreError, open_store, open_stores,
    redacted_url,
};
use sqlx::{AssertSqlSafe, Connection};

use crate::support::{Backend, cursor, open, temp_db};

#[tokio::test]
async fn mysql_a_newer_schema_is_refused() {
    let b = Backend::mysql("newer");
    let Backend::MySql { url, prefix } = &b else {
        unreachable!()
    };
    b.store().await.close().await;
    let mut conn = b.mysql_connection().await;
    sqlx::query(AssertSqlSafe(format!(
        "UPDATE {prefix}schema_version SET version = ?"
    )))
    .bind(SCHEMA_VERSION + 1)
    .execute(&mut conn)
    .await
    .expect("bump the version");
    conn.close().await.expect("close");

    let err = MySqlStore::open(url, prefix)
        .await
        .expect_err("a newer schema is refused");
    assert!(
        matches!(err, StoreError::DatabaseNewerSchema { found, .. } if found == SCHEMA_VERSION + 1),
        "{err}"
    );
    let text = err.to_string();
    assert!(text.contains(&redacted_url(url)), "{text}");
    assert!(text.contains(&format!("{prefix}schema_version")), "{text}");
    assert!(
        text.contains(&format!("schema version {}", SCHEMA_VERSION + 1)),
        "{text}"
    );
}

#[tokio::test]
async fn mysql_a_version_1_database_is_migrated_and_keeps_its_cursors() {
    let b = Backend::mysql("v1");
    let Backend::MySql { prefix, .. } = &b else {
        unreachable!()
    };
    let store = b.store().await;
    store
        .save_cursor(&cursor("p", "c", "u1", "5", Phase::Running))
        .await
        .expect("cursor");
    store.close().await;
    // Turn the tables back into version 1: no kv table, version 1.
    let mut conn = b.mysql_connection().await;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP TABLE {prefix}plugin_kv; DROP TABLE {prefix}plugin_installs; \
         DROP TABLE {prefix}inbox_events; DROP TABLE {prefix}inbox_marks; \
         UPDATE {prefix}schema_version SET version = 1;"
    )))
    .execute(&mut conn)
    .await
    .expect("downgrade");
    conn.close().await.expect("close");

    let (store, kv) = b.open().await;
    assert_eq!(store.cursors("p").await.expect("cursors").len(), 1);
    kv.kv_set("p", "k", b"v", None)
        .await
        .expect("the kv table exists again");
    store
        .install_time("p", "2026-01-01T00:00:00Z")
        .await
        .expect("the install table exists again");
    crate::support::assert_inbox_works(store.as_ref()).await;
    store.close().await;
}

#[tokio::test]
async fn mysql_foreign_tables_are_refused() {
    let b = Backend::mysql("foreign");
    let Backend::MySql { url, prefix } = &b else {
        unreachable!()
    };
    let mut conn = b.mysql_connection().await;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE TABLE {prefix}cursors (invoice INT PRIMARY KEY)"
    )))
    .execute(&mut conn)
    .await
    .expect("foreign table");
    conn.close().await.expect("close");

    let err = MySqlStore::open(url, prefix).await.expect_err("refused");
    assert!(matches!(err, StoreError::NotAStateDatabase { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("state.table_prefix"), "{text}");
    assert!(text.contains(&redacted_url(url)), "{text}");
}

#[tokio::test]
async fn mysql_an_unreachable_server_is_named_without_the_password() {
    // Nothing listens on port 1.
    let err = MySqlStore::open("mysql://relay:hunter2@127.0.0.1:1/state", "jobrelay_")
        .await
        .expect_err("unreachable");
    assert!(matches!(err, StoreError::Connect { .. }), "{err}");
    let text = format!("{err} / {err:?}");
    assert!(text.contains("127.0.0.1:1"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");

    // The same through the settings, with the URL in a secret file.
    let dir = tempfile::tempdir().expect("temp dir");
    let secret = dir.path().join("state-url");
    std::fs::write(&secret, "mysql://relay:hunter2@127.0.0.1:1/state\n").expect("write");
    let backend = StateBackend::MySql {
        url: format!("file:{}", secret.display()),
        table_prefix: "jobrelay_".into(),
    };
    let err = open_stores(&backend)
        .await
        .map(|_| ())
        .expect_err("unreachable");
    let text = format!("{err} / {err:?} / {backend} / {backend:?}");
    assert!(text.contains("127.0.0.1:1"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");

    // A missing secret names the reference, not a value.
    let backend = StateBackend::MySql {
        url: "file:/nonexistent/state-url".into(),
        table_prefix: "jobrelay_".into(),
    };
    let err = open_store(&backend).await.map(|_| ()).expect_err("missing");
    assert!(matches!(err, StoreError::BadUrl(_)), "{err}");
    assert!(err.to_string().contains("/nonexistent/state-url"), "{err}");

    // A URL without a database, or of another kind, is refused before connecting.
    let err = MySqlStore::open("mysql://relay:hunter2@127.0.0.1:3306", "jobrelay_")
        .await
        .expect_err("no database");
    assert!(matches!(err, StoreError::BadUrl(_)), "{err}");
    assert!(!err.to_string().contains("hunter2"), "{err}");
    let err = MySqlStore::open("postgres://relay:hunter2@127.0.0.1/state", "jobrelay_")
        .await
        .expect_err("not MySQL");
    assert!(
        matches!(err, StoreError::BadUrl(_)) && !err.to_string().contains("hunter2"),
        "{err}"
    );
}

#[tokio::test]
async fn mysql_a_url_from_a_secret_file_opens_the_store() {
    let b = Backend::mysql("secret");
    let Backend::MySql { url, prefix } = &b else {
        unreachable!()
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let secret = dir.path().join("state-url");
    std::fs::write(&secret, format!("{url}\n")).expect("write");
    let backend = StateBackend::MySql {
        url: format!("file:{}", secret.display()),
        table_prefix: prefix.clone(),
    };
    let (store, kv) = open_stores(&backend)
        .await
        .expect("open through the secret");
    store
        .save_cursor(&cursor("p", "c", "u", "1", Phase::Running))
        .await
        .expect("save");
    kv.kv_set("p", "k", b"v", None).await.expect("set");
    store.close().await;
    // The same tables as the literal URL.
    let store = b.store().await;
    assert_eq!(store.cursors("p").await.expect("load").len(), 1);
    store.close().await;
}

#[tokio::test]
async fn mysql_keys_are_binary_and_an_overlong_value_fails_instead_of_being_cut() {
    let b = Backend::mysql("strict");
    let Backend::MySql { prefix, .. } = &b else {
        unreachable!()
    };
    let store = b.store().await;
    let mut conn = b.mysql_connection().await;
    let collation: String = sqlx::query_scalar(
        "SELECT TABLE_COLLATION FROM information_schema.TABLES \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
    )
    .bind(format!("{prefix}cursors"))
    .fetch_one(&mut conn)
    .await
    .expect("collation");
    conn.close().await.expect("close");
    assert!(
        collation.starts_with("utf8mb4") && collation.ends_with("_bin"),
        "{collation}"
    );

    // A uid longer than its column (128) would be cut by a non-strict server, and two long
    // uids with the same start would become one job.
    let err = store
        .save_cursor(&cursor("p", "c", &"u".repeat(129), "1", Phase::Running))
        .await
        .expect_err("too long");
    assert!(err.to_string().contains(&b.location()), "{err}");
    assert!(store.cursors("p").await.expect("load").is_empty());
    store.close().await;
}

/// The readiness check answers for the store as it is now: a private MariaDB killed under an
/// open store fails the check (within the daemon's time limit for it), and passes again once
/// the server is back; an open SQLite file always answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_check_follows_the_database_going_away_and_coming_back() {
    use jobrelay_testkit::PrivateMariaDb;

    let (_dir, path) = temp_db();
    open(&path)
        .await
        .check()
        .await
        .expect("an open state file answers");

    let mut db = tokio::task::spawn_blocking(|| {
        let mut db = PrivateMariaDb::init()?;
        db.start()?;
        Ok::<_, std::io::Error>(db)
    })
    .await
    .expect("task")
    .expect("a private MariaDB (mariadb-install-db and mariadbd must be installed)");
    let store = MySqlStore::open(&db.url(), "check_")
        .await
        .expect("store on the private server");
    store.check().await.expect("the server answers");

    db.kill();
    let down = tokio::time::timeout(Duration::from_secs(30), store.check())
        .await
        .expect("a dead server is reported, not waited on forever");
    assert!(down.is_err(), "the check passed with the server killed");

    let mut db = tokio::task::spawn_blocking(move || db.start().map(|()| db))
        .await
        .expect("task")
        .expect("restart");
    let mut answered = false;
    for _ in 0..60 {
        if store.check().await.is_ok() {
            answered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(answered, "the check did not pass again after the restart");
    db.kill();
}
