//! Which text format `/metrics` answers in: OpenMetrics for a scraper that asks for it, the
//! classic Prometheus text format (0.0.4) for every other reader.
//!
//! The metrics are encoded once, as OpenMetrics; the classic format is derived from that text
//! line by line rather than encoded a second time. The two differ only in a few places the
//! daemon's families touch: a counter's `# TYPE`/`# HELP` name carries `_total` in the classic
//! format (OpenMetrics names the family without it), `# UNIT`, `_created` samples and the
//! closing `# EOF` do not exist there, and `HELP` text escapes no double quotes.

/// The content type of an OpenMetrics answer.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The content type of a classic text answer.
pub const CLASSIC: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The format an `Accept` header asks for: OpenMetrics when it names
/// `application/openmetrics-text` with a non-zero weight (Prometheus does, and ranks it
/// first), otherwise the classic format — what curl, a browser or an older scraper read.
pub fn wants_openmetrics(accept: Option<&str>) -> bool {
    let Some(accept) = accept else {
        return false;
    };
    accept.split(',').any(|range| {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default();
        let refused = parts.any(|p| {
            p.strip_prefix("q=")
                .and_then(|q| q.trim().parse::<f32>().ok())
                .is_some_and(|q| q <= 0.0)
        });
        media.eq_ignore_ascii_case("application/openmetrics-text") && !refused
    })
}

/// The classic text format of `openmetrics`, an OpenMetrics exposition.
pub fn classic(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    // Families typed `counter` in OpenMetrics: their samples end in `_total`, and so must
    // their classic `# TYPE` and `# HELP` names. A family's HELP comes before its TYPE, so
    // the counters are found first.
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.strip_suffix(" counter"))
        .collect();
    let counter_name = |name: &str| -> String {
        if counters.contains(name) && !name.ends_with("_total") {
            format!("{name}_total")
        } else {
            name.to_string()
        }
    };
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            out.push_str(&format!(
                "# HELP {} {}\n",
                counter_name(name),
                help.replace("\\\"", "\"")
            ));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let kind = match kind {
                "counter" | "gauge" | "histogram" | "summary" => kind,
                _ => "untyped",
            };
            out.push_str(&format!("# TYPE {} {kind}\n", counter_name(name)));
            continue;
        }
        let sample_name = line.split(['{', ' ']).next().unwrap_or_default();
        if sample_name.ends_with("_created") {
            continue;
        }
        // An exemplar (` # {...} value`) has no place in the classic format.
        let sample = match line.find(" # {") {
            Some(at) => &line[..at],
            None => line,
        };
        out.push_str(sample);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_gets_openmetrics_and_everyone_else_the_classic_format() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                          version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert!(wants_openmetrics(Some(prometheus)));
        assert!(!wants_openmetrics(None), "curl without a header");
        assert!(!wants_openmetrics(Some("*/*")));
        assert!(!wants_openmetrics(Some("text/plain;version=0.0.4")));
        assert!(!wants_openmetrics(Some(
            "application/openmetrics-text;q=0, text/plain"
        )));
    }

    #[test]
    fn counters_gain_total_and_openmetrics_only_lines_go() {
        let om = "# HELP jobrelay_events_observed Job versions \\\"seen\\\".\n\
                  # TYPE jobrelay_events_observed counter\n\
                  jobrelay_events_observed_total{cluster=\"a\",kind=\"batch-job\"} 3\n\
                  jobrelay_events_observed_created{cluster=\"a\"} 1.7e9\n\
                  # HELP jobrelay_ready 1 when ready.\n\
                  # TYPE jobrelay_ready gauge\n\
                  # UNIT jobrelay_ready ratio\n\
                  jobrelay_ready 1\n\
                  # TYPE d_seconds histogram\n\
                  d_seconds_bucket{le=\"+Inf\"} 2 # {trace=\"x\"} 0.1\n\
                  d_seconds_sum 0.2\n\
                  d_seconds_count 2\n\
                  # EOF\n";
        let text = classic(om);
        assert_eq!(
            text,
            "# HELP jobrelay_events_observed_total Job versions \"seen\".\n\
             # TYPE jobrelay_events_observed_total counter\n\
             jobrelay_events_observed_total{cluster=\"a\",kind=\"batch-job\"} 3\n\
             # HELP jobrelay_ready 1 when ready.\n\
             # TYPE jobrelay_ready gauge\n\
             jobrelay_ready 1\n\
             # TYPE d_seconds histogram\n\
             d_seconds_bucket{le=\"+Inf\"} 2\n\
             d_seconds_sum 0.2\n\
             d_seconds_count 2\n"
        );
    }
}
