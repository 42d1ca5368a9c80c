//! The SQLite file's writer thread: the lanes' writes — acknowledged cursors, jobs seen
//! first, and a lane's whole batch (its takes, first sights, saved and removed cursors,
//! settled marks and sweep) — on a thread of the store's own, as the SQLite dialect's
//! [`Writer`] (see [`dialect`](super::dialect)).
//!
//! Every acknowledged event writes one cursor row, so this is the hottest write of the
//! daemon. Through sqlx each batch was one multi-row statement handed to the driver's worker
//! thread: its SQL formatted for the batch's size, prepared anew for every size above a few
//! rows (a prepared statement per size would stay cached on each connection, and a
//! statement of hundreds of rows holds a large program), every value boxed into the
//! driver's argument list. A profile put about a fifth of SQLite's time in that preparation.
//!
//! Here one thread owns one connection to the file and keeps the store's single-row writes
//! prepared (the upsert of an acknowledgement, the insert-or-keep of a job first seen, and the
//! inbox's take, mark, settle, cursor removal and sweep); a request is one message to the
//! thread, run as one `BEGIN IMMEDIATE` transaction, one step of a prepared statement per
//! row, and a commit. The caller is answered after the commit, so a saved cursor is as durable
//! as through the pool (see [`sqlite`](super::sqlite), Durability), and a batch is still all
//! or nothing. Reads stay on the store's pool.
//!
//! The thread ends when the store is closed ([`Writer::stop`]) or dropped (the last
//! [`SqliteWriter`]), after the requests already sent. A panic on it (a bug: nothing from
//! outside can cause one) leaves every later write failing with an error naming the file,
//! never hanging.

use std::path::{Path, PathBuf};
use std::sync::mpsc;

use parking_lot::Mutex;

use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior};
use tokio::sync::oneshot;

use super::cursor::Cursor;
use super::dialect::Writer;
use super::error::StoreError;
use super::inbox::WriteBatch;
use super::sql_text::{InboxStatements, Statements};
use super::sqlite::{BUSY_TIMEOUT, SqliteDialect};

/// What the thread is asked to write.
enum Write {
    /// Acknowledged cursors: inserted, or replacing the stored ones.
    Save(Vec<Cursor>),
    /// Jobs seen for the first time: inserted with an empty version unless already stored.
    FirstSights(Vec<Cursor>),
    /// A lane's batch (see [`WriteBatch`]), in one transaction.
    Batch(WriteBatch),
}

/// One request and where its answer goes.
struct Request {
    write: Write,
    done: oneshot::Sender<Result<(), rusqlite::Error>>,
}

/// The handle to the thread; dropping it (or [`Writer::stop`]) ends the thread.
#[derive(Debug)]
pub struct SqliteWriter {
    path: PathBuf,
    /// `None` once stopped.
    requests: Mutex<Option<mpsc::Sender<Request>>>,
    /// Answered (or dropped) by the thread once its connection is closed.
    ended: Mutex<Option<oneshot::Receiver<()>>>,
}

impl SqliteWriter {
    /// Opens a connection of its own to `path` (whose schema the store has created or
    /// checked) and starts the thread that writes through it with the store's single-row
    /// statements of `sql`.
    pub(super) fn start(
        path: &Path,
        sql: &Statements<SqliteDialect>,
    ) -> Result<SqliteWriter, StoreError> {
        let failed = |source| StoreError::CursorWrite {
            path: path.to_path_buf(),
            operation: "open the cursor writer's connection",
            source,
        };
        let conn = open(path).map_err(failed)?;
        let statements = Prepared {
            save: sql.upsert_cursor.to_string(),
            first_sight: sql.first_sight_cursor.to_string(),
            inbox: sql.inbox.clone(),
        };
        // Prepared once here, so a file the statements cannot run on is refused at open
        // rather than at the first acknowledgement.
        for text in statements.all() {
            conn.prepare_cached(text).map_err(failed)?;
        }
        let (requests, queue) = mpsc::channel();
        let (end, ended) = oneshot::channel();
        std::thread::Builder::new()
            .name("jobrelay-cursors".into())
            .spawn(move || {
                serve(conn, &statements, queue);
                let _ = end.send(());
            })
            .map_err(|source| StoreError::CursorThreadStart {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(SqliteWriter {
            path: path.to_path_buf(),
            requests: Mutex::new(Some(requests)),
            ended: Mutex::new(Some(ended)),
        })
    }

    async fn run(&self, write: Write, operation: &'static str) -> Result<(), StoreError> {
        let failed = |source| StoreError::CursorWrite {
            path: self.path.clone(),
            operation,
            source,
        };
        let gone = || StoreError::CursorThreadStopped {
            path: self.path.clone(),
        };
        let (done, answer) = oneshot::channel();
        self.requests
            .lock()
            .as_ref()
            .ok_or_else(gone)?
            .send(Request { write, done })
            .map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?.map_err(failed)
    }
}

impl Writer for SqliteWriter {
    /// Stores `cursors` in one transaction, returning once it committed.
    async fn save(&self, cursors: Vec<Cursor>) -> Result<(), StoreError> {
        self.run(Write::Save(cursors), "save cursors").await
    }

    /// Notes the jobs of `cursors` as seen, keeping any cursor already stored.
    async fn note_first_sight(&self, cursors: &[Cursor]) -> Result<(), StoreError> {
        self.run(Write::FirstSights(cursors.to_vec()), "note first sights")
            .await
    }

    /// Carries out a lane's batch in one transaction, returning once it committed.
    async fn write(&self, batch: WriteBatch) -> Result<(), StoreError> {
        self.run(Write::Batch(batch), "write a lane's batch").await
    }

    /// Ends the thread once it has carried out what it was sent, and waits for that, so its
    /// connection is closed when this returns. Later writes fail as stopped.
    async fn stop(&self) {
        self.requests.lock().take();
        let ended = self.ended.lock().take();
        if let Some(ended) = ended {
            // An error means the thread is gone without saying so: ended all the same.
            let _ = ended.await;
        }
    }
}

/// The statements the thread keeps prepared.
struct Prepared {
    save: String,
    first_sight: String,
    inbox: InboxStatements,
}

impl Prepared {
    /// Every statement but the load (a read, which the pool does).
    fn all(&self) -> [&str; 9] {
        let i = &self.inbox;
        [
            &self.save,
            &self.first_sight,
            &i.take_event,
            &i.take_mark,
            &i.settle_mark,
            &i.remove_cursor,
            &i.event_seqs,
            &i.event_from,
            &i.sweep_below,
        ]
    }
}

/// The connection, set up like the store's own (the file is already in WAL mode, which is
/// kept in the file).
fn open(path: &Path) -> Result<Connection, rusqlite::Error> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    Ok(conn)
}

/// The thread's loop: each request is carried out and answered, until every handle is gone;
/// the connection is closed on return.
fn serve(mut conn: Connection, statements: &Prepared, queue: mpsc::Receiver<Request>) {
    while let Ok(Request { write, done }) = queue.recv() {
        let result = match &write {
            Write::Save(cursors) => write_all(&mut conn, &statements.save, cursors, true),
            Write::FirstSights(cursors) => {
                write_all(&mut conn, &statements.first_sight, cursors, false)
            }
            Write::Batch(batch) => write_batch(&mut conn, statements, batch),
        };
        // The caller may have given up waiting (its task was dropped); nothing to do then.
        let _ = done.send(result);
    }
}

/// Runs `sql` once per cursor in one immediate transaction (see [`bind_each`]). Dropping the
/// transaction on an error rolls it back, so a batch is written whole or not at all.
fn write_all(
    conn: &mut Connection,
    sql: &str,
    cursors: &[Cursor],
    delivered: bool,
) -> Result<(), rusqlite::Error> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    bind_each(&tx, sql, cursors, delivered)?;
    tx.commit()
}

/// Runs `sql` once per cursor, binding the columns in table order as `sql_text`'s
/// `bind_cursor_version` does; with `delivered` false the version is stored empty (seen,
/// nothing delivered).
fn bind_each(
    tx: &rusqlite::Transaction<'_>,
    sql: &str,
    cursors: &[Cursor],
    delivered: bool,
) -> Result<(), rusqlite::Error> {
    let mut statement = tx.prepare_cached(sql)?;
    for c in cursors {
        let version = if delivered {
            c.resource_version.as_str()
        } else {
            ""
        };
        statement.execute(rusqlite::params![
            c.plugin,
            c.cluster,
            c.uid,
            c.api_version,
            c.kind,
            c.namespace,
            c.name,
            version,
            c.phase.as_str(),
            c.transition_time,
            c.deleted,
        ])?;
    }
    Ok(())
}

/// One lane's batch in one immediate transaction, in [`WriteBatch`]'s order; rolled back
/// whole on an error.
fn write_batch(
    conn: &mut Connection,
    statements: &Prepared,
    batch: &WriteBatch,
) -> Result<(), rusqlite::Error> {
    let i = &statements.inbox;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    {
        let mut event = tx.prepare_cached(&i.take_event)?;
        let mut mark = tx.prepare_cached(&i.take_mark)?;
        for taken in &batch.taken {
            event.execute(rusqlite::params![
                taken.event_id,
                taken.head_json,
                &*taken.object_json
            ])?;
            mark.execute(rusqlite::params![taken.plugin, taken.event_id])?;
        }
    }
    bind_each(&tx, &statements.first_sight, &batch.first_sights, false)?;
    bind_each(&tx, &statements.save, &batch.saved, true)?;
    {
        let mut remove = tx.prepare_cached(&i.remove_cursor)?;
        for c in &batch.removed {
            remove.execute(rusqlite::params![c.plugin, c.cluster, c.uid])?;
        }
        let mut settle = tx.prepare_cached(&i.settle_mark)?;
        for settled in &batch.settled {
            settle.execute(rusqlite::params![settled.plugin, settled.event_id])?;
        }
    }
    if batch.sweep {
        let below = first_young_seq(&tx, i)?;
        tx.prepare_cached(&i.sweep_below)?.execute([below])?;
    }
    tx.commit()
}

/// Where the events too young to sweep begin: a `seq` below which every event was taken more
/// than [`SWEEP_AFTER_SECONDS`](crate::inbox::SWEEP_AFTER_SECONDS) ago.
///
/// The events have no age index (schema 7: it was a B-tree written and emptied on every
/// take, read once a minute). A rowid is one more than the highest in the table when a row
/// is inserted, and an event's `at` is when it was inserted, so the ages fall as `seq` grows
/// and the old events are a prefix: a binary search finds its end in a few dozen seeks. The
/// sweep itself still checks each row's age, so a clock stepped back only leaves a few old
/// events for a later sweep.
fn first_young_seq(
    tx: &rusqlite::Transaction<'_>,
    i: &InboxStatements,
) -> Result<i64, rusqlite::Error> {
    let (lowest, highest): (Option<i64>, Option<i64>) = tx
        .prepare_cached(&i.event_seqs)?
        .query_row([], |row| Ok((row.get(0)?, row.get(1)?)))?;
    let (Some(mut low), Some(highest)) = (lowest, highest) else {
        return Ok(0); // no events
    };
    // The answer lies in low..=high: every event below `low` is old, and `high` is past them all.
    let mut high = highest.saturating_add(1);
    let mut from = tx.prepare_cached(&i.event_from)?;
    while low < high {
        let middle = low + (high - low) / 2;
        let first: Option<(i64, bool)> = from
            .query_row([middle], |row| Ok((row.get(0)?, row.get(1)?)))
            .optional()?;
        match first {
            // No event in middle..seq: the young ones may begin at middle already.
            Some((_, true)) | None => high = middle,
            Some((seq, false)) => low = seq.saturating_add(1),
        }
    }
    Ok(low)
}
