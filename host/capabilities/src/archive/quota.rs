//! What a prefix may hold and holds: bytes are reserved before they are sent, and given back
//! when a write is abandoned or an object shrinks.
//!
//! Apart because the count is shared by every call of every instance writing under the prefix:
//! reservations are atomic, so concurrent writes cannot overshoot together.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::ArchiveError;
use crate::refusals::{Limit, Refusals};

/// The bytes one prefix may hold and holds: reservations are made before bytes are sent.
#[derive(Clone)]
pub struct Quota {
    pub(super) used: Arc<AtomicU64>,
    pub(super) max: u64,
    /// Where a refusal is counted, under the plugin's name.
    pub(super) refusals: Arc<Refusals>,
    pub(super) plugin: Arc<str>,
}

impl Quota {
    /// Reserves `bytes`, or says why not.
    pub(super) fn reserve(&self, bytes: u64) -> Result<(), ArchiveError> {
        let reserved = self
            .used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
                used.checked_add(bytes).filter(|total| *total <= self.max)
            });
        reserved.map(|_| ()).map_err(|used| {
            self.refusals.count(&self.plugin, Limit::ArchiveQuota);
            ArchiveError::TooLarge(format!(
                "the plugin's archive holds {used} bytes; {bytes} more would pass the {} its \
                 grant allows in total (grants.archive.max_total_bytes)",
                self.max
            ))
        })
    }

    /// Gives back `bytes` (an abandoned write, a replaced object).
    pub(super) fn release(&self, bytes: u64) {
        let _ = self
            .used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
                Some(used.saturating_sub(bytes))
            });
    }
}
