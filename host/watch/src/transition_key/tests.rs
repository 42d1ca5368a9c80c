use serde_json::{Value, json};

use super::*;
use crate::catch_up::recorded;
use crate::kinds::{FieldRule, JobKind, NormalizerSpec};
use crate::normalize::normalize;

fn spec(kind: &str) -> NormalizerSpec {
    JobKind::builtin(kind).expect("built in").normalizer
}

/// The keys a watcher gives `objects` (versions "1", "2", …) of one job, seen in order.
fn keys(spec: &NormalizerSpec, objects: &[Value]) -> Vec<String> {
    let mut stay: Option<Stay> = None;
    objects
        .iter()
        .enumerate()
        .map(|(i, object)| {
            let n = normalize(spec, object);
            let next = Stay::next(
                stay.as_ref(),
                n.phase,
                recorded(spec, object, &n),
                &(i + 1).to_string(),
            );
            let key = next.key("c0", "u");
            stay = Some(next);
            key
        })
        .collect()
}

const T: &str = "2026-11-26T19:12:11Z";
const LATER: &str = "2026-11-26T19:12:40Z";

fn kubeflow(conditions: Value) -> Value {
    json!({"status": {"conditions": conditions}})
}

fn condition(ty: &str, status: &str, at: &str) -> Value {
    json!({"type": ty, "status": status, "lastTransitionTime": at})
}

#[test]
fn a_kubeflow_job_running_again_within_the_second_is_a_new_transition() {
    let created = condition("Created", "True", T);
    let objects = [
        kubeflow(json!([])),
        kubeflow(json!([created])),
        kubeflow(json!([created, condition("Running", "True", T)])),
        kubeflow(json!([created, condition("Restarting", "True", T)])),
        kubeflow(json!([created, condition("Running", "True", T)])),
        kubeflow(json!([created, condition("Running", "True", T)])),
        kubeflow(json!([created, condition("Restarting", "True", T)])),
        kubeflow(json!([created, condition("Running", "True", T)])),
    ];
    let keys = keys(&spec("pytorch-job"), &objects);
    assert_eq!(
        keys,
        [
            "c0/u/pending@created",
            "c0/u/pending@created",
            "c0/u/running@2026-11-26T19:12:11Z",
            "c0/u/restarting@2026-11-26T19:12:11Z",
            "c0/u/running@2026-11-26T19:12:11Z#2",
            "c0/u/running@2026-11-26T19:12:11Z#2",
            "c0/u/restarting@2026-11-26T19:12:11Z#2",
            "c0/u/running@2026-11-26T19:12:11Z#3",
        ]
    );
}

#[test]
fn a_volcano_history_numbers_its_own_reentries() {
    let entry = |phase: &str| json!({"status": phase, "lastTransitionTime": T});
    let job = |phase: &str, entries: &[&str]| {
        json!({"status": {
            "state": {"phase": phase, "lastTransitionTime": T},
            "conditions": entries.iter().map(|p| entry(p)).collect::<Vec<_>>(),
        }})
    };
    let cycle = ["Pending", "Running", "Restarting", "Running"];
    let objects = [
        json!({}),
        job("Pending", &cycle[..1]),
        job("Running", &cycle[..2]),
        job("Restarting", &cycle[..3]),
        job("Running", &cycle),
    ];
    let spec = spec("volcano-job");
    let live = keys(&spec, &objects);
    assert_eq!(live[0], live[1], "one stay in pending: {live:?}");
    assert_eq!(live[4], "c0/u/running@2026-11-26T19:12:11Z#2");
    // Seen without the versions before (a restart): the status alone gives the same key.
    assert_eq!(keys(&spec, &objects[4..]), [live[4].clone()]);
}

#[test]
fn a_record_older_than_the_stay_before_is_of_an_earlier_visit() {
    // Suspended, then resumed: back in pending, with only the creation's entry recorded.
    let created = condition("Created", "True", T);
    let objects = [
        kubeflow(json!([created])),
        kubeflow(json!([created, condition("Running", "True", T)])),
        kubeflow(json!([
            created,
            condition("Running", "False", T),
            condition("Suspended", "True", LATER)
        ])),
        kubeflow(
            json!([created, {"type": "Running", "status": "False", "reason": "PyTorchJobSuspended",
            "lastTransitionTime": LATER}, condition("Suspended", "False", LATER)]),
        ),
        kubeflow(
            json!([created, {"type": "Running", "status": "False", "reason": "PyTorchJobSuspended",
            "lastTransitionTime": LATER}, condition("Suspended", "False", LATER)]),
        ),
    ];
    let keys = keys(&spec("pytorch-job"), &objects);
    assert_eq!(keys[0], "c0/u/pending@created");
    assert_eq!(keys[2], "c0/u/suspended@2026-11-26T19:12:40Z");
    assert_eq!(keys[3], "c0/u/pending@rv=4", "{keys:?}");
    assert_eq!(keys[4], keys[3], "versions of one stay share its key");
}

#[test]
fn a_stay_keeps_its_key_when_its_entry_is_recorded_late() {
    let objects = [
        json!({"status": {"phase": "Queued"}}),
        json!({"status": {"phase": "Queued", "since": T}}),
        json!({"status": {"phase": "Running", "since": LATER}}),
    ];
    let spec = NormalizerSpec::Field(FieldRule {
        path: "/status/phase".into(),
        phases: [
            ("Queued".into(), Phase::Pending),
            ("Running".into(), Phase::Running),
        ]
        .into(),
        reason_path: None,
        message_path: None,
        time_path: Some("/status/since".into()),
    });
    let keys = keys(&spec, &objects);
    assert_eq!(keys[0], "c0/u/pending@rv=1");
    assert_eq!(keys[1], keys[0]);
    assert_eq!(keys[2], "c0/u/running@2026-11-26T19:12:40Z");
}

#[test]
fn the_deletion_and_the_deletion_request_are_named_once() {
    let stay = Stay::next(
        None,
        Phase::Terminating,
        Recorded::Entered { at: T.into(), n: 1 },
        "7",
    );
    let again = Stay::next(Some(&stay), Phase::Terminating, Recorded::Unrecorded, "8");
    assert_eq!(again.key("c", "u"), "c/u/terminating@2026-11-26T19:12:11Z");
    let gone = Stay::next(Some(&again), Phase::Deleted, Recorded::Unrecorded, "9");
    assert_eq!(gone.key("c", "u"), "c/u/deleted");
}

/// A status that flips between two phases under one unchanging time (a field rule whose time
/// field never moves, say) gives every stay a key of its own, and what the watcher keeps of the
/// stays dated at that time does not grow with them.
#[test]
fn flips_under_one_time_stay_distinct_and_bounded() {
    let mut stay: Option<Stay> = None;
    let mut keys = std::collections::BTreeSet::new();
    for i in 0..1_000u32 {
        let phase = if i % 2 == 0 {
            Phase::Running
        } else {
            Phase::Restarting
        };
        let next = Stay::next(
            stay.as_ref(),
            phase,
            Recorded::Entered { at: T.into(), n: 1 },
            &i.to_string(),
        );
        assert!(keys.insert(next.key("c", "u")), "{i}: a key given twice");
        stay = Some(next);
    }
    let recent = stay.and_then(|s| s.recent).expect("stays share the time");
    assert_eq!(recent.stays.len(), 2, "{:?}", recent.stays);
}

#[test]
fn times_compare_as_instants() {
    assert_eq!(
        compare("2026-11-26T19:12:11Z", "2026-11-26T20:12:11+01:00"),
        Some(Ordering::Equal)
    );
    assert_eq!(
        compare("2026-11-26T19:12:11.5Z", "2026-11-26T19:12:11Z"),
        Some(Ordering::Greater)
    );
    assert_eq!(compare("soon", "soon"), Some(Ordering::Equal));
    assert_eq!(compare("soon", T), None);
}
