//! Who is alive, for sharding: every replica renews a member Lease of its own, and lists the
//! group's member Leases to see the others.
//!
//! A member counts as alive while its Lease keeps changing: alive if this process saw it
//! change within its `leaseDurationSeconds` (this process's clock, as for the cluster Leases).
//! A replica that stops cleanly deletes its member Lease, so the others rebalance at once; the
//! Lease of one that died expires, and is deleted by the others once it has been quiet for
//! `FORGET_AFTER` Lease durations, so replaced pods leave nothing behind.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::{DeleteParams, ListParams};

use super::lease::{LeaseError, LeaseLock, Seen, lease_name};

/// Label naming the group (the `lease_name` prefix) a member Lease belongs to.
pub const GROUP_LABEL: &str = "jobrelay.io/group";
/// Label saying what a Lease is for (`member` or `cluster`).
pub const KIND_LABEL: &str = "jobrelay.io/lease";

/// The labels of a Lease of `group` for `kind`.
pub fn labels(group: &str, kind: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (GROUP_LABEL.to_string(), group.to_string()),
        (KIND_LABEL.to_string(), kind.to_string()),
    ])
}

/// Quiet member Leases are deleted after this many of their durations.
const FORGET_AFTER: u32 = 10;

/// For a member Lease without a duration (written by hand).
const DEFAULT_DURATION: Duration = Duration::from_secs(15);

/// This replica's member Lease and its view of the others.
pub struct Members {
    api: Api<Lease>,
    own: LeaseLock,
    identity: String,
    selector: String,
    seen: HashMap<String, Seen>,
}

impl Members {
    /// This replica's membership of `group` in `namespace`: its own member Lease (named from
    /// the group and `identity`, renewed every `duration`) and, through the group's label, the
    /// others'. Makes no request yet.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        group: &str,
        identity: &str,
        duration: Duration,
    ) -> Members {
        let own = LeaseLock::new(
            client.clone(),
            namespace,
            &lease_name(&format!("{group}-member"), identity),
            identity,
            duration,
        )
        .with_labels(labels(group, "member"));
        Members {
            api: Api::namespaced(client, namespace),
            own,
            identity: identity.to_string(),
            selector: format!("{GROUP_LABEL}={group}"),
            seen: HashMap::new(),
        }
    }

    /// Renews this replica's member Lease.
    pub async fn renew(&mut self) -> Result<(), LeaseError> {
        self.own.try_hold().await.map(|_| ())
    }

    /// Every Lease of the group (members and clusters), in one request.
    pub async fn list(&self) -> Result<Vec<Lease>, kube::Error> {
        let leases = self
            .api
            .list(&ListParams::default().labels(&self.selector))
            .await?;
        Ok(leases.items)
    }

    /// The identities of the live members among `leases` (from [`list`](Members::list)),
    /// sorted; this replica is always among them.
    pub async fn alive(&mut self, leases: &[Lease]) -> Vec<String> {
        let mut listed = Vec::with_capacity(leases.len());
        for lease in leases {
            let member = lease
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(KIND_LABEL))
                .is_some_and(|k| k == "member");
            let Some(name) = lease.metadata.name.clone().filter(|_| member) else {
                continue;
            };
            match self.seen.get_mut(&name) {
                Some(seen) => seen.refresh(lease, DEFAULT_DURATION),
                None => {
                    self.seen
                        .insert(name.clone(), Seen::new(lease, DEFAULT_DURATION));
                }
            }
            listed.push(name);
        }
        self.seen.retain(|name, _| listed.contains(name));

        let mut alive: Vec<String> = self
            .seen
            .values()
            .filter(|s| !s.expired())
            .filter_map(|s| s.holder().map(str::to_string))
            .collect();
        if !alive.contains(&self.identity) {
            alive.push(self.identity.clone());
        }
        alive.sort();
        alive.dedup();

        let forgotten: Vec<String> = self
            .seen
            .iter()
            .filter(|(name, s)| {
                name.as_str() != self.own.name() && s.since.elapsed() > s.duration * FORGET_AFTER
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in forgotten {
            match self.api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {
                    tracing::info!(lease = %name, "deleted the member Lease of a replica long gone")
                }
                Err(e) => {
                    tracing::debug!(lease = %name, error = %e, "could not delete a stale member Lease")
                }
            }
        }
        alive
    }

    /// Deletes this replica's member Lease (a clean stop), so the others rebalance at once.
    pub async fn leave(&mut self) {
        if let Err(e) = self
            .api
            .delete(self.own.name(), &DeleteParams::default())
            .await
        {
            tracing::warn!(error = %e, "could not delete this replica's member Lease; it expires on its own");
        }
    }
}
