//! Prometheus metrics, read from the daemon's own counters at scrape time.
//!
//! The lanes and the health board already count everything these metrics report, so a
//! collector turns a [`Status`] snapshot into metric families when Prometheus scrapes; the
//! event path pays nothing for metrics. Names follow Prometheus conventions: a `jobrelay_`
//! prefix, `_total` on counters, base units.

use std::collections::BTreeMap;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use super::process::ProcessStats;
use super::status::{Status, StatusSources};
use crate::clusters::health::HealthState;
use crate::daemon::plugin_set::PluginStatus;
use jobrelay_capabilities::log::LEVELS;
use jobrelay_capabilities::refusals::Limit;
use jobrelay_coordination::Role;
use jobrelay_fleet::availability::Availability;
use jobrelay_fleet::jobs::JobView;
use jobrelay_fleet::rules::RuleReading;
use jobrelay_fleet::sli::{HistogramSnapshot, SliRow};
use jobrelay_lanes::event_counts::Counts;
use jobrelay_lanes::lane::LaneStats;
use jobrelay_runtime::LoadError;

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

/// The job SLIs of the job view (see `jobrelay_fleet::sli`): queue wait and run time
/// histograms, ends by result and restarts, per cluster, namespace and kind.
fn job_slis(e: &mut DescriptorEncoder, rows: &[SliRow]) -> Result<(), std::fmt::Error> {
    if rows.is_empty() {
        return Ok(());
    }
    let labels = |r: &SliRow| -> Labels {
        vec![
            ("cluster", r.cluster.clone()),
            // Not `namespace`: Prometheus's Kubernetes discovery puts the scraped pod's
            // namespace there, and a clash would rename this one `exported_namespace`.
            ("job_namespace", r.namespace.clone()),
            ("kind", r.kind.clone()),
        ]
    };
    for (name, help, read) in [
        (
            "jobrelay_job_queue_wait_seconds",
            "Time from a job's creation to its first running, for jobs seen starting live",
            (|r: &SliRow| &r.queue_wait) as fn(&SliRow) -> &HistogramSnapshot,
        ),
        (
            "jobrelay_job_run_seconds",
            "Time from a job's first running to its success or failure, for jobs seen ending live",
            |r: &SliRow| &r.run,
        ),
    ] {
        let mut metric = e.encode_descriptor(name, help, None, MetricType::Histogram)?;
        for row in rows {
            let h = read(row);
            metric
                .encode_family(&labels(row))?
                .encode_histogram::<Labels>(
                    h.sum_seconds,
                    h.count,
                    &with_inf(&h.buckets, h.count),
                    None,
                )?;
        }
    }
    let finished = rows
        .iter()
        .flat_map(|r| {
            [("succeeded", r.succeeded), ("failed", r.failed)].map(|(result, n)| {
                let mut l = labels(r);
                l.push(("result", result.to_string()));
                (l, ConstCounter::new(n))
            })
        })
        .collect();
    family(
        e,
        "jobrelay_jobs_finished",
        "Jobs seen ending live, by result (succeeded or failed)",
        MetricType::Counter,
        finished,
    )?;
    family(
        e,
        "jobrelay_job_restarts",
        "Times jobs were seen entering `restarting`",
        MetricType::Counter,
        rows.iter()
            .map(|r| (labels(r), ConstCounter::new(r.restarts)))
            .collect(),
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
        status
            .clusters
            .iter()
            .map(|(name, c)| {
                (
                    vec![("cluster", name.clone())],
                    gauge(u64::from(c.failed_checks)),
                )
            })
            .collect(),
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
fn watch_lag(e: &mut DescriptorEncoder, view: &JobView) -> Result<(), std::fmt::Error> {
    let lags = view.slis().lags();
    if !lags.is_empty() {
        let mut metric = e.encode_descriptor(
            "jobrelay_cluster_watch_lag_seconds",
            "Time from a transition as the job's status records it to its arrival here, for \
             live transitions (whole seconds; clock skew between the cluster and jobrelay counts \
             in)",
            None,
            MetricType::Histogram,
        )?;
        for (cluster, h) in &lags {
            let labels: Labels = vec![("cluster", cluster.clone())];
            metric.encode_family(&labels)?.encode_histogram::<Labels>(
                h.sum_seconds,
                h.count,
                &with_inf(&h.buckets, h.count),
                None,
            )?;
        }
    }
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

/// Each fleet rule's verdict and last measure on each cluster it judged.
fn fleet_rules(e: &mut DescriptorEncoder, readings: &[RuleReading]) -> Result<(), std::fmt::Error> {
    let labels = |r: &RuleReading| -> Labels {
        vec![("rule", r.rule.clone()), ("cluster", r.cluster.clone())]
    };
    family(
        e,
        "jobrelay_fleet_rule_firing",
        "1 while the fleet rule fires on the cluster (its condition held for its `for`)",
        MetricType::Gauge,
        readings
            .iter()
            .map(|r| (labels(r), ConstGauge::new(i64::from(r.firing))))
            .collect(),
    )?;
    family(
        e,
        "jobrelay_fleet_rule_value",
        "The fleet rule's measure over its window at its last evaluation with enough jobs",
        MetricType::Gauge,
        readings
            .iter()
            .filter_map(|r| Some((labels(r), ConstGauge::new(r.value?))))
            .collect::<Vec<(Labels, ConstGauge<f64>)>>(),
    )
}

/// Every plugin that has a lane, with its lane's counters.
fn lanes(status: &Status) -> impl Iterator<Item = (&String, &LaneStats)> {
    status
        .plugins
        .iter()
        .filter_map(|(name, p)| Some((name, p.lane.as_ref()?)))
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

fn lane_counter(
    status: &Status,
    read: impl Fn(&LaneStats) -> u64,
) -> Vec<(Labels, ConstCounter<u64>)> {
    per_plugin(status, |p| Some(ConstCounter::new(read(p.lane.as_ref()?))))
}

fn lane_gauge(status: &Status, read: impl Fn(&LaneStats) -> u64) -> Vec<(Labels, ConstGauge<i64>)> {
    per_plugin(status, |p| Some(gauge(read(p.lane.as_ref()?))))
}

/// A count as a gauge value (gauges are signed).
fn gauge(value: u64) -> ConstGauge<i64> {
    ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX))
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

impl Collector for DaemonCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let status = self.sources.snapshot();
        let e = &mut encoder;

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
        cluster_availability(e, &status)?;
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
        crate::clusters::api_meter::encode(e, &self.sources.meters.snapshot())?;
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
        )?;

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
            with_watched_kinds(&status, &observed_counts, |_| true)
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
            by_job_kind(&status, |c| c.delivered),
        )?;
        family(
            e,
            "jobrelay_events_retried",
            "Failed calls that were retried",
            MetricType::Counter,
            by_job_kind(&status, |c| c.retried),
        )?;
        family(
            e,
            "jobrelay_events_dead_lettered",
            "Events moved to the dead-letter list",
            MetricType::Counter,
            by_job_kind(&status, |c| c.dead_lettered),
        )?;
        family(
            e,
            "jobrelay_events_skipped",
            "Observed versions the plugin's delivery mode did not want (duplicates included)",
            MetricType::Counter,
            lane_counter(&status, |l| l.skipped),
        )?;
        family(
            e,
            "jobrelay_events_filtered",
            "Observed versions the plugin's filter did not take (never queued)",
            MetricType::Counter,
            lane_counter(&status, |l| l.filtered),
        )?;
        family(
            e,
            "jobrelay_events_filter_errors",
            "Observed versions the plugin's filter expression failed on (not delivered)",
            MetricType::Counter,
            lane_counter(&status, |l| l.filter_errors),
        )?;
        family(
            e,
            "jobrelay_events_deferred",
            "Plugin calls that deferred their event (a digest window, quiet hours): not failures",
            MetricType::Counter,
            lane_counter(&status, |l| l.deferred),
        )?;
        family(
            e,
            "jobrelay_plugin_calls_failed",
            "Plugin calls that failed (retried or not)",
            MetricType::Counter,
            lane_counter(&status, |l| l.failed_calls),
        )?;
        family(
            e,
            "jobrelay_lane_pending_events",
            "Events waiting in the plugin's lane, calls in flight included: its inbox depth \
             (each is held in the state store's inbox)",
            MetricType::Gauge,
            lane_gauge(&status, |l| l.pending),
        )?;
        family(
            e,
            "jobrelay_inbox_read_back",
            "Events the plugin's lane read back from the inbox for their call (they had waited \
             there only)",
            MetricType::Counter,
            lane_counter(&status, |l| l.read_back),
        )?;
        family(
            e,
            "jobrelay_inbox_written",
            "Events the plugin's lane stored in the inbox; the others it took were delivered \
             before they were due to be stored (the lane kept up)",
            MetricType::Counter,
            lane_counter(&status, |l| l.inbox_written),
        )?;
        family(
            e,
            "jobrelay_lane_spilled_events",
            "Of the plugin's pending events, those waiting only in the inbox (the event memory \
             budget had no room): read back in their turn",
            MetricType::Gauge,
            lane_gauge(&status, |l| l.spilled),
        )?;
        family(
            e,
            "jobrelay_lane_in_flight_calls",
            "Plugin calls running now",
            MetricType::Gauge,
            lane_gauge(&status, |l| l.in_flight),
        )?;
        family(
            e,
            "jobrelay_lane_jobs",
            "Jobs the plugin's lane tracks",
            MetricType::Gauge,
            lane_gauge(&status, |l| l.jobs),
        )?;

        let failures: Vec<(Labels, ConstCounter<u64>)> = lanes(&status)
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
            lanes(&status)
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
            lanes(&status)
                .map(|(name, lane)| {
                    let d = &lane.delivery;
                    (name, d.sum_seconds, d.count, d.buckets.as_slice())
                })
                .collect(),
        )?;
        let timeouts = per_plugin(&status, |p| {
            Some(ConstGauge::new(p.lane.as_ref()?.timeout_seconds?))
        });
        family(
            e,
            "jobrelay_plugin_timeout_seconds",
            "The serving version's time limit per call (timeout_ms), to compare call times with",
            MetricType::Gauge,
            timeouts,
        )?;
        let up = per_plugin(&status, |p| {
            Some(ConstGauge::new(i64::from(p.serving.is_some())))
        });
        family(
            e,
            "jobrelay_plugin_up",
            "1 while a version of the plugin serves events; 0 while none does (its events wait)",
            MetricType::Gauge,
            up,
        )?;

        let oldest = per_plugin(&status, |p| {
            Some(ConstGauge::new(p.lane.as_ref()?.oldest_pending_seconds))
        });
        family(
            e,
            "jobrelay_lane_oldest_pending_seconds",
            "Age of the oldest event waiting in the plugin's lane (0: none)",
            MetricType::Gauge,
            oldest,
        )?;
        let memory = per_plugin(&status, |p| {
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
        let reloads = per_plugin(&status, |p| {
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
        let waiting = per_plugin(&status, |p| {
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
        let attempts = per_plugin(&status, |p| {
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
        )?;
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
        )?;
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
        )?;
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
        let mut backlog: BTreeMap<&str, u64> =
            status.plugins.keys().map(|p| (p.as_str(), 0)).collect();
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
        )?;
        family(
            e,
            "jobrelay_build_info",
            "1, labelled with the version of the running jobrelay",
            MetricType::Gauge,
            vec![(
                vec![("version", env!("CARGO_PKG_VERSION").to_string())],
                gauge(1),
            )],
        )?;
        if let Some(view) = self.sources.routes.view() {
            job_slis(e, &view.slis().snapshot())?;
            watch_lag(e, view)?;
        }
        fleet_rules(e, &self.sources.fleet_rules.readings())?;
        process_families(e)?;
        let leading = vec![(
            Labels::new(),
            ConstGauge::new(i64::from(status.coordination.delivers())),
        )];
        if let Role::Sharded {
            owned,
            members,
            clusters,
            ..
        } = &status.coordination
        {
            // Every configured cluster, 1 where held here: a cluster no replica holds reads 0
            // on every replica instead of having no series at all.
            let owned = clusters
                .iter()
                .chain(owned.iter().filter(|c| !clusters.contains(c)))
                .map(|c| {
                    (
                        vec![("cluster", c.clone())],
                        gauge(u64::from(owned.contains(c))),
                    )
                })
                .collect();
            family(
                e,
                "jobrelay_shard_owned",
                "1 for each cluster whose Lease this replica holds and delivers, 0 for every other \
                 configured cluster (sharding)",
                MetricType::Gauge,
                owned,
            )?;
            family(
                e,
                "jobrelay_shard_members",
                "Replicas this one sees alive (sharding)",
                MetricType::Gauge,
                vec![(Labels::new(), gauge(members.len() as u64))],
            )?;
        }
        family(
            e,
            "jobrelay_leader",
            "1 while this replica delivers (the only replica, or the holder of the Lease)",
            MetricType::Gauge,
            leading,
        )
    }
}

/// The standard `process_*` families, from `/proc/self` now.
fn process_families(e: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
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
