//! Records, versions and Workload facts for the unit tests of the view's story parts.

use std::sync::Arc;

use crate::record::{JobRecord, Secs, Transition};
use jobrelay_contract::event::{JobEvent, Phase};
use jobrelay_contract::story::{Counts, Preemption, QueueState, Story, WorkloadFacts};

pub const BEGAN: Secs = 1_000_000;

pub fn record(created: Secs) -> JobRecord {
    let mut strings = crate::interner::Interner::default();
    let sym = strings.intern("x".to_string());
    let mut rec = JobRecord {
        name: "j".into(),
        namespace: sym,
        kind: sym,
        raw_phase: sym,
        labels: sym,
        created,
        started: 0,
        finished: 0,
        gone: 0,
        phase: Phase::Pending,
        restarts: 0,
        history: Box::default(),
        queued_since: 0,
        queue: None,
        trail: None,
    };
    rec.enter(Transition {
        at: created,
        phase: Phase::Pending,
        synthetic: false,
    });
    rec
}

pub fn time(secs: Secs) -> chrono::DateTime<chrono::FixedOffset> {
    chrono::DateTime::from_timestamp(i64::from(secs), 0)
        .expect("a time")
        .fixed_offset()
}

pub fn version(
    state: QueueState,
    admitted: Option<Secs>,
    waiting: Secs,
    preempted: u32,
) -> JobEvent {
    let mut evictions = Counts::default();
    if preempted > 0 {
        evictions.add("Preempted", preempted);
    }
    let facts = WorkloadFacts {
        job_uid: None,
        state,
        cluster_queue: Some("a100".into()),
        local_queue: Some("team-a".into()),
        waiting_since: Some(time(waiting)),
        admitted_at: admitted.map(time),
        evicted_at: None,
        past_execution_seconds: 0,
        evictions,
        requeues: 0,
        accelerators: Counts::default(),
    };
    let mut event = bare();
    event.story = Some(Arc::new(Story {
        workload: Some(facts),
        failure: None,
    }));
    event
}

/// A version with no story.
pub fn bare() -> JobEvent {
    JobEvent {
        id: "c/u/1".into(),
        cluster: "c".into(),
        api_version: "batch/v1".into(),
        kind: "Job".into(),
        namespace: "ml".into(),
        name: "j".into(),
        uid: "u".into(),
        resource_version: "1".into(),
        generation: None,
        phase: Phase::Pending,
        raw_phase: String::new(),
        reason: None,
        message: None,
        previous_phase: None,
        transition_time: String::new(),
        labels: Default::default(),
        annotations: Default::default(),
        object_json: Arc::from("{}"),
        transition_key: String::new(),
        synthetic: false,
        story: None,
    }
}

pub fn queued() -> QueueState {
    QueueState::Queued {
        reason: "Pending".into(),
        message: String::new(),
    }
}

pub fn evicted() -> QueueState {
    QueueState::Evicted {
        reason: "Preempted".into(),
        message: String::new(),
        preempted: Some(Preemption {
            reason: "InClusterQueue".into(),
            message: String::new(),
        }),
    }
}
