//! One transition, one key: the key a live event carries is the key its reconstruction after a
//! gap carries, for every built-in kind, with the statuses the test kit's controllers write.
//!
//! Each job is driven through a life with a restart, the key of every observed version is
//! taken as the watcher takes it, then the job is seen again only as `terminating` (the gap:
//! a kill lost the acknowledgements after its first phase) and every transition the catch-up
//! rebuilds must carry the key its live event had. A plugin deduping on the key then acts once
//! per transition.

use crate::common;

use std::sync::Arc;

use jobrelay_contract::event::Phase;
use jobrelay_testkit::{Flavor, JobDriver, SimCluster};
use jobrelay_watch::catch_up::{missed_transitions, synthetic_events};
use jobrelay_watch::kinds::JobKind;
use jobrelay_watch::normalize::normalize;
use jobrelay_watch::transition_key::{self, Version};
use serde_json::Value;

/// (phase, key, the event's transition time) of each live transition.
type Stay = (Phase, String, Option<String>);

fn kind_of(flavor: Flavor) -> &'static str {
    match flavor {
        Flavor::Batch => "batch-job",
        Flavor::Volcano => "volcano-job",
        Flavor::PyTorch => "pytorch-job",
        Flavor::Mpi => "mpi-job",
    }
}

/// Notes the version the driver just wrote: a new stay when its phase changed, else the same
/// key as the stay it continues.
fn observe(flavor: Flavor, driver: &JobDriver, stays: &mut Vec<Stay>) {
    let spec = JobKind::builtin(kind_of(flavor)).expect("kind").normalizer;
    let object = driver.object().expect("object");
    let n = normalize(&spec, &object);
    let key = transition_key::of_version(
        &spec,
        &object,
        &n,
        n.phase,
        Version {
            cluster: "east",
            uid: driver.uid(),
            resource_version: driver.resource_version(),
        },
    );
    match stays.last() {
        // A phase whose entry the status does not record (a batch Job's pending) is keyed by
        // its version, as documented: only recorded entries are shared by a stay.
        Some((phase, stayed, _)) if *phase == n.phase && stayed.contains("@rv=") => {}
        Some((phase, stayed, _)) if *phase == n.phase => {
            assert_eq!(
                stayed, &key,
                "{flavor:?}: versions of one stay in {phase} share the key"
            );
        }
        _ => stays.push((n.phase, key, n.transition_time)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconstructed_transition_carries_the_key_of_its_live_event() {
    let sim = SimCluster::start("east").await.expect("simulator");
    for flavor in Flavor::ALL {
        let name = format!("keys-{}", kind_of(flavor));
        let mut driver = JobDriver::create(&sim, flavor, "ml", &name).expect("job");
        let mut stays = Vec::new();
        observe(flavor, &driver, &mut stays);
        driver.pending().expect("pending");
        observe(flavor, &driver, &mut stays);
        driver.running().expect("running");
        observe(flavor, &driver, &mut stays);
        driver.restarting().expect("restarting");
        observe(flavor, &driver, &mut stays);
        driver.running().expect("running again");
        observe(flavor, &driver, &mut stays);
        driver.failed("OOMKilled").expect("failed");
        observe(flavor, &driver, &mut stays);
        let live: Vec<&Stay> = stays.iter().filter(|s| s.0 != Phase::Pending).collect();
        assert!(
            live.iter().any(|s| s.0 == Phase::Failed),
            "{flavor:?}: {stays:?}"
        );
        let running: Vec<&String> = stays
            .iter()
            .filter(|s| s.0 == Phase::Running)
            .map(|s| &s.1)
            .collect();
        let distinct: std::collections::BTreeSet<&&String> = running.iter().collect();
        assert_eq!(
            distinct.len(),
            running.len(),
            "{flavor:?}: two stays in running have two keys: {running:?}"
        );

        // The gap: acknowledged up to the first stay the status records, then seen only while
        // being deleted.
        let mut object: Value = driver.object().expect("object");
        object["metadata"]["deletionTimestamp"] = Value::String("2099-01-01T00:00:00Z".into());
        let spec = JobKind::builtin(kind_of(flavor)).expect("kind").normalizer;
        let (first_phase, _, first_time) = stays
            .iter()
            .find(|s| s.2.is_some())
            .expect("a stay with a recorded time");
        let missed = missed_transitions(&spec, &object, *first_phase, first_time.as_deref());
        let mut current = common::event(driver.uid(), "999", Phase::Terminating, None, "x");
        current.object_json = Arc::from(object.to_string());
        let rebuilt = synthetic_events(&current, *first_phase, &missed);
        assert!(
            rebuilt.iter().any(|e| e.phase == Phase::Failed),
            "{flavor:?}: the outcome is rebuilt: {rebuilt:?}"
        );
        for event in &rebuilt {
            assert!(
                stays
                    .iter()
                    .any(|(phase, key, _)| *phase == event.phase && *key == event.transition_key),
                "{flavor:?}: rebuilt {} has key {} which no live event had: {stays:?}",
                event.phase,
                event.transition_key
            );
        }
    }
}

/// An event without a key (a hand-written event file, a dead letter stored before keys
/// existed) gets one from its version; a deletion's is the job's single deletion key.
#[test]
fn an_event_without_a_key_derives_one() {
    let running = common::event("u-1", "41", Phase::Running, None, "2026-01-01T00:00:00Z");
    assert_eq!(running.transition_key(), "east/u-1/running@rv=41");
    let gone = common::event(
        "u-1",
        "41-gone",
        Phase::Deleted,
        None,
        "2026-01-01T00:00:00Z",
    );
    assert_eq!(gone.transition_key(), "east/u-1/deleted");
    let mut keyed = running.clone();
    keyed.transition_key = "east/u-1/running@2026-01-01T00:00:00Z".into();
    assert_eq!(
        keyed.transition_key(),
        "east/u-1/running@2026-01-01T00:00:00Z"
    );
}
