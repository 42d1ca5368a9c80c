//! The daemon's one handle on coordination, whichever the mode: the role to follow, the shard
//! commands to carry out, and a clean stop that gives Leases back.

use std::collections::BTreeSet;

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::elector::{Election, Role};
use super::home::HomeError;
use super::lease::LeaseLock;
use super::settings::{CoordinationSettings, Mode};
use super::shards::{ShardCommand, ShardSetup, Sharding};

enum Running {
    Alone,
    Election(Election),
    Sharding(Sharding),
}

/// What a replica does until a Lease says otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BeforeLease {
    /// No election: watch and deliver everything.
    Deliver,
    /// A follower: watch every cluster (connections, credentials and health kept proven) but
    /// deliver nothing and leave finalizers alone.
    WatchOnly,
    /// Sharding: watch only the clusters whose Leases this replica takes.
    Nothing,
}

/// Coordination with the other replicas, started.
pub struct Coordinator {
    running: Running,
    role: watch::Receiver<Role>,
    stop: CancellationToken,
}

impl Coordinator {
    /// Starts what `settings` ask for. `clusters` is the configured cluster names, kept
    /// current by the daemon (sharding spreads them). Also returns the shard commands, in
    /// sharded mode. Errors name the setting or credentials that failed.
    pub async fn start(
        settings: &CoordinationSettings,
        clusters: watch::Receiver<BTreeSet<String>>,
    ) -> Result<(Coordinator, Option<mpsc::Receiver<ShardCommand>>), HomeError> {
        let stop = CancellationToken::new();
        if settings.mode == Mode::Single {
            let (_, role) = watch::channel(Role::Single);
            let alone = Coordinator {
                running: Running::Alone,
                role,
                stop,
            };
            return Ok((alone, None));
        }
        let home = super::home::connect(settings).await?;
        let timings = settings.timings();
        if settings.mode == Mode::Leader {
            tracing::info!(
                identity = %home.identity,
                lease = %format!("{}/{}", home.namespace, settings.lease_name),
                "leader election: watching as a follower, delivering nothing until this replica holds the Lease"
            );
            let lock = LeaseLock::new(
                home.client,
                &home.namespace,
                &settings.lease_name,
                &home.identity,
                timings.lease_duration,
            );
            let election = Election::start(lock, timings, stop.clone());
            let role = election.role();
            let coordinator = Coordinator {
                running: Running::Election(election),
                role,
                stop,
            };
            return Ok((coordinator, None));
        }
        tracing::info!(
            identity = %home.identity,
            namespace = %home.namespace,
            group = %settings.lease_name,
            "sharding: watching only the clusters whose Leases this replica holds"
        );
        let setup = ShardSetup {
            client: home.client,
            namespace: home.namespace,
            group: settings.lease_name.clone(),
            identity: home.identity,
            timings,
        };
        let (sharding, commands) = Sharding::start(setup, clusters, stop.clone());
        let role = sharding.role();
        let coordinator = Coordinator {
            running: Running::Sharding(sharding),
            role,
            stop,
        };
        Ok((coordinator, Some(commands)))
    }

    /// What this replica may do before it holds any Lease.
    pub fn before_lease(&self) -> BeforeLease {
        match self.running {
            Running::Alone => BeforeLease::Deliver,
            Running::Election(_) => BeforeLease::WatchOnly,
            Running::Sharding(_) => BeforeLease::Nothing,
        }
    }

    /// This replica's role, as it changes.
    pub fn role(&self) -> watch::Receiver<Role> {
        self.role.clone()
    }

    /// Ends coordination and gives every Lease back. Call after delivery has stopped.
    pub async fn stop(self) {
        self.stop.cancel();
        match self.running {
            Running::Alone => {}
            Running::Election(e) => e.finished().await,
            Running::Sharding(s) => s.finished().await,
        }
    }
}
