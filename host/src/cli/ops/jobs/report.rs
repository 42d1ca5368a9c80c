//! `jobs show` as a report: what happened to one job and what each plugin did of it, in the
//! order an operator asks — the job itself, its labels, the phases it went through, then per
//! plugin its state and its calls (so a dead letter is seen next to the version and attempt
//! that failed), then the earlier jobs of the same name that were deleted (a job re-created
//! under the same name is a common "where did my run go").

use chrono::{DateTime, Utc};

use super::answer::{JobDetail, JobShown, PluginTrace, TimelineEntry};
use super::table::{NONE, aligned, human, since, state, time};

/// The whole report, relative to `now` for the job's age.
pub fn report(shown: &JobShown, now: DateTime<Utc>) -> String {
    let mut out = String::new();
    job(&mut out, &shown.job, now);
    out.push_str("Plugins:");
    if shown.plugins.is_empty() {
        out.push_str(" none (no plugin's kinds and filter take this job)\n");
    } else {
        out.push('\n');
        for (name, trace) in &shown.plugins {
            plugin(&mut out, name, trace);
        }
    }
    if !shown.earlier.is_empty() {
        out.push_str("Earlier jobs of this name (deleted):\n");
        for earlier in &shown.earlier {
            let s = &earlier.summary;
            let phases: Vec<&str> = earlier.transitions.iter().map(|t| &*t.phase).collect();
            out.push_str(&format!(
                "  uid {}: {}, created {}, deleted {}; phases {}\n",
                s.uid,
                s.phase,
                time(s.created.as_deref()),
                time(s.deleted.as_deref()),
                if phases.is_empty() {
                    NONE.to_string()
                } else {
                    phases.join(" → ")
                }
            ));
        }
    }
    out
}

fn job(out: &mut String, detail: &JobDetail, now: DateTime<Utc>) {
    let s = &detail.summary;
    let age = s
        .created
        .as_deref()
        .and_then(|t| since(t, now))
        .map(|secs| format!(" ({} ago)", human(secs)))
        .unwrap_or_default();
    let mut fields = vec![
        ("Job:", format!("{}/{}/{}", s.cluster, s.namespace, s.name)),
        ("Kind:", s.kind.clone()),
        ("UID:", s.uid.clone()),
        (
            "Phase:",
            if s.raw_phase.is_empty() {
                s.phase.clone()
            } else {
                format!("{} (raw: {})", s.phase, s.raw_phase)
            },
        ),
        ("Created:", format!("{}{age}", time(s.created.as_deref()))),
        ("Started:", time(s.started.as_deref())),
        ("Finished:", time(s.finished.as_deref())),
    ];
    if s.deleted.is_some() {
        fields.push(("Deleted:", time(s.deleted.as_deref())));
    }
    fields.push((
        "Duration:",
        s.duration_seconds.map_or_else(
            || NONE.to_string(),
            |d| human(i64::try_from(d).unwrap_or(i64::MAX)),
        ),
    ));
    fields.push(("Restarts:", s.restarts.to_string()));
    if let Some(queue) = &s.queue {
        fields.push((
            "Queued:",
            format!("in {queue} since {}", time(s.queued_since.as_deref())),
        ));
    }
    if s.preemptions > 0 {
        fields.push(("Preemptions:", s.preemptions.to_string()));
    }
    if let Some(cause) = &s.cause {
        fields.push(("Failure cause:", cause.clone()));
    }
    let rows: Vec<Vec<String>> = fields
        .into_iter()
        .map(|(k, v)| vec![k.to_string(), v])
        .collect();
    out.push_str(&aligned(&rows, ""));
    out.push_str("Labels:");
    if detail.labels.is_empty() {
        out.push_str(" none\n");
    } else {
        out.push('\n');
        for (key, value) in &detail.labels {
            out.push_str(&format!("  {key}={value}\n"));
        }
    }
    out.push_str("Transitions:");
    if detail.transitions.is_empty() {
        out.push_str(" none seen\n");
    } else {
        out.push('\n');
        let mut rows = vec![vec!["TIME".to_string(), "PHASE".into(), "SEEN".into()]];
        for t in &detail.transitions {
            rows.push(vec![
                time(t.at.as_deref()),
                t.phase.clone(),
                if t.synthetic {
                    "synthetic (rebuilt from status times)".into()
                } else {
                    "observed".into()
                },
            ]);
        }
        out.push_str(&aligned(&rows, "  "));
    }
    let kueue: Vec<&TimelineEntry> = detail
        .timeline
        .iter()
        .filter(|e| e.event == "kueue")
        .collect();
    if !kueue.is_empty() {
        out.push_str("Kueue:\n");
        let mut rows = vec![vec!["TIME".to_string(), "WORKLOAD".into(), "QUEUE".into()]];
        for e in kueue {
            rows.push(vec![
                time(e.at.as_deref()),
                e.mark.clone().unwrap_or_default(),
                e.queue.clone().unwrap_or_else(|| NONE.to_string()),
            ]);
        }
        out.push_str(&aligned(&rows, "  "));
    }
}

fn plugin(out: &mut String, name: &str, trace: &PluginTrace) {
    let d = &trace.delivery;
    out.push_str(&format!(
        "  {name}: {} (delivered phase {}, accepted version {}, {} pending{}, {} dead letters)\n",
        state(d),
        d.delivered_phase.as_deref().unwrap_or(NONE),
        d.accepted_version.as_deref().unwrap_or(NONE),
        d.pending,
        if d.in_flight { ", one in flight" } else { "" },
        d.dead_letters,
    ));
    if let Some(error) = &d.last_error {
        out.push_str(&format!("    last error: {error}\n"));
    }
    if trace.trace.is_empty() {
        out.push_str("    no calls in its trace\n");
        return;
    }
    let mut rows = vec![
        ["TIME", "VERSION", "PHASE", "OUTCOME", "ATTEMPT", "ERROR"]
            .map(str::to_string)
            .to_vec(),
    ];
    for entry in &trace.trace {
        rows.push(vec![
            entry.at.clone(),
            entry.resource_version.clone(),
            entry.phase.clone(),
            entry.outcome.clone(),
            entry.attempt.to_string(),
            entry.error.clone().unwrap_or_else(|| NONE.to_string()),
        ]);
    }
    out.push_str(&aligned(&rows, "    "));
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::cli::ops::jobs::answer::{JobSummary, PluginDelivery, TraceEntry, Transition};

    #[test]
    fn the_report_has_the_job_its_transitions_plugins_and_earlier_jobs() {
        let now = DateTime::parse_from_rfc3339("2026-11-28T02:00:00Z")
            .expect("a time")
            .with_timezone(&Utc);
        let summary = JobSummary {
            cluster: "east".into(),
            namespace: "ml".into(),
            name: "train".into(),
            kind: "batch-job".into(),
            uid: "u-2".into(),
            phase: "failed".into(),
            raw_phase: "Failed".into(),
            created: Some("2026-11-28T01:50:00Z".into()),
            ..JobSummary::default()
        };
        let shown = JobShown {
            job: JobDetail {
                summary: summary.clone(),
                labels: BTreeMap::from([("team".to_string(), "nlp".to_string())]),
                timeline: Vec::new(),
                transitions: vec![
                    Transition {
                        at: Some("2026-11-28T01:50:00Z".into()),
                        phase: "pending".into(),
                        synthetic: false,
                    },
                    Transition {
                        at: None,
                        phase: "failed".into(),
                        synthetic: true,
                    },
                ],
            },
            plugins: BTreeMap::from([(
                "probe".to_string(),
                PluginTrace {
                    delivery: PluginDelivery {
                        dead_letters: 1,
                        last_error: Some("gave up".into()),
                        ..PluginDelivery::default()
                    },
                    trace: vec![TraceEntry {
                        at: "2026-11-28T01:50:01.000Z".into(),
                        resource_version: "17".into(),
                        phase: "pending".into(),
                        outcome: "dead_lettered".into(),
                        attempt: 1,
                        error: Some("gave up".into()),
                    }],
                },
            )]),
            earlier: vec![JobDetail {
                summary: JobSummary {
                    uid: "u-1".into(),
                    phase: "deleted".into(),
                    deleted: Some("2026-11-28T01:49:00Z".into()),
                    ..summary
                },
                ..JobDetail::default()
            }],
            warnings: Vec::new(),
        };
        let text = report(&shown, now);
        for line in [
            "Job:        east/ml/train",
            "Phase:      failed (raw: Failed)",
            "Created:    2026-11-28T01:50:00Z (10m ago)",
            "  team=nlp",
            "  TIME                   PHASE     SEEN",
            "  2026-11-28T01:50:00Z   pending   observed",
            "  -                      failed    synthetic (rebuilt from status times)",
            "  probe: 1 dead (delivered phase -, accepted version -, 0 pending, 1 dead letters)",
            "    last error: gave up",
            "    2026-11-28T01:50:01.000Z   17        pending   dead_lettered   1         gave up",
            "  uid u-1: deleted, created 2026-11-28T01:50:00Z, deleted 2026-11-28T01:49:00Z; phases -",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} in:\n{text}");
        }
    }
}
