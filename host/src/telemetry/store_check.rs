//! Whether the state store answers, checked on a timer.
//!
//! A replica whose acknowledgements cannot be written cannot do its part, so readiness follows
//! the store. The check runs apart from the requests that read it: `/readyz` answers at once
//! from the last result, and a store that hangs costs one timed-out check, not a hanging probe.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use serde::Serialize;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use jobrelay_state::DeliveryStore;

/// Time between two checks.
pub const CHECK_EVERY: Duration = Duration::from_secs(10);
/// Longest a check may take before it counts as unreachable.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// The last check's result. The store answered when it was opened at start, so it begins
/// reachable.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct StoreStatus {
    pub reachable: bool,
    /// Why the last check failed.
    pub error: Option<String>,
    /// Dead letters stored, by plugin, as of the last check that could count them: the
    /// backlog waiting for an operator, whichever process or replica stored it. Empty until
    /// the first check.
    pub dead_letters: BTreeMap<String, u64>,
    /// While the lanes' latest write to the store failed (a full disk answers checks and
    /// refuses batches): why, and since when (RFC 3339). Filled in by the status snapshot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writes_failing: Option<String>,
}

impl Default for StoreStatus {
    fn default() -> StoreStatus {
        StoreStatus {
            reachable: true,
            error: None,
            dead_letters: BTreeMap::new(),
            writes_failing: None,
        }
    }
}

/// Shared view of the last check; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct StoreHealth(Arc<RwLock<StoreStatus>>);

impl StoreHealth {
    pub fn snapshot(&self) -> StoreStatus {
        self.0.read().clone()
    }

    fn set(&self, status: StoreStatus) {
        let mut slot = self.0.write();
        if slot.reachable != status.reachable {
            match &status.error {
                Some(error) => tracing::warn!(%error, "the state store does not answer; not ready"),
                None => tracing::info!("the state store answers again"),
            }
        }
        *slot = status;
    }
}

/// Checks `store` now and then every [`CHECK_EVERY`] until `cancel`, keeping the result in
/// `health`.
pub fn spawn(
    store: Arc<dyn DeliveryStore>,
    health: StoreHealth,
    cancel: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        // The first check at once: the store answered at start, but the dead-letter
        // backlog is only known once counted.
        loop {
            let status = check_once(store.as_ref(), &health).await;
            health.set(status);
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(CHECK_EVERY) => {}
            }
        }
    })
}

/// One check: the trivial statement decides whether the store answers (within
/// [`CHECK_TIMEOUT`]); only then are the dead letters counted, within a limit of their own, so
/// that a slow count over a large backlog can never make the replica look unready. A count
/// that fails or takes too long keeps the last known one.
async fn check_once(store: &dyn DeliveryStore, health: &StoreHealth) -> StoreStatus {
    let last_counts = || health.snapshot().dead_letters;
    let error = match tokio::time::timeout(CHECK_TIMEOUT, store.check()).await {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(_) => Some(format!("no answer within {} s", CHECK_TIMEOUT.as_secs())),
    };
    if let Some(error) = error {
        return StoreStatus {
            reachable: false,
            error: Some(error),
            dead_letters: last_counts(),
            writes_failing: None,
        };
    }
    let dead_letters = match tokio::time::timeout(CHECK_TIMEOUT, store.dead_letter_counts()).await {
        Ok(Ok(counts)) => counts,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "cannot count the stored dead letters; keeping the last count");
            last_counts()
        }
        Err(_) => last_counts(),
    };
    StoreStatus {
        reachable: true,
        error: None,
        dead_letters,
        writes_failing: None,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use async_trait::async_trait;
    use jobrelay_contract::event::JobEvent;
    use jobrelay_state::{Cursor, DeadLetter, Inbox, SqliteStore, StoreError, Stored, WriteBatch};

    use super::*;

    /// A real SQLite store that answers its check at once and never its dead-letter count.
    struct SlowCount(SqliteStore);

    #[async_trait]
    impl DeliveryStore for SlowCount {
        async fn cursors(&self, p: &str) -> Result<Vec<Cursor>, StoreError> {
            self.0.cursors(p).await
        }
        async fn save_cursor(&self, c: &Cursor) -> Result<(), StoreError> {
            self.0.save_cursor(c).await
        }
        async fn note_first_sight(&self, c: &Cursor) -> Result<(), StoreError> {
            self.0.note_first_sight(c).await
        }
        async fn install_time(&self, p: &str, now: &str) -> Result<String, StoreError> {
            self.0.install_time(p, now).await
        }
        async fn save_cursors(&self, c: Vec<Cursor>) -> Result<(), StoreError> {
            self.0.save_cursors(c).await
        }
        async fn write(&self, b: WriteBatch) -> Result<(), StoreError> {
            self.0.write(b).await
        }
        async fn cursors_page(
            &self,
            p: &str,
            a: Option<(&str, &str)>,
            l: u32,
        ) -> Result<Vec<Cursor>, StoreError> {
            self.0.cursors_page(p, a, l).await
        }
        async fn inbox_page(&self, p: &str, a: i64, l: u32) -> Result<Inbox, StoreError> {
            self.0.inbox_page(p, a, l).await
        }
        async fn inbox_event(&self, id: &str) -> Result<Stored, StoreError> {
            self.0.inbox_event(id).await
        }
        async fn remove_cursor(&self, p: &str, c: &str, u: &str) -> Result<(), StoreError> {
            self.0.remove_cursor(p, c, u).await
        }
        async fn add_dead_letter(
            &self,
            p: &str,
            e: &JobEvent,
            err: &str,
            n: u32,
        ) -> Result<i64, StoreError> {
            self.0.add_dead_letter(p, e, err, n).await
        }
        async fn dead_letters(&self, p: Option<&str>) -> Result<Vec<DeadLetter>, StoreError> {
            self.0.dead_letters(p).await
        }
        async fn drop_dead_letters(
            &self,
            p: Option<&str>,
            s: &[i64],
            all: bool,
        ) -> Result<u64, StoreError> {
            self.0.drop_dead_letters(p, s, all).await
        }
        async fn request_replay(
            &self,
            p: Option<&str>,
            s: &[i64],
            all: bool,
        ) -> Result<u64, StoreError> {
            self.0.request_replay(p, s, all).await
        }
        async fn take_replays(
            &self,
            p: &str,
            c: Option<&[String]>,
        ) -> Result<Vec<DeadLetter>, StoreError> {
            self.0.take_replays(p, c).await
        }
        async fn dead_letter_counts(&self) -> Result<BTreeMap<String, u64>, StoreError> {
            std::future::pending().await
        }
        async fn check(&self) -> Result<(), StoreError> {
            Ok(())
        }
    }

    /// A store that answers but counts its dead letters slowly (a large backlog) stays
    /// reachable, so readiness does not follow the count; the last count is kept.
    #[tokio::test]
    async fn a_slow_dead_letter_count_never_makes_the_store_unreachable() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = SlowCount(
            SqliteStore::open(&dir.path().join("state.db"))
                .await
                .expect("open"),
        );
        // The count's time limit passes without the test waiting it out.
        tokio::time::pause();
        let health = StoreHealth::default();
        health.set(StoreStatus {
            dead_letters: BTreeMap::from([("log".to_string(), 3)]),
            ..StoreStatus::default()
        });
        let status = check_once(&store, &health).await;
        assert!(status.reachable, "{status:?}");
        assert_eq!(status.error, None);
        assert_eq!(
            status.dead_letters.get("log"),
            Some(&3),
            "the last count is kept"
        );
    }
}
