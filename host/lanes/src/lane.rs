//! One plugin's lane: per-job FIFO queues drained by a pool of workers (one per busy job, at
//! most [`MAX_WORKERS`](crate::queue::MAX_WORKERS); jobs beyond wait their turn), under a
//! semaphore that bounds how many calls the plugin handles at once.
//!
//! - **Order**: a job has at most one worker, which handles its events one at a time; a failing
//!   event is retried (with backoff, under the plugin's rate limits) before the job's next
//!   event, so order is kept. Other jobs go on meanwhile.
//! - **What is queued** is decided by the plugin's delivery mode ([`super::mode`]) against what
//!   the lane accepted for the job, so a job's queue never holds more than its mode needs
//!   (`latest`: the newest version, beside one in flight; `terminal`: at most two).
//!   `every-version` and `transitions` need every queued version, so their queues are bounded
//!   by `max_queued_per_job`, and the lane by `max_inbox_events`: a version beyond either goes
//!   to the dead-letter list (durable, replayable) rather than into memory and the inbox.
//! - **Memory**: a queued version is kept whole only while the process-wide
//!   [`MemoryBudget`](crate::budget::MemoryBudget) has room; otherwise its place alone is
//!   queued and the worker reads it back from the inbox in its turn.
//! - **Durability**: after a call succeeds (or its event is dead-lettered) the job's cursor is
//!   written to the state store before the job's next event starts. After a restart the lane
//!   starts from those cursors, so versions already handled are skipped.
//! - **Hot reload**: the plugin version is looked up when a call starts, not when an event is
//!   queued: a reload swaps the version in place and the queues are untouched, so no event is
//!   dropped or handled twice by a reload, and calls in flight finish on their version.
//!
//! The rules of the queues are the pure state machine in [`super::queue`]; this file is the
//! lane's face (push, list reports, reconfigure, stats, let go of a cluster, close) and its
//! state, made of named parts:
//!
//! - `lane/open.rs`: opening — the stored cursors into the queues, the install time;
//! - `lane/inbox.rs`: resuming the events the inbox still holds, and reloading the cursors;
//! - `lane/worker.rs`: a worker — takes a job's head, calls the plugin with retries;
//! - `lane/settle.rs`: records a call's outcome — the dead letter, then the cursor — and pops
//!   the head, in one place;
//! - `lane/dead_letters.rs`: both ways to the dead-letter list (a call given up, a version
//!   over a bound);
//! - [`writer`]: the [`LaneWriter`](writer::LaneWriter), which writes everything the lane
//!   stores (takes, first sights, cursors, removals, marks, sweeps) by group commit;
//! - `lane/stops.rs`: the lane's stop and wait signals (closed, a cluster let go, no version
//!   yet, rate limits changed) and the waits on them;
//! - `lane/counters.rs`: what the lane counts, and [`LaneStats`];
//! - `lane/filtering.rs`: what the lane does with its plugin's filter.
//!
//! One event's way: [`Lane::push`] offers it to the queues, which hand its take to the writer
//! in the same step ([`InboxChanges`]) and start a worker for its job; the worker takes the
//! job's head, calls the plugin and returns the outcome; settling records it and pops the head.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use arc_swap::{ArcSwap, ArcSwapOption};
use parking_lot::Mutex;
use tokio::sync::{Notify, Semaphore};
use tokio_util::task::TaskTracker;

use super::filter::Verdict;
use super::finalizer_book::FinalizerBook;
use super::handler::Handler;
use super::mode::{Accepted, DeliveryMode};
use super::queue::{InboxChanges, JobDelivery, Queues};
use super::rate_limit::RateLimits;
use super::read_back::ReadBacks;
use super::settings::LaneSettings;
use super::trace::{DeliveryTrace, TraceEntry};
use jobrelay_contract::event::{JobEvent, JobKey};
use jobrelay_contract::fleet;
use jobrelay_state::DeliveryStore;
use jobrelay_watch::catch_up::{self, LastAccepted};

/// What a lane is offered: a stream's observations, as the watch made them.
pub use jobrelay_watch::tracker::{Listed, Observed};

pub use self::counters::LaneStats;
use self::counters::{Counters, add};
use self::dead_letters::{Overflow, overflow_to_dead_letters};
use self::open::windows;
use self::stops::Stops;
use self::worker::work;
use self::writer::LaneWriter;

mod counters;
mod dead_letters;
mod filtering;
mod inbox;
mod open;
mod settle;
mod stops;
mod worker;
pub mod writer;

/// Where an offered event comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Provenance {
    /// Seen by a watch (or made from what one saw): taken into the inbox when queued.
    Observed,
    /// Read back from the inbox: already there, waiting since it was taken (by this
    /// process or an earlier one), which the lane's age counts from.
    Resumed {
        /// When it was taken into the inbox, on this process's clock.
        since: Instant,
    },
}

/// A lane's state, shared by its handle, its workers and its tasks.
struct Inner {
    name: String,
    /// The handler the next call uses (double `Arc`: `ArcSwap` needs a sized pointee).
    plugin: ArcSwap<Arc<dyn Handler>>,
    settings: ArcSwap<LaneSettings>,
    permits: ArcSwap<Semaphore>,
    concurrency: AtomicUsize,
    /// The rate limits and the calls they count; one log for the lane's life, so a reload
    /// that changes the limits counts the calls made before it.
    limits: RateLimits,
    /// Every job's queue; one lock, held only for a step of the queue state machine.
    queues: Mutex<Queues>,
    store: Arc<dyn DeliveryStore>,
    /// Everything the lane writes to the store, by group commit (see [`LaneWriter`]).
    writer: LaneWriter,
    /// Reads of spilled events back from the inbox, gathered into batches.
    read_backs: ReadBacks,
    /// When the plugin was first installed (from the state store): jobs created before it get
    /// their current state, not their history. `None`: the stored time does not parse, and
    /// every job gets its history (at least once wins over quiet).
    installed_at: Option<chrono::DateTime<chrono::FixedOffset>>,
    /// When the filter last changed in this process: a job it takes from then on that the
    /// lane did not know gets its current state, not its history — the versions the old
    /// filter skipped were not missed by the plugin.
    filter_changed_at: ArcSwapOption<chrono::DateTime<chrono::FixedOffset>>,
    /// Holds on jobs being deleted, told when this lane is done with a job.
    book: Option<Arc<FinalizerBook>>,
    workers: TaskTracker,
    /// Closed, clusters let go, serving, limits changed: what stops or wakes a wait.
    stops: Stops,
    counters: Counters,
    /// When a failing filter expression was last warned of.
    filter_warned: Mutex<Option<Instant>>,
    /// The latest outcomes, job by job, for the job view.
    trace: DeliveryTrace,
    /// Woken whenever the lane may have become idle.
    settled: Notify,
    /// Versions over a bound, on their way to the dead-letter list.
    overflow: Overflow,
}

/// The lane's writer as the queues' [`InboxChanges`]: takes and dropped marks handed on in
/// the offer's own step.
struct ToWriter<'a>(&'a LaneWriter);

impl InboxChanges for ToWriter<'_> {
    fn take(&mut self, event: Arc<JobEvent>, charge: u64) {
        self.0.take(event, charge);
    }

    fn replaced(&mut self, event_id: String) {
        self.0.drop_mark(event_id);
    }
}

/// A cheap handle to one plugin's lane.
#[derive(Clone)]
pub struct Lane {
    inner: Arc<Inner>,
}

impl Lane {
    /// Whether a version is installed (see [`open_waiting`](Lane::open_waiting)).
    pub fn serving(&self) -> bool {
        self.inner.stops.serving()
    }

    /// The handler (plugin version) that the next call will use.
    pub fn plugin(&self) -> Arc<dyn Handler> {
        Arc::clone(&**self.inner.plugin.load())
    }

    /// Whether this lane takes events of the given kind name (empty list: all kinds).
    pub fn wants(&self, kind_name: &str) -> bool {
        let settings = self.inner.settings.load();
        settings.kinds.is_empty() || settings.kinds.iter().any(|k| k == kind_name)
    }

    /// Install a new plugin version and settings. Queued events go to the new version; calls
    /// in flight finish on the old one.
    pub fn reconfigure(&self, plugin: Arc<dyn Handler>, settings: LaneSettings) {
        self.inner.plugin.store(Arc::new(plugin));
        self.inner.stops.installed();
        let concurrency = settings.concurrency.max(1);
        // A new semaphore for a new limit: calls holding the old one finish normally.
        if self.inner.concurrency.swap(concurrency, Ordering::SeqCst) != concurrency {
            self.inner
                .permits
                .store(Arc::new(Semaphore::new(concurrency)));
        }
        if self.inner.settings.load().filter != settings.filter {
            let now = chrono::Utc::now().fixed_offset();
            self.inner.filter_changed_at.store(Some(Arc::new(now)));
        }
        // Unchanged limits are left alone; changed ones keep the log of the calls made, so
        // the new windows count the calls of the last minute too.
        if self.inner.settings.load().rate_limits != settings.rate_limits {
            let windows = windows(&self.inner.name, &settings);
            self.inner.limits.set_windows(windows);
            self.inner.stops.limits_changed();
        }
        self.inner.settings.store(Arc::new(settings));
    }

    /// Offer one observed version. The delivery mode decides whether it is queued; after a
    /// gap, transitions recorded in the status are queued first as synthetic events.
    pub fn push(&self, observed: Observed) {
        let Observed {
            event,
            kind,
            from_list,
            ..
        } = observed;
        if self.inner.stops.stops(&event.cluster) {
            return;
        }
        // The counts settled events go under are named after the configured kind.
        self.inner.counters.by_job_kind.learn(&event, &kind.name);
        let settings = self.inner.settings.load();
        let catch_up = from_list && settings.mode.wants_catch_up();
        let changed_at = self.inner.filter_changed_at.load();
        let history_from = match (self.inner.installed_at.as_ref(), changed_at.as_deref()) {
            (Some(installed), Some(changed)) => Some(installed.max(changed)),
            (installed, changed) => installed.or(changed),
        };
        self.offer(event, Provenance::Observed, |accepted, event| {
            if !catch_up {
                return Vec::new();
            }
            let last = last_accepted(accepted);
            let mut missed = catch_up::gap_events(last, event, &kind.normalizer, history_from);
            // Missed versions the filter would not have taken are not missed.
            missed.retain(|e| settings.filter.takes_event(e, &kind.name) == Verdict::Take);
            missed
        });
    }

    /// Offers one event to the queues and acts on what they did: versions over the bound to
    /// the dead-letter list, queued ones into the inbox (unless resumed from it), replaced ones
    /// out of it, a job's first sight noted, a worker started.
    fn offer(
        &self,
        event: JobEvent,
        provenance: Provenance,
        before: impl FnOnce(&Accepted, &JobEvent) -> Vec<JobEvent>,
    ) {
        let settings = self.inner.settings.load();
        let mode = if fleet::is_fleet(&event) {
            DeliveryMode::FleetStates
        } else {
            settings.mode
        };
        let bounds = (mode, settings.max_queued_per_job, settings.max_inbox_events);
        let key = event.job_key();
        // A resumed event the mode does not queue again (a delivery mode changed since, say)
        // has nothing left to wait for: its mark goes, or it would come back at every start.
        let resumed_id = matches!(provenance, Provenance::Resumed { .. }).then(|| event.id.clone());
        let taking = provenance == Provenance::Observed;
        let queued_at = match provenance {
            Provenance::Observed => Instant::now(),
            Provenance::Resumed { since } => since,
        };
        let offered = {
            let mut queues = self.inner.queues.lock();
            let mut to_writer = ToWriter(&self.inner.writer);
            let mut offered =
                queues.offer(event, bounds, queued_at, taking, &mut to_writer, before);
            if let Some(id) = resumed_id
                && offered.queued == 0
                && !offered.overflow.iter().any(|(e, _)| e.id == id)
            {
                self.inner.writer.drop_mark(id);
            }
            // Handed on while the queues are locked, so a job's overflow keeps its order.
            for (event, bound) in std::mem::take(&mut offered.overflow) {
                overflow_to_dead_letters(&self.inner, event, bound);
            }
            offered
        };
        // A job seen for the first time in the store (see [`DeliveryStore::note_first_sight`]),
        // noted with the writer's next batch. Not waited for: losing it only weakens deletion
        // detection across a crash. A job first seen deleted has nothing left to detect.
        if let Some(cursor) = offered.first_sight
            && !cursor.deleted
        {
            self.inner.writer.note_first_sight(cursor);
        }
        add(&self.inner.counters.skipped, offered.skipped);
        if offered.start {
            self.start_worker(key.clone());
        }
        if offered.idle
            && let Some(book) = &self.inner.book
        {
            book.lane_done(&self.inner.name, &key);
        }
    }

    /// Offer one fleet event (a carrier: [`jobrelay_contract::fleet`]). It skips the filter
    /// (written for jobs) and the catch-up of missed transitions, and is judged by
    /// [`DeliveryMode::FleetStates`] whatever the lane's mode: only a change of the subject's
    /// state since the last one accepted is queued, so a state announced again (by a restarted
    /// host, say) is delivered once. The rest is a job event's path: the inbox, one call at a time
    /// per subject, retries, dead letters.
    pub fn push_fleet(&self, event: JobEvent) {
        if self.inner.stops.stops(&event.cluster)
            || !self.inner.settings.load().fleet_events.take(&event)
        {
            return;
        }
        self.inner
            .counters
            .by_job_kind
            .learn(&event, fleet::KIND_NAME);
        self.offer(event, Provenance::Observed, |_, _| Vec::new());
    }

    /// Queue a dead letter again, as the operator asked: it bypasses the delivery mode and
    /// does not move the job's cursor (later versions may have been delivered since).
    pub fn push_replay(&self, event: JobEvent) {
        if self.inner.stops.stops(&event.cluster) {
            return;
        }
        let key = event.job_key();
        let start = self.inner.queues.lock().offer_replay(event, Instant::now());
        if start {
            self.start_worker(key);
        }
    }

    /// A stream finished a (re-)list: jobs of that cluster, kind and namespace that the lane
    /// knows but that were not listed are gone, and get their deletion (a job deleted while
    /// jobrelay was down or disconnected is still delivered as deleted).
    pub fn listed(&self, listed: &Listed) {
        if self.inner.stops.excludes(&listed.cluster) {
            return;
        }
        let gone = self.inner.queues.lock().gone(listed);
        for event in gone {
            if !self.takes_gone(&event, &listed.kind.name) {
                continue;
            }
            let kind = listed.kind.clone();
            self.push(Observed {
                event,
                kind,
                from_list: false,
                created: None,
            });
        }
    }

    /// Starts the worker of a job the queues just claimed for one.
    fn start_worker(&self, key: JobKey) {
        let inner = self.inner.clone();
        self.inner.workers.spawn(work(inner, key));
    }

    /// What the lane keeps of one job: `None` for a job it does not know (its filter or
    /// kinds do not take it, or it was let go).
    pub fn delivery_of(&self, key: &JobKey) -> Option<JobDelivery> {
        self.inner.queues.lock().delivery(key)
    }

    /// The job's outcomes still in the lane's trace (see [`crate::trace`]), oldest first.
    pub fn trace_of(&self, key: &JobKey) -> Vec<TraceEntry> {
        self.inner.trace.of(key)
    }

    /// The latest error of each job, when it is still in the trace and no delivery followed.
    pub fn last_errors(&self, keys: &[JobKey]) -> Vec<Option<String>> {
        self.inner.trace.last_errors(keys)
    }

    /// `cluster` is judged offline, or back: while it is, a retryable failure of one of its
    /// events spends no attempt (a plugin that reads the cluster — log-archive — cannot
    /// succeed before it is back, and must not dead-letter the event meanwhile).
    pub fn set_cluster_offline(&self, cluster: &str, offline: bool) {
        self.inner.stops.set_offline(cluster, offline);
    }

    /// The lane's counters and what it holds now.
    pub fn stats(&self) -> LaneStats {
        let i = &self.inner;
        let (jobs, (oldest, deferred_waiting), pending, spilled) = {
            let queues = i.queues.lock();
            let jobs = queues.jobs() as u64;
            (jobs, queues.oldest(), queues.pending(), queues.spilled())
        };
        let settings = i.settings.load();
        let plugin = i.plugin.load();
        let mut stats = LaneStats {
            pending,
            spilled,
            inbox_written: i.writer.written(),
            jobs,
            oldest_pending_seconds: oldest.map_or(0.0, |at| at.elapsed().as_secs_f64()),
            deferred_waiting,
            memory_high_water_bytes: plugin.memory_high_water_bytes(),
            timeout_seconds: plugin.timeout().map(|t| t.as_secs_f64()),
            kinds: settings.kinds.clone(),
            filter: (!settings.filter.takes_all()).then(|| settings.filter.spec().clone()),
            ..LaneStats::default()
        };
        i.counters.fill(&mut stats);
        stats
    }

    /// Wait until nothing is queued or running.
    pub async fn idle(&self) {
        loop {
            let notified = self.inner.settled.notified();
            if self.inner.queues.lock().pending() == 0 {
                return;
            }
            notified.await;
        }
    }

    /// Lets go of one cluster (sharding hands it to another replica): versions queued for its
    /// jobs are dropped unacknowledged (the next owner delivers them from the shared cursors
    /// and inbox), calls in flight are waited for, and the cluster's jobs are forgotten.
    pub async fn forget_cluster(&self, cluster: &str) {
        // Retry waits of the cluster's jobs end now (others go back to waiting).
        self.inner.stops.exclude(cluster);
        self.inner.queues.lock().drop_waiting(cluster);
        self.inner.settled.notify_waiters();
        loop {
            let notified = self.inner.settled.notified();
            if !self.inner.queues.lock().busy_in(cluster) {
                break;
            }
            notified.await;
        }
        self.inner.queues.lock().forget(cluster);
        self.inner.settled.notify_waiters();
    }

    /// Stop starting calls and wait for the ones in flight. Queued events stay unacknowledged:
    /// their cursors were not advanced and they are in the inbox, so a restart delivers them.
    pub async fn close(&self) {
        self.inner.stops.close();
        // What the lane took is in the inbox before anything waits on a call (the daemon's
        // grace period may end the wait), so a process ending meanwhile loses none of it.
        self.inner.writer.flush().await;
        self.inner.workers.close();
        self.inner.workers.wait().await;
        self.inner.settled.notify_waiters();
    }

    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }
}

/// What the lane accepted of a job, as catching up reads it.
fn last_accepted(accepted: &Accepted) -> LastAccepted<'_> {
    LastAccepted {
        phase: accepted.phase,
        transition_time: accepted.transition_time.as_deref(),
        resource_version: accepted.resource_version.as_deref(),
        deleted: accepted.deleted,
    }
}
