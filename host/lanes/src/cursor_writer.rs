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

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::budget::MemoryBudget;
use jobrelay_contract::event::JobEvent;
use jobrelay_state::{Cursor, DeliveryStore, Settled, StoreError, Taken, WriteBatch};

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
    Remember(Cursor),
    /// A deleted job's cursor to forget (its deletion was acknowledged), with the mark it
    /// settles, answered once done.
    Remove(Cursor, Option<String>, Answer),
    /// Takes were handed over while the writer slept with none waiting: look at them.
    Wake,
    /// Answered once everything handed in before it was written or failed: `true` when no
    /// take is left unstored.
    Flush(oneshot::Sender<bool>),
}

/// What the lane hands the writer without waking it: events taken, and marks of events let
/// go without a call. Kept in the order handed over, which is the order of the lane's queue
/// operations (both are handed over while the lane holds its queues).
enum Handed {
    /// An event the lane took: into the inbox, marked for the lane's plugin, until a cursor
    /// settles it; with the bytes it charges to the budget until stored, and when it came.
    Take(Arc<JobEvent>, u64, Instant),
    /// An event the lane let go of without a call (a newer version replaced it): its mark.
    Drop(String),
}

/// The hand-over of takes and dropped marks from the lane to its writer.
///
/// A take is handed over for every queued event, and nobody waits for it: sent through the
/// writer's channel, each one woke the writer task — one wake-up per event besides the one
/// its acknowledgement costs, which at a few thousand events a second was most of what the
/// inbox cost. Here the lane appends to a list the writer empties at each of its rounds, and
/// the writer keeps a tick of [`TICK`] while takes keep coming, so a take is looked at in
/// time to be written when due. Only a take that finds the writer asleep (no take for
/// [`AWAKE_FOR`]) wakes it.
///
/// Order: the writer empties the list after receiving its requests, so a save it received
/// finds its take already there — the take was handed over before the event could be
/// called, the save after the call.
#[derive(Default)]
struct Handoff {
    handed: std::sync::Mutex<Vec<Handed>>,
    /// Set by the writer before it waits without a timer; the next take wakes it.
    asleep: std::sync::atomic::AtomicBool,
}

impl Handoff {
    fn list(&self) -> std::sync::MutexGuard<'_, Vec<Handed>> {
        self.handed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends `handed`; `true` when the writer is asleep and must be woken.
    fn hand(&self, handed: Handed) -> bool {
        self.list().push(handed);
        self.asleep.swap(false, Ordering::SeqCst)
    }

    /// Swaps the list for `spare` (empty), giving what was handed over, in order.
    fn take_all(&self, spare: &mut Vec<Handed>) {
        std::mem::swap(&mut *self.list(), spare);
    }

    /// Marks the writer asleep unless something waits in the list: `false` when it must not
    /// sleep. Set before the list is looked at, so a take handed over meanwhile either is seen
    /// here or sees the mark and wakes the writer.
    fn sleep(&self) -> bool {
        self.asleep.store(true, Ordering::SeqCst);
        if self.list().is_empty() {
            return true;
        }
        self.asleep.store(false, Ordering::SeqCst);
        false
    }
}

/// The handle a lane's workers save cursors through. Cheap to clone; the writer task ends
/// when the last handle is dropped, after answering every cursor it was given.
#[derive(Clone)]
pub struct CursorWriter {
    queue: mpsc::UnboundedSender<Pending>,
    handoff: Arc<Handoff>,
    budget: Arc<MemoryBudget>,
    /// Takes stored so far.
    written: Arc<AtomicU64>,
}

impl CursorWriter {
    /// Starts the writer task for `plugin`'s lane on `store`, on the current tokio runtime;
    /// events on their way to the inbox are charged to `budget`.
    pub fn start(
        plugin: &str,
        store: Arc<dyn DeliveryStore>,
        budget: Arc<MemoryBudget>,
    ) -> CursorWriter {
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
        CursorWriter {
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

    /// Notes a job seen for the first time ([`DeliveryStore::remember_job`]) with the next
    /// batch, without waiting: losing it only weakens deletion detection across a crash.
    pub fn remember(&self, cursor: Cursor) {
        if self.queue.send(Pending::Remember(cursor)).is_err() {
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

/// The events taken and not written yet, each with when it is due to be written. A take
/// settled before that (the lane kept up) is never written, nor is its mark: only a lagging
/// lane's events reach the inbox, and only they are encoded.
///
/// Kept in the order they are due, which is the order they came (each is due [`TAKE_DELAY`]
/// after it came; a failed batch's takes go back to the front with their own times): the takes
/// due are a prefix, so a round takes them from the front and leaves the rest untouched — with
/// thousands waiting behind a lagging lane, a round costs what it writes, not what waits.
#[derive(Default)]
struct RoundTakes {
    /// With the bytes each charges to the budget, and when it is due; `None` once settled.
    events: VecDeque<Option<(Arc<JobEvent>, u64, Instant)>>,
    /// Where each waiting take is: its number, counted from the writer's start; `first` is
    /// the number of `events[0]`.
    at: HashMap<String, u64>,
    first: u64,
}

impl RoundTakes {
    fn take(&mut self, event: Arc<JobEvent>, charge: u64, due: Instant) {
        self.at
            .insert(event.id.clone(), self.first + self.events.len() as u64);
        self.events.push_back(Some((event, charge, due)));
    }

    /// Drops settled takes from the front.
    fn trim(&mut self) {
        while let Some(None) = self.events.front() {
            self.events.pop_front();
            self.first += 1;
        }
    }

    /// When the first take is due, if any waits.
    fn next_due(&mut self) -> Option<Instant> {
        self.trim();
        self.events
            .front()
            .and_then(|t| t.as_ref())
            .map(|(_, _, due)| *due)
    }

    /// The takes due by `now` (all of them with `all`), in order, and — oldest first — as many
    /// more as charge `excess` bytes; the others stay.
    fn due(&mut self, now: Instant, all: bool, excess: u64) -> Vec<(Arc<JobEvent>, u64, Instant)> {
        let mut due = Vec::new();
        let mut covered = 0;
        loop {
            self.trim();
            match self.events.front() {
                Some(Some((_, _, at))) if all || *at <= now || covered < excess => {}
                _ => return due,
            }
            if let Some(Some((event, charge, at))) = self.events.pop_front() {
                // A later take of the same id keeps its own place.
                if self.at.get(&event.id) == Some(&self.first) {
                    self.at.remove(&event.id);
                }
                self.first += 1;
                covered += charge;
                due.push((event, charge, at));
            }
        }
    }

    /// Puts the takes of a failed batch back at the front, in the order they came and with
    /// the times they were due: they go with the next round, ahead of later takes.
    fn put_back(&mut self, failed: Vec<(Arc<JobEvent>, u64, Instant)>) {
        for (event, charge, due) in failed.into_iter().rev() {
            self.first -= 1;
            self.at.entry(event.id.clone()).or_insert(self.first);
            self.events.push_front(Some((event, charge, due)));
        }
    }

    /// The mark of `event_id` goes: cancelled if its take still waits (its charge given
    /// back), else removed.
    fn settle(
        &mut self,
        batch: &mut WriteBatch,
        plugin: &str,
        event_id: Option<String>,
        budget: &MemoryBudget,
    ) {
        let Some(event_id) = event_id else { return };
        match self.at.remove(&event_id) {
            Some(number) => {
                let waiting = usize::try_from(number - self.first)
                    .ok()
                    .and_then(|i| self.events.get_mut(i))
                    .and_then(Option::take);
                if let Some((_, charge, _)) = waiting {
                    budget.stored(charge);
                }
            }
            None => batch.settled.push(Settled {
                plugin: plugin.to_string(),
                event_id,
            }),
        }
    }

    fn is_empty(&mut self) -> bool {
        self.trim();
        self.events.is_empty()
    }

    /// The takes left standing, in order; empty afterwards.
    fn drain(&mut self) -> impl Iterator<Item = (Arc<JobEvent>, u64)> + '_ {
        self.at.clear();
        self.first += self.events.len() as u64;
        self.events
            .drain(..)
            .flatten()
            .map(|(event, charge, _)| (event, charge))
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
    let mut takes = RoundTakes::default();
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
                Pending::Remember(cursor) => batch.remembered.push(cursor),
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
            let (taken, noted) = (batch.taken.len(), batch.remembered.len());
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
        /// Fails every batch, saves or not (a full disk).
        fail_all: std::sync::atomic::AtomicBool,
    }

    impl Recording {
        /// The entries written so far, batch by batch.
        fn written(&self) -> Vec<Vec<String>> {
            self.batches
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
        }

        /// How many written entries hold `entry`.
        fn batches_with(&self, entry: &str) -> usize {
            self.written()
                .iter()
                .filter(|b| b.iter().any(|e| e == entry))
                .count()
        }
    }

    impl Default for Recording {
        fn default() -> Recording {
            Recording {
                batches: Mutex::default(),
                gate: tokio::sync::Semaphore::new(0),
                fail: std::sync::atomic::AtomicBool::new(false),
                fail_all: std::sync::atomic::AtomicBool::new(false),
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
        /// Records the batch's parts in its order, each as an entry of its own (takes, notes,
        /// saves, each removal, settles); holds a batch with saves at the gate and fails it
        /// when told to.
        async fn write(&self, batch: WriteBatch) -> Result<(), StoreError> {
            if !batch.saved.is_empty() {
                self.gate.acquire().await.map(|p| p.forget()).ok();
            }
            let mut entries: Vec<Vec<String>> = Vec::new();
            let mut part = |items: Vec<String>| {
                if !items.is_empty() {
                    entries.push(items);
                }
            };
            part(
                batch
                    .taken
                    .iter()
                    .map(|t| format!("take {}", t.event_id))
                    .collect(),
            );
            part(
                batch
                    .remembered
                    .iter()
                    .map(|c| format!("remember {}", c.uid))
                    .collect(),
            );
            part(batch.saved.iter().map(|c| c.uid.clone()).collect());
            for c in &batch.removed {
                part(vec![format!("remove {}", c.uid)]);
            }
            part(
                batch
                    .settled
                    .iter()
                    .map(|s| format!("settle {}", s.event_id))
                    .collect(),
            );
            self.batches
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend(entries);
            if self.fail_all.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(StoreError::InvalidSelection("disk full".into()));
            }
            if self.fail.load(std::sync::atomic::Ordering::SeqCst) && !batch.saved.is_empty() {
                return Err(StoreError::InvalidSelection("disk full".into()));
            }
            Ok(())
        }
        async fn inbox_page(&self, _: &str, _: i64, _: u32) -> Result<Inbox, StoreError> {
            Ok(Inbox::default())
        }
        async fn inbox_event(&self, _: &str) -> Result<jobrelay_state::Stored, StoreError> {
            Ok(jobrelay_state::Stored::Missing)
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
        tokio::spawn(async move { writer.save(cursor, None).await.map_err(|e| e.to_string()) })
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
        let writer = CursorWriter::start("p", store.clone(), MemoryBudget::unbounded());
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
        let writer = CursorWriter::start("p", store.clone(), MemoryBudget::unbounded());
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
        let writer = CursorWriter::start("p", store.clone(), MemoryBudget::unbounded());
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
        let writer = CursorWriter::start("p", store.clone(), MemoryBudget::unbounded());
        let first = saving(&writer, "a");
        settle().await;
        writer.remember(cursor("gone"));
        let removed = tokio::spawn({
            let writer = writer.clone();
            async move { writer.remove(cursor("gone"), None).await }
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
        let writer = CursorWriter::start("p", store.clone(), MemoryBudget::unbounded());
        let err = writer.save(cursor("a"), None).await.expect_err("disk full");
        assert!(err.to_string().contains("disk full"), "{err}");
    }

    /// A writer on a store that refuses every batch (a full disk), with a budget of 1 MiB.
    fn refusing_store() -> (Arc<Recording>, Arc<MemoryBudget>, CursorWriter) {
        let store = Arc::new(Recording::default());
        store
            .fail_all
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let budget = MemoryBudget::new(1 << 20);
        let writer = CursorWriter::start("p", store.clone(), budget.clone());
        (store, budget, writer)
    }

    fn event(uid: &str, rv: &str) -> JobEvent {
        serde_json::from_value(serde_json::json!({
            "id": format!("c/{uid}/{rv}"), "cluster": "c", "api_version": "batch/v1",
            "kind": "Job", "namespace": "ns", "name": uid, "uid": uid, "resource_version": rv,
            "phase": "running", "transition_time": "", "object_json": "{}"
        }))
        .expect("an event")
    }

    /// What a round does with the waiting takes, against a plain list: takes come in order,
    /// some are settled, a round takes those due (all of them for a flush, the oldest past an
    /// excess of bytes) and may fail and put them back. The takes waiting, their order, the
    /// next time due, the charges given back and the marks to remove are the list's.
    #[test]
    fn round_takes_behave_as_a_list_in_order() {
        use proptest::prelude::*;
        #[derive(Debug, Clone)]
        enum Op {
            Take(u64),
            Settle(usize),
            Round {
                later: u64,
                all: bool,
                excess: u64,
                fail: bool,
            },
        }
        let op = prop_oneof![
            3 => (1u64..50).prop_map(Op::Take),
            2 => (0usize..40).prop_map(Op::Settle),
            2 => (0u64..40, any::<bool>(), 0u64..120, any::<bool>())
                .prop_map(|(later, all, excess, fail)| Op::Round { later, all, excess, fail }),
        ];
        proptest!(|(ops in proptest::collection::vec(op, 1..60))| {
            let start = Instant::now();
            let budget = MemoryBudget::new(1 << 30);
            let mut takes = RoundTakes::default();
            // (id, charge, due), in order.
            let mut model: Vec<(String, u64, Instant)> = Vec::new();
            let mut now = start;
            let mut next = 0;
            // Charged by takes, less those settled while they waited (given back).
            let mut unstored = 0;
            for op in ops {
                match op {
                    Op::Take(charge) => {
                        let e = event(&format!("u{next}"), "1");
                        next += 1;
                        let due = now + TAKE_DELAY;
                        budget.hold(charge);
                        unstored += charge;
                        model.push((e.id.clone(), charge, due));
                        takes.take(Arc::new(e), charge, due);
                    }
                    Op::Settle(n) => {
                        let id = format!("c/u{n}/1");
                        let mut batch = WriteBatch::default();
                        takes.settle(&mut batch, "p", Some(id.clone()), &budget);
                        let waited = model.iter().position(|(i, _, _)| *i == id);
                        if let Some(i) = waited {
                            unstored -= model.remove(i).1;
                        }
                        prop_assert_eq!(batch.settled.is_empty(), waited.is_some());
                    }
                    Op::Round { later, all, excess, fail } => {
                        now += Duration::from_millis(later);
                        let got = takes.due(now, all, excess);
                        let mut covered = 0;
                        let mut want = 0;
                        for (_, charge, due) in &model {
                            if all || *due <= now || covered < excess {
                                covered += charge;
                                want += 1;
                            } else {
                                break;
                            }
                        }
                        let taken: Vec<_> = model.drain(..want).collect();
                        prop_assert_eq!(
                            got.iter().map(|(e, _, _)| e.id.clone()).collect::<Vec<_>>(),
                            taken.iter().map(|(i, _, _)| i.clone()).collect::<Vec<_>>()
                        );
                        if fail {
                            takes.put_back(got);
                            model.splice(0..0, taken);
                        }
                    }
                }
                prop_assert_eq!(budget.unstored(), unstored);
                prop_assert_eq!(takes.is_empty(), model.is_empty());
                prop_assert_eq!(takes.next_due(), model.first().map(|(_, _, d)| *d));
            }
            let left: Vec<String> = takes.drain().map(|(e, _)| e.id.clone()).collect();
            prop_assert_eq!(left, model.iter().map(|(i, _, _)| i.clone()).collect::<Vec<_>>());
        });
    }

    /// A take is charged to the budget until stored. One whose batch failed is not dropped
    /// (the lane may hold it only as its place): it is written again, and its charge is given
    /// back once it is stored.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_take_whose_batch_failed_is_written_with_the_next() {
        let (store, budget, writer) = refusing_store();
        writer.take(event("u", "7"), 1_000);
        assert!(budget.held() > 0, "a take is charged");
        let started = std::time::Instant::now();
        while store.batches_with("take c/u/7") == 0 {
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "the take is never written"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(budget.held() > 0, "a take not stored keeps its charge");
        store
            .fail_all
            .store(false, std::sync::atomic::Ordering::SeqCst);
        assert!(writer.flush().await, "every take is stored");
        assert_eq!(budget.held(), 0, "a stored take gives its charge back");
        assert_eq!(
            store.batches_with("take c/u/7"),
            2,
            "written with the failed batch, then with the next"
        );
    }

    /// A take waits a little before it is written: one whose event is settled meanwhile (the
    /// plugin kept up) is never written, nor its mark; one still waiting when it is due is
    /// written with nothing else coming.
    #[tokio::test(start_paused = true)]
    async fn a_take_settled_before_it_is_due_is_never_written() {
        let store = Arc::new(Recording::default());
        store.gate.add_permits(10);
        let budget = MemoryBudget::new(1 << 20);
        let writer = CursorWriter::start("p", store.clone(), budget.clone());
        writer.take(event("u", "7"), 1_000);
        writer.take(event("w", "8"), 1_000);
        tokio::time::sleep(TAKE_DELAY / 4).await;
        writer
            .save(cursor("u"), Some("c/u/7".into()))
            .await
            .expect("saved");
        tokio::time::sleep(TAKE_DELAY * 2).await;
        let entries: Vec<String> = store
            .batches
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .flatten()
            .cloned()
            .collect();
        assert!(
            !entries.iter().any(|e| e.contains("c/u/7")),
            "the settled take or its mark was written: {entries:?}"
        );
        assert!(
            entries.iter().any(|e| e == "take c/w/8"),
            "the unsettled take was not written when due: {entries:?}"
        );
        assert_eq!(budget.held(), 0, "both charges given back");
    }

    /// Past half the write-ahead, only the oldest takes go early — as many as bring the bytes
    /// waiting back under it — and the younger ones still wait their delay (they are the
    /// likeliest to be settled before it ends).
    #[tokio::test(start_paused = true)]
    async fn under_pressure_only_the_oldest_takes_go_early() {
        let store = Arc::new(Recording::default());
        let budget = MemoryBudget::new(1 << 20);
        let half = budget.write_ahead() / 2;
        let writer = CursorWriter::start("p", store.clone(), budget.clone());
        // Three takes of 40% of half the write-ahead each: 120%, so one must go early.
        for (uid, rv) in [("a", "1"), ("b", "2"), ("c", "3")] {
            writer.take(event(uid, rv), half * 2 / 5);
        }
        tokio::time::sleep(TAKE_DELAY / 4).await;
        assert_eq!(store.written(), vec![vec!["take c/a/1".to_string()]]);
        tokio::time::sleep(TAKE_DELAY * 2).await;
        assert_eq!(
            store.written()[1..],
            [vec!["take c/b/2".to_string(), "take c/c/3".to_string()]],
            "the others when due"
        );
    }

    /// Takes kept from a failed batch do not wait for their retry time once the store takes
    /// writes again: they go with the next round that comes, ahead of later takes, so a full
    /// disk freed again stores them at once and in the order they came.
    #[tokio::test(start_paused = true)]
    async fn kept_takes_go_with_the_next_round_first() {
        let store = Arc::new(Recording::default());
        store.gate.add_permits(10);
        store
            .fail_all
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let budget = MemoryBudget::new(1 << 20);
        let writer = CursorWriter::start("p", store.clone(), budget.clone());
        writer.take(event("u", "7"), 1_000);
        tokio::time::sleep(TAKE_DELAY * 2).await;
        assert_eq!(store.written(), vec![vec!["take c/u/7".to_string()]]);
        store
            .fail_all
            .store(false, std::sync::atomic::Ordering::SeqCst);
        writer.take(event("w", "8"), 1_000);
        // Well before the retry time: only this round's arrival can carry the kept take.
        writer.save(cursor("x"), None).await.expect("saved");
        assert_eq!(
            store.written()[1..],
            [vec!["take c/u/7".to_string()], vec!["x".to_string()]],
            "the kept take went with the save's round; the new one is not due yet"
        );
        assert!(writer.flush().await, "every take is stored");
        assert_eq!(store.written()[3..], [vec!["take c/w/8".to_string()]]);
        assert_eq!(budget.held(), 0, "both charges given back");
    }

    /// Takes kept from a failed batch are written again on their own, with nothing else
    /// coming: a quiet lane's only copy of an event does not wait for the next event to be
    /// stored. The lanes' write health follows (failing, then not).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn kept_takes_are_written_again_without_a_new_request() {
        let (store, budget, writer) = refusing_store();
        writer.take(event("u", "7"), 1_000);
        let started = std::time::Instant::now();
        while store.batches_with("take c/u/7") < 2 {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "never tried again"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            budget.writes().failing().is_some(),
            "the failure is reported"
        );
        assert_eq!(budget.held(), 1_000, "kept, and still charged");
        store
            .fail_all
            .store(false, std::sync::atomic::Ordering::SeqCst);
        while budget.held() > 0 {
            assert!(started.elapsed() < Duration::from_secs(20), "never stored");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(budget.writes().failing().is_none(), "writes succeed again");
        drop(writer);
    }

    /// Takes are handed over without waking the writer while takes keep coming (its tick looks
    /// at them); once none came for a while the writer sleeps with no timer, and the next take
    /// wakes it — and is still written when due with nothing else coming.
    #[tokio::test(start_paused = true)]
    async fn a_sleeping_writer_is_woken_by_the_next_take_and_writes_it_when_due() {
        let store = Arc::new(Recording::default());
        let budget = MemoryBudget::new(1 << 20);
        let writer = CursorWriter::start("p", store.clone(), budget.clone());
        writer.take(event("u", "7"), 1_000);
        tokio::time::sleep(TAKE_DELAY + TICK * 2).await;
        assert_eq!(store.batches_with("take c/u/7"), 1, "written when due");
        tokio::time::sleep(AWAKE_FOR + TICK * 2).await;
        assert!(
            writer.handoff.asleep.load(Ordering::SeqCst),
            "an idle writer keeps no timer"
        );
        writer.take(event("w", "8"), 1_000);
        assert!(
            !writer.handoff.asleep.load(Ordering::SeqCst),
            "the take woke it"
        );
        tokio::time::sleep(TAKE_DELAY + TICK * 2).await;
        assert_eq!(store.batches_with("take c/w/8"), 1, "written when due");
        assert_eq!(budget.held(), 0, "both charges given back");
        assert_eq!(writer.written(), 2);
    }

    /// While the store refuses batches, the writer's tick does not write the kept takes again
    /// before their retry time: the backoff holds however often the writer wakes.
    #[tokio::test(start_paused = true)]
    async fn the_tick_keeps_the_retry_backoff() {
        let (store, _budget, writer) = refusing_store();
        writer.take(event("u", "7"), 1_000);
        // Takes keep coming, so the writer ticks all along.
        for i in 0..40 {
            tokio::time::sleep(TICK).await;
            let id = format!("x{i}");
            writer.take(event(&id, "1"), 10);
            writer.drop_mark(format!("c/{id}/1"));
        }
        // 400 ms: the first write when due (20 ms) failed; the retry is 500 ms after it.
        assert_eq!(store.batches_with("take c/u/7"), 1, "tried again too soon");
        tokio::time::sleep(RETRY_FIRST).await;
        assert_eq!(
            store.batches_with("take c/u/7"),
            2,
            "tried again at its time"
        );
        drop(writer);
    }

    /// A take settled in the same round (the lane kept up) is written neither as an event nor
    /// as a mark; one settled in a later round is written first, and its mark goes with the
    /// cursor. A flush returns once what was handed in before it is written.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn only_takes_still_waiting_at_the_end_of_a_round_reach_the_inbox() {
        let store = Arc::new(Recording::default());
        store.gate.add_permits(10);
        let writer = CursorWriter::start("p", store.clone(), MemoryBudget::unbounded());
        writer.take(event("u", "7"), 1_000);
        writer
            .save(cursor("u"), Some("c/u/7".into()))
            .await
            .expect("saved");
        writer.take(event("v", "8"), 1_000);
        writer.flush().await;
        writer
            .save(cursor("v"), Some("c/v/8".into()))
            .await
            .expect("saved");
        let batches = store
            .batches
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        assert_eq!(
            batches,
            vec![
                vec!["u".to_string()],
                vec!["take c/v/8".to_string()],
                vec!["v".to_string()],
                vec!["settle c/v/8".to_string()],
            ]
        );
    }
}
