//! How long a watch stream waits before trying again, after a failure.
//!
//! kube's watcher yields an `Init` before every attempt to list, and the backoff it offers
//! (`default_backoff`) starts afresh on anything that is not an error — so a list that keeps
//! failing (a cluster down, a token refused) was tried about once a second, forever, with two
//! log lines each time. Here the wait grows until the API *answers* with data (a listed object,
//! the end of a list, a watch event: [`answers`]) and only then starts again from the shortest.
//!
//! Two schedules: a failure (the API unreachable, refusing, erring) waits 0.8 s doubling to
//! 30 s; a kind the cluster does not serve (its list answered 404: the CRD is not installed)
//! is looked for again from 2 s doubling to 3 minutes — it is not broken, it may appear any
//! day, and looking every few minutes costs the API server nothing. Each wait gets a random
//! part of up to as much again, so the streams of many clusters do not retry in step.
//! A calm watch yields nothing when it starts, so a stream that failed now and then (a burst
//! of errors, a watch cut) would never see an answer and climb to the longest waits over
//! separate, brief troubles — hiding every job born and gone during a minute-long wait. So a
//! stream that ran [`HEALTHY`] past its last wait without failing also starts again.
//!
//! A pure state machine: no I/O; the caller passes the time and sleeps what it says.

use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use kube::runtime::watcher::Event;

/// The first wait after a failure.
pub const FAILURE_MIN: Duration = Duration::from_millis(800);
/// The longest wait after failures.
pub const FAILURE_MAX: Duration = Duration::from_secs(30);
/// The first wait before looking again for a kind the cluster does not serve.
pub const MISSING_MIN: Duration = Duration::from_secs(2);
/// The longest wait before looking again for it.
pub const MISSING_MAX: Duration = Duration::from_secs(180);

/// How long a stream must run, past the end of its last wait, without failing for its next
/// failure to count as a new trouble rather than the same one going on.
pub const HEALTHY: Duration = Duration::from_secs(10);

/// Why the last attempt failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The API server could not be reached, refused the request or erred.
    Failed,
    /// The cluster does not serve the kind (404 on its list or watch).
    NotServed,
}

/// The waits of one stream.
#[derive(Debug)]
pub struct Retry {
    failed: ExponentialBackoff,
    missing: ExponentialBackoff,
    /// A wait was given since the last answer: the next answer starts the schedules again.
    /// Every watch event is an answer, so one that follows none is a plain check.
    waited: bool,
    /// When the last wait ends: the stream tries again then.
    resumes_at: Option<Instant>,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            failed: schedule(FAILURE_MIN, FAILURE_MAX),
            missing: schedule(MISSING_MIN, MISSING_MAX),
            waited: false,
            resumes_at: None,
        }
    }
}

fn schedule(min: Duration, max: Duration) -> ExponentialBackoff {
    ExponentialBuilder::default()
        .with_min_delay(min)
        .with_max_delay(max)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .build()
}

impl Retry {
    /// The attempt failed: how long to wait before the next one. The other schedule starts
    /// again (a kind that appears and then fails is a new story).
    pub fn after(&mut self, failure: Failure, now: Instant) -> Duration {
        if self
            .resumes_at
            .is_some_and(|at| now.saturating_duration_since(at) >= HEALTHY)
        {
            *self = Retry::default();
        }
        self.waited = true;
        let (grows, other, max) = match failure {
            Failure::Failed => (&mut self.failed, &mut self.missing, FAILURE_MAX),
            Failure::NotServed => (&mut self.missing, &mut self.failed, MISSING_MAX),
        };
        *other = match failure {
            Failure::Failed => schedule(MISSING_MIN, MISSING_MAX),
            Failure::NotServed => schedule(FAILURE_MIN, FAILURE_MAX),
        };
        // Without a limit on the number of times, the schedule never ends; were it to, the
        // longest wait goes on.
        let wait = grows.next().unwrap_or(max);
        self.resumes_at = Some(now + wait);
        wait
    }

    /// The API answered with data: the next failure waits the shortest again.
    pub fn answered(&mut self) {
        if self.waited {
            *self = Retry::default();
        }
    }

    /// The watch ended with `410 Gone`: the API server answered (it compacted the version the
    /// watch resumed from), so the schedules start again and the re-list goes at once. A
    /// server that answers every watch with 410 costs a list per watch, as it would without
    /// jobrelay's waits: each list is an answer too.
    pub fn answered_gone(&mut self) {
        *self = Retry::default();
    }
}

/// Whether an item of kube's watcher shows the API answering: anything but the `Init` it
/// yields before each attempt to list.
pub fn answers<K>(event: &Event<K>) -> bool {
    !matches!(event, Event::Init)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failure as soon as the last wait ends (a cluster that stays down).
    fn at_once(retry: &Retry) -> Instant {
        retry.resumes_at.unwrap_or_else(Instant::now)
    }

    #[test]
    fn troubles_apart_in_time_start_again_from_the_shortest_wait() {
        let mut retry = Retry::default();
        for _ in 0..6 {
            retry.after(Failure::Failed, at_once(&retry));
        }
        let resumed = at_once(&retry);
        // The stream ran a while after its last wait (a calm watch: nothing to answer with).
        let later = retry.after(Failure::Failed, resumed + HEALTHY);
        assert!(later <= FAILURE_MIN * 2, "{later:?}");
        // A failure right after the wait is the same trouble going on: the wait grows.
        let next = retry.after(Failure::Failed, at_once(&retry) + HEALTHY / 2);
        assert!(next >= FAILURE_MIN * 2, "{next:?}");
    }

    #[test]
    fn waits_grow_to_their_cap_and_start_again_only_after_an_answer() {
        let mut retry = Retry::default();
        let waits: Vec<Duration> = (0..12)
            .map(|_| retry.after(Failure::Failed, at_once(&retry)))
            .collect();
        // Each wait lies between its step and twice it (the random part).
        for (i, wait) in waits.iter().enumerate() {
            let step = FAILURE_MIN.saturating_mul(1 << i.min(10)).min(FAILURE_MAX);
            assert!(
                *wait >= step && *wait <= step * 2,
                "wait {i}: {wait:?} for {step:?}"
            );
        }
        assert!(waits[8..].iter().all(|w| *w >= FAILURE_MAX), "{waits:?}");
        // A minute of failures is a handful of attempts, not sixty.
        let mut spent = Duration::ZERO;
        let mut attempts = 0;
        let mut fresh = Retry::default();
        while spent < Duration::from_secs(60) {
            spent += fresh.after(Failure::Failed, at_once(&fresh));
            attempts += 1;
        }
        assert!(attempts <= 8, "{attempts} attempts in a minute");
        retry.answered();
        let first = retry.after(Failure::Failed, at_once(&retry));
        assert!(first <= FAILURE_MIN * 2, "{first:?}");
    }

    #[test]
    fn a_missing_kind_is_looked_for_every_few_minutes() {
        let mut retry = Retry::default();
        let waits: Vec<Duration> = (0..10)
            .map(|_| retry.after(Failure::NotServed, at_once(&retry)))
            .collect();
        assert!(waits[0] >= MISSING_MIN && waits[0] <= MISSING_MIN * 2);
        assert!(waits[9] >= MISSING_MAX, "{waits:?}");
        // A failure in between starts the failure schedule, and the missing one again after.
        assert!(retry.after(Failure::Failed, at_once(&retry)) <= FAILURE_MIN * 2);
        assert!(retry.after(Failure::NotServed, at_once(&retry)) <= MISSING_MIN * 2);
    }

    #[test]
    fn a_compacted_version_starts_the_schedules_again() {
        let mut retry = Retry::default();
        for _ in 0..8 {
            retry.after(Failure::Failed, at_once(&retry));
        }
        assert!(retry.after(Failure::Failed, at_once(&retry)) >= FAILURE_MAX);
        retry.answered_gone();
        assert!(retry.after(Failure::Failed, at_once(&retry)) <= FAILURE_MIN * 2);
    }

    #[test]
    fn only_data_counts_as_an_answer() {
        assert!(!answers::<()>(&Event::Init));
        assert!(answers::<()>(&Event::InitDone));
        assert!(answers(&Event::InitApply(())));
        assert!(answers(&Event::Apply(())));
        assert!(answers(&Event::Delete(())));
    }
}
