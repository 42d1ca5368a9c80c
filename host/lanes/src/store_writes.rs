//! Whether the lanes' writes reach the state store: the readiness signal a read cannot give.
//!
//! The store's own check answers whether it answers; a store can answer and still refuse every
//! write that needs room — a full disk takes a lane's batch of inbox events and cursors, while
//! a small write reuses space the file already has. Each lane's writer reports how its last
//! batch went here, and the daemon's readiness and status say so while the latest one failed —
//! for at most [`STALE_AFTER`] after it: a writer with events it could not store tries again
//! well within that (and so keeps the failure fresh while the disk stays full), while a failed
//! write of cursors alone is not tried again, and a quiet fleet would otherwise leave the
//! replica unready long after the disk has room again.

use parking_lot::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// How long a failure counts without a newer one.
pub const STALE_AFTER: Duration = Duration::from_secs(60);

/// The last failed write of any lane, until a write succeeds again.
#[derive(Debug, Default)]
pub struct StoreWrites {
    failing: Mutex<Option<(WriteFailure, Instant)>>,
}

/// Why and since when the lanes' writes fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteFailure {
    /// The latest failed write's error.
    pub error: String,
    /// When the first write of this run of failures failed.
    pub since: SystemTime,
}

impl StoreWrites {
    /// A lane's batch failed with `error`.
    pub fn failed(&self, error: &str) {
        let mut failing = self.failing.lock();
        match failing.as_mut() {
            Some((failure, last)) => {
                failure.error = error.to_string();
                *last = Instant::now();
            }
            None => {
                let failure = WriteFailure {
                    error: error.to_string(),
                    since: SystemTime::now(),
                };
                *failing = Some((failure, Instant::now()));
            }
        }
    }

    /// A lane's batch was stored: writes reach the store again.
    pub fn succeeded(&self) {
        let mut failing = self.failing.lock();
        if failing.is_some() {
            *failing = None;
        }
    }

    /// The failure, while the latest write failed, less than [`STALE_AFTER`] ago.
    pub fn failing(&self) -> Option<WriteFailure> {
        self.failing_as_of(Instant::now())
    }

    fn failing_as_of(&self, now: Instant) -> Option<WriteFailure> {
        let failing = self.failing.lock();
        let (failure, last) = failing.as_ref()?;
        (now.saturating_duration_since(*last) < STALE_AFTER).then(|| failure.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_counts_until_a_success_or_until_it_is_stale() {
        let writes = StoreWrites::default();
        assert!(writes.failing().is_none());
        writes.failed("disk full");
        let since = writes.failing().expect("failing").since;
        writes.failed("disk still full");
        let failure = writes.failing().expect("still failing");
        assert_eq!(
            (failure.error.as_str(), failure.since),
            ("disk still full", since)
        );
        let later = Instant::now() + STALE_AFTER + Duration::from_secs(1);
        assert!(
            writes.failing_as_of(later).is_none(),
            "stale without a newer failure"
        );
        writes.succeeded();
        assert!(writes.failing().is_none());
    }
}
