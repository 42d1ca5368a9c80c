//! The coordination families: which replica delivers, and under sharding which clusters each
//! holds, so an alert can tell no replica delivering (or a cluster no replica holds) from one
//! replica's restart.
//!
//! Writes `jobrelay_shard_owned`, `jobrelay_shard_members` (sharding only) and
//! `jobrelay_leader`.

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;

use super::{Labels, family, gauge};
use jobrelay_coordination::Role;

/// Whether this replica delivers, as `jobrelay_leader` says: a shard delivers the clusters it
/// holds, so one that holds none delivers nothing (there being clusters to hold), whatever
/// its role's name says.
pub(super) fn delivers(role: &Role) -> bool {
    match role {
        Role::Sharded {
            owned, clusters, ..
        } => !owned.is_empty() || clusters.is_empty(),
        _ => role.delivers(),
    }
}

/// This replica's part in delivering (`role`): the clusters it holds and the replicas it sees
/// when sharded, and whether it delivers.
pub(super) fn encode(e: &mut DescriptorEncoder, role: &Role) -> Result<(), std::fmt::Error> {
    let leading = vec![(Labels::new(), ConstGauge::new(i64::from(delivers(role))))];
    if let Role::Sharded {
        owned,
        members,
        clusters,
        ..
    } = role
    {
        // Every configured cluster, 1 where held here: a cluster no replica holds reads 0
        // on every replica instead of having no series at all.
        let owned = clusters
            .iter()
            .chain(owned.iter().filter(|c| !clusters.contains(c)))
            .map(|c| {
                (
                    vec![("cluster", c.clone())],
                    gauge(u64::from(owned.contains(c))),
                )
            })
            .collect();
        family(
            e,
            "jobrelay_shard_owned",
            "1 for each cluster whose Lease this replica holds and delivers, 0 for every other \
             configured cluster (sharding)",
            MetricType::Gauge,
            owned,
        )?;
        family(
            e,
            "jobrelay_shard_members",
            "Replicas this one sees alive (sharding)",
            MetricType::Gauge,
            vec![(Labels::new(), gauge(members.len() as u64))],
        )?;
    }
    family(
        e,
        "jobrelay_leader",
        "1 while this replica delivers (the only replica, the holder of the Lease, or a shard \
         holding a cluster's Lease)",
        MetricType::Gauge,
        leading,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_holding_no_cluster_does_not_deliver() {
        let shard = |owned: &[&str], clusters: &[&str]| Role::Sharded {
            owned: owned.iter().map(|c| c.to_string()).collect(),
            members: vec!["a".into(), "b".into()],
            clusters: clusters.iter().map(|c| c.to_string()).collect(),
            identity: "a".into(),
            lease_error: None,
        };
        assert!(delivers(&shard(&["east"], &["east", "west"])));
        assert!(!delivers(&shard(&[], &["east", "west"])));
        assert!(delivers(&shard(&[], &[])), "nothing to hold");
        assert!(delivers(&Role::Single) && delivers(&Role::Leader));
        assert!(!delivers(&Role::Lost));
    }
}
