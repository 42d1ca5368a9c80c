//! `jobs list` as a table: a line per job, its place, kind, phase, age and duration, and one
//! word per plugin saying whether it owes the job anything (`log:ok probe:2 dead`), so a
//! glance finds the job a plugin is behind on or gave up on. `-o wide` adds the job's uid,
//! raw phase, times, restarts and each plugin's last error.
//!
//! Ages are relative to a `now` the caller gives (so tests pin it) and written the way
//! kubectl writes them (`45s`, `3m12s`, `2h5m`, `4d`), since operators read both side by side.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::answer::{JobItem, PluginDelivery};

/// The longest error text in the wide table's LAST ERRORS column; `jobs show` and `-o json`
/// have all of it.
const ERROR_WIDTH: usize = 80;

/// What is written in a cell that has nothing.
pub const NONE: &str = "-";

/// The jobs as a table (`wide`: with the extra columns).
pub fn jobs(items: &[JobItem], wide: bool, now: DateTime<Utc>) -> String {
    let mut header = vec!["CLUSTER", "NAMESPACE", "NAME", "KIND", "PHASE"];
    if wide {
        header.extend(["RAW PHASE", "UID", "CREATED", "STARTED", "FINISHED"]);
    }
    header.extend(["AGE", "DURATION"]);
    if wide {
        header.extend(["RESTARTS", "PREEMPTIONS", "QUEUE", "CAUSE", "TIMERS"]);
    }
    header.push("PLUGINS");
    if wide {
        header.push("LAST ERRORS");
    }
    let mut rows = vec![header.into_iter().map(str::to_string).collect::<Vec<_>>()];
    for item in items {
        let job = &item.job;
        let mut row = vec![
            job.cluster.clone(),
            job.namespace.clone(),
            job.name.clone(),
            or_none(&job.kind),
            or_none(&job.phase),
        ];
        if wide {
            row.extend([
                or_none(&job.raw_phase),
                or_none(&job.uid),
                time(job.created.as_deref()),
                time(job.started.as_deref()),
                time(job.finished.as_deref()),
            ]);
        }
        row.push(
            job.created
                .as_deref()
                .and_then(|t| since(t, now))
                .map_or_else(|| NONE.to_string(), human),
        );
        row.push(job.duration_seconds.map_or_else(
            || NONE.to_string(),
            |s| human(i64::try_from(s).unwrap_or(i64::MAX)),
        ));
        if wide {
            row.push(job.restarts.to_string());
            row.push(job.preemptions.to_string());
            row.push(job.queue.clone().unwrap_or_else(|| NONE.to_string()));
            row.push(job.cause.clone().unwrap_or_else(|| NONE.to_string()));
            row.push(if job.timers.is_empty() {
                NONE.to_string()
            } else {
                job.timers.join(",")
            });
        }
        row.push(plugins(&item.plugins));
        if wide {
            row.push(last_errors(&item.plugins));
        }
        rows.push(row);
    }
    aligned(&rows, "")
}

/// One word per plugin: `ok` when it owes the job nothing, else how many versions wait
/// (`3 pending`) and how many were given up on (`2 dead`), or `error` for a failed call not
/// yet retried. `-` when no plugin takes the job.
pub fn plugins(plugins: &BTreeMap<String, PluginDelivery>) -> String {
    if plugins.is_empty() {
        return NONE.to_string();
    }
    plugins
        .iter()
        .map(|(name, d)| format!("{name}:{}", state(d)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// What a plugin owes a job, in a word or two (see [`plugins`]).
pub fn state(d: &PluginDelivery) -> String {
    let mut parts = Vec::new();
    if d.pending > 0 {
        parts.push(format!("{} pending", d.pending));
    }
    if d.dead_letters > 0 {
        parts.push(format!("{} dead", d.dead_letters));
    }
    if parts.is_empty() {
        return if d.last_error.is_some() {
            "error"
        } else {
            "ok"
        }
        .to_string();
    }
    parts.join(",")
}

/// Each plugin's last error, first line and shortened: `probe: plugin gave up: …`.
fn last_errors(plugins: &BTreeMap<String, PluginDelivery>) -> String {
    let errors: Vec<String> = plugins
        .iter()
        .filter_map(|(name, d)| {
            d.last_error
                .as_deref()
                .map(|e| format!("{name}: {}", shorten(e, ERROR_WIDTH)))
        })
        .collect();
    if errors.is_empty() {
        NONE.to_string()
    } else {
        errors.join("; ")
    }
}

/// The first line of `text`, cut to `width` characters with `…`.
pub fn shorten(text: &str, width: usize) -> String {
    let line = text.lines().next().unwrap_or_default();
    if line.chars().count() <= width && !text.contains('\n') {
        return line.to_string();
    }
    let cut: String = line.chars().take(width.saturating_sub(1)).collect();
    format!("{cut}…")
}

/// Rows as columns, each as wide as its widest cell, three spaces apart (the last column not
/// padded, so a line has no trailing blanks); every line starts with `indent`.
pub fn aligned(rows: &[Vec<String>], indent: &str) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0; columns];
    for row in rows {
        for (k, cell) in row.iter().enumerate() {
            widths[k] = widths[k].max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = indent.to_string();
        for (k, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if k + 1 < row.len() {
                let pad = widths[k] - cell.chars().count() + 3;
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A time as the API gives it, or `-`.
pub fn time(at: Option<&str>) -> String {
    at.map_or_else(|| NONE.to_string(), str::to_string)
}

fn or_none(text: &str) -> String {
    if text.is_empty() {
        NONE.to_string()
    } else {
        text.to_string()
    }
}

/// Seconds from the RFC 3339 time `at` to `now`; `None` if `at` is not such a time.
pub fn since(at: &str, now: DateTime<Utc>) -> Option<i64> {
    let at = DateTime::parse_from_rfc3339(at).ok()?;
    Some((now - at.with_timezone(&Utc)).num_seconds())
}

/// Seconds the way kubectl writes an age: exact while short, coarser as it grows.
pub fn human(seconds: i64) -> String {
    let s = seconds.max(0);
    let (m, h, d) = (s / 60, s / 3_600, s / 86_400);
    match s {
        _ if s < 120 => format!("{s}s"),
        _ if s < 600 => match s % 60 {
            0 => format!("{m}m"),
            rest => format!("{m}m{rest}s"),
        },
        _ if s < 3 * 3_600 => format!("{m}m"),
        _ if s < 8 * 3_600 => match m % 60 {
            0 => format!("{h}h"),
            rest => format!("{h}h{rest}m"),
        },
        _ if s < 48 * 3_600 => format!("{h}h"),
        _ if s < 8 * 86_400 => match h % 24 {
            0 => format!("{d}d"),
            rest => format!("{d}d{rest}h"),
        },
        _ => format!("{d}d"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::ops::jobs::answer::JobSummary;

    #[test]
    fn ages_read_like_kubectl() {
        for (s, want) in [
            (-5, "0s"),
            (45, "45s"),
            (119, "119s"),
            (192, "3m12s"),
            (300, "5m"),
            (1_500, "25m"),
            (3 * 3_600 + 300, "3h5m"),
            (20 * 3_600, "20h"),
            (4 * 86_400 + 3 * 3_600, "4d3h"),
            (40 * 86_400, "40d"),
        ] {
            assert_eq!(human(s), want, "{s}");
        }
    }

    #[test]
    fn each_plugin_says_what_it_owes_the_job() {
        let owes = |pending, dead_letters, error: Option<&str>| PluginDelivery {
            pending,
            dead_letters,
            last_error: error.map(str::to_string),
            ..PluginDelivery::default()
        };
        let map = BTreeMap::from([
            ("log".to_string(), owes(0, 0, None)),
            ("probe".to_string(), owes(0, 2, Some("gave up"))),
            ("sql".to_string(), owes(3, 1, Some("down"))),
            ("zz".to_string(), owes(0, 0, Some("failed"))),
        ]);
        assert_eq!(
            plugins(&map),
            "log:ok probe:2 dead sql:3 pending,1 dead zz:error"
        );
        assert_eq!(plugins(&BTreeMap::new()), "-");
        assert_eq!(last_errors(&map), "probe: gave up; sql: down; zz: failed");
    }

    #[test]
    fn a_table_is_aligned_and_wide_adds_columns() {
        let now = DateTime::parse_from_rfc3339("2026-11-28T02:00:00Z")
            .expect("a time")
            .with_timezone(&Utc);
        let item = JobItem {
            job: JobSummary {
                cluster: "east".into(),
                namespace: "team-a".into(),
                name: "train-1".into(),
                kind: "volcano-job".into(),
                uid: "u-1".into(),
                phase: "failed".into(),
                raw_phase: "Failed".into(),
                created: Some("2026-11-28T01:52:26Z".into()),
                started: Some("2026-11-28T01:52:27Z".into()),
                finished: Some("2026-11-28T01:58:02Z".into()),
                duration_seconds: Some(335),
                restarts: 1,
                preemptions: 2,
                cause: Some("OOMKilled".into()),
                ..JobSummary::default()
            },
            plugins: BTreeMap::from([(
                "probe".to_string(),
                PluginDelivery {
                    dead_letters: 2,
                    last_error: Some("plugin gave up: probe was asked to give up\nmore".into()),
                    ..PluginDelivery::default()
                },
            )]),
        };
        assert_eq!(
            jobs(std::slice::from_ref(&item), false, now),
            "CLUSTER   NAMESPACE   NAME      KIND          PHASE    AGE     DURATION   PLUGINS\n\
             east      team-a      train-1   volcano-job   failed   7m34s   5m35s      probe:2 dead\n"
        );
        let wide = jobs(&[item], true, now);
        let lines: Vec<&str> = wide.lines().collect();
        assert!(lines[0].starts_with("CLUSTER"), "{wide}");
        assert!(
            lines[0].contains("RAW PHASE") && lines[0].ends_with("LAST ERRORS"),
            "{wide}"
        );
        let cell = |column: &str| {
            let at = lines[0].find(column).expect("the column");
            lines[1][at..].split_whitespace().next().unwrap_or_default()
        };
        assert_eq!(
            (cell("PREEMPTIONS"), cell("CAUSE")),
            ("2", "OOMKilled"),
            "{wide}"
        );
        for cell in [
            "Failed",
            "u-1",
            "2026-11-28T01:52:27Z",
            "2026-11-28T01:58:02Z",
            "probe: plugin gave up: probe was asked to give up…",
        ] {
            assert!(lines[1].contains(cell), "{cell} in {wide}");
        }
    }
}
