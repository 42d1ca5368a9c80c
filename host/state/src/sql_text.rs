//! Every statement the store runs, as text: the fixed ones built once at open from the table
//! names and the dialect's phrases ([`Statements`]), the ones whose text depends on a call's
//! length (a batch, an id list) built per call by its methods, and how a cursor's columns are
//! bound in table order.
//!
//! They are here, apart from the store's logic in [`sql_store`](super::sql_store), so that each
//! reads on its own: the store says which statement runs when, in which transaction and with
//! which retry; this file says what each statement does to which table, and is the one place
//! to read when a table, a column or an index changes. The schema itself (the `CREATE TABLE`s)
//! is each backend's, in [`sqlite`](super::sqlite) and [`mysql`](super::mysql): column types
//! are where the databases differ most.

use std::marker::PhantomData;
use std::sync::Arc;

use super::cursor::Cursor;
use super::dialect::{Dialect, Statement, placeholders};
use super::inbox::{READ_BACK_BATCH, SWEEP_AFTER_SECONDS};
use super::rows::{CURSOR_COLUMNS, DEAD_LETTER_COLUMNS};

/// Expired key-value entries removed with each write (see `PluginKv::kv_set`).
const KV_SWEEP: u32 = 16;

/// The key of a cursor.
const CURSOR_KEY: [&str; 3] = ["plugin", "cluster", "uid"];
/// One cursor's parameters, in [`CURSOR_COLUMNS`] order (see [`bind_cursor`]).
const CURSOR_ROW: &str = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";

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

/// The fixed statements of dialect `D`, built once at open from the table names; the methods
/// build the statements whose text depends on a call's length.
#[derive(Debug)]
pub struct Statements<D> {
    pub tables: Tables,
    pub load_cursors: Arc<str>,
    /// A page of a plugin's cursors: plugin, after cluster (twice), after uid, limit.
    pub load_cursors_page: Arc<str>,
    /// Saves one cursor, replacing a stored one: its columns in table order.
    pub upsert_cursor: Arc<str>,
    /// Notes one job as seen, keeping a stored cursor: its columns in table order.
    pub first_sight_cursor: Arc<str>,
    pub remove_cursor: Arc<str>,
    pub add_dead_letter: Arc<str>,
    pub list_dead_letters: Arc<str>,
    pub list_dead_letters_of_plugin: Arc<str>,
    /// The dead letters of one plugin marked for replay, held (see [`Dialect::LOCK_ROWS`]).
    pub select_replays: Arc<str>,
    pub record_install: Arc<str>,
    pub read_install: Arc<str>,
    pub kv_get: Arc<str>,
    pub kv_set: Arc<str>,
    pub kv_sweep: Arc<str>,
    pub kv_delete: Arc<str>,
    pub kv_usage: Arc<str>,
    pub kv_entries: Arc<str>,
    pub count_dead_letters: Arc<str>,
    pub dead_lettered_plugins: Arc<str>,
    pub check: Arc<str>,
    pub inbox: InboxStatements,
    dialect: PhantomData<fn() -> D>,
}

/// The inbox's statements (see [`inbox`](super::inbox)); SQLite's writer thread keeps the
/// writes among them prepared beside the cursor writes.
#[derive(Debug, Clone)]
pub struct InboxStatements {
    /// Stores an event once: event id, head JSON, object JSON.
    pub take_event: Arc<str>,
    /// Marks an event as taken by a plugin: plugin, event id.
    pub take_mark: Arc<str>,
    /// Removes a plugin's mark: plugin, event id.
    pub settle_mark: Arc<str>,
    /// Removes a cursor: plugin, cluster, uid.
    pub remove_cursor: Arc<str>,
    /// Removes events without marks taken more than [`SWEEP_AFTER_SECONDS`] ago (by the age
    /// index of a server database's events).
    pub sweep: Arc<str>,
    /// The lowest and highest event `seq` (SQLite, whose events have no age index: its writer
    /// finds where the young events begin by a binary search over `seq`).
    pub event_seqs: Arc<str>,
    /// The first event at or after a `seq`: seq → seq, whether it is too young to sweep.
    pub event_from: Arc<str>,
    /// [`sweep`](Self::sweep) limited to the events below a `seq`: seq.
    pub sweep_below: Arc<str>,
    /// A page of a plugin's marks with their events, oldest first: plugin, after seq, limit →
    /// seq, event id, JSON, object (see [`rows::stored_event`](super::rows::stored_event)).
    pub load: Arc<str>,
    /// A plugin's marks whose event is missing: plugin → event id.
    pub missing: Arc<str>,
    /// Events by id, `2^k` ids for entry `k` (the last id repeated to fill a batch): event
    /// id → event id, JSON, object. A few fixed sizes keep every statement prepared.
    pub events: Vec<Arc<str>>,
}

impl InboxStatements {
    fn new<D: Dialect>(t: &Tables) -> InboxStatements {
        let now = D::NOW;
        InboxStatements {
            take_event: D::insert_or_keep(
                &t.inbox_events,
                "event_id, event_json, object, at",
                &["event_id"],
                &format!("(?, ?, ?, {now})"),
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
            event_seqs: format!("SELECT MIN(seq), MAX(seq) FROM {}", t.inbox_events).into(),
            event_from: format!(
                "SELECT seq, at >= {now} - {SWEEP_AFTER_SECONDS} FROM {} WHERE seq >= ? \
                 ORDER BY seq LIMIT 1",
                t.inbox_events
            )
            .into(),
            sweep_below: format!(
                "DELETE FROM {events} WHERE seq < ? AND at < {now} - {SWEEP_AFTER_SECONDS} \
                 AND NOT EXISTS (SELECT 1 FROM {marks} WHERE {marks}.event_id = {events}.event_id)",
                events = t.inbox_events,
                marks = t.inbox_marks,
            )
            .into(),
            load: format!(
                "SELECT m.seq, m.event_id, e.event_json, e.object, e.at FROM {} m {} JOIN {} e \
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
                        "SELECT event_id, event_json, object FROM {} WHERE event_id IN ({ids})",
                        t.inbox_events
                    )
                    .into()
                })
                .collect(),
        }
    }
}

/// What a dead-letter selection does to the rows it selects.
#[derive(Debug, Clone, Copy)]
pub enum SelectionVerb {
    Drop,
    MarkForReplay,
}

impl<D: Dialect> Statements<D> {
    pub fn new(tables: Tables) -> Statements<D> {
        let t = &tables;
        let sql = |text: String| -> Arc<str> { text.into() };
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
            first_sight_cursor: sql(D::insert_or_keep(
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
            kv_entries: sql(format!(
                "SELECT `key`, value FROM {} WHERE plugin = ? AND {live} ORDER BY `key`",
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
            dialect: PhantomData,
        }
    }

    /// One multi-row upsert of `rows` cursors (their columns bound with [`bind_cursor`]).
    pub fn upsert_cursors(&self, rows: usize) -> Statement {
        let sql = D::upsert(
            &self.tables.cursors,
            CURSOR_COLUMNS,
            &CURSOR_KEY,
            CURSOR_ROW,
            rows,
        );
        Statement {
            persistent: keep_prepared(rows),
            ..Statement::once(sql)
        }
    }

    /// One multi-row insert of `rows` jobs seen, keeping the cursors stored (their columns
    /// bound with [`bind_cursor_version`], the version empty).
    pub fn first_sight_cursors(&self, rows: usize) -> Statement {
        let sql = D::insert_or_keep(
            &self.tables.cursors,
            CURSOR_COLUMNS,
            &CURSOR_KEY,
            &vec![CURSOR_ROW; rows].join(", "),
        );
        Statement {
            persistent: keep_prepared(rows),
            ..Statement::once(sql)
        }
    }

    /// One multi-row insert of `rows` taken events, keeping an event stored already (by
    /// another plugin's lane): event id, head JSON, object JSON per row.
    pub fn take_events(&self, rows: usize) -> Statement {
        let row = format!("(?, ?, ?, {})", D::NOW);
        let sql = D::insert_or_keep(
            &self.tables.inbox_events,
            "event_id, event_json, object, at",
            &["event_id"],
            &vec![row.as_str(); rows].join(", "),
        );
        Statement {
            persistent: keep_prepared(rows),
            ..Statement::once(sql)
        }
    }

    /// One multi-row insert of `rows` marks, numbered in row order: plugin, event id per row.
    pub fn take_marks(&self, rows: usize) -> Statement {
        let sql = D::insert_or_keep(
            &self.tables.inbox_marks,
            "plugin, event_id",
            &["plugin", "event_id"],
            &vec!["(?, ?)"; rows].join(", "),
        );
        Statement {
            persistent: keep_prepared(rows),
            ..Statement::once(sql)
        }
    }

    /// Removes `rows` marks of one plugin: plugin, then the event ids.
    pub fn settle_marks(&self, rows: usize) -> Statement {
        let sql = format!(
            "DELETE FROM {} WHERE plugin = ? AND event_id IN ({})",
            self.tables.inbox_marks,
            vec!["?"; rows].join(", ")
        );
        Statement {
            persistent: keep_prepared(rows),
            ..Statement::once(sql)
        }
    }

    /// Drops or marks dead letters: of the plugin bound first if `of_plugin`, or, with `seqs`,
    /// those of that many seqs (bound first) and of the plugin bound after them if `of_plugin`.
    pub fn selected_dead_letters(
        &self,
        verb: SelectionVerb,
        of_plugin: bool,
        seqs: Option<usize>,
    ) -> Statement {
        let table = &self.tables.dead_letters;
        let head = match verb {
            SelectionVerb::Drop => format!("DELETE FROM {table}"),
            // Counts the rows it matched, marked already or not (SQLite counts every row an
            // UPDATE touches; sqlx connects to MySQL with the CLIENT_FOUND_ROWS flag).
            SelectionVerb::MarkForReplay => {
                format!("UPDATE {table} SET replay_requested = TRUE")
            }
        };
        Statement::once(match (seqs, of_plugin) {
            (None, true) => format!("{head} WHERE plugin = ?"),
            (None, false) => head,
            (Some(n), of_plugin) => {
                let mut sql = format!("{head} WHERE seq IN ({})", placeholders(n));
                if of_plugin {
                    sql.push_str(" AND plugin = ?");
                }
                sql
            }
        })
    }

    /// [`Statements::select_replays`] of only the clusters bound after the plugin, `clusters`
    /// of them.
    pub fn select_replays_of_clusters(&self, clusters: usize) -> Statement {
        Statement::once(select_replays::<D>(
            &self.tables.dead_letters,
            Some(clusters),
        ))
    }

    /// Deletes the dead letters of `seqs` seqs.
    pub fn delete_dead_letters(&self, seqs: usize) -> Statement {
        Statement::once(format!(
            "DELETE FROM {} WHERE seq IN ({})",
            self.tables.dead_letters,
            placeholders(seqs)
        ))
    }

    /// The dead letters of jobs with any of `uids` uids: plugin, cluster, uid, seq, error.
    pub fn dead_letters_of_uids(&self, uids: usize) -> Statement {
        Statement::once(format!(
            "SELECT plugin, cluster, uid, seq, error FROM {} WHERE uid IN ({})",
            self.tables.dead_letters,
            placeholders(uids)
        ))
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

/// The most rows of a batch statement kept prepared. The store splits a batch into runs whose
/// lengths are powers of two up to this ([`prepared_runs`]), so each kind of batch statement
/// has at most eight shapes, each prepared once per connection and kept: a statement prepared
/// for its one run costs the server a round trip and the client its parameter and column
/// descriptions each time (on MySQL, half the client's CPU of a stored take, measured), and a
/// cache of every size a batch can have (up to 100 a connection) held ~500 bytes per
/// tracked job of resident memory, measured when SQLite's writes still went this way.
pub const PREPARED_ROWS: usize = 128;

/// `rows` in runs whose lengths are powers of two of at most [`PREPARED_ROWS`], in order,
/// the longest first: 100 rows are runs of 64, 32 and 4.
pub fn prepared_runs<T>(rows: &[T]) -> impl Iterator<Item = &[T]> {
    let mut rest = rows;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let n = PREPARED_ROWS.min(1 << rest.len().ilog2());
        let (run, tail) = rest.split_at(n);
        rest = tail;
        Some(run)
    })
}

/// Whether a batch statement of `rows` rows is kept prepared on its connection: the lengths
/// [`prepared_runs`] gives, each one statement.
pub fn keep_prepared(rows: usize) -> bool {
    rows.is_power_of_two() && rows <= PREPARED_ROWS
}

/// A cursor's columns bound in table order, for the statements that write one.
pub fn bind_cursor(statement: Statement, cursor: &Cursor) -> Statement {
    bind_cursor_version(statement, cursor, &cursor.resource_version)
}

/// [`bind_cursor`] with `resource_version` in place of the cursor's own.
pub fn bind_cursor_version(
    statement: Statement,
    cursor: &Cursor,
    resource_version: &str,
) -> Statement {
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

#[cfg(test)]
mod tests {
    use sqlx::{AssertSqlSafe, Row};

    use super::*;

    /// Every row once, in order, in runs of prepared lengths only.
    #[test]
    fn batches_run_in_prepared_lengths() {
        for len in [0, 1, 2, 3, 64, 100, 127, 128, 129, 500, 1000] {
            let rows: Vec<usize> = (0..len).collect();
            let runs: Vec<&[usize]> = prepared_runs(&rows).collect();
            assert!(
                runs.iter().all(|r| keep_prepared(r.len())),
                "{len}: {runs:?}"
            );
            assert_eq!(runs.concat(), rows, "{len}");
        }
        let lengths = |len: usize| {
            let rows = vec![(); len];
            prepared_runs(&rows).map(<[()]>::len).collect::<Vec<_>>()
        };
        assert_eq!(lengths(100), [64, 32, 4]);
        assert_eq!(lengths(300), [128, 128, 32, 8, 4]);
        assert!(!keep_prepared(3) && !keep_prepared(256) && keep_prepared(1));
    }
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
        // Since schema 7 no index of the marks leads with the plugin, and the planner finds
        // the range unled; the hint keeps it so should one come back (as up to version 6).
        sqlx::query("CREATE UNIQUE INDEX marks_by_plugin ON inbox_marks (plugin, event_id)")
            .execute(&store.pool)
            .await
            .expect("an index leading with the plugin");
        let hinted = plan(load.clone()).await;
        assert!(!hinted.contains("TEMP B-TREE"), "{hinted}");
        // The marks drive the join, by a range of their key; each event found by its id.
        assert!(
            hinted.starts_with("SEARCH m USING INTEGER PRIMARY KEY (rowid>?)"),
            "{hinted}"
        );
        // Unled, SQLite may take either the range or the plugin's index and a sort: which
        // one depends on its estimates, so the hint is what makes the plan certain. That
        // the check above can fail is shown by a page ordered by what no key holds.
        let by_time = unhinted::<SqliteDialect>(&load).replace("ORDER BY m.seq", "ORDER BY e.at");
        assert_ne!(by_time, unhinted::<SqliteDialect>(&load));
        let sorted = plan(by_time).await;
        assert!(
            sorted.contains("TEMP B-TREE"),
            "a page by time sorts: {sorted}"
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
        let s = Statements::<MySqlDialect>::new(Tables::new("abc_"));
        assert!(s.kv_sweep.contains("abc_plugin_kv"));
        assert!(s.select_replays.contains("FROM abc_dead_letters"));
        assert!(s.select_replays.ends_with("FOR UPDATE"));
        let batch = MySqlDialect::upsert("abc_cursors", CURSOR_COLUMNS, &CURSOR_KEY, CURSOR_ROW, 3);
        assert_eq!(batch.matches('?').count(), 33);
        assert_eq!(placeholders(3), "?, ?, ?");
        let s = Statements::<SqliteDialect>::new(Tables::new(""));
        assert!(s.select_replays.contains("FROM dead_letters"));
        assert!(!s.select_replays.contains("FOR UPDATE"));
    }
}
