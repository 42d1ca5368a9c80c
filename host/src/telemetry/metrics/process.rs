//! The standard `process_*` families, under the names every Prometheus client library uses,
//! so the dashboards and alerts teams have for CPU, memory and file descriptors work unchanged
//! (what they read is [`crate::telemetry::process`]).
//!
//! Writes `process_cpu_seconds`, `process_resident_memory_bytes`,
//! `process_virtual_memory_bytes`, `process_open_fds`, `process_max_fds` and
//! `process_start_time_seconds`.

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use super::{Labels, family};
use crate::telemetry::process::ProcessStats;

/// The standard `process_*` families, from `/proc/self` now.
pub(super) fn encode(e: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    let stats = ProcessStats::read();
    let one = |v: Option<f64>| -> Vec<(Labels, ConstGauge<f64>)> {
        v.map(|v| vec![(Labels::new(), ConstGauge::new(v))])
            .unwrap_or_default()
    };
    let bytes = |v: Option<u64>| v.map(|v| v as f64);
    if let Some(cpu) = stats.cpu_seconds {
        family(
            e,
            "process_cpu_seconds",
            "User and system CPU time the process has spent, seconds",
            MetricType::Counter,
            vec![(Labels::new(), ConstCounter::new(cpu))],
        )?;
    }
    family(
        e,
        "process_resident_memory_bytes",
        "Resident memory of the process",
        MetricType::Gauge,
        one(bytes(stats.resident_bytes)),
    )?;
    family(
        e,
        "process_virtual_memory_bytes",
        "Virtual memory of the process",
        MetricType::Gauge,
        one(bytes(stats.virtual_bytes)),
    )?;
    family(
        e,
        "process_open_fds",
        "Open file descriptors",
        MetricType::Gauge,
        one(bytes(stats.open_fds)),
    )?;
    family(
        e,
        "process_max_fds",
        "The process's limit on open file descriptors",
        MetricType::Gauge,
        one(bytes(stats.max_fds)),
    )?;
    family(
        e,
        "process_start_time_seconds",
        "Start time of the process, Unix seconds",
        MetricType::Gauge,
        one(stats.start_time_seconds),
    )
}
