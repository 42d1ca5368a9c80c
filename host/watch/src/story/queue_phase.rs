//! The phases a job's Kueue Workload says and its own status cannot: `queued` (waiting for
//! quota) and `preempted` (evicted to make room for another job, not yet back in its queue).
//!
//! A job Kueue manages is created suspended and is suspended again when Kueue evicts it, so
//! its own status tells a job waiting two hours for quota from any pending job no better than
//! a preempted job from a suspended one. Its Workload does, and the teams' questions ("why
//! hasn't it started", "was it preempted or did it fail") are about exactly these stays, so
//! they are phases of their own — each its own transition, with its own key — for a kind
//! whose story reads Workloads.
//!
//! The Workload only refines a phase that means "not running for now": a finished or deleted
//! job is what its status says whatever its Workload still shows, and a running job is only
//! ever `preempted` (its pods are being stopped), never `queued`. When each stay began comes
//! from the Workload, as Kueue writes it, so the same stay seen after a restart has the same
//! key: a wait from the last `Requeued` (else the Workload's creation), a preemption from its
//! `Evicted` condition. Kueue writes those times in whole seconds, and a job can be preempted,
//! requeued, admitted and preempted again within one; so each stay is also numbered by
//! Kueue's own count (`schedulingStats.evictions`): the n-th preemption, the wait after the
//! n-th eviction. Time and count together repeat for no two stays, and survive a restart.
//!
//! A pure function of the job's phase and its story.

use chrono::{DateTime, FixedOffset, SecondsFormat};

use jobrelay_contract::event::Phase;
use jobrelay_contract::story::{QueueState, Story};

/// A stay the Workload says: its phase, when it began (the Workload's time as RFC 3339 text,
/// `None` when Kueue wrote none), and Kueue's reason and message for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueStay {
    /// `queued` or `preempted`.
    pub phase: Phase,
    /// When the stay began.
    pub since: Option<String>,
    /// Which stay of its phase it is, by Kueue's count: 1 for the first wait (no eviction
    /// yet) and the first preemption, n + 1 for the wait after n evictions, n for the n-th
    /// preemption.
    pub n: u32,
    /// Kueue's reason (`QuotaReserved=False`'s, or `Preempted=True`'s).
    pub reason: String,
    /// Kueue's message, which names the preemptor where Kueue says it.
    pub message: String,
}

/// The stay `story`'s Workload puts a job in whose own status says `phase`, if it refines it.
pub fn queue_stay(phase: Phase, story: Option<&Story>) -> Option<QueueStay> {
    let workload = story?.workload.as_ref()?;
    let text = |t: &Option<DateTime<FixedOffset>>| {
        t.map(|t| t.to_rfc3339_opts(SecondsFormat::AutoSi, true))
    };
    match &workload.state {
        QueueState::Queued { reason, message }
            if matches!(phase, Phase::Pending | Phase::Suspended) =>
        {
            Some(QueueStay {
                phase: Phase::Queued,
                since: text(&workload.waiting_since),
                n: 1 + workload.evictions.iter().map(|(_, n)| *n).sum::<u32>(),
                reason: reason.clone(),
                message: message.clone(),
            })
        }
        QueueState::Evicted {
            preempted: Some(preemption),
            ..
        } if matches!(
            phase,
            Phase::Pending | Phase::Suspended | Phase::Running | Phase::Restarting
        ) =>
        {
            Some(QueueStay {
                phase: Phase::Preempted,
                since: text(&workload.evicted_at),
                n: workload.preemptions().max(1),
                reason: preemption.reason.clone(),
                message: preemption.message.clone(),
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobrelay_contract::story::{Preemption, WorkloadFacts};

    fn at(text: &str) -> Option<DateTime<FixedOffset>> {
        Some(DateTime::parse_from_rfc3339(text).expect("a time"))
    }

    fn story(state: QueueState) -> Story {
        Story {
            workload: Some(WorkloadFacts {
                job_uid: None,
                state,
                cluster_queue: Some("a100".into()),
                local_queue: Some("ml".into()),
                waiting_since: at("2026-12-07T10:00:00Z"),
                admitted_at: None,
                evicted_at: at("2026-12-07T11:30:00Z"),
                past_execution_seconds: 0,
                evictions: Default::default(),
                requeues: 0,
                accelerators: Default::default(),
            }),
            failure: None,
        }
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
                message: "Preempted to accommodate a workload (UID: w-2) due to prioritization"
                    .into(),
            }),
        }
    }

    #[test]
    fn a_job_waiting_for_quota_is_queued_from_when_its_wait_began() {
        for phase in [Phase::Pending, Phase::Suspended] {
            let stay = queue_stay(phase, Some(&story(queued()))).expect("queued");
            assert_eq!(stay.phase, Phase::Queued);
            assert_eq!(stay.since.as_deref(), Some("2026-12-07T10:00:00Z"));
            assert_eq!(stay.reason, "Pending");
            assert!(
                stay.message.contains("insufficient quota"),
                "{}",
                stay.message
            );
        }
    }

    #[test]
    fn a_preempted_job_is_preempted_from_its_eviction_until_requeued() {
        for phase in [
            Phase::Suspended,
            Phase::Pending,
            Phase::Running,
            Phase::Restarting,
        ] {
            let stay = queue_stay(phase, Some(&story(preempted()))).expect("preempted");
            assert_eq!(stay.phase, Phase::Preempted);
            assert_eq!(stay.since.as_deref(), Some("2026-12-07T11:30:00Z"));
            assert_eq!(stay.reason, "InClusterQueue");
            assert!(stay.message.contains("w-2"), "{}", stay.message);
        }
    }

    #[test]
    fn what_the_status_ends_and_what_kueue_does_not_hold_stay_as_they_are() {
        // Finished, deleted or unreadable jobs are what their status says.
        for phase in [
            Phase::Succeeded,
            Phase::Failed,
            Phase::Terminating,
            Phase::Deleted,
            Phase::Unknown,
        ] {
            assert_eq!(queue_stay(phase, Some(&story(queued()))), None, "{phase}");
            assert_eq!(
                queue_stay(phase, Some(&story(preempted()))),
                None,
                "{phase}"
            );
        }
        // A running job is never waiting for quota (a Workload read late says so).
        assert_eq!(queue_stay(Phase::Running, Some(&story(queued()))), None);
        // Admitted, reserved, finished Workloads and evictions that are no preemption.
        let not_preempted = QueueState::Evicted {
            reason: "PodsReadyTimeout".into(),
            message: "Exceeded the PodsReady timeout".into(),
            preempted: None,
        };
        for state in [
            QueueState::Admitted,
            QueueState::Reserved,
            not_preempted,
            QueueState::Finished {
                reason: "Succeeded".into(),
                message: String::new(),
            },
        ] {
            assert_eq!(queue_stay(Phase::Suspended, Some(&story(state))), None);
        }
        // No story, or one of pods alone.
        assert_eq!(queue_stay(Phase::Pending, None), None);
        assert_eq!(queue_stay(Phase::Pending, Some(&Story::default())), None);
    }

    /// Kueue's count numbers the stays: the wait after two evictions is the third, the second
    /// preemption the second.
    #[test]
    fn each_stay_is_numbered_by_kueues_count() {
        let count = |state, evictions: [(String, u32); 2]| {
            let mut story = story(state);
            if let Some(w) = story.workload.as_mut() {
                w.evictions = evictions.into();
            }
            story
        };
        let evictions = || {
            [
                ("Preempted".to_string(), 2),
                ("PodsReadyTimeout".to_string(), 1),
            ]
        };
        let waiting = queue_stay(Phase::Suspended, Some(&count(queued(), evictions())));
        assert_eq!(waiting.map(|s| s.n), Some(4));
        let again = queue_stay(Phase::Suspended, Some(&count(preempted(), evictions())));
        assert_eq!(again.map(|s| s.n), Some(2));
        assert_eq!(
            queue_stay(Phase::Pending, Some(&story(queued()))).map(|s| s.n),
            Some(1)
        );
        assert_eq!(
            queue_stay(Phase::Running, Some(&story(preempted()))).map(|s| s.n),
            Some(1),
            "a preemption Kueue has not counted yet is the first"
        );
    }

    #[test]
    fn a_workload_without_times_gives_a_stay_with_none() {
        let mut story = story(queued());
        if let Some(w) = story.workload.as_mut() {
            w.waiting_since = None;
        }
        let stay = queue_stay(Phase::Pending, Some(&story)).expect("queued");
        assert_eq!(stay.since, None);
    }
}
