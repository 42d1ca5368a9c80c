//! One stay in Kueue's queue, one key, attacked with generated lives.
//!
//! A Volcano job managed by Kueue goes through a random life — waits for quota, is admitted
//! and runs, is preempted (suspended at once, or still running while its pods stop, or
//! suspended a second later and seen so before the Workload's eviction), is
//! requeued with no change of the job, is touched (a new version, nothing else) — with a clock
//! moved by random steps of 0 to 2.5 s, so stays are often entered within one second of the
//! whole-second times Kueue and Volcano write (preempted, requeued, admitted and preempted
//! again within one second). Its Workload's facts are made per step as the Workload reader
//! gives them, and the watcher's own [`Tracker`] sees each job version with the story as it
//! stands, and a requeue with no version the way a job stream does (`wants_story`, then
//! `restory` with the job read again). What must hold (`docs/delivery.md`):
//!
//! - every stay the life went through reaches the tracker's events, in order, each under a
//!   key of its own, and every event of one stay carries that stay's key;
//! - a tracker that starts afresh at any point (a restart, whose first list has the Workload
//!   already) names a stay in the queue with the same key: its Workload's time and count.

use std::sync::Arc;

use chrono::{DateTime, Duration, SecondsFormat, Utc};
use jobrelay_contract::event::{JobEvent, Phase};
use jobrelay_contract::story::{Preemption, QueueState, Story, WorkloadFacts};
use jobrelay_watch::kinds::JobKind;
use jobrelay_watch::object::JobObject;
use jobrelay_watch::watcher::{Observation, Tracker};
use kube::runtime::watcher::Event;
use proptest::prelude::*;

/// A step of a generated life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Kueue admits the Workload; the job runs.
    Admit,
    /// Kueue preempts it; the job is suspended at once (`true`), or still runs a while.
    Preempt(bool),
    /// Kueue preempts it and the job is suspended a second later, its version seen before
    /// the Workload's eviction (separate streams keep no order): a suspended stay, then the
    /// preempted one, dated before it by the Workload.
    PreemptSeenLate,
    /// Kueue requeues it (after a preemption): the job stays as it is.
    Requeue,
    /// A new version of the job that changes nothing of its status (a label).
    Touch,
}

/// Where a life is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    Queued,
    Running,
    Preempted,
}

fn choices(at: At) -> &'static [Step] {
    match at {
        At::Queued => &[Step::Admit, Step::Touch],
        At::Running => &[
            Step::Preempt(true),
            Step::Preempt(false),
            Step::PreemptSeenLate,
            Step::Touch,
        ],
        At::Preempted => &[Step::Requeue, Step::Touch],
    }
}

fn seconds(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// The job's object: a Volcano job in `phase` since `since`.
fn job(rv: u32, phase: &str, since: &str, created: &str) -> JobObject {
    JobObject::from_json(
        &serde_json::json!({
            "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "llama-ft", "namespace": "ml", "uid": "u1",
                         "resourceVersion": rv.to_string(), "creationTimestamp": created},
            "status": {"state": {"phase": phase, "lastTransitionTime": since}}
        })
        .to_string(),
    )
    .expect("a readable job")
}

/// The Workload's facts as the reader gives them, Kueue having counted `preemptions`.
fn workload(
    state: QueueState,
    waiting: &str,
    evicted: Option<&str>,
    preemptions: u32,
) -> Arc<Story> {
    let at = |t: &str| DateTime::parse_from_rfc3339(t).ok();
    Arc::new(Story {
        workload: Some(WorkloadFacts {
            job_uid: None,
            state,
            cluster_queue: Some("a100".into()),
            local_queue: Some("team-a".into()),
            waiting_since: at(waiting),
            admitted_at: None,
            evicted_at: evicted.and_then(at),
            past_execution_seconds: 0,
            evictions: if preemptions == 0 {
                Default::default()
            } else {
                [("Preempted".to_string(), preemptions)].into()
            },
            requeues: 0,
            accelerators: Default::default(),
        }),
        failure: None,
    })
}

fn queued() -> QueueState {
    QueueState::Queued {
        reason: "Pending".into(),
        message: "couldn't assign flavors to pod set main: insufficient quota".into(),
    }
}

fn preempted() -> QueueState {
    QueueState::Evicted {
        reason: "Preempted".into(),
        message: "Preempted to accommodate a workload".into(),
        preempted: Some(Preemption {
            reason: "InClusterQueue".into(),
            message: "Preempted to accommodate a workload (UID: w-2)".into(),
        }),
    }
}

fn versions(observations: Vec<Observation>) -> Vec<JobEvent> {
    observations
        .into_iter()
        .filter_map(|o| match o {
            Observation::Version(seen) => Some(seen.event),
            Observation::Listed(_) | Observation::Story(_) => None,
        })
        .collect()
}

fn tracker() -> Tracker {
    let kind = JobKind::builtin("volcano-job").expect("built-in");
    Tracker::new(Arc::from("east"), Arc::new(kind), None)
}

/// A life: per step a choice among what may follow, and the clock's move before it (ms).
type Life = Vec<(usize, u64)>;

fn life() -> impl Strategy<Value = Life> {
    let gap = prop_oneof![
        3 => Just(0u64),
        3 => 1u64..400,
        2 => 400u64..1000,
        2 => 1000u64..2500,
    ];
    proptest::collection::vec((0usize..4, gap), 1..24)
}

/// What a played life gave: per event the live tracker made, the stay it belongs to
/// (numbered in order) and the event; per step, the stay and the key a fresh tracker gave.
struct Played {
    events: Vec<(usize, JobEvent)>,
    fresh: Vec<(usize, String)>,
}

/// Plays `life`.
fn play(life: &Life) -> Played {
    let start: DateTime<Utc> = "2026-12-07T10:00:00Z".parse().expect("a time");
    let created = seconds(start);
    let mut now = start;
    let mut live = tracker();
    let mut events: Vec<(usize, JobEvent)> = Vec::new();
    let mut fresh: Vec<(usize, String)> = Vec::new();
    // The job's status and its Workload's, as the kit's Kueue would leave them.
    let mut rv = 1;
    let (mut phase, mut since) = ("Pending", created.clone());
    let mut preemptions = 0;
    let mut story = workload(queued(), &created, None, preemptions);
    let mut stay = 0;
    let mut at = At::Queued;
    events.extend(
        versions(live.observe_with(
            Event::Apply(job(rv, phase, &since, &created)),
            Some(story.clone()),
        ))
        .into_iter()
        .map(|e| (stay, e)),
    );
    for (choice, gap) in life {
        now += Duration::milliseconds(*gap as i64);
        let options = choices(at);
        let step = options[choice % options.len()];
        let t = seconds(now);
        let mut job_changed = true;
        match step {
            Step::Admit => {
                story = workload(
                    QueueState::Admitted,
                    &story_waiting(&story),
                    None,
                    preemptions,
                );
                (phase, since) = ("Running", t.clone());
                stay += 1;
                at = At::Running;
            }
            Step::Preempt(suspended) => {
                preemptions += 1;
                story = workload(preempted(), &story_waiting(&story), Some(&t), preemptions);
                if suspended {
                    (phase, since) = ("Aborted", t.clone());
                } else {
                    job_changed = false;
                }
                stay += 1;
                at = At::Preempted;
            }
            Step::PreemptSeenLate => {
                let suspended = seconds(now + Duration::seconds(1));
                rv += 1;
                (phase, since) = ("Aborted", suspended);
                stay += 1;
                let seen = live.observe_with(
                    Event::Apply(job(rv, phase, &since, &created)),
                    Some(story.clone()),
                );
                events.extend(versions(seen).into_iter().map(|e| (stay, e)));
                preemptions += 1;
                story = workload(preempted(), &story_waiting(&story), Some(&t), preemptions);
                job_changed = false;
                stay += 1;
                at = At::Preempted;
            }
            Step::Requeue => {
                // Kueue suspends a job it evicted before it releases its quota: a job still
                // running is suspended first, a version in the same preempted stay.
                if phase == "Running" {
                    rv += 1;
                    (phase, since) = ("Aborted", t.clone());
                    let seen = live.observe_with(
                        Event::Apply(job(rv, phase, &since, &created)),
                        Some(story.clone()),
                    );
                    events.extend(versions(seen).into_iter().map(|e| (stay, e)));
                }
                story = workload(queued(), &t, None, preemptions);
                job_changed = false;
                stay += 1;
                at = At::Queued;
            }
            Step::Touch => {}
        }
        if job_changed {
            rv += 1;
            let seen = live.observe_with(
                Event::Apply(job(rv, phase, &since, &created)),
                Some(story.clone()),
            );
            events.extend(versions(seen).into_iter().map(|e| (stay, e)));
        } else if live.wants_story("u1", &story) {
            let seen = live.restory(job(rv, phase, &since, &created), Some(story.clone()));
            events.extend(versions(seen).into_iter().map(|e| (stay, e)));
        }
        // A restart here: a tracker that knows nothing lists the job, the Workload known.
        let mut restarted = tracker();
        let mut listed = restarted.observe_with(Event::Init, None);
        listed.extend(restarted.observe_with(
            Event::InitApply(job(rv, phase, &since, &created)),
            Some(story.clone()),
        ));
        if let Some(e) = versions(listed).into_iter().next() {
            fresh.push((stay, e.transition_key));
        }
    }
    Played { events, fresh }
}

/// When the Workload's current wait began, as text.
fn story_waiting(story: &Story) -> String {
    story
        .workload
        .as_ref()
        .and_then(|w| w.waiting_since)
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Secs, true))
        .expect("a wait")
}

fn check(life: &Life) -> Result<(), TestCaseError> {
    let Played { events, fresh } = play(life);
    let stays = events.last().map_or(0, |(s, _)| *s + 1);
    // Every stay reaches the events, in order.
    let mut reached: Vec<usize> = events.iter().map(|(s, _)| *s).collect();
    reached.dedup();
    prop_assert_eq!(reached, (0..stays).collect::<Vec<_>>(), "{:#?}", events);
    // One key per stay, and never one key for two stays.
    let mut keys: Vec<Option<&str>> = vec![None; stays];
    for (stay, event) in &events {
        match keys[*stay] {
            None => keys[*stay] = Some(&event.transition_key),
            Some(key) => prop_assert_eq!(key, event.transition_key.as_str(), "{:#?}", events),
        }
    }
    let mut distinct = keys.clone();
    distinct.sort();
    distinct.dedup();
    prop_assert_eq!(distinct.len(), stays, "two stays share a key: {:#?}", keys);
    // The phases are the life's: queued, running, preempted, and suspended while a
    // preemption is not yet seen.
    for (_, event) in &events {
        prop_assert!(
            matches!(
                event.phase,
                Phase::Queued | Phase::Running | Phase::Preempted | Phase::Suspended
            ),
            "{:?}",
            event
        );
    }
    // A restart names a stay in the queue as the live tracker did.
    for (stay, key) in &fresh {
        let Some(Some(live)) = keys.get(*stay) else {
            continue;
        };
        if live.contains("/queued@") || live.contains("/preempted@") {
            prop_assert_eq!(*live, key.as_str(), "after a restart in stay {}", stay);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn every_stay_in_kueues_queue_has_a_key_of_its_own(life in life()) {
        check(&life)?;
    }
}

/// The repeat generated on purpose: preempted, requeued, admitted and preempted again, all in
/// one second. Kueue's count tells each stay in the queue apart (the second preemption
/// `#2`, the wait after it `#3`), and the watcher numbers the second run in that second.
#[test]
fn two_preemptions_in_one_second_are_two_stays() {
    // Admit, Preempt(suspended), Requeue, Admit, Preempt(suspended), Requeue — no clock move.
    let life: Life = vec![(0, 1000), (0, 0), (0, 0), (0, 0), (0, 0), (0, 0)];
    let events = play(&life).events;
    let keys: Vec<&str> = events
        .iter()
        .map(|(_, e)| e.transition_key.as_str())
        .collect();
    assert_eq!(
        keys,
        [
            "east/u1/queued@2026-12-07T10:00:00Z",
            "east/u1/running@2026-12-07T10:00:01Z",
            "east/u1/preempted@2026-12-07T10:00:01Z",
            "east/u1/queued@2026-12-07T10:00:01Z#2",
            "east/u1/running@2026-12-07T10:00:01Z#2",
            "east/u1/preempted@2026-12-07T10:00:01Z#2",
            "east/u1/queued@2026-12-07T10:00:01Z#3",
        ]
    );
    check(&life).expect("the life holds");
}
