//! A job's story as a timeline: what Kueue did with its Workload — queued, admitted, preempted,
//! evicted — noted from the story each version carries, merged with the phases the job
//! entered, for the job's detail (`GET /api/v1/jobs/{cluster}/{namespace}/{name}`, the page,
//! `jobrelay jobs get`).
//!
//! A version's story is a snapshot of the Workload's latest state, so the trail keeps what
//! each snapshot says that the last did not: a wait that began at a new time (its creation, a
//! requeue), an admission at a new time, a preemption count that rose, an eviction for another
//! reason. Kueue writes the times of the first two; a preemption or an eviction is stamped when
//! a version first carried it. A state that came and went between two versions of the job
//! (Kueue's changes ride the job's next version) shows in the counts, not as a mark.
//!
//! Only kinds that tell a story have a trail: a job without one costs one empty pointer. The
//! trail keeps the first mark and the latest [`MAX_MARKS`] − 1, as the history of phases does.

use serde::Serialize;

use crate::record::{JobRecord, Secs, rfc3339};
use jobrelay_contract::event::Phase;
use jobrelay_contract::story::{QueueState, Story};

/// Most marks kept per job: the first and the latest ones.
pub const MAX_MARKS: usize = 8;

/// What Kueue did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum QueueMark {
    /// A wait for quota began (the Workload's creation, or a requeue).
    Queued,
    /// Admitted: its pods may run.
    Admitted,
    /// Preempted by another Workload.
    Preempted,
    /// Evicted for another reason (`PodsReadyTimeout`, `ClusterQueueStopped`, …).
    Evicted,
}

/// One mark of the trail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// When: Kueue's time for a wait or an admission; when first seen for the others.
    pub at: Secs,
    /// What happened.
    pub what: QueueMark,
    /// The cluster queue (else the local queue) it happened in.
    pub queue: Option<Box<str>>,
}

/// What the view keeps of a job's story beyond its queue: the trail of marks, what it counted
/// of Kueue's admissions and preemptions, and the first failure cause.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trail {
    /// The marks, oldest first: the first, then the latest [`MAX_MARKS`] − 1.
    pub marks: Vec<Mark>,
    /// Preemptions the story counted at the last version read (for a job created before the
    /// view began, from its first story: those before are not news, when they happened is
    /// not known).
    pub preemptions: u32,
    /// When the last preemption counted evicted it, as Kueue dates it (0: not known): what a
    /// counting timer dates it by.
    pub preempted_at: Secs,
    /// When Kueue last admitted it, as the story last said (0: never read), so an admission is
    /// news once however many versions carry it.
    pub admitted_at: Secs,
    /// The cluster queue of that admission: where a preemption happened once Kueue has
    /// released the quota (and with it the admission's cluster queue).
    pub admitted_in: Option<Box<str>>,
    /// The first failure cause its pods showed (`OOMKilled`, `ImagePullBackOff`, …).
    pub cause: Option<Box<str>>,
}

impl Trail {
    fn push(&mut self, mark: Mark) {
        if self.marks.len() >= MAX_MARKS {
            self.marks.remove(1);
        }
        self.marks.push(mark);
    }

    fn has(&self, what: QueueMark, at: Secs) -> bool {
        self.marks.iter().any(|m| m.what == what && m.at == at)
    }
}

/// What a version's story tells the SLIs that the trail did not hold ([`crate::sli`]).
#[derive(Debug, Clone, PartialEq)]
pub struct KueueNews {
    /// The cluster queue it happened in (the local queue when none is known).
    pub queue: Box<str>,
    /// A new admission: seconds from the start of the wait it ended (Kueue's rule: the last
    /// requeue, else the Workload's creation) to the admission. Only one after the view began.
    pub admitted_after: Option<f64>,
    /// Preemptions since the last story read.
    pub preempted: u32,
}

/// Notes on `rec`'s trail what `event`'s story says that the trail does not hold yet, and
/// returns what of it is news for the SLIs. `now` stamps what Kueue writes no time for; an
/// admission before the view `began` is marked but not news, and the preemptions a job created
/// before it already has at its first story are neither. A version with no story changes
/// nothing.
pub(super) fn note(
    rec: &mut JobRecord,
    story: Option<&Story>,
    now: Secs,
    began: Secs,
) -> Option<KueueNews> {
    let story = story?;
    let old = rec.created < began;
    let trail = rec.trail.get_or_insert_with(|| {
        let preemptions = story.workload.as_ref().filter(|_| old);
        // The last preemption's time is known only while the Workload is still evicted by it.
        let preempted_at = preemptions
            .filter(|w| {
                matches!(
                    w.state,
                    QueueState::Evicted {
                        preempted: Some(_),
                        ..
                    }
                )
            })
            .and_then(|w| w.evicted_at)
            .and_then(|t| Secs::try_from(t.timestamp()).ok())
            .unwrap_or(0);
        Box::new(Trail {
            preemptions: preemptions.map_or(0, |w| w.preemptions()),
            preempted_at,
            ..Trail::default()
        })
    });
    if trail.cause.is_none()
        && let Some(failure) = &story.failure
        && !failure.reason.is_empty()
    {
        trail.cause = Some(failure.reason.as_str().into());
    }
    let facts = story.workload.as_ref()?;
    let secs = |t: chrono::DateTime<chrono::FixedOffset>| Secs::try_from(t.timestamp()).ok();
    // Names are borrowed from the facts and copied only into a mark or news: most versions
    // repeat what the trail holds, and cost no allocation.
    let local = facts.local_queue.as_deref();
    let admitted_queue = facts.cluster_queue.as_deref().or(local);
    let boxed = |name: Option<&str>| name.map(Box::from);
    let mut admitted_after = None;
    if let (QueueState::Admitted, Some(at)) = (&facts.state, facts.admitted_at.and_then(secs))
        && at != trail.admitted_at
    {
        trail.admitted_at = at;
        trail.admitted_in = boxed(admitted_queue);
        if !trail.has(QueueMark::Admitted, at) {
            trail.push(Mark {
                at,
                what: QueueMark::Admitted,
                queue: boxed(admitted_queue),
            });
        }
        if at >= began {
            let waited_from = facts.waiting_since.and_then(secs).unwrap_or(rec.created);
            admitted_after = Some(f64::from(at) - f64::from(waited_from));
        }
    }
    // Where a preemption or eviction happened: the admission it ended.
    let ended = |trail: &Trail| {
        boxed(
            facts
                .cluster_queue
                .as_deref()
                .or(trail.admitted_in.as_deref())
                .or(local),
        )
    };
    let evicted_at = facts.evicted_at.and_then(secs).unwrap_or(now);
    let count = facts.preemptions();
    let preempted = count.saturating_sub(trail.preemptions);
    if preempted > 0 {
        trail.preempted_at = evicted_at;
        let queue = ended(trail);
        trail.push(Mark {
            at: evicted_at,
            what: QueueMark::Preempted,
            queue,
        });
    }
    // Never lowered: a story can reach the view after a newer one (a job's version made just
    // before its Workload changed, and told after the change's news), and a count taken back
    // would make the next one a preemption twice. A Workload re-created for the job (its count
    // from 0 again) so adds marks only past the old count.
    trail.preemptions = trail.preemptions.max(count);
    match &facts.state {
        QueueState::Queued { .. } => {
            let since = facts.waiting_since.and_then(secs).unwrap_or(rec.created);
            if !trail.has(QueueMark::Queued, since) {
                trail.push(Mark {
                    at: since,
                    what: QueueMark::Queued,
                    queue: boxed(local.or(admitted_queue)),
                });
            }
        }
        QueueState::Evicted {
            preempted: None, ..
        } if !trail.has(QueueMark::Evicted, evicted_at)
            && trail.marks.last().map(|m| m.what) != Some(QueueMark::Evicted) =>
        {
            let queue = ended(trail);
            trail.push(Mark {
                at: evicted_at,
                what: QueueMark::Evicted,
                queue,
            });
        }
        _ => {}
    }
    if admitted_after.is_none() && preempted == 0 {
        return None;
    }
    let queue = if preempted > 0 {
        ended(trail)
    } else {
        boxed(admitted_queue)
    };
    Some(KueueNews {
        queue: queue?,
        admitted_after,
        preempted,
    })
}

/// One line of a job's timeline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimelineEntry {
    /// RFC 3339.
    pub at: Option<String>,
    /// A phase the job entered, or what Kueue did.
    #[serde(flatten)]
    pub what: TimelineWhat,
}

/// What a timeline entry is.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum TimelineWhat {
    /// The job entered a phase.
    Phase {
        /// The phase.
        phase: Phase,
        /// Rebuilt from status timestamps after a watch gap rather than observed.
        synthetic: bool,
    },
    /// Kueue did something with its Workload.
    Kueue {
        /// What.
        mark: QueueMark,
        /// In which queue.
        #[serde(skip_serializing_if = "Option::is_none")]
        queue: Option<String>,
    },
}

/// The phases `rec` entered and its trail's marks, oldest first (a phase before a mark of the
/// same second).
pub(super) fn timeline(rec: &JobRecord) -> Vec<TimelineEntry> {
    let mut entries: Vec<(Secs, u8, TimelineEntry)> = rec
        .history
        .iter()
        .map(|t| {
            let entry = TimelineEntry {
                at: rfc3339(t.at),
                what: TimelineWhat::Phase {
                    phase: t.phase,
                    synthetic: t.synthetic,
                },
            };
            (t.at, 0, entry)
        })
        .collect();
    if let Some(trail) = &rec.trail {
        entries.extend(trail.marks.iter().map(|m| {
            let entry = TimelineEntry {
                at: rfc3339(m.at),
                what: TimelineWhat::Kueue {
                    mark: m.what,
                    queue: m.queue.as_deref().map(str::to_string),
                },
            };
            (m.at, 1, entry)
        }));
    }
    entries.sort_by_key(|(at, order, _)| (*at, *order));
    entries.into_iter().map(|(_, _, e)| e).collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::jobs::test_support::*;
    use crate::record::Transition;
    use jobrelay_contract::event::JobEvent;
    use jobrelay_contract::story::{FailureCause, Story};

    fn note_event(
        rec: &mut JobRecord,
        event: &JobEvent,
        now: Secs,
        began: Secs,
    ) -> Option<KueueNews> {
        note(rec, event.story.as_deref(), now, began)
    }

    fn marks(rec: &JobRecord) -> Vec<(Secs, QueueMark, Option<&str>)> {
        let trail = rec.trail.as_ref().expect("a trail");
        trail
            .marks
            .iter()
            .map(|m| (m.at, m.what, m.queue.as_deref()))
            .collect()
    }

    /// `event` with its Workload evicted at `at` (Kueue's `Evicted=True` time).
    fn evicted_at(mut event: JobEvent, at: Secs) -> JobEvent {
        if let Some(story) = event.story.as_mut().map(Arc::make_mut)
            && let Some(w) = story.workload.as_mut()
        {
            w.evicted_at = Some(time(at));
            w.cluster_queue = None;
        }
        event
    }

    /// Queued, admitted, preempted, requeued, admitted again: one mark each however many
    /// versions repeat a state, the SLI news once each, and the timeline merges the marks with
    /// the phases by time.
    #[test]
    fn each_thing_kueue_did_is_marked_and_news_once() {
        let t0 = BEGAN + 100;
        let mut rec = record(t0);
        let mut news = Vec::new();
        let versions = [
            (version(queued(), None, t0, 0), t0 + 1),
            (version(queued(), None, t0, 0), t0 + 2),
            (version(QueueState::Admitted, Some(t0 + 60), t0, 0), t0 + 61),
            (version(QueueState::Admitted, Some(t0 + 60), t0, 0), t0 + 90),
            (
                evicted_at(version(evicted(), None, t0, 1), t0 + 295),
                t0 + 300,
            ),
            (
                evicted_at(version(evicted(), None, t0, 1), t0 + 295),
                t0 + 305,
            ),
            (version(queued(), None, t0 + 310, 1), t0 + 311),
            (
                version(QueueState::Admitted, Some(t0 + 400), t0 + 310, 1),
                t0 + 401,
            ),
        ];
        for (event, now) in &versions {
            news.extend(note_event(&mut rec, event, *now, BEGAN));
        }
        assert_eq!(
            marks(&rec),
            [
                (t0, QueueMark::Queued, Some("team-a")),
                (t0 + 60, QueueMark::Admitted, Some("a100")),
                (t0 + 295, QueueMark::Preempted, Some("a100")),
                (t0 + 310, QueueMark::Queued, Some("team-a")),
                (t0 + 400, QueueMark::Admitted, Some("a100")),
            ],
            "the preemption in the queue of the admission it ended, at Kueue's time"
        );
        let told: Vec<(&str, Option<f64>, u32)> = news
            .iter()
            .map(|n| (&*n.queue, n.admitted_after, n.preempted))
            .collect();
        assert_eq!(
            told,
            [
                ("a100", Some(60.0), 0),
                ("a100", None, 1),
                // Requeued at +310, admitted at +400: a wait of 90 s from the requeue.
                ("a100", Some(90.0), 0),
            ]
        );
        rec.enter(Transition {
            at: t0 + 61,
            phase: Phase::Running,
            synthetic: false,
        });
        let line: Vec<String> = timeline(&rec)
            .iter()
            .map(|e| match &e.what {
                TimelineWhat::Phase { phase, .. } => phase.as_str().to_string(),
                TimelineWhat::Kueue { mark, .. } => format!("{mark:?}"),
            })
            .collect();
        assert_eq!(
            line,
            [
                "pending",
                "Queued",
                "Admitted",
                "running",
                "Preempted",
                "Queued",
                "Admitted"
            ]
        );
    }

    /// What happened before the view began is marked where Kueue dates it but is no news: an
    /// old admission, and the preemptions an old job had at its first story.
    #[test]
    fn what_happened_before_the_view_began_is_not_news() {
        let mut rec = record(BEGAN - 500);
        let old = version(QueueState::Admitted, Some(BEGAN - 100), BEGAN - 400, 2);
        assert_eq!(note_event(&mut rec, &old, BEGAN + 1, BEGAN), None);
        assert_eq!(
            marks(&rec),
            [(BEGAN - 100, QueueMark::Admitted, Some("a100"))]
        );
        let third = evicted_at(version(evicted(), None, BEGAN - 400, 3), BEGAN + 8);
        let news = note_event(&mut rec, &third, BEGAN + 9, BEGAN).expect("a preemption");
        assert_eq!((&*news.queue, news.preempted), ("a100", 1));
    }

    /// An eviction for another reason than a preemption is marked once, at Kueue's time, in
    /// the queue of the admission it ended; it is no preemption.
    #[test]
    fn another_eviction_is_marked_once() {
        let mut rec = record(BEGAN + 1);
        note_event(
            &mut rec,
            &version(QueueState::Admitted, Some(BEGAN + 5), BEGAN + 1, 0),
            BEGAN + 6,
            BEGAN,
        );
        let timeout = QueueState::Evicted {
            reason: "PodsReadyTimeout".into(),
            message: String::new(),
            preempted: None,
        };
        for now in [BEGAN + 30, BEGAN + 31] {
            let news = note_event(
                &mut rec,
                &evicted_at(version(timeout.clone(), None, BEGAN + 1, 0), BEGAN + 29),
                now,
                BEGAN,
            );
            assert_eq!(news, None);
        }
        assert_eq!(
            marks(&rec),
            [
                (BEGAN + 5, QueueMark::Admitted, Some("a100")),
                (BEGAN + 29, QueueMark::Evicted, Some("a100")),
            ]
        );
    }

    /// The trail is bounded: the first mark and the latest ones.
    /// A story older than one already noted (a job's version made just before its Workload
    /// was preempted, reaching the view after the preemption's news) takes no count back:
    /// the preemption is marked and told once.
    #[test]
    fn a_stale_story_after_a_newer_one_marks_nothing_twice() {
        let t0 = BEGAN + 100;
        let mut rec = record(t0);
        let mut news = Vec::new();
        let versions = [
            (version(QueueState::Admitted, Some(t0 + 60), t0, 0), t0 + 61),
            (
                evicted_at(version(evicted(), None, t0, 1), t0 + 295),
                t0 + 300,
            ),
            (
                version(QueueState::Admitted, Some(t0 + 60), t0, 0),
                t0 + 301,
            ),
            (
                evicted_at(version(evicted(), None, t0, 1), t0 + 295),
                t0 + 302,
            ),
        ];
        for (event, now) in &versions {
            news.extend(note_event(&mut rec, event, *now, BEGAN));
        }
        let preempted = marks(&rec)
            .iter()
            .filter(|(_, what, _)| *what == QueueMark::Preempted)
            .count();
        assert_eq!(preempted, 1, "{:?}", marks(&rec));
        assert_eq!(news.iter().map(|n| n.preempted).sum::<u32>(), 1);
    }

    #[test]
    fn the_trail_is_bounded() {
        let mut rec = record(BEGAN + 1);
        for i in 0..50 {
            let at = BEGAN + 10 + i * 10;
            note_event(
                &mut rec,
                &version(QueueState::Admitted, Some(at), at - 5, 0),
                at,
                BEGAN,
            );
        }
        let kept = marks(&rec);
        assert_eq!(kept.len(), MAX_MARKS);
        assert_eq!(kept[0].0, BEGAN + 10, "the first stays");
        assert_eq!(kept[MAX_MARKS - 1].0, BEGAN + 500, "the latest is kept");
    }

    /// The first failure cause stays; a version without a story, or a Workload in no queue,
    /// is no news.
    #[test]
    fn the_first_cause_stays_and_no_queue_is_no_news() {
        let mut rec = record(BEGAN + 1);
        assert_eq!(note_event(&mut rec, &bare(), BEGAN + 2, BEGAN), None);
        assert!(rec.trail.is_none());
        let failing = |reason: &str| {
            let mut event = bare();
            event.story = Some(Arc::new(Story {
                workload: None,
                failure: Some(FailureCause {
                    container: "trainer".into(),
                    init: false,
                    reason: reason.into(),
                    exit_code: Some(137),
                    last_reason: None,
                    message: None,
                }),
            }));
            event
        };
        note_event(&mut rec, &failing("OOMKilled"), BEGAN + 3, BEGAN);
        note_event(&mut rec, &failing("Error"), BEGAN + 4, BEGAN);
        assert_eq!(
            rec.trail.as_ref().and_then(|t| t.cause.as_deref()),
            Some("OOMKilled")
        );
        let mut no_queue = version(QueueState::Admitted, Some(BEGAN + 5), BEGAN + 1, 0);
        if let Some(story) = no_queue.story.as_mut().map(Arc::make_mut)
            && let Some(w) = story.workload.as_mut()
        {
            w.cluster_queue = None;
            w.local_queue = None;
        }
        assert_eq!(note_event(&mut rec, &no_queue, BEGAN + 6, BEGAN), None);
    }
}
