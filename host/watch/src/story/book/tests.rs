use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::story::workload::{Counts, QueueState};

/// The facts as the book keeps them: without the uid they named.
fn kept(facts: WorkloadFacts) -> WorkloadFacts {
    WorkloadFacts {
        job_uid: None,
        ..facts
    }
}

fn facts(job: &str, reason: &str) -> WorkloadFacts {
    WorkloadFacts {
        job_uid: Some(job.to_string()),
        state: QueueState::Queued {
            reason: reason.to_string(),
            message: String::new(),
        },
        cluster_queue: None,
        local_queue: Some("team-ml".into()),
        waiting_since: None,
        admitted_at: None,
        evicted_at: None,
        past_execution_seconds: 0,
        evictions: Counts::default(),
        requeues: 0,
        accelerators: Counts::default(),
    }
}

fn oom(container: &str) -> FailureCause {
    FailureCause {
        container: container.to_string(),
        init: false,
        reason: "OOMKilled".into(),
        exit_code: Some(137),
        last_reason: None,
        message: None,
    }
}

#[test]
fn a_workload_before_its_job_is_joined_when_the_job_comes() {
    let mut book = StoryBook::default();
    assert_eq!(
        book.workload(facts("uid-1", "WaitingForQuota")),
        Noted::Unchanged
    );
    assert_eq!(book.orphans(), 1);
    assert_eq!(book.story("uid-1"), None, "not a job yet");
    book.job_seen("uid-1");
    let story = book.story("uid-1").expect("joined");
    assert_eq!(
        story.workload,
        Some(kept(facts("uid-1", "WaitingForQuota")))
    );
    assert_eq!(book.orphans(), 0);
    assert_eq!(
        book.workload(facts("uid-1", "WaitingForQuota")),
        Noted::Unchanged,
        "the same facts again change nothing"
    );
    assert_eq!(
        book.workload(facts("uid-1", "NoMatchingFlavor")),
        Noted::Changed
    );
}

#[test]
fn a_job_deleted_before_its_workload_lets_the_late_facts_go() {
    let mut book = StoryBook::default();
    book.job_seen("uid-1");
    assert_eq!(
        book.workload(facts("uid-1", "WaitingForQuota")),
        Noted::Changed
    );
    book.job_gone("uid-1");
    assert_eq!(book.story("uid-1"), None);
    assert_eq!(book.workload(facts("uid-1", "Finished")), Noted::Unchanged);
    assert_eq!(book.pod("uid-1", Some(oom("trainer"))), Noted::Unchanged);
    assert_eq!(book.orphans(), 0, "not kept waiting for a job that is gone");
}

#[test]
fn a_job_recreated_under_its_name_starts_an_empty_story() {
    // Same namespace and name, a new uid: the book never keys by name.
    let mut book = StoryBook::default();
    book.job_seen("llama-ft-uid-1");
    book.workload(facts("llama-ft-uid-1", "WaitingForQuota"));
    book.pod("llama-ft-uid-1", Some(oom("trainer")));
    book.job_gone("llama-ft-uid-1");
    book.job_seen("llama-ft-uid-2");
    assert_eq!(book.story("llama-ft-uid-2"), None);
    // The old Workload's last update arrives late: it names the old uid.
    book.workload(facts("llama-ft-uid-1", "Finished"));
    assert_eq!(book.story("llama-ft-uid-2"), None, "nothing inherited");
}

#[test]
fn a_trainjobs_pod_reaches_it_through_its_jobset_and_job_and_the_first_cause_stays() {
    let mut book = StoryBook::default();
    book.job_seen("trainjob");
    book.link("jobset", "trainjob");
    book.link("batch-job", "jobset");
    assert_eq!(
        book.pod("batch-job", None),
        Noted::Unchanged,
        "a healthy pod"
    );
    assert_eq!(book.pod("batch-job", Some(oom("node-0"))), Noted::Changed);
    assert_eq!(book.pod("batch-job", Some(oom("node-1"))), Noted::Unchanged);
    let story = book.story("trainjob").expect("a story");
    assert_eq!(
        story.failure.as_ref().map(|f| f.container.as_str()),
        Some("node-0")
    );
    assert_eq!(
        book.story("jobset"),
        None,
        "a child has no story of its own"
    );
}

#[test]
fn a_pod_before_its_links_waits_under_the_uid_it_named() {
    // The pod's owner is a batch Job the book does not know yet: its fact waits as an orphan
    // of that uid and is not joined by a later link (the child's own uid is not a job).
    let mut book = StoryBook::default();
    book.pod("batch-job", Some(oom("node-0")));
    book.job_seen("trainjob");
    book.link("batch-job", "trainjob");
    assert_eq!(book.story("trainjob"), None);
    book.pod("batch-job", Some(oom("node-1")));
    assert_eq!(
        book.story("trainjob")
            .and_then(|s| s.failure.clone())
            .map(|f| f.container),
        Some("node-1".to_string()),
        "facts after the link are joined"
    );
}

#[test]
fn orphans_are_bounded_oldest_first_and_counted() {
    let mut book = StoryBook::new(BookLimits {
        orphans: 3,
        ..BookLimits::default()
    });
    for i in 0..5 {
        book.workload(facts(&format!("uid-{i}"), "WaitingForQuota"));
    }
    assert_eq!((book.orphans(), book.dropped()), (3, 2));
    // Updating an orphan keeps its age: uid-2 is still the oldest left.
    book.workload(facts("uid-2", "NoMatchingFlavor"));
    book.workload(facts("uid-5", "WaitingForQuota"));
    for (uid, kept) in [
        ("uid-0", false),
        ("uid-1", false),
        ("uid-2", false),
        ("uid-3", true),
    ] {
        book.job_seen(uid);
        assert_eq!(book.story(uid).is_some(), kept, "{uid}");
    }
}

#[test]
fn a_loop_of_links_ends() {
    let mut book = StoryBook::default();
    book.link("a", "b");
    book.link("b", "a");
    book.link("c", "c");
    assert_eq!(book.pod("a", Some(oom("x"))), Noted::Unchanged);
    assert_eq!(book.pod("c", Some(oom("x"))), Noted::Unchanged);
}

/// One step of a cluster's objects, over a few uids so that every order happens.
#[derive(Debug, Clone)]
enum Step {
    Seen(u8),
    Gone(u8),
    Workload(u8, u8),
    Pod(u8, Option<u8>),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0..4u8).prop_map(Step::Seen),
        (0..4u8).prop_map(Step::Gone),
        (0..4u8, 0..3u8).prop_map(|(u, r)| Step::Workload(u, r)),
        (0..4u8, proptest::option::of(0..3u8)).prop_map(|(u, c)| Step::Pod(u, c)),
    ]
}

/// What a job's story must be, replayed from the steps: facts since the job was last seen
/// (or while it was not yet seen, after it was last gone), the latest Workload and the first
/// cause; none for a job gone.
#[derive(Default, Clone, PartialEq, Debug)]
struct Model {
    alive: bool,
    gone: bool,
    workload: Option<u8>,
    failure: Option<u8>,
}

proptest! {
    #[test]
    fn every_order_of_jobs_workloads_and_pods_gives_each_job_its_own_facts(
        steps in proptest::collection::vec(step(), 0..60)
    ) {
        let mut book = StoryBook::default();
        let mut model: BTreeMap<u8, Model> = BTreeMap::new();
        let uid = |u: u8| format!("uid-{u}");
        let reason = |r: u8| format!("reason-{r}");
        for step in &steps {
            match *step {
                Step::Seen(u) => {
                    book.job_seen(&uid(u));
                    let m = model.entry(u).or_default();
                    if !m.alive {
                        m.alive = true;
                        m.gone = false;
                    }
                }
                Step::Gone(u) => {
                    book.job_gone(&uid(u));
                    model.insert(u, Model { gone: true, ..Model::default() });
                }
                Step::Workload(u, r) => {
                    let noted = book.workload(facts(&uid(u), &reason(r)));
                    let m = model.entry(u).or_default();
                    if !m.gone {
                        let changed = m.workload != Some(r);
                        m.workload = Some(r);
                        prop_assert_eq!(noted == Noted::Changed, m.alive && changed);
                    } else {
                        prop_assert_eq!(noted, Noted::Unchanged);
                    }
                }
                Step::Pod(u, c) => {
                    let noted = book.pod(&uid(u), c.map(|c| oom(&c.to_string())));
                    let m = model.entry(u).or_default();
                    let first = c.is_some() && !m.gone && m.failure.is_none();
                    if first {
                        m.failure = c;
                    }
                    prop_assert_eq!(noted == Noted::Changed, first && m.alive);
                }
            }
            for (u, m) in &model {
                let story = book.story(&uid(*u));
                let expected = (m.alive && (m.workload.is_some() || m.failure.is_some()))
                    .then(|| Story {
                        workload: m.workload.map(|r| kept(facts(&uid(*u), &reason(r)))),
                        failure: m.failure.map(|c| oom(&c.to_string())),
                    });
                prop_assert_eq!(story.as_deref(), expected.as_ref(), "uid-{} after {:?}", u, step);
            }
        }
    }
}
