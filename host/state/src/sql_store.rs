//! The store, written once over a [`Dialect`]: every transaction and retry of the
//! [`DeliveryStore`] promises, and which statement runs when. The statements' text is in
//! [`sql_text`](super::sql_text), the schema's version logic in [`schema`](super::schema), the
//! plugins' key-value entries ([`PluginKv`](super::PluginKv)) in [`sql_kv`](super::sql_kv);
//! the backends ([`sqlite`](super::sqlite), [`mysql`](super::mysql)) only connect, hold their
//! schema lock, and say how their SQL differs.
//!
//! Nothing here is one backend's. The lanes' writes (`save_cursors`, `note_first_sights`, `write`)
//! go to the dialect's [`Writer`] where it has one (SQLite's writer thread) and through the
//! pool otherwise; either way the promise is the trait's.

use std::collections::{BTreeMap, HashMap};

use async_trait::async_trait;
use sqlx::pool::Pool;

use super::cursor::Cursor;
use super::dead_letter::{DeadLetter, Selection};
use super::dialect::{Dialect, Done, Kind, Statement, Value, Writer};
use super::error::{Location, StoreError};
use super::inbox::{Damaged, Inbox, READ_BACK_BATCH, Stored, Taken, WriteBatch};
use super::rows::{self, CURSOR_SHAPE, DEAD_LETTER_SHAPE};
use super::sql_text::{
    SelectionVerb, Statements, Tables, bind_cursor, bind_cursor_version, keep_prepared,
    prepared_runs,
};
use super::store::{DeliveryStore, JobDeadLetters, summarize_dead_letters};
use jobrelay_contract::event::JobEvent;

/// How many times a transaction the database rolled back as a deadlock victim is run.
pub const DEADLOCK_TRIES: u32 = 5;

/// Rows or ids per statement when a batch or an id list is split: far below any driver's
/// placeholder limit (SQLite's 32,766, MySQL's 65,535), and small enough to keep one
/// statement's packet modest.
const CHUNK: usize = 500;

/// Most bytes of events in one statement that takes them into the inbox: well under a MySQL
/// server's smallest `max_allowed_packet` (4 MiB), however large the jobs' objects are.
const TAKEN_BYTES: usize = 2 << 20;

/// `taken` in runs of at most [`CHUNK`] events and `bytes` of stored text, in order; an event
/// larger than that alone.
fn chunks_within(taken: &[Taken], bytes: usize) -> impl Iterator<Item = &[Taken]> {
    let mut rest = taken;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let (mut n, mut size) = (0, 0);
        while n < rest.len() && n < CHUNK && (n == 0 || size + rest[n].stored_len() <= bytes) {
            size += rest[n].stored_len();
            n += 1;
        }
        let (chunk, tail) = rest.split_at(n);
        rest = tail;
        Some(chunk)
    })
}

/// Runs the same attempt again while the database picks it as a deadlock victim (the whole
/// transaction was rolled back, so running it again is safe), with a short growing pause.
/// For a method of `SqlStore<D>`: `D` is the caller's.
macro_rules! retry_deadlocks {
    ($attempt:expr) => {{
        let mut tries = 1_u32;
        loop {
            match $attempt {
                Err(e)
                    if tries < $crate::sql_store::DEADLOCK_TRIES
                        && $crate::sql_store::is_retryable::<D>(&e) =>
                {
                    ::tracing::debug!(error = %e, tries, "deadlock; running the transaction again");
                    ::tokio::time::sleep(::std::time::Duration::from_millis(
                        5 * u64::from(tries),
                    ))
                    .await;
                    tries += 1;
                }
                done => break done,
            }
        }
    }};
}
pub(super) use retry_deadlocks;

pub(super) fn is_retryable<D: Dialect>(error: &StoreError) -> bool {
    matches!(error, StoreError::Query { source, .. } if D::is_retryable(source))
}

/// The state store on a database of dialect `D`. Cheap to share: clone the `Arc` it lives in.
#[derive(Debug)]
pub struct SqlStore<D: Dialect> {
    pub(super) pool: Pool<D::Db>,
    /// The backend's own settings (the file's path, the server and table prefix).
    pub(super) dialect: D,
    location: Location,
    pub(super) sql: Statements<D>,
    /// The dialect's own path for the lanes' writes, if it has one (see [`Dialect::Writer`]);
    /// without, they run on the pool.
    writer: Option<D::Writer>,
}

impl<D: Dialect> SqlStore<D> {
    /// A store on `pool`, whose schema the backend has created or checked, with tables named
    /// by `prefix`, and the dialect's writer started ([`Dialect::start_writer`]). If the writer
    /// cannot start, the pool is closed and the error returned.
    pub(super) async fn from_pool(
        pool: Pool<D::Db>,
        dialect: D,
        location: Location,
        prefix: &str,
    ) -> Result<Self, StoreError> {
        let sql = Statements::new(Tables::new(prefix));
        let writer = match dialect.start_writer(&sql) {
            Ok(writer) => writer,
            Err(e) => {
                pool.close().await;
                return Err(e);
            }
        };
        Ok(SqlStore {
            pool,
            dialect,
            location,
            sql,
            writer,
        })
    }

    /// Maps a sqlx error to one that names the store and what was being done.
    pub(super) fn failed(
        &self,
        operation: &'static str,
    ) -> impl FnOnce(sqlx::Error) -> StoreError + '_ {
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
    pub(super) async fn execute(
        &self,
        statement: Statement,
        operation: &'static str,
    ) -> Result<Done, StoreError> {
        let mut conn = self.pool.acquire().await.map_err(self.failed(operation))?;
        D::execute(&mut *conn, &statement)
            .await
            .map_err(self.failed(operation))
    }

    /// Runs one query outside a transaction; its rows read as `shape` says. A row that cannot
    /// be read is reported as damaged `what`.
    pub(super) async fn fetch(
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

    /// One multi-row insert of jobs first seen, keeping stored cursors (a run of
    /// [`prepared_runs`]): stored with an empty version, seen and nothing delivered.
    fn first_sight_cursors(&self, cursors: &[Cursor]) -> Statement {
        let statement = self.sql.first_sight_cursors(cursors.len());
        cursors
            .iter()
            .fold(statement, |s, cursor| bind_cursor_version(s, cursor, ""))
    }

    /// One multi-row upsert of `cursors` (a run of [`prepared_runs`]), kept prepared.
    fn upsert_cursors(&self, cursors: &[Cursor]) -> Statement {
        let statement = self.sql.upsert_cursors(cursors.len());
        cursors.iter().fold(statement, bind_cursor)
    }

    /// [`DeliveryStore::write`] through the pool: one transaction, the rows of each kind
    /// written by multi-row statements in runs of [`prepared_runs`] (a removed cursor a
    /// statement of its own).
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
        // The events, then their marks, each a statement per chunk: the marks are numbered in
        // the order the batch took them.
        for chunk in chunks_within(&batch.taken, TAKEN_BYTES).flat_map(prepared_runs) {
            let events = chunk
                .iter()
                .fold(self.sql.take_events(chunk.len()), |s, t| {
                    s.text(&t.event_id)
                        .text(&t.head_json)
                        .shared(&t.object_json)
                });
            run(events).await?;
            let marks = chunk.iter().fold(self.sql.take_marks(chunk.len()), |s, t| {
                s.text(&t.plugin).text(&t.event_id)
            });
            run(marks).await?;
        }
        for chunk in prepared_runs(&batch.first_sights) {
            run(self.first_sight_cursors(chunk)).await?;
        }
        for chunk in prepared_runs(&batch.saved) {
            run(self.upsert_cursors(chunk)).await?;
        }
        for cursor in &batch.removed {
            run(Statement::new(&i.remove_cursor)
                .text(&cursor.plugin)
                .text(&cursor.cluster)
                .text(&cursor.uid))
            .await?;
        }
        // A statement per run of one plugin's marks (a lane's batch is all its own plugin's).
        for run_of_plugin in batch.settled.chunk_by(|a, b| a.plugin == b.plugin) {
            for chunk in prepared_runs(run_of_plugin) {
                let statement = chunk.iter().fold(
                    self.sql.settle_marks(chunk.len()).text(&chunk[0].plugin),
                    |s, m| s.text(&m.event_id),
                );
                run(statement).await?;
            }
        }
        if batch.sweep {
            run(Statement::new(&i.sweep)).await?;
        }
        tx.commit().await.map_err(self.failed(OPERATION))
    }

    async fn try_save_cursors(&self, cursors: &[Cursor]) -> Result<(), StoreError> {
        // One statement is atomic by itself: a batch that fits one needs no transaction
        // around it, and saves the driver two round trips.
        if keep_prepared(cursors.len()) {
            self.execute(self.upsert_cursors(cursors), "save cursors")
                .await?;
            return Ok(());
        }
        let mut tx = self.begin_write("begin saving cursors").await?;
        for chunk in prepared_runs(cursors) {
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
        let Some(seqs) = selection.seqs else {
            let statement = self
                .sql
                .selected_dead_letters(verb, selection.plugin.is_some(), None);
            let statement = match selection.plugin {
                Some(plugin) => statement.text(plugin),
                None => statement,
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
            let statement =
                self.sql
                    .selected_dead_letters(verb, selection.plugin.is_some(), Some(chunk.len()));
            let mut statement = chunk.iter().fold(statement, |s, seq| s.int(*seq));
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
            Some(clusters) => self.sql.select_replays_of_clusters(clusters.len()),
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
            let statement = chunk
                .iter()
                .fold(self.sql.delete_dead_letters(chunk.len()), |s, seq| {
                    s.int(*seq)
                });
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

    async fn note_first_sight(&self, cursor: &Cursor) -> Result<(), StoreError> {
        self.note_first_sights(std::slice::from_ref(cursor)).await
    }

    async fn note_first_sights(&self, cursors: &[Cursor]) -> Result<(), StoreError> {
        if let Some(writer) = &self.writer {
            return writer.note_first_sight(cursors).await;
        }
        for chunk in prepared_runs(cursors) {
            let statement = self.first_sight_cursors(chunk);
            retry_deadlocks!(self.execute(statement.clone(), "note first sights").await)?;
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
        if let Some(writer) = &self.writer {
            return writer.save(cursors).await;
        }
        retry_deadlocks!(self.try_save_cursors(&cursors).await)
    }

    async fn write(&self, batch: WriteBatch) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        if let Some(writer) = &self.writer {
            return writer.write(batch).await;
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
                &[Kind::Int, Kind::Text, Kind::Text, Kind::OptText, Kind::Int],
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
            let (
                Some(Value::Int(seq)),
                Some(Value::Text(event_id)),
                Some(Value::Text(json)),
                Some(Value::OptText(object)),
                Some(Value::Int(taken_at)),
            ) = (
                values.next(),
                values.next(),
                values.next(),
                values.next(),
                values.next(),
            )
            else {
                continue; // the shape was checked by `fetch`
            };
            last = seq;
            match rows::stored_event(&json, object.as_deref()) {
                Ok(event) => {
                    inbox.events.push(event);
                    inbox.taken_at.push(taken_at);
                }
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
                    &[Kind::Text, Kind::Text, Kind::OptText],
                    "read events of the inbox",
                    "inbox entry",
                )
                .await?;
            let mut found: HashMap<String, (String, Option<String>)> =
                HashMap::with_capacity(rows.len());
            for row in rows {
                if let [Value::Text(id), Value::Text(text), Value::OptText(object)] =
                    <[Value; 3]>::try_from(row)
                        .map_err(|_| self.corrupt("inbox entry", "a row of the wrong shape"))?
                {
                    found.insert(id, (text, object));
                }
            }
            stored.extend(chunk.iter().map(|id| match found.get(*id) {
                None => Stored::Missing,
                Some((text, object)) => match rows::stored_event(text, object.as_deref()) {
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
        let mut statement = self.sql.dead_letters_of_uids(uids.len());
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
        // The writer's connection first, so that the pool's last one is the database's last
        // (SQLite folds its write-ahead log back into the file then).
        if let Some(writer) = &self.writer {
            writer.stop().await;
        }
        self.pool.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(bytes: usize) -> Taken {
        Taken {
            plugin: "p".into(),
            event_id: "e".into(),
            head_json: "x".repeat(bytes),
            object_json: "".into(),
        }
    }

    /// Takes go to the server in runs bounded by count and by bytes, in order, none lost; an
    /// event over the bytes goes alone.
    #[test]
    fn takes_are_chunked_by_count_and_bytes() {
        let sizes = |rows: &[Taken], bytes| {
            chunks_within(rows, bytes)
                .map(|c| c.iter().map(Taken::stored_len).collect::<Vec<_>>())
                .collect::<Vec<_>>()
        };
        let rows: Vec<Taken> = [3, 3, 3, 9, 1, 1].map(taken).into();
        assert_eq!(sizes(&rows, 6), [vec![3, 3], vec![3], vec![9], vec![1, 1]]);
        let many: Vec<Taken> = (0..CHUNK + 1).map(|_| taken(1)).collect();
        let counts: Vec<usize> = chunks_within(&many, usize::MAX).map(<[_]>::len).collect();
        assert_eq!(counts, [CHUNK, 1]);
        assert_eq!(chunks_within(&[], 6).count(), 0);
    }
}
