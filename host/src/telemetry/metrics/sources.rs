//! The cluster sources' families: whether each source on the home cluster is read, how many
//! clusters it gives, and each of its objects refused — labelled by the Secret's
//! `namespace/name`, which is what an operator fixes (never by anything inside it).
//!
//! Writes `jobrelay_cluster_source_up`, `jobrelay_cluster_source_clusters` and
//! `jobrelay_cluster_source_refused`.

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::{Labels, family, gauge};
use crate::telemetry::status::Status;

/// One series per source, and one per object refused.
pub(super) fn encode(e: &mut DescriptorEncoder, status: &Status) -> Result<(), std::fmt::Error> {
    let sources = &status.cluster_sources;
    family(
        e,
        "jobrelay_cluster_source_up",
        "1 while the cluster source's objects are listed and watched, 0 while its watch fails \
         or has not listed them yet (its clusters as last read stay)",
        MetricType::Gauge,
        sources
            .iter()
            .map(|(name, s)| {
                let up = s.listed && s.error.is_none();
                (vec![("source", name.clone())], gauge(u64::from(up)))
            })
            .collect(),
    )?;
    family(
        e,
        "jobrelay_cluster_source_clusters",
        "Clusters the cluster source gives (names a file or home_cluster takes not counted)",
        MetricType::Gauge,
        sources
            .iter()
            .map(|(name, s)| {
                let labels: Labels = vec![("source", name.clone())];
                (labels, gauge(s.clusters.len() as u64))
            })
            .collect(),
    )?;
    family(
        e,
        "jobrelay_cluster_source_refused",
        "1 for each object of a cluster source that cannot be made a cluster (its last good \
         credentials, if any, stay in force); see /status cluster_sources for why",
        MetricType::Gauge,
        sources
            .iter()
            .flat_map(|(name, s)| {
                s.refused.keys().map(move |secret| {
                    let labels: Labels = vec![("source", name.clone()), ("secret", secret.clone())];
                    (labels, gauge(1))
                })
            })
            .collect(),
    )
}
