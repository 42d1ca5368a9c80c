//! Request counters, so tests can assert on client behaviour (did the watcher re-list? how many
//! watch connections did it open? is a watch still open?) rather than only on outcomes.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use super::resources::Gvr;

/// How many recent requests [`Stats`] remembers for debugging.
const RECENT_LIMIT: usize = 1000;

/// One served request, as remembered for [`crate::SimCluster::recent_requests`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestRecord {
    pub method: String,
    /// Path and query as received.
    pub uri: String,
    /// The response status code (200 for a watch that was started).
    pub status: u16,
}

/// One DELETE of an object over HTTP, as [`crate::SimCluster::deletions`] returns it: every one
/// is kept (they are few), with the time it was served.
#[derive(Clone, Debug)]
pub struct DeletionRecord {
    pub at: std::time::Instant,
    /// The resource's plural.
    pub resource: String,
    pub namespace: String,
    pub name: String,
    /// `preconditions.uid` of the request, if any.
    pub precondition_uid: Option<String>,
    /// `propagationPolicy` of the request, if any.
    pub propagation: Option<String>,
    /// The response status code.
    pub status: u16,
}

#[derive(Default)]
struct PerResource {
    lists: usize,
    watches: usize,
}

#[derive(Default)]
pub(crate) struct Stats {
    total: AtomicUsize,
    open_watches: AtomicUsize,
    per_resource: Mutex<HashMap<Gvr, PerResource>>,
    recent: Mutex<VecDeque<RequestRecord>>,
    deletions: Mutex<Vec<DeletionRecord>>,
}

impl Stats {
    pub(crate) fn count_request(&self) {
        self.total.fetch_add(1, Ordering::SeqCst);
    }

    pub(crate) fn count_list(&self, gvr: &Gvr) {
        self.with_resource(gvr, |r| r.lists += 1);
    }

    pub(crate) fn count_watch(&self, gvr: &Gvr) {
        self.with_resource(gvr, |r| r.watches += 1);
    }

    fn with_resource(&self, gvr: &Gvr, f: impl FnOnce(&mut PerResource)) {
        let mut map = self.per_resource.lock();
        f(map.entry(gvr.clone()).or_default());
    }

    pub(crate) fn record(&self, record: RequestRecord) {
        let mut recent = self.recent.lock();
        if recent.len() >= RECENT_LIMIT {
            recent.pop_front();
        }
        recent.push_back(record);
    }

    pub(crate) fn record_deletion(&self, record: DeletionRecord) {
        let mut deletions = self.deletions.lock();
        deletions.push(record);
    }

    pub(crate) fn deletions(&self) -> Vec<DeletionRecord> {
        self.deletions.lock().clone()
    }

    pub(crate) fn recent(&self) -> Vec<RequestRecord> {
        let recent = self.recent.lock();
        recent.iter().cloned().collect()
    }

    pub(crate) fn total(&self) -> usize {
        self.total.load(Ordering::SeqCst)
    }

    /// Sum over every resource whose plural is `plural` (e.g. both kinds of `jobs`).
    pub(crate) fn lists_by_plural(&self, plural: &str) -> usize {
        self.sum(|g| g.plural == plural, |r| r.lists)
    }

    pub(crate) fn watches_by_plural(&self, plural: &str) -> usize {
        self.sum(|g| g.plural == plural, |r| r.watches)
    }

    pub(crate) fn lists_of(&self, gvr: &Gvr) -> usize {
        self.sum(|g| g == gvr, |r| r.lists)
    }

    pub(crate) fn watches_of(&self, gvr: &Gvr) -> usize {
        self.sum(|g| g == gvr, |r| r.watches)
    }

    fn sum(&self, pick: impl Fn(&Gvr) -> bool, field: impl Fn(&PerResource) -> usize) -> usize {
        let map = self.per_resource.lock();
        map.iter()
            .filter(|(g, _)| pick(g))
            .map(|(_, r)| field(r))
            .sum()
    }

    pub(crate) fn open_watches(&self) -> usize {
        self.open_watches.load(Ordering::SeqCst)
    }

    /// Counts a watch stream as open until the guard is dropped.
    pub(crate) fn watch_opened(&self) -> OpenWatchGuard<'_> {
        self.open_watches.fetch_add(1, Ordering::SeqCst);
        OpenWatchGuard { stats: self }
    }
}

/// Decrements the open-watch count on drop.
pub(crate) struct OpenWatchGuard<'a> {
    stats: &'a Stats,
}

impl Drop for OpenWatchGuard<'_> {
    fn drop(&mut self) {
        self.stats.open_watches.fetch_sub(1, Ordering::SeqCst);
    }
}
