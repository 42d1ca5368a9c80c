//! One plugin's lane: per-job FIFO queues drained by one worker per busy job, under a
//! semaphore that bounds how many jobs the plugin handles at once.
//!
//! The plugin version is looked up when a call starts, not when an event is queued: a hot
//! reload swaps the version in place and the queue is untouched, so no event is dropped or
//! handled twice by a reload, and calls already running finish on the version they started on.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use arc_swap::ArcSwap;
use serde::Serialize;
use tokio::sync::{Notify, Semaphore};
use tokio_util::task::TaskTracker;

use crate::runtime::PluginVersion;
use crate::watch::event::{JobEvent, JobKey};

/// Counters of one lane, for status and tests.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct LaneStats {
    /// Calls that returned ok.
    pub delivered: u64,
    /// Calls that failed (any error); without retries yet, such an event is not handled.
    pub failed: u64,
    /// Events waiting in the lane.
    pub pending: u64,
    /// Calls running now.
    pub in_flight: u64,
}

struct Inner {
    plugin: ArcSwap<PluginVersion>,
    kinds: ArcSwap<Vec<String>>,
    permits: ArcSwap<Semaphore>,
    concurrency: AtomicUsize,
    queues: Mutex<HashMap<JobKey, VecDeque<JobEvent>>>,
    workers: TaskTracker,
    closed: AtomicBool,
    delivered: AtomicU64,
    failed: AtomicU64,
    pending: AtomicU64,
    in_flight: AtomicU64,
    /// Woken whenever the lane may have become idle.
    settled: Notify,
}

/// A cheap handle to one plugin's lane.
#[derive(Clone)]
pub struct Lane {
    inner: Arc<Inner>,
}

impl Lane {
    pub fn new(plugin: Arc<PluginVersion>, kinds: Vec<String>, concurrency: usize) -> Lane {
        Lane {
            inner: Arc::new(Inner {
                plugin: ArcSwap::new(plugin),
                kinds: ArcSwap::from_pointee(kinds),
                permits: ArcSwap::from_pointee(Semaphore::new(concurrency.max(1))),
                concurrency: AtomicUsize::new(concurrency.max(1)),
                queues: Mutex::new(HashMap::new()),
                workers: TaskTracker::new(),
                closed: AtomicBool::new(false),
                delivered: AtomicU64::new(0),
                failed: AtomicU64::new(0),
                pending: AtomicU64::new(0),
                in_flight: AtomicU64::new(0),
                settled: Notify::new(),
            }),
        }
    }

    /// The version that the next call will use.
    pub fn plugin(&self) -> Arc<PluginVersion> {
        self.inner.plugin.load_full()
    }

    /// Whether this lane takes events of the given kind name (empty list: all kinds).
    pub fn wants(&self, kind_name: &str) -> bool {
        let kinds = self.inner.kinds.load();
        kinds.is_empty() || kinds.iter().any(|k| k == kind_name)
    }

    /// Install a new plugin version and settings. Queued events go to the new version; calls
    /// in flight finish on the old one.
    pub fn reconfigure(&self, plugin: Arc<PluginVersion>, kinds: Vec<String>, concurrency: usize) {
        self.inner.plugin.store(plugin);
        self.inner.kinds.store(Arc::new(kinds));
        let concurrency = concurrency.max(1);
        // A new semaphore for a new limit: calls holding the old one finish normally.
        if self.inner.concurrency.swap(concurrency, Ordering::SeqCst) != concurrency {
            self.inner
                .permits
                .store(Arc::new(Semaphore::new(concurrency)));
        }
    }

    /// Queue one event. Starts a worker for the job if it has none.
    pub fn push(&self, event: JobEvent) {
        if self.inner.closed.load(Ordering::SeqCst) {
            return;
        }
        let key = event.job_key();
        let mut queues = self.inner.queues.lock().unwrap_or_else(|p| p.into_inner());
        self.inner.pending.fetch_add(1, Ordering::SeqCst);
        if let Some(queue) = queues.get_mut(&key) {
            queue.push_back(event); // its worker is running and will get to it
            return;
        }
        queues.insert(key.clone(), VecDeque::from([event]));
        drop(queues);
        let inner = self.inner.clone();
        self.inner.workers.spawn(work(inner, key));
    }

    pub fn stats(&self) -> LaneStats {
        let i = &self.inner;
        LaneStats {
            delivered: i.delivered.load(Ordering::SeqCst),
            failed: i.failed.load(Ordering::SeqCst),
            pending: i.pending.load(Ordering::SeqCst),
            in_flight: i.in_flight.load(Ordering::SeqCst),
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

    /// Stop taking events, drop what is queued, and wait for calls in flight to finish.
    pub async fn close(&self) {
        self.inner.closed.store(true, Ordering::SeqCst);
        let dropped: usize = {
            let mut queues = self.inner.queues.lock().unwrap_or_else(|p| p.into_inner());
            queues.values_mut().map(|q| q.drain(..).count()).sum()
        };
        self.inner
            .pending
            .fetch_sub(dropped as u64, Ordering::SeqCst);
        self.inner.workers.close();
        self.inner.workers.wait().await;
        self.inner.settled.notify_waiters();
    }
}

/// Drain one job's queue, one event at a time.
async fn work(inner: Arc<Inner>, key: JobKey) {
    loop {
        let event = {
            let mut queues = inner.queues.lock().unwrap_or_else(|p| p.into_inner());
            let next = queues.get_mut(&key).and_then(VecDeque::pop_front);
            if next.is_none() {
                queues.remove(&key);
            }
            next
        };
        let Some(event) = event else {
            inner.settled.notify_waiters();
            return;
        };
        let permits = inner.permits.load_full();
        let Ok(_permit) = permits.acquire().await else {
            return;
        };
        let plugin = inner.plugin.load_full();
        inner.in_flight.fetch_add(1, Ordering::SeqCst);
        let started = Instant::now();
        let result = plugin.handle(&event).await;
        inner.in_flight.fetch_sub(1, Ordering::SeqCst);
        match result {
            Ok(()) => {
                inner.delivered.fetch_add(1, Ordering::SeqCst);
                tracing::debug!(plugin = %plugin.name(), version = %plugin.version(),
                    event = %event.id, phase = %event.phase,
                    elapsed_ms = started.elapsed().as_millis() as u64, "delivered");
            }
            Err(e) => {
                inner.failed.fetch_add(1, Ordering::SeqCst);
                tracing::warn!(plugin = %plugin.name(), version = %plugin.version(),
                    event = %event.id, error = %e, "plugin call failed");
            }
        }
        inner.pending.fetch_sub(1, Ordering::SeqCst);
        inner.settled.notify_waiters();
    }
}
