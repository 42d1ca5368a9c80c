//! The lane's writer: everything a lane writes to the store — the events it takes into the
//! inbox, first sights of jobs, acknowledgements' cursors, removals of deleted jobs, marks of
//! events let go, and the inbox's periodic sweep — by group commit, one transaction a round.
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
//! The writer also takes the lane's queued events into the store's inbox (see
//! `jobrelay_state`'s `inbox`), in the same batches: a take stored no later than the save
//! that settles it, and not at all when that save arrives before the take is due
//! (`TAKE_DELAY` after it came; at once for a flush, and for the oldest takes while those
//! waiting pass half the budget's write-ahead). Takes reach the writer through a list it
//! empties at each round rather than through its channel (`Handoff`), so a take costs no
//! wake-up of its own. A take is charged to the process-wide
//! [`MemoryBudget`] until it is stored (or cancelled), and one whose batch failed is kept and
//! written with the next round, ahead of later takes: a lane may have queued the event as its
//! place alone, so the writer's copy is the only one until the store has it.
//!
//! This is the only batching of a cursor write. The SQLite store's thread
//! (`jobrelay_state`'s `sqlite_writer`) merges nothing: it runs each batch it is handed as
//! one transaction, in the order the lanes' writers hand them over.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use self::handoff::{Handed, Handoff};
use self::take_schedule::TakeSchedule;
use crate::budget::MemoryBudget;
use jobrelay_contract::event::JobEvent;
use jobrelay_state::{Cursor, DeliveryStore, StoreError, Taken, WriteBatch};

mod handoff;
mod take_schedule;

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

/// Most cursor statements (saves, notes, removals) in one round. A lane far behind its watch
/// catches up in rounds this large; the store splits them into statements of its own size.
const MAX_BATCH: usize = 1024;

/// A batch smaller than this waits [`LINGER`] for more before it is written.
const LINGER_BELOW: usize = 8;

/// How long a small batch waits for company.
const LINGER: Duration = Duration::from_micros(500);

/// How long a take waits before it is written, unless a flush asks for it or it is among the
/// oldest takes past half the budget's write-ahead: a lane that keeps up settles most events
/// within this, and a take settled before it is written is never written at all — its row,
/// its mark and the mark's removal saved. What a kill can take along stays bounded by the
/// write-ahead.
const TAKE_DELAY: Duration = Duration::from_millis(20);

/// While takes keep coming, the writer looks at the hand-over at least this often, so a take
/// is written no later than this after it is due.
const TICK: Duration = Duration::from_millis(10);

/// How long after the last take the writer keeps its [`TICK`]; after that it sleeps until a
/// request or a take wakes it, so an idle lane costs no wake-ups.
const AWAKE_FOR: Duration = Duration::from_secs(1);

/// How soon takes kept from a failed batch are written again when nothing else comes (they go
/// with any round before), doubling up to [`RETRY_MOST`] while the store keeps refusing them.
const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_MOST: Duration = Duration::from_secs(30);

/// How often a writer asks the store to sweep the inbox's unmarked events.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// What a lane's worker (or the lane itself) asks the writer to do.
enum Pending {
    /// An acknowledgement's cursor, and the inbox mark it settles (none for a replayed dead
    /// letter), answered once stored.
    Save(Cursor, Option<String>, Answer),
    /// A job seen, nothing delivered yet; nobody waits for it.
    FirstSight(Cursor),
    /// A deleted job's cursor to forget (its deletion was acknowledged), with the mark it
    /// settles, answered once done.
    Remove(Cursor, Option<String>, Answer),
    /// Takes were handed over while the writer slept with none waiting: look at them.
    Wake,
    /// Answered once everything handed in before it was written or failed: `true` when no
    /// take is left unstored.
    Flush(oneshot::Sender<bool>),
}

/// The handle a lane's workers save cursors through. Cheap to clone; the writer task ends
/// when the last handle is dropped, after answering every cursor it was given.
#[derive(Clone)]
pub struct LaneWriter {
    queue: mpsc::UnboundedSender<Pending>,
    handoff: Arc<Handoff>,
    budget: Arc<MemoryBudget>,
    /// Takes stored so far.
    written: Arc<AtomicU64>,
}

impl LaneWriter {
    /// Starts the writer task for `plugin`'s lane on `store`, on the current tokio runtime;
    /// events on their way to the inbox are charged to `budget`.
    pub fn start(
        plugin: &str,
        store: Arc<dyn DeliveryStore>,
        budget: Arc<MemoryBudget>,
    ) -> LaneWriter {
        let (queue, pending) = mpsc::unbounded_channel();
        let written = Arc::new(AtomicU64::new(0));
        let handoff = Arc::new(Handoff::default());
        tokio::spawn(write_batches(
            plugin.to_string(),
            store,
            budget.clone(),
            written.clone(),
            handoff.clone(),
            pending,
        ));
        LaneWriter {
            queue,
            handoff,
            budget,
            written,
        }
    }

    /// How many taken events this writer has stored in the inbox (the others were settled
    /// before they were due).
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Stores `cursor` and settles the inbox mark `settles` (the event's id), returning once
    /// both are durable (or the write failed, with why).
    pub async fn save(&self, cursor: Cursor, settles: Option<String>) -> Result<(), WriteError> {
        self.answered(|done| Pending::Save(cursor, settles, done))
            .await
    }

    /// Forgets the job of `cursor` (its deletion was acknowledged) and settles the mark
    /// `settles`, returning once done. Through the writer like every other write of the lane,
    /// so a note of the job queued earlier cannot land after the removal and bring the job
    /// back.
    pub async fn remove(&self, cursor: Cursor, settles: Option<String>) -> Result<(), WriteError> {
        self.answered(|done| Pending::Remove(cursor, settles, done))
            .await
    }

    async fn answered(&self, request: impl FnOnce(Answer) -> Pending) -> Result<(), WriteError> {
        let (done, answer) = oneshot::channel();
        self.queue
            .send(request(done))
            .map_err(|_| WriteError::Stopped)?;
        answer.await.map_err(|_| WriteError::Unanswered)?
    }

    /// Notes a job seen for the first time ([`DeliveryStore::note_first_sight`]) with the next
    /// batch, without waiting: losing it only weakens deletion detection across a crash.
    pub fn note_first_sight(&self, cursor: Cursor) {
        if self.queue.send(Pending::FirstSight(cursor)).is_err() {
            tracing::debug!("the cursor writer has stopped; a newly seen job is not noted");
        }
    }

    /// Forgets the job of `cursor` with the next batch, without waiting: a job the lane's
    /// filter let go. Losing it in a crash only leaves a cursor that the job's next version
    /// lets go again.
    pub fn forget(&self, cursor: Cursor) {
        let (done, _unheard) = oneshot::channel();
        if self
            .queue
            .send(Pending::Remove(cursor, None, done))
            .is_err()
        {
            tracing::debug!("the cursor writer has stopped; a job let go keeps its cursor");
        }
    }

    /// Takes `event` into the inbox, without waiting: written once due unless its cursor comes
    /// first. Handed in before the event can be called (the lane holds its queue while it
    /// does), so the writer sees the take before the save that settles it (see [`Handoff`]).
    /// `charge` is what holding the event costs ([`charge_of`](crate::budget::charge_of)),
    /// held on the budget until it is stored; the lane's queue reckoned it already.
    pub fn take(&self, event: impl Into<Arc<JobEvent>>, charge: u64) {
        if self.queue.is_closed() {
            tracing::debug!("the cursor writer has stopped; an event is held in memory only");
            return;
        }
        self.budget.hold(charge);
        self.hand(Handed::Take(event.into(), charge, Instant::now()));
    }

    /// Settles the mark of an event the lane let go of without a call, with the next batch.
    pub fn drop_mark(&self, event_id: String) {
        if self.queue.is_closed() {
            tracing::debug!("the cursor writer has stopped; a replaced event keeps its mark");
            return;
        }
        self.hand(Handed::Drop(event_id));
    }

    fn hand(&self, handed: Handed) {
        if self.handoff.hand(handed) {
            // A writer gone meanwhile gives back what it held when it ends.
            let _ = self.queue.send(Pending::Wake);
        }
    }

    /// Returns once everything handed in before is written (or failed): for a lane that
    /// closes, so what it took is in the inbox before the process ends, and for a worker about
    /// to read back an event it queued as its place alone. `true`: every take is stored.
    pub async fn flush(&self) -> bool {
        let (done, flushed) = oneshot::channel();
        if self.queue.send(Pending::Flush(done)).is_err() {
            return false;
        }
        flushed.await.unwrap_or(false)
    }
}

/// Takes the first waiting request, then every other one already waiting (up to
/// [`MAX_BATCH`]; a batch of fewer than [`LINGER_BELOW`] waits [`LINGER`] for more), writes
/// them as one [`WriteBatch`] — one transaction: events taken, jobs noted, cursors saved and
/// removed, marks settled, in that order, so a note never lands after the removal of its job
/// and a take never after the save that settles it — and answers each; until every handle is
/// gone. A batch holds at most one save or removal per job: a job's next event waits for its
/// previous acknowledgement.
async fn write_batches(
    plugin: String,
    store: Arc<dyn DeliveryStore>,
    budget: Arc<MemoryBudget>,
    written: Arc<AtomicU64>,
    handoff: Arc<Handoff>,
    mut pending: mpsc::UnboundedReceiver<Pending>,
) {
    let mut requests = Vec::new();
    let mut handed = Vec::new();
    let mut last_take: Option<Instant> = None;
    let mut waiters = Vec::new();
    let mut flushes = Vec::new();
    let mut takes = TakeSchedule::default();
    let mut swept = tokio::time::Instant::now();
    let mut retry = RETRY_FIRST;
    // Set while the store refuses batches: takes kept from a failed one go with any round
    // that comes, but a round of their own waits until then.
    let mut retry_at: Option<Instant> = None;
    loop {
        // Takes are written when due even if nothing else comes: they may be the only copy
        // of a spilled event, and until they are stored a kill loses them.
        let due = takes.next_due().map(|due| match retry_at {
            Some(at) => due.max(at),
            None => due,
        });
        // While takes keep coming, a tick looks at the hand-over; past that the writer
        // sleeps, and the next take wakes it.
        let tick = last_take
            .filter(|at| at.elapsed() < AWAKE_FOR)
            .map(|_| Instant::now() + TICK);
        let mut wake = match (due, tick) {
            (Some(d), Some(t)) => Some(d.min(t)),
            (d, t) => d.or(t),
        };
        if wake.is_none() && !handoff.sleep() {
            wake = Some(Instant::now());
        }
        let received = match wake {
            None => pending.recv_many(&mut requests, MAX_BATCH).await,
            Some(wake) => {
                let receive = pending.recv_many(&mut requests, MAX_BATCH);
                tokio::time::timeout_at(wake, receive)
                    .await
                    .unwrap_or(usize::MAX) // a round of the takes due alone
            }
        };
        if received == 0 {
            break;
        }
        // A round the timer began (takes due, or the tick) does not wait for company.
        if received != usize::MAX && requests.len() < LINGER_BELOW {
            // Ends early once the batch is full or every handle is gone.
            let _ = tokio::time::timeout(LINGER, async {
                while requests.len() < MAX_BATCH {
                    let room = MAX_BATCH - requests.len();
                    if pending.recv_many(&mut requests, room).await == 0 {
                        break;
                    }
                }
            })
            .await;
        }
        let mut batch = WriteBatch::default();
        // After the requests: every save received has its take in the list already.
        handoff.take_all(&mut handed);
        for item in handed.drain(..) {
            match item {
                Handed::Take(event, charge, came) => {
                    last_take = Some(came);
                    takes.take(event, charge, came + TAKE_DELAY)
                }
                Handed::Drop(event_id) => {
                    takes.settle(&mut batch, &plugin, Some(event_id), &budget)
                }
            }
        }
        for request in requests.drain(..) {
            match request {
                Pending::Save(cursor, settles, done) => {
                    batch.saved.push(cursor);
                    takes.settle(&mut batch, &plugin, settles, &budget);
                    waiters.push(done);
                }
                Pending::FirstSight(cursor) => batch.first_sights.push(cursor),
                Pending::Remove(cursor, settles, done) => {
                    batch.removed.push(cursor);
                    takes.settle(&mut batch, &plugin, settles, &budget);
                    waiters.push(done);
                }
                Pending::Wake => {}
                Pending::Flush(done) => flushes.push(done),
            }
        }
        if !batch.settled.is_empty() && swept.elapsed() >= SWEEP_EVERY {
            batch.sweep = true;
            swept = tokio::time::Instant::now();
        }
        // Kept until the batch is stored: a take whose batch fails is written with the next.
        let mut writing = Vec::new();
        // Past half the write-ahead, the oldest takes go early, as many as bring it back: not
        // all of them, since the youngest are the likeliest to be settled before they are due.
        let excess = budget.unstored().saturating_sub(budget.write_ahead() / 2);
        // While the store refuses batches, a round the timer began leaves the takes for the
        // retry time; any other round takes them along.
        let backing_off = received == usize::MAX && retry_at.is_some_and(|at| Instant::now() < at);
        let due = if backing_off {
            Vec::new()
        } else {
            takes.due(Instant::now(), !flushes.is_empty(), excess)
        };
        for (event, charge, due) in due {
            match Taken::of(&plugin, &event) {
                Ok(taken) => {
                    batch.taken.push(taken);
                    writing.push((event, charge, due));
                }
                Err(e) => {
                    budget.stored(charge);
                    tracing::error!(plugin = %plugin, event = %event.id, error = %e,
                        "cannot encode an event for the inbox; it is not kept")
                }
            }
        }
        if !batch.is_empty() {
            let (taken, noted) = (batch.taken.len(), batch.first_sights.len());
            let result = store
                .write(batch)
                .await
                .map_err(|e| WriteError::Store(Arc::new(e)));
            match &result {
                Ok(()) => {
                    retry = RETRY_FIRST;
                    retry_at = None;
                    budget.writes().succeeded();
                    written.fetch_add(writing.len() as u64, Ordering::Relaxed);
                    for (_, charge, _) in writing {
                        budget.stored(charge);
                    }
                }
                Err(e) => {
                    budget.writes().failed(&e.to_string());
                    if taken > 0 || noted > 0 {
                        tracing::warn!(plugin = %plugin, taken, noted, error = %e,
                            "cannot write taken events and newly seen jobs; the events are \
                             written with the next batch");
                    }
                    retry_at = Some(Instant::now() + retry);
                    retry = (retry * 2).min(RETRY_MOST);
                    takes.put_back(writing);
                }
            }
            for waiter in waiters.drain(..) {
                let _ = waiter.send(result.clone());
            }
        }
        for done in flushes.drain(..) {
            let _ = done.send(takes.is_empty());
        }
    }
    // Every handle is gone (the lane was dropped): what could not be stored is let go.
    let mut lost = 0;
    handoff.take_all(&mut handed);
    for item in handed.drain(..) {
        if let Handed::Take(_, charge, _) = item {
            budget.stored(charge);
            lost += 1;
        }
    }
    for (_, charge) in takes.drain() {
        budget.stored(charge);
        lost += 1;
    }
    if lost > 0 {
        tracing::warn!(plugin = %plugin, events = lost,
            "the lane is gone with events its writer could not store in the inbox");
    }
}

#[cfg(test)]
mod tests;
