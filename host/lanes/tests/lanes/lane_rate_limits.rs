//! Rate limits follow a reload: removing or raising a plugin's `rate_limits` applies to the
//! calls already waiting for a token, not only to events queued afterwards. (Before, every
//! waiting call held on to the old limiter: with 1 per minute, the queue kept draining at one a
//! minute until a restart, with nothing in flight and the machine idle.)

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
use jobrelay_state::{StateBackend, open_store};
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
