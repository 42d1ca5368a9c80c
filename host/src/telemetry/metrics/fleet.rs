//! The fleet families, read from the job view (`jobrelay_fleet`) rather than the lanes: how
//! jobs themselves fare (queue wait, run time, ends, restarts) and the fleet rules' verdicts,
//! per cluster, namespace and kind — what a team's job alert reads, with no plugin involved.
//!
//! Writes `jobrelay_job_*` (queue wait, run seconds, restarts), `jobrelay_jobs_finished` and
//! `jobrelay_fleet_rule_*` (firing, value).

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use super::{Labels, family, histograms};
use jobrelay_fleet::rules::RuleReading;
use jobrelay_fleet::sli::{HistogramSnapshot, SliRow};

/// The job SLIs of the job view (see `jobrelay_fleet::sli`): queue wait and run time
/// histograms, ends by result and restarts, per cluster, namespace and kind.
pub(super) fn job_slis(e: &mut DescriptorEncoder, rows: &[SliRow]) -> Result<(), std::fmt::Error> {
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
        histograms(e, name, help, rows.iter().map(|r| (labels(r), read(r))))?;
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
    )?;
    story_slis(e, rows, &labels)
}

/// The SLIs of the kinds that tell a story: Kueue's admission wait and preemptions per
/// ClusterQueue, failures per first cause. Written only once a row has one.
fn story_slis(
    e: &mut DescriptorEncoder,
    rows: &[SliRow],
    labels: &dyn Fn(&SliRow) -> Labels,
) -> Result<(), std::fmt::Error> {
    let with = |r: &SliRow, name: &'static str, value: &str| {
        let mut l = labels(r);
        l.push((name, value.to_string()));
        l
    };
    if rows.iter().any(|r| !r.queues.is_empty()) {
        histograms(
            e,
            "jobrelay_job_admission_wait_seconds",
            "Kueue's wait to admission (from the last requeue, else the Workload's creation), per \
             admission seen live, by ClusterQueue",
            rows.iter().flat_map(|r| {
                r.queues
                    .iter()
                    .map(move |q| (with(r, "cluster_queue", &q.queue), &q.admission_wait))
            }),
        )?;
        family(
            e,
            "jobrelay_job_preemptions",
            "Preemptions of jobs' Kueue Workloads seen live, by ClusterQueue",
            MetricType::Counter,
            rows.iter()
                .flat_map(|r| {
                    r.queues.iter().map(move |q| {
                        (
                            with(r, "cluster_queue", &q.queue),
                            ConstCounter::new(q.preemptions),
                        )
                    })
                })
                .collect(),
        )?;
    }
    if rows.iter().any(|r| !r.failed_by_cause.is_empty()) {
        family(
            e,
            "jobrelay_jobs_failed_by_cause",
            "Jobs seen failing live whose story names a first failure cause, by cause",
            MetricType::Counter,
            rows.iter()
                .flat_map(|r| {
                    r.failed_by_cause
                        .iter()
                        .map(move |(cause, n)| (with(r, "cause", cause), ConstCounter::new(*n)))
                })
                .collect(),
        )?;
    }
    Ok(())
}

/// How many jobs each timer fires on (every configured timer, 0 included).
pub(super) fn timers(
    e: &mut DescriptorEncoder,
    firing: &[(String, usize)],
) -> Result<(), std::fmt::Error> {
    family(
        e,
        "jobrelay_fleet_timers_firing",
        "Jobs the timer fires on: they stayed in its state longer than its `longer_than`, or \
         its window holds more than its `more_than`",
        MetricType::Gauge,
        firing
            .iter()
            .map(|(timer, n)| {
                (
                    vec![("timer", timer.clone())],
                    ConstGauge::new(i64::try_from(*n).unwrap_or(i64::MAX)),
                )
            })
            .collect(),
    )
}

/// Each fleet rule's verdict and last measure on each cluster it judged.
pub(super) fn rules(
    e: &mut DescriptorEncoder,
    readings: &[RuleReading],
) -> Result<(), std::fmt::Error> {
    // `group` only on the rules judged per cluster queue or cause, so a rule judged per
    // cluster keeps the series it always had.
    let labels = |r: &RuleReading| -> Labels {
        let mut labels = vec![("rule", r.rule.clone()), ("cluster", r.cluster.clone())];
        if !r.group.is_empty() {
            labels.push(("group", r.group.clone()));
        }
        labels
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
