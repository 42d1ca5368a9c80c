//! One plugin's lane: per-job FIFO queues drained by one worker per busy job, under a
//! semaphore that bounds how many jobs the plugin handles at once.
//!
//! - **Order**: a job has at most one worker, which handles its events one at a time; a failing
//!   event is retried (with backoff, under the plugin's rate limits) before the job's next
//!   event, so order is kept. Other jobs go on meanwhile.
//! - **What is queued** is decided by the plugin's delivery mode ([`super::mode`]) against what
//!   the lane accepted for the job, so a job's queue never holds more than its mode needs
//!   (`latest`: one version; `terminal`: at most two). `every-version` and `transitions` need
//!   every queued version, so their queues are bounded by `max_queued_per_job`: a version
//!   beyond it goes to the dead-letter list (durable, replayable) rather than into memory.
//! - **Durability**: after a call succeeds (or its event is dead-lettered) the job's cursor is
//!   written to the state store before the job's next event starts. After a restart the lane
//!   starts from those cursors, so versions already handled are skipped.
//! - **Hot reload**: the plugin version is looked up when a call starts, not when an event is
//!   queued: a reload swaps the version in place and the queues are untouched, so no event is
//!   dropped or handled twice by a reload, and calls in flight finish on their version.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use arc_swap::ArcSwap;
use governor::DefaultDirectRateLimiter;
use serde::Serialize;
use tokio::sync::{Notify, Semaphore};
use tokio_util::task::TaskTracker;

use super::call_stats::{CallSnapshot, CallStats};
use super::event_counts::{Count, Counts, EventCounts};
use super::finalizer_book::FinalizerBook;
use super::handler::Handler;
use super::mode::{Accepted, Decision};
use super::settings::LaneSettings;
use crate::runtime::CallError;
use crate::state::{Cursor, CursorStore};
use crate::watch::catch_up;
use crate::watch::event::{JobEvent, JobKey, Phase};
use crate::watch::kinds::JobKind;
use crate::watch::transition_key::TransitionKey;

/// Counters of one lane, for status, metrics and tests.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct LaneStats {
    /// Events handled successfully.
    pub delivered: u64,
    /// Calls that failed and were retried.
    pub retried: u64,
    /// Events moved to the dead-letter list.
    pub dead_lettered: u64,
    /// Failed calls in all (retried or not).
    pub failed_calls: u64,
    /// Observed versions the delivery mode did not want (duplicates included).
    pub skipped: u64,
    /// Events waiting in the lane, in flight included.
    pub pending: u64,
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
    /// Delivered, retried and dead-lettered by (cluster, job kind).
    pub by_job_kind: Vec<(String, String, Counts)>,
}

/// One observed version as the dispatcher hands it to lanes.
#[derive(Debug, Clone)]
pub struct Observed {
    pub event: JobEvent,
    pub kind: Arc<JobKind>,
    /// Seen in a (re-)list rather than a watch event: a gap may lie behind it.
    pub from_list: bool,
}

/// A queued event; replays of dead letters bypass the mode and leave the cursor alone.
#[derive(Debug)]
struct Item {
    event: JobEvent,
    replay: bool,
    /// When it was queued, for the age of the oldest pending event.
    queued_at: Instant,
}

/// What a lane keeps per job: the projection needed to judge and order its events.
#[derive(Debug, Default)]
struct JobState {
    accepted: Accepted,
    /// Phase of the last version delivered (the `previous_phase` of the next one).
    delivered_phase: Option<Phase>,
    queue: VecDeque<Item>,
    busy: bool,
    api_version: Arc<str>,
    kind: Arc<str>,
    namespace: String,
    name: String,
}

impl JobState {
    /// A job the lane has not seen before.
    fn for_event(event: &JobEvent) -> JobState {
        JobState {
            api_version: Arc::from(event.api_version.as_str()),
            kind: Arc::from(event.kind.as_str()),
            namespace: event.namespace.clone(),
            name: event.name.clone(),
            ..JobState::default()
        }
    }

    fn from_cursor(c: &Cursor) -> JobState {
        let delivered = !c.resource_version.is_empty();
        JobState {
            accepted: Accepted {
                resource_version: delivered.then(|| c.resource_version.clone()),
                phase: delivered.then_some(c.phase),
                transition_time: delivered.then(|| c.transition_time.clone()),
                terminal_done: delivered && super::mode::is_end(c.phase),
                deleted: c.deleted,
            },
            delivered_phase: delivered.then_some(c.phase),
            queue: VecDeque::new(),
            busy: false,
            api_version: Arc::from(c.api_version.as_str()),
            kind: Arc::from(c.kind.as_str()),
            namespace: c.namespace.clone(),
            name: c.name.clone(),
        }
    }
}

struct Inner {
    name: String,
    /// The handler the next call uses (double `Arc`: `ArcSwap` needs a sized pointee).
    plugin: ArcSwap<Arc<dyn Handler>>,
    /// False while the plugin has no version yet (its first load failed for a reason that may
    /// pass): events queue and wait, unacknowledged, and no call or retry is spent on them.
    serving: AtomicBool,
    /// Woken when a version is installed.
    installed: Notify,
    settings: ArcSwap<LaneSettings>,
    permits: ArcSwap<Semaphore>,
    concurrency: AtomicUsize,
    limiters: ArcSwap<Vec<DefaultDirectRateLimiter>>,
    jobs: Mutex<HashMap<JobKey, JobState>>,
    store: Arc<dyn CursorStore>,
    /// When the plugin was first installed (from the state store): jobs created before it get
    /// their current state, not their history. `None`: the stored time does not parse, and
    /// every job gets its history (at least once wins over quiet).
    installed_at: Option<chrono::DateTime<chrono::FixedOffset>>,
    /// Holds on jobs being deleted, told when this lane is done with a job.
    book: Option<Arc<FinalizerBook>>,
    workers: TaskTracker,
    closed: AtomicBool,
    /// Clusters this lane no longer delivers (sharding handed them to another replica): their
    /// versions are dropped on arrival and their retries cut short, unacknowledged.
    excluded: RwLock<HashSet<String>>,
    delivered: AtomicU64,
    retried: AtomicU64,
    dead_lettered: AtomicU64,
    failed_calls: AtomicU64,
    skipped: AtomicU64,
    pending: AtomicU64,
    in_flight: AtomicU64,
    /// Durations and failure kinds of the plugin's calls.
    calls: CallStats,
    /// Delivered, retried and dead-lettered events by cluster and kind.
    by_job_kind: EventCounts,
    /// Woken whenever the lane may have become idle.
    settled: Notify,
    /// Woken when the lane closes, to cut retry waits short.
    closing: Notify,
    /// Versions over a job's queue bound, waiting to be written as dead letters, in arrival
    /// order; `true` while a task is writing them (one at a time, so their order is kept).
    parking: Mutex<(VecDeque<(JobEvent, usize)>, bool)>,
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
        store: Arc<dyn CursorStore>,
        book: Option<Arc<FinalizerBook>>,
    ) -> Result<Lane, crate::state::StoreError> {
        Lane::open_with(name, Some(plugin), settings, store, book).await
    }

    /// A lane for a plugin that has no version yet: it takes and queues events like any lane
    /// (so finalizer holds wait for it and nothing is dropped), but calls nothing until
    /// [`reconfigure`](Lane::reconfigure) installs a version.
    pub async fn open_waiting(
        name: &str,
        settings: LaneSettings,
        store: Arc<dyn CursorStore>,
        book: Option<Arc<FinalizerBook>>,
    ) -> Result<Lane, crate::state::StoreError> {
        Lane::open_with(name, None, settings, store, book).await
    }

    /// [`open`](Lane::open) with a handler, or [`open_waiting`](Lane::open_waiting) without.
    pub async fn open_with(
        name: &str,
        plugin: Option<Arc<dyn Handler>>,
        settings: LaneSettings,
        store: Arc<dyn CursorStore>,
        book: Option<Arc<FinalizerBook>>,
    ) -> Result<Lane, crate::state::StoreError> {
        let serving = plugin.is_some();
        let plugin = plugin.unwrap_or_else(|| Arc::new(NotLoaded(name.to_string())));
        let cursors = store.cursors(name).await?;
        let installed_at = install_time(name, &cursors, store.as_ref()).await?;
        let jobs = jobs_from(&cursors);
        let concurrency = settings.concurrency.max(1);
        Ok(Lane {
            inner: Arc::new(Inner {
                name: name.to_string(),
                plugin: ArcSwap::from_pointee(plugin),
                serving: AtomicBool::new(serving),
                installed: Notify::new(),
                limiters: ArcSwap::from_pointee(limiters(&settings)),
                settings: ArcSwap::from_pointee(settings),
                permits: ArcSwap::from_pointee(Semaphore::new(concurrency)),
                concurrency: AtomicUsize::new(concurrency),
                jobs: Mutex::new(jobs),
                store,
                installed_at,
                book,
                workers: TaskTracker::new(),
                closed: AtomicBool::new(false),
                excluded: RwLock::default(),
                delivered: AtomicU64::new(0),
                retried: AtomicU64::new(0),
                dead_lettered: AtomicU64::new(0),
                failed_calls: AtomicU64::new(0),
                skipped: AtomicU64::new(0),
                pending: AtomicU64::new(0),
                in_flight: AtomicU64::new(0),
                calls: CallStats::default(),
                by_job_kind: EventCounts::default(),
                settled: Notify::new(),
                closing: Notify::new(),
                parking: Mutex::new((VecDeque::new(), false)),
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
            self.inner.installed.notify_waiters();
        }
        let concurrency = settings.concurrency.max(1);
        // A new semaphore for a new limit: calls holding the old one finish normally.
        if self.inner.concurrency.swap(concurrency, Ordering::SeqCst) != concurrency {
            self.inner
                .permits
                .store(Arc::new(Semaphore::new(concurrency)));
        }
        if self.inner.settings.load().rate_limits != settings.rate_limits {
            self.inner.limiters.store(Arc::new(limiters(&settings)));
        }
        self.inner.settings.store(Arc::new(settings));
    }

    /// Offer one observed version. The delivery mode decides whether it is queued; after a
    /// gap, transitions recorded in the status are queued first as synthetic events.
    pub fn push(&self, observed: &Observed) {
        if self.inner.closed.load(Ordering::SeqCst) || self.inner.excludes(&observed.event.cluster)
        {
            return;
        }
        let event = &observed.event;
        let mode = self.inner.settings.load().mode;
        let key = event.job_key();
        let mut jobs = self.inner.jobs.lock().unwrap_or_else(|p| p.into_inner());
        let job = jobs.entry(key.clone()).or_insert_with(|| {
            self.remember(event);
            JobState::for_event(event)
        });
        let mut offered = Vec::new();
        if observed.from_list && mode.wants_catch_up() {
            offered.extend(self.missed(job, observed));
        }
        offered.push(event.clone());
        for event in offered {
            // Only consulted when the version differs from the last one accepted, which is
            // rare for a version still queued; no set is built per event.
            let queue = &job.queue;
            let queued = |rv: &str| {
                queue
                    .iter()
                    .any(|i| !i.replay && i.event.resource_version == rv)
            };
            let decision = mode.decide(&mut job.accepted, &event, queued);
            match decision {
                Decision::Skip(_) => {
                    self.inner.skipped.fetch_add(1, Ordering::SeqCst);
                    continue;
                }
                Decision::Replace => {
                    let before = job.queue.len();
                    job.queue.retain(|i| i.replay);
                    let dropped = (before - job.queue.len()) as u64;
                    self.inner.pending.fetch_sub(dropped, Ordering::SeqCst);
                    self.inner.skipped.fetch_add(dropped, Ordering::SeqCst);
                }
                Decision::Append => {
                    let cap = self.inner.settings.load().max_queued_per_job;
                    let queued = job.queue.iter().filter(|i| !i.replay).count();
                    if queued >= cap {
                        self.park(event, cap);
                        continue;
                    }
                }
            }
            self.inner.pending.fetch_add(1, Ordering::SeqCst);
            job.queue.push_back(Item {
                event,
                replay: false,
                queued_at: Instant::now(),
            });
        }
        self.wake(&key, job);
        let idle = !job.busy && job.queue.is_empty();
        drop(jobs);
        if idle && let Some(book) = &self.inner.book {
            book.lane_done(&self.inner.name, &key);
        }
    }

    /// Moves a version that would exceed the job's queue bound to the dead-letter list: the
    /// plugin is down or far behind, and holding every version in memory would grow without
    /// limit. The version stays durable and replayable (`jobrelay dead-letters replay`), and a
    /// deletion held by the finalizer is released as for any dead letter.
    fn park(&self, event: JobEvent, cap: usize) {
        let mut parking = self.inner.parking.lock().unwrap_or_else(|p| p.into_inner());
        parking.0.push_back((event, cap));
        if parking.1 {
            return; // the running writer takes it
        }
        parking.1 = true;
        let inner = self.inner.clone();
        tokio::spawn(async move {
            loop {
                let next = {
                    let mut parking = inner.parking.lock().unwrap_or_else(|p| p.into_inner());
                    let next = parking.0.pop_front();
                    if next.is_none() {
                        parking.1 = false;
                    }
                    next
                };
                let Some((event, cap)) = next else { break };
                let error = CallError::Host(format!(
                    "lane overflow: {cap} versions of this job were already waiting (the \
                     plugin is down or too slow; max_queued_per_job)"
                ));
                dead_letter(&inner, &event, &error, 0).await;
            }
        });
    }

    /// Note a job seen for the first time in the store (see [`CursorStore::remember_job`]).
    /// Written in the background: losing it only weakens deletion detection across a crash.
    fn remember(&self, event: &JobEvent) {
        if event.phase == Phase::Deleted {
            return;
        }
        let store = self.inner.store.clone();
        let cursor = Cursor::from_event(&self.inner.name, event);
        tokio::spawn(async move {
            if let Err(e) = store.remember_job(&cursor).await {
                tracing::warn!(plugin = %cursor.plugin, job = %cursor.uid, error = %e,
                    "cannot note a newly seen job");
            }
        });
    }

    /// Missed transitions of a job seen again after a gap, as synthetic events. A job the lane
    /// has accepted nothing of (first seen in a list, or remembered but never delivered before
    /// a restart) gets every transition its status records, unless it already existed when
    /// the plugin was installed.
    fn missed(&self, job: &JobState, observed: &Observed) -> Vec<JobEvent> {
        if job.accepted.deleted {
            return Vec::new();
        }
        let Some(last_phase) = job.accepted.phase else {
            return self.first_sight(observed);
        };
        let Some(last_time) = job.accepted.transition_time.as_deref() else {
            return Vec::new();
        };
        if last_phase == observed.event.phase {
            return Vec::new();
        }
        let Ok(object) = serde_json::from_str::<serde_json::Value>(&observed.event.object_json)
        else {
            return Vec::new();
        };
        let missed = catch_up::missed_transitions(
            &observed.kind.normalizer,
            &object,
            last_phase,
            Some(last_time),
        );
        catch_up::synthetic_events(&observed.event, last_phase, &missed)
    }

    /// The recorded history of a job the lane has accepted nothing of, as synthetic events:
    /// none for a job created before the plugin was installed.
    fn first_sight(&self, observed: &Observed) -> Vec<JobEvent> {
        let Ok(object) = serde_json::from_str::<serde_json::Value>(&observed.event.object_json)
        else {
            return Vec::new();
        };
        if let Some(installed) = &self.inner.installed_at
            && !catch_up::created_after(&object, installed)
        {
            return Vec::new();
        }
        let recorded = catch_up::recorded_transitions(&observed.kind.normalizer, &object);
        catch_up::first_sight_events(&observed.event, &recorded)
    }

    /// Queue a dead letter again, as the operator asked: it bypasses the delivery mode and
    /// does not move the job's cursor (later versions may have been delivered since).
    pub fn push_replay(&self, event: JobEvent) {
        if self.inner.closed.load(Ordering::SeqCst) || self.inner.excludes(&event.cluster) {
            return;
        }
        let key = event.job_key();
        let mut jobs = self.inner.jobs.lock().unwrap_or_else(|p| p.into_inner());
        let job = jobs
            .entry(key.clone())
            .or_insert_with(|| JobState::for_event(&event));
        self.inner.pending.fetch_add(1, Ordering::SeqCst);
        job.queue.push_back(Item {
            event,
            queued_at: Instant::now(),
            replay: true,
        });
        self.wake(&key, job);
    }

    /// A stream finished a (re-)list: jobs of that cluster, kind and namespace that the lane
    /// knows but that were not listed are gone, and get their deletion (a job deleted while
    /// jobrelay was down or disconnected is still delivered as deleted).
    pub fn listed(&self, listed: &Listed) {
        if self.inner.excludes(&listed.cluster) {
            return;
        }
        let mut gone: Vec<JobEvent> = Vec::new();
        {
            let jobs = self.inner.jobs.lock().unwrap_or_else(|p| p.into_inner());
            for (key, job) in jobs.iter() {
                let same_stream = key.cluster == listed.cluster
                    && *job.api_version == listed.job_kind.api_version()
                    && *job.kind == listed.job_kind.kind
                    && listed
                        .namespace
                        .as_deref()
                        .is_none_or(|ns| ns == job.namespace);
                if same_stream && !job.accepted.deleted && !listed.uids.contains(&key.uid) {
                    gone.push(gone_event(key, job));
                }
            }
        }
        for event in gone {
            let kind = listed.job_kind.clone();
            self.push(&Observed {
                event,
                kind,
                from_list: false,
            });
        }
    }

    /// Start the job's worker if it has work and none is running.
    fn wake(&self, key: &JobKey, job: &mut JobState) {
        if job.busy || job.queue.is_empty() {
            return;
        }
        job.busy = true;
        let inner = self.inner.clone();
        self.inner.workers.spawn(work(inner, key.clone()));
    }

    pub fn stats(&self) -> LaneStats {
        let i = &self.inner;
        let (jobs, oldest) = {
            let jobs = i.jobs.lock().unwrap_or_else(|p| p.into_inner());
            let oldest = jobs
                .values()
                .filter_map(|job| job.queue.front().map(|item| item.queued_at))
                .min();
            (jobs.len() as u64, oldest)
        };
        LaneStats {
            delivered: i.delivered.load(Ordering::SeqCst),
            retried: i.retried.load(Ordering::SeqCst),
            dead_lettered: i.dead_lettered.load(Ordering::SeqCst),
            failed_calls: i.failed_calls.load(Ordering::SeqCst),
            skipped: i.skipped.load(Ordering::SeqCst),
            pending: i.pending.load(Ordering::SeqCst),
            in_flight: i.in_flight.load(Ordering::SeqCst),
            jobs,
            calls: i.calls.snapshot(),
            oldest_pending_seconds: oldest.map_or(0.0, |at| at.elapsed().as_secs_f64()),
            memory_high_water_bytes: i.plugin.load().memory_high_water_bytes(),
            by_job_kind: i.by_job_kind.snapshot(),
        }
    }

    /// Wait until nothing is queued or running.
    pub async fn idle(&self) {
        loop {
            let notified = self.inner.settled.notified();
            if self.inner.pending.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }

    /// Forgets what the lane knows of every job that has no work in it and reads the
    /// plugin's cursors again (of one cluster, or of all). For a replica that takes over
    /// delivery: while it did not deliver, another replica moved the shared cursors on.
    /// Taking a cluster back also accepts its versions again (see
    /// [`forget_cluster`](Lane::forget_cluster)).
    pub async fn reload(&self, cluster: Option<&str>) -> Result<(), crate::state::StoreError> {
        let of = |c: &str| cluster.is_none_or(|only| only == c);
        if let Some(cluster) = cluster {
            self.inner
                .excluded
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .remove(cluster);
        }
        let cursors: Vec<Cursor> = self
            .inner
            .store
            .cursors(&self.inner.name)
            .await?
            .into_iter()
            .filter(|c| of(&c.cluster))
            .collect();
        let fresh = jobs_from(&cursors);
        let mut jobs = self.inner.jobs.lock().unwrap_or_else(|p| p.into_inner());
        jobs.retain(|key, job| !of(&key.cluster) || job.busy || !job.queue.is_empty());
        for (key, job) in fresh {
            jobs.entry(key).or_insert(job);
        }
        Ok(())
    }

    /// Lets go of one cluster (sharding hands it to another replica): versions queued for its
    /// jobs are dropped unacknowledged (the next owner delivers them from the shared cursors),
    /// calls in flight are waited for, and the cluster's jobs are forgotten.
    pub async fn forget_cluster(&self, cluster: &str) {
        self.inner
            .excluded
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(cluster.to_string());
        // Retry waits of the cluster's jobs end now (others go back to waiting).
        self.inner.closing.notify_waiters();
        {
            let mut jobs = self.inner.jobs.lock().unwrap_or_else(|p| p.into_inner());
            let mut dropped = 0u64;
            for (_, job) in jobs.iter_mut().filter(|(k, _)| k.cluster == cluster) {
                // The front item of a busy job is the call in flight: its worker acknowledges
                // and pops it.
                let keep = usize::from(job.busy).min(job.queue.len());
                dropped += (job.queue.len() - keep) as u64;
                job.queue.truncate(keep);
            }
            jobs.retain(|key, job| key.cluster != cluster || job.busy);
            self.inner.pending.fetch_sub(dropped, Ordering::SeqCst);
        }
        self.inner.settled.notify_waiters();
        loop {
            let notified = self.inner.settled.notified();
            let busy = {
                let jobs = self.inner.jobs.lock().unwrap_or_else(|p| p.into_inner());
                jobs.iter().any(|(k, j)| k.cluster == cluster && j.busy)
            };
            if !busy {
                break;
            }
            notified.await;
        }
        // Whatever is still queued (a call cut short keeps its item) is dropped with the job.
        let mut jobs = self.inner.jobs.lock().unwrap_or_else(|p| p.into_inner());
        let mut left = 0u64;
        jobs.retain(|key, job| {
            let ours = key.cluster == cluster;
            if ours {
                left += job.queue.len() as u64;
            }
            !ours
        });
        self.inner.pending.fetch_sub(left, Ordering::SeqCst);
        drop(jobs);
        self.inner.settled.notify_waiters();
    }

    /// Stop starting calls and wait for the ones in flight. Queued events stay unacknowledged:
    /// their cursors were not advanced, so a restart delivers them.
    pub async fn close(&self) {
        self.inner.closed.store(true, Ordering::SeqCst);
        self.inner.closing.notify_waiters();
        self.inner.workers.close();
        self.inner.workers.wait().await;
        self.inner.settled.notify_waiters();
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }
}

/// Stands for "installed before any job": the install time of a plugin that already had
/// cursors when install times began to be kept.
const BEFORE_ANY_JOB: &str = "1970-01-01T00:00:00Z";

/// The plugin's install time, recorded now if the store has none. A plugin that has cursors
/// but no install time was installed by a release that did not record it, long before the
/// jobs it has not seen yet: those get their history. A stored time that does not parse is
/// logged and treated the same way.
async fn install_time(
    plugin: &str,
    cursors: &[Cursor],
    store: &dyn CursorStore,
) -> Result<Option<chrono::DateTime<chrono::FixedOffset>>, crate::state::StoreError> {
    let now = if cursors.is_empty() {
        chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    } else {
        BEFORE_ANY_JOB.to_string()
    };
    let stored = store.installed(plugin, &now).await?;
    match chrono::DateTime::parse_from_rfc3339(&stored) {
        Ok(at) => Ok(Some(at)),
        Err(e) => {
            tracing::warn!(plugin, installed_at = %stored, error = %e,
                "the stored install time does not parse; every job gets its recorded history");
            Ok(None)
        }
    }
}

fn jobs_from(cursors: &[Cursor]) -> HashMap<JobKey, JobState> {
    cursors
        .iter()
        .map(|c| {
            let key = JobKey {
                cluster: c.cluster.clone(),
                uid: c.uid.clone(),
            };
            (key, JobState::from_cursor(c))
        })
        .collect()
}

/// The end of one (re-)list of one stream, for deletion-while-away detection.
#[derive(Debug, Clone)]
pub struct Listed {
    pub cluster: String,
    pub namespace: Option<String>,
    pub uids: Arc<HashSet<String>>,
    pub job_kind: Arc<JobKind>,
}

/// The deletion of a job that vanished unseen. Its version is the last accepted one plus
/// `-gone`, so its id is stable across restarts.
fn gone_event(key: &JobKey, job: &JobState) -> JobEvent {
    let rv = format!(
        "{}-gone",
        job.accepted.resource_version.as_deref().unwrap_or("0")
    );
    let object = serde_json::json!({
        "apiVersion": &*job.api_version,
        "kind": &*job.kind,
        "metadata": {"name": job.name, "namespace": job.namespace, "uid": key.uid},
    });
    JobEvent {
        id: JobEvent::make_id(&key.cluster, &key.uid, &rv),
        transition_key: TransitionKey::Deletion.make(&key.cluster, &key.uid, Phase::Deleted),
        cluster: key.cluster.clone(),
        api_version: job.api_version.to_string(),
        kind: job.kind.to_string(),
        namespace: job.namespace.clone(),
        name: job.name.clone(),
        uid: key.uid.clone(),
        resource_version: rv,
        generation: None,
        phase: Phase::Deleted,
        raw_phase: String::new(),
        reason: Some("NotListed".into()),
        message: Some("the job was gone when jobrelay listed its cluster again".into()),
        previous_phase: None,
        transition_time: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        labels: Default::default(),
        annotations: Default::default(),
        object_json: Arc::from(object.to_string()),
        synthetic: false,
    }
}

/// Drain one job's queue, one event at a time.
async fn work(inner: Arc<Inner>, key: JobKey) {
    loop {
        let next = {
            let mut jobs = inner.jobs.lock().unwrap_or_else(|p| p.into_inner());
            let Some(job) = jobs.get_mut(&key) else {
                return;
            };
            let closed = inner.closed.load(Ordering::SeqCst);
            match job.queue.front() {
                Some(item) if !closed => {
                    let mut event = item.event.clone();
                    if !item.replay {
                        event.previous_phase = job.delivered_phase;
                    }
                    Some((event, item.replay))
                }
                _ => {
                    job.busy = false;
                    // A deleted job's state is no longer needed once nothing waits for it.
                    if job.accepted.deleted && job.queue.is_empty() {
                        jobs.remove(&key);
                    }
                    None
                }
            }
        };
        let Some((event, replay)) = next else {
            if let Some(book) = &inner.book {
                book.lane_done(&inner.name, &key);
            }
            inner.settled.notify_waiters();
            return;
        };
        let Some(outcome) = deliver(&inner, &event).await else {
            // The lane closed, or let go of the job's cluster, while retrying: the event stays
            // unacknowledged for the next start or the next owner.
            if let Some(job) = inner
                .jobs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_mut(&key)
            {
                job.busy = false;
            }
            inner.settled.notify_waiters();
            return;
        };
        acknowledge(&inner, &key, &event, replay, outcome).await;
    }
}

/// How a queued event ended.
enum Outcome {
    Delivered,
    DeadLettered,
}

/// Call the plugin until it succeeds, gives up or runs out of attempts. `None`: the lane
/// closed before the event was settled.
async fn deliver(inner: &Arc<Inner>, event: &JobEvent) -> Option<Outcome> {
    let settings = inner.settings.load_full();
    let mut delays = settings.retry.delays();
    let mut attempts = 0u32;
    if !until_serving(inner, &event.cluster).await {
        return None;
    }
    loop {
        for limiter in inner.limiters.load().iter() {
            limiter.until_ready().await;
        }
        let permits = inner.permits.load_full();
        let permit = permits.acquire().await.ok()?;
        if inner.stops(&event.cluster) {
            return None;
        }
        let plugin = Arc::clone(&**inner.plugin.load());
        inner.in_flight.fetch_add(1, Ordering::SeqCst);
        let started = Instant::now();
        let result = plugin.handle(event).await;
        inner.calls.record(started.elapsed(), &result);
        inner.in_flight.fetch_sub(1, Ordering::SeqCst);
        drop(permit);
        attempts += 1;
        let error = match result {
            Ok(()) => {
                tracing::debug!(plugin = %inner.name, version = %plugin.version(),
                    event = %event.id, phase = %event.phase, attempts,
                    elapsed_ms = started.elapsed().as_millis() as u64, "delivered");
                return Some(Outcome::Delivered);
            }
            Err(e) => e,
        };
        inner.failed_calls.fetch_add(1, Ordering::SeqCst);
        let delay = if error.is_retryable() {
            delays.next()
        } else {
            None
        };
        let Some(delay) = delay else {
            dead_letter(inner, event, &error, attempts).await;
            return Some(Outcome::DeadLettered);
        };
        inner.retried.fetch_add(1, Ordering::SeqCst);
        inner
            .by_job_kind
            .add(&event.cluster, &event.kind, Count::Retried);
        tracing::warn!(plugin = %inner.name, version = %plugin.version(), event = %event.id,
            attempt = attempts, retry_in_ms = delay.as_millis() as u64, error = %error,
            "plugin call failed; retrying");
        // Register for the close signal before checking the flags, so a close that happens
        // in between still cuts the wait short. A signal for another cluster leaving only
        // wakes this wait to check again.
        let until = tokio::time::Instant::now() + delay;
        loop {
            let closing = inner.closing.notified();
            tokio::pin!(closing);
            closing.as_mut().enable();
            if inner.stops(&event.cluster) {
                return None;
            }
            tokio::select! {
                _ = tokio::time::sleep_until(until) => break,
                _ = closing => {}
            }
        }
    }
}

/// Waits until the lane has a plugin version. `false`: the lane closed or let go of the
/// event's cluster first, and the event stays unacknowledged.
async fn until_serving(inner: &Inner, cluster: &str) -> bool {
    loop {
        let installed = inner.installed.notified();
        let closing = inner.closing.notified();
        tokio::pin!(installed, closing);
        installed.as_mut().enable();
        closing.as_mut().enable();
        if inner.stops(cluster) {
            return false;
        }
        if inner.serving.load(Ordering::SeqCst) {
            return true;
        }
        tokio::select! {
            _ = installed => {}
            _ = closing => {}
        }
    }
}

/// Stands in for the plugin in a lane that has no version yet; never called, since workers
/// wait for a version before calling (see [`until_serving`]).
struct NotLoaded(String);

#[async_trait::async_trait]
impl Handler for NotLoaded {
    fn name(&self) -> &str {
        &self.0
    }

    fn version(&self) -> &str {
        "-"
    }

    async fn handle(&self, _event: &JobEvent) -> Result<(), CallError> {
        Err(CallError::Host(
            "the plugin has no version loaded yet".into(),
        ))
    }
}

async fn dead_letter(inner: &Inner, event: &JobEvent, error: &CallError, attempts: u32) {
    inner.dead_lettered.fetch_add(1, Ordering::SeqCst);
    inner
        .by_job_kind
        .add(&event.cluster, &event.kind, Count::DeadLettered);
    if let Some(book) = &inner.book {
        book.lane_dead_lettered(&inner.name, &event.job_key());
    }
    tracing::error!(plugin = %inner.name, event = %event.id, attempts, error = %error,
        "event moved to the dead-letter list");
    if let Err(e) = inner
        .store
        .add_dead_letter(&inner.name, event, &error.to_string(), attempts)
        .await
    {
        tracing::error!(plugin = %inner.name, event = %event.id, error = %e,
            "cannot record the dead letter; the event will be delivered again after a restart");
    }
}

/// Settle the event at the head of the job's queue: record it, persist the cursor, pop it.
async fn acknowledge(
    inner: &Inner,
    key: &JobKey,
    event: &JobEvent,
    replay: bool,
    outcome: Outcome,
) {
    if matches!(outcome, Outcome::Delivered) {
        inner.delivered.fetch_add(1, Ordering::SeqCst);
        inner
            .by_job_kind
            .add(&event.cluster, &event.kind, Count::Delivered);
    }
    if !replay {
        let cursor = Cursor::from_event(&inner.name, event);
        let saved = if cursor.deleted {
            inner
                .store
                .remove_cursor(&cursor.plugin, &cursor.cluster, &cursor.uid)
                .await
        } else {
            inner.store.save_cursor(&cursor).await
        };
        if let Err(e) = saved {
            tracing::error!(plugin = %inner.name, event = %event.id, error = %e,
                "cannot store the cursor; the event may be delivered again after a restart");
        }
    }
    let mut jobs = inner.jobs.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(job) = jobs.get_mut(key) {
        job.queue.pop_front();
        if job.queue.is_empty() {
            // An idle job keeps no queue buffer: it would hold room for several whole events
            // (hundreds of bytes each) for every job the lane tracks.
            job.queue = VecDeque::new();
        }
        if !replay {
            job.delivered_phase = Some(event.phase);
        }
    }
    inner.pending.fetch_sub(1, Ordering::SeqCst);
    drop(jobs);
    inner.settled.notify_waiters();
}
