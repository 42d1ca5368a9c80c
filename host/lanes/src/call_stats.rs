//! How a lane's plugin calls went: a duration histogram and failures by kind, kept with
//! atomics so recording a call costs a few increments and no lock.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;

use jobrelay_runtime::CallError;

/// Upper bounds of the duration buckets, in seconds: from a fast wasm call up to the longest
/// time limit a manifest may set (an hour), so a call's duration lands in a bound whatever its
/// plugin's `timeout_ms`. Dense between 1 s and 30 s, where the usual time limits are: with
/// bounds 1, 5, 30 a p99 estimate of calls all near 1.5 s read 4.96 s, 99% of a 5 s limit,
/// and the near-timeout alert fired on calls taking a third of it.
pub const BUCKETS: [f64; 26] = [
    0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 2.5, 4.0, 5.0,
    8.0, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 3600.0,
];

/// The failure kinds counted: every `CallError::kind` but `deferred`, which is not a failure
/// (a plugin holding an event back on purpose; the lane counts those apart).
const KINDS: [&str; 7] = CallError::FAILURES;

/// Live counters.
#[derive(Debug, Default)]
pub struct CallStats {
    durations: Durations,
    failures: [AtomicU64; KINDS.len()],
}

/// A histogram of durations over [`BUCKETS`], kept with atomics.
#[derive(Debug, Default)]
pub struct Durations {
    /// Samples per bucket (not cumulative); the last slot counts those above every bound.
    buckets: [AtomicU64; BUCKETS.len() + 1],
    sum_micros: AtomicU64,
}

/// A copy of a [`Durations`].
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct DurationSnapshot {
    /// `(upper bound in seconds, samples at or under it)`, cumulative, without `+Inf`.
    pub buckets: Vec<(f64, u64)>,
    /// Every sample, those above the last bound included.
    pub count: u64,
    /// The samples' sum, in seconds.
    pub sum_seconds: f64,
}

impl Durations {
    /// Records one duration.
    pub fn record(&self, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        let slot = BUCKETS
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(BUCKETS.len());
        self.buckets[slot].fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// The histogram now, cumulative as Prometheus reads it. Each counter is read on its
    /// own, so a sample recorded meanwhile may show in the buckets and not yet in the sum.
    pub fn snapshot(&self) -> DurationSnapshot {
        let mut cumulative = 0;
        let mut buckets = Vec::with_capacity(BUCKETS.len());
        for (bound, count) in BUCKETS.iter().zip(&self.buckets) {
            cumulative += count.load(Ordering::Relaxed);
            buckets.push((*bound, cumulative));
        }
        let count = cumulative + self.buckets[BUCKETS.len()].load(Ordering::Relaxed);
        DurationSnapshot {
            buckets,
            count,
            sum_seconds: self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6,
        }
    }
}

/// A copy of the counters, for status and metrics.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct CallSnapshot {
    /// `(upper bound in seconds, calls at or under it)`, cumulative, without `+Inf`.
    pub buckets: Vec<(f64, u64)>,
    /// Every call, failed or not.
    pub count: u64,
    /// The calls' durations summed, in seconds.
    pub sum_seconds: f64,
    /// Failed calls by kind (`trap`, `timeout`, `memory_limit`, `retry`, ...).
    pub failures: BTreeMap<&'static str, u64>,
}

impl CallStats {
    /// Records one call.
    pub fn record(&self, elapsed: Duration, result: &Result<(), CallError>) {
        self.durations.record(elapsed);
        if let Err(error) = result
            && let Some(i) = KINDS.iter().position(|k| *k == error.kind())
        {
            self.failures[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The durations and failure counts now.
    pub fn snapshot(&self) -> CallSnapshot {
        let DurationSnapshot {
            buckets,
            count,
            sum_seconds,
        } = self.durations.snapshot();
        CallSnapshot {
            buckets,
            count,
            sum_seconds,
            failures: KINDS
                .iter()
                .zip(&self.failures)
                .map(|(k, n)| (*k, n.load(Ordering::Relaxed)))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_failures_by_kind() {
        let stats = CallStats::default();
        stats.record(Duration::from_micros(300), &Ok(()));
        stats.record(Duration::from_millis(3), &Err(CallError::Trap("x".into())));
        stats.record(
            Duration::from_secs(4000),
            &Err(CallError::Timeout(Duration::from_secs(3600))),
        );
        let s = stats.snapshot();
        assert_eq!(s.count, 3);
        assert_eq!(s.buckets[0], (0.000_5, 1));
        assert_eq!(s.buckets[3], (0.005, 2));
        assert_eq!(
            s.buckets.last(),
            Some(&(3600.0, 2)),
            "the 4000 s call is above every bound"
        );
        assert_eq!(s.failures["trap"], 1);
        assert_eq!(s.failures["timeout"], 1);
        assert_eq!(s.failures["retry"], 0);
        assert!(
            (s.sum_seconds - 4000.0033).abs() < 1e-6,
            "{}",
            s.sum_seconds
        );
    }
}
