//! The state store replicas share in the tests that run leader or sharded mode (a SQLite file
//! is refused there): the test MariaDB, under a table prefix of the test's own.

use jobrelay_e2e::{Setup, write_atomic};

/// The shared test MariaDB (`JOBRELAY_TEST_MYSQL_URL` overrides it).
pub fn test_mysql_url() -> String {
    std::env::var("JOBRELAY_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_string())
}

/// Points `setup`'s main file at the test MariaDB under `prefix` (leader and sharded mode
/// refuse a SQLite file), after dropping what an earlier run left there. Fails when MariaDB
/// does not answer.
pub async fn share_state(setup: &Setup, prefix: &str) {
    drop_state_tables(prefix).await;
    point_at_shared_store(setup, prefix);
}

/// Points `setup`'s main file at the test MariaDB under `prefix`, leaving the tables as they
/// are (for a replica joining others already running on them).
pub fn point_at_shared_store(setup: &Setup, prefix: &str) {
    let path = setup.path("jobrelay.yaml");
    let main = std::fs::read_to_string(&path).expect("main file");
    let shared = format!(
        "state: {{url: \"{}\", table_prefix: {prefix}}}",
        test_mysql_url()
    );
    let main = main.replace("state: {path: state/jobrelay.db}", &shared);
    assert!(
        main.contains(prefix),
        "the main file names the shared store"
    );
    write_atomic(&path, main.as_bytes());
}

/// Drops the state store's tables under `prefix`; fails when MariaDB does not answer.
pub async fn drop_state_tables(prefix: &str) {
    use sqlx::Connection;
    let mut conn = sqlx::MySqlConnection::connect(&test_mysql_url())
        .await
        .expect("the test MariaDB answers (tests/run.sh starts it; JOBRELAY_TEST_MYSQL_URL)");
    for table in [
        "schema_version",
        "cursors",
        "dead_letters",
        "plugin_kv",
        "plugin_installs",
        "inbox_events",
        "inbox",
    ] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP TABLE IF EXISTS {prefix}{table}"
        )))
        .execute(&mut conn)
        .await
        .expect("drop a test table");
    }
}
