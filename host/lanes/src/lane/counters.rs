//! What a lane counts — events delivered, retried, deferred, dead-lettered, skipped, filtered,
//! read back; calls in flight, their durations, the time from arrival to acknowledgement — and
//! [`LaneStats`], the snapshot status, metrics and tests read.
//!
//! Counted with atomics and the histograms of `call_stats`, beside the lane's queues, never under
//! their lock, so counting costs a hot path nothing it waits on.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

use crate::call_stats::{CallSnapshot, CallStats, DurationSnapshot, Durations};
use crate::event_counts::{Counts, EventCounts};

/// The lane's counters.
#[derive(Default)]
pub(super) struct Counters {
    pub(super) delivered: AtomicU64,
    pub(super) retried: AtomicU64,
    pub(super) deferred: AtomicU64,
    pub(super) dead_lettered: AtomicU64,
    pub(super) failed_calls: AtomicU64,
    pub(super) skipped: AtomicU64,
    pub(super) filtered: AtomicU64,
    pub(super) filter_errors: AtomicU64,
    /// Events read back from the inbox for their call.
    pub(super) read_back: AtomicU64,
    pub(super) in_flight: AtomicU64,
    /// Durations and failure kinds of the plugin's calls.
    pub(super) calls: CallStats,
    /// Delivered, retried and dead-lettered events by cluster and kind.
    pub(super) by_job_kind: EventCounts,
    /// Arrival to acknowledgement, per delivered event.
    pub(super) delivery: Durations,
}

/// Adds `n` to `counter`.
pub(super) fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::SeqCst);
}

impl Counters {
    /// The counts in `stats`; the fields that are not counts stay as they are.
    pub(super) fn fill(&self, stats: &mut LaneStats) {
        let load = |c: &AtomicU64| c.load(Ordering::SeqCst);
        stats.delivered = load(&self.delivered);
        stats.retried = load(&self.retried);
        stats.deferred = load(&self.deferred);
        stats.dead_lettered = load(&self.dead_lettered);
        stats.failed_calls = load(&self.failed_calls);
        stats.skipped = load(&self.skipped);
        stats.filtered = load(&self.filtered);
        stats.filter_errors = load(&self.filter_errors);
        stats.read_back = load(&self.read_back);
        stats.in_flight = load(&self.in_flight);
        stats.calls = self.calls.snapshot();
        stats.by_job_kind = self.by_job_kind.snapshot();
        stats.delivery = self.delivery.snapshot();
    }
}

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
    /// nothing waits. Grows when a plugin is down or too slow; an event the plugin deferred
    /// waits on purpose and is left out (see `deferred_waiting`).
    pub oldest_pending_seconds: f64,
    /// Jobs whose next event waits because the plugin deferred it (quiet hours, a digest, a
    /// service's `Retry-After`): not lag.
    pub deferred_waiting: u64,
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
