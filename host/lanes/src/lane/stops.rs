//! What makes a lane's workers stop or wait: the lane closing, a cluster let go (sharding
//! handed it to another replica), no plugin version installed yet, and the rate limits (a
//! reload that changes them wakes the calls waiting on the old ones).
//!
//! One part with the signals and the waits on them, so the worker (its calls, retries and
//! read-backs) and the settling of outcomes (a dead letter stored later) wait the same way
//! without reaching into each other. Every wait registers for its signal before it checks the
//! flags, so a signal in between still ends it.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::RwLock;
use tokio::sync::Notify;

use crate::rate_limit::{CallSlot, RateLimits, Wait};

/// The lane's stop and wait signals.
pub(super) struct Stops {
    closed: AtomicBool,
    /// Clusters this lane no longer delivers: their versions are dropped on arrival and their
    /// retries cut short, unacknowledged.
    excluded: RwLock<HashSet<String>>,
    /// Clusters judged offline (their health checks fail): a retryable failure of one of
    /// their events is waited out, not counted against the event's attempts.
    offline: RwLock<HashSet<String>>,
    /// Woken when the lane closes or lets go of a cluster, to cut waits short.
    closing: Notify,
    /// False while the plugin has no version yet (its first load failed for a reason that may
    /// pass): events queue and wait, unacknowledged, and no call or retry is spent on them.
    serving: AtomicBool,
    /// Woken when a version is installed.
    version_installed: Notify,
    /// Woken when a reload replaces the rate limits: calls waiting for room wait again under
    /// the new ones.
    limits_changed: Notify,
}

impl Stops {
    /// Signals for a lane that is open, and serving when it has a version.
    pub(super) fn new(serving: bool) -> Stops {
        Stops {
            closed: AtomicBool::new(false),
            excluded: RwLock::default(),
            offline: RwLock::default(),
            closing: Notify::new(),
            serving: AtomicBool::new(serving),
            version_installed: Notify::new(),
            limits_changed: Notify::new(),
        }
    }

    /// Whether the lane is closed.
    pub(super) fn closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Closes the lane: every wait ends, and no call starts.
    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.closing.notify_waiters();
    }

    /// Whether versions of `cluster` are no longer this lane's to deliver.
    pub(super) fn excludes(&self, cluster: &str) -> bool {
        self.excluded.read().contains(cluster)
    }

    /// Lets go of `cluster`: its waits end now (the others wake, see that they go on, and wait
    /// again).
    pub(super) fn exclude(&self, cluster: &str) {
        self.excluded.write().insert(cluster.to_string());
        self.closing.notify_waiters();
    }

    /// Takes `cluster` back.
    pub(super) fn include(&self, cluster: &str) {
        self.excluded.write().remove(cluster);
    }

    /// `cluster` is judged offline (`true`), or back.
    pub(super) fn set_offline(&self, cluster: &str, offline: bool) {
        if offline {
            self.offline.write().insert(cluster.to_string());
        } else {
            self.offline.write().remove(cluster);
        }
    }

    /// Whether `cluster` is judged offline.
    pub(super) fn offline(&self, cluster: &str) -> bool {
        self.offline.read().contains(cluster)
    }

    /// Whether a call or retry for `cluster` must stop: the lane closed or let it go.
    pub(super) fn stops(&self, cluster: &str) -> bool {
        self.closed() || self.excludes(cluster)
    }

    /// Whether a plugin version is installed.
    pub(super) fn serving(&self) -> bool {
        self.serving.load(Ordering::SeqCst)
    }

    /// A version is installed: the calls waiting for one go.
    pub(super) fn installed(&self) {
        if !self.serving.swap(true, Ordering::SeqCst) {
            self.version_installed.notify_waiters();
        }
    }

    /// The rate limits were replaced: the calls waiting for room wait again under the new.
    pub(super) fn limits_changed(&self) {
        self.limits_changed.notify_waiters();
    }

    /// Waits `delay`, cut short when the lane closes or lets go of `cluster`: `false` then.
    /// A signal for another cluster leaving only wakes it to check again.
    pub(super) async fn wait(&self, cluster: &str, delay: Duration) -> bool {
        let until = tokio::time::Instant::now() + delay;
        loop {
            let closing = self.closing.notified();
            tokio::pin!(closing);
            closing.as_mut().enable();
            if self.stops(cluster) {
                return false;
            }
            tokio::select! {
                _ = tokio::time::sleep_until(until) => return true,
                _ = closing => {}
            }
        }
    }

    /// Waits until the lane has a plugin version. `false`: the lane closed or let go of
    /// `cluster` first, and the event stays unacknowledged.
    pub(super) async fn until_serving(&self, cluster: &str) -> bool {
        loop {
            let installed = self.version_installed.notified();
            let closing = self.closing.notified();
            tokio::pin!(installed, closing);
            installed.as_mut().enable();
            closing.as_mut().enable();
            if self.stops(cluster) {
                return false;
            }
            if self.serving() {
                return true;
            }
            tokio::select! {
                _ = installed => {}
                _ = closing => {}
            }
        }
    }

    /// Waits until every window of `limits` lets one more call go, and admits it: the call
    /// counts as running from now until the returned slot is dropped, so the caller calls at
    /// once, with nothing to wait for in between (a call counted and not made would spend
    /// room for nothing; one made later than counted could crowd a window). Each call counts,
    /// retries included. A reload that changes the limits ends the wait at once and starts it
    /// again under the new ones, so a limit removed or raised applies to the calls already
    /// waiting, not only to the events queued after them. `None`: the lane closed, or let go
    /// of `cluster`, first (a SIGTERM does not wait out a backlog's windows).
    pub(super) async fn rate_limited<'a>(
        &self,
        limits: &'a RateLimits,
        cluster: &str,
    ) -> Option<CallSlot<'a>> {
        loop {
            let changed = self.limits_changed.notified();
            let closing = self.closing.notified();
            let ended = limits.an_end();
            tokio::pin!(changed, closing, ended);
            // Registered before the limits and flags are read: a change, a close or a call's
            // end between is not missed.
            changed.as_mut().enable();
            closing.as_mut().enable();
            ended.as_mut().enable();
            if self.stops(cluster) {
                return None;
            }
            let until = match limits.admit() {
                Ok(slot) => return Some(slot),
                Err(Wait::Until(at)) => Some(at),
                Err(Wait::ForAnEnd) => None,
            };
            let room = async {
                match until {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = room => {}
                () = &mut ended => {}
                () = &mut changed => {}
                () = &mut closing => {}
            }
        }
    }
}
