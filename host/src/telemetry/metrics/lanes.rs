//! The lane and delivery families: what happened to each observed job version on its way to
//! each plugin (delivered, retried, dead-lettered, skipped, filtered, deferred), what waits in
//! its lane and its inbox, and how its calls went — the series a delivery alert reads.
//!
//! Writes `jobrelay_events_*` (observed, delivered, retried, dead_lettered, skipped, filtered,
//! filter_errors, deferred), `jobrelay_lane_*` (pending, spilled, in flight, jobs),
//! `jobrelay_inbox_*` (read back, written), `jobrelay_plugin_calls_failed`,
//! `jobrelay_plugin_call_failures`, `jobrelay_plugin_call_duration_seconds` and
//! `jobrelay_event_delivery_seconds`.

use std::collections::BTreeMap;

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use super::{Labels, family, gauge, per_plugin, with_inf};
use crate::telemetry::status::Status;
use jobrelay_lanes::event_counts::Counts;
use jobrelay_lanes::lane::LaneStats;

/// The versions the watchers observed per cluster and kind, and for each plugin what became
/// of them (per cluster and kind where the lane keeps that), its lane's depth and its calls.
pub(super) fn encode(e: &mut DescriptorEncoder, status: &Status) -> Result<(), std::fmt::Error> {
    let observed_counts: Vec<(String, String, Counts)> = status
        .observed
        .iter()
        .map(|o| {
            let counts = Counts {
                observed: o.events,
                ..Counts::default()
            };
            (o.cluster.clone(), o.kind.clone(), counts)
        })
        .collect();
    let observed: Vec<(Labels, ConstCounter<u64>)> =
        with_watched_kinds(status, &observed_counts, |_| true)
            .into_iter()
            .map(|((cluster, kind), counts)| {
                (
                    vec![("cluster", cluster.to_string()), ("kind", kind.to_string())],
                    ConstCounter::new(counts.observed),
                )
            })
            .collect();
    family(
        e,
        "jobrelay_events_observed",
        "Job versions the watchers observed",
        MetricType::Counter,
        observed,
    )?;
    family(
        e,
        "jobrelay_events_delivered",
        "Events a plugin handled successfully",
        MetricType::Counter,
        by_job_kind(status, |c| c.delivered),
    )?;
    family(
        e,
        "jobrelay_events_retried",
        "Failed calls that were retried",
        MetricType::Counter,
        by_job_kind(status, |c| c.retried),
    )?;
    family(
        e,
        "jobrelay_events_dead_lettered",
        "Events moved to the dead-letter list",
        MetricType::Counter,
        by_job_kind(status, |c| c.dead_lettered),
    )?;
    family(
        e,
        "jobrelay_events_skipped",
        "Observed versions the plugin's delivery mode did not want (duplicates included)",
        MetricType::Counter,
        lane_counter(status, |l| l.skipped),
    )?;
    family(
        e,
        "jobrelay_events_filtered",
        "Observed versions the plugin's filter did not take (never queued)",
        MetricType::Counter,
        lane_counter(status, |l| l.filtered),
    )?;
    family(
        e,
        "jobrelay_events_filter_errors",
        "Observed versions the plugin's filter expression failed on (not delivered)",
        MetricType::Counter,
        lane_counter(status, |l| l.filter_errors),
    )?;
    family(
        e,
        "jobrelay_events_deferred",
        "Plugin calls that deferred their event (a digest window, quiet hours): not failures",
        MetricType::Counter,
        lane_counter(status, |l| l.deferred),
    )?;
    family(
        e,
        "jobrelay_plugin_calls_failed",
        "Plugin calls that failed (retried or not)",
        MetricType::Counter,
        lane_counter(status, |l| l.failed_calls),
    )?;
    family(
        e,
        "jobrelay_lane_pending_events",
        "Events waiting in the plugin's lane, calls in flight included: its inbox depth \
         (each is held in the state store's inbox)",
        MetricType::Gauge,
        lane_gauge(status, |l| l.pending),
    )?;
    family(
        e,
        "jobrelay_inbox_read_back",
        "Events the plugin's lane read back from the inbox for their call (they had waited \
         there only)",
        MetricType::Counter,
        lane_counter(status, |l| l.read_back),
    )?;
    family(
        e,
        "jobrelay_inbox_written",
        "Events the plugin's lane stored in the inbox; the others it took were delivered \
         before they were due to be stored (the lane kept up)",
        MetricType::Counter,
        lane_counter(status, |l| l.inbox_written),
    )?;
    family(
        e,
        "jobrelay_lane_spilled_events",
        "Of the plugin's pending events, those waiting only in the inbox (the event memory \
         budget had no room): read back in their turn",
        MetricType::Gauge,
        lane_gauge(status, |l| l.spilled),
    )?;
    family(
        e,
        "jobrelay_lane_in_flight_calls",
        "Plugin calls running now",
        MetricType::Gauge,
        lane_gauge(status, |l| l.in_flight),
    )?;
    family(
        e,
        "jobrelay_lane_jobs",
        "Jobs the plugin's lane tracks",
        MetricType::Gauge,
        lane_gauge(status, |l| l.jobs),
    )?;

    let failures: Vec<(Labels, ConstCounter<u64>)> = lanes(status)
        .flat_map(|(name, lane)| {
            lane.calls.failures.iter().map(move |(kind, n)| {
                (
                    vec![("plugin", name.clone()), ("failure", kind.to_string())],
                    ConstCounter::new(*n),
                )
            })
        })
        .collect();
    family(
        e,
        "jobrelay_plugin_call_failures",
        "Failed plugin calls by failure (trap, timeout, memory_limit, retry, give_up, host, init_refused)",
        MetricType::Counter,
        failures,
    )?;
    histograms(
        e,
        "jobrelay_plugin_call_duration_seconds",
        "Wall-clock time of plugin calls (fresh instance or kept one, init and handle)",
        lanes(status)
            .map(|(name, lane)| {
                let c = &lane.calls;
                (name, c.sum_seconds, c.count, c.buckets.as_slice())
            })
            .collect(),
    )?;
    histograms(
        e,
        "jobrelay_event_delivery_seconds",
        "Time from a job version's arrival in the plugin's lane to its acknowledgement \
         stored, for events the plugin handled",
        lanes(status)
            .map(|(name, lane)| {
                let d = &lane.delivery;
                (name, d.sum_seconds, d.count, d.buckets.as_slice())
            })
            .collect(),
    )
}

/// One plugin's histogram: `(plugin, sum, count, cumulative buckets)`.
type HistogramRow<'a> = (&'a String, f64, u64, &'a [(f64, u64)]);

/// One histogram family, a histogram per plugin: `(plugin, sum, count, cumulative buckets)`.
fn histograms(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    per_plugin: Vec<HistogramRow<'_>>,
) -> Result<(), std::fmt::Error> {
    if per_plugin.is_empty() {
        return Ok(());
    }
    let mut metric = e.encode_descriptor(name, help, None, MetricType::Histogram)?;
    for (plugin, sum, count, buckets) in per_plugin {
        let labels: Labels = vec![("plugin", plugin.clone())];
        metric.encode_family(&labels)?.encode_histogram::<Labels>(
            sum,
            count,
            &with_inf(buckets, count),
            None,
        )?;
    }
    Ok(())
}

/// Every plugin that has a lane, with its lane's counters.
fn lanes(status: &Status) -> impl Iterator<Item = (&String, &LaneStats)> {
    status
        .plugins
        .iter()
        .filter_map(|(name, p)| Some((name, p.lane.as_ref()?)))
}

fn lane_counter(
    status: &Status,
    read: impl Fn(&LaneStats) -> u64,
) -> Vec<(Labels, ConstCounter<u64>)> {
    per_plugin(status, |p| Some(ConstCounter::new(read(p.lane.as_ref()?))))
}

fn lane_gauge(status: &Status, read: impl Fn(&LaneStats) -> u64) -> Vec<(Labels, ConstGauge<i64>)> {
    per_plugin(status, |p| Some(gauge(read(p.lane.as_ref()?))))
}

/// Every (cluster, configured kind) the clusters watch, with `counts` found for it, and the
/// pairs `counts` has beyond those (a cluster let go, a kind no longer configured): each
/// series is there from the start, at 0 until its first event, so `rate()` and `increase()`
/// see the first one.
fn with_watched_kinds<'a>(
    status: &'a Status,
    counts: &'a [(String, String, Counts)],
    wanted: impl Fn(&str) -> bool,
) -> BTreeMap<(&'a str, &'a str), Counts> {
    let mut all: BTreeMap<(&str, &str), Counts> = status
        .clusters
        .iter()
        .flat_map(|(cluster, health)| {
            health
                .kinds
                .iter()
                .filter(|kind| wanted(kind))
                .map(move |kind| ((cluster.as_str(), kind.as_str()), Counts::default()))
        })
        .collect();
    for (cluster, kind, n) in counts {
        all.insert((cluster, kind), *n);
    }
    all
}

/// A per-plugin, per-cluster, per-kind counter from the lanes, at 0 for every (cluster, kind)
/// the plugin takes and has had no event of yet.
fn by_job_kind(status: &Status, read: impl Fn(&Counts) -> u64) -> Vec<(Labels, ConstCounter<u64>)> {
    lanes(status)
        .flat_map(|(name, lane)| {
            let wanted = |kind: &str| lane.kinds.is_empty() || lane.kinds.iter().any(|k| k == kind);
            with_watched_kinds(status, &lane.by_job_kind, wanted)
                .into_iter()
                .map(|((cluster, kind), counts)| {
                    (
                        vec![
                            ("plugin", name.clone()),
                            ("cluster", cluster.to_string()),
                            ("kind", kind.to_string()),
                        ],
                        ConstCounter::new(read(&counts)),
                    )
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    /// Every time limit a manifest may set has a bucket bound at or above it, so the call
    /// duration histogram tells a plugin near its limit from one far below it, whatever the
    /// limit.
    #[test]
    fn call_duration_buckets_reach_the_longest_time_limit() {
        let top = jobrelay_lanes::call_stats::BUCKETS
            .last()
            .copied()
            .unwrap_or_default();
        assert!(
            top >= jobrelay_capabilities::MAX_TIMEOUT.as_secs_f64(),
            "{top}"
        );
    }
}
