//! The durable state store on both backends: real SQLite files, and real tables in the test
//! MariaDB over TCP (`JOBRELAY_TEST_MYSQL_URL`, default root@127.0.0.1:3306/test; the MySQL
//! tests fail, not skip, without it).
//!
//! Every promise of the store traits is a `contract_*` function run on both backends by
//! `on_both_backends!` (as `state_store::sqlite::NAME` and `state_store::mysql::NAME`); each
//! MySQL run uses tables of its own prefix and drops them at the end. The tests after the
//! contracts are backend-specific: files and databases the stores must refuse, migrations,
//! two processes on one file.

use crate::common::{mysql_url, unique_prefix};

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use jobrelay::cli::dead_letters::{self, DeadLettersCommand};
use jobrelay::config::main_file::MainConfig;
use jobrelay_contract::event::{JobEvent, Phase};
use jobrelay_state::{
    Cursor, CursorStore, MySqlStore, PluginKv, SCHEMA_VERSION, SqliteStore, StateBackend,
    StoreError, open_store, open_stores, redacted_url,
};
use sqlx::mysql::MySqlConnection;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{AssertSqlSafe, ConnectOptions, Connection};

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
        transition_key: String::new(),
        synthetic: true,
    }
}

// ----- the backends under test -----------------------------------------------------------------

/// One backend with nothing in it: a new SQLite file in a temporary folder, or tables of a
/// prefix of their own in the test MariaDB (dropped when this is dropped, even after a failed
/// assertion).
enum Backend {
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
    fn sqlite() -> Backend {
        let (dir, path) = temp_db();
        Backend::Sqlite { _dir: dir, path }
    }

    /// `tag` keeps the prefix readable and within 32 characters: at most 12 characters.
    fn mysql(tag: &str) -> Backend {
        Backend::MySql {
            url: mysql_url(),
            prefix: format!("{}_", unique_prefix(tag)),
        }
    }

    fn state(&self) -> StateBackend {
        match self {
            Backend::Sqlite { path, .. } => StateBackend::Sqlite(path.clone()),
            Backend::MySql { url, prefix } => StateBackend::MySql {
                url: url.clone(),
                table_prefix: prefix.clone(),
            },
        }
    }

    /// What the store's error messages must name: the file, or the server (no password).
    fn location(&self) -> String {
        match self {
            Backend::Sqlite { path, .. } => path.display().to_string(),
            Backend::MySql { url, .. } => redacted_url(url),
        }
    }

    async fn open(&self) -> (Arc<dyn CursorStore>, Arc<dyn PluginKv>) {
        open_stores(&self.state()).await.unwrap_or_else(|e| {
            panic!(
                "open {} (for MySQL, is MariaDB running at JOBRELAY_TEST_MYSQL_URL?): {e}",
                self.state()
            )
        })
    }

    async fn store(&self) -> Arc<dyn CursorStore> {
        self.open().await.0
    }

    /// Makes every insert of a cursor with this uid fail, behind the store's back.
    async fn refuse_cursor_uid(&self, uid: &str) {
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
    async fn raw(&self, sql: &str, binds: &[&str]) -> u64 {
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
    async fn kv_rows(&self, key: &str) -> i64 {
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

    async fn mysql_connection(&self) -> MySqlConnection {
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

pub(crate) async fn drop_tables(url: &str, prefix: &str) -> Result<(), String> {
    let mut conn = MySqlConnection::connect(url)
        .await
        .map_err(|e| e.to_string())?;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP TABLE IF EXISTS {prefix}schema_version, {prefix}cursors, {prefix}dead_letters, \
         {prefix}plugin_kv, {prefix}plugin_installs"
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

on_both_backends! {
    cursor_upsert_overwrites_and_plugins_are_isolated => contract_upsert_and_isolation("upsert");
    batch_save_is_all_or_nothing => contract_batch_all_or_nothing("batch");
    everything_survives_closing_and_reopening => contract_survives_reopen("reopen");
    dead_letter_event_round_trips_exactly => contract_dead_letter_round_trip("roundtrip");
    dead_letters_drop_by_seq_by_plugin_and_all => contract_drop_selection("drop");
    replay_marks_and_take_removes_once => contract_replay_selection("replay");
    two_takers_never_get_the_same_dead_letter => contract_two_takers("takers");
    daemon_and_cli_share_the_store_without_lock_errors => contract_two_stores_share("share");
    remembering_a_job_never_overwrites_a_delivered_cursor => contract_remember_job("remember");
    plugin_kv_entries_are_per_plugin_and_expire => contract_kv_expiry("kv");
    keys_compare_byte_for_byte => contract_exact_keys("keys");
    cli_lists_replays_and_drops => contract_cli("cli");
    a_plugins_first_install_time_is_kept_for_good => contract_install_time("install");
    kv_usage_counts_a_plugins_live_entries => contract_kv_usage("kvusage");
    damaged_rows_are_refused_naming_the_store_and_kept => contract_damaged_rows("damaged");
    remembering_many_jobs_at_once_keeps_delivered_cursors => contract_remember_jobs("rememberx");
}

// ----- the contracts ---------------------------------------------------------------------------

async fn contract_upsert_and_isolation(b: &Backend) {
    let store = b.store().await;
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
    let b_cursors = store.cursors("b").await.expect("load b");
    assert_eq!(b_cursors.len(), 1);
    assert_eq!(b_cursors[0].resource_version, "11");
    assert_eq!(b_cursors[0].phase, Phase::Running);
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
    store.close().await;
}

async fn contract_batch_all_or_nothing(b: &Backend) {
    let store = b.store().await;
    let batch: Vec<Cursor> = (0..50)
        .map(|i| cursor("p", "c", &format!("u{i}"), &i.to_string(), Phase::Running))
        .collect();
    store.save_cursors(batch.clone()).await.expect("batch");
    store
        .save_cursors(Vec::new())
        .await
        .expect("an empty batch is a no-op");
    assert_eq!(store.cursors("p").await.expect("load").len(), 50);

    // Make one upsert near the end of a large batch fail (a trigger refuses it) and check that
    // everything before it was rolled back with it, including what a backend wrote in
    // earlier statements of the same transaction.
    b.refuse_cursor_uid("poison").await;
    let mut failing: Vec<Cursor> = (0..1200)
        .map(|i| cursor("p", "c", &format!("u{i}"), "999", Phase::Failed))
        .collect();
    failing.insert(1100, cursor("p", "c", "poison", "1", Phase::Failed));
    let err = store
        .save_cursors(failing.clone())
        .await
        .expect_err("the poisoned row fails the batch");
    assert!(err.to_string().contains(&b.location()), "{err}");
    let after = store.cursors("p").await.expect("load");
    assert_eq!(after.len(), 50);
    assert!(
        after.iter().all(|c| c.resource_version != "999"),
        "a failed batch left some of its upserts behind"
    );

    // The failure leaves nothing half-open: the next batch is written in full.
    let next: Vec<Cursor> = (0..60)
        .map(|i| cursor("p", "c", &format!("u{i}"), "1000", Phase::Succeeded))
        .collect();
    store
        .save_cursors(next.clone())
        .await
        .expect("the next batch");
    let after = store.cursors("p").await.expect("load");
    assert_eq!(after.len(), 60);
    assert!(after.iter().all(|c| c.resource_version == "1000"));
    store.close().await;
}

async fn contract_survives_reopen(b: &Backend) {
    let ev = event("c", "u", "3", Phase::Failed);
    {
        let (store, kv) = b.open().await;
        store
            .save_cursors(vec![
                cursor("p", "c", "u1", "1", Phase::Running),
                cursor("p", "c", "u2", "2", Phase::Succeeded),
            ])
            .await
            .expect("save");
        store
            .add_dead_letter("p", &ev, "boom", 5)
            .await
            .expect("dead letter");
        kv.kv_set("p", "k", b"kept", None).await.expect("kv");
        store.close().await;
    }
    let store = open_store(&b.state()).await.expect("reopen");
    let cursors = store.cursors("p").await.expect("load");
    assert_eq!(cursors.len(), 2);
    assert_eq!(cursors[1].phase, Phase::Succeeded);
    let letters = store.dead_letters(None).await.expect("list");
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].event, ev);
    assert_eq!(letters[0].attempts, 5);
    store.close().await;
    let (_, kv) = b.open().await;
    assert_eq!(
        kv.kv_get("p", "k").await.expect("get"),
        Some(b"kept".to_vec())
    );
}

async fn contract_dead_letter_round_trip(b: &Backend) {
    let store = b.store().await;
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
    assert!(
        store
            .dead_letters(Some("q"))
            .await
            .expect("list")
            .is_empty()
    );
    store.close().await;
}

async fn contract_drop_selection(b: &Backend) {
    let store = b.store().await;
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
    // By seq alone; an id given twice counts once.
    assert_eq!(
        store
            .drop_dead_letters(None, &[seqs[2], 9999, seqs[2]], false)
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

    // Seqs are never reused after a drop, not even after a reopen.
    store.close().await;
    let store = b.store().await;
    let next = store
        .add_dead_letter("a", &event("c", "6", "1", Phase::Failed), "err", 1)
        .await
        .expect("add");
    assert!(next > seqs[4], "{next} after {seqs:?}");
    store.close().await;
}

async fn contract_replay_selection(b: &Backend) {
    let store = b.store().await;
    let mut seqs = Vec::new();
    for (plugin, uid) in [("a", "1"), ("a", "2"), ("a", "3"), ("b", "4")] {
        seqs.push(
            store
                .add_dead_letter(plugin, &event("c", uid, "1", Phase::Failed), "err", 2)
                .await
                .expect("add"),
        );
    }
    assert!(
        store
            .take_replays("a", None)
            .await
            .expect("take")
            .is_empty()
    );
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
    // Letters already marked count as selected.
    assert_eq!(
        store
            .request_replay(Some("a"), &[seqs[0]], false)
            .await
            .expect("mark again"),
        1
    );
    let listed = store.dead_letters(Some("a")).await.expect("list");
    assert_eq!(
        listed
            .iter()
            .map(|l| l.replay_requested)
            .collect::<Vec<_>>(),
        vec![true, false, true]
    );

    let taken = store.take_replays("a", None).await.expect("take");
    assert_eq!(
        taken.iter().map(|l| l.seq).collect::<Vec<_>>(),
        vec![seqs[0], seqs[2]]
    );
    assert_eq!(taken[0].event.uid, "1");
    assert!(
        store
            .take_replays("a", None)
            .await
            .expect("take again")
            .is_empty()
    );
    assert!(
        store
            .take_replays("b", None)
            .await
            .expect("b unmarked")
            .is_empty()
    );
    assert_eq!(store.dead_letters(None).await.expect("list").len(), 2);

    assert_eq!(store.request_replay(None, &[], true).await.expect("all"), 2);
    assert_eq!(
        store.take_replays("b", None).await.expect("take b").len(),
        1
    );
    assert_eq!(
        store.take_replays("a", None).await.expect("take a").len(),
        1
    );
    assert!(store.dead_letters(None).await.expect("list").is_empty());
    store.close().await;
}

async fn contract_two_takers(b: &Backend) {
    const N: usize = 120;
    let producer = b.store().await;
    let takers = [b.store().await, b.store().await];

    // Each taker loops until all N were taken by someone.
    let taken = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for taker in takers {
        let taken = taken.clone();
        handles.push(tokio::spawn(async move {
            let mut got = Vec::new();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            while taken.load(Ordering::SeqCst) < N && tokio::time::Instant::now() < deadline {
                let batch = taker.take_replays("p", None).await.expect("take");
                taken.fetch_add(batch.len(), Ordering::SeqCst);
                got.extend(batch.into_iter().map(|l| l.seq));
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            taker.close().await;
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
    producer.close().await;
}

async fn contract_two_stores_share(b: &Backend) {
    // Opened at once, as a daemon and a CLI starting together on a new store would.
    let state = b.state();
    let (daemon, cli) = tokio::join!(open_store(&state), open_store(&state));
    let daemon = daemon.expect("daemon opens");
    let cli = cli.expect("cli opens");

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
                daemon.save_cursors(batch.clone()).await?;
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
                    daemon.take_replays("p", None).await?;
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
    daemon.close().await;
    cli.close().await;
}

async fn contract_remember_job(b: &Backend) {
    let store = b.store().await;
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
    // Remembered twice: still nothing delivered.
    store
        .remember_job(&cursor("p", "c", "seen", "6", Phase::Running))
        .await
        .expect("remember again");
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
    store.close().await;
}

/// The first install time stays: a later open (a restart, another replica, the plugin removed
/// and added back) reads it instead of recording its own.
/// Rows changed by hand (an unknown phase, event JSON cut short) are
/// refused with an error naming the store and the row kind, never read as something else; a
/// damaged dead letter marked for replay is not taken, so it stays for an operator.
async fn contract_damaged_rows(b: &Backend) {
    let store = b.store().await;
    store
        .save_cursor(&cursor("p", "c", "u1", "5", Phase::Running))
        .await
        .expect("save");
    let seq = store
        .add_dead_letter("p", &event("c", "u2", "7", Phase::Failed), "err", 3)
        .await
        .expect("add");
    assert_eq!(
        store
            .request_replay(Some("p"), &[], false)
            .await
            .expect("mark"),
        1
    );

    assert_eq!(b.raw("UPDATE {p}cursors SET phase = 'Bogus'", &[]).await, 1);
    let err = store.cursors("p").await.expect_err("an unknown phase");
    let text = err.to_string();
    assert!(
        matches!(err, StoreError::Corrupt { what: "cursor", .. }),
        "{text}"
    );
    assert!(
        text.contains(&b.location()) && text.contains("Bogus"),
        "{text}"
    );

    assert_eq!(
        b.raw("UPDATE {p}dead_letters SET event_json = '{\"id\": '", &[])
            .await,
        1
    );
    for err in [
        store.dead_letters(Some("p")).await.expect_err("cut JSON"),
        store.take_replays("p", None).await.expect_err("cut JSON"),
    ] {
        let text = err.to_string();
        assert!(
            matches!(
                err,
                StoreError::Corrupt {
                    what: "dead letter",
                    ..
                }
            ),
            "{text}"
        );
        assert!(
            text.contains(&b.location()) && text.contains(&format!("seq {seq}")),
            "{text}"
        );
    }
    // Not taken: repaired, it is still there and still marked.
    let json = serde_json::to_string(&event("c", "u2", "7", Phase::Failed)).expect("json");
    b.raw(
        "UPDATE {p}dead_letters SET event_json = ?, attempts = 99",
        &[&json],
    )
    .await;
    let taken = store.take_replays("p", None).await.expect("repaired");
    assert_eq!(
        taken
            .iter()
            .map(|l| (l.seq, l.attempts))
            .collect::<Vec<_>>(),
        vec![(seq, 99)]
    );
    store.close().await;
}

/// The batched form the cursor writer uses: one statement for many jobs, with the same rule
/// as one at a time (a delivered cursor is never overwritten), across more jobs than one
/// statement holds.
async fn contract_remember_jobs(b: &Backend) {
    let store = b.store().await;
    store
        .save_cursor(&cursor("p", "c", "done", "9", Phase::Succeeded))
        .await
        .expect("save");
    let mut seen: Vec<Cursor> = (0..700)
        .map(|i| cursor("p", "c", &format!("u{i:03}"), "4", Phase::Running))
        .collect();
    seen.push(cursor("p", "c", "done", "3", Phase::Pending));
    store.remember_jobs(&seen).await.expect("remember");
    store.remember_jobs(&seen[..10]).await.expect("again");
    let all = store.cursors("p").await.expect("cursors");
    assert_eq!(all.len(), 701);
    let done = all.iter().find(|c| c.uid == "done").expect("done");
    assert_eq!(
        (done.resource_version.as_str(), done.phase),
        ("9", Phase::Succeeded)
    );
    assert!(
        all.iter()
            .filter(|c| c.uid != "done")
            .all(|c| c.resource_version.is_empty() && c.phase == Phase::Running),
        "remembered jobs have nothing delivered"
    );
    store.close().await;
}

async fn contract_install_time(b: &Backend) {
    let first = "2026-01-02T03:04:05Z";
    {
        let store = b.store().await;
        assert_eq!(store.installed("p", first).await.expect("install"), first);
        assert_eq!(
            store
                .installed("p", "2026-06-01T00:00:00Z")
                .await
                .expect("again"),
            first,
            "a second call is not an install"
        );
        assert_eq!(
            store
                .installed("other", "2026-06-01T00:00:00Z")
                .await
                .expect("other"),
            "2026-06-01T00:00:00Z",
            "each plugin has its own"
        );
        store.close().await;
    }
    let store = open_store(&b.state()).await.expect("reopen");
    assert_eq!(
        store
            .installed("p", "2027-01-01T00:00:00Z")
            .await
            .expect("after reopen"),
        first
    );
    store.close().await;
}

async fn contract_kv_usage(b: &Backend) {
    let (store, kv) = b.open().await;
    assert_eq!(kv.kv_usage("a", "x").await.expect("usage"), (0, 0));
    kv.kv_set("a", "k1", b"12345", None).await.expect("set");
    kv.kv_set("a", "k22", b"1234567890", None)
        .await
        .expect("set");
    kv.kv_set("a", "gone", b"xx", Some(0))
        .await
        .expect("set expired");
    kv.kv_set("b", "k1", &[0u8; 100], None)
        .await
        .expect("set other plugin");
    // k1: 2 + 5 bytes; k22: 3 + 10 bytes; the expired entry and plugin b do not count.
    assert_eq!(kv.kv_usage("a", "x").await.expect("usage"), (2, 20));
    assert_eq!(kv.kv_usage("a", "k22").await.expect("usage"), (1, 7));
    assert_eq!(kv.kv_usage("b", "x").await.expect("usage"), (1, 102));
    store.close().await;
}

async fn contract_kv_expiry(b: &Backend) {
    let (store, kv) = b.open().await;
    kv.kv_set("a", "k", b"one", None).await.expect("set");
    kv.kv_set("b", "k", b"two", None).await.expect("set");
    assert_eq!(
        kv.kv_get("a", "k").await.expect("get"),
        Some(b"one".to_vec())
    );
    assert_eq!(
        kv.kv_get("b", "k").await.expect("get"),
        Some(b"two".to_vec())
    );
    kv.kv_set("a", "k", b"three", None).await.expect("replace");
    assert_eq!(
        kv.kv_get("a", "k").await.expect("get"),
        Some(b"three".to_vec())
    );
    assert!(kv.kv_delete("a", "k").await.expect("delete"));
    assert!(!kv.kv_delete("a", "k").await.expect("delete again"));
    assert_eq!(kv.kv_get("a", "k").await.expect("get"), None);
    assert_eq!(
        kv.kv_get("b", "k").await.expect("get"),
        Some(b"two".to_vec()),
        "untouched"
    );

    // Binary values come back byte for byte.
    let binary: Vec<u8> = (0..=255).collect();
    kv.kv_set("a", "bin", &binary, None).await.expect("set");
    assert_eq!(kv.kv_get("a", "bin").await.expect("get"), Some(binary));

    // An entry with a zero TTL is expired at once: invisible, not deletable, and swept by
    // later writes.
    kv.kv_set("a", "short", b"x", Some(0)).await.expect("set");
    assert_eq!(kv.kv_get("a", "short").await.expect("get"), None);
    assert!(
        !kv.kv_delete("a", "short").await.expect("delete"),
        "an expired entry is not there"
    );
    kv.kv_set("a", "other", b"y", Some(3600))
        .await
        .expect("set");
    assert_eq!(
        kv.kv_get("a", "other").await.expect("get"),
        Some(b"y".to_vec())
    );
    // A TTL replaced by none: the entry stays.
    kv.kv_set("a", "later", b"z", Some(0)).await.expect("set");
    kv.kv_set("a", "later", b"z", None).await.expect("set");
    assert_eq!(
        kv.kv_get("a", "later").await.expect("get"),
        Some(b"z".to_vec())
    );
    store.close().await;

    // Entries survive a reopen.
    let (store, kv) = b.open().await;
    assert_eq!(
        kv.kv_get("b", "k").await.expect("get"),
        Some(b"two".to_vec())
    );
    assert_eq!(b.kv_rows("short").await, 0, "the expired entry was swept");
    store.close().await;
}

async fn contract_exact_keys(b: &Backend) {
    let (store, kv) = b.open().await;
    // Keys that a case-insensitive or space-padding comparison would merge.
    for (i, key) in ["k", "K", "k ", "ü", "u"].into_iter().enumerate() {
        kv.kv_set("p", key, &[u8::try_from(i).expect("small")], None)
            .await
            .expect("set");
    }
    for (i, key) in ["k", "K", "k ", "ü", "u"].into_iter().enumerate() {
        assert_eq!(
            kv.kv_get("p", key).await.expect("get"),
            Some(vec![u8::try_from(i).expect("small")]),
            "key {key:?}"
        );
    }
    assert_eq!(kv.kv_get("P", "k").await.expect("get"), None);
    // A key at the kv capability's limit of 512 bytes.
    let long = "x".repeat(512);
    kv.kv_set("p", &long, b"long", None).await.expect("set");
    assert_eq!(
        kv.kv_get("p", &long).await.expect("get"),
        Some(b"long".to_vec())
    );

    for uid in ["job", "Job", "job "] {
        store
            .save_cursor(&cursor("p", "c", uid, uid, Phase::Running))
            .await
            .expect("save");
    }
    let cursors = store.cursors("p").await.expect("load");
    let mut versions: Vec<&str> = cursors
        .iter()
        .map(|c| c.resource_version.as_str())
        .collect();
    versions.sort_unstable();
    assert_eq!(versions, vec!["Job", "job", "job "]);
    assert!(store.cursors("P").await.expect("load").is_empty());
    store.close().await;
}

async fn contract_cli(b: &Backend) {
    let store = b.store().await;
    let store = store.as_ref();
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

    let table = dead_letters::list(store, None, false).await.expect("list");
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

    let only = dead_letters::list(store, Some("archive"), false)
        .await
        .expect("list");
    assert_eq!(only.lines().count(), 2, "{only}");
    let none = dead_letters::list(store, Some("nobody"), false)
        .await
        .expect("list");
    assert!(none.contains("no dead letters"), "{none}");

    let json = dead_letters::list(store, None, true).await.expect("json");
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
    let err = dead_letters::replay(store, Some("notify"), &[], false)
        .await
        .expect_err("refused");
    assert!(err.to_string().contains("--all"), "{err}");
    let err = dead_letters::drop(store, None, &[], false)
        .await
        .expect_err("refused");
    assert!(err.to_string().contains("--all"), "{err}");

    let done = dead_letters::replay(store, None, &[s1, 999_999], false)
        .await
        .expect("replay");
    let msg = &done.text;
    assert!(msg.starts_with("1 dead letter marked for replay"), "{msg}");
    assert!(msg.contains("1 of the 2 ids do not exist"), "{msg}");
    assert!(
        done.missing,
        "an id that matched nothing makes the command fail"
    );
    let table = dead_letters::list(store, Some("notify"), false)
        .await
        .expect("list");
    assert!(table.contains("requested"), "{table}");

    // Through the clap command, as `main` will call it.
    let msg = dead_letters::run(
        store,
        &DeadLettersCommand::Drop {
            plugin: Some("archive".into()),
            all: true,
            ids: vec![],
        },
    )
    .await
    .expect("drop");
    assert_eq!(msg.text, "1 dead letter dropped\n");
    assert!(!msg.missing);
    let msg = dead_letters::run(
        store,
        &DeadLettersCommand::Replay {
            plugin: None,
            all: true,
            ids: vec![],
        },
    )
    .await
    .expect("replay all");
    assert!(msg.text.starts_with("1 dead letter marked"), "{msg:?}");
    let left = store.dead_letters(None).await.expect("list");
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].seq, s1);
    assert_ne!(s1, s2);
    store.close().await;
}

// ----- MySQL and MariaDB -----------------------------------------------------------------------

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
        .installed("p", "2026-01-01T00:00:00Z")
        .await
        .expect("the install table exists again");
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
async fn mysql_a_bad_table_prefix_is_refused_naming_the_field() {
    for bad in ["job-relay_", "x; DROP TABLE y; --", "", &"p".repeat(33)] {
        let err = MySqlStore::open(&mysql_url(), bad)
            .await
            .expect_err("refused");
        assert!(matches!(err, StoreError::BadTablePrefix { .. }), "{err}");
        assert!(err.to_string().contains("state.table_prefix"), "{err}");

        let backend = StateBackend::MySql {
            url: mysql_url(),
            table_prefix: bad.to_string(),
        };
        let err = open_store(&backend).await.map(|_| ()).expect_err("refused");
        assert!(err.to_string().contains("state.table_prefix"), "{err}");
    }
    let err = MainConfig::parse(
        "state:\n  url: env:JOBRELAY_STATE_URL\n  table_prefix: job-relay\n",
        Path::new("/etc/jobrelay"),
    )
    .expect_err("refused in the main file");
    assert!(err.to_string().contains("state.table_prefix"), "{err}");
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

#[tokio::test]
async fn settings_with_both_path_and_url_are_refused() {
    let err = MainConfig::parse(
        "state:\n  path: state/jobrelay.db\n  url: env:JOBRELAY_STATE_URL\n",
        Path::new("/etc/jobrelay"),
    )
    .expect_err("both");
    let text = err.to_string();
    assert!(
        text.contains("state.path") && text.contains("state.url"),
        "{text}"
    );

    let main = MainConfig::parse(
        "state:\n  url: env:JOBRELAY_STATE_URL\n  table_prefix: relay_\n",
        Path::new("/etc/jobrelay"),
    )
    .expect("MySQL state");
    assert_eq!(
        main.state,
        StateBackend::MySql {
            url: "env:JOBRELAY_STATE_URL".into(),
            table_prefix: "relay_".into(),
        }
    );
    let main = MainConfig::parse(
        "state:\n  path: state/jobrelay.db\n",
        Path::new("/etc/jobrelay"),
    )
    .expect("SQLite state");
    assert_eq!(
        main.state,
        StateBackend::Sqlite(PathBuf::from("/etc/jobrelay/state/jobrelay.db"))
    );
}

// ----- SQLite ----------------------------------------------------------------------------------

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
    store.remember_jobs(&batch[..3]).await.expect("remember");
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
            "state_store::child_process_writer",
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
        "DROP TABLE plugin_kv; DROP TABLE plugin_installs; UPDATE schema_version SET version = 1;",
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
        .installed("p", "2026-01-01T00:00:00Z")
        .await
        .expect("the install table exists again");
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
