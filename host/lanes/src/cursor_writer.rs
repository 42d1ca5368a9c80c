//! Group commit of a lane's cursor writes.
//!
//! An event is acknowledged only once its cursor is durable, and the job's next event waits
//! for that. Written one by one, every acknowledgement is a statement of its own: on SQLite a
//! hand-over to the driver's worker thread and back, the largest share of the daemon's CPU per
//! event in a profile. Here every cursor write of a lane — acknowledgements' cursors, removals
//! of deleted jobs, and notes of jobs seen for the first time — goes through one writer task,
//! which carries out whatever has gathered while its previous write ran (the saves as one
//! transaction, on MySQL multi-row upserts, on the SQLite file a thread of the store's own
//! with its statements kept prepared) and then answers each worker. Under load the batches
//! grow by themselves. Under a light, steady load (events one by one, a few hundred
//! microseconds apart) every batch would be one cursor, each its own statement and its own
//! hand-over to SQLite's thread and back: so a batch of fewer than `LINGER_BELOW` waits up
//! to `LINGER` for company first (tokio's timer rounds it up to its 1 ms tick). At 5,000
//! events/s over 10 clusters that took about 13% of the daemon's CPU per event off and kept the
//! latency tail under 20 ms (docs/BENCHMARKS.md); it delays an acknowledgement, never a call
//! (the call has been made), so a job's next version waits at most that much longer.
//!
//! The guarantees stay those of one write per event: a worker learns that its cursor is stored
//! only after the statement holding it committed, so "acknowledged" still means durable, and
//! the redelivery window after a crash is unchanged (only events not yet acknowledged come
//! again). A job has at most one event being settled at a time, so a batch never holds two
//! acknowledgements of one job, and per-job order is that of the queue. One queue for all of
//! a lane's writes also orders a job's first-sight note before its removal.
//!
//! This is the only batching of a cursor write. The SQLite store's thread
//! (`jobrelay_state`'s `sqlite_cursors`) merges nothing: it runs each batch it is handed as
//! one transaction, in the order the lanes' writers hand them over.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use jobrelay_state::{Cursor, DeliveryStore, StoreError};

/// Why a cursor write did not happen.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WriteError {
    /// The store refused the batch holding the cursor. Shared: every cursor of the batch
    /// gets the same error.
    #[error("{0}")]
    Store(Arc<StoreError>),
    /// The writer task is gone (the lane is being dropped).
    #[error("the cursor writer has stopped")]
    Stopped,
    /// The writer task went away with the cursor taken but unanswered.
    #[error("the cursor writer stopped before answering")]
    Unanswered,
}

/// The answer to one save or removal.
type Answer = oneshot::Sender<Result<(), WriteError>>;

/// Most cursors in one statement: well inside one chunk of the store's batch upsert.
const MAX_BATCH: usize = 256;

/// A batch smaller than this waits [`LINGER`] for more before it is written.
const LINGER_BELOW: usize = 8;

/// How long a small batch waits for company.
const LINGER: Duration = Duration::from_micros(500);

/// What a lane's worker (or the lane itself) asks the writer to do.
enum Pending {
    /// An acknowledgement's cursor, answered once stored.
    Save(Cursor, Answer),
    /// A job seen, nothing delivered yet; nobody waits for it.
    Remember(Cursor),
    /// A deleted job's cursor to forget (its deletion was acknowledged), answered once done.
    Remove(Cursor, Answer),
}

/// The handle a lane's workers save cursors through. Cheap to clone; the writer task ends
/// when the last handle is dropped, after answering every cursor it was given.
#[derive(Clone)]
pub struct CursorWriter {
    queue: mpsc::UnboundedSender<Pending>,
}

impl CursorWriter {
    /// Starts the writer task for `store` on the current tokio runtime.
    pub fn start(store: Arc<dyn DeliveryStore>) -> CursorWriter {
        let (queue, pending) = mpsc::unbounded_channel();
        tokio::spawn(write_batches(store, pending));
        CursorWriter { queue }
    }

    /// Stores `cursor`, returning once it is durable (or the write failed, with why).
    pub async fn save(&self, cursor: Cursor) -> Result<(), WriteError> {
        self.answered(|done| Pending::Save(cursor, done)).await
    }

    /// Forgets the job of `cursor` (its deletion was acknowledged), returning once done. Through
    /// the writer like every other cursor write of the lane, so a note of the job queued
    /// earlier cannot land after the removal and bring the job back.
    pub async fn remove(&self, cursor: Cursor) -> Result<(), WriteError> {
        self.answered(|done| Pending::Remove(cursor, done)).await
    }

    async fn answered(&self, request: impl FnOnce(Answer) -> Pending) -> Result<(), WriteError> {
        let (done, answer) = oneshot::channel();
        self.queue
            .send(request(done))
            .map_err(|_| WriteError::Stopped)?;
        answer.await.map_err(|_| WriteError::Unanswered)?
    }

    /// Notes a job seen for the first time ([`DeliveryStore::remember_job`]) with the next
    /// batch, without waiting: losing it only weakens deletion detection across a crash.
    pub fn remember(&self, cursor: Cursor) {
        if self.queue.send(Pending::Remember(cursor)).is_err() {
            tracing::debug!("the cursor writer has stopped; a newly seen job is not noted");
        }
    }
}

/// Takes the first waiting request, then every other one already waiting (up to
/// [`MAX_BATCH`]; a batch of fewer than [`LINGER_BELOW`] waits [`LINGER`] for more), carries
/// them out and answers each; until every handle is gone. In a batch,
/// jobs only noted go first (an insert that keeps what is there, so it cannot undo an
/// acknowledgement), then the saves as one statement, then the removals, so a note never lands
/// after the removal of its job. A batch holds at most one save or removal per job: a job's
/// next event waits for its previous acknowledgement.
async fn write_batches(
    store: Arc<dyn DeliveryStore>,
    mut pending: mpsc::UnboundedReceiver<Pending>,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut saves = Vec::new();
    let mut waiters = Vec::with_capacity(MAX_BATCH);
    let mut remembered = Vec::new();
    let mut removals = Vec::new();
    while pending.recv_many(&mut batch, MAX_BATCH).await > 0 {
        if batch.len() < LINGER_BELOW {
            // Ends early once the batch is full or every handle is gone.
            let _ = tokio::time::timeout(LINGER, async {
                while batch.len() < MAX_BATCH {
                    let room = MAX_BATCH - batch.len();
                    if pending.recv_many(&mut batch, room).await == 0 {
                        break;
                    }
                }
            })
            .await;
        }
        // The saves are handed to the store whole, so each batch gets a vector of its own.
        saves.reserve(batch.len());
        for request in batch.drain(..) {
            match request {
                Pending::Save(cursor, done) => {
                    saves.push(cursor);
                    waiters.push(done);
                }
                Pending::Remember(cursor) => remembered.push(cursor),
                Pending::Remove(cursor, done) => removals.push((cursor, done)),
            }
        }
        if !remembered.is_empty() {
            if let Err(e) = store.remember_jobs(&remembered).await {
                tracing::warn!(jobs = remembered.len(), error = %e, "cannot note newly seen jobs");
            }
            remembered.clear();
        }
        if !saves.is_empty() {
            let result = store
                .save_cursors(std::mem::take(&mut saves))
                .await
                .map_err(|e| WriteError::Store(Arc::new(e)));
            for waiter in waiters.drain(..) {
                let _ = waiter.send(result.clone());
            }
        }
        for (cursor, done) in removals.drain(..) {
            let result = store
                .remove_cursor(&cursor.plugin, &cursor.cluster, &cursor.uid)
                .await
                .map_err(|e| WriteError::Store(Arc::new(e)));
            let _ = done.send(result);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use async_trait::async_trait;
    use jobrelay_contract::event::{JobEvent, Phase};
    use jobrelay_state::{DeadLetter, Inbox, StoreError, WriteBatch};

    use super::*;

    /// A store that records each batch and holds every write until told to go on, so that
    /// cursors gather behind a write in progress.
    struct Recording {
        batches: Mutex<Vec<Vec<String>>>,
        gate: tokio::sync::Semaphore,
        fail: std::sync::atomic::AtomicBool,
    }

    impl Default for Recording {
        fn default() -> Recording {
            Recording {
                batches: Mutex::default(),
                gate: tokio::sync::Semaphore::new(0),
                fail: std::sync::atomic::AtomicBool::new(false),
            }
        }
    }

    #[async_trait]
    impl DeliveryStore for Recording {
        async fn cursors(&self, _: &str) -> Result<Vec<Cursor>, StoreError> {
            Ok(Vec::new())
        }
        async fn save_cursor(&self, c: &Cursor) -> Result<(), StoreError> {
            self.save_cursors(vec![c.clone()]).await
        }
        async fn remember_job(&self, _: &Cursor) -> Result<(), StoreError> {
            Ok(())
        }
        async fn remember_jobs(&self, cursors: &[Cursor]) -> Result<(), StoreError> {
            self.batches.lock().unwrap_or_else(|p| p.into_inner()).push(
                cursors
                    .iter()
                    .map(|c| format!("remember {}", c.uid))
                    .collect(),
            );
            Ok(())
        }
        async fn install_time(&self, _: &str, now: &str) -> Result<String, StoreError> {
            Ok(now.to_string())
        }
        async fn write(&self, _: WriteBatch) -> Result<(), StoreError> {
            unreachable!("the cursor writer does not write batches yet")
        }
        async fn inbox(&self, _: &str) -> Result<Inbox, StoreError> {
            Ok(Inbox::default())
        }
        async fn save_cursors(&self, cursors: Vec<Cursor>) -> Result<(), StoreError> {
            self.gate.acquire().await.map(|p| p.forget()).ok();
            self.batches
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(cursors.iter().map(|c| c.uid.clone()).collect());
            if self.fail.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(StoreError::InvalidSelection("disk full".into()));
            }
            Ok(())
        }
        async fn remove_cursor(&self, _: &str, _: &str, uid: &str) -> Result<(), StoreError> {
            self.batches
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(vec![format!("remove {uid}")]);
            Ok(())
        }
        async fn add_dead_letter(
            &self,
            _: &str,
            _: &JobEvent,
            _: &str,
            _: u32,
        ) -> Result<i64, StoreError> {
            Ok(1)
        }
        async fn dead_letters(&self, _: Option<&str>) -> Result<Vec<DeadLetter>, StoreError> {
            Ok(Vec::new())
        }
        async fn drop_dead_letters(
            &self,
            _: Option<&str>,
            _: &[i64],
            _: bool,
        ) -> Result<u64, StoreError> {
            Ok(0)
        }
        async fn request_replay(
            &self,
            _: Option<&str>,
            _: &[i64],
            _: bool,
        ) -> Result<u64, StoreError> {
            Ok(0)
        }
        async fn take_replays(
            &self,
            _: &str,
            _: Option<&[String]>,
        ) -> Result<Vec<DeadLetter>, StoreError> {
            Ok(Vec::new())
        }
        async fn dead_letter_counts(&self) -> Result<BTreeMap<String, u64>, StoreError> {
            Ok(BTreeMap::new())
        }
        async fn check(&self) -> Result<(), StoreError> {
            Ok(())
        }
    }

    /// A save of `uid`'s cursor running on its own task, as a lane's worker would make it.
    fn saving(writer: &CursorWriter, uid: &str) -> tokio::task::JoinHandle<Result<(), String>> {
        let (writer, cursor) = (writer.clone(), cursor(uid));
        tokio::spawn(async move { writer.save(cursor).await.map_err(|e| e.to_string()) })
    }

    /// Long enough for spawned saves to reach the writer's queue.
    async fn settle() {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    fn cursor(uid: &str) -> Cursor {
        Cursor {
            plugin: "p".into(),
            cluster: "c".into(),
            uid: uid.into(),
            api_version: "batch/v1".into(),
            kind: "Job".into(),
            namespace: "ns".into(),
            name: uid.into(),
            resource_version: "1".into(),
            phase: Phase::Running,
            transition_time: String::new(),
            deleted: false,
        }
    }

    /// Cursors handed in while a write is in progress are stored together by the next write,
    /// and no save returns before the write holding its cursor has finished.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cursors_gather_behind_a_write_and_each_save_waits_for_its_own() {
        let store = Arc::new(Recording::default());
        let writer = CursorWriter::start(store.clone());
        let first = saving(&writer, "a");
        settle().await;
        let rest: Vec<_> = ["b", "c", "d"].map(|uid| saving(&writer, uid)).into();
        settle().await;
        assert!(
            !first.is_finished(),
            "a save returned before its write finished"
        );
        assert!(rest.iter().all(|r| !r.is_finished()));
        store.gate.add_permits(2);
        assert_eq!(first.await.expect("join"), Ok(()));
        for r in rest {
            assert_eq!(r.await.expect("join"), Ok(()));
        }
        let mut batches = store
            .batches
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        // The three saves are tasks of their own: the order they reach the writer in, and so
        // their order inside the batch, is the scheduler's (different jobs, so it does not
        // matter). Which batch each is in is the point.
        for batch in &mut batches {
            batch.sort();
        }
        assert_eq!(batches, vec![vec!["a"], vec!["b", "c", "d"]]);
    }

    /// Under a light load a save waits a moment for company: one handed in just after goes
    /// in the same statement; a save alone is still written once the linger is over.
    #[tokio::test(start_paused = true)]
    async fn a_small_batch_waits_a_moment_for_company_and_no_longer() {
        let store = Arc::new(Recording::default());
        store.gate.add_permits(10);
        let writer = CursorWriter::start(store.clone());
        let first = saving(&writer, "a");
        // The writer has taken `a` and, without the linger, would be writing it alone.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        let second = saving(&writer, "b");
        assert_eq!(first.await.expect("join"), Ok(()));
        assert_eq!(second.await.expect("join"), Ok(()));

        let before = tokio::time::Instant::now();
        assert_eq!(saving(&writer, "c").await.expect("join"), Ok(()));
        let waited = before.elapsed();
        assert!(
            waited >= LINGER && waited <= LINGER + Duration::from_millis(2),
            "a save alone waited {waited:?}"
        );
        let batches = store
            .batches
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        assert_eq!(batches, vec![vec!["a", "b"], vec!["c"]]);
    }

    /// Jobs only remembered ride with the next batch, written before its saves (an insert
    /// that keeps what is there, so it cannot undo an acknowledgement), and hold nobody up.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn remembered_jobs_go_with_the_next_batch_before_its_saves() {
        let store = Arc::new(Recording::default());
        let writer = CursorWriter::start(store.clone());
        let first = saving(&writer, "a");
        settle().await;
        writer.remember(cursor("new"));
        let second = saving(&writer, "b");
        settle().await;
        store.gate.add_permits(2);
        assert_eq!(first.await.expect("join"), Ok(()));
        assert_eq!(second.await.expect("join"), Ok(()));
        let batches = store
            .batches
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        assert_eq!(batches, vec![vec!["a"], vec!["remember new"], vec!["b"]]);
    }

    /// A job noted and then removed before the writer got to either: the note is written
    /// first, so the removal is what stays.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_removal_is_never_overtaken_by_an_earlier_note() {
        let store = Arc::new(Recording::default());
        let writer = CursorWriter::start(store.clone());
        let first = saving(&writer, "a");
        settle().await;
        writer.remember(cursor("gone"));
        let removed = tokio::spawn({
            let writer = writer.clone();
            async move { writer.remove(cursor("gone")).await }
        });
        settle().await;
        store.gate.add_permits(1);
        assert_eq!(first.await.expect("join"), Ok(()));
        assert!(removed.await.expect("join").is_ok());
        let batches = store
            .batches
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        assert_eq!(
            batches,
            vec![vec!["a"], vec!["remember gone"], vec!["remove gone"]]
        );
    }

    /// A failed write fails every save in its batch, with the store's reason.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_write_fails_each_of_its_saves() {
        let store = Arc::new(Recording::default());
        store.fail.store(true, std::sync::atomic::Ordering::SeqCst);
        store.gate.add_permits(10);
        let writer = CursorWriter::start(store.clone());
        let err = writer.save(cursor("a")).await.expect_err("disk full");
        assert!(err.to_string().contains("disk full"), "{err}");
    }
}
