//! The families of the daemon as a whole, of no one cluster, plugin or store: a config file
//! refused, the event memory all lanes share, and the build running — one series each, with
//! no label but the build's version.
//!
//! Writes `jobrelay_config_files_refused`, `jobrelay_event_memory_*` (bytes, limit, unstored)
//! and `jobrelay_build_info`.

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::{Labels, family, gauge};
use crate::telemetry::status::Status;

/// The config files refused and the event memory budget: held, limit and not yet stored.
pub(super) fn config_and_memory(
    e: &mut DescriptorEncoder,
    status: &Status,
) -> Result<(), std::fmt::Error> {
    let problems = vec![(Labels::new(), gauge(status.problems.len() as u64))];
    family(
        e,
        "jobrelay_config_files_refused",
        "Config files refused (their last good version stays in force)",
        MetricType::Gauge,
        problems,
    )?;
    let memory = &status.event_memory;
    family(
        e,
        "jobrelay_event_memory_bytes",
        "Bytes of job events the lanes keep in memory, all plugins (whole queued events and \
         copies not yet stored in the inbox)",
        MetricType::Gauge,
        vec![(Labels::new(), gauge(memory.held_bytes))],
    )?;
    family(
        e,
        "jobrelay_event_memory_limit_bytes",
        "The event memory budget (event_memory_mb): past it, queued events wait only in the \
         inbox and the watch is read as fast as the inbox is written",
        MetricType::Gauge,
        vec![(Labels::new(), gauge(memory.limit_bytes))],
    )?;
    family(
        e,
        "jobrelay_event_memory_unstored_bytes",
        "Bytes of accepted job events on their way to the inbox, not stored yet: what lives \
         only in memory (at most the write-ahead, event_memory_mb / 16 within 256 KiB..4 MiB)",
        MetricType::Gauge,
        vec![(Labels::new(), gauge(memory.unstored_bytes))],
    )
}

/// The version of the running jobrelay, as a label.
pub(super) fn build_info(e: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    family(
        e,
        "jobrelay_build_info",
        "1, labelled with the version of the running jobrelay",
        MetricType::Gauge,
        vec![(
            vec![("version", env!("CARGO_PKG_VERSION").to_string())],
            gauge(1),
        )],
    )
}
