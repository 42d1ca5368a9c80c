//! Sharding: clusters spread over the replicas, one Lease per cluster.
//!
//! Every retry period each replica renews its member Lease, lists the live members and
//! computes, by rendezvous hashing, which clusters are its own. It holds the Lease of each of
//! its clusters and delivers a cluster only while it holds that Lease. A cluster that moves to
//! another replica (one joined) is stopped here first, its calls in flight are waited for, and
//! only then is its Lease released, so the new owner starts at its next attempt. A cluster
//! whose owner died moves once its Lease expires. A replica that cannot renew one of its
//! cluster Leases within the renew deadline stops for good ([`Role::Lost`]), as a leader does.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use super::elector::Role;
use super::lease::{Holding, LeaseLock, bounded, lease_name};
use super::members::{Members, labels};
use super::rendezvous;
use super::settings::Timings;

/// What the coordinator asks of the daemon.
#[derive(Debug)]
pub enum ShardCommand {
    /// This replica holds the cluster's Lease now: watch it and deliver.
    Start(String),
    /// The cluster goes to another replica: stop watching it, drop its queued work, and
    /// answer once its calls in flight have ended.
    Stop(String, oneshot::Sender<()>),
}

/// Where the Leases live and who this replica is.
pub struct ShardSetup {
    /// A client for the home cluster, where the Leases live.
    pub client: kube::Client,
    /// The Leases' namespace.
    pub namespace: String,
    /// Prefix of every Lease name (`coordination.lease_name`).
    pub group: String,
    /// This replica's name in its member Lease and as holder of cluster Leases.
    pub identity: String,
    /// How long a Lease lasts, the renew deadline and the retry period, for every Lease.
    pub timings: Timings,
}

/// A running shard coordinator.
pub struct Sharding {
    role: watch::Receiver<Role>,
    task: tokio::task::JoinHandle<()>,
}

impl Sharding {
    /// Starts coordinating over the cluster names `clusters` (kept current by the daemon).
    /// Commands arrive on the returned receiver; cancelling `cancel` releases every Lease.
    pub fn start(
        setup: ShardSetup,
        clusters: watch::Receiver<BTreeSet<String>>,
        cancel: CancellationToken,
    ) -> (Sharding, mpsc::Receiver<ShardCommand>) {
        let (role_tx, role) = watch::channel(Role::Sharded {
            owned: Vec::new(),
            members: Vec::new(),
            clusters: clusters.borrow().iter().cloned().collect(),
            identity: setup.identity.clone(),
            lease_error: None,
        });
        let (commands, received) = mpsc::channel(16);
        let task = tokio::spawn(coordinate(setup, clusters, role_tx, commands, cancel));
        (Sharding { role, task }, received)
    }

    /// This replica's [`Role::Sharded`], updated whenever the clusters it holds, the live
    /// members or the configured clusters change.
    pub fn role(&self) -> watch::Receiver<Role> {
        self.role.clone()
    }

    /// Waits for the coordinator to end (after cancellation: Leases released).
    pub async fn finished(self) {
        let _ = self.task.await;
    }
}

async fn coordinate(
    setup: ShardSetup,
    clusters: watch::Receiver<BTreeSet<String>>,
    role: watch::Sender<Role>,
    commands: mpsc::Sender<ShardCommand>,
    cancel: CancellationToken,
) {
    let t = setup.timings;
    let mut members = Members::new(
        setup.client.clone(),
        &setup.namespace,
        &setup.group,
        &setup.identity,
        t.lease_duration,
    );
    // One lock per cluster this replica holds or wants: each remembers when it saw the Lease
    // change, which is what expiry is judged by.
    let mut locks: BTreeMap<String, LeaseLock> = BTreeMap::new();
    // When each held cluster's Lease was last renewed.
    let mut held: BTreeMap<String, Instant> = BTreeMap::new();
    let mut alive: Vec<String> = vec![setup.identity.clone()];
    tracing::info!(identity = %setup.identity, "sharding: joining the replicas");

    'run: loop {
        // The last failure to read or write a Lease in this round, for the role.
        let mut lease_error: Option<String> = None;
        if let Err(e) = bounded(t.renew_deadline, members.renew()).await {
            tracing::warn!(error = %e, "cannot renew this replica's member Lease");
            lease_error = Some(format!("its member Lease: {e}"));
        }
        let names = clusters.borrow().clone();
        // One lock per configured cluster, so every cluster Lease is watched for expiry from
        // the start, not only from when its owner died.
        locks.retain(|c, _| names.contains(c) || held.contains_key(c));
        for cluster in &names {
            locks.entry(cluster.clone()).or_insert_with(|| {
                LeaseLock::new(
                    setup.client.clone(),
                    &setup.namespace,
                    &lease_name(&format!("{}-cluster", setup.group), cluster),
                    &setup.identity,
                    t.lease_duration,
                )
                .with_labels(labels(&setup.group, "cluster"))
            });
        }
        match tokio::time::timeout(t.renew_deadline, members.list()).await {
            Ok(Ok(leases)) => {
                let now = members.alive(&leases).await;
                if now != alive {
                    tracing::info!(members = ?now, "replicas changed");
                }
                alive = now;
                for lease in &leases {
                    if let Some(lock) = lease
                        .metadata
                        .name
                        .as_deref()
                        .and_then(|n| locks.values_mut().find(|l| l.name() == n))
                    {
                        lock.observe(lease);
                    }
                }
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot list the replicas; keeping the last list")
            }
            Err(_) => tracing::warn!("listing the replicas timed out; keeping the last list"),
        }
        let mine: BTreeSet<String> = names
            .iter()
            .filter(|c| {
                rendezvous::owner(c, alive.iter().map(String::as_str))
                    == Some(setup.identity.as_str())
            })
            .cloned()
            .collect();

        // Hand over what is no longer ours: stop it here first, then release its Lease.
        let leaving: Vec<String> = held
            .keys()
            .filter(|c| !mine.contains(*c))
            .cloned()
            .collect();
        for cluster in leaving {
            let (done, stopped) = oneshot::channel();
            if commands
                .send(ShardCommand::Stop(cluster.clone(), done))
                .await
                .is_err()
            {
                break 'run;
            }
            // Calls in flight get half the renew deadline; a call still running after that may
            // also be made by the next owner (at least once, never lost).
            let _ = tokio::time::timeout(t.renew_deadline / 2, stopped).await;
            held.remove(&cluster);
            if let Some(lock) = locks.get_mut(&cluster) {
                match bounded(t.renew_deadline, lock.release()).await {
                    Ok(()) => tracing::info!(%cluster, "handed the cluster over"),
                    Err(e) => {
                        tracing::warn!(%cluster, error = %e, "could not release the cluster's Lease; it expires on its own")
                    }
                }
            }
        }
        // Take or renew our own.
        for cluster in &mine {
            let Some(lock) = locks.get_mut(cluster) else {
                continue;
            };
            let limit = held.get(cluster).map_or(t.renew_deadline, |at| {
                t.renew_deadline.saturating_sub(at.elapsed())
            });
            match bounded(limit, lock.try_hold()).await {
                Ok(Holding::Held) => {
                    if held.insert(cluster.clone(), Instant::now()).is_none() {
                        tracing::info!(%cluster, "took the cluster's Lease: delivering it");
                        if commands
                            .send(ShardCommand::Start(cluster.clone()))
                            .await
                            .is_err()
                        {
                            break 'run;
                        }
                    }
                }
                Ok(Holding::Other(holder)) if held.contains_key(cluster) => {
                    tracing::error!(%cluster, holder = holder.as_deref().unwrap_or("?"),
                        "another replica took this replica's cluster: stopping delivery");
                    role.send_replace(Role::Lost);
                    return;
                }
                Ok(Holding::Other(_)) => {} // the previous owner hands over or expires
                Err(e) => {
                    tracing::warn!(%cluster, error = %e, "cannot read or write the cluster's Lease");
                    lease_error = Some(format!("the Lease of cluster {cluster}: {e}"));
                }
            }
        }
        if let Some((cluster, _)) = held.iter().find(|(_, at)| at.elapsed() > t.renew_deadline) {
            tracing::error!(%cluster, "could not renew the cluster's Lease in time: stopping delivery");
            role.send_replace(Role::Lost);
            return;
        }
        role.send_if_modified(|r| {
            let next = Role::Sharded {
                owned: held.keys().cloned().collect(),
                members: alive.clone(),
                clusters: names.iter().cloned().collect(),
                identity: setup.identity.clone(),
                lease_error: lease_error.clone(),
            };
            let changed = *r != next;
            *r = next;
            changed
        });

        tokio::select! {
            _ = tokio::time::sleep(t.next_attempt()) => {}
            _ = cancel.cancelled() => break,
        }
    }
    // Stopping: the daemon has stopped every cluster already; give the Leases back.
    for (cluster, mut lock) in locks {
        if held.contains_key(&cluster)
            && let Err(e) = bounded(Duration::from_secs(5), lock.release()).await
        {
            tracing::warn!(%cluster, error = %e, "could not release the cluster's Lease; it expires on its own");
        }
    }
    members.leave().await;
    tracing::info!(identity = %setup.identity, "sharding: left the replicas");
}
