//! `jobrelay plugin sample-event --kind KIND --phase PHASE`: a job event as the daemon would
//! hand it to a plugin, for trying a plugin with `plugin run` without a cluster; and
//! `jobrelay plugin sample-event --fleet KIND`: a fleet event as a plugin's `handle-fleet` gets
//! it, made by the daemon's own makers (`daemon::fleet_events`) from a cluster's change of
//! availability or a rule's change (its summary the rule's own, [`Rule::summary`]).
//!
//! The event is not written by hand: a job object of the kind is built with a status that the
//! kind's own normalizer reads as the wanted phase, and the real watch tracker turns it into
//! the event — the same id, transition key, labels and object JSON a daemon would produce.
//! Only `previous_phase`, which each plugin's lane fills in, is set from `--previous`.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use kube::runtime::watcher::Event;
use serde_json::{Value, json};

use crate::clusters::health::AvailabilityChange;
use crate::daemon::fleet_events::{availability_event, rule_event};
use jobrelay_contract::event::{JobEvent, Phase};
use jobrelay_contract::fleet::{FleetEvent, FleetEventKind};
use jobrelay_fleet::availability::Change;
use jobrelay_fleet::rules::{Measure, Rule, RuleChange};
use jobrelay_watch::kinds::{JobKind, NormalizerSpec};
use jobrelay_watch::normalize::normalize;
use jobrelay_watch::object::JobObject;
use jobrelay_watch::watcher::{Observation, Tracker};

/// Every phase a sample can be made for: all but `unknown`, and but `queued` and `preempted`,
/// which a job's Kueue Workload says, not its object.
fn phases() -> impl Iterator<Item = Phase> {
    Phase::ALL
        .into_iter()
        .filter(|p| !matches!(p, Phase::Unknown | Phase::Queued | Phase::Preempted))
}

const TIME: &str = "2026-01-15T08:30:00Z";

/// Arguments of `plugin sample-event`: a job event (`--kind`, `--phase`) or a fleet event
/// (`--fleet`).
#[derive(Debug, Clone, clap::Args)]
pub struct SampleEventArgs {
    /// batch-job, volcano-job, pytorch-job, mpi-job or mpi-job-v1.
    #[arg(long, required_unless_present = "fleet")]
    pub kind: Option<String>,
    /// pending, running, restarting, suspended, succeeded, failed, terminating or deleted.
    #[arg(long, required_unless_present = "fleet")]
    pub phase: Option<String>,
    /// The cluster the event names.
    #[arg(long, default_value = "example")]
    pub cluster: String,
    /// The phase the plugin saw before (a lane fills this in from its cursor).
    #[arg(long, conflicts_with = "fleet")]
    pub previous: Option<String>,
    /// A fleet event instead, as `handle-fleet` gets it: cluster-offline, cluster-online,
    /// rule-firing or rule-resolved (for a manifest with `fleet_events`).
    #[arg(long, value_name = "KIND", conflicts_with_all = ["kind", "phase"])]
    pub fleet: Option<String>,
    /// The rule a rule-firing or rule-resolved event names.
    #[arg(long, default_value = "batch-failures", requires = "fleet")]
    pub rule: String,
}

/// `jobrelay plugin sample-event` as the binary runs it: prints the event as pretty JSON.
pub fn command(args: &SampleEventArgs) -> anyhow::Result<ExitCode> {
    let text = match (&args.fleet, &args.kind, &args.phase) {
        (Some(fleet), _, _) => serde_json::to_string_pretty(&sample_fleet_event(
            parse_fleet_kind(fleet)?,
            &args.cluster,
            &args.rule,
        ))?,
        (None, Some(kind), Some(phase)) => {
            let phase = parse_phase(phase)?;
            let previous = args.previous.as_deref().map(parse_phase).transpose()?;
            serde_json::to_string_pretty(&sample_event(kind, phase, &args.cluster, previous)?)?
        }
        _ => bail!("give --kind and --phase for a job event, or --fleet for a fleet event"),
    };
    super::print_out(&format!("{text}\n"))?;
    Ok(ExitCode::SUCCESS)
}

/// A fleet event's kind by its name (`cluster-offline`, ...).
pub fn parse_fleet_kind(text: &str) -> anyhow::Result<FleetEventKind> {
    serde_json::from_value(Value::String(text.to_string())).map_err(|_| {
        anyhow::anyhow!(
            "`{text}` is no fleet event; one of cluster-offline, cluster-online, rule-firing, \
             rule-resolved"
        )
    })
}

/// A fleet event of `kind` about `cluster` (and rule `rule`, for a rule's event), made as the
/// daemon makes it: an outage of three failed checks since a minute before [`TIME`], or the
/// example rule of docs/fleet-events.md (`failure_ratio` above 0.15 for 2m over 10m, kinds:
/// batch-job) measured at 0.31 (firing) or 0.08 (resolved).
pub fn sample_fleet_event(kind: FleetEventKind, cluster: &str, rule: &str) -> FleetEvent {
    let now = chrono::DateTime::parse_from_rfc3339(TIME)
        .map(|t| t.timestamp_millis())
        .unwrap_or_default();
    let since = now - 60_000;
    let availability = |change| AvailabilityChange {
        cluster: cluster.to_string(),
        change,
        last_error: Some("connection refused (tcp connect to 10.0.0.1:6443)".into()),
        failed_checks: 3,
        source_says: None,
    };
    let example = Rule {
        name: rule.to_string(),
        measure: Measure::FailureRatio,
        above: 0.15,
        for_seconds: 120,
        window_seconds: 600,
        min_jobs: 5,
        clusters: Vec::new(),
        namespaces: Vec::new(),
        kinds: vec!["batch-job".into()],
        groups: Vec::new(),
    };
    let rule_change = |firing: bool, value: f64| RuleChange {
        rule: rule.to_string(),
        cluster: cluster.to_string(),
        group: None,
        firing,
        value,
        threshold: example.above,
        since: since / 1000,
        summary: example.summary(cluster, "", value, firing),
    };
    let mut event = match kind {
        FleetEventKind::ClusterOffline => {
            availability_event(availability(Change::Offline { since }), now)
        }
        FleetEventKind::ClusterOnline => {
            let mut change = availability(Change::Online { since });
            change.last_error = None;
            availability_event(change, now)
        }
        FleetEventKind::RuleFiring => rule_event(rule_change(true, 0.31), now),
        FleetEventKind::RuleResolved => rule_event(rule_change(false, 0.08), now),
    };
    // The id the plugin gets: its carrier's, at the version the daemon gives it then.
    event.id = event
        .clone()
        .into_job_event(u64::try_from(now).unwrap_or_default())
        .id;
    event
}

/// A phase by its name as events write it (`running`, `succeeded`, ...).
pub fn parse_phase(text: &str) -> anyhow::Result<Phase> {
    serde_json::from_value(Value::String(text.to_string())).map_err(|_| {
        anyhow::anyhow!(
            "`{text}` is not a phase; one of {}",
            phases().map(Phase::as_str).collect::<Vec<_>>().join(", ")
        )
    })
}

/// The event of a job of built-in kind `kind` in `phase`, on cluster `cluster`.
pub fn sample_event(
    kind: &str,
    phase: Phase,
    cluster: &str,
    previous: Option<Phase>,
) -> anyhow::Result<JobEvent> {
    let Some(job_kind) = JobKind::builtin(kind) else {
        bail!(
            "no built-in kind `{kind}`; the built-in kinds are {}",
            JobKind::BUILTINS.join(", ")
        );
    };
    // A job being deleted, or gone, was running first.
    let shown = match phase {
        Phase::Terminating | Phase::Deleted => Phase::Running,
        other => other,
    };
    let status = statuses(&job_kind.normalizer)
        .into_iter()
        .find(|status| {
            normalize(
                &job_kind.normalizer,
                &object(&job_kind, status.clone(), false),
            )
            .phase
                == shown
        })
        .with_context(|| {
            format!(
                "a {kind} never shows the phase {} (its status has no form the normalizer reads \
                 as that phase)",
                phase.as_str()
            )
        })?;
    let object = object(&job_kind, status, phase == Phase::Terminating);
    let object = JobObject::from_json(&object.to_string())
        .context("the sample object is not a Kubernetes object")?;
    let mut tracker = Tracker::new(Arc::from(cluster), Arc::new(job_kind), None);
    let observed = tracker.observe(match phase {
        Phase::Deleted => Event::Delete(object),
        _ => Event::Apply(object),
    });
    let mut event = observed
        .into_iter()
        .find_map(|o| match o {
            Observation::Version(observed) => Some(observed.event),
            Observation::Listed(_) | Observation::Story(_) => None,
        })
        .context("the watch tracker made no event of the sample")?;
    event.previous_phase = previous;
    Ok(event)
}

/// A job of `kind` with `status`, as an API server would return it.
fn object(kind: &JobKind, status: Value, deleting: bool) -> Value {
    let mut metadata = json!({
        "name": format!("sample-{}", kind.name),
        "namespace": "ml",
        "uid": "5f0c7a9e-3b1d-4c2a-9e8f-1a2b3c4d5e6f",
        "resourceVersion": "48213",
        "generation": 1,
        "creationTimestamp": "2026-01-15T08:00:00Z",
        "labels": {"team": "vision", "queue": "a100"},
        "annotations": {"platform.example.com/owner": "alice@example.com"},
    });
    if deleting {
        metadata["deletionTimestamp"] = json!(TIME);
        metadata["finalizers"] = json!(["jobrelay.io/delivery"]);
    }
    json!({
        "apiVersion": kind.api_version(),
        "kind": kind.kind,
        "metadata": metadata,
        "spec": {},
        "status": status,
    })
}

/// Statuses a controller of this normalizer's kind writes, one per phase it can show; the
/// normalizer itself picks which stands for which phase.
fn statuses(normalizer: &NormalizerSpec) -> Vec<Value> {
    let condition = |type_: &str| {
        json!({"type": type_, "status": "True", "reason": format!("Job{type_}"),
               "message": format!("the job is {}", type_.to_lowercase()),
               "lastTransitionTime": TIME})
    };
    match normalizer {
        NormalizerSpec::Volcano => [
            "Pending",
            "Running",
            "Restarting",
            "Aborted",
            "Completed",
            "Failed",
        ]
        .into_iter()
        .map(|phase| {
            json!({"state": {"phase": phase, "reason": "", "lastTransitionTime": TIME},
                   "minAvailable": 2, "running": 2, "version": 1})
        })
        .collect(),
        NormalizerSpec::Batch => vec![
            json!({}),
            json!({"active": 2, "startTime": TIME}),
            json!({"conditions": [condition("Suspended")]}),
            json!({"conditions": [condition("Complete")], "succeeded": 2, "completionTime": TIME}),
            json!({"conditions": [condition("Failed")], "failed": 1}),
        ],
        NormalizerSpec::Kubeflow => [
            "Created",
            "Running",
            "Restarting",
            "Suspended",
            "Succeeded",
            "Failed",
        ]
        .into_iter()
        .map(|type_| json!({"conditions": [condition(type_)]}))
        .collect(),
        // The built-in kinds written as rules (TrainJob, JobSet, RayJob): a status of each
        // phase for each of them; the rules pick theirs.
        NormalizerSpec::Rules(_) => {
            let children = |key: &str, active: i64, failed: i64| {
                json!({key: [{"name": "node", "ready": active, "active": active,
                              "failed": failed, "succeeded": 0, "suspended": 0}]})
            };
            let with = |mut status: Value, conditions: Value| {
                status["conditions"] = conditions;
                status
            };
            let ray = |deployment: &str, job: &str| {
                json!({"jobDeploymentStatus": deployment, "jobStatus": job, "startTime": TIME,
                       "endTime": TIME})
            };
            let mut statuses = Vec::new();
            for key in ["jobsStatus", "replicatedJobsStatus"] {
                statuses.extend([
                    children(key, 0, 0),
                    children(key, 2, 0),
                    children(key, 0, 1),
                    with(children(key, 0, 0), json!([condition("Suspended")])),
                    with(children(key, 0, 0), json!([condition("RestartingJobSet")])),
                    with(children(key, 0, 0), json!([condition("Complete")])),
                    with(children(key, 0, 0), json!([condition("Completed")])),
                    with(children(key, 0, 1), json!([condition("Failed")])),
                ]);
            }
            statuses.extend([
                ray("Initializing", ""),
                ray("Running", "RUNNING"),
                ray("Retrying", "FAILED"),
                ray("Suspended", ""),
                ray("Complete", "SUCCEEDED"),
                ray("Failed", "FAILED"),
            ]);
            statuses
        }
        // Kinds described as data have no built-in samples.
        NormalizerSpec::Field(_) | NormalizerSpec::Conditions(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every built-in kind has a sample of every phase it can show, made by the real
    /// normalizer and tracker, and it reads back as a job event. A batch/v1 Job never shows
    /// `restarting` (its pods are retried inside the job): asked for, that is refused.
    #[test]
    fn every_builtin_kind_has_every_phase_it_can_show() {
        let err = sample_event("batch-job", Phase::Restarting, "lab", None).expect_err("none");
        assert!(
            err.to_string().contains("never shows the phase restarting"),
            "{err}"
        );
        for kind in JobKind::BUILTINS {
            for phase in phases() {
                if kind == "batch-job" && phase == Phase::Restarting {
                    continue;
                }
                let event = sample_event(kind, phase, "lab", Some(Phase::Pending))
                    .unwrap_or_else(|e| panic!("{kind} {}: {e:#}", phase.as_str()));
                assert_eq!(event.phase, phase, "{kind}");
                assert_eq!(event.cluster, "lab");
                assert_eq!(event.previous_phase, Some(Phase::Pending));
                let object: Value = serde_json::from_str(&event.object_json).expect("json");
                assert_eq!(object["metadata"]["name"], format!("sample-{kind}"));
                let text = serde_json::to_string(&event).expect("json");
                let back: JobEvent = serde_json::from_str(&text).expect("reads back");
                assert_eq!(back.id, event.id);
            }
        }
        let err = sample_event("spark-job", Phase::Running, "c", None).expect_err("unknown");
        assert!(err.to_string().contains("volcano-job"), "{err}");
        assert_eq!(parse_phase("failed").expect("a phase"), Phase::Failed);
        let err = parse_phase("Failed").expect_err("names are lower case");
        assert!(err.to_string().contains("succeeded"), "{err}");
    }

    /// Each fleet kind has a sample, of its own kind and shape: a rule's names the rule and
    /// carries its value and threshold, a cluster's does not; an unknown kind is refused,
    /// naming the four.
    #[test]
    fn every_fleet_kind_has_a_sample() {
        for name in [
            "cluster-offline",
            "cluster-online",
            "rule-firing",
            "rule-resolved",
        ] {
            let kind = parse_fleet_kind(name).expect("a fleet kind");
            let event = sample_fleet_event(kind, "east", "batch-failures");
            assert_eq!(event.kind, kind);
            assert_eq!(event.cluster, "east");
            let rule = name.starts_with("rule-");
            assert_eq!(event.rule.is_some(), rule, "{name}");
            assert_eq!(event.threshold, rule.then_some(0.15), "{name}");
            assert_eq!(event.time, "2026-01-15T08:30:00.000Z");
            assert!(event.id.starts_with("east/"), "{}", event.id);
            assert!(event.summary.contains("east"), "{}", event.summary);
        }
        let firing = sample_fleet_event(FleetEventKind::RuleFiring, "east", "r");
        assert!(
            firing
                .summary
                .starts_with("rule r: job failure ratio 0.31 > 0.15 for 120s"),
            "{}",
            firing.summary
        );
        let err = parse_fleet_kind("offline")
            .expect_err("not a kind")
            .to_string();
        assert!(err.contains("rule-resolved"), "{err}");
    }
}
