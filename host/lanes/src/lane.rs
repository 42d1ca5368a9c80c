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
//! lane's face (open, push, list reports, reload, let go of a cluster) and its state. One
//! event's way: [`Lane::push`] offers it to the queues, which start a worker for its job;
//! the worker (`lane/worker.rs`) takes the job's head, calls the plugin with retries and
//! returns the call's outcome; `lane/settle.rs` records that outcome — the dead letter if
//! the call gave up, then the cursor — and pops the head, all in one place.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use arc_swap::{ArcSwap, ArcSwapOption};
use governor::DefaultDirectRateLimiter;
use serde::Serialize;
use tokio::sync::{Notify, Semaphore};
use tokio_util::task::TaskTracker;

use super::budget::MemoryBudget;
use super::call_stats::{CallSnapshot, CallStats, DurationSnapshot, Durations};
use super::cursor_writer::CursorWriter;
use super::event_counts::{Counts, EventCounts};
use super::filter::Verdict;
use super::finalizer_book::FinalizerBook;
use super::handler::Handler;
use super::mode::{Accepted, DeliveryMode};
use super::queue::{Bound, JobDelivery, Queues};
use super::read_back::ReadBacks;
use super::settings::LaneSettings;
use super::trace::{DeliveryTrace, TraceEntry};
use jobrelay_contract::event::{JobEvent, JobKey};
use jobrelay_contract::fleet;
use jobrelay_runtime::CallError;
use jobrelay_state::{Cursor, DeliveryStore};
use jobrelay_watch::catch_up;

use jobrelay_watch::kinds::JobKind;
/// What a lane is offered: a stream's observations, as the watch made them.
pub use jobrelay_watch::tracker::{Listed, Observed};

use self::settle::record_dead_letter;
use self::worker::{NotLoaded, work};

mod filtering;
mod settle;
mod worker;

/// Counters of one lane, for status, metrics and tests.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct LaneStats {
    /// Events handled successfully.
    pub delivered: u64,
    /// Calls that failed and were retried.
    pub retried: u64,
    /// Calls that deferred their event (`deferral.defer`): held back on purpose, not failed.
    pub deferred: u64,
    /// Events moved to the dead-letter list.
    pub dead_lettered: u64,
    /// Failed calls in all (retried or not).
    pub failed_calls: u64,
    /// Observed versions the delivery mode did not want (duplicates included).
    pub skipped: u64,
    /// Observed versions the plugin's filter did not take (never queued).
    pub filtered: u64,
    /// Of those, versions the filter's expression failed on (a missing label, say).
    pub filter_errors: u64,
    /// Events waiting in the lane, in flight included: each is in the state store's inbox (a
    /// replayed dead letter aside), so this is also the plugin's inbox depth.
    pub pending: u64,
    /// Of those, events waiting only in the inbox (the memory budget had no room for them):
    /// read back when their turn comes.
    pub spilled: u64,
    /// Events read back from the inbox for their call since the lane opened (each one that
    /// waited there only).
    pub read_back: u64,
    /// Events the lane's writer stored in the inbox since the lane opened. A taken event
    /// whose cursor reached the writer first (the lane kept up) is never stored, so this
    /// against `delivered` shows how often the lane trailed its watch.
    pub inbox_written: u64,
    /// Calls running now.
    pub in_flight: u64,
    /// Jobs the lane tracks.
    pub jobs: u64,
    /// Call durations and failures by kind.
    pub calls: CallSnapshot,
    /// Seconds the oldest event still waiting (or in flight) has been in the lane; 0 when
    /// nothing waits. Grows when a plugin is down or too slow.
    pub oldest_pending_seconds: f64,
    /// The most memory one call of the serving version has used, in bytes (wasm plugins).
    pub memory_high_water_bytes: Option<u64>,
    /// The serving version's time limit per call, in seconds (wasm plugins).
    pub timeout_seconds: Option<f64>,
    /// The kinds the plugin takes (empty: every kind).
    pub kinds: Vec<String>,
    /// The plugin's filter as written, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter: Option<crate::filter::FilterSpec>,
    /// Delivered, retried and dead-lettered by (cluster, job kind).
    pub by_job_kind: Vec<(String, String, Counts)>,
    /// Time from a version's arrival in the lane to its acknowledgement stored, for the
    /// events the plugin handled (not dead letters, not replays).
    pub delivery: DurationSnapshot,
}

/// Where an offered event comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Intake {
    /// Seen by a watch (or made from what one saw): taken into the inbox when queued.
    Observed,
    /// Read back from the inbox: already there.
    Resumed,
}

struct Inner {
    name: String,
    /// The handler the next call uses (double `Arc`: `ArcSwap` needs a sized pointee).
    plugin: ArcSwap<Arc<dyn Handler>>,
    /// False while the plugin has no version yet (its first load failed for a reason that may
    /// pass): events queue and wait, unacknowledged, and no call or retry is spent on them.
    serving: AtomicBool,
    /// Woken when a version is installed.
    version_installed: Notify,
    settings: ArcSwap<LaneSettings>,
    permits: ArcSwap<Semaphore>,
    concurrency: AtomicUsize,
    limiters: ArcSwap<Vec<DefaultDirectRateLimiter>>,
    /// Woken when a reload replaces the rate limits: calls waiting for a token wait again
    /// under the new ones.
    limits_changed: Notify,
    /// Every job's queue; one lock, held only for a step of the queue state machine.
    queues: Mutex<Queues>,
    store: Arc<dyn DeliveryStore>,
    /// Acknowledgements' cursors, stored by group commit (see [`CursorWriter`]).
    cursor_writer: CursorWriter,
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
    closed: AtomicBool,
    /// Clusters this lane no longer delivers (sharding handed them to another replica): their
    /// versions are dropped on arrival and their retries cut short, unacknowledged.
    excluded: RwLock<HashSet<String>>,
    delivered: AtomicU64,
    retried: AtomicU64,
    deferred: AtomicU64,
    dead_lettered: AtomicU64,
    failed_calls: AtomicU64,
    skipped: AtomicU64,
    filtered: AtomicU64,
    filter_errors: AtomicU64,
    /// When a failing filter expression was last warned of.
    filter_warned: Mutex<Option<Instant>>,
    /// Events read back from the inbox for their call.
    read_back: AtomicU64,
    in_flight: AtomicU64,
    /// Durations and failure kinds of the plugin's calls.
    calls: CallStats,
    /// Delivered, retried and dead-lettered events by cluster and kind.
    by_job_kind: EventCounts,
    /// Arrival to acknowledgement, per delivered event.
    delivery: Durations,
    /// The latest outcomes, job by job, for the job view.
    trace: DeliveryTrace,
    /// Woken whenever the lane may have become idle.
    settled: Notify,
    /// Woken when the lane closes, to cut retry waits short.
    closing: Notify,
    /// Versions over a job's queue bound, waiting to be written as dead letters, in arrival
    /// order; `true` while a task is writing them (one at a time, so their order is kept).
    overflow: Mutex<(VecDeque<(JobEvent, Bound)>, bool)>,
}

impl Inner {
    /// Whether versions of `cluster` are no longer this lane's to deliver.
    fn excludes(&self, cluster: &str) -> bool {
        self.excluded
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains(cluster)
    }

    /// Whether a call or retry for `cluster` must stop: the lane closed or let it go.
    fn stops(&self, cluster: &str) -> bool {
        self.closed.load(Ordering::SeqCst) || self.excludes(cluster)
    }
}

/// A cheap handle to one plugin's lane.
#[derive(Clone)]
pub struct Lane {
    inner: Arc<Inner>,
}

fn limiters(settings: &LaneSettings) -> Vec<DefaultDirectRateLimiter> {
    settings
        .rate_limits
        .iter()
        .filter_map(|r| r.limiter())
        .collect()
}

impl Lane {
    /// A lane starting from the plugin's stored cursors.
    pub async fn open(
        name: &str,
        plugin: Arc<dyn Handler>,
        settings: LaneSettings,
        store: Arc<dyn DeliveryStore>,
        book: Option<Arc<FinalizerBook>>,
    ) -> Result<Lane, jobrelay_state::StoreError> {
        Lane::open_with(
            name,
            Some(plugin),
            settings,
            store,
            book,
            MemoryBudget::unbounded(),
        )
        .await
    }

    /// A lane for a plugin that has no version yet: it takes and queues events like any lane
    /// (so finalizer holds wait for it and nothing is dropped), but calls nothing until
    /// [`reconfigure`](Lane::reconfigure) installs a version.
    pub async fn open_waiting(
        name: &str,
        settings: LaneSettings,
        store: Arc<dyn DeliveryStore>,
        book: Option<Arc<FinalizerBook>>,
    ) -> Result<Lane, jobrelay_state::StoreError> {
        Lane::open_with(name, None, settings, store, book, MemoryBudget::unbounded()).await
    }

    /// [`open`](Lane::open) with a handler, or [`open_waiting`](Lane::open_waiting) without;
    /// the events it keeps in memory count against `budget` (shared by every lane of the
    /// process), and wait only in the store's inbox when it has no room.
    pub async fn open_with(
        name: &str,
        plugin: Option<Arc<dyn Handler>>,
        settings: LaneSettings,
        store: Arc<dyn DeliveryStore>,
        book: Option<Arc<FinalizerBook>>,
        budget: Arc<MemoryBudget>,
    ) -> Result<Lane, jobrelay_state::StoreError> {
        let serving = plugin.is_some();
        let plugin = plugin.unwrap_or_else(|| Arc::new(NotLoaded(name.to_string())));
        // A page at a time: a million cursors read whole would hold several times the memory
        // the lane keeps of them.
        let mut queues = Queues::within(budget.clone(), name, &[]);
        let mut after: Option<(String, String)> = None;
        loop {
            let at = after.as_ref().map(|(c, u)| (c.as_str(), u.as_str()));
            let page = store.cursors_page(name, at, CURSOR_PAGE).await?;
            queues.add_cursors(|_| true, &page);
            if page.len() < CURSOR_PAGE as usize {
                break;
            }
            after = page.last().map(|c| (c.cluster.clone(), c.uid.clone()));
        }
        let installed_at = install_time(name, queues.jobs() > 0, store.as_ref()).await?;
        let concurrency = settings.concurrency.max(1);
        Ok(Lane {
            inner: Arc::new(Inner {
                name: name.to_string(),
                plugin: ArcSwap::from_pointee(plugin),
                serving: AtomicBool::new(serving),
                version_installed: Notify::new(),
                limiters: ArcSwap::from_pointee(limiters(&settings)),
                limits_changed: Notify::new(),
                settings: ArcSwap::from_pointee(settings),
                permits: ArcSwap::from_pointee(Semaphore::new(concurrency)),
                concurrency: AtomicUsize::new(concurrency),
                queues: Mutex::new(queues),
                cursor_writer: CursorWriter::start(name, store.clone(), budget),
                read_backs: ReadBacks::start(store.clone()),
                store,
                installed_at,
                filter_changed_at: ArcSwapOption::empty(),
                book,
                workers: TaskTracker::new(),
                closed: AtomicBool::new(false),
                excluded: RwLock::default(),
                delivered: AtomicU64::new(0),
                retried: AtomicU64::new(0),
                deferred: AtomicU64::new(0),
                dead_lettered: AtomicU64::new(0),
                failed_calls: AtomicU64::new(0),
                skipped: AtomicU64::new(0),
                filtered: AtomicU64::new(0),
                filter_errors: AtomicU64::new(0),
                filter_warned: Mutex::new(None),
                read_back: AtomicU64::new(0),
                in_flight: AtomicU64::new(0),
                calls: CallStats::default(),
                by_job_kind: EventCounts::default(),
                delivery: Durations::default(),
                trace: DeliveryTrace::default(),
                settled: Notify::new(),
                closing: Notify::new(),
                overflow: Mutex::new((VecDeque::new(), false)),
            }),
        })
    }

    /// Whether a version is installed (see [`open_waiting`](Lane::open_waiting)).
    pub fn serving(&self) -> bool {
        self.inner.serving.load(Ordering::SeqCst)
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
        if !self.inner.serving.swap(true, Ordering::SeqCst) {
            self.inner.version_installed.notify_waiters();
        }
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
        if self.inner.settings.load().rate_limits != settings.rate_limits {
            self.inner.limiters.store(Arc::new(limiters(&settings)));
            self.inner.limits_changed.notify_waiters();
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
        if self.inner.closed.load(Ordering::SeqCst) || self.inner.excludes(&event.cluster) {
            return;
        }
        // The counts settled events go under are named after the configured kind.
        self.inner.by_job_kind.learn(&event, &kind.name);
        let settings = self.inner.settings.load();
        let catch_up = from_list && settings.mode.wants_catch_up();
        let changed_at = self.inner.filter_changed_at.load();
        let history_from = match (self.inner.installed_at.as_ref(), changed_at.as_deref()) {
            (Some(installed), Some(changed)) => Some(installed.max(changed)),
            (installed, changed) => installed.or(changed),
        };
        self.offer(event, Intake::Observed, |accepted, event| {
            if !catch_up {
                return Vec::new();
            }
            let mut missed = gap_events(accepted, event, &kind, history_from);
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
        intake: Intake,
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
        let resumed_id = (intake == Intake::Resumed).then(|| event.id.clone());
        let taking = intake == Intake::Observed;
        let offered = {
            let mut queues = self.inner.queues.lock().unwrap_or_else(|p| p.into_inner());
            let mut offered = queues.offer(event, bounds, Instant::now(), taking, before);
            if let Some(id) = resumed_id
                && offered.queued == 0
                && !offered.overflow.iter().any(|(e, _)| e.id == id)
            {
                self.inner.cursor_writer.drop_mark(id);
            }
            // Handed on while the queues are locked: a job's overflow keeps its order, and an
            // event is taken into the inbox before its worker can settle it.
            for (event, bound) in std::mem::take(&mut offered.overflow) {
                self.overflow_to_dead_letters(event, bound);
            }
            for (event, charge) in std::mem::take(&mut offered.taken) {
                self.inner.cursor_writer.take(event, charge);
            }
            for id in std::mem::take(&mut offered.replaced) {
                self.inner.cursor_writer.drop_mark(id);
            }
            offered
        };
        if let Some(cursor) = offered.first_sight {
            self.note_first_sight(cursor);
        }
        self.inner
            .skipped
            .fetch_add(offered.skipped, Ordering::SeqCst);
        if offered.start {
            self.start_worker(key.clone());
        }
        if offered.idle
            && let Some(book) = &self.inner.book
        {
            book.lane_done(&self.inner.name, &key);
        }
    }

    /// Moves a version that would exceed the job's queue bound to the dead-letter list: the
    /// plugin is down or far behind, and holding every version in memory would grow without
    /// limit. The version stays durable and replayable (`jobrelay dead-letters replay`), and a
    /// deletion held by the finalizer is released as for any dead letter.
    fn overflow_to_dead_letters(&self, event: JobEvent, bound: Bound) {
        let mut overflow = self
            .inner
            .overflow
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        overflow.0.push_back((event, bound));
        if overflow.1 {
            return; // the running writer takes it
        }
        overflow.1 = true;
        let inner = self.inner.clone();
        tokio::spawn(async move {
            loop {
                let next = {
                    let mut overflow = inner.overflow.lock().unwrap_or_else(|p| p.into_inner());
                    let next = overflow.0.pop_front();
                    if next.is_none() {
                        overflow.1 = false;
                    }
                    next
                };
                let Some((event, bound)) = next else { break };
                let error = CallError::Host(match bound {
                    Bound::Job(cap) => format!(
                        "lane overflow: {cap} versions of this job were already waiting (the \
                         plugin is down or too slow; max_queued_per_job)"
                    ),
                    Bound::Inbox(bound) => format!(
                        "inbox full: {bound} events of this plugin were already waiting (the \
                         plugin is down or too slow; max_inbox_events)"
                    ),
                });
                // A resumed event's mark goes once its dead letter holds it (an observed
                // one over the bound was never taken: removing no mark costs nothing).
                if record_dead_letter(&inner, &event, &error, 0).await {
                    inner.cursor_writer.drop_mark(event.id);
                } else {
                    tracing::warn!(plugin = %inner.name, event = %event.id,
                        "the version stays in the inbox (if it was taken) and is offered again \
                         at the next start");
                }
            }
        });
    }

    /// Note a job seen for the first time in the store (see [`DeliveryStore::remember_job`]),
    /// with the cursor writer's next batch. Not waited for: losing it only weakens deletion
    /// detection across a crash. A job first seen deleted has nothing left to detect.
    fn note_first_sight(&self, cursor: Cursor) {
        if cursor.deleted {
            return;
        }
        self.inner.cursor_writer.remember(cursor);
    }

    /// Offer one fleet event (a carrier: [`jobrelay_contract::fleet`]). It skips the filter
    /// (written for jobs) and the catch-up of missed transitions, and is judged by
    /// [`DeliveryMode::FleetStates`] whatever the lane's mode: only a change of the subject's
    /// state since the last one accepted is queued, so a state announced again (by a restarted
    /// host, say) is delivered once. The rest is a job event's path: the inbox, one call at a time
    /// per subject, retries, dead letters.
    pub fn push_fleet(&self, event: JobEvent) {
        if self.inner.closed.load(Ordering::SeqCst)
            || self.inner.excludes(&event.cluster)
            || !self.inner.settings.load().fleet_events.take(&event)
        {
            return;
        }
        self.inner.by_job_kind.learn(&event, fleet::KIND_NAME);
        self.offer(event, Intake::Observed, |_, _| Vec::new());
    }

    /// Queue a dead letter again, as the operator asked: it bypasses the delivery mode and
    /// does not move the job's cursor (later versions may have been delivered since).
    pub fn push_replay(&self, event: JobEvent) {
        if self.inner.closed.load(Ordering::SeqCst) || self.inner.excludes(&event.cluster) {
            return;
        }
        let key = event.job_key();
        let start = self
            .inner
            .queues
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .offer_replay(event, Instant::now());
        if start {
            self.start_worker(key);
        }
    }

    /// A stream finished a (re-)list: jobs of that cluster, kind and namespace that the lane
    /// knows but that were not listed are gone, and get their deletion (a job deleted while
    /// jobrelay was down or disconnected is still delivered as deleted).
    pub fn listed(&self, listed: &Listed) {
        if self.inner.excludes(&listed.cluster) {
            return;
        }
        let gone = self
            .inner
            .queues
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .gone(listed);
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
        let queues = self.inner.queues.lock().unwrap_or_else(|p| p.into_inner());
        queues.delivery(key)
    }

    /// The job's outcomes still in the lane's trace (see [`crate::trace`]), oldest first.
    pub fn trace_of(&self, key: &JobKey) -> Vec<TraceEntry> {
        self.inner.trace.of(key)
    }

    /// The latest error of each job, when it is still in the trace and no delivery followed.
    pub fn last_errors(&self, keys: &[JobKey]) -> Vec<Option<String>> {
        self.inner.trace.last_errors(keys)
    }

    pub fn stats(&self) -> LaneStats {
        let i = &self.inner;
        let (jobs, oldest, pending, spilled) = {
            let queues = i.queues.lock().unwrap_or_else(|p| p.into_inner());
            let jobs = queues.jobs() as u64;
            (jobs, queues.oldest(), queues.pending(), queues.spilled())
        };
        LaneStats {
            delivered: i.delivered.load(Ordering::SeqCst),
            retried: i.retried.load(Ordering::SeqCst),
            deferred: i.deferred.load(Ordering::SeqCst),
            dead_lettered: i.dead_lettered.load(Ordering::SeqCst),
            failed_calls: i.failed_calls.load(Ordering::SeqCst),
            skipped: i.skipped.load(Ordering::SeqCst),
            filtered: i.filtered.load(Ordering::Relaxed),
            filter_errors: i.filter_errors.load(Ordering::Relaxed),
            pending,
            spilled,
            read_back: i.read_back.load(Ordering::SeqCst),
            inbox_written: i.cursor_writer.written(),
            in_flight: i.in_flight.load(Ordering::SeqCst),
            jobs,
            calls: i.calls.snapshot(),
            oldest_pending_seconds: oldest.map_or(0.0, |at| at.elapsed().as_secs_f64()),
            memory_high_water_bytes: i.plugin.load().memory_high_water_bytes(),
            timeout_seconds: i.plugin.load().timeout().map(|t| t.as_secs_f64()),
            kinds: i.settings.load().kinds.clone(),
            filter: {
                let filter = &i.settings.load().filter;
                (!filter.takes_all()).then(|| filter.spec().clone())
            },
            by_job_kind: i.by_job_kind.snapshot(),
            delivery: i.delivery.snapshot(),
        }
    }

    /// Wait until nothing is queued or running.
    pub async fn idle(&self) {
        loop {
            let notified = self.inner.settled.notified();
            let pending = self
                .inner
                .queues
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pending();
            if pending == 0 {
                return;
            }
            notified.await;
        }
    }

    /// Forgets what the lane knows of every job that has no work in it, reads the plugin's
    /// cursors again (of one cluster, or of all) and resumes the events still in its inbox.
    /// For a replica that takes over delivery — while it did not deliver, another replica
    /// moved the shared cursors on and left its undelivered events in the inbox — and for a
    /// daemon that delivers from the start, once its lane is open.
    /// Taking a cluster back also accepts its versions again (see
    /// [`forget_cluster`](Lane::forget_cluster)).
    pub async fn reload(&self, cluster: Option<&str>) -> Result<(), jobrelay_state::StoreError> {
        let of = |c: &str| cluster.is_none_or(|only| only == c);
        if let Some(cluster) = cluster {
            self.inner
                .excluded
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .remove(cluster);
        }
        let cursors = self.inner.store.cursors(&self.inner.name).await?;
        // Jobs this lane has work of its own for keep it: their versions are queued already.
        let busy = {
            let mut queues = self.inner.queues.lock().unwrap_or_else(|p| p.into_inner());
            queues.reload(of, &cursors);
            queues.jobs_with_work(of)
        };
        drop(cursors);
        self.resume_inbox_of(of, &busy).await
    }

    /// Resumes the events still in the plugin's inbox, on the cursors the lane opened with:
    /// for a daemon that delivers from the start, once its lane is open (see
    /// [`reload`](Lane::reload), which reads the cursors again first).
    pub async fn resume_inbox(&self) -> Result<(), jobrelay_state::StoreError> {
        self.resume_inbox_of(|_| true, &HashSet::new()).await
    }

    /// Offers the inbox's events of the clusters `of` selects, but for the jobs in `busy`.
    async fn resume_inbox_of(
        &self,
        of: impl Fn(&str) -> bool,
        busy: &HashSet<JobKey>,
    ) -> Result<(), jobrelay_state::StoreError> {
        // What was taken and not delivered (by an earlier process, or by the replica that
        // delivered before), a page at a time, oldest first: the mode judges each again
        // against what the cursors say was delivered, which keeps exactly the ones not
        // delivered; they are not taken again, and what the memory budget has no room for
        // waits where it is.
        let (mut after, mut resumed) = (0, 0u64);
        loop {
            let page = read_inbox_page(&self.inner.name, self.inner.store.as_ref(), after).await?;
            for event in page.events {
                if !of(&event.cluster)
                    || self.inner.excludes(&event.cluster)
                    || (!busy.is_empty() && busy.contains(&event.job_key()))
                {
                    continue;
                }
                resumed += 1;
                self.offer(event, Intake::Resumed, |_, _| Vec::new());
            }
            match page.next {
                Some(next) => after = next,
                None => break,
            }
        }
        if resumed > 0 {
            tracing::info!(plugin = %self.inner.name, events = resumed,
                "resuming the events taken and not delivered before");
        }
        Ok(())
    }

    /// Lets go of one cluster (sharding hands it to another replica): versions queued for its
    /// jobs are dropped unacknowledged (the next owner delivers them from the shared cursors
    /// and inbox), calls in flight are waited for, and the cluster's jobs are forgotten.
    pub async fn forget_cluster(&self, cluster: &str) {
        self.inner
            .excluded
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(cluster.to_string());
        // Retry waits of the cluster's jobs end now (others go back to waiting).
        self.inner.closing.notify_waiters();
        let queues = || self.inner.queues.lock().unwrap_or_else(|p| p.into_inner());
        queues().drop_waiting(cluster);
        self.inner.settled.notify_waiters();
        loop {
            let notified = self.inner.settled.notified();
            if !queues().busy_in(cluster) {
                break;
            }
            notified.await;
        }
        queues().forget(cluster);
        self.inner.settled.notify_waiters();
    }

    /// Stop starting calls and wait for the ones in flight. Queued events stay unacknowledged:
    /// their cursors were not advanced and they are in the inbox, so a restart delivers them.
    pub async fn close(&self) {
        self.inner.closed.store(true, Ordering::SeqCst);
        self.inner.closing.notify_waiters();
        // What the lane took is in the inbox before anything waits on a call (the daemon's
        // grace period may end the wait), so a process ending meanwhile loses none of it.
        self.inner.cursor_writer.flush().await;
        self.inner.workers.close();
        self.inner.workers.wait().await;
        self.inner.settled.notify_waiters();
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }
}

/// Missed transitions of a job seen again after a gap, as synthetic events. A job the lane
/// has accepted nothing of (first seen in a list, or remembered but never delivered before a
/// restart) gets every transition its status records, unless it already existed when the
/// plugin was installed (`installed_at`).
fn gap_events(
    accepted: &Accepted,
    event: &JobEvent,
    kind: &JobKind,
    installed_at: Option<&chrono::DateTime<chrono::FixedOffset>>,
) -> Vec<JobEvent> {
    if accepted.deleted {
        return Vec::new();
    }
    let object = || serde_json::from_str::<serde_json::Value>(&event.object_json).ok();
    let Some(last_phase) = accepted.phase else {
        let Some(object) = object() else {
            return Vec::new();
        };
        if let Some(installed) = installed_at
            && !catch_up::created_after(&object, installed)
        {
            return Vec::new();
        }
        let recorded = catch_up::recorded_transitions(&kind.normalizer, &object);
        return catch_up::first_sight_events(event, &recorded);
    };
    let Some(last_time) = accepted.transition_time.as_deref() else {
        return Vec::new();
    };
    // The version accepted last, seen again (a re-list, a restart): nothing between.
    if accepted.resource_version.as_deref() == Some(event.resource_version.as_str()) {
        return Vec::new();
    }
    if catch_up::stay_unchanged(
        &kind.normalizer,
        (last_phase, last_time),
        (event.phase, &event.transition_time),
    ) {
        return Vec::new();
    }
    let Some(object) = object() else {
        return Vec::new();
    };
    let missed =
        catch_up::missed_transitions(&kind.normalizer, &object, last_phase, Some(last_time));
    catch_up::synthetic_events(event, last_phase, &missed)
}

/// A page of `plugin`'s events in the store's inbox, oldest first, from just after `after`. A
/// mark whose event cannot be read is named in the log and left where it is (an operator may
/// repair or delete it); the rest flow.
async fn read_inbox_page(
    plugin: &str,
    store: &dyn DeliveryStore,
    after: i64,
) -> Result<jobrelay_state::Inbox, jobrelay_state::StoreError> {
    let page = store
        .inbox_page(plugin, after, jobrelay_state::INBOX_PAGE)
        .await?;
    for damaged in &page.damaged {
        tracing::error!(plugin, event = %damaged.event_id, reason = %damaged.reason,
            "an inbox entry cannot be read; it is left in the store and not delivered");
    }
    Ok(page)
}

/// Cursors read per page while a lane opens.
const CURSOR_PAGE: u32 = 10_000;

/// Stands for "installed before any job": the install time of a plugin that already had
/// cursors when install times began to be kept.
const BEFORE_ANY_JOB: &str = "1970-01-01T00:00:00Z";

/// The plugin's install time, recorded now if the store has none. A plugin that has cursors
/// but no install time was installed by a release that did not record it, long before the
/// jobs it has not seen yet: those get their history. A stored time that does not parse is
/// logged and treated the same way.
async fn install_time(
    plugin: &str,
    has_cursors: bool,
    store: &dyn DeliveryStore,
) -> Result<Option<chrono::DateTime<chrono::FixedOffset>>, jobrelay_state::StoreError> {
    let now = if !has_cursors {
        chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    } else {
        BEFORE_ANY_JOB.to_string()
    };
    let stored = store.install_time(plugin, &now).await?;
    match chrono::DateTime::parse_from_rfc3339(&stored) {
        Ok(at) => Ok(Some(at)),
        Err(e) => {
            tracing::warn!(plugin, installed_at = %stored, error = %e,
                "the stored install time does not parse; every job gets its recorded history");
            Ok(None)
        }
    }
}
