//! Prometheus metrics, read from the daemon's own counters at scrape time.
//!
//! The lanes and the health board already count everything these metrics report, so a
//! collector turns a [`Status`] snapshot into metric families when Prometheus scrapes; the
//! event path pays nothing for metrics. Names follow Prometheus conventions: a `jobrelay_`
//! prefix, `_total` on counters, base units.
//!
//! The families are written a group at a time, in the order the exposition has them, each
//! group in its own file:
//!
//! - `clusters`: `jobrelay_cluster_*`, the API requests, unreadable objects, finalizer
//!   failures, and the watch lag read from the job view;
//! - `lanes`: `jobrelay_events_*`, `jobrelay_lane_*`, `jobrelay_inbox_*`, the plugin calls
//!   and the delivery time;
//! - `plugins`: `jobrelay_plugin_*` of the serving version and its loads;
//! - `sources`: `jobrelay_cluster_source_*`, the cluster sources on the home cluster;
//! - `daemon`: config files refused, the event memory budget, the build;
//! - `cleanup`: `jobrelay_cleanup_*`, what clean-up will delete and what it did;
//! - `store`: readiness, the state store, the dead letters stored;
//! - `fleet`: the job SLIs and the fleet rules of the job view;
//! - `process`: the standard `process_*`;
//! - `coordination`: `jobrelay_shard_*` and `jobrelay_leader`.
//!
//! Here: the collector, and what the groups share (a family from its samples, a count as a
//! gauge, one sample per plugin, histogram buckets as the encoder wants them).

mod cleanup;
mod clusters;
mod coordination;
mod daemon;
mod fleet;
mod lanes;
mod plugins;
mod process;
mod sources;
mod store;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use jobrelay_fleet::sli::HistogramSnapshot;

use super::status::{Status, StatusSources};
use crate::clusters::health::ClusterHealth;
use crate::daemon::plugin_set::PluginStatus;

/// Reads the daemon's counters on every scrape.
pub struct DaemonCollector {
    sources: StatusSources,
}

impl std::fmt::Debug for DaemonCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DaemonCollector")
    }
}

/// A registry with the daemon's collector in it.
pub fn registry(sources: StatusSources) -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(DaemonCollector { sources }));
    registry
}

/// The text exposition of `registry`.
pub fn render(registry: &Registry) -> Result<String, std::fmt::Error> {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry)?;
    Ok(out)
}

type Labels = Vec<(&'static str, String)>;

/// The encoder wants per-bucket (not cumulative) counts and `f64::MAX` as the `+Inf` bound;
/// the snapshot has cumulative counts without `+Inf`.
fn with_inf(cumulative: &[(f64, u64)], count: u64) -> Vec<(f64, u64)> {
    let mut out = Vec::with_capacity(cumulative.len() + 1);
    let mut below = 0;
    for (bound, total) in cumulative {
        out.push((*bound, total - below));
        below = *total;
    }
    out.push((f64::MAX, count - below));
    out
}

/// One histogram family of the job view's snapshots (`jobrelay_fleet::sli`): name, help and
/// each series' labels with its snapshot. Nothing is written without a series.
fn histograms<'h>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (Labels, &'h HistogramSnapshot)>,
) -> Result<(), std::fmt::Error> {
    let mut series = series.into_iter().peekable();
    if series.peek().is_none() {
        return Ok(());
    }
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
    for (labels, h) in series {
        metric.encode_family(&labels)?.encode_histogram::<Labels>(
            h.sum_seconds,
            h.count,
            &with_inf(&h.buckets, h.count),
            None,
        )?;
    }
    Ok(())
}

/// One metric family: name, help, type, and its labelled values.
fn family<M: EncodeMetric>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    samples: Vec<(Labels, M)>,
) -> Result<(), std::fmt::Error> {
    if samples.is_empty() {
        return Ok(());
    }
    let mut metric = encoder.encode_descriptor(name, help, None, kind)?;
    // An unlabelled sample goes straight to the descriptor's encoder: through an empty label
    // family it would print as `name{} value`.
    if let [(labels, value)] = samples.as_slice()
        && labels.is_empty()
    {
        return value.encode(metric);
    }
    for (labels, value) in samples {
        value.encode(metric.encode_family(&labels)?)?;
    }
    Ok(())
}

/// One sample per plugin, labelled `plugin`, from what `read` finds in its status; a plugin
/// for which `read` finds nothing has no sample.
fn per_plugin<M>(status: &Status, read: impl Fn(&PluginStatus) -> Option<M>) -> Vec<(Labels, M)> {
    status
        .plugins
        .iter()
        .filter_map(|(name, p)| Some((vec![("plugin", name.clone())], read(p)?)))
        .collect()
}

/// One sample per cluster, labelled `cluster`, from what `read` finds in its health.
fn per_cluster<M>(status: &Status, read: impl Fn(&ClusterHealth) -> M) -> Vec<(Labels, M)> {
    status
        .clusters
        .iter()
        .map(|(name, c)| (vec![("cluster", name.clone())], read(c)))
        .collect()
}

/// A count as a gauge value (gauges are signed).
fn gauge(value: u64) -> ConstGauge<i64> {
    ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX))
}

impl Collector for DaemonCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let status = self.sources.snapshot();
        let e = &mut encoder;
        clusters::encode(e, &status, &self.sources.meters)?;
        sources::encode(e, &status)?;
        lanes::encode(e, &status)?;
        plugins::encode(e, &status)?;
        daemon::config_and_memory(e, &status)?;
        cleanup::encode(e, &status)?;
        store::encode(e, &status)?;
        daemon::build_info(e)?;
        if let Some(view) = self.sources.routes.view() {
            // A standby sees the same jobs as the replica that delivers, and would export
            // the same SLIs again: only a replica that delivers exports them.
            if coordination::delivers(&status.coordination) {
                fleet::job_slis(e, &view.slis().snapshot())?;
            }
            clusters::watch_lag(e, view)?;
        }
        fleet::rules(e, &self.sources.fleet_rules.readings())?;
        fleet::timers(e, &self.sources.fleet_rules.timers_firing())?;
        process::encode(e)?;
        coordination::encode(e, &status.coordination)
    }
}
