//! The store, written once over a [`Dialect`]: every statement, transaction and retry of the
//! [`DeliveryStore`] and [`PluginKv`] promises. The backends ([`sqlite`](super::sqlite),
//! [`mysql`](super::mysql)) only connect, create their schema and say how their SQL differs.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use async_trait::async_trait;
use sqlx::pool::Pool;

use super::cursor::Cursor;
use super::dead_letter::{DeadLetter, Selection};
use super::dialect::{Dialect, Kind, Statement, Value, placeholders};
use super::error::{Location, StoreError};
use super::inbox::{Damaged, Inbox, READ_BACK_BATCH, SWEEP_AFTER_SECONDS, Stored, WriteBatch};
use super::rows::{self, CURSOR_COLUMNS, CURSOR_SHAPE, DEAD_LETTER_COLUMNS, DEAD_LETTER_SHAPE};
use super::sqlite_cursors::CursorThread;
use super::store::{DeliveryStore, JobDeadLetters, PluginKv, summarize_dead_letters};
use jobrelay_contract::event::JobEvent;

/// How many times a transaction the database rolled back as a deadlock victim is run.
pub const DEADLOCK_TRIES: u32 = 5;

/// Rows or ids per statement when a batch or an id list is split: far below any driver's
/// placeholder limit (SQLite's 32,766, MySQL's 65,535), and small enough to keep one
/// statement's packet modest.
const CHUNK: usize = 500;

/// Expired key-value entries removed with each write (see [`PluginKv::kv_set`]).
const KV_SWEEP: u32 = 16;

/// The names of the store's tables: the same on every backend, after a prefix (empty for the
/// SQLite file, which holds nothing else).
#[derive(Debug, Clone)]
pub struct Tables {
    pub schema_version: String,
    pub cursors: String,
    pub dead_letters: String,
    pub plugin_kv: String,
    pub plugin_installs: String,
    /// Events taken by lanes, once per event id.
    pub inbox_events: String,
    /// Per plugin, the events it took and has not settled, numbered in the order it took them.
    pub inbox_marks: String,
    /// The marks as version 4 kept them (no order of their own), for its migration.
    pub inbox_v4: String,
}

impl Tables {
    /// `prefix` must be SQL-safe (ASCII letters, digits and `_`): it goes into statements.
    pub fn new(prefix: &str) -> Tables {
        Tables {
            schema_version: format!("{prefix}schema_version"),
            cursors: format!("{prefix}cursors"),
            dead_letters: format!("{prefix}dead_letters"),
            plugin_kv: format!("{prefix}plugin_kv"),
            plugin_installs: format!("{prefix}plugin_installs"),
            inbox_events: format!("{prefix}inbox_events"),
            inbox_marks: format!("{prefix}inbox_marks"),
            inbox_v4: format!("{prefix}inbox"),
        }
    }
}

/// The key of a cursor.
const CURSOR_KEY: [&str; 3] = ["plugin", "cluster", "uid"];
const CURSOR_ROW: &str = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";

/// The fixed statements, built once at open from the table names and the dialect.
#[derive(Debug)]
struct Statements {
    tables: Tables,
    load_cursors: std::sync::Arc<str>,
    /// A page of a plugin's cursors: plugin, after cluster (twice), after uid, limit.
    load_cursors_page: std::sync::Arc<str>,
    upsert_cursor: std::sync::Arc<str>,
    remember_cursor: std::sync::Arc<str>,
    remove_cursor: std::sync::Arc<str>,
    add_dead_letter: std::sync::Arc<str>,
    list_dead_letters: std::sync::Arc<str>,
    list_dead_letters_of_plugin: std::sync::Arc<str>,
    select_replays: std::sync::Arc<str>,
    record_install: std::sync::Arc<str>,
    read_install: std::sync::Arc<str>,
    kv_get: std::sync::Arc<str>,
    kv_set: std::sync::Arc<str>,
    kv_sweep: std::sync::Arc<str>,
    kv_delete: std::sync::Arc<str>,
    kv_usage: std::sync::Arc<str>,
    count_dead_letters: std::sync::Arc<str>,
    dead_lettered_plugins: std::sync::Arc<str>,
    check: std::sync::Arc<str>,
    inbox: InboxStatements,
}

/// The inbox's statements (see [`inbox`](super::inbox)); the SQLite cursor thread keeps them
/// prepared beside the cursor writes.
#[derive(Debug, Clone)]
pub(super) struct InboxStatements {
    /// Stores an event once: event id, JSON.
    pub(super) take_event: std::sync::Arc<str>,
    /// Marks an event as taken by a plugin: plugin, event id.
    pub(super) take_mark: std::sync::Arc<str>,
    /// Removes a plugin's mark: plugin, event id.
    pub(super) settle_mark: std::sync::Arc<str>,
    /// Removes a cursor: plugin, cluster, uid.
    pub(super) remove_cursor: std::sync::Arc<str>,
    /// Removes events without marks taken more than [`SWEEP_AFTER_SECONDS`] ago.
    pub(super) sweep: std::sync::Arc<str>,
    /// A page of a plugin's marks with their events, oldest first: plugin, after seq, limit →
    /// seq, event id, JSON.
    pub(super) load: std::sync::Arc<str>,
    /// A plugin's marks whose event is missing: plugin → event id.
    pub(super) missing: std::sync::Arc<str>,
    /// Events by id, `2^k` ids for entry `k` (the last id repeated to fill a batch): event
    /// id → event id, JSON. A few fixed sizes keep every statement prepared.
    pub(super) events: Vec<std::sync::Arc<str>>,
}

impl InboxStatements {
    fn new<D: Dialect>(t: &Tables) -> InboxStatements {
        let now = D::NOW;
        InboxStatements {
            take_event: D::insert_or_keep(
                &t.inbox_events,
                "event_id, event_json, at",
                &["event_id"],
                &format!("(?, ?, {now})"),
            )
            .into(),
            take_mark: D::insert_or_keep(
                &t.inbox_marks,
                "plugin, event_id",
                &["plugin", "event_id"],
                "(?, ?)",
            )
            .into(),
            settle_mark: format!(
                "DELETE FROM {} WHERE plugin = ? AND event_id = ?",
                t.inbox_marks
            )
            .into(),
            remove_cursor: format!(
                "DELETE FROM {} WHERE plugin = ? AND cluster = ? AND uid = ?",
                t.cursors
            )
            .into(),
            sweep: format!(
                "DELETE FROM {events} WHERE at < {now} - {SWEEP_AFTER_SECONDS} AND NOT EXISTS \
                 (SELECT 1 FROM {marks} WHERE {marks}.event_id = {events}.event_id)",
                events = t.inbox_events,
                marks = t.inbox_marks,
            )
            .into(),
            load: format!(
                "SELECT m.seq, m.event_id, e.event_json FROM {} m {} JOIN {} e \
                 ON e.event_id = m.event_id WHERE m.plugin = ? AND m.seq > ? \
                 ORDER BY m.seq LIMIT ?",
                t.inbox_marks,
                D::BY_PRIMARY_KEY,
                t.inbox_events
            )
            .into(),
            missing: format!(
                "SELECT m.event_id FROM {marks} m WHERE m.plugin = ? AND NOT EXISTS \
                 (SELECT 1 FROM {events} e WHERE e.event_id = m.event_id) ORDER BY m.event_id",
                marks = t.inbox_marks,
                events = t.inbox_events,
            )
            .into(),
            events: (0..=READ_BACK_BATCH.trailing_zeros())
                .map(|k| {
                    let ids = vec!["?"; 1 << k].join(", ");
                    format!(
                        "SELECT event_id, event_json FROM {} WHERE event_id IN ({ids})",
                        t.inbox_events
                    )
                    .into()
                })
                .collect(),
        }
    }
}

impl Statements {
    fn new<D: Dialect>(tables: Tables) -> Statements {
        let t = &tables;
        let sql = |text: String| -> std::sync::Arc<str> { text.into() };
        let now = D::NOW;
        let live = format!("(expires_at IS NULL OR expires_at > {now})");
        Statements {
            load_cursors_page: sql(format!(
                "SELECT {CURSOR_COLUMNS} FROM {} WHERE plugin = ? AND (cluster > ? OR \
                 (cluster = ? AND uid > ?)) ORDER BY cluster, uid LIMIT ?",
                t.cursors
            )),
            load_cursors: sql(format!(
                "SELECT {CURSOR_COLUMNS} FROM {} WHERE plugin = ? ORDER BY cluster, uid",
                t.cursors
            )),
            upsert_cursor: sql(D::upsert(
                &t.cursors,
                CURSOR_COLUMNS,
                &CURSOR_KEY,
                CURSOR_ROW,
                1,
            )),
            remember_cursor: sql(D::insert_or_keep(
                &t.cursors,
                CURSOR_COLUMNS,
                &CURSOR_KEY,
                CURSOR_ROW,
            )),
            remove_cursor: sql(format!(
                "DELETE FROM {} WHERE plugin = ? AND cluster = ? AND uid = ?",
                t.cursors
            )),
            add_dead_letter: sql(format!(
                "INSERT INTO {} (plugin, event_id, cluster, uid, event_json, error, attempts, at, \
                 replay_requested) VALUES (?, ?, ?, ?, ?, ?, ?, ?, FALSE)",
                t.dead_letters
            )),
            list_dead_letters: sql(format!(
                "SELECT {DEAD_LETTER_COLUMNS} FROM {} ORDER BY seq",
                t.dead_letters
            )),
            list_dead_letters_of_plugin: sql(format!(
                "SELECT {DEAD_LETTER_COLUMNS} FROM {} WHERE plugin = ? ORDER BY seq",
                t.dead_letters
            )),
            select_replays: sql(select_replays::<D>(&t.dead_letters, None)),
            record_install: sql(D::insert_or_keep(
                &t.plugin_installs,
                "plugin, installed_at",
                &["plugin"],
                "(?, ?)",
            )),
            read_install: sql(format!(
                "SELECT installed_at FROM {} WHERE plugin = ?",
                t.plugin_installs
            )),
            kv_get: sql(format!(
                "SELECT value FROM {} WHERE plugin = ? AND `key` = ? AND {live}",
                t.plugin_kv
            )),
            kv_set: sql(D::upsert(
                &t.plugin_kv,
                "plugin, `key`, value, expires_at",
                &["plugin", "`key`"],
                &format!("(?, ?, ?, {now} + ?)"),
                1,
            )),
            kv_sweep: sql(D::delete_expired(&t.plugin_kv, KV_SWEEP)),
            kv_delete: sql(format!(
                "DELETE FROM {} WHERE plugin = ? AND `key` = ? AND {live}",
                t.plugin_kv
            )),
            kv_usage: sql(format!(
                "SELECT {}, {} FROM {} WHERE plugin = ? AND `key` <> ? AND {live}",
                D::integer("COUNT(*)"),
                D::integer(&format!(
                    "COALESCE(SUM({} + LENGTH(value)), 0)",
                    D::byte_length("`key`")
                )),
                t.plugin_kv
            )),
            count_dead_letters: sql(format!(
                "SELECT plugin, {} FROM {} GROUP BY plugin",
                D::integer("COUNT(*)"),
                t.dead_letters
            )),
            dead_lettered_plugins: sql(format!(
                "SELECT DISTINCT plugin FROM {} WHERE cluster = ? AND uid = ?",
                t.dead_letters
            )),
            check: sql("SELECT 1".to_string()),
            inbox: InboxStatements::new::<D>(t),
            tables,
        }
    }
}

/// Selects (and, in a transaction, holds) the dead letters of one plugin (bound first) marked
/// for replay; with `clusters`, only those of that many clusters (bound next).
fn select_replays<D: Dialect>(table: &str, clusters: Option<usize>) -> String {
    let of_clusters = clusters
        .map(|n| format!(" AND cluster IN ({})", placeholders(n)))
        .unwrap_or_default();
    format!(
        "SELECT {DEAD_LETTER_COLUMNS} FROM {table} WHERE plugin = ? AND replay_requested = TRUE\
         {of_clusters} ORDER BY seq{}",
        D::LOCK_ROWS
    )
}

/// Whether a batch statement of `rows` rows is kept prepared on its connection. Small batches
/// are the common ones and repeat, so preparing them once pays; a large batch is prepared
/// for its one run, since every size would otherwise stay in each connection's statement
/// cache (up to 100 a connection), and a statement of hundreds of rows holds a large compiled
/// program — measured, that was ~500 bytes per tracked job of resident memory.
fn keep_prepared(rows: usize) -> bool {
    rows <= 4
}

/// A cursor's columns bound in table order, for the statements that write one.
fn bind_cursor(statement: Statement, cursor: &Cursor) -> Statement {
    bind_cursor_version(statement, cursor, &cursor.resource_version)
}

/// [`bind_cursor`] with `resource_version` in place of the cursor's own.
fn bind_cursor_version(statement: Statement, cursor: &Cursor, resource_version: &str) -> Statement {
    statement
        .text(&cursor.plugin)
        .text(&cursor.cluster)
        .text(&cursor.uid)
        .text(&cursor.api_version)
        .text(&cursor.kind)
        .text(&cursor.namespace)
        .text(&cursor.name)
        .text(resource_version)
        .text(cursor.phase.as_str())
        .text(&cursor.transition_time)
        .bool(cursor.deleted)
}

/// What a dead-letter selection does to the rows it selects.
#[derive(Debug, Clone, Copy)]
enum SelectionVerb {
    Drop,
    MarkForReplay,
}

/// Runs the same attempt again while the database picks it as a deadlock victim (the whole
/// transaction was rolled back, so running it again is safe), with a short growing pause.
macro_rules! retry_deadlocks {
    ($attempt:expr) => {{
        let mut tries = 1_u32;
        loop {
            match $attempt {
                Err(e) if tries < DEADLOCK_TRIES && is_retryable::<D>(&e) => {
                    tracing::debug!(error = %e, tries, "deadlock; running the transaction again");
                    tokio::time::sleep(Duration::from_millis(5 * u64::from(tries))).await;
                    tries += 1;
                }
                done => break done,
            }
        }
    }};
}

fn is_retryable<D: Dialect>(error: &StoreError) -> bool {
    matches!(error, StoreError::Query { source, .. } if D::is_retryable(source))
}

/// The state store on a database of dialect `D`. Cheap to share: clone the `Arc` it lives in.
#[derive(Debug)]
pub struct SqlStore<D: Dialect> {
    pool: Pool<D::Db>,
    /// The backend's own settings (the file's path, the server and table prefix).
    pub(super) dialect: D,
    location: Location,
    sql: Statements,
    /// On SQLite, the thread that saves cursors and notes new jobs, in place of the pool.
    cursor_thread: Option<CursorThread>,
}

impl<D: Dialect> SqlStore<D> {
    /// A store on `pool`, whose schema the backend has created or checked, with tables named
    /// by `prefix`.
    pub(super) fn new(pool: Pool<D::Db>, dialect: D, location: Location, prefix: &str) -> Self {
        SqlStore {
            pool,
            dialect,
            location,
            sql: Statements::new::<D>(Tables::new(prefix)),
            cursor_thread: None,
        }
    }

    /// The single-row statements that save one cursor and note one job (its version bound
    /// empty), their parameters in [`CURSOR_COLUMNS`] order, and the inbox's: what the SQLite
    /// cursor thread keeps prepared.
    pub(super) fn cursor_writes(&self) -> (&str, &str, &InboxStatements) {
        (
            &self.sql.upsert_cursor,
            &self.sql.remember_cursor,
            &self.sql.inbox,
        )
    }

    /// Saves cursors and notes new jobs through `thread` from now on.
    pub(super) fn set_cursor_thread(&mut self, thread: CursorThread) {
        self.cursor_thread = Some(thread);
    }

    /// Maps a sqlx error to one that names the store and what was being done.
    fn failed(&self, operation: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError + '_ {
        move |source| StoreError::Query {
            store: self.location.clone(),
            operation,
            source,
        }
    }

    fn corrupt(&self, what: &'static str, detail: impl ToString) -> StoreError {
        StoreError::Corrupt {
            store: self.location.clone(),
            what,
            detail: detail.to_string(),
        }
    }

    /// Runs one statement outside a transaction.
    async fn execute(
        &self,
        statement: Statement,
        operation: &'static str,
    ) -> Result<super::dialect::Done, StoreError> {
        let mut conn = self.pool.acquire().await.map_err(self.failed(operation))?;
        D::execute(&mut *conn, &statement)
            .await
            .map_err(self.failed(operation))
    }

    /// Runs one query outside a transaction; its rows read as `shape` says. A row that cannot
    /// be read is reported as damaged `what`.
    async fn fetch(
        &self,
        statement: Statement,
        shape: &[Kind],
        operation: &'static str,
        what: &'static str,
    ) -> Result<Vec<Vec<Value>>, StoreError> {
        let mut conn = self.pool.acquire().await.map_err(self.failed(operation))?;
        let rows = D::fetch(&mut *conn, &statement)
            .await
            .map_err(self.failed(operation))?;
        rows.iter()
            .map(|row| D::decode(row, shape).map_err(|e| self.corrupt(what, e)))
            .collect()
    }

    async fn begin_write(
        &self,
        operation: &'static str,
    ) -> Result<sqlx::Transaction<'static, D::Db>, StoreError> {
        match D::BEGIN_WRITE {
            Some(begin) => self.pool.begin_with(begin).await,
            None => self.pool.begin().await,
        }
        .map_err(self.failed(operation))
    }

    fn dead_letters_from(&self, rows: Vec<Vec<Value>>) -> Result<Vec<DeadLetter>, StoreError> {
        rows.into_iter()
            .map(|r| rows::dead_letter(r).map_err(|e| self.corrupt("dead letter", e)))
            .collect()
    }

    /// One multi-row upsert of `cursors` (at most [`CHUNK`]), kept prepared when small.
    fn upsert_cursors(&self, cursors: &[Cursor]) -> Statement {
        let sql = D::upsert(
            &self.sql.tables.cursors,
            CURSOR_COLUMNS,
            &CURSOR_KEY,
            CURSOR_ROW,
            cursors.len(),
        );
        let statement = Statement {
            persistent: keep_prepared(cursors.len()),
            ..Statement::once(sql)
        };
        cursors.iter().fold(statement, bind_cursor)
    }

    /// [`DeliveryStore::write`] through the pool: one transaction, a statement per row (the
    /// saves chunked into multi-row upserts).
    async fn try_write(&self, batch: &WriteBatch) -> Result<(), StoreError> {
        const OPERATION: &str = "write a lane's batch";
        let i = &self.sql.inbox;
        let mut tx = self.begin_write("begin a lane's batch").await?;
        let mut run = async |statement: Statement| {
            D::execute(&mut *tx, &statement)
                .await
                .map(|_| ())
                .map_err(self.failed(OPERATION))
        };
        for taken in &batch.taken {
            run(Statement::new(&i.take_event)
                .text(&taken.event_id)
                .text(&taken.event_json))
            .await?;
            run(Statement::new(&i.take_mark)
                .text(&taken.plugin)
                .text(&taken.event_id))
            .await?;
        }
        for cursor in &batch.remembered {
            run(bind_cursor_version(
                Statement::new(&self.sql.remember_cursor),
                cursor,
                "",
            ))
            .await?;
        }
        for chunk in batch.saved.chunks(CHUNK) {
            run(self.upsert_cursors(chunk)).await?;
        }
        for cursor in &batch.removed {
            run(Statement::new(&i.remove_cursor)
                .text(&cursor.plugin)
                .text(&cursor.cluster)
                .text(&cursor.uid))
            .await?;
        }
        for settled in &batch.settled {
            run(Statement::new(&i.settle_mark)
                .text(&settled.plugin)
                .text(&settled.event_id))
            .await?;
        }
        if batch.sweep {
            run(Statement::new(&i.sweep)).await?;
        }
        tx.commit().await.map_err(self.failed(OPERATION))
    }

    async fn try_save_cursors(&self, cursors: &[Cursor]) -> Result<(), StoreError> {
        // One statement is atomic by itself: a batch that fits one needs no transaction
        // around it, and saves the driver two round trips (on SQLite, two hand-overs to its
        // worker thread).
        if cursors.len() <= CHUNK {
            self.execute(self.upsert_cursors(cursors), "save cursors")
                .await?;
            return Ok(());
        }
        let mut tx = self.begin_write("begin saving cursors").await?;
        for chunk in cursors.chunks(CHUNK) {
            let statement = self.upsert_cursors(chunk);
            D::execute(&mut *tx, &statement)
                .await
                .map_err(self.failed("save cursors"))?;
        }
        tx.commit()
            .await
            .map_err(self.failed("commit saved cursors"))
    }

    /// Drops or marks the dead letters of `selection`; returns how many it selected.
    async fn try_execute_selected(
        &self,
        verb: SelectionVerb,
        selection: &Selection<'_>,
        operation: &'static str,
    ) -> Result<u64, StoreError> {
        let table = &self.sql.tables.dead_letters;
        let head = match verb {
            SelectionVerb::Drop => format!("DELETE FROM {table}"),
            // Counts the rows it matched, marked already or not (SQLite counts every row an
            // UPDATE touches; sqlx connects to MySQL with the CLIENT_FOUND_ROWS flag).
            SelectionVerb::MarkForReplay => {
                format!("UPDATE {table} SET replay_requested = TRUE")
            }
        };
        let Some(seqs) = selection.seqs else {
            let statement = match selection.plugin {
                Some(plugin) => Statement::once(format!("{head} WHERE plugin = ?")).text(plugin),
                None => Statement::once(head),
            };
            return Ok(self.execute(statement, operation).await?.rows_affected);
        };
        // Each id once, so that splitting the list cannot count a row twice.
        let mut seqs = seqs.to_vec();
        seqs.sort_unstable();
        seqs.dedup();
        let mut tx = self.begin_write(operation).await?;
        let mut selected = 0;
        for chunk in seqs.chunks(CHUNK) {
            let mut sql = format!("{head} WHERE seq IN ({})", placeholders(chunk.len()));
            if selection.plugin.is_some() {
                sql.push_str(" AND plugin = ?");
            }
            let mut statement = chunk
                .iter()
                .fold(Statement::once(sql), |s, seq| s.int(*seq));
            if let Some(plugin) = selection.plugin {
                statement = statement.text(plugin);
            }
            selected += D::execute(&mut *tx, &statement)
                .await
                .map_err(self.failed(operation))?
                .rows_affected;
        }
        tx.commit().await.map_err(self.failed(operation))?;
        Ok(selected)
    }

    async fn try_take_replays(
        &self,
        plugin: &str,
        clusters: Option<&[String]>,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        const TAKE: &str = "take dead letters marked for replay";
        let mut tx = self.begin_write("begin taking replays").await?;
        // Holds the marked rows (row locks, or the file's write lock): a second taker waits
        // until this transaction ends, and then no longer finds the rows it deleted.
        let select = match clusters {
            None => Statement::new(&self.sql.select_replays),
            Some(clusters) => Statement::once(select_replays::<D>(
                &self.sql.tables.dead_letters,
                Some(clusters.len()),
            )),
        };
        let select = clusters
            .unwrap_or_default()
            .iter()
            .fold(select.text(plugin), |s, cluster| s.text(cluster));
        let rows = D::fetch(&mut *tx, &select)
            .await
            .map_err(self.failed(TAKE))?;
        // Decode before deleting: a row that cannot be read stays for an operator to look at
        // rather than vanishing (dropping `tx` rolls back).
        let rows = rows
            .iter()
            .map(|row| {
                D::decode(row, &DEAD_LETTER_SHAPE).map_err(|e| self.corrupt("dead letter", e))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let letters = self.dead_letters_from(rows)?;
        let seqs: Vec<i64> = letters.iter().map(|l| l.seq).collect();
        for chunk in seqs.chunks(CHUNK) {
            let sql = format!(
                "DELETE FROM {} WHERE seq IN ({})",
                self.sql.tables.dead_letters,
                placeholders(chunk.len())
            );
            let statement = chunk
                .iter()
                .fold(Statement::once(sql), |s, seq| s.int(*seq));
            D::execute(&mut *tx, &statement)
                .await
                .map_err(self.failed(TAKE))?;
        }
        tx.commit()
            .await
            .map_err(self.failed("commit taken replays"))?;
        Ok(letters)
    }
}

#[async_trait]
impl<D: Dialect> DeliveryStore for SqlStore<D> {
    async fn cursors(&self, plugin: &str) -> Result<Vec<Cursor>, StoreError> {
        let statement = Statement::new(&self.sql.load_cursors).text(plugin);
        self.fetch(statement, &CURSOR_SHAPE, "load cursors", "cursor")
            .await?
            .into_iter()
            .map(|r| rows::cursor(r).map_err(|e| self.corrupt("cursor", e)))
            .collect()
    }

    async fn cursors_page(
        &self,
        plugin: &str,
        after: Option<(&str, &str)>,
        limit: u32,
    ) -> Result<Vec<Cursor>, StoreError> {
        // No cluster is named with the empty string, so ("", "") is before every cursor.
        let (cluster, uid) = after.unwrap_or(("", ""));
        let statement = Statement::new(&self.sql.load_cursors_page)
            .text(plugin)
            .text(cluster)
            .text(cluster)
            .text(uid)
            .int(i64::from(limit));
        self.fetch(statement, &CURSOR_SHAPE, "load cursors", "cursor")
            .await?
            .into_iter()
            .map(|r| rows::cursor(r).map_err(|e| self.corrupt("cursor", e)))
            .collect()
    }

    async fn save_cursor(&self, cursor: &Cursor) -> Result<(), StoreError> {
        let statement = bind_cursor(Statement::new(&self.sql.upsert_cursor), cursor);
        retry_deadlocks!(self.execute(statement.clone(), "save a cursor").await)?;
        Ok(())
    }

    async fn remember_job(&self, cursor: &Cursor) -> Result<(), StoreError> {
        self.remember_jobs(std::slice::from_ref(cursor)).await
    }

    async fn remember_jobs(&self, cursors: &[Cursor]) -> Result<(), StoreError> {
        if let Some(thread) = &self.cursor_thread {
            return thread.remember(cursors).await;
        }
        for chunk in cursors.chunks(CHUNK) {
            let sql = D::insert_or_keep(
                &self.sql.tables.cursors,
                CURSOR_COLUMNS,
                &CURSOR_KEY,
                &vec![CURSOR_ROW; chunk.len()].join(", "),
            );
            let statement = Statement {
                persistent: keep_prepared(chunk.len()),
                ..Statement::once(sql)
            };
            // Stored with an empty version: seen, nothing delivered.
            let statement = chunk
                .iter()
                .fold(statement, |s, cursor| bind_cursor_version(s, cursor, ""));
            retry_deadlocks!(self.execute(statement.clone(), "remember jobs").await)?;
        }
        Ok(())
    }

    async fn install_time(&self, plugin: &str, now: &str) -> Result<String, StoreError> {
        let record = Statement::new(&self.sql.record_install)
            .text(plugin)
            .text(now);
        retry_deadlocks!(
            self.execute(record.clone(), "record a plugin's install")
                .await
        )?;
        let read = Statement::new(&self.sql.read_install).text(plugin);
        let rows = self
            .fetch(
                read,
                &[Kind::Text],
                "read a plugin's install",
                "install time",
            )
            .await?;
        match rows.into_iter().next().and_then(|r| r.into_iter().next()) {
            Some(Value::Text(at)) => Ok(at),
            _ => Err(self.failed("read a plugin's install")(
                sqlx::Error::RowNotFound,
            )),
        }
    }

    async fn save_cursors(&self, cursors: Vec<Cursor>) -> Result<(), StoreError> {
        if cursors.is_empty() {
            return Ok(());
        }
        if let Some(thread) = &self.cursor_thread {
            return thread.save(cursors).await;
        }
        retry_deadlocks!(self.try_save_cursors(&cursors).await)
    }

    async fn write(&self, batch: WriteBatch) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        if let Some(thread) = &self.cursor_thread {
            return thread.write(batch).await;
        }
        retry_deadlocks!(self.try_write(&batch).await)
    }

    async fn inbox_page(&self, plugin: &str, after: i64, limit: u32) -> Result<Inbox, StoreError> {
        let statement = Statement::new(&self.sql.inbox.load)
            .text(plugin)
            .int(after)
            .int(i64::from(limit));
        let rows = self
            .fetch(
                statement,
                &[Kind::Int, Kind::Text, Kind::Text],
                "read a plugin's inbox",
                "inbox entry",
            )
            .await?;
        let mut inbox = Inbox::default();
        if after == 0 {
            let statement = Statement::new(&self.sql.inbox.missing).text(plugin);
            let missing = self
                .fetch(
                    statement,
                    &[Kind::Text],
                    "read a plugin's inbox",
                    "inbox entry",
                )
                .await?;
            for row in missing {
                if let Some(Value::Text(event_id)) = row.into_iter().next() {
                    inbox.damaged.push(Damaged {
                        event_id,
                        reason: "its event is missing from the inbox".to_string(),
                    });
                }
            }
        }
        let full = rows.len() >= limit as usize;
        let mut last = after;
        for row in rows {
            let mut values = row.into_iter();
            let (Some(Value::Int(seq)), Some(Value::Text(event_id)), Some(Value::Text(json))) =
                (values.next(), values.next(), values.next())
            else {
                continue; // the shape was checked by `fetch`
            };
            last = seq;
            match serde_json::from_str::<JobEvent>(&json) {
                Ok(event) => inbox.events.push(event),
                Err(e) => inbox.damaged.push(Damaged {
                    event_id,
                    reason: format!("its event does not decode: {e}"),
                }),
            }
        }
        inbox.next = full.then_some(last);
        Ok(inbox)
    }

    async fn inbox_event(&self, event_id: &str) -> Result<Stored, StoreError> {
        let mut found = self.inbox_events(&[event_id]).await?;
        Ok(found.pop().unwrap_or(Stored::Missing))
    }

    async fn inbox_events(&self, ids: &[&str]) -> Result<Vec<Stored>, StoreError> {
        let mut stored = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(READ_BACK_BATCH) {
            // The smallest prepared size that holds the chunk; the last id fills the rest.
            let k = chunk.len().next_power_of_two().trailing_zeros() as usize;
            let mut statement = Statement::new(&self.sql.inbox.events[k]);
            for i in 0..1usize << k {
                statement = statement.text(chunk[i.min(chunk.len() - 1)]);
            }
            let rows = self
                .fetch(
                    statement,
                    &[Kind::Text, Kind::Text],
                    "read events of the inbox",
                    "inbox entry",
                )
                .await?;
            let mut json: HashMap<String, String> = HashMap::with_capacity(rows.len());
            for row in rows {
                if let [Value::Text(id), Value::Text(text)] = <[Value; 2]>::try_from(row)
                    .map_err(|_| self.corrupt("inbox entry", "a row of the wrong shape"))?
                {
                    json.insert(id, text);
                }
            }
            stored.extend(chunk.iter().map(|id| match json.get(*id) {
                None => Stored::Missing,
                Some(text) => match serde_json::from_str::<JobEvent>(text) {
                    Ok(event) => Stored::Event(Box::new(event)),
                    Err(e) => Stored::Damaged(format!("its event does not decode: {e}")),
                },
            }));
        }
        Ok(stored)
    }

    async fn remove_cursor(
        &self,
        plugin: &str,
        cluster: &str,
        uid: &str,
    ) -> Result<(), StoreError> {
        let statement = Statement::new(&self.sql.remove_cursor)
            .text(plugin)
            .text(cluster)
            .text(uid);
        retry_deadlocks!(self.execute(statement.clone(), "remove a cursor").await)?;
        Ok(())
    }

    async fn add_dead_letter(
        &self,
        plugin: &str,
        event: &JobEvent,
        error: &str,
        attempts: u32,
    ) -> Result<i64, StoreError> {
        let event_json = serde_json::to_string(event).map_err(|source| StoreError::Encode {
            what: "a dead-lettered event",
            source,
        })?;
        let at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let statement = Statement::new(&self.sql.add_dead_letter)
            .text(plugin)
            .text(&event.id)
            .text(&event.cluster)
            .text(&event.uid)
            .text(&event_json)
            .text(error)
            .int(i64::from(attempts))
            .text(&at);
        let done = retry_deadlocks!(self.execute(statement.clone(), "add a dead letter").await)?;
        done.last_insert_id
            .ok_or_else(|| self.corrupt("dead letter", "its new seq is out of range"))
    }

    async fn dead_letters(&self, plugin: Option<&str>) -> Result<Vec<DeadLetter>, StoreError> {
        let statement = match plugin {
            Some(plugin) => Statement::new(&self.sql.list_dead_letters_of_plugin).text(plugin),
            None => Statement::new(&self.sql.list_dead_letters),
        };
        let rows = self
            .fetch(
                statement,
                &DEAD_LETTER_SHAPE,
                "list dead letters",
                "dead letter",
            )
            .await?;
        self.dead_letters_from(rows)
    }

    async fn drop_dead_letters(
        &self,
        plugin: Option<&str>,
        seqs: &[i64],
        all: bool,
    ) -> Result<u64, StoreError> {
        let selection = Selection::new(plugin, seqs, all)?;
        retry_deadlocks!(
            self.try_execute_selected(SelectionVerb::Drop, &selection, "drop dead letters")
                .await
        )
    }

    async fn request_replay(
        &self,
        plugin: Option<&str>,
        seqs: &[i64],
        all: bool,
    ) -> Result<u64, StoreError> {
        let selection = Selection::new(plugin, seqs, all)?;
        retry_deadlocks!(
            self.try_execute_selected(
                SelectionVerb::MarkForReplay,
                &selection,
                "mark dead letters for replay",
            )
            .await
        )
    }

    async fn take_replays(
        &self,
        plugin: &str,
        clusters: Option<&[String]>,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        if clusters.is_some_and(|c| c.is_empty()) {
            return Ok(Vec::new());
        }
        retry_deadlocks!(self.try_take_replays(plugin, clusters).await)
    }

    async fn dead_letter_counts(&self) -> Result<BTreeMap<String, u64>, StoreError> {
        let rows = self
            .fetch(
                Statement::new(&self.sql.count_dead_letters),
                &[Kind::Text, Kind::Int],
                "count dead letters",
                "dead-letter count",
            )
            .await?;
        Ok(rows
            .into_iter()
            .filter_map(|row| match row.as_slice() {
                [Value::Text(plugin), Value::Int(n)] => Some((plugin.clone(), (*n).max(0) as u64)),
                _ => None,
            })
            .collect())
    }

    async fn dead_lettered_plugins(
        &self,
        cluster: &str,
        uid: &str,
    ) -> Result<Vec<String>, StoreError> {
        let rows = self
            .fetch(
                Statement::new(&self.sql.dead_lettered_plugins)
                    .text(cluster)
                    .text(uid),
                &[Kind::Text],
                "list the plugins with dead letters of a job",
                "dead letter",
            )
            .await?;
        Ok(rows
            .into_iter()
            .filter_map(|row| match row.as_slice() {
                [Value::Text(plugin)] => Some(plugin.clone()),
                _ => None,
            })
            .collect())
    }

    async fn dead_letters_of_jobs(
        &self,
        jobs: &[(String, String)],
    ) -> Result<Vec<JobDeadLetters>, StoreError> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let mut uids: Vec<&str> = jobs.iter().map(|(_, uid)| uid.as_str()).collect();
        uids.sort_unstable();
        uids.dedup();
        let mut statement = Statement::once(format!(
            "SELECT plugin, cluster, uid, seq, error FROM {} WHERE uid IN ({})",
            self.sql.tables.dead_letters,
            placeholders(uids.len())
        ));
        for uid in &uids {
            statement = statement.text(uid);
        }
        let rows = self
            .fetch(
                statement,
                &[Kind::Text, Kind::Text, Kind::Text, Kind::Int, Kind::Text],
                "read the dead letters of a page of jobs",
                "dead letter",
            )
            .await?;
        Ok(summarize_dead_letters(rows.into_iter().filter_map(
            |row| match <[Value; 5]>::try_from(row) {
                Ok(
                    [
                        Value::Text(plugin),
                        Value::Text(cluster),
                        Value::Text(uid),
                        Value::Int(seq),
                        Value::Text(error),
                    ],
                ) if jobs.iter().any(|(c, u)| *c == cluster && *u == uid) => {
                    Some((plugin, cluster, uid, seq, error))
                }
                _ => None,
            },
        )))
    }

    async fn check(&self) -> Result<(), StoreError> {
        let operation = match self.location {
            Location::File(_) => "check the state file",
            Location::Database(_) => "check the state database",
        };
        self.execute(Statement::new(&self.sql.check), operation)
            .await?;
        Ok(())
    }

    async fn close(&self) {
        // The cursor thread's connection first, so the pool's last one folds the log back.
        if let Some(thread) = &self.cursor_thread {
            thread.stop().await;
        }
        self.pool.close().await;
    }
}

#[async_trait]
impl<D: Dialect> PluginKv for SqlStore<D> {
    async fn kv_get(&self, plugin: &str, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let statement = Statement::new(&self.sql.kv_get).text(plugin).text(key);
        let rows = self
            .fetch(statement, &[Kind::Bytes], "read a plugin key", "plugin key")
            .await?;
        Ok(
            match rows.into_iter().next().and_then(|r| r.into_iter().next()) {
                Some(Value::Bytes(value)) => Some(value),
                _ => None,
            },
        )
    }

    async fn kv_set(
        &self,
        plugin: &str,
        key: &str,
        value: &[u8],
        ttl_seconds: Option<u32>,
    ) -> Result<(), StoreError> {
        let statement = Statement::new(&self.sql.kv_set)
            .text(plugin)
            .text(key)
            .bytes(value)
            .opt_int(ttl_seconds.map(i64::from));
        retry_deadlocks!(self.execute(statement.clone(), "write a plugin key").await)?;
        // Expired entries go a few at a time with each write, so the table never needs a
        // sweeper task and a write never pays for a large backlog at once. The entry is
        // committed already and the next write sweeps again, so a failed sweep is not the
        // caller's failure.
        let sweep = Statement::new(&self.sql.kv_sweep);
        if let Err(e) = retry_deadlocks!(
            self.execute(sweep.clone(), "remove expired plugin keys")
                .await
        ) {
            tracing::debug!(error = %e, "sweeping expired plugin keys failed");
        }
        Ok(())
    }

    async fn kv_usage(&self, plugin: &str, except_key: &str) -> Result<(u64, u64), StoreError> {
        let statement = Statement::new(&self.sql.kv_usage)
            .text(plugin)
            .text(except_key);
        let rows = self
            .fetch(
                statement,
                &[Kind::Int, Kind::Int],
                "measure a plugin's keys",
                "plugin key usage",
            )
            .await?;
        match rows.into_iter().next().as_deref() {
            Some([Value::Int(entries), Value::Int(bytes)]) => {
                Ok(((*entries).max(0) as u64, (*bytes).max(0) as u64))
            }
            _ => Err(self.failed("measure a plugin's keys")(
                sqlx::Error::RowNotFound,
            )),
        }
    }

    async fn kv_delete(&self, plugin: &str, key: &str) -> Result<bool, StoreError> {
        let statement = Statement::new(&self.sql.kv_delete).text(plugin).text(key);
        let done = retry_deadlocks!(self.execute(statement.clone(), "delete a plugin key").await)?;
        Ok(done.rows_affected > 0)
    }
}

#[cfg(test)]
mod tests {
    use sqlx::{AssertSqlSafe, Row};

    use super::*;
    use crate::mysql::MySqlDialect;
    use crate::sqlite::SqliteDialect;
    use crate::{MySqlStore, SqliteStore};

    /// Events marked by two plugins, so that a planner has both keys of the marks to choose
    /// from: the statements that insert them.
    fn inbox_rows(t: &Tables) -> [String; 2] {
        let events: Vec<String> = (0..400)
            .map(|i| format!("('c/u{i}/1', '{{}}', 0)"))
            .collect();
        let marks: Vec<String> = (0..400)
            .map(|i| format!("('p{}', 'c/u{i}/1')", i % 2))
            .collect();
        [
            format!(
                "INSERT INTO {} (event_id, event_json, at) VALUES {}",
                t.inbox_events,
                events.join(", ")
            ),
            format!(
                "INSERT INTO {} (plugin, event_id) VALUES {}",
                t.inbox_marks,
                marks.join(", ")
            ),
        ]
    }

    /// The statement of an inbox page without the dialect's hint: what the planner would do
    /// unled, to show that the plan tests below can fail.
    fn unhinted<D: Dialect>(load: &str) -> String {
        load.replace(&format!(" {} ", D::BY_PRIMARY_KEY), " ")
    }

    /// SQLite reads an inbox page as a range of the marks' key: no sort of the plugin's marks
    /// (a "TEMP B-TREE"), whose cost grows with the whole inbox at every page.
    #[tokio::test]
    async fn sqlite_reads_an_inbox_page_as_a_range_of_the_marks_key() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = SqliteStore::open(&dir.path().join("state.db"))
            .await
            .expect("open");
        for rows in inbox_rows(&Tables::new("")) {
            sqlx::query(AssertSqlSafe(rows))
                .execute(&store.pool)
                .await
                .expect("rows");
        }
        let plan = |sql: String| {
            let pool = store.pool.clone();
            async move {
                sqlx::query(AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sql}")))
                    .bind("p0")
                    .bind(10_i64)
                    .bind(1000_i64)
                    .fetch_all(&pool)
                    .await
                    .expect("explain")
                    .iter()
                    .map(|row| row.get::<String, _>("detail"))
                    .collect::<Vec<_>>()
                    .join("; ")
            }
        };
        let load = store.sql.inbox.load.to_string();
        let hinted = plan(load.clone()).await;
        assert!(!hinted.contains("TEMP B-TREE"), "{hinted}");
        // The marks drive the join, by a range of their key; each event found by its id.
        assert!(
            hinted.starts_with("SEARCH m USING INTEGER PRIMARY KEY (rowid>?)"),
            "{hinted}"
        );
        let unled = plan(unhinted::<SqliteDialect>(&load)).await;
        assert!(
            unled.contains("TEMP B-TREE"),
            "the unled plan sorts: {unled}"
        );
    }

    /// MySQL and MariaDB read an inbox page by the marks' primary key, without a filesort.
    /// Needs the test MariaDB (`JOBRELAY_TEST_MYSQL_URL`, or root on 127.0.0.1:3306/test).
    #[tokio::test]
    async fn mysql_reads_an_inbox_page_by_the_marks_primary_key() {
        let url = std::env::var("JOBRELAY_TEST_MYSQL_URL")
            .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_string());
        let prefix = format!("plan{}_", std::process::id());
        let store = MySqlStore::open(&url, &prefix)
            .await
            .unwrap_or_else(|e| panic!("open {url} (is MariaDB running?): {e}"));
        let tables = Tables::new(&prefix);
        for rows in inbox_rows(&tables) {
            sqlx::query(AssertSqlSafe(rows))
                .execute(&store.pool)
                .await
                .expect("rows");
        }
        for table in [&tables.inbox_marks, &tables.inbox_events] {
            sqlx::query(AssertSqlSafe(format!("ANALYZE TABLE {table}")))
                .execute(&store.pool)
                .await
                .expect("analyze");
        }
        let plan = |sql: String| {
            let pool = store.pool.clone();
            async move {
                sqlx::query(AssertSqlSafe(format!("EXPLAIN {sql}")))
                    .bind("p0")
                    .bind(10_i64)
                    .bind(1000_i64)
                    .fetch_all(&pool)
                    .await
                    .expect("explain")
                    .iter()
                    .map(|row| {
                        let table = row.try_get::<String, _>("table").unwrap_or_default();
                        let key = row.try_get::<Option<String>, _>("key").ok().flatten();
                        let extra = row.try_get::<Option<String>, _>("Extra").ok().flatten();
                        format!(
                            "{table}: key={} extra={}",
                            key.unwrap_or_default(),
                            extra.unwrap_or_default()
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            }
        };
        let load = store.sql.inbox.load.to_string();
        let hinted = plan(load.clone()).await;
        let unled = plan(unhinted::<MySqlDialect>(&load)).await;
        for table in [
            &tables.inbox_marks,
            &tables.inbox_events,
            &tables.inbox_v4,
            &tables.cursors,
            &tables.dead_letters,
            &tables.plugin_kv,
            &tables.plugin_installs,
            &tables.schema_version,
        ] {
            sqlx::query(AssertSqlSafe(format!("DROP TABLE IF EXISTS {table}")))
                .execute(&store.pool)
                .await
                .expect("drop");
        }
        // The marks drive the join (the first row), read by their key's range.
        assert!(hinted.starts_with("m: key=PRIMARY "), "{hinted}");
        assert!(!hinted.contains("filesort"), "{hinted}");
        assert!(!hinted.contains("join buffer"), "{hinted}");
        assert!(unled.contains("filesort"), "the unled plan sorts: {unled}");
    }

    #[test]
    fn statements_name_only_prefixed_tables() {
        let s = Statements::new::<MySqlDialect>(Tables::new("abc_"));
        assert!(s.kv_sweep.contains("abc_plugin_kv"));
        assert!(s.select_replays.contains("FROM abc_dead_letters"));
        assert!(s.select_replays.ends_with("FOR UPDATE"));
        let batch = MySqlDialect::upsert("abc_cursors", CURSOR_COLUMNS, &CURSOR_KEY, CURSOR_ROW, 3);
        assert_eq!(batch.matches('?').count(), 33);
        assert_eq!(placeholders(3), "?, ?, ?");
        let s = Statements::new::<SqliteDialect>(Tables::new(""));
        assert!(s.select_replays.contains("FROM dead_letters"));
        assert!(!s.select_replays.contains("FOR UPDATE"));
    }
}
