//! The families of the daemon as a whole, of no one cluster, plugin or store: a config file
//! refused, the main file's sections waiting for a restart, the event memory all lanes share,
//! and the build running — one series each, but for one per read-once section and the build's
//! version.
//!
//! Writes `jobrelay_config_files_refused`, `jobrelay_restart_pending`,
//! `jobrelay_event_memory_*` (bytes, limit, unstored) and `jobrelay_build_info`.

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::{Labels, family, gauge};
use crate::config::main_file::READ_ONCE_SECTIONS;
use crate::telemetry::status::Status;

/// The config files refused, the sections waiting for a restart, and the event memory
/// budget: held, limit and not yet stored.
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
    family(
        e,
        "jobrelay_restart_pending",
        "1 for a main-file section read once at start that was edited since: the daemon runs \
         on with the value it started with until it is restarted",
        MetricType::Gauge,
        restart_pending(&status.restart_pending)
            .into_iter()
            .map(|(labels, edited)| (labels, gauge(edited)))
            .collect(),
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

/// One sample per section read once at start, whether or not it was edited: 1 for those in
/// `pending`, else 0, so an alert and a dashboard always find the series.
fn restart_pending(pending: &[&str]) -> Vec<(Labels, u64)> {
    READ_ONCE_SECTIONS
        .iter()
        .map(|section| {
            let edited = pending.contains(section);
            (vec![("section", section.to_string())], edited.into())
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_read_once_section_has_a_restart_pending_sample() {
        let samples = restart_pending(&["sql", "runtime"]);
        assert_eq!(samples.len(), READ_ONCE_SECTIONS.len());
        for (labels, edited) in samples {
            let [("section", section)] = labels.as_slice() else {
                panic!("one label, section: {labels:?}");
            };
            let expected = u64::from(section == "sql" || section == "runtime");
            assert_eq!(edited, expected, "{section}");
        }
    }
}
