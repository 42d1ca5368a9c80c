//! What became of a plugin's latest calls, for the job view's per-plugin trace: each
//! delivery, each failed attempt before a retry, each dead letter, with its version and time.
//!
//! A ring of the lane's last [`KEPT`] outcomes, all jobs together: what an operator asks of
//! a job is nearly always about its recent versions, and a ring costs the same whether the
//! lane tracks ten jobs or a million. A job whose outcomes have left the ring still shows
//! what the lane keeps of it for good (the phase last delivered, the versions pending) and
//! its dead letters, which the state store keeps.

use parking_lot::Mutex;
use std::collections::VecDeque;

use compact_str::CompactString;
use serde::Serialize;

use jobrelay_contract::event::{JobEvent, JobKey, Phase};
use jobrelay_contract::uid::Uid;

/// Outcomes kept per lane.
pub const KEPT: usize = 2_048;

/// What one call (or the lane, for a version over a bound) did with a version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceOutcome {
    /// The plugin handled it.
    Delivered,
    /// The call failed and will be tried again.
    Retrying,
    /// Given up on: stored as a dead letter.
    DeadLettered,
}

/// One outcome, as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TraceEntry {
    /// RFC 3339, milliseconds.
    pub at: String,
    /// The version's `resourceVersion`.
    pub resource_version: String,
    /// The version's phase.
    pub phase: Phase,
    /// What became of it.
    pub outcome: TraceOutcome,
    /// Which attempt this was (1 for the first call; 0 for a version dead-lettered unsent).
    pub attempt: u32,
    /// The call's error, cut to 512 bytes; none for a delivery.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug)]
struct Kept {
    cluster: CompactString,
    uid: Uid,
    at: chrono::DateTime<chrono::Utc>,
    resource_version: CompactString,
    phase: Phase,
    outcome: TraceOutcome,
    attempt: u32,
    error: Option<Box<str>>,
}

/// The ring.
#[derive(Debug, Default)]
pub struct DeliveryTrace {
    ring: Mutex<VecDeque<Kept>>,
}

impl DeliveryTrace {
    /// Keeps one outcome for `event`'s version, dropping the oldest past [`KEPT`].
    pub fn record(
        &self,
        event: &JobEvent,
        outcome: TraceOutcome,
        attempt: u32,
        error: Option<&str>,
    ) {
        let kept = Kept {
            cluster: CompactString::new(&event.cluster),
            uid: Uid::new(&event.uid),
            at: chrono::Utc::now(),
            resource_version: CompactString::new(&event.resource_version),
            phase: event.phase,
            outcome,
            attempt,
            error: error.map(|e| truncated(e).into()),
        };
        let mut ring = self.ring.lock();
        if ring.len() >= KEPT {
            ring.pop_front();
        }
        ring.push_back(kept);
    }

    /// The outcomes of one job still in the ring, oldest first.
    pub fn of(&self, key: &JobKey) -> Vec<TraceEntry> {
        let uid = Uid::new(&key.uid);
        let ring = self.ring.lock();
        ring.iter()
            .filter(|k| k.uid == uid && k.cluster == key.cluster)
            .map(|k| TraceEntry {
                at: k.at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                resource_version: k.resource_version.to_string(),
                phase: k.phase,
                outcome: k.outcome,
                attempt: k.attempt,
                error: k.error.as_deref().map(str::to_string),
            })
            .collect()
    }

    /// The latest error of each job among `keys` that is still in the ring and was not
    /// followed by a delivery (what a list shows per plugin).
    pub fn last_errors(&self, keys: &[JobKey]) -> Vec<Option<String>> {
        let wanted: std::collections::HashMap<(Uid, &str), usize> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| ((Uid::new(&k.uid), k.cluster.as_str()), i))
            .collect();
        let mut errors: Vec<Option<String>> = vec![None; keys.len()];
        let ring = self.ring.lock();
        for kept in ring.iter() {
            if let Some(&i) = wanted.get(&(kept.uid.clone(), kept.cluster.as_str())) {
                errors[i] = kept.error.as_deref().map(str::to_string);
            }
        }
        errors
    }
}

/// Errors are kept to a few hundred bytes each: the ring's memory stays bounded whatever a
/// plugin returns.
fn truncated(error: &str) -> &str {
    const MAX: usize = 512;
    if error.len() <= MAX {
        return error;
    }
    let mut end = MAX;
    while !error.is_char_boundary(end) {
        end -= 1;
    }
    &error[..end]
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn event(uid: &str, rv: &str) -> JobEvent {
        JobEvent {
            id: JobEvent::make_id("c", uid, rv),
            cluster: "c".into(),
            api_version: "batch/v1".into(),
            kind: "Job".into(),
            namespace: "ns".into(),
            name: uid.into(),
            uid: uid.into(),
            resource_version: rv.into(),
            generation: None,
            phase: Phase::Running,
            raw_phase: String::new(),
            reason: None,
            message: None,
            previous_phase: None,
            transition_time: "2026-01-01T00:00:00Z".into(),
            labels: Default::default(),
            annotations: Default::default(),
            object_json: Arc::from("{}"),
            transition_key: String::new(),
            synthetic: false,
            story: None,
        }
    }

    fn key(uid: &str) -> JobKey {
        JobKey {
            cluster: "c".into(),
            uid: uid.into(),
        }
    }

    #[test]
    fn the_ring_keeps_the_latest_outcomes_of_each_job() {
        let trace = DeliveryTrace::default();
        trace.record(&event("a", "1"), TraceOutcome::Retrying, 1, Some("boom"));
        trace.record(&event("a", "1"), TraceOutcome::Delivered, 2, None);
        trace.record(
            &event("b", "1"),
            TraceOutcome::DeadLettered,
            3,
            Some(&"x".repeat(10_000)),
        );
        let a = trace.of(&key("a"));
        assert_eq!(a.len(), 2);
        assert_eq!(a[0].outcome, TraceOutcome::Retrying);
        assert_eq!(a[1].attempt, 2);
        let errors = trace.last_errors(&[key("a"), key("b"), key("z")]);
        assert_eq!(errors[0], None, "delivered after the failure");
        assert_eq!(errors[1].as_deref().map(str::len), Some(512));
        assert_eq!(errors[2], None);
        for i in 0..KEPT {
            trace.record(
                &event("c", &i.to_string()),
                TraceOutcome::Delivered,
                1,
                None,
            );
        }
        assert!(
            trace.of(&key("a")).is_empty(),
            "pushed out by newer outcomes"
        );
        assert_eq!(trace.of(&key("c")).len(), KEPT);
    }
}
