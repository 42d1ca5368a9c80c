//! A lane's `rate_limits` as sliding windows over the calls it made.
//!
//! Why not token buckets: a bucket starts full and refills while it drains, so a limit of 20 a
//! minute let 20 calls through at once and then one every 3 s — about 27 in the first minute
//! and up to 40 in a 60-second window — where DingTalk and WeCom document 20 a minute per
//! robot and answer the rest with throttles. Here a limit of N per period lets a call go only
//! when fewer than N calls were made in the period before it, so no window of that length ever
//! holds more than N, from the first call on.
//!
//! The lane keeps one log of its latest calls (as many as its largest limit), shared by all its
//! limits, and takes a call into it only when every limit lets it go at once: a call waiting
//! for one limit spends nothing of another. A reload keeps the log ([`RateLimits::reload`]),
//! so new limits count the calls made under the old ones. A restart begins with an empty log
//! (the calls of the process before are not known): across a restart, one window may hold
//! what was sent just before it and up to N after.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::settings::RateLimitSpec;

/// One limit: at most `calls` in any `period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Window {
    calls: usize,
    period: Duration,
}

impl Window {
    /// The windows a spec asks for: its rate, and with a `burst` below the rate, at most
    /// `burst` calls in the share of the period they stand for (`burst: 5` of 20 a minute: at
    /// most 5 in any 15 s).
    fn of(spec: &RateLimitSpec) -> Vec<Window> {
        let (calls, period) = match (spec.per_second, spec.per_minute) {
            (Some(n), None) => (n, Duration::from_secs(1)),
            (None, Some(n)) => (n, Duration::from_secs(60)),
            _ => return Vec::new(),
        };
        if calls == 0 {
            return Vec::new();
        }
        let mut windows = vec![Window {
            calls: calls as usize,
            period,
        }];
        if let Some(burst) = spec.burst.filter(|b| *b > 0 && *b < calls) {
            windows.push(Window {
                calls: burst as usize,
                period: period.mul_f64(f64::from(burst) / f64::from(calls)),
            });
        }
        windows
    }
}

/// The limits of one lane and the calls they count.
#[derive(Debug)]
pub struct RateLimits {
    windows: Vec<Window>,
    /// When the latest calls went, oldest first; at most the largest window's `calls`.
    log: Mutex<VecDeque<Instant>>,
}

impl RateLimits {
    /// The limits `specs` ask for, with no call made yet.
    pub fn new(specs: &[RateLimitSpec]) -> RateLimits {
        RateLimits {
            windows: specs.iter().flat_map(Window::of).collect(),
            log: Mutex::new(VecDeque::new()),
        }
    }

    /// The limits `specs` ask for, counting the calls made under these.
    pub fn reload(&self, specs: &[RateLimitSpec]) -> RateLimits {
        let next = RateLimits::new(specs);
        let mut log = self.lock().clone();
        let keep = next.longest();
        while log.len() > keep {
            log.pop_front();
        }
        *next.lock() = log;
        next
    }

    /// Whether there is any limit at all.
    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }

    /// Takes one call at `now` if every limit lets it go; otherwise the instant at which all
    /// of them would (nothing is taken: ask again then).
    pub fn try_take(&self, now: Instant) -> Result<(), Instant> {
        if self.windows.is_empty() {
            return Ok(());
        }
        let mut log = self.lock();
        let mut ready = now;
        for window in &self.windows {
            if log.len() >= window.calls {
                // The call that leaves the window when this one goes.
                let oldest = log[log.len() - window.calls];
                ready = ready.max(oldest + window.period);
            }
        }
        if ready > now {
            return Err(ready);
        }
        log.push_back(now);
        while log.len() > self.longest() {
            log.pop_front();
        }
        Ok(())
    }

    fn longest(&self) -> usize {
        self.windows.iter().map(|w| w.calls).max().unwrap_or(0)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Instant>> {
        // A poisoned log is still a log of instants: nothing half-written can be in it.
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn per_minute(n: u32, burst: Option<u32>) -> RateLimitSpec {
        RateLimitSpec {
            per_second: None,
            per_minute: Some(n),
            burst,
        }
    }

    /// Takes as many calls as the limits let go, each as soon as they let it, from `start`
    /// for `span`; the instants they went at.
    fn drain(limits: &RateLimits, start: Instant, span: Duration) -> Vec<Instant> {
        let mut now = start;
        let mut went = Vec::new();
        while now < start + span {
            match limits.try_take(now) {
                Ok(()) => went.push(now),
                Err(at) => now = at,
            }
        }
        went
    }

    /// The most calls in any window of `period` among `went`.
    fn most_in(went: &[Instant], period: Duration) -> usize {
        went.iter()
            .map(|t| {
                went.iter()
                    .filter(|u| **u >= *t && **u < *t + period)
                    .count()
            })
            .max()
            .unwrap_or(0)
    }

    #[test]
    fn a_burst_at_start_never_passes_the_limit_in_any_minute() {
        let limits = RateLimits::new(&[per_minute(20, None)]);
        let went = drain(&limits, Instant::now(), Duration::from_secs(300));
        assert_eq!(most_in(&went, Duration::from_secs(60)), 20);
        // The first minute: 20, not 20 and a refill.
        let start = went[0];
        let first = went
            .iter()
            .filter(|t| **t < start + Duration::from_secs(60))
            .count();
        assert_eq!(first, 20);
        assert_eq!(
            went.len(),
            100,
            "the rate is kept: 20 a minute for 5 minutes"
        );
    }

    #[test]
    fn a_reload_counts_the_calls_made_before_it() {
        let start = Instant::now();
        let limits = RateLimits::new(&[per_minute(20, None)]);
        let before = drain(&limits, start, Duration::from_secs(10));
        assert_eq!(before.len(), 20);
        let after = limits.reload(&[per_minute(20, None)]);
        assert!(after.try_take(start + Duration::from_secs(30)).is_err());
        // Raised: the new limit counts the 20 already made.
        let raised = limits.reload(&[per_minute(25, None)]);
        let more = drain(
            &raised,
            start + Duration::from_secs(10),
            Duration::from_secs(10),
        );
        assert_eq!(more.len(), 5);
        // Removed: nothing waits.
        assert!(limits.reload(&[]).try_take(start).is_ok());
    }

    #[test]
    fn a_call_waiting_for_one_limit_spends_nothing_of_another() {
        let start = Instant::now();
        let limits = RateLimits::new(&[
            RateLimitSpec {
                per_second: Some(5),
                per_minute: None,
                burst: None,
            },
            per_minute(8, None),
        ]);
        let went = drain(&limits, start, Duration::from_secs(120));
        assert_eq!(most_in(&went, Duration::from_secs(1)), 5);
        assert_eq!(most_in(&went, Duration::from_secs(60)), 8);
        assert_eq!(went.len(), 16);
    }

    #[test]
    fn a_burst_below_the_rate_spreads_the_calls() {
        let limits = RateLimits::new(&[per_minute(20, Some(5))]);
        let went = drain(&limits, Instant::now(), Duration::from_secs(120));
        assert_eq!(most_in(&went, Duration::from_secs(15)), 5);
        assert_eq!(most_in(&went, Duration::from_secs(60)), 20);
    }

    proptest! {
        /// Whatever the limits and whenever calls are asked for, no window holds more calls
        /// than its limit.
        #[test]
        fn no_window_holds_more_than_its_limit(
            n in 1u32..30,
            burst in proptest::option::of(1u32..40),
            per_second in proptest::bool::ANY,
            asks in proptest::collection::vec(0u64..3_000, 1..300),
        ) {
            let spec = RateLimitSpec {
                per_second: per_second.then_some(n),
                per_minute: (!per_second).then_some(n),
                burst,
            };
            let period = if per_second { Duration::from_secs(1) } else { Duration::from_secs(60) };
            let limits = RateLimits::new(std::slice::from_ref(&spec));
            let mut now = Instant::now();
            let mut went = Vec::new();
            for gap in asks {
                now += Duration::from_millis(gap);
                if limits.try_take(now).is_ok() {
                    went.push(now);
                }
            }
            prop_assert!(most_in(&went, period) <= n as usize);
        }
    }
}
