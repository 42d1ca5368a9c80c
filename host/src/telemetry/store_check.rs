//! Whether the state store answers, checked on a timer.
//!
//! A replica whose acknowledgements cannot be written cannot do its part, so readiness follows
//! the store. The check runs apart from the requests that read it: `/readyz` answers at once
//! from the last result, and a store that hangs costs one timed-out check, not a hanging probe.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::Serialize;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use jobrelay_state::CursorStore;

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
}

impl Default for StoreStatus {
    fn default() -> StoreStatus {
        StoreStatus {
            reachable: true,
            error: None,
            dead_letters: BTreeMap::new(),
        }
    }
}

/// Shared view of the last check; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct StoreHealth(Arc<RwLock<StoreStatus>>);

impl StoreHealth {
    pub fn snapshot(&self) -> StoreStatus {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set(&self, status: StoreStatus) {
        let mut slot = self.0.write().unwrap_or_else(|p| p.into_inner());
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
    store: Arc<dyn CursorStore>,
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

/// One check: the trivial statement, then the dead-letter count (both within
/// [`CHECK_TIMEOUT`]). A failed count keeps the last known one: the store answered, which is
/// what readiness needs.
async fn check_once(store: &dyn CursorStore, health: &StoreHealth) -> StoreStatus {
    let checked = tokio::time::timeout(CHECK_TIMEOUT, async {
        store.check().await?;
        Ok::<_, jobrelay_state::StoreError>(store.dead_letter_counts().await.ok())
    })
    .await;
    match checked {
        Ok(Ok(counts)) => StoreStatus {
            reachable: true,
            error: None,
            dead_letters: counts.unwrap_or_else(|| health.snapshot().dead_letters),
        },
        Ok(Err(e)) => StoreStatus {
            reachable: false,
            error: Some(e.to_string()),
            dead_letters: health.snapshot().dead_letters,
        },
        Err(_) => StoreStatus {
            reachable: false,
            error: Some(format!("no answer within {} s", CHECK_TIMEOUT.as_secs())),
            dead_letters: health.snapshot().dead_letters,
        },
    }
}
