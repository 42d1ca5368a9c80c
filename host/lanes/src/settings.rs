//! A lane's delivery settings, as a plugin manifest gives them: mode, concurrency, retries,
//! rate limits, the kinds taken and the bound on a job's queue.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::filter::Filter;
use super::mode::DeliveryMode;
use super::rate_limit::Window;

/// How failed calls are retried. Backoff is exponential (doubling from `min_delay_ms` up to
/// `max_delay_ms`), each wait plus a random part of up to as much again, per job: the job's
/// later events wait behind the failing one, other jobs go on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    /// Calls in all, the first one included; after the last the event is dead-lettered.
    #[serde(default = "default_attempts")]
    pub max_attempts: u32,
    /// The wait before the first retry, in milliseconds (default 500).
    #[serde(default = "default_min_delay")]
    pub min_delay_ms: u64,
    /// The longest wait the doubling reaches, in milliseconds (default 60,000).
    #[serde(default = "default_max_delay")]
    pub max_delay_ms: u64,
}

fn default_attempts() -> u32 {
    8
}
fn default_min_delay() -> u64 {
    500
}
fn default_max_delay() -> u64 {
    60_000
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: default_attempts(),
            min_delay_ms: default_min_delay(),
            max_delay_ms: default_max_delay(),
        }
    }
}

impl RetryPolicy {
    /// Delays between attempts: `max_attempts - 1` of them. Each is the step's exponential
    /// delay (`min_delay_ms` doubling, capped at `max_delay_ms`) plus a random part of up to as
    /// much again, so a wait is at most twice `max_delay_ms`.
    pub fn delays(&self) -> impl Iterator<Item = Duration> + Send + use<> {
        use backon::BackoffBuilder;
        backon::ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(self.min_delay_ms))
            .with_max_delay(Duration::from_millis(
                self.max_delay_ms.max(self.min_delay_ms),
            ))
            .with_jitter()
            .with_max_times(self.max_attempts.saturating_sub(1) as usize)
            .build()
    }
}

/// One limit on the plugin's calls: at most `per_second` calls in any second, or
/// `per_minute` in any sixty seconds, from the lane's first call on (a sliding window over the
/// calls made, see [`crate::rate_limit`]). Several can be set (e.g. 5 per second and 100 per
/// minute); a call waits for all of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitSpec {
    /// Calls in any second; give this or `per_minute`.
    #[serde(default)]
    pub per_second: Option<u32>,
    /// Calls in any sixty seconds; give this or `per_second`.
    #[serde(default)]
    pub per_minute: Option<u32>,
    /// The most calls back to back, below the rate: `burst: b` of N a period also lets at most
    /// b calls meet any stretch of b/N of the period (`{per_minute: 60, burst: 3}`: 60 in any
    /// minute, 3 in any 3 s). Unset, or at least the rate: the rate's own window alone (a
    /// burst above the rate would break it, so it is the rate).
    #[serde(default)]
    pub burst: Option<u32>,
}

/// A rate limit that cannot be applied as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RateLimitError {
    /// `burst: 0`, which would let no call through.
    #[error("rate_limits: burst must be at least 1")]
    ZeroBurst,
    /// A rate of 0, which would let no call through.
    #[error("rate_limits: rates must be at least 1")]
    ZeroRate,
    /// Both rates, or neither.
    #[error("rate_limits: give exactly one of per_second or per_minute")]
    NotOneRate,
}

impl RateLimitSpec {
    /// Whether the limit can be applied as written, checked when the manifest is read.
    pub fn validate(&self) -> Result<(), RateLimitError> {
        if self.burst == Some(0) {
            return Err(RateLimitError::ZeroBurst);
        }
        match (self.per_second, self.per_minute) {
            (Some(0), None) | (None, Some(0)) => Err(RateLimitError::ZeroRate),
            (Some(_), None) | (None, Some(_)) => Ok(()),
            _ => Err(RateLimitError::NotOneRate),
        }
    }

    /// The calls allowed and the period they are counted over; `None` for a limit that
    /// [`validate`](Self::validate) refuses.
    fn rate(&self) -> Option<(u32, Duration)> {
        match (self.per_second, self.per_minute) {
            (Some(n), None) if n > 0 => Some((n, Duration::from_secs(1))),
            (None, Some(n)) if n > 0 => Some((n, Duration::from_secs(60))),
            _ => None,
        }
    }

    /// Whether `burst` is above the rate, so has no effect (the lane warns of it: the
    /// manifest asks for more than the window lets through).
    pub fn burst_above_rate(&self) -> bool {
        matches!((self.rate(), self.burst), (Some((n, _)), Some(b)) if b > n)
    }

    /// The sliding windows the limit is made of: the rate's, and the burst's when it is below
    /// the rate (its period b/N of the rate's, rounded up to the nanosecond so that b in it
    /// is never above the rate). Empty for a limit that [`validate`](Self::validate) refuses.
    pub fn windows(&self) -> Vec<Window> {
        let Some((calls, period)) = self.rate() else {
            return Vec::new();
        };
        let mut windows = vec![Window { calls, period }];
        if let Some(burst) = self.burst.filter(|b| *b > 0 && *b < calls) {
            let nanos = (period.as_nanos() * u128::from(burst)).div_ceil(u128::from(calls));
            let nanos = u64::try_from(nanos).unwrap_or(u64::MAX);
            windows.push(Window {
                calls: burst,
                period: Duration::from_nanos(nanos),
            });
        }
        windows
    }
}

/// Everything a lane needs besides the plugin version itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneSettings {
    /// Which of a job's versions the plugin receives.
    pub mode: DeliveryMode,
    /// How many jobs' events are handled at once; a job's own are handled one at a time.
    pub concurrency: usize,
    /// How failed calls are retried.
    pub retry: RetryPolicy,
    /// The limits every call waits for, all of them.
    pub rate_limits: Vec<RateLimitSpec>,
    /// Kind names (empty: all).
    pub kinds: Vec<String>,
    /// Which jobs of those kinds, and which of their versions, the lane takes.
    pub filter: Arc<Filter>,
    /// Most versions of one job queued at once (see `PluginManifest::max_queued_per_job`).
    pub max_queued_per_job: usize,
    /// Most events waiting in the lane at once — the plugin's inbox (see
    /// `PluginManifest::max_inbox_events`).
    pub max_inbox_events: u64,
    /// The fleet events the plugin asked for (`fleet_events:` in its manifest).
    pub fleet_events: FleetEvents,
}

/// Which fleet events a lane takes ([`jobrelay_contract::fleet`]): none unless asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FleetEvents {
    /// A cluster going offline or back online.
    pub clusters: bool,
    /// A fleet rule firing or resolving.
    pub rules: bool,
}

impl FleetEvents {
    /// Whether the lane takes `event` (a fleet carrier).
    pub fn take(&self, event: &jobrelay_contract::event::JobEvent) -> bool {
        if jobrelay_contract::fleet::is_rule(event) {
            self.rules
        } else {
            self.clusters
        }
    }

    /// Whether the lane takes fleet events at all, so its plugin must export `handle-fleet`.
    pub fn any(&self) -> bool {
        self.clusters || self.rules
    }
}

/// Default of `max_queued_per_job`: far above what a healthy plugin ever has queued for one
/// job, low enough that a plugin down for hours cannot hold a busy job's whole history.
pub const DEFAULT_MAX_QUEUED_PER_JOB: usize = 1_000;

/// Default of `max_inbox_events`: a plugin down for a day on a busy fleet fits; each waiting
/// event costs a row on disk and, once the memory budget is spent, about 200 bytes of memory
/// for its place.
pub const DEFAULT_MAX_INBOX_EVENTS: u64 = 1_000_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_are_bounded_and_counted() {
        let p = RetryPolicy {
            max_attempts: 4,
            min_delay_ms: 10,
            max_delay_ms: 40,
        };
        for _ in 0..50 {
            let d: Vec<Duration> = p.delays().collect();
            assert_eq!(d.len(), 3);
            assert!(
                d.iter()
                    .all(|x| *x >= Duration::from_millis(10) && *x <= Duration::from_millis(80)),
                "{d:?}"
            );
        }
    }

    #[test]
    fn rate_limits_need_exactly_one_rate() {
        let ok = RateLimitSpec {
            per_second: Some(5),
            per_minute: None,
            burst: None,
        };
        assert!(ok.validate().is_ok() && !ok.windows().is_empty());
        let both = RateLimitSpec {
            per_second: Some(5),
            per_minute: Some(100),
            burst: None,
        };
        assert!(both.validate().is_err());
        let zero = RateLimitSpec {
            per_second: Some(0),
            per_minute: None,
            burst: None,
        };
        assert!(zero.validate().is_err());
        assert!(zero.windows().is_empty());
    }

    #[test]
    fn a_burst_below_the_rate_adds_its_own_window_and_one_above_it_is_the_rate() {
        let spec = |per_minute, burst| RateLimitSpec {
            per_second: None,
            per_minute: Some(per_minute),
            burst,
        };
        let minute = Duration::from_secs(60);
        assert_eq!(
            spec(60, Some(3)).windows(),
            vec![
                Window {
                    calls: 60,
                    period: minute
                },
                Window {
                    calls: 3,
                    period: Duration::from_secs(3)
                }
            ]
        );
        // 20 a minute, 7 at once: 7 in any 21 s (7 × 3 s).
        assert_eq!(
            spec(20, Some(7)).windows()[1].period,
            Duration::from_secs(21)
        );
        // Rounded up: 2 of 3 a second is 2 in any 666,666,667 ns.
        let thirds = RateLimitSpec {
            per_second: Some(3),
            per_minute: None,
            burst: Some(2),
        };
        assert_eq!(
            thirds.windows()[1].period,
            Duration::from_nanos(666_666_667)
        );
        for burst in [None, Some(20), Some(25)] {
            assert_eq!(
                spec(20, burst).windows(),
                vec![Window {
                    calls: 20,
                    period: minute
                }]
            );
        }
        assert!(spec(20, Some(25)).burst_above_rate() && !spec(20, Some(20)).burst_above_rate());
    }
}
