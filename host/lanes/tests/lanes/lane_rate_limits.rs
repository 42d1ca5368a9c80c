//! Rate limits through a whole lane: a limit of N a minute never lets more than N calls into
//! any sixty seconds — with a burst at the start, across a reload that changes the limit
//! mid-burst, and across a restart — and removing or raising a limit applies to the calls
//! already waiting, not only to events queued afterwards. (Before, a full token bucket let
//! about 27 calls of `{per_minute: 20}` into the first minute, and every waiting call held on
//! to the old limiter: with 1 per minute, the queue kept draining at one a minute until a
//! restart, with nothing in flight and the machine idle.)
//!
//! The tests of windows run on tokio's paused clock (`start_paused`), on a store in memory
//! (`memory_store.rs`): the lane's waits are virtual, a minute passes at once, and the calls'
//! times are the virtual ones the limits counted by, so what is asserted — how many calls
//! meet a window — holds or fails the same on any machine.

use crate::common;

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jobrelay_contract::event::{JobEvent, Phase};
use jobrelay_lanes::handler::Handler;
use jobrelay_lanes::lane::{Lane, Observed};
use jobrelay_lanes::mode::DeliveryMode;
use jobrelay_lanes::settings::{LaneSettings, RateLimitSpec, RetryPolicy};
use jobrelay_runtime::CallError;
use jobrelay_state::{DeliveryStore, StateBackend, open_store};

use crate::memory_store::MemoryStore;
use jobrelay_watch::kinds::JobKind;

#[derive(Default)]
struct Counter {
    calls: Mutex<Vec<Instant>>,
}

#[async_trait::async_trait]
impl Handler for Counter {
    fn name(&self) -> &str {
        "counter"
    }
    fn version(&self) -> &str {
        "0"
    }
    async fn handle(&self, _event: &JobEvent) -> Result<(), CallError> {
        self.calls.lock().push(Instant::now());
        Ok(())
    }
}

fn settings(rate_limits: Vec<RateLimitSpec>) -> LaneSettings {
    LaneSettings {
        mode: DeliveryMode::EveryVersion,
        concurrency: 4,
        retry: RetryPolicy {
            max_attempts: 3,
            min_delay_ms: 100,
            max_delay_ms: 100,
        },
        rate_limits,
        kinds: Vec::new(),
        filter: Default::default(),
        max_queued_per_job: 1_000,
        max_inbox_events: jobrelay_lanes::settings::DEFAULT_MAX_INBOX_EVENTS,
        fleet_events: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_a_rate_limit_frees_the_calls_already_waiting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_store(&StateBackend::Sqlite(dir.path().join("state.db")))
        .await
        .expect("store");
    let plugin = Arc::new(Counter::default());
    let one_a_minute = vec![RateLimitSpec {
        per_second: None,
        per_minute: Some(1),
        burst: None,
    }];
    let lane = Lane::open(
        "limited",
        plugin.clone(),
        settings(one_a_minute),
        store,
        None,
    )
    .await
    .expect("lane");
    let kind = Arc::new(JobKind::builtin("batch-job").expect("kind"));
    for n in 0..6 {
        let event = common::event(
            &format!("u-{n}"),
            "10",
            Phase::Running,
            None,
            "2026-11-26T10:00:00Z",
        );
        lane.push(Observed {
            event,
            kind: kind.clone(),
            from_list: false,
            created: None,
        });
    }
    // The first call takes the minute's one token; the others wait for theirs.
    let started = Instant::now();
    while plugin.calls.lock().is_empty() {
        assert!(started.elapsed() < Duration::from_secs(10), "no first call");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        plugin.calls.lock().len(),
        1,
        "the limit holds the others back"
    );

    // The reload without a limit: every waiting call goes at once.
    let reloaded = Instant::now();
    lane.reconfigure(plugin.clone(), settings(Vec::new()));
    loop {
        let done = plugin.calls.lock().len();
        if done == 6 {
            break;
        }
        assert!(
            reloaded.elapsed() < Duration::from_secs(20),
            "{done} of 6 calls 20 s after the limit was removed (it allowed one a minute)"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    lane.close().await;
}

/// Records the virtual time of each call (tokio's clock, which the lane's limits read).
#[derive(Default)]
struct Clocked {
    calls: Mutex<Vec<tokio::time::Instant>>,
}

#[async_trait::async_trait]
impl Handler for Clocked {
    fn name(&self) -> &str {
        "clocked"
    }
    fn version(&self) -> &str {
        "0"
    }
    async fn handle(&self, _event: &JobEvent) -> Result<(), CallError> {
        self.calls.lock().push(tokio::time::Instant::now());
        Ok(())
    }
}

fn per_minute(n: u32) -> Vec<RateLimitSpec> {
    vec![RateLimitSpec {
        per_second: None,
        per_minute: Some(n),
        burst: None,
    }]
}

const MINUTE: Duration = Duration::from_secs(60);

/// Pushes one running version of each of `jobs` jobs, named from `first`.
fn burst(lane: &Lane, first: usize, jobs: usize) {
    let kind = Arc::new(JobKind::builtin("batch-job").expect("kind"));
    for n in first..first + jobs {
        let event = common::event(
            &format!("u-{n}"),
            "10",
            Phase::Running,
            None,
            "2026-11-26T10:00:00Z",
        );
        lane.push(Observed {
            event,
            kind: kind.clone(),
            from_list: false,
            created: None,
        });
    }
}

/// Waits (virtually) until `plugin` has been called `n` times.
async fn calls_reach(plugin: &Clocked, n: usize) {
    while plugin.calls.lock().len() < n {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The most calls of `calls` (sorted) that meet one window of `period` that starts at a
/// call at or after `from`: a window's worst start is a call's time.
fn most_in_a_window(calls: &[tokio::time::Instant], from: usize, period: Duration) -> usize {
    (from..calls.len())
        .map(|i| {
            calls[i..]
                .iter()
                .take_while(|t| **t < calls[i] + period)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// The most calls in one window of `period` that holds the call `k` or a later one: the
/// windows a limit set before call `k` answers for.
fn most_meeting(calls: &[tokio::time::Instant], k: usize, period: Duration) -> usize {
    (k..calls.len())
        .map(|i| {
            calls[..=i]
                .iter()
                .filter(|t| **t + period > calls[i])
                .count()
        })
        .max()
        .unwrap_or(0)
}

#[tokio::test(start_paused = true)]
async fn a_burst_at_start_puts_no_more_than_the_limit_in_any_minute() {
    let store: Arc<dyn DeliveryStore> = Arc::new(MemoryStore::default());
    let plugin = Arc::new(Clocked::default());
    let opened = tokio::time::Instant::now();
    let lane = Lane::open(
        "dingtalk",
        plugin.clone(),
        settings(per_minute(20)),
        store,
        None,
    )
    .await
    .expect("lane");
    // DingTalk's and WeCom's 20 a minute per robot, and 27 messages at once.
    burst(&lane, 0, 27);
    lane.idle().await;
    let calls = plugin.calls.lock().clone();
    assert_eq!(calls.len(), 27, "every event delivered");
    assert_eq!(
        most_in_a_window(&calls, 0, MINUTE),
        20,
        "no sixty seconds hold more than 20 calls, from the first on"
    );
    // A plugin installed at this opening has no calls behind it: the burst starts at once,
    // and the 21st waits for the first call to be a minute old.
    assert!(calls[0] - opened < MINUTE, "{:?}", calls[0] - opened);
    assert!(calls[20] >= calls[0] + MINUTE);
    lane.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_reload_that_lowers_the_limit_mid_burst_counts_the_calls_before_it() {
    let store: Arc<dyn DeliveryStore> = Arc::new(MemoryStore::default());
    let plugin = Arc::new(Clocked::default());
    let lane = Lane::open(
        "dingtalk",
        plugin.clone(),
        settings(per_minute(20)),
        store,
        None,
    )
    .await
    .expect("lane");
    burst(&lane, 0, 40);
    calls_reach(&plugin, 20).await;
    // A reload that leaves the limits as they were (a new concurrency) keeps the minute's
    // calls: nothing more goes before the first call is a minute old.
    let mut same = settings(per_minute(20));
    same.concurrency = 2;
    lane.reconfigure(plugin.clone(), same);
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(plugin.calls.lock().len(), 20, "unchanged limits held");
    // Lowered to 10 a minute half way through the minute: the 20 calls already made count
    // under the new limit too, so none goes before they are a minute old.
    let reloaded = plugin.calls.lock().len();
    lane.reconfigure(plugin.clone(), settings(per_minute(10)));
    lane.idle().await;
    let calls = plugin.calls.lock().clone();
    assert_eq!(calls.len(), 40, "every event delivered");
    assert_eq!(most_in_a_window(&calls[..reloaded], 0, MINUTE), 20);
    assert!(
        most_meeting(&calls, reloaded, MINUTE) <= 10,
        "a window holding a call made after the reload has at most 10: {:?}",
        calls
            .iter()
            .map(|t| t.duration_since(calls[0]))
            .collect::<Vec<_>>()
    );
    assert!(calls[reloaded] >= calls[10] + MINUTE);
    lane.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_restart_waits_one_period_before_its_first_call() {
    let plugin = Arc::new(Clocked::default());
    let store: Arc<dyn DeliveryStore> = Arc::new(MemoryStore::default());
    let lane = Lane::open(
        "dingtalk",
        plugin.clone(),
        settings(per_minute(20)),
        store.clone(),
        None,
    )
    .await
    .expect("lane");
    burst(&lane, 0, 27);
    calls_reach(&plugin, 20).await;
    // Stopped with 7 events waiting for the minute (in the inbox of a real store; this one
    // keeps only install times and cursors, so a new burst stands for them below).
    lane.close().await;
    drop(lane);

    // The next process knows nothing of the 20 calls: it counts every window as full at its
    // opening, so its first call waits a minute from then.
    let reopened = tokio::time::Instant::now();
    let lane = Lane::open(
        "dingtalk",
        plugin.clone(),
        settings(per_minute(20)),
        store,
        None,
    )
    .await
    .expect("lane");
    burst(&lane, 100, 27);
    lane.idle().await;
    let calls = plugin.calls.lock().clone();
    assert_eq!(calls.len(), 47, "the 27 of the new burst delivered");
    assert!(calls[20] >= reopened + MINUTE, "{:?}", calls[20] - reopened);
    assert_eq!(
        most_in_a_window(&calls, 0, MINUTE),
        20,
        "no sixty seconds hold more than 20 calls, across the restart"
    );
    lane.close().await;
}
