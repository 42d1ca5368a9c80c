//! Leader election: keeps trying to hold the Lease, renews it while held, and says when this
//! replica may deliver and when it must stop.
//!
//! A leader that cannot renew for `renew_deadline` gives up leadership for good ([`Role::Lost`]):
//! the daemon then stops delivering and the process exits, so that Kubernetes restarts it as a
//! follower. Since the deadline is shorter than the Lease duration, the old leader has stopped
//! before any follower may take the Lease. Coming back as a fresh follower, rather than trying
//! to win the Lease again in place, keeps one simple rule: a process delivers during at most one
//! unbroken term.

use std::time::Instant;

use serde::Serialize;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::lease::{Holding, LeaseLock, bounded};
use super::settings::Timings;

/// This replica's part in the election.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Role {
    /// No election: the only replica, always delivering.
    Single,
    /// Waiting for the Lease.
    Follower {
        /// The leader as last seen; none while the Lease is free.
        holder: Option<String>,
    },
    /// Holds the Lease and delivers.
    Leader,
    /// Sharding: delivers the clusters whose Leases it holds.
    Sharded {
        /// The clusters whose Leases this replica holds, which it delivers.
        owned: Vec<String>,
        /// The live replicas, this one included.
        members: Vec<String>,
        /// Every cluster configured, held here or not, so each replica can report the ones it
        /// does not hold and a cluster nobody holds is visible.
        clusters: Vec<String>,
        /// This replica's identity among `members`.
        identity: String,
        /// Why this replica's Leases (its member Lease, or a cluster's) could not be read or
        /// written at its last attempt, while that lasts: a replica that cannot write Leases
        /// holds no cluster and delivers nothing, which it says here.
        #[serde(skip_serializing_if = "Option::is_none")]
        lease_error: Option<String>,
    },
    /// Was leader and could not renew in time: must stop delivering.
    Lost,
}

impl Role {
    /// Whether this replica may deliver now.
    pub fn delivers(&self) -> bool {
        matches!(self, Role::Single | Role::Leader | Role::Sharded { .. })
    }
}

/// A running election.
pub struct Election {
    role: watch::Receiver<Role>,
    task: tokio::task::JoinHandle<()>,
}

impl Election {
    /// Starts campaigning. Cancelling `cancel` ends the election and releases the Lease if held.
    pub fn start(lock: LeaseLock, timings: Timings, cancel: CancellationToken) -> Election {
        let (tx, rx) = watch::channel(Role::Follower { holder: None });
        let task = tokio::spawn(campaign(lock, timings, tx, cancel));
        Election { role: rx, task }
    }

    /// The role, as it changes.
    pub fn role(&self) -> watch::Receiver<Role> {
        self.role.clone()
    }

    /// Waits for the election task to end (after cancellation: the Lease released).
    pub async fn finished(self) {
        let _ = self.task.await;
    }
}

async fn campaign(
    mut lock: LeaseLock,
    timings: Timings,
    role: watch::Sender<Role>,
    cancel: CancellationToken,
) {
    // When the Lease was last renewed, while leading.
    let mut renewed: Option<Instant> = None;
    loop {
        let limit = match renewed {
            Some(at) => timings.renew_deadline.saturating_sub(at.elapsed()),
            None => timings.renew_deadline,
        };
        let attempt = tokio::select! {
            a = bounded(limit, lock.try_hold()) => a,
            _ = cancel.cancelled() => break,
        };
        let leading = renewed.is_some();
        match attempt {
            Ok(Holding::Held) => {
                if !leading {
                    tracing::info!(identity = %lock.identity(), "took the Lease: this replica delivers now");
                    role.send_replace(Role::Leader);
                }
                renewed = Some(Instant::now());
            }
            Ok(Holding::Other(holder)) if !leading => {
                let holder = holder.or_else(|| lock.holder().map(str::to_string));
                role.send_if_modified(|r| {
                    let next = Role::Follower { holder };
                    let changed = *r != next;
                    *r = next;
                    changed
                });
            }
            Ok(Holding::Other(holder)) => {
                tracing::error!(
                    identity = %lock.identity(),
                    holder = holder.as_deref().unwrap_or("?"),
                    "the Lease was taken by another replica: stopping delivery"
                );
                role.send_replace(Role::Lost);
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read or write the Lease");
            }
        }
        if let Some(at) = renewed
            && at.elapsed() > timings.renew_deadline
        {
            tracing::error!(
                identity = %lock.identity(),
                deadline_seconds = timings.renew_deadline.as_secs(),
                "could not renew the Lease in time: stopping delivery"
            );
            role.send_replace(Role::Lost);
            return;
        }
        // Followers spread their attempts out; the leader renews on the period.
        let wait = if renewed.is_some() {
            timings.retry_period
        } else {
            timings.next_attempt()
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = cancel.cancelled() => break,
        }
    }
    if renewed.is_some() {
        match lock.release().await {
            Ok(()) => tracing::info!(identity = %lock.identity(), "released the Lease"),
            Err(e) => {
                tracing::warn!(error = %e, "could not release the Lease; it expires on its own")
            }
        }
    }
}
