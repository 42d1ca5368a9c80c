//! What the store's tests share: the test MariaDB, stores on both backends with nothing in
//! them, and the rows and events they write. Also linked into the host's integration tests
//! (`host/tests/common/mod.rs`), whose tests of the store as the host uses it run on the same
//! backends and clean up the same tables.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use jobrelay_contract::event::{JobEvent, Phase};
use jobrelay_state::{
    Cursor, DeliveryStore, PluginKv, SqliteStore, StateBackend, open_stores, redacted_url,
};
use sqlx::mysql::MySqlConnection;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{AssertSqlSafe, ConnectOptions, Connection};

/// The test MariaDB: `JOBRELAY_TEST_MYSQL_URL`, or root without a password on 127.0.0.1.
/// Tests that use it fail when it is unreachable; `tests/run.sh` starts it.
pub fn mysql_url() -> String {
    std::env::var("JOBRELAY_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_string())
}

/// A table-name prefix no other test (or earlier run) uses.
pub fn unique_prefix(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("t{}_{tag}_{:x}", std::process::id(), nanos & 0xffff_ffff)
}

pub fn temp_db() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    // A folder that does not exist yet: opening must create it.
    let path = dir.path().join("nested").join("state.db");
    (dir, path)
}

pub async fn open(path: &Path) -> SqliteStore {
    SqliteStore::open(path).await.expect("open the state file")
}

pub fn cursor(plugin: &str, cluster: &str, uid: &str, rv: &str, phase: Phase) -> Cursor {
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

pub fn event(cluster: &str, uid: &str, rv: &str, phase: Phase) -> JobEvent {
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
        transition_key: String::new(),
        synthetic: true,
        story: None,
    }
}

// ----- the backends under test -----------------------------------------------------------------

/// One backend with nothing in it: a new SQLite file in a temporary folder, or tables of a
/// prefix of their own in the test MariaDB (dropped when this is dropped, even after a failed
/// assertion).
pub enum Backend {
    Sqlite {
        _dir: tempfile::TempDir,
        path: PathBuf,
    },
    MySql {
        url: String,
        prefix: String,
    },
}

impl Backend {
    pub fn sqlite() -> Backend {
        let (dir, path) = temp_db();
        Backend::Sqlite { _dir: dir, path }
    }

    /// `tag` keeps the prefix readable and within 32 characters: at most 12 characters.
    pub fn mysql(tag: &str) -> Backend {
        Backend::MySql {
            url: mysql_url(),
            prefix: format!("{}_", unique_prefix(tag)),
        }
    }

    pub fn state(&self) -> StateBackend {
        match self {
            Backend::Sqlite { path, .. } => StateBackend::Sqlite(path.clone()),
            Backend::MySql { url, prefix } => StateBackend::MySql {
                url: url.clone(),
                table_prefix: prefix.clone(),
            },
        }
    }

    /// What the store's error messages must name: the file, or the server (no password).
    pub fn location(&self) -> String {
        match self {
            Backend::Sqlite { path, .. } => path.display().to_string(),
            Backend::MySql { url, .. } => redacted_url(url),
        }
    }

    pub async fn open(&self) -> (Arc<dyn DeliveryStore>, Arc<dyn PluginKv>) {
        open_stores(&self.state()).await.unwrap_or_else(|e| {
            panic!(
                "open {} (for MySQL, is MariaDB running at JOBRELAY_TEST_MYSQL_URL?): {e}",
                self.state()
            )
        })
    }

    pub async fn store(&self) -> Arc<dyn DeliveryStore> {
        self.open().await.0
    }

    /// Makes every insert of a cursor with this uid fail, behind the store's back.
    pub async fn refuse_cursor_uid(&self, uid: &str) {
        match self {
            Backend::Sqlite { path, .. } => {
                let mut conn = SqliteConnectOptions::new()
                    .filename(path)
                    .connect()
                    .await
                    .expect("raw connection");
                sqlx::raw_sql(AssertSqlSafe(format!(
                    "CREATE TRIGGER refuse_poison BEFORE INSERT ON cursors WHEN NEW.uid = '{uid}'
                     BEGIN SELECT RAISE(ABORT, 'poisoned'); END;"
                )))
                .execute(&mut conn)
                .await
                .expect("trigger");
                conn.close().await.expect("close");
            }
            Backend::MySql { prefix, .. } => {
                let mut conn = self.mysql_connection().await;
                sqlx::raw_sql(AssertSqlSafe(format!(
                    "CREATE TRIGGER {prefix}refuse_poison BEFORE INSERT ON {prefix}cursors
                     FOR EACH ROW IF NEW.uid = '{uid}' THEN
                         SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'poisoned';
                     END IF"
                )))
                .execute(&mut conn)
                .await
                .expect("trigger");
                conn.close().await.expect("close");
            }
        }
    }

    /// Runs `sql` behind the store's back, `{p}` replaced by the table prefix (none for the
    /// SQLite file) and `binds` bound in order; returns the rows it changed.
    pub async fn raw(&self, sql: &str, binds: &[&str]) -> u64 {
        match self {
            Backend::Sqlite { path, .. } => {
                let mut conn = SqliteConnectOptions::new()
                    .filename(path)
                    .connect()
                    .await
                    .expect("raw connection");
                let done = binds
                    .iter()
                    .fold(
                        sqlx::query(AssertSqlSafe(sql.replace("{p}", ""))),
                        |q, b| q.bind(*b),
                    )
                    .execute(&mut conn)
                    .await
                    .expect("raw statement");
                conn.close().await.expect("close");
                done.rows_affected()
            }
            Backend::MySql { prefix, .. } => {
                let mut conn = self.mysql_connection().await;
                let done = binds
                    .iter()
                    .fold(
                        sqlx::query(AssertSqlSafe(sql.replace("{p}", prefix))),
                        |q, b| q.bind(*b),
                    )
                    .execute(&mut conn)
                    .await
                    .expect("raw statement");
                conn.close().await.expect("close");
                done.rows_affected()
            }
        }
    }

    /// Rows of the key-value table with this key, expired or not.
    pub async fn kv_rows(&self, key: &str) -> i64 {
        match self {
            Backend::Sqlite { path, .. } => {
                let mut conn = SqliteConnectOptions::new()
                    .filename(path)
                    .connect()
                    .await
                    .expect("raw connection");
                sqlx::query_scalar("SELECT COUNT(*) FROM plugin_kv WHERE key = ?")
                    .bind(key)
                    .fetch_one(&mut conn)
                    .await
                    .expect("count")
            }
            Backend::MySql { prefix, .. } => {
                let mut conn = self.mysql_connection().await;
                sqlx::query_scalar(AssertSqlSafe(format!(
                    "SELECT CAST(COUNT(*) AS SIGNED) FROM {prefix}plugin_kv WHERE `key` = ?"
                )))
                .bind(key)
                .fetch_one(&mut conn)
                .await
                .expect("count")
            }
        }
    }

    pub async fn mysql_connection(&self) -> MySqlConnection {
        let Backend::MySql { url, .. } = self else {
            panic!("not a MySQL backend");
        };
        MySqlConnection::connect(url)
            .await
            .expect("connect to the test MariaDB (JOBRELAY_TEST_MYSQL_URL)")
    }
}

impl Drop for Backend {
    /// Drops a MySQL backend's tables, on a thread of its own since `Drop` cannot await.
    /// Never panics: this also runs while a failed assertion unwinds.
    #[expect(
        clippy::print_stderr,
        reason = "a `Drop` cannot return the failure and must not panic; stderr is where the \
                  test runner shows it"
    )]
    fn drop(&mut self) {
        let Backend::MySql { url, prefix } = self else {
            return;
        };
        let prefix = prefix.clone();
        let (url, tables) = (url.clone(), prefix.clone());
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(drop_tables(&url, &tables))
        })
        .join();
        match dropped {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("could not drop the test tables {prefix}*: {e}"),
            Err(_) => eprintln!("could not drop the test tables {prefix}*: the thread panicked"),
        }
    }
}

pub async fn drop_tables(url: &str, prefix: &str) -> Result<(), String> {
    let mut conn = MySqlConnection::connect(url)
        .await
        .map_err(|e| e.to_string())?;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP TABLE IF EXISTS {prefix}schema_version, {prefix}cursors, {prefix}dead_letters, \
         {prefix}plugin_kv, {prefix}plugin_installs, {prefix}inbox_events, {prefix}inbox"
    )))
    .execute(&mut conn)
    .await
    .map_err(|e| e.to_string())?;
    conn.close().await.map_err(|e| e.to_string())
}

/// Runs each contract on a new SQLite file (`sqlite::NAME`) and on new tables in the test
/// MariaDB (`mysql::NAME`, the table prefix tagged with `TAG`).
macro_rules! on_both_backends {
    ($($name:ident => $contract:ident($tag:literal);)*) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$contract(&super::Backend::sqlite()).await;
                }
            )*
        }
        mod mysql {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$contract(&super::Backend::mysql($tag)).await;
                }
            )*
        }
    };
}

pub(crate) use on_both_backends;

/// One event taken into `store`'s inbox comes back: the inbox tables exist (after a migration).
pub async fn assert_inbox_works(store: &dyn DeliveryStore) {
    let e = event("c", "u1", "6", Phase::Running);
    store
        .write(jobrelay_state::WriteBatch {
            taken: vec![jobrelay_state::Taken::of("p", &e).expect("encodes")],
            ..Default::default()
        })
        .await
        .expect("the inbox tables exist again");
    assert_eq!(store.inbox("p").await.expect("inbox").events, vec![e]);
}
