//! The readiness and state store families: readiness hangs on the state store (and the
//! Lease), and the store's dead letters are the backlog an operator has to work off, so they
//! are read together.
//!
//! Writes `jobrelay_ready`, `jobrelay_state_store_up` and `jobrelay_dead_letters_stored`.

use std::collections::BTreeMap;

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;

use super::{Labels, family, gauge};
use crate::telemetry::status::Status;

/// Whether this replica is ready and its state store answers, and the dead letters stored per
/// plugin as of the store's last check.
pub(super) fn encode(e: &mut DescriptorEncoder, status: &Status) -> Result<(), std::fmt::Error> {
    let ready = vec![(Labels::new(), ConstGauge::new(i64::from(status.ready)))];
    family(
        e,
        "jobrelay_ready",
        "1 while the state store answers and the Lease is not lost (plugins and clusters are \
         not readiness: see jobrelay_plugin_up and jobrelay_cluster_health)",
        MetricType::Gauge,
        ready,
    )?;
    let store_up = vec![(
        Labels::new(),
        ConstGauge::new(i64::from(status.state_store.reachable)),
    )];
    family(
        e,
        "jobrelay_state_store_up",
        "1 if the state store answered its last check",
        MetricType::Gauge,
        store_up,
    )?;
    // Every plugin loaded here, at 0 without dead letters, and any plugin the store holds
    // letters of (a plugin removed, or loaded by another replica).
    let mut backlog: BTreeMap<&str, u64> = status.plugins.keys().map(|p| (p.as_str(), 0)).collect();
    for (plugin, n) in &status.state_store.dead_letters {
        backlog.insert(plugin, *n);
    }
    let stored: Vec<(Labels, ConstGauge<i64>)> = backlog
        .into_iter()
        .map(|(plugin, n)| (vec![("plugin", plugin.to_string())], gauge(n)))
        .collect();
    family(
        e,
        "jobrelay_dead_letters_stored",
        "Dead letters in the state store, by plugin, as of its last check (the backlog \
         `jobrelay dead-letters list` shows)",
        MetricType::Gauge,
        stored,
    )
}
