//! The plugin families: whether each plugin has a version serving, which one, how its loads
//! went, and what it ran into (time and memory limits, quotas, its own log lines) — what an
//! operator reads to tell a plugin that does not load from one that loads and misbehaves.
//!
//! Writes `jobrelay_plugin_*` (timeout, up, memory high water, serving, last reload, load
//! failures, load waiting, load attempts, refusals, log lines) and, between two of them where
//! the exposition has always had it, `jobrelay_lane_oldest_pending_seconds`.

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use super::{Labels, family, gauge, per_plugin};
use crate::telemetry::status::Status;
use jobrelay_capabilities::log::LEVELS;
use jobrelay_capabilities::refusals::Limit;
use jobrelay_runtime::LoadError;

/// Each plugin's serving version and its limits, its loads, refusals and log lines.
pub(super) fn encode(e: &mut DescriptorEncoder, status: &Status) -> Result<(), std::fmt::Error> {
    let timeouts = per_plugin(status, |p| {
        Some(ConstGauge::new(p.lane.as_ref()?.timeout_seconds?))
    });
    family(
        e,
        "jobrelay_plugin_timeout_seconds",
        "The serving version's time limit per call (timeout_ms), to compare call times with",
        MetricType::Gauge,
        timeouts,
    )?;
    let up = per_plugin(status, |p| {
        Some(ConstGauge::new(i64::from(p.serving.is_some())))
    });
    family(
        e,
        "jobrelay_plugin_up",
        "1 while a version of the plugin serves events; 0 while none does (its events wait)",
        MetricType::Gauge,
        up,
    )?;

    let oldest = per_plugin(status, |p| {
        Some(ConstGauge::new(p.lane.as_ref()?.oldest_pending_seconds))
    });
    family(
        e,
        "jobrelay_lane_oldest_pending_seconds",
        "Age of the oldest event waiting in the plugin's lane, but for those it deferred (0: none)",
        MetricType::Gauge,
        oldest,
    )?;
    let deferred = per_plugin(status, |p| Some(gauge(p.lane.as_ref()?.deferred_waiting)));
    family(
        e,
        "jobrelay_lane_deferred_waiting",
        "Jobs whose next event waits because the plugin deferred it (not lag)",
        MetricType::Gauge,
        deferred,
    )?;
    let memory = per_plugin(status, |p| {
        Some(gauge(p.lane.as_ref()?.memory_high_water_bytes?))
    });
    family(
        e,
        "jobrelay_plugin_memory_high_water_bytes",
        "The most linear memory one call of the serving version has used",
        MetricType::Gauge,
        memory,
    )?;

    let serving: Vec<(Labels, ConstGauge<i64>)> = status
        .plugins
        .iter()
        .filter_map(|(name, p)| {
            let labels = vec![
                ("plugin", name.clone()),
                ("version", p.serving.clone()?),
                (
                    "wasm_sha256",
                    p.serving_wasm_sha256.clone().unwrap_or_default(),
                ),
            ];
            Some((labels, ConstGauge::new(1)))
        })
        .collect();
    family(
        e,
        "jobrelay_plugin_serving",
        "1 for the plugin version serving events",
        MetricType::Gauge,
        serving,
    )?;
    let reloads = per_plugin(status, |p| {
        Some(ConstGauge::new(i64::from(p.last_reload.as_ref()?.ok)))
    });
    family(
        e,
        "jobrelay_plugin_last_reload_success",
        "1 if the plugin's last load succeeded, 0 if it failed",
        MetricType::Gauge,
        reloads,
    )?;
    let load_failures: Vec<(Labels, ConstCounter<u64>)> = status
        .plugins
        .iter()
        .flat_map(|(name, p)| {
            LoadError::KINDS.iter().chain(&["lane"]).map(move |reason| {
                (
                    vec![("plugin", name.clone()), ("reason", reason.to_string())],
                    ConstCounter::new(p.load_failures.get(reason).copied().unwrap_or(0)),
                )
            })
        })
        .collect();
    family(
        e,
        "jobrelay_plugin_load_failures",
        "Failed load attempts by reason (compile, wrong_world, init_refused, secret, grant, \
         limits, unavailable, lane)",
        MetricType::Counter,
        load_failures,
    )?;
    let waiting = per_plugin(status, |p| {
        Some(ConstGauge::new(i64::from(p.waiting.is_some())))
    });
    family(
        e,
        "jobrelay_plugin_load_waiting",
        "1 while a load that failed for a reason that may pass is retried (without a serving \
         version, the plugin's events wait in its lane)",
        MetricType::Gauge,
        waiting,
    )?;
    let attempts = per_plugin(status, |p| {
        Some(gauge(u64::from(p.waiting.as_ref()?.attempts)))
    });
    family(
        e,
        "jobrelay_plugin_load_attempts",
        "Attempts made so far by the load being retried",
        MetricType::Gauge,
        attempts,
    )?;
    let refusals: Vec<(Labels, ConstCounter<u64>)> = status
        .plugins
        .iter()
        .flat_map(|(name, p)| {
            Limit::ALL.iter().map(move |limit| {
                let limit = limit.as_str();
                let labels = vec![("plugin", name.clone()), ("limit", limit.to_string())];
                let n = p.refusals.get(limit).copied().unwrap_or(0);
                (labels, ConstCounter::new(n))
            })
        })
        .collect();
    family(
        e,
        "jobrelay_plugin_refusals",
        "Writes and requests refused because the plugin reached a quota or limit \
         (kv_quota, archive_quota, http_open_requests)",
        MetricType::Counter,
        refusals,
    )?;
    let lines: Vec<(Labels, ConstCounter<u64>)> = status
        .plugins
        .iter()
        .flat_map(|(name, p)| {
            LEVELS.iter().map(move |level| {
                let labels = vec![("plugin", name.clone()), ("level", level.to_string())];
                let n = p.log_lines.get(level).copied().unwrap_or(0);
                (labels, ConstCounter::new(n))
            })
        })
        .collect();
    family(
        e,
        "jobrelay_plugin_log_lines",
        "Log lines the plugin wrote, by level (trace, debug, info, warn, error); lines past \
         the per-call limit are counted too",
        MetricType::Counter,
        lines,
    )
}
