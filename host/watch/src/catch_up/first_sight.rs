//! Catch-up for a job a plugin has had nothing delivered of.
//!
//! [`missed_transitions`](super::missed_transitions) needs a last delivered state to start
//! from. A job can reach a plugin's lane with none: jobrelay was killed while the job's first
//! versions were still queued (the queues live in memory), or the job was created while
//! jobrelay was down and had moved on by the time it was listed. Its status still records what
//! it went through, so the same history is read from its start: every recorded transition
//! before the current phase, oldest first.
//!
//! The exception is a job that already existed when the plugin was installed: it gets its
//! current state only, or a newly installed notifier would send a card for every old job.
//! [`created_after`] tells the two apart by the job's `metadata.creationTimestamp` against the
//! install time the state store keeps. All three functions here ([`recorded_transitions`],
//! [`first_sight_events`] and [`created_after`]) are pure: no I/O, no clock.

use chrono::{DateTime, FixedOffset};
use serde_json::Value;

use super::{MissedTransition, before_current, cut_at, history, parse_time, synthetic_events};
use crate::kinds::NormalizerSpec;
use crate::normalize::normalize;
use jobrelay_contract::event::{JobEvent, Phase};

/// Every transition `object`'s status records before its current phase, oldest first, with
/// the same folding, ordering and ordinals as [`missed_transitions`](super::missed_transitions)
/// (so the synthetic ids are the same as a catch-up from a cursor would give).
///
/// Never contains the current phase as its last item (that one is the real event), has no
/// two consecutive items of the same phase, and is empty when the status records no usable
/// times.
pub fn recorded_transitions(spec: &NormalizerSpec, object: &Value) -> Vec<MissedTransition> {
    let current = normalize(spec, object);
    before_current(
        spec,
        &history(spec, object, cut_at(&current)),
        current.phase,
    )
}

/// Synthetic events for a job's recorded history (see [`synthetic_events`]); the first one has
/// no previous phase, since nothing was delivered before it.
pub fn first_sight_events(current: &JobEvent, recorded: &[MissedTransition]) -> Vec<JobEvent> {
    let mut events = synthetic_events(current, Phase::Unknown, recorded);
    if let Some(first) = events.first_mut() {
        first.previous_phase = None;
    }
    events
}

/// Whether the job was created strictly after `installed_at`, by its
/// `metadata.creationTimestamp`. A job without a usable creation time counts as existing
/// before: giving it its current state only is what happened before install times were kept.
pub fn created_after(object: &Value, installed_at: &DateTime<FixedOffset>) -> bool {
    object
        .pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str)
        .and_then(parse_time)
        .is_some_and(|created| created > *installed_at)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::super::missed_transitions;
    use super::*;
    use crate::kinds::JobKind;

    fn volcano() -> NormalizerSpec {
        JobKind::builtin("volcano-job")
            .expect("built in")
            .normalizer
    }

    fn t(s: u32) -> String {
        format!("2026-05-02T08:{:02}:{:02}Z", s / 60, s % 60)
    }

    /// A Volcano job through `phases` (raw phase, second), deleted if `deleting`.
    fn volcano_job(phases: &[(&str, u32)], deleting: bool) -> Value {
        let (phase, at) = phases.last().copied().unwrap_or(("Pending", 0));
        let conditions: Vec<Value> = phases
            .iter()
            .map(|(p, s)| json!({"status": p, "lastTransitionTime": t(*s)}))
            .collect();
        let mut metadata = json!({"name": "train", "namespace": "ml", "uid": "u-1",
            "resourceVersion": "900", "creationTimestamp": t(0)});
        if deleting {
            metadata["deletionTimestamp"] = json!(t(at + 1));
        }
        json!({
            "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": metadata,
            "status": {"state": {"phase": phase, "lastTransitionTime": t(at)},
                       "conditions": conditions}
        })
    }

    #[test]
    fn a_job_first_seen_terminating_gets_its_outcome() {
        let job = volcano_job(&[("Pending", 1), ("Running", 2), ("Completed", 9)], true);
        let got: Vec<(Phase, String)> = recorded_transitions(&volcano(), &job)
            .into_iter()
            .map(|m| (m.phase, m.at))
            .collect();
        assert_eq!(
            got,
            vec![
                (Phase::Pending, t(1)),
                (Phase::Running, t(2)),
                (Phase::Succeeded, t(9)),
            ]
        );
    }

    #[test]
    fn the_current_phase_is_not_rebuilt() {
        let job = volcano_job(&[("Pending", 1), ("Running", 2)], false);
        let got = recorded_transitions(&volcano(), &job);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].phase, Phase::Pending);
        let fresh = volcano_job(&[("Pending", 1)], false);
        assert!(recorded_transitions(&volcano(), &fresh).is_empty());
    }

    #[test]
    fn first_sight_events_start_with_no_previous_phase() {
        let job = volcano_job(&[("Pending", 1), ("Running", 2), ("Failed", 4)], true);
        let current = JobEvent {
            id: JobEvent::make_id("c", "u-1", "900"),
            cluster: "c".into(),
            api_version: "batch.volcano.sh/v1alpha1".into(),
            kind: "Job".into(),
            namespace: "ml".into(),
            name: "train".into(),
            uid: "u-1".into(),
            resource_version: "900".into(),
            generation: None,
            phase: Phase::Terminating,
            raw_phase: "Failed".into(),
            reason: None,
            message: None,
            previous_phase: None,
            transition_time: t(5),
            labels: Default::default(),
            annotations: Default::default(),
            object_json: job.to_string().into(),
            transition_key: String::new(),
            synthetic: false,
            story: None,
        };
        let events = first_sight_events(&current, &recorded_transitions(&volcano(), &job));
        let chain: Vec<(Option<Phase>, Phase)> =
            events.iter().map(|e| (e.previous_phase, e.phase)).collect();
        assert_eq!(
            chain,
            vec![
                (None, Phase::Pending),
                (Some(Phase::Pending), Phase::Running),
                (Some(Phase::Running), Phase::Failed),
            ]
        );
        assert!(events.iter().all(|e| e.synthetic));
        assert_eq!(events[2].resource_version, "900~failed~2");
    }

    #[test]
    fn creation_is_compared_with_the_install_time() {
        let installed = DateTime::parse_from_rfc3339(&t(30)).expect("time");
        let job = |created: Value| json!({"metadata": {"creationTimestamp": created}});
        assert!(created_after(&job(json!(t(31))), &installed));
        assert!(
            !created_after(&job(json!(t(30))), &installed),
            "same second"
        );
        assert!(!created_after(&job(json!(t(29))), &installed));
        assert!(!created_after(&job(json!("yesterday")), &installed));
        assert!(!created_after(&json!({"metadata": {}}), &installed));
        assert!(!created_after(&json!("not an object"), &installed));
    }

    const RAW: [&str; 7] = [
        "Pending",
        "Running",
        "Restarting",
        "Completing",
        "Completed",
        "Failed",
        "Aborted",
    ];

    proptest! {
        /// Whatever the recorded history, the rebuilt one ends before the current phase, never
        /// repeats a phase twice in a row, and whatever a catch-up from any delivered state
        /// would give is its tail (same transitions, same ordinals): a job rebuilt from its
        /// start and a job caught up from a cursor agree.
        #[test]
        fn a_catch_up_from_a_cursor_is_a_tail_of_the_whole_history(
            steps in proptest::collection::vec((0usize..RAW.len(), 0u32..4), 0..10),
            deleting in any::<bool>(),
            cut in 0usize..10,
        ) {
            let mut at = 0;
            let phases: Vec<(&str, u32)> = steps
                .iter()
                .map(|(r, gap)| {
                    at += gap;
                    (RAW[*r], at)
                })
                .collect();
            let job = volcano_job(&phases, deleting);
            let spec = volcano();
            let all = recorded_transitions(&spec, &job);
            let current = normalize(&spec, &job).phase;
            prop_assert!(all.last().is_none_or(|m| m.phase != current));
            prop_assert!(all.windows(2).all(|w| w[0].phase != w[1].phase));
            if let Some(from) = all.get(cut) {
                let tail = missed_transitions(&spec, &job, from.phase, Some(&from.at));
                prop_assert!(all.ends_with(&tail), "{all:?} vs {tail:?}");
            }
        }
    }
}
