//! The Jobs view of the status page: `GET /jobs` (every job of the fleet, with the job view
//! API's filters as a form, what each plugin did of each job, and pages) and
//! `GET /jobs/{cluster}/{namespace}/{name}` (one job: its fields, labels, transitions, each
//! plugin's state and trace, and the earlier jobs of that name that were deleted).
//!
//! Rendered on the server, with no script, from exactly what the JSON API answers: both call
//! [`jobs_api::list_jobs`] and [`jobs_api::show_job`], so a query string is read by the same
//! [`JobQuery::parse`](jobrelay_fleet::query::JobQuery::parse) and a query the API refuses is
//! refused here too (`400`, the same message, on the page). One difference, made for the form:
//! a browser sends every field of a form, the empty ones too, so an empty value of one of the
//! API's own parameters (`cluster=`) means "not filtered" here, where the API refuses it.
//! Every value from the outside is escaped ([`escape`]); every part of a link is
//! percent-encoded ([`encode`]). The pages do not refresh themselves: a filtered list, or a
//! job being read, should not move under the reader.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};

use super::jobs_api::{self, JobItem, JobList, PluginDelivery, Refused};
use super::page::{STYLE, escape, nav, phase_badge};
use super::status::StatusSources;
use jobrelay_contract::event::Phase;
use jobrelay_fleet::jobs::JobSummary;
use jobrelay_fleet::query::{DEFAULT_LIMIT, MAX_LIMIT, MAX_QUERY_BYTES};

mod job;

/// What the Jobs view adds to the status page's style. `.dead` (dead letters) is a red of its
/// own, darker than a failed phase's, so the two read apart.
const JOBS_STYLE: &str = "
a{color:#0969da;text-decoration:none}a:hover{text-decoration:underline}
h3{font-size:14px;margin:16px 0 6px;display:flex;align-items:center;gap:8px}
form.filters{display:flex;flex-wrap:wrap;gap:10px 14px;align-items:flex-end}
form.filters label{display:flex;flex-direction:column;gap:3px;font-size:12px;color:#6b7280;font-weight:600}
form.filters input,form.filters select{font:inherit;font-size:14px;padding:4px 6px;border:1px solid #d0d7de;border-radius:6px;background:#fff;color:#1f2328}
form.filters fieldset{border:1px solid #d0d7de;border-radius:6px;padding:2px 8px 5px;margin:0;font-size:13px}
form.filters legend{font-size:12px;color:#6b7280;font-weight:600;padding:0 4px}
form.filters fieldset label{display:inline-flex;flex-direction:row;align-items:center;gap:2px;margin-right:6px;color:#1f2328;font-weight:400;font-size:13px}
form.filters button{font:inherit;font-size:14px;padding:5px 16px;border:0;border-radius:6px;background:#0969da;color:#fff;cursor:pointer}
.warnings{background:#fff8c5;border-left:6px solid #bf8700}
.warnings h2{color:#7d4e00}.warnings ul{margin:0;padding-left:20px}.warnings li{color:#4d2d00;font-size:14px;margin:2px 0}
.refused{background:#ffebe9;border-left:6px solid #cf222e}
.refused h2{color:#a40e26}.refused p{margin:0;font-size:14px}
.dead{background:#a40e26}
.states{display:flex;flex-wrap:wrap;gap:4px}.states .badge{white-space:nowrap}
.nowrap{white-space:nowrap}
main{grid-template-columns:minmax(0,1fr)}.scroll{overflow-x:auto}
h2 .name{text-transform:none;letter-spacing:0}
.pager{display:flex;gap:18px;align-items:center;margin-top:12px;font-size:14px}
dl.fields{display:grid;grid-template-columns:max-content 1fr;gap:5px 18px;margin:0;font-size:14px}
dl.fields dt{color:#6b7280}dl.fields dd{margin:0}
";

/// The API's parameters; the form sends each of them, empty when not filled in.
const PARAMETERS: [&str; 9] = [
    "cluster",
    "namespace",
    "kind",
    "phase",
    "labelSelector",
    "name",
    "sort",
    "limit",
    "continue",
];

/// The orders the form offers, as the API spells them.
const SORTS: [(&str, &str); 8] = [
    ("cluster", "cluster, namespace, name"),
    ("-cluster", "cluster, descending"),
    ("name", "name"),
    ("-name", "name, descending"),
    ("created", "created, oldest first"),
    ("-created", "created, newest first"),
    ("finished", "finished, earliest first"),
    ("-finished", "finished, latest first"),
];

/// `GET /jobs`.
pub async fn list(State(sources): State<StatusSources>, RawQuery(query): RawQuery) -> Response {
    let raw = query.unwrap_or_default();
    // A query too long for the API stays too long here, whatever its empty fields.
    let asked = if raw.len() > MAX_QUERY_BYTES {
        raw.clone()
    } else {
        without_empty_fields(&raw)
    };
    let answer = jobs_api::list_jobs(&sources, &asked).await;
    let form = filter_form(&raw, &choices(&sources));
    let mut body = String::with_capacity(16 * 1024);
    body.push_str(&form);
    let status = match answer {
        Ok(list) => {
            render_list(&mut body, &asked, &list);
            StatusCode::OK
        }
        Err(refused) => {
            refusal(&mut body, "Query refused", &refused);
            refused.status
        }
    };
    (status, Html(document("Jobs", "", &body))).into_response()
}

/// `GET /jobs/{cluster}/{namespace}/{name}`.
pub async fn show(
    State(sources): State<StatusSources>,
    Path((cluster, namespace, name)): Path<(String, String, String)>,
) -> Response {
    let mut body = String::with_capacity(16 * 1024);
    let _ = write!(
        body,
        "<div><a href=\"/jobs\">← all jobs</a> · <a href=\"/jobs?cluster={}&amp;namespace={}\">jobs of {} / {}</a></div>",
        encode(&cluster),
        encode(&namespace),
        escape(&cluster),
        escape(&namespace),
    );
    let status = match jobs_api::show_job(&sources, &cluster, &namespace, &name).await {
        Ok(shown) => {
            job::render_job(&mut body, &shown);
            StatusCode::OK
        }
        Err(refused) => {
            refusal(&mut body, "Not shown", &refused);
            if let Some(warnings) = &refused.warnings {
                warnings_section(&mut body, warnings);
            }
            refused.status
        }
    };
    let title = format!("{cluster}/{namespace}/{name}");
    (status, Html(document(&title, &title, &body))).into_response()
}

/// The whole page around `body`.
fn document(title: &str, subtitle: &str, body: &str) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>{} · jobrelay</title><style>{STYLE}{JOBS_STYLE}</style></head><body>\
         <header><h1>jobrelay</h1>{}<span class=\"muted\">{}</span></header><main>{body}</main></body></html>",
        escape(title),
        nav("/jobs"),
        escape(subtitle),
    )
}

/// The names the form suggests: the clusters this replica watches and the kinds it observed.
fn choices(sources: &StatusSources) -> (Vec<String>, Vec<String>) {
    let clusters = sources.health.snapshot().into_keys().collect();
    let kinds: BTreeSet<String> = sources
        .routes
        .observed()
        .into_iter()
        .map(|(_, kind, _)| kind)
        .collect();
    (clusters, kinds.into_iter().collect())
}

/// The filter form, filled in with what `raw` asked (even when it was refused, so it can be
/// mended). A `GET` form: its answer's address is the query, to keep or share.
fn filter_form(raw: &str, (clusters, kinds): &(Vec<String>, Vec<String>)) -> String {
    let values = form_values(raw);
    let text = |param: &str| escape(&values.get(param).map(|v| v.join(",")).unwrap_or_default());
    let mut html = String::from(
        "<section><h2>Filters</h2><form class=\"filters\" method=\"get\" action=\"/jobs\">",
    );
    let input = |html: &mut String, param: &str, title: &str, hint: &str, list: Option<&str>| {
        let _ = write!(
            html,
            "<label>{title}<input name=\"{param}\" value=\"{}\" placeholder=\"{}\"{}></label>",
            text(param),
            escape(hint),
            list.map(|l| format!(" list=\"{l}\"")).unwrap_or_default(),
        );
    };
    input(
        &mut html,
        "cluster",
        "cluster",
        "any (a,b)",
        Some("clusters"),
    );
    input(&mut html, "namespace", "namespace", "any (a,b)", None);
    input(&mut html, "kind", "kind", "any (a,b)", Some("kinds"));
    input(
        &mut html,
        "labelSelector",
        "label selector",
        "team=nlp,gpu in (a100)",
        None,
    );
    input(&mut html, "name", "name prefix", "any", None);
    let checked: BTreeSet<String> = values
        .get("phase")
        .into_iter()
        .flatten()
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_string())
        .collect();
    html.push_str("<fieldset><legend>phase</legend>");
    for phase in Phase::ALL {
        let _ = write!(
            html,
            "<label><input type=\"checkbox\" name=\"phase\" value=\"{p}\"{}>{p}</label>",
            if checked.contains(phase.as_str()) {
                " checked"
            } else {
                ""
            },
            p = phase.as_str(),
        );
    }
    html.push_str("</fieldset><label>sort<select name=\"sort\">");
    let sort = values
        .get("sort")
        .and_then(|v| v.first())
        .cloned()
        .unwrap_or_default();
    for (value, title) in SORTS {
        let _ = write!(
            html,
            "<option value=\"{value}\"{}>{title}</option>",
            if value == sort { " selected" } else { "" }
        );
    }
    let _ = write!(
        html,
        "</select></label><label>limit<input name=\"limit\" type=\"number\" min=\"1\" max=\"{MAX_LIMIT}\" style=\"width:5em\" value=\"{}\" placeholder=\"{DEFAULT_LIMIT}\"></label>\
         <button type=\"submit\">Show jobs</button> <a href=\"/jobs\">clear</a>",
        text("limit"),
    );
    for (id, names) in [("clusters", clusters), ("kinds", kinds)] {
        let _ = write!(html, "<datalist id=\"{id}\">");
        for name in names {
            let _ = write!(html, "<option value=\"{}\">", escape(name));
        }
        html.push_str("</datalist>");
    }
    html.push_str("</form></section>");
    html
}

/// A refused request: its message, as the API gives it.
fn refusal(html: &mut String, title: &str, refused: &Refused) {
    let _ = write!(
        html,
        "<section class=\"refused\" id=\"refused\"><h2>{title}</h2><p>{}</p>",
        escape(&refused.error)
    );
    if let Some(owner) = &refused.held_by {
        let _ = write!(
            html,
            "<p class=\"muted\">Replica <code>{}</code> holds this cluster: its Jobs view shows the job.</p>",
            escape(owner)
        );
    }
    html.push_str("</section>");
}

/// What the answer may lack, first and hard to miss: clusters not synced (their jobs as last
/// seen), clusters not watched here, dead letters that could not be read.
fn warnings_section(html: &mut String, warnings: &[String]) {
    if warnings.is_empty() {
        return;
    }
    let _ = write!(
        html,
        "<section class=\"warnings\" id=\"warnings\"><h2>{} warning{}</h2><ul>",
        warnings.len(),
        if warnings.len() == 1 { "" } else { "s" }
    );
    for warning in warnings {
        let _ = write!(html, "<li>{}</li>", escape(warning));
    }
    html.push_str("</ul></section>");
}

fn render_list(html: &mut String, asked: &str, list: &JobList) {
    warnings_section(html, &list.warnings);
    if !list.elsewhere.is_empty() {
        html.push_str("<section><h2>Clusters held by other replicas</h2><table><tr><th>cluster</th><th>ask replica</th></tr>");
        for (cluster, owner) in &list.elsewhere {
            let _ = write!(
                html,
                "<tr><td>{}</td><td><code>{}</code></td></tr>",
                escape(cluster),
                escape(owner)
            );
        }
        html.push_str("</table></section>");
    }
    let _ = write!(
        html,
        "<section id=\"jobs\"><h2>Jobs <span class=\"muted\">· {} shown{}</span></h2>\
         <div class=\"scroll\"><table><tr><th>cluster</th><th>namespace</th><th>name</th><th>kind</th><th>phase</th>\
         <th>created (UTC)</th><th>finished (UTC)</th><th class=\"num\">duration</th>\
         <th class=\"num\">restarts</th><th>plugins</th></tr>",
        list.items.len(),
        if list.remaining > 0 {
            format!(", {} more", list.remaining)
        } else {
            String::new()
        },
    );
    for item in &list.items {
        job_row(html, item);
    }
    if list.items.is_empty() {
        html.push_str("<tr><td colspan=\"10\" class=\"muted\">no job matches</td></tr>");
    }
    html.push_str("</table></div><div class=\"pager\">");
    let base = without_param(asked, "continue");
    if base.len() != asked.len() {
        let _ = write!(
            html,
            "<a href=\"{}\">first page</a>",
            escape(&format!("/jobs?{base}"))
        );
    }
    if let Some(token) = &list.next {
        let href = if base.is_empty() {
            format!("/jobs?continue={}", encode(token))
        } else {
            format!("/jobs?{base}&continue={}", encode(token))
        };
        let _ = write!(
            html,
            "<a id=\"next\" href=\"{}\">next page →</a><span class=\"muted\">{} more job{} match</span>",
            escape(&href),
            list.remaining,
            if list.remaining == 1 { "" } else { "s" },
        );
    }
    html.push_str("</div></section>");
}

fn job_row(html: &mut String, item: &JobItem) {
    let job = &item.job;
    let _ = write!(
        html,
        "<tr><td>{}</td><td>{}</td><td><a href=\"{}\">{}</a></td><td class=\"nowrap\">{}</td>\
         <td>{}{}</td><td class=\"muted\">{}</td><td class=\"muted\">{}</td>\
         <td class=\"num nowrap\">{}</td><td class=\"num\">{}</td><td><div class=\"states\">",
        escape(&job.cluster),
        escape(&job.namespace),
        escape(&job_href(job)),
        escape(&job.name),
        escape(&job.kind),
        phase_badge(job.phase.as_str()),
        job.deleted
            .as_deref()
            .map(|at| format!(
                " <span class=\"muted\">{}{}</span>",
                if job.phase == Phase::Deleted {
                    ""
                } else {
                    "deleted "
                },
                time_cell(at)
            ))
            .unwrap_or_default(),
        job.created.as_deref().map(time_cell).unwrap_or_default(),
        job.finished.as_deref().map(time_cell).unwrap_or_default(),
        job.duration_seconds.map(human_duration).unwrap_or_default(),
        job.restarts,
    );
    for (plugin, delivery) in &item.plugins {
        html.push_str(&delivery_badge(Some(plugin), delivery));
    }
    if item.plugins.is_empty() {
        html.push_str("<span class=\"muted\" title=\"no plugin's kinds and filter take it, or every plugin is done with it (a deleted job), and none has a dead letter of it\">no plugin state</span>");
    }
    html.push_str("</div></td></tr>");
}

/// One plugin's state of one job as a badge, the worst first: dead letters, a failed call
/// being retried, versions waiting, then what was delivered. Its error is the badge's title;
/// `plugin` names the plugin in it (not beside the plugin's own heading).
fn delivery_badge(plugin: Option<&str>, delivery: &PluginDelivery) -> String {
    let lane = delivery.lane.as_ref();
    let pending = lane.map_or(0, |l| l.pending);
    let in_flight = lane.is_some_and(|l| l.in_flight);
    let (class, state) = if delivery.dead_letters > 0 {
        (
            "dead",
            format!(
                "{} dead letter{}",
                delivery.dead_letters,
                if delivery.dead_letters == 1 { "" } else { "s" }
            ),
        )
    } else if delivery.last_error.is_some() && (pending > 0 || in_flight) {
        ("warn", "retrying".to_string())
    } else if pending > 0 {
        ("warn", format!("{pending} pending"))
    } else if in_flight {
        ("warn", "delivering".to_string())
    } else if let Some(phase) = lane.and_then(|l| l.delivered_phase) {
        ("ok", format!("delivered {phase}"))
    } else {
        ("idle", "nothing delivered".to_string())
    };
    format!(
        "<span class=\"badge {class}\" title=\"{}\">{}{}</span>",
        escape(delivery.last_error.as_deref().unwrap_or("")),
        plugin
            .map(|p| format!("{}: ", escape(p)))
            .unwrap_or_default(),
        escape(&state),
    )
}

/// A job's page, each part percent-encoded.
fn job_href(job: &JobSummary) -> String {
    format!(
        "/jobs/{}/{}/{}",
        encode(&job.cluster),
        encode(&job.namespace),
        encode(&job.name)
    )
}

/// An RFC 3339 time as `2026-11-28 01:52:26` (UTC; the headers say so).
fn short_time(rfc3339: &str) -> String {
    rfc3339
        .replacen('T', " ", 1)
        .trim_end_matches('Z')
        .to_string()
}

/// A time for a narrow cell: its date and its clock each kept whole, the line broken between
/// them when the column is narrow.
fn time_cell(rfc3339: &str) -> String {
    let short = short_time(rfc3339);
    match short.split_once(' ') {
        Some((date, clock)) => format!(
            "<span class=\"nowrap\">{}</span> <span class=\"nowrap\">{}</span>",
            escape(date),
            escape(clock)
        ),
        None => escape(&short),
    }
}

/// `5m 35s`, `2h 03m`, `3d 4h`.
fn human_duration(seconds: u32) -> String {
    let (d, h, m, s) = (
        seconds / 86_400,
        seconds / 3_600 % 24,
        seconds / 60 % 60,
        seconds % 60,
    );
    if d > 0 {
        format!("{d}d {h}h")
    } else if h > 0 {
        format!("{h}h {m:02}m")
    } else if m > 0 {
        format!("{m}m {s:02}s")
    } else {
        format!("{s}s")
    }
}

/// `text` percent-encoded for a URL's path segment or query value: everything but letters,
/// digits and `-._~`.
pub fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

/// A query string's key or value decoded as `application/x-www-form-urlencoded` (`+` is a
/// space); bytes that are not UTF-8 become U+FFFD.
fn decode(text: &str) -> String {
    let hex = |b: u8| char::from(b).to_digit(16);
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let digit = |at: usize| bytes.get(at).and_then(|&b| hex(b));
                match (digit(i + 1), digit(i + 2)) {
                    (Some(hi), Some(lo)) => {
                        // Two hex digits: at most 255.
                        out.push(u8::try_from(hi * 16 + lo).unwrap_or(b'?'));
                        i += 3;
                        continue;
                    }
                    _ => out.push(b'%'),
                }
            }
            other => out.push(other),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The query's pairs, raw (as written) and with the key decoded.
fn pairs(raw: &str) -> impl Iterator<Item = (&str, String, &str)> {
    raw.split('&').filter(|p| !p.is_empty()).map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (pair, decode(key), value)
    })
}

/// The query string without the empty values of the API's parameters: what an empty form
/// field sends, meaning "not filtered". Everything else is left exactly as written, for
/// [`JobQuery::parse`](jobrelay_fleet::query::JobQuery::parse) to judge.
fn without_empty_fields(raw: &str) -> String {
    pairs(raw)
        .filter(|(_, key, value)| !(value.is_empty() && PARAMETERS.contains(&key.as_str())))
        .map(|(pair, _, _)| pair)
        .collect::<Vec<_>>()
        .join("&")
}

/// The query string without one parameter.
fn without_param(raw: &str, param: &str) -> String {
    pairs(raw)
        .filter(|(_, key, _)| key != param)
        .map(|(pair, _, _)| pair)
        .collect::<Vec<_>>()
        .join("&")
}

/// The values given for each parameter, decoded, in order; empty ones left out.
fn form_values(raw: &str) -> BTreeMap<String, Vec<String>> {
    let mut values: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (_, key, value) in pairs(raw) {
        let value = decode(value);
        if !value.is_empty() {
            values.entry(key).or_default().push(value);
        }
    }
    values
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_encoded_and_queries_decoded() {
        assert_eq!(encode("team a/<b>&c=d"), "team%20a%2F%3Cb%3E%26c%3Dd");
        assert_eq!(encode("train-1.x_y~"), "train-1.x_y~");
        assert_eq!(encode("é"), "%C3%A9");
        assert_eq!(decode("team%3Dnlp+x%2c%C3%A9"), "team=nlp x,é");
        assert_eq!(decode("100%"), "100%");
        assert_eq!(decode("%zz%4"), "%zz%4");
        assert_eq!(decode(&encode("a b/<c>é")), "a b/<c>é");
    }

    #[test]
    fn empty_form_fields_mean_not_filtered_but_nothing_else_is_dropped() {
        assert_eq!(
            without_empty_fields(
                "cluster=&namespace=&kind=&labelSelector=team%3Dnlp&name=&sort=name&limit=&continue="
            ),
            "labelSelector=team%3Dnlp&sort=name"
        );
        // What the API refuses is left for it to refuse.
        assert_eq!(
            without_empty_fields("cluster=a,,b&clusters=&phase=runing"),
            "cluster=a,,b&clusters=&phase=runing"
        );
        assert_eq!(
            without_param("sort=name&continue=abc&limit=3", "continue"),
            "sort=name&limit=3"
        );
        let values = form_values("phase=failed&phase=running,deleted&name=tr+a&kind=");
        assert_eq!(values["phase"], ["failed", "running,deleted"]);
        assert_eq!(values["name"], ["tr a"]);
        assert!(!values.contains_key("kind"));
    }

    #[test]
    fn durations_read_at_a_glance() {
        assert_eq!(human_duration(7), "7s");
        assert_eq!(human_duration(335), "5m 35s");
        assert_eq!(human_duration(7_380), "2h 03m");
        assert_eq!(human_duration(3 * 86_400 + 4 * 3_600), "3d 4h");
        assert_eq!(short_time("2026-11-28T01:52:26Z"), "2026-11-28 01:52:26");
    }
}
