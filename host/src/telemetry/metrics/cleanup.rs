//! The clean-up families: finished jobs clean-up will delete, or holds back and why, and what
//! it did to those it acted on — so a dry run can be read before it is turned on, and a
//! clean-up that stalls shows which state it stalls in.
//!
//! Writes `jobrelay_cleanup_jobs` and `jobrelay_cleanup_deletions`.

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use super::{Labels, family, gauge};
use crate::telemetry::status::Status;

/// The clean-up schedule by cluster and state, and its outcomes by cluster, kind and outcome.
pub(super) fn encode(e: &mut DescriptorEncoder, status: &Status) -> Result<(), std::fmt::Error> {
    let cleanup = &status.cleanup;
    let jobs: Vec<(Labels, ConstGauge<i64>)> = cleanup
        .schedule
        .jobs
        .iter()
        .flat_map(|(cluster, stages)| {
            stages.iter().map(move |(stage, n)| {
                let labels = vec![("cluster", cluster.clone()), ("state", stage.to_string())];
                (labels, gauge(*n))
            })
        })
        .collect();
    family(
        e,
        "jobrelay_cleanup_jobs",
        "Finished jobs that clean-up will delete, by cluster and state: scheduled (not due \
         yet), due (queued for deletion), would_delete (dry run), or held back: \
         pending_delivery, dead_lettered, plugin_not_loaded, not_connected, failing",
        MetricType::Gauge,
        jobs,
    )?;
    let outcomes: Vec<(Labels, ConstCounter<u64>)> = cleanup
        .outcomes
        .iter()
        .map(|o| {
            let labels = vec![
                ("cluster", o.cluster.clone()),
                ("kind", o.kind.clone()),
                ("outcome", o.outcome.as_str().to_string()),
            ];
            (labels, ConstCounter::new(o.count))
        })
        .collect();
    family(
        e,
        "jobrelay_cleanup_deletions",
        "Finished jobs clean-up acted on, by cluster, kind and outcome: deleted, \
         would_delete (dry run), gone (already deleted), replaced (a job of the same name \
         with another uid stands there: left alone), failed (tried again)",
        MetricType::Counter,
        outcomes,
    )
}
