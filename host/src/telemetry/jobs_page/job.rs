//! One job's page (`GET /jobs/{cluster}/{namespace}/{name}`): its fields, labels,
//! transitions, its story as a timeline, each plugin's trace, and the earlier jobs of its name.

use std::fmt::Write as _;

use super::{delivery_badge, human_duration, short_time, warnings_section};
use crate::telemetry::jobs_api::JobShown;
use crate::telemetry::page::{badge, escape, phase_badge};
use jobrelay_fleet::jobs::{JobDetail, JobSummary};
use jobrelay_lanes::trace::{TraceEntry, TraceOutcome};

pub(super) fn render_job(html: &mut String, shown: &JobShown) {
    warnings_section(html, &shown.warnings);
    let job = &shown.job;
    let s = &job.summary;
    let _ = write!(
        html,
        "<section id=\"job\"><h2>Job <span class=\"name\">{}</span> {}</h2><dl class=\"fields\">",
        escape(&s.name),
        phase_badge(s.phase.as_str())
    );
    summary_fields(html, s);
    html.push_str("</dl></section>");

    html.push_str(
        "<section id=\"labels\"><h2>Labels</h2><table><tr><th>label</th><th>value</th></tr>",
    );
    for (key, value) in &job.labels {
        let _ = write!(
            html,
            "<tr><td><code>{}</code></td><td><code>{}</code></td></tr>",
            escape(key),
            escape(value)
        );
    }
    if job.labels.is_empty() {
        html.push_str("<tr><td colspan=\"2\" class=\"muted\">none</td></tr>");
    }
    html.push_str("</table></section>");

    html.push_str("<section id=\"transitions\"><h2>Transitions <span class=\"muted\">· the phases it was observed to enter, oldest first</span></h2><table><tr><th>at (UTC)</th><th>phase</th><th></th></tr>");
    for t in &job.transitions {
        let _ = write!(
            html,
            "<tr><td class=\"muted\">{}</td><td>{}</td><td class=\"muted\">{}</td></tr>",
            escape(&t.at.as_deref().map(short_time).unwrap_or_default()),
            phase_badge(t.phase.as_str()),
            if t.synthetic {
                "reconstructed from the job's status"
            } else {
                ""
            },
        );
    }
    html.push_str("</table></section>");
    story_section(html, job);

    html.push_str("<section id=\"plugins\"><h2>Plugins <span class=\"muted\">· the job's outcomes among each plugin's latest calls</span></h2>");
    for (plugin, trace) in &shown.plugins {
        let d = &trace.delivery;
        let lane = d.lane.as_ref();
        let _ = write!(
            html,
            "<h3 id=\"plugin-{}\">{} {}</h3><dl class=\"fields\">\
             <dt>delivered phase</dt><dd>{}</dd><dt>accepted version</dt><dd>{}</dd>\
             <dt>pending</dt><dd>{}{}</dd><dt>dead letters</dt><dd>{}</dd>",
            escape(plugin),
            escape(plugin),
            delivery_badge(None, d),
            lane.and_then(|l| l.delivered_phase)
                .map(|p| phase_badge(p.as_str()))
                .unwrap_or_else(|| "<span class=\"muted\">none</span>".into()),
            escape(
                lane.and_then(|l| l.accepted_version.as_deref())
                    .unwrap_or("—")
            ),
            lane.map_or(0, |l| l.pending),
            if lane.is_some_and(|l| l.in_flight) {
                " <span class=\"muted\">(one being called now)</span>"
            } else {
                ""
            },
            if d.dead_letters > 0 {
                format!(
                    "{} <span class=\"muted\"><code>jobrelay dead-letters list --plugin {}</code> shows them; <code>replay</code> sends them again</span>",
                    badge("dead", &d.dead_letters.to_string()),
                    escape(plugin)
                )
            } else {
                "0".to_string()
            },
        );
        if lane.is_none() {
            html.push_str("<dt>lane</dt><dd class=\"muted\">does not know the job (its kinds or filter do not take it, or the plugin is not loaded)</dd>");
        }
        if let Some(error) = &d.last_error {
            let _ = write!(
                html,
                "<dt>last error</dt><dd class=\"err\">{}</dd>",
                escape(error)
            );
        }
        html.push_str("</dl>");
        trace_table(html, &trace.trace);
    }
    if shown.plugins.is_empty() {
        html.push_str("<p class=\"muted\">No plugin keeps state of this job: none takes it, or every plugin is done with it (a deleted job), and none has a dead letter of it.</p>");
    }
    html.push_str("</section>");

    if !shown.earlier.is_empty() {
        html.push_str("<section id=\"earlier\"><h2>Earlier jobs of this name <span class=\"muted\">· deleted, newest first</span></h2><table><tr><th>uid</th><th>phase</th><th>created (UTC)</th><th>finished (UTC)</th><th>deleted (UTC)</th><th class=\"num\">duration</th><th>transitions</th></tr>");
        for earlier in &shown.earlier {
            earlier_row(html, earlier);
        }
        html.push_str("</table></section>");
    }
}

fn summary_fields(html: &mut String, s: &JobSummary) {
    let time = |t: &Option<String>| escape(&t.as_deref().map(short_time).unwrap_or("—".into()));
    let _ = write!(
        html,
        "<dt>cluster</dt><dd>{}</dd><dt>namespace</dt><dd>{}</dd><dt>name</dt><dd>{}</dd>\
         <dt>kind</dt><dd>{}</dd><dt>uid</dt><dd><code>{}</code></dd>\
         <dt>phase</dt><dd>{} <span class=\"muted\">{}</span></dd>\
         <dt>created</dt><dd>{}</dd><dt>started</dt><dd>{}</dd><dt>finished</dt><dd>{}</dd>{}\
         <dt>duration</dt><dd>{}</dd><dt>restarts</dt><dd>{}</dd>",
        escape(&s.cluster),
        escape(&s.namespace),
        escape(&s.name),
        escape(&s.kind),
        escape(&s.uid),
        phase_badge(s.phase.as_str()),
        escape(&s.raw_phase),
        time(&s.created),
        time(&s.started),
        time(&s.finished),
        s.deleted
            .as_ref()
            .map(|_| format!("<dt>deleted</dt><dd>{}</dd>", time(&s.deleted)))
            .unwrap_or_default(),
        s.duration_seconds
            .map(human_duration)
            .unwrap_or_else(|| "—".into()),
        s.restarts,
    );
    if let Some(queue) = &s.queue {
        let _ = write!(
            html,
            "<dt>queued</dt><dd>in {} since {}</dd>",
            escape(queue),
            time(&s.queued_since)
        );
    }
    if s.preemptions > 0 {
        let _ = write!(html, "<dt>preemptions</dt><dd>{}</dd>", s.preemptions);
    }
    if let Some(cause) = &s.cause {
        let _ = write!(html, "<dt>failure cause</dt><dd>{}</dd>", escape(cause));
    }
}

/// The job's story as a timeline: its phases and what Kueue did with its Workload, for a job
/// whose story has Kueue marks (nothing otherwise: the transitions say it all).
fn story_section(html: &mut String, job: &JobDetail) {
    use jobrelay_fleet::jobs::timeline::TimelineWhat;
    if !job
        .timeline
        .iter()
        .any(|e| matches!(e.what, TimelineWhat::Kueue { .. }))
    {
        return;
    }
    html.push_str("<section id=\"story\"><h2>Story <span class=\"muted\">· its phases and what Kueue did with its Workload, oldest first</span></h2><table><tr><th>at (UTC)</th><th>what</th><th>queue</th></tr>");
    for entry in &job.timeline {
        let at = escape(&entry.at.as_deref().map(short_time).unwrap_or_default());
        let (what, queue) = match &entry.what {
            TimelineWhat::Phase { phase, .. } => (phase_badge(phase.as_str()), String::new()),
            TimelineWhat::Kueue { mark, queue } => {
                let word = match mark {
                    jobrelay_fleet::jobs::timeline::QueueMark::Queued => "queued",
                    jobrelay_fleet::jobs::timeline::QueueMark::Admitted => "admitted",
                    jobrelay_fleet::jobs::timeline::QueueMark::Preempted => "preempted",
                    jobrelay_fleet::jobs::timeline::QueueMark::Evicted => "evicted",
                };
                (
                    format!("Kueue: {word}"),
                    escape(queue.as_deref().unwrap_or("")),
                )
            }
        };
        let _ = write!(
            html,
            "<tr><td class=\"muted\">{at}</td><td>{what}</td><td>{queue}</td></tr>"
        );
    }
    html.push_str("</table></section>");
}

fn trace_table(html: &mut String, trace: &[TraceEntry]) {
    if trace.is_empty() {
        html.push_str(
            "<p class=\"muted\">No outcome of this job among the plugin's latest calls.</p>",
        );
        return;
    }
    html.push_str("<table class=\"trace\"><tr><th>at (UTC)</th><th>version</th><th>phase</th><th>outcome</th><th class=\"num\">attempt</th><th>error</th></tr>");
    for entry in trace {
        let outcome = match entry.outcome {
            TraceOutcome::Delivered => badge("ok", "delivered"),
            TraceOutcome::Retrying => badge("warn", "retrying"),
            TraceOutcome::DeadLettered => badge("dead", "dead-lettered"),
        };
        let _ = write!(
            html,
            "<tr><td class=\"muted\">{}</td><td><code>{}</code></td><td>{}</td><td>{outcome}</td>\
             <td class=\"num\">{}</td><td class=\"err\">{}</td></tr>",
            escape(&short_time(&entry.at)),
            escape(&entry.resource_version),
            phase_badge(entry.phase.as_str()),
            if entry.attempt == 0 {
                "unsent".to_string()
            } else {
                entry.attempt.to_string()
            },
            escape(entry.error.as_deref().unwrap_or("")),
        );
    }
    html.push_str("</table>");
}

fn earlier_row(html: &mut String, job: &JobDetail) {
    let s = &job.summary;
    let phases: Vec<&str> = job.transitions.iter().map(|t| t.phase.as_str()).collect();
    let time = |t: &Option<String>| escape(&t.as_deref().map(short_time).unwrap_or_default());
    let _ = write!(
        html,
        "<tr><td><code>{}</code></td><td>{}</td><td class=\"muted\">{}</td><td class=\"muted\">{}</td>\
         <td class=\"muted\">{}</td><td class=\"num\">{}</td><td class=\"muted\">{}</td></tr>",
        escape(&s.uid),
        phase_badge(s.phase.as_str()),
        time(&s.created),
        time(&s.finished),
        time(&s.deleted),
        s.duration_seconds.map(human_duration).unwrap_or_default(),
        escape(&phases.join(" → ")),
    );
}
