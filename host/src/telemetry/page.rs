//! The HTML status page at `/`: the daemon at a glance, for an operator with a browser.
//!
//! Rendered on the server from the same [`Status`] as `/status`, as one self-contained page
//! (inline styles, no scripts) that refreshes itself every few seconds. Every value from the
//! outside (cluster names, errors, job names) is escaped. Its style, badges and header
//! navigation are shared with the Jobs view ([`super::jobs_page`]).

use std::fmt::Write as _;

use super::status::Status;
use crate::clusters::cleanup::Outcome;
use crate::clusters::health::HealthState;
use jobrelay_coordination::Role;
use jobrelay_fleet::availability::Availability;

/// Seconds between automatic refreshes.
const REFRESH_SECONDS: u32 = 5;

/// The style of every page (inline in each: the pages are self-contained).
pub(super) const STYLE: &str = "
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;background:#f4f6f8;color:#1f2328}
header{background:#1f2937;color:#fff;padding:14px 24px;display:flex;align-items:center;gap:16px}
header h1{font-size:20px;margin:0;font-weight:600}
header nav{display:flex;gap:4px}
header nav a{color:#d1d5db;text-decoration:none;padding:4px 10px;border-radius:6px;font-size:14px}
header nav a.here{background:#374151;color:#fff}
main{padding:20px 24px;display:grid;gap:20px}
section{background:#fff;border-radius:8px;box-shadow:0 1px 3px rgba(0,0,0,.12);padding:14px 18px}
h2{font-size:15px;margin:0 0 10px;color:#374151;text-transform:uppercase;letter-spacing:.04em}
table{border-collapse:collapse;width:100%;font-size:14px}
th{text-align:left;color:#6b7280;font-weight:600;border-bottom:1px solid #e5e7eb;padding:6px 8px}
td{border-bottom:1px solid #f0f2f4;padding:6px 8px;vertical-align:top}
.badge{display:inline-block;border-radius:10px;padding:2px 10px;font-size:12px;font-weight:600;color:#fff}
.ok{background:#1a7f37}.warn{background:#bf8700}.bad{background:#cf222e}.idle{background:#6e7781}
.num{text-align:right;font-variant-numeric:tabular-nums}
.muted{color:#6b7280}.err{color:#cf222e;font-size:13px}
code{font-size:12px}
";

/// `text` with HTML's special characters escaped.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            other => out.push(other),
        }
    }
    out
}

pub(super) fn badge(class: &str, text: &str) -> String {
    format!("<span class=\"badge {class}\">{}</span>", escape(text))
}

fn health_badge(state: HealthState) -> String {
    let (class, text) = match state {
        HealthState::Synced => ("ok", "synced"),
        HealthState::Connecting => ("idle", "connecting"),
        HealthState::Degraded => ("warn", "degraded"),
        HealthState::Error => ("bad", "error"),
    };
    badge(class, text)
}

fn availability_badge(availability: Availability) -> String {
    let class = match availability {
        Availability::Online => "ok",
        Availability::Connecting => "idle",
        Availability::Degraded => "warn",
        Availability::Offline => "bad",
    };
    badge(class, availability.as_str())
}

pub(super) fn phase_badge(phase: &str) -> String {
    let class = match phase {
        "succeeded" | "running" => "ok",
        "failed" => "bad",
        "restarting" | "terminating" => "warn",
        _ => "idle",
    };
    badge(class, phase)
}

/// The header's links between the pages; `here` is the current page's path (`/` or `/jobs`).
pub(super) fn nav(here: &str) -> String {
    let mut html = String::from("<nav>");
    for (path, title) in [("/", "Status"), ("/jobs", "Jobs")] {
        let _ = write!(
            html,
            "<a href=\"{path}\"{}>{title}</a>",
            if path == here { " class=\"here\"" } else { "" }
        );
    }
    html.push_str("</nav>");
    html
}

/// Nothing for a single replica; otherwise whether this one delivers, and who does.
fn role_badge(role: &Role) -> String {
    match role {
        Role::Single => String::new(),
        Role::Leader => badge("ok", "leader"),
        Role::Follower { holder } => format!(
            "{}<span class=\"muted\">leader: {}</span> ",
            badge("warn", "follower"),
            escape(holder.as_deref().unwrap_or("none yet"))
        ),
        Role::Sharded { owned, members, .. } => format!(
            "{}<span class=\"muted\">delivers {} of the clusters · {} replicas</span> ",
            badge("ok", "shard"),
            if owned.is_empty() {
                "none".to_string()
            } else {
                escape(&owned.join(", "))
            },
            members.len()
        ),
        Role::Lost => badge("bad", "lost the Lease"),
    }
}

/// What needs attention, first on the page: a ready badge alone said nothing of 318 dead
/// letters and a cluster down.
fn attention(html: &mut String, status: &Status) {
    if status.attention.is_empty() {
        let _ = write!(
            html,
            "<section id=\"attention\"><h2>Needs attention</h2>{} <span class=\"muted\">nothing: every cluster synced, every plugin serving, no dead letters</span></section>",
            badge("ok", "all clear")
        );
        return;
    }
    let _ = write!(
        html,
        "<section id=\"attention\"><h2>Needs attention</h2>{}<ul>",
        badge("bad", &format!("{} problem(s)", status.attention.len()))
    );
    for line in &status.attention {
        let _ = write!(html, "<li class=\"err\">{}</li>", escape(line));
    }
    html.push_str("</ul></section>");
}

/// The whole page.
pub fn render(status: &Status) -> String {
    let mut html = String::with_capacity(8 * 1024);
    let _ = write!(
        html,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\">\
         <title>jobrelay status</title><style>{STYLE}</style></head><body>\
         <header><h1>jobrelay</h1>{}{}{}<span class=\"muted\">{} clusters · {} plugins · refreshes every {REFRESH_SECONDS} s</span></header><main>",
        nav("/"),
        if status.ready {
            badge("ok", "ready")
        } else {
            badge("bad", "not ready")
        },
        role_badge(&status.coordination),
        status.clusters.len(),
        status.plugins.len(),
    );

    attention(&mut html, status);
    html.push_str("<section><h2>Clusters</h2><table><tr><th>cluster</th><th>availability</th><th>health</th><th class=\"num\">streams</th><th>since</th><th>last sync</th><th>credentials expire</th><th>last error</th></tr>");
    for (name, cluster) in &status.clusters {
        let expires = cluster
            .credentials_expire
            .iter()
            .map(|c| format!("{}: {}", c.credential, c.expires_at))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = write!(
            html,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{} / {}</td><td class=\"muted\">{}</td><td class=\"muted\">{}</td><td class=\"muted\">{}</td><td class=\"err\">{}</td></tr>",
            escape(name),
            availability_badge(cluster.availability),
            health_badge(cluster.state),
            cluster.streams_synced,
            cluster.streams,
            escape(&cluster.since),
            escape(cluster.last_sync.as_deref().unwrap_or("never")),
            escape(if expires.is_empty() { "-" } else { &expires }),
            escape(cluster.last_error.as_deref().unwrap_or("")),
        );
    }
    if status.clusters.is_empty() {
        html.push_str("<tr><td colspan=\"8\" class=\"muted\">no cluster configured</td></tr>");
    }
    html.push_str("</table></section>");

    html.push_str("<section><h2>Plugins and lanes</h2><table><tr><th>plugin</th><th>version</th><th>last reload</th><th class=\"num\">delivered</th><th class=\"num\">retried</th><th class=\"num\">dead letters stored</th><th class=\"num\">pending</th><th class=\"num\">oldest pending</th></tr>");
    for (name, plugin) in &status.plugins {
        let version = match (&plugin.serving, &plugin.serving_wasm_sha256) {
            (Some(v), Some(sha)) => format!(
                "<code>{}</code> <span class=\"muted\">wasm {}</span>",
                escape(v),
                escape(sha.get(..12).unwrap_or(sha))
            ),
            (Some(v), None) => format!("<code>{}</code>", escape(v)),
            _ => badge("bad", "not serving"),
        };
        let reload = match &plugin.last_reload {
            Some(r) if r.ok => format!(
                "{} <span class=\"muted\">{}</span>",
                badge("ok", "loaded"),
                escape(&r.at)
            ),
            Some(r) => format!(
                "{} <div class=\"err\">{}</div>",
                badge("bad", "failed"),
                escape(r.error.as_deref().unwrap_or(""))
            ),
            None => String::new(),
        };
        let lane = plugin.lane.clone().unwrap_or_default();
        // The stored backlog (what `jobrelay dead-letters list` shows, whoever stored it),
        // with the letters this process added since it started.
        let stored = status
            .state_store
            .dead_letters
            .get(name)
            .copied()
            .unwrap_or(0);
        let dead = format!(
            "{} <span class=\"muted\">+{} since start</span>",
            if stored > 0 {
                badge("bad", &stored.to_string())
            } else {
                "0".to_string()
            },
            lane.dead_lettered
        );
        let _ = write!(
            html,
            "<tr><td>{}</td><td>{version}</td><td>{reload}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{dead}</td><td class=\"num\">{}</td><td class=\"num\">{:.1} s</td></tr>",
            escape(name),
            lane.delivered,
            lane.retried,
            lane.pending,
            lane.oldest_pending_seconds,
        );
    }
    html.push_str("</table></section>");

    html.push_str("<section><h2>Recent events</h2><table><tr><th>observed</th><th>cluster</th><th>job</th><th>kind</th><th>phase</th></tr>");
    for event in &status.recent_events {
        let _ = write!(
            html,
            "<tr><td class=\"muted\">{}</td><td>{}</td><td>{}/{}</td><td>{}</td><td>{}{}</td></tr>",
            escape(&event.at),
            escape(&event.cluster),
            escape(&event.namespace),
            escape(&event.name),
            escape(&event.kind),
            phase_badge(&event.phase),
            if event.synthetic {
                " <span class=\"muted\">(reconstructed)</span>"
            } else {
                ""
            },
        );
    }
    if status.recent_events.is_empty() {
        html.push_str("<tr><td colspan=\"5\" class=\"muted\">no event yet</td></tr>");
    }
    html.push_str("</table></section>");

    if status.cleanup.on {
        cleanup(&mut html, status);
    }

    if !status.problems.is_empty() {
        html.push_str("<section><h2>Config files refused</h2><table><tr><th>file</th><th>reason (the last good version stays in force)</th></tr>");
        for (path, reason) in &status.problems {
            let _ = write!(
                html,
                "<tr><td><code>{}</code></td><td class=\"err\">{}</td></tr>",
                escape(&path.display().to_string()),
                escape(reason)
            );
        }
        html.push_str("</table></section>");
    }
    html.push_str("</main></body></html>");
    html
}

/// Clean-up: what waits per cluster, and the jobs held back with their reasons.
fn cleanup(html: &mut String, status: &Status) {
    let c = &status.cleanup;
    let _ = write!(
        html,
        "<section id=\"cleanup\"><h2>Clean-up of finished jobs{}</h2><table><tr><th>cluster</th><th>waiting, by state</th><th class=\"num\">deleted</th></tr>",
        if c.dry_run { " (dry run)" } else { "" }
    );
    let mut deleted: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
    for o in &c.outcomes {
        let key = match o.outcome {
            Outcome::Deleted => Some(o.cluster.as_str()),
            Outcome::WouldDelete if c.dry_run => Some(o.cluster.as_str()),
            _ => None,
        };
        if let Some(cluster) = key {
            *deleted.entry(cluster).or_default() += o.count;
        }
    }
    let clusters: std::collections::BTreeSet<&str> = c
        .schedule
        .jobs
        .keys()
        .map(String::as_str)
        .chain(deleted.keys().copied())
        .collect();
    for cluster in &clusters {
        let stages = c
            .schedule
            .jobs
            .get(*cluster)
            .map(|stages| {
                stages
                    .iter()
                    .map(|(stage, n)| format!("{n} {}", stage.replace('_', " ")))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        let _ = write!(
            html,
            "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td></tr>",
            escape(cluster),
            escape(&stages),
            deleted.get(cluster).copied().unwrap_or(0)
        );
    }
    if clusters.is_empty() {
        html.push_str(
            "<tr><td colspan=\"3\" class=\"muted\">no finished job covered by a rule yet</td></tr>",
        );
    }
    html.push_str("</table>");
    if !c.schedule.held.is_empty() {
        html.push_str(
            "<table><tr><th>held back</th><th>kind</th><th>finished</th><th>why</th></tr>",
        );
        for h in &c.schedule.held {
            let why = serde_json::to_value(&h.held).unwrap_or_default();
            let _ = write!(
                html,
                "<tr><td>{}/{}/{}</td><td>{}</td><td class=\"muted\">{}</td><td class=\"err\">{} {}</td></tr>",
                escape(&h.cluster),
                escape(&h.namespace),
                escape(&h.name),
                escape(&h.kind),
                escape(&h.finished_at),
                escape(&why["reason"].as_str().unwrap_or_default().replace('_', " ")),
                escape(why["detail"].as_str().unwrap_or_default()),
            );
        }
        html.push_str("</table>");
    }
    html.push_str("</section>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn everything_from_outside_is_escaped() {
        assert_eq!(
            escape("<script>a&'b\"</script>"),
            "&lt;script&gt;a&amp;&#39;b&quot;&lt;/script&gt;"
        );
    }
}
