//! How long a job has been going, from its own status.
//!
//! The event carries when the job reached its phase (`transition-time`) but not when it
//! started, so the start is read from the object: `status.startTime` where the kind records it
//! (batch Jobs, Kubeflow jobs), else the first `Running` entry of Volcano's
//! `status.conditions`. Anything missing or unparsable just leaves the duration off the card.

use chrono::{DateTime, FixedOffset};
use serde_json::Value;

/// The time from the job's start to `transition_time`, rendered like `1h 2m 3s`; `None` when
/// either end is unknown or the end is before the start.
pub fn run_time(object_json: &str, transition_time: &str) -> Option<String> {
    let object: Value = serde_json::from_str(object_json).ok()?;
    let start = start_time(&object)?;
    let end = DateTime::parse_from_rfc3339(transition_time).ok()?;
    let seconds = end.signed_duration_since(start).num_seconds();
    (seconds >= 0).then(|| format_seconds(seconds.unsigned_abs()))
}

fn start_time(object: &Value) -> Option<DateTime<FixedOffset>> {
    let status = object.get("status")?;
    if let Some(start) = status.get("startTime").and_then(Value::as_str) {
        return DateTime::parse_from_rfc3339(start).ok();
    }
    // Volcano keeps one condition per phase change; the earliest Running one is when the job
    // first ran, so restarts do not reset the clock.
    status
        .get("conditions")?
        .as_array()?
        .iter()
        .filter(|c| c.get("status").and_then(Value::as_str) == Some("Running"))
        .filter_map(|c| c.get("lastTransitionTime").and_then(Value::as_str))
        .filter_map(|t| DateTime::parse_from_rfc3339(t).ok())
        .min()
}

/// `3723` → `1h 2m 3s`; leading zero units are left out, days appear from 24 h on.
pub fn format_seconds(total: u64) -> String {
    let (days, hours, minutes, seconds) = (
        total / 86_400,
        total / 3600 % 24,
        total / 60 % 60,
        total % 60,
    );
    if days > 0 {
        format!("{days}d {hours}h {minutes}m {seconds}s")
    } else if hours > 0 {
        format!("{hours}h {minutes}m {seconds}s")
    } else if minutes > 0 {
        format!("{minutes}m {seconds}s")
    } else {
        format!("{seconds}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(format_seconds(0), "0s");
        assert_eq!(format_seconds(59), "59s");
        assert_eq!(format_seconds(62), "1m 2s");
        assert_eq!(format_seconds(3600), "1h 0m 0s");
        assert_eq!(format_seconds(3723), "1h 2m 3s");
        assert_eq!(format_seconds(90_061), "1d 1h 1m 1s");
    }

    #[test]
    fn from_start_time() {
        let object = r#"{"status":{"startTime":"2026-11-21T08:30:00Z"}}"#;
        assert_eq!(
            run_time(object, "2026-11-21T09:32:03Z").as_deref(),
            Some("1h 2m 3s")
        );
        // Offsets are honoured.
        assert_eq!(
            run_time(object, "2026-11-21T17:30:10+08:00").as_deref(),
            Some("1h 0m 10s")
        );
    }

    #[test]
    fn from_volcano_conditions() {
        let object = r#"{"status":{
            "state":{"phase":"Completed"},
            "conditions":[
                {"status":"Pending","lastTransitionTime":"2026-11-21T08:00:00Z"},
                {"status":"Running","lastTransitionTime":"2026-11-21T08:10:00Z"},
                {"status":"Restarting","lastTransitionTime":"2026-11-21T08:20:00Z"},
                {"status":"Running","lastTransitionTime":"2026-11-21T08:25:00Z"},
                {"status":"Completed","lastTransitionTime":"2026-11-21T08:40:00Z"}
            ]}}"#;
        assert_eq!(
            run_time(object, "2026-11-21T08:40:00Z").as_deref(),
            Some("30m 0s")
        );
    }

    #[test]
    fn unknown_when_anything_is_missing() {
        assert_eq!(run_time("{}", "2026-11-21T08:40:00Z"), None);
        assert_eq!(run_time("not json", "2026-11-21T08:40:00Z"), None);
        let object = r#"{"status":{"startTime":"2026-11-21T08:30:00Z"}}"#;
        assert_eq!(run_time(object, "yesterday"), None);
        assert_eq!(
            run_time(object, "2026-11-21T08:00:00Z"),
            None,
            "end before start"
        );
        let pending = r#"{"status":{"conditions":[{"status":"Pending","lastTransitionTime":"2026-11-21T08:00:00Z"}]}}"#;
        assert_eq!(run_time(pending, "2026-11-21T08:40:00Z"), None);
    }
}
