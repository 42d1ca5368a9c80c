//! Fault injection: the failures a daemon meets in production, on demand.
//!
//! * `drop_watches` — load balancers and apiserver restarts cut watch connections mid-stream.
//! * `fail_next` — transient 5xx/429 answers.
//! * `set_outage` — the apiserver answers 503 to everything (and open watches are cut).
//! * `fail_writes` — writes (POST, PUT, PATCH, DELETE) answer 503 while reads and watches go on,
//!   as when etcd is unhealthy or an admission webhook times out.
//! * `outage_hard` (in `server.rs`) — nothing listens on the port at all.
//! * `stall_watches` — a connection that stays open but delivers nothing (a half-dead TCP
//!   path), which only a client-side idle timeout can detect.
//! * `slow_paths` — requests for one resource answered late (a large list, a busy
//!   apiserver): what tells one stream's order from another's.
//!
//! Compaction (`compact`) lives with the store, since it is a store operation.

use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::watch;

/// Shared fault switches, read by the HTTP layer and by every watch stream.
pub(crate) struct Faults {
    fail_remaining: AtomicUsize,
    fail_code: AtomicU16,
    /// When set, the injected failures left end then.
    fail_until: Mutex<Option<Instant>>,
    outage: AtomicBool,
    writes_fail: AtomicBool,
    /// Bumped to cut every open watch stream.
    drop_epoch: watch::Sender<u64>,
    /// While true, watch streams send nothing.
    stalled: watch::Sender<bool>,
    /// Requests whose path contains the text wait this long before they are served.
    slow: Mutex<Option<(String, Duration)>>,
}

impl Faults {
    pub(crate) fn new() -> Faults {
        Faults {
            fail_remaining: AtomicUsize::new(0),
            fail_code: AtomicU16::new(500),
            fail_until: Mutex::new(None),
            outage: AtomicBool::new(false),
            writes_fail: AtomicBool::new(false),
            drop_epoch: watch::channel(0).0,
            stalled: watch::channel(false).0,
            slow: Mutex::new(None),
        }
    }

    /// Requests whose path contains `part` wait `delay` before they are served; `None` ends it.
    pub(crate) fn slow_paths(&self, slow: Option<(String, Duration)>) {
        *self.slow.lock() = slow;
    }

    /// How long a request for `path` waits first.
    pub(crate) fn delay_of(&self, path: &str) -> Option<Duration> {
        match &*self.slow.lock() {
            Some((part, delay)) if path.contains(part.as_str()) => Some(*delay),
            _ => None,
        }
    }

    /// Makes the next `n` requests fail with `code`.
    pub(crate) fn fail_next(&self, n: usize, code: u16) {
        self.set_failures(n, code, None);
    }

    /// Makes the next `n` requests fail with `code`, if they come within `window`.
    pub(crate) fn fail_burst(&self, n: usize, code: u16, window: Duration) {
        self.set_failures(n, code, Some(Instant::now() + window));
    }

    fn set_failures(&self, n: usize, code: u16, until: Option<Instant>) {
        *self.fail_until.lock() = until;
        self.fail_code.store(code, Ordering::SeqCst);
        self.fail_remaining.store(n, Ordering::SeqCst);
    }

    /// Consumes one injected failure, if any are left, and returns its status code.
    pub(crate) fn take_failure(&self) -> Option<u16> {
        if self.fail_remaining.load(Ordering::SeqCst) == 0 {
            return None;
        }
        let over = self
            .fail_until
            .lock()
            .is_some_and(|until| Instant::now() >= until);
        if over {
            self.fail_remaining.store(0, Ordering::SeqCst);
            return None;
        }
        self.fail_remaining
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .ok()
            .map(|_| self.fail_code.load(Ordering::SeqCst))
    }

    pub(crate) fn set_outage(&self, on: bool) {
        self.outage.store(on, Ordering::SeqCst);
        if on {
            self.drop_watches();
        }
    }

    pub(crate) fn fail_writes(&self, on: bool) {
        self.writes_fail.store(on, Ordering::SeqCst);
    }

    pub(crate) fn writes_fail(&self) -> bool {
        self.writes_fail.load(Ordering::SeqCst)
    }

    pub(crate) fn outage(&self) -> bool {
        self.outage.load(Ordering::SeqCst)
    }

    pub(crate) fn drop_watches(&self) {
        self.drop_epoch.send_modify(|e| *e += 1);
    }

    pub(crate) fn drop_signal(&self) -> watch::Receiver<u64> {
        self.drop_epoch.subscribe()
    }

    pub(crate) fn stall_watches(&self, on: bool) {
        self.stalled.send_replace(on);
    }

    pub(crate) fn stall_signal(&self) -> watch::Receiver<bool> {
        self.stalled.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fail_next_counts_down() {
        let f = Faults::new();
        assert_eq!(f.take_failure(), None);
        f.fail_next(2, 503);
        assert_eq!(f.take_failure(), Some(503));
        assert_eq!(f.take_failure(), Some(503));
        assert_eq!(f.take_failure(), None);
    }

    #[test]
    fn a_burst_ends_with_its_window_whatever_is_left() {
        let f = Faults::new();
        f.fail_burst(5, 503, Duration::from_millis(50));
        assert_eq!(f.take_failure(), Some(503));
        std::thread::sleep(Duration::from_millis(80));
        assert_eq!(
            f.take_failure(),
            None,
            "four were left, but the window is over"
        );
        f.fail_next(1, 500);
        std::thread::sleep(Duration::from_millis(80));
        assert_eq!(f.take_failure(), Some(500), "a count alone does not expire");
    }

    #[test]
    fn drop_signal_fires() {
        let f = Faults::new();
        let rx = f.drop_signal();
        assert!(!rx.has_changed().unwrap());
        f.drop_watches();
        assert!(rx.has_changed().unwrap());
    }
}
