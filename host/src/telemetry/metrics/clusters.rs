//! The cluster families: an alert on a cluster (unhealthy, offline, out of sync, a stream not
//! watching, a kind not installed, a credential about to expire, objects it cannot read, late
//! events) needs its series labelled by cluster alone, whatever plugins run.
//!
//! Writes `jobrelay_cluster_*` (health, availability, checks failed, last sync, watch streams,
//! kinds not installed, credential expiry; watch lag and last event from the job view), the
//! API request families of [`crate::clusters::api_meter`], `jobrelay_unreadable_objects` and
//! `jobrelay_finalizer_add_failures`.

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use super::{Labels, family, gauge, histograms, per_cluster};
use crate::clusters::api_meter::ApiMeters;
use crate::clusters::health::HealthState;
use crate::telemetry::status::Status;
use jobrelay_fleet::availability::Availability;
use jobrelay_fleet::jobs::JobView;

/// Each cluster's health, availability, watch streams, missing kinds, credential expiry, API
/// requests (read from `meters` now), and the objects it could not read or put its finalizer
/// on.
pub(super) fn encode(
    e: &mut DescriptorEncoder,
    status: &Status,
    meters: &ApiMeters,
) -> Result<(), std::fmt::Error> {
    let health: Vec<(Labels, ConstGauge<i64>)> = status
        .clusters
        .iter()
        .flat_map(|(name, c)| {
            [
                HealthState::Connecting,
                HealthState::Synced,
                HealthState::Degraded,
                HealthState::Error,
            ]
            .into_iter()
            .map(move |state| {
                let labels = vec![
                    ("cluster", name.clone()),
                    ("state", format!("{state:?}").to_lowercase()),
                ];
                (labels, ConstGauge::new(i64::from(c.state == state)))
            })
        })
        .collect();
    family(
        e,
        "jobrelay_cluster_health",
        "1 for the cluster's current health state",
        MetricType::Gauge,
        health,
    )?;
    cluster_availability(e, status)?;
    let streams = |synced: bool| -> Vec<(Labels, ConstGauge<i64>)> {
        status
            .clusters
            .iter()
            .map(|(name, c)| {
                let n = if synced { c.streams_synced } else { c.streams };
                (vec![("cluster", name.clone())], gauge(n as u64))
            })
            .collect()
    };
    family(
        e,
        "jobrelay_cluster_watch_streams",
        "Watch streams of the cluster (kinds x namespaces)",
        MetricType::Gauge,
        streams(false),
    )?;
    family(
        e,
        "jobrelay_cluster_watch_streams_synced",
        "Watch streams that have listed and are watching",
        MetricType::Gauge,
        streams(true),
    )?;
    let not_installed = status
        .clusters
        .iter()
        .flat_map(|(name, c)| {
            c.kinds_not_installed.iter().map(move |kind| {
                (
                    vec![("cluster", name.clone()), ("kind", kind.clone())],
                    gauge(1),
                )
            })
        })
        .collect();
    family(
        e,
        "jobrelay_cluster_kind_not_installed",
        "1 for each kind the cluster does not serve (its CRD is not installed); checked again with backoff",
        MetricType::Gauge,
        not_installed,
    )?;
    let expiries: Vec<(Labels, ConstGauge<i64>)> = status
        .clusters
        .iter()
        .flat_map(|(name, c)| {
            c.credentials_expire.iter().map(move |e| {
                let labels = vec![
                    ("cluster", name.clone()),
                    ("credential", e.credential.as_str().to_string()),
                ];
                (labels, ConstGauge::new(e.expires_unix))
            })
        })
        .collect();
    family(
        e,
        "jobrelay_cluster_credential_expiry_timestamp_seconds",
        "When the cluster's kubeconfig token (a JWT's exp) or client certificate (notAfter) \
         expires, Unix seconds",
        MetricType::Gauge,
        expiries,
    )?;
    crate::clusters::api_meter::encode(e, &meters.snapshot())?;
    let finalizer_failures: Vec<(Labels, ConstCounter<u64>)> = status
        .clusters
        .iter()
        .map(|(name, c)| {
            (
                vec![("cluster", name.clone())],
                ConstCounter::new(c.finalizer_add_failures),
            )
        })
        .collect();
    let unreadable: Vec<(Labels, ConstCounter<u64>)> = status
        .clusters
        .iter()
        .map(|(name, c)| {
            (
                vec![("cluster", name.clone())],
                ConstCounter::new(c.unreadable_objects),
            )
        })
        .collect();
    family(
        e,
        "jobrelay_unreadable_objects",
        "Job objects that could not be read and were skipped (the rest of their kind goes on)",
        MetricType::Counter,
        unreadable,
    )?;
    family(
        e,
        "jobrelay_finalizer_add_failures",
        "Failed attempts to add jobrelay's finalizer to a job (each is retried with backoff)",
        MetricType::Counter,
        finalizer_failures,
    )
}

/// Each cluster's availability, judged over health checks with hysteresis (see
/// `jobrelay_fleet::availability`), the checks failed in a row and its last full sync.
fn cluster_availability(e: &mut DescriptorEncoder, status: &Status) -> Result<(), std::fmt::Error> {
    let states = status
        .clusters
        .iter()
        .flat_map(|(name, c)| {
            Availability::ALL.into_iter().map(move |state| {
                let labels = vec![
                    ("cluster", name.clone()),
                    ("state", state.as_str().to_string()),
                ];
                (labels, ConstGauge::new(i64::from(c.availability == state)))
            })
        })
        .collect();
    family(
        e,
        "jobrelay_cluster_availability",
        "1 for the cluster's availability (connecting, online, degraded, offline), judged over \
         health checks: offline after cluster_health.offline_after failed checks in a row, \
         online again after cluster_health.online_after good ones",
        MetricType::Gauge,
        states,
    )?;
    family(
        e,
        "jobrelay_cluster_health_checks_failed",
        "Health checks of the cluster failed in a row (0 once one passes)",
        MetricType::Gauge,
        per_cluster(status, |c| gauge(u64::from(c.failed_checks))),
    )?;
    family(
        e,
        "jobrelay_cluster_unauthorized",
        "1 while the cluster's last health check was refused for its credentials (401 \
         Unauthorized: a revoked or expired token)",
        MetricType::Gauge,
        per_cluster(status, |c| gauge(u64::from(c.unauthorized))),
    )?;
    let synced = status
        .clusters
        .iter()
        .filter_map(|(name, c)| {
            let at = chrono::DateTime::parse_from_rfc3339(c.last_sync.as_deref()?).ok()?;
            let seconds = at.timestamp_millis() as f64 / 1000.0;
            Some((vec![("cluster", name.clone())], ConstGauge::new(seconds)))
        })
        .collect::<Vec<(Labels, ConstGauge<f64>)>>();
    family(
        e,
        "jobrelay_cluster_last_sync_timestamp_seconds",
        "When the cluster was last wholly in sync (every watch stream listed or watching), \
         seconds since the epoch",
        MetricType::Gauge,
        synced,
    )
}

/// How late live transitions reach jobrelay (see `Slis::record_lag`), and when each cluster's
/// newest live version arrived.
pub(super) fn watch_lag(e: &mut DescriptorEncoder, view: &JobView) -> Result<(), std::fmt::Error> {
    let lags = view.slis().lags();
    histograms(
        e,
        "jobrelay_cluster_watch_lag_seconds",
        "Time from a transition as the job's status records it to its arrival here, for \
         live transitions (whole seconds; clock skew between the cluster and jobrelay counts \
         in)",
        lags.iter()
            .map(|(cluster, h)| (vec![("cluster", cluster.clone())], h)),
    )?;
    family(
        e,
        "jobrelay_cluster_last_event_timestamp_seconds",
        "When the cluster's newest live (watched, not listed) job version arrived, seconds \
         since the epoch",
        MetricType::Gauge,
        view.last_events()
            .into_iter()
            .map(|(cluster, at)| (vec![("cluster", cluster)], gauge(u64::from(at))))
            .collect(),
    )
}
