//! The memory a lane holds for a plugin that is down is bounded: an `every-version` lane keeps
//! at most `max_queued_per_job` versions of a job, and moves the rest to the durable
//! dead-letter list, where nothing is lost and everything can be replayed.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::event;
use jobrelay::lanes::handler::Handler;
use jobrelay::lanes::lane::{Lane, Observed};
use jobrelay::lanes::mode::DeliveryMode;
use jobrelay::lanes::settings::{LaneSettings, RetryPolicy};
use jobrelay::runtime::CallError;
use jobrelay::state::{StateBackend, open_store};
use jobrelay::watch::event::{JobEvent, Phase};
use jobrelay::watch::kinds::JobKind;

/// A plugin that is down: every call fails with a retryable error.
struct Down;

#[async_trait::async_trait]
impl Handler for Down {
    fn name(&self) -> &str {
        "down"
    }
    fn version(&self) -> &str {
        "0"
    }
    async fn handle(&self, _event: &JobEvent) -> Result<(), CallError> {
        Err(CallError::Retry("the peer is down".into()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_down_plugin_holds_at_most_the_bound_and_parks_the_rest_as_dead_letters() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_store(&StateBackend::Sqlite(dir.path().join("state.db")))
        .await
        .expect("store");
    let settings = LaneSettings {
        mode: DeliveryMode::EveryVersion,
        concurrency: 2,
        // Retried for minutes: the head event stays in the lane for the whole test.
        retry: RetryPolicy {
            max_attempts: 100,
            min_delay_ms: 60_000,
            max_delay_ms: 60_000,
        },
        rate_limits: Vec::new(),
        kinds: Vec::new(),
        max_queued_per_job: 5,
    };
    let lane = Lane::open("down", Arc::new(Down), settings, store.clone(), None)
        .await
        .expect("lane");
    let kind = Arc::new(JobKind::builtin("batch-job").expect("kind"));
    let push = |uid: &str, versions: std::ops::RangeInclusive<u32>| {
        for rv in versions {
            let at = "2026-11-21T10:00:00Z";
            lane.push(&Observed {
                event: event(
                    uid,
                    &rv.to_string(),
                    Phase::Running,
                    Some(Phase::Running),
                    at,
                ),
                kind: kind.clone(),
                from_list: false,
            });
        }
    };
    push("u-1", 1..=25);
    // Another job is not affected by the first one's bound.
    push("u-2", 100..=102);

    let parked = common_wait(|| async {
        let letters = store.dead_letters(Some("down")).await.ok()?;
        (letters.len() == 20).then_some(letters)
    })
    .await;
    assert_eq!(
        lane.stats().pending,
        5 + 3,
        "five of u-1 and all three of u-2"
    );
    let ids: Vec<String> = parked.iter().map(|d| d.event.id.clone()).collect();
    let expected: Vec<String> = (6..=25).map(|rv| format!("east/u-1/{rv}")).collect();
    assert_eq!(
        ids, expected,
        "the versions beyond the bound, in order, none lost"
    );
    assert!(
        parked.iter().all(|d| d.error.contains("lane overflow")),
        "{:?}",
        parked[0].error
    );
    lane.close().await;
}

async fn common_wait<T, F, Fut>(mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let started = std::time::Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "timed out");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
