//! Whether the lanes' writes reach the state store: the readiness signal a read cannot give.
//!
//! The store's own check answers whether it answers; a store can answer and still refuse every
//! write that needs room — a full disk takes a lane's batch of inbox events and cursors, while
//! a small write reuses space the file already has. Each lane's writer reports how its last
//! batch went here, and the daemon's readiness and status say so while the latest one failed.

use std::sync::Mutex;
use std::time::SystemTime;

/// The last failed write of any lane, until a write succeeds again.
#[derive(Debug, Default)]
pub struct StoreWrites {
    failing: Mutex<Option<WriteFailure>>,
}

/// Why and since when the lanes' writes fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteFailure {
    pub error: String,
    pub since: SystemTime,
}

impl StoreWrites {
    /// A lane's batch failed with `error`.
    pub fn failed(&self, error: &str) {
        let mut failing = self.failing.lock().unwrap_or_else(|p| p.into_inner());
        match failing.as_mut() {
            Some(failure) => failure.error = error.to_string(),
            None => {
                *failing = Some(WriteFailure {
                    error: error.to_string(),
                    since: SystemTime::now(),
                })
            }
        }
    }

    /// A lane's batch was stored: writes reach the store again.
    pub fn succeeded(&self) {
        let mut failing = self.failing.lock().unwrap_or_else(|p| p.into_inner());
        if failing.is_some() {
            *failing = None;
        }
    }

    /// The failure, while the latest write failed.
    pub fn failing(&self) -> Option<WriteFailure> {
        self.failing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}
