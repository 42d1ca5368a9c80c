//! Each mode's contract, checked on arbitrary sequences of observed versions.

use std::collections::HashSet;
use std::sync::Arc;

use proptest::prelude::*;

use super::*;

fn event(rv: u32, phase: Phase) -> JobEvent {
    JobEvent {
        id: format!("c/u/{rv}"),
        cluster: "c".into(),
        api_version: "batch/v1".into(),
        kind: "Job".into(),
        namespace: "ns".into(),
        name: "n".into(),
        uid: "u".into(),
        resource_version: rv.to_string(),
        generation: None,
        phase,
        raw_phase: String::new(),
        reason: None,
        message: None,
        previous_phase: None,
        transition_time: format!("2026-01-01T00:00:{:02}Z", rv % 60),
        labels: Default::default(),
        annotations: Default::default(),
        object_json: Arc::from("{}"),
        transition_key: String::new(),
        synthetic: false,
        story: None,
    }
}

fn phase() -> impl Strategy<Value = Phase> {
    prop_oneof![
        Just(Phase::Pending),
        Just(Phase::Running),
        Just(Phase::Restarting),
        Just(Phase::Suspended),
        Just(Phase::Succeeded),
        Just(Phase::Failed),
        Just(Phase::Terminating),
        Just(Phase::Deleted),
        Just(Phase::Unknown),
        Just(Phase::Queued),
        Just(Phase::Preempted),
    ]
}

/// Observed versions: resourceVersions from a small range so re-observations are common.
fn observations() -> impl Strategy<Value = Vec<(u32, Phase)>> {
    prop::collection::vec((0u32..12, phase()), 0..40)
}

/// Run the decisions as a lane would, with the queue as a plain list; returns what would be
/// delivered, in order, when nothing is delivered before the end (the worst case for `latest`).
fn run(mode: DeliveryMode, obs: &[(u32, Phase)]) -> Vec<JobEvent> {
    let mut accepted = Accepted::default();
    let mut queue: Vec<JobEvent> = Vec::new();
    for (rv, ph) in obs {
        let e = event(*rv, *ph);
        let queued: HashSet<String> = queue.iter().map(|q| q.resource_version.clone()).collect();
        match mode.decide(&mut accepted, &e, |rv| queued.contains(rv)) {
            Decision::Skip(_) => {}
            Decision::Append => queue.push(e),
            Decision::Replace => queue = vec![e],
        }
    }
    queue
}

proptest! {
    #[test]
    fn no_mode_delivers_a_version_twice_or_anything_after_deletion(obs in observations()) {
        for mode in [DeliveryMode::EveryVersion, DeliveryMode::Transitions, DeliveryMode::Terminal, DeliveryMode::Latest] {
            let out = run(mode, &obs);
            let rvs: HashSet<&str> = out.iter().map(|e| e.resource_version.as_str()).collect();
            prop_assert_eq!(rvs.len(), out.len(), "{:?} delivered a version twice", mode);
            if let Some(pos) = out.iter().position(|e| e.phase == Phase::Deleted) {
                prop_assert_eq!(pos, out.len() - 1, "{:?} delivered after deletion", mode);
            }
        }
    }

    #[test]
    fn every_version_keeps_each_first_sighting_in_order(obs in observations()) {
        let out = run(DeliveryMode::EveryVersion, &obs);
        let mut expected = Vec::new();
        let mut seen = HashSet::new();
        for (rv, ph) in &obs {
            if expected.last().is_some_and(|(_, p): &(u32, Phase)| *p == Phase::Deleted) { break; }
            if seen.insert(*rv) { expected.push((*rv, *ph)); }
        }
        // A version seen again later is a duplicate even if it was not the last accepted one.
        let got: Vec<(u32, Phase)> = out.iter().map(|e| (e.resource_version.parse().unwrap_or(u32::MAX), e.phase)).collect();
        prop_assert_eq!(got, expected);
    }

    #[test]
    fn transitions_never_repeat_a_phase(obs in observations()) {
        let out = run(DeliveryMode::Transitions, &obs);
        for pair in out.windows(2) {
            prop_assert_ne!(pair[0].phase, pair[1].phase);
        }
    }

    #[test]
    fn terminal_delivers_one_end_at_most_plus_deletion(obs in observations()) {
        let out = run(DeliveryMode::Terminal, &obs);
        let ends = out.iter().filter(|e| is_end(e.phase)).count();
        prop_assert!(ends <= 1);
        prop_assert!(out.iter().all(|e| is_end(e.phase) || e.phase == Phase::Deleted));
        if let Some(first) = obs.iter().position(|(_, p)| is_end(*p)) {
            let deleted_before = obs[..first].iter().any(|(_, p)| *p == Phase::Deleted);
            if !deleted_before {
                prop_assert_eq!(ends, 1, "the first end is delivered");
            }
        }
    }

    /// Fleet states: alternate, never start with the good state, and every change of the
    /// observed state after the first bad one is delivered (a subject's states are only
    /// `failed` and `running`).
    #[test]
    fn fleet_states_alternate_and_start_bad(states in proptest::collection::vec(any::<bool>(), 0..40)) {
        let obs: Vec<(u32, Phase)> = states
            .iter()
            .enumerate()
            .map(|(i, bad)| (i as u32 + 1, if *bad { Phase::Failed } else { Phase::Running }))
            .collect();
        let out = run(DeliveryMode::FleetStates, &obs);
        for pair in out.windows(2) {
            prop_assert_ne!(pair[0].phase, pair[1].phase);
        }
        if let Some(first) = out.first() {
            prop_assert_eq!(first.phase, Phase::Failed);
        }
        let mut expected = 0;
        let mut last: Option<bool> = None;
        for bad in &states {
            if last != Some(*bad) && (last.is_some() || *bad) {
                expected += 1;
                last = Some(*bad);
            }
        }
        prop_assert_eq!(out.len(), expected);
    }

    #[test]
    fn latest_keeps_only_the_newest_waiting_version(obs in observations()) {
        let out = run(DeliveryMode::Latest, &obs);
        prop_assert!(out.len() <= 1);
    }
}

/// A version delivered in the stay its story gave it alone (`7~queued@…`) is news against the
/// plain version before it, and the plain version seen again in that stay (a re-list after a
/// restart) is not: no mode delivers it again. Seen plain in another stay it is news.
#[test]
fn a_version_restoried_is_delivered_once_in_its_stay() {
    let restoried = |rv: &str, phase: Phase| {
        let mut e = event(7, phase);
        e.resource_version = rv.to_string();
        e.id = format!("c/u/{rv}");
        e
    };
    for mode in [
        DeliveryMode::EveryVersion,
        DeliveryMode::Transitions,
        DeliveryMode::Latest,
    ] {
        let mut accepted = Accepted::default();
        let none = |_: &str| false;
        let decide = |accepted: &mut Accepted, e: &JobEvent| mode.decide(accepted, e, none);
        assert_ne!(
            decide(&mut accepted, &event(7, Phase::Suspended)),
            Decision::Skip(SkipReason::Duplicate)
        );
        let queued = restoried("7~queued@2026-12-07T10:00:00Z", Phase::Queued);
        assert!(
            !matches!(decide(&mut accepted, &queued), Decision::Skip(_)),
            "{mode:?}: the stay is news"
        );
        assert_eq!(
            decide(&mut accepted, &event(7, Phase::Queued)),
            Decision::Skip(SkipReason::Duplicate),
            "{mode:?}: the same version in the same stay"
        );
        assert_eq!(
            decide(&mut accepted, &queued),
            Decision::Skip(SkipReason::Duplicate),
            "{mode:?}"
        );
        assert!(
            !matches!(
                decide(&mut accepted, &event(7, Phase::Pending)),
                Decision::Skip(SkipReason::Duplicate)
            ),
            "{mode:?}: the same version in another stay is news"
        );
    }
}

#[test]
fn deletion_is_accepted_in_every_mode_and_only_once() {
    for mode in [
        DeliveryMode::EveryVersion,
        DeliveryMode::Transitions,
        DeliveryMode::Terminal,
        DeliveryMode::Latest,
    ] {
        let out = run(
            mode,
            &[
                (1, Phase::Running),
                (2, Phase::Deleted),
                (3, Phase::Deleted),
            ],
        );
        assert_eq!(
            out.last().map(|e| e.phase),
            Some(Phase::Deleted),
            "{mode:?}"
        );
        assert_eq!(out.iter().filter(|e| e.phase == Phase::Deleted).count(), 1);
    }
}

#[test]
fn modes_parse_from_kebab_case() {
    let m: DeliveryMode = serde_yaml_ng::from_str("every-version").expect("parses");
    assert_eq!(m, DeliveryMode::EveryVersion);
    let m: DeliveryMode = serde_yaml_ng::from_str("terminal").expect("parses");
    assert_eq!(m, DeliveryMode::Terminal);
    // Only the host chooses it, for fleet events.
    assert!(serde_yaml_ng::from_str::<DeliveryMode>("fleet-states").is_err());
}
