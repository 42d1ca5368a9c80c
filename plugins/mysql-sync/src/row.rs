//! What one event writes: the values of a `jobs` row and of a `job_transitions` row, derived
//! from the event alone (no reads), so handling an event is two writes and nothing else.

use chrono::{DateTime, Utc};
use serde_json::Value as Json;

/// Longest message kept, in bytes (condition messages can be whole stack traces).
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024;
/// Longest reason kept, in bytes.
pub const MAX_REASON_BYTES: usize = 1024;
/// Longest labels JSON kept, in bytes; beyond it the labels are replaced by a marker.
pub const MAX_LABELS_BYTES: usize = 256 * 1024;

/// Where a version stands in a job's history: later versions compare greater. Taken from the
/// resourceVersion, which the API server makes increasing (an etcd revision):
/// `1234` → (1234, REAL); a synthetic transition `1234~running~2` → (1234, 2), before the real
/// version it was read from; the version in a stay of Kueue's queue its story gave it alone
/// (`1234~queued@…#n`, `1234~preempted@…#n`, no `#n` for 1) → (1234, REAL + 2n - 1) and
/// (1234, REAL + 2n), after it: a job's n-th wait comes before its n-th preemption, which
/// comes before its (n+1)-th wait, while its object stays as it was; a deletion `1234-deleted` → (1234, DELETED), after them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct VersionKey {
    pub major: i64,
    pub minor: i64,
}

const REAL: i64 = 1_000_000;
const DELETED: i64 = 2_000_000;

impl VersionKey {
    pub fn parse(resource_version: &str, deleted: bool) -> VersionKey {
        let digits: String = resource_version
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        let major = digits.parse::<i64>().unwrap_or(0);
        let rest = &resource_version[digits.len()..];
        let minor = if deleted || rest.starts_with("-deleted") {
            DELETED
        } else if let Some(marked) = rest.strip_prefix('~') {
            // The n-th wait, the n-th preemption, the (n+1)-th wait: 2n - 1, 2n, 2n + 1.
            let n = || {
                marked
                    .rsplit_once('#')
                    .and_then(|(_, n)| n.parse::<i64>().ok())
                    .unwrap_or(1)
                    .clamp(1, (DELETED - REAL) / 2 - 1)
            };
            match marked.split('@').next() {
                Some("preempted") => REAL + 2 * n(),
                Some("queued") => REAL + 2 * n() - 1,
                _ => marked
                    .rsplit('~')
                    .next()
                    .and_then(|n| n.parse::<i64>().ok())
                    .map_or(0, |n| n.clamp(0, REAL - 1)),
            }
        } else {
            REAL
        };
        VersionKey { major, minor }
    }
}

/// An RFC 3339 time as the SQL text both dialects store: `YYYY-MM-DD HH:MM:SS.mmm`, UTC.
pub fn sql_time(rfc3339: &str) -> Option<String> {
    let parsed = DateTime::parse_from_rfc3339(rfc3339).ok()?;
    Some(
        parsed
            .with_timezone(&Utc)
            .format("%Y-%m-%d %H:%M:%S%.3f")
            .to_string(),
    )
}

/// `now` in the same form.
pub fn sql_now() -> String {
    let now: DateTime<Utc> = std::time::SystemTime::now().into();
    now.format("%Y-%m-%d %H:%M:%S%.3f").to_string()
}

/// Seconds between two RFC 3339 times, if both parse and the end is not before the start.
pub fn seconds_between(start: &str, end: &str) -> Option<i64> {
    let start = DateTime::parse_from_rfc3339(start).ok()?;
    let end = DateTime::parse_from_rfc3339(end).ok()?;
    let seconds = (end - start).num_seconds();
    (seconds >= 0).then_some(seconds)
}

/// `text` cut to at most `max` bytes at a character boundary.
pub fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// When the job started running, as its status records it: `status.startTime` (batch,
/// Kubeflow), or the `Running` entry of Volcano's `status.conditions`.
pub fn start_time(object: &Json) -> Option<String> {
    let status = object.get("status")?;
    if let Some(start) = status.get("startTime").and_then(Json::as_str) {
        return Some(start.to_string());
    }
    status
        .get("conditions")?
        .as_array()?
        .iter()
        .filter(|c| c.get("status").and_then(Json::as_str) == Some("Running"))
        .filter_map(|c| c.get("lastTransitionTime").and_then(Json::as_str))
        .min()
        .map(str::to_string)
}

/// When the job finished, as its status records it: `status.completionTime`.
pub fn completion_time(object: &Json) -> Option<String> {
    object
        .get("status")?
        .get("completionTime")?
        .as_str()
        .map(str::to_string)
}

/// Accelerators by resource name as a JSON object text (`{"nvidia.com/gpu":8}`).
pub fn accelerators_json(accelerators: &[(String, u64)]) -> String {
    let map: serde_json::Map<String, Json> = accelerators
        .iter()
        .map(|(k, v)| (k.clone(), Json::from(*v)))
        .collect();
    Json::Object(map).to_string()
}

/// Labels as a JSON object text, or a marker when they are too large to keep.
/// `{"nvidia.com/gpu": 28800}`: each accelerator's count times `seconds` admitted.
pub fn accelerator_seconds_json(accelerators: &[(String, u64)], seconds: i64) -> String {
    let seconds = u64::try_from(seconds).unwrap_or(0);
    let map: serde_json::Map<String, Json> = accelerators
        .iter()
        .map(|(name, n)| (name.clone(), Json::from(n.saturating_mul(seconds))))
        .collect();
    Json::Object(map).to_string()
}

pub fn labels_json(labels: &[(String, String)]) -> String {
    let map: serde_json::Map<String, Json> = labels
        .iter()
        .map(|(k, v)| (k.clone(), Json::String(v.clone())))
        .collect();
    let text = Json::Object(map).to_string();
    if text.len() > MAX_LABELS_BYTES {
        return format!(r#"{{"jobrelay.io/labels-omitted":"{} bytes"}}"#, text.len());
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn version_keys_order_a_jobs_history() {
        let synthetic = VersionKey::parse("120~running~1", false);
        let synthetic2 = VersionKey::parse("120~succeeded~2", false);
        let real = VersionKey::parse("120", false);
        let deleted = VersionKey::parse("120-deleted", true);
        let later = VersionKey::parse("121", false);
        assert!(synthetic < synthetic2);
        assert!(synthetic2 < real);
        let preempted = VersionKey::parse("120~preempted@2026-12-07T11:30:00Z", false);
        let queued = VersionKey::parse("120~queued@2026-12-07T11:31:00Z#2", false);
        let preempted2 = VersionKey::parse("120~preempted@2026-12-07T11:31:00Z#2", false);
        let queued3 = VersionKey::parse("120~queued@2026-12-07T11:31:00Z#3", false);
        assert!(real < preempted && preempted < queued && queued < preempted2);
        assert!(preempted2 < queued3 && queued3 < deleted);
        assert!(real < VersionKey::parse("120~queued", false));
        assert!(real < deleted);
        assert!(deleted < later);
        assert_eq!(VersionKey::parse("500", true).minor, DELETED);
        assert_eq!(VersionKey::parse("", false).major, 0);
    }

    #[test]
    fn times_convert_to_sql_text() {
        assert_eq!(
            sql_time("2026-03-01T10:00:00Z").as_deref(),
            Some("2026-03-01 10:00:00.000")
        );
        assert_eq!(
            sql_time("2026-03-01T12:00:00.25+02:00").as_deref(),
            Some("2026-03-01 10:00:00.250")
        );
        assert_eq!(sql_time("yesterday"), None);
        assert_eq!(
            seconds_between("2026-03-01T10:00:00Z", "2026-03-01T11:01:01Z"),
            Some(3661)
        );
        assert_eq!(
            seconds_between("2026-03-01T10:00:00Z", "2026-03-01T09:00:00Z"),
            None
        );
    }

    #[test]
    fn start_and_completion_from_each_kind() {
        let batch = json!({"status": {"startTime": "2026-01-01T00:00:00Z", "completionTime": "2026-01-01T01:00:00Z"}});
        assert_eq!(start_time(&batch).as_deref(), Some("2026-01-01T00:00:00Z"));
        assert_eq!(
            completion_time(&batch).as_deref(),
            Some("2026-01-01T01:00:00Z")
        );
        let volcano = json!({"status": {"conditions": [
            {"status": "Pending", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"status": "Running", "lastTransitionTime": "2026-01-01T00:05:00Z"},
            {"status": "Running", "lastTransitionTime": "2026-01-01T00:09:00Z"}
        ]}});
        assert_eq!(
            start_time(&volcano).as_deref(),
            Some("2026-01-01T00:05:00Z")
        );
        assert_eq!(start_time(&json!({})), None);
        assert_eq!(start_time(&json!({"status": null})), None);
    }

    #[test]
    fn cutting_and_label_limits() {
        assert_eq!(cut("héllo", 2), "h");
        assert_eq!(cut("abc", 10), "abc");
        let huge = vec![("k".to_string(), "v".repeat(MAX_LABELS_BYTES))];
        assert!(labels_json(&huge).contains("labels-omitted"));
        let small = vec![("team".to_string(), "ml".to_string())];
        assert_eq!(labels_json(&small), r#"{"team":"ml"}"#);
    }
}
