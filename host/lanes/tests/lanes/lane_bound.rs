//! The memory a lane holds for a plugin that is down is bounded: an `every-version` lane keeps
//! at most `max_queued_per_job` versions of a job, and moves the rest to the durable
//! dead-letter list, where nothing is lost and everything can be replayed. A `latest` lane
//! replaces what waits, never the call in flight.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::event;
use jobrelay_contract::event::{JobEvent, Phase};
use jobrelay_lanes::handler::Handler;
use jobrelay_lanes::lane::{Lane, Observed};
use jobrelay_lanes::mode::DeliveryMode;
use jobrelay_lanes::settings::{LaneSettings, RetryPolicy};
use jobrelay_runtime::CallError;
use jobrelay_state::{StateBackend, open_store};
use jobrelay_watch::kinds::JobKind;

/// `every-version`, retried a minute apart: a failing event stays in the lane for the whole
/// test.
fn slow_retries(concurrency: usize, max_queued_per_job: usize) -> LaneSettings {
    LaneSettings {
        mode: DeliveryMode::EveryVersion,
        concurrency,
        retry: RetryPolicy {
            max_attempts: 100,
            min_delay_ms: 60_000,
            max_delay_ms: 60_000,
        },
        rate_limits: Vec::new(),
        kinds: Vec::new(),
        filter: Default::default(),
        max_queued_per_job,
        max_inbox_events: jobrelay_lanes::settings::DEFAULT_MAX_INBOX_EVENTS,
        fleet_events: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_down_plugin_holds_at_most_the_bound_and_parks_the_rest_as_dead_letters() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_store(&StateBackend::Sqlite(dir.path().join("state.db")))
        .await
        .expect("store");
    let settings = slow_retries(2, 5);
    // Down for every job here (they are all on cluster `east`).
    let down = Arc::new(DownFor {
        cluster: "east",
        delivered: Default::default(),
    });
    let lane = Lane::open("down", down, settings, store.clone(), None)
        .await
        .expect("lane");
    let kind = Arc::new(JobKind::builtin("batch-job").expect("kind"));
    let push = |uid: &str, versions: std::ops::RangeInclusive<u32>| {
        for rv in versions {
            let at = "2026-11-21T10:00:00Z";
            lane.push(Observed {
                event: event(
                    uid,
                    &rv.to_string(),
                    Phase::Running,
                    Some(Phase::Running),
                    at,
                ),
                kind: kind.clone(),
                from_list: false,
                created: None,
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

/// A plugin down for one cluster's jobs (every call fails with a retryable error) and up for
/// the others; records what it delivered.
struct DownFor {
    cluster: &'static str,
    delivered: parking_lot::Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl Handler for DownFor {
    fn name(&self) -> &str {
        "half"
    }
    fn version(&self) -> &str {
        "0"
    }
    async fn handle(&self, event: &JobEvent) -> Result<(), CallError> {
        if event.cluster == self.cluster {
            return Err(CallError::Retry("that cluster's peer is down".into()));
        }
        self.delivered.lock().push(event.id.clone());
        Ok(())
    }
}

/// Sharding hands a cluster over: the lane drops the cluster's queued versions, cuts its
/// retry waits short (a minute here) without acknowledging anything, ignores what still
/// arrives for it, and serves the other cluster throughout; taking the cluster back re-reads
/// its cursors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lane_lets_go_of_one_cluster_at_once_and_takes_it_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_store(&StateBackend::Sqlite(dir.path().join("state.db")))
        .await
        .expect("store");
    let settings = slow_retries(4, 100);
    let plugin = Arc::new(DownFor {
        cluster: "west",
        delivered: Default::default(),
    });
    let lane = Lane::open("half", plugin.clone(), settings, store.clone(), None)
        .await
        .expect("lane");
    let kind = Arc::new(JobKind::builtin("batch-job").expect("kind"));
    let push = |cluster: &str, uid: &str, rv: u32| {
        let mut e = event(
            uid,
            &rv.to_string(),
            Phase::Running,
            None,
            "2026-11-21T10:00:00Z",
        );
        e.cluster = cluster.to_string();
        e.id = JobEvent::make_id(cluster, uid, &e.resource_version);
        lane.push(Observed {
            event: e,
            kind: kind.clone(),
            from_list: false,
            created: None,
        });
    };
    for rv in 1..=3 {
        push("west", "w-1", rv);
        push("west", "w-2", rv);
    }
    push("east", "e-1", 1);
    common_wait(|| async { (lane.stats().retried >= 2).then_some(()) }).await;

    let started = std::time::Instant::now();
    lane.forget_cluster("west").await;
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "letting go waited out a retry delay: {:?}",
        started.elapsed()
    );
    push("west", "w-1", 4); // still arriving from a stopping watcher: ignored
    push("east", "e-1", 2);
    common_wait(|| async { (lane.stats().pending == 0).then_some(()) }).await;
    let delivered = plugin.delivered.lock().clone();
    assert_eq!(delivered, ["east/e-1/1", "east/e-1/2"]);
    let cursors = store.cursors("half").await.expect("cursors");
    assert!(
        cursors
            .iter()
            .all(|c| c.cluster == "east" || c.resource_version.is_empty()),
        "nothing of west acknowledged: {cursors:?}"
    );

    // Taken back: the cluster's versions are accepted again, and the six it let go of come
    // back from the inbox (no other replica delivered them meanwhile), ahead of w-3.
    lane.reload(Some("west")).await.expect("reload");
    push("west", "w-3", 1);
    common_wait(|| async { (lane.stats().retried >= 3).then_some(()) }).await;
    assert_eq!(
        lane.stats().pending,
        7,
        "w-1 and w-2 (three versions each) from the inbox, and w-3, wait for their retries"
    );
    lane.close().await;
}

/// A plugin whose calls wait at a gate until the test opens it; records what it delivered.
struct Gated {
    gate: tokio::sync::Semaphore,
    started: tokio::sync::Notify,
    delivered: parking_lot::Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl Handler for Gated {
    fn name(&self) -> &str {
        "gated"
    }

    fn version(&self) -> &str {
        "v1"
    }

    async fn handle(&self, event: &JobEvent) -> Result<(), CallError> {
        self.started.notify_one();
        let permit = self.gate.acquire().await;
        permit
            .map_err(|_| CallError::Host("gate closed".into()))?
            .forget();
        self.delivered.lock().push(event.resource_version.clone());
        Ok(())
    }
}

/// `latest`: a version that arrives while an older one is being handed to the plugin replaces
/// what waits, not the call in flight, so it is delivered once that call ends. (It used to
/// take the in-flight version's place at the head of the queue and be dropped as if handled:
/// the job's newest state never arrived.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latest_delivers_a_version_that_arrives_during_a_call() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_store(&StateBackend::Sqlite(dir.path().join("state.db")))
        .await
        .expect("store");
    let mut settings = slow_retries(1, 5);
    settings.mode = DeliveryMode::Latest;
    let gated = Arc::new(Gated {
        gate: tokio::sync::Semaphore::new(0),
        started: tokio::sync::Notify::new(),
        delivered: Default::default(),
    });
    let lane = Lane::open("gated", gated.clone(), settings, store.clone(), None)
        .await
        .expect("lane");
    let kind = Arc::new(JobKind::builtin("batch-job").expect("kind"));
    let push = |rv: &str, phase: Phase| {
        lane.push(Observed {
            event: event("u-1", rv, phase, None, "2026-11-21T10:00:00Z"),
            kind: kind.clone(),
            from_list: false,
            created: None,
        });
    };
    let started = gated.started.notified();
    push("1", Phase::Running);
    started.await;
    // Version 1 is in flight; 2 and then 3 arrive: 3 replaces 2, and 1 stays in flight.
    push("2", Phase::Running);
    push("3", Phase::Succeeded);
    gated.gate.add_permits(10);
    tokio::time::timeout(Duration::from_secs(20), lane.idle())
        .await
        .expect("the lane settles");
    let delivered = gated.delivered.lock().clone();
    assert_eq!(delivered, ["1", "3"], "the newest version is delivered");
    let cursors = store.cursors("gated").await.expect("cursors");
    assert_eq!(cursors.len(), 1);
    assert_eq!(cursors[0].resource_version, "3");
    lane.close().await;
}

/// Events resumed from the inbox that the delivery mode does not queue again (the plugin
/// moved from `every-version` to `terminal` across the restart) lose their marks, and the
/// delivered one its mark with its cursor: nothing is left to come back at the next start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resumed_events_the_mode_no_longer_wants_leave_the_inbox() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_store(&StateBackend::Sqlite(dir.path().join("state.db")))
        .await
        .expect("store");
    let at = "2026-11-21T10:00:00Z";
    let running = event("u-1", "5", Phase::Running, None, at);
    let succeeded = event("u-1", "6", Phase::Succeeded, Some(Phase::Running), at);
    store
        .write(jobrelay_state::WriteBatch {
            taken: [&running, &succeeded]
                .iter()
                .map(|e| jobrelay_state::Taken::of("half", e).expect("encodes"))
                .collect(),
            ..Default::default()
        })
        .await
        .expect("an earlier process took both");
    let plugin = Arc::new(DownFor {
        cluster: "west",
        delivered: Default::default(),
    });
    let settings = LaneSettings {
        mode: DeliveryMode::Terminal,
        ..slow_retries(4, 100)
    };
    let lane = Lane::open("half", plugin.clone(), settings, store.clone(), None)
        .await
        .expect("lane");
    lane.reload(None).await.expect("resume");
    common_wait(|| async { (lane.stats().pending == 0).then_some(()) }).await;
    lane.close().await;
    let delivered = plugin.delivered.lock().clone();
    assert_eq!(delivered, [succeeded.id.as_str()]);
    let left = store.inbox("half").await.expect("inbox");
    assert!(
        left.events.is_empty() && left.damaged.is_empty(),
        "marks left behind: {left:?}"
    );
}

/// The plugin's inbox is bounded too, all jobs together: past `max_inbox_events` waiting, a
/// version goes to the dead-letter list as `inbox full`, in order, and the lane keeps the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_inbox_parks_what_comes_next_as_dead_letters() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_store(&StateBackend::Sqlite(dir.path().join("state.db")))
        .await
        .expect("store");
    let settings = LaneSettings {
        max_inbox_events: 6,
        fleet_events: Default::default(),
        ..slow_retries(2, 100)
    };
    let down = Arc::new(DownFor {
        cluster: "east",
        delivered: Default::default(),
    });
    let lane = Lane::open("full", down, settings, store.clone(), None)
        .await
        .expect("lane");
    let kind = Arc::new(JobKind::builtin("batch-job").expect("kind"));
    for job in 0..10 {
        let at = "2026-11-21T10:00:00Z";
        lane.push(Observed {
            event: event(&format!("u-{job}"), "7", Phase::Running, None, at),
            kind: kind.clone(),
            from_list: false,
            created: None,
        });
    }
    let parked = common_wait(|| async {
        let letters = store.dead_letters(Some("full")).await.ok()?;
        (letters.len() == 4).then_some(letters)
    })
    .await;
    assert_eq!(lane.stats().pending, 6, "the inbox holds its bound");
    let ids: Vec<&str> = parked.iter().map(|d| d.event.id.as_str()).collect();
    assert_eq!(
        ids,
        ["east/u-6/7", "east/u-7/7", "east/u-8/7", "east/u-9/7"]
    );
    assert!(
        parked.iter().all(|d| d.error.contains("inbox full")),
        "{:?}",
        parked[0].error
    );
    lane.close().await;
}

/// A lane whose budget holds almost nothing: the versions it queues wait as their place, are
/// read back from the inbox in their turn and delivered in order, and the budget is given back
/// once they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_past_the_memory_budget_wait_in_the_inbox_and_come_back_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_store(&StateBackend::Sqlite(dir.path().join("state.db")))
        .await
        .expect("store");
    let budget = jobrelay_lanes::budget::MemoryBudget::new(4_096);
    let plugin = Arc::new(Gate::default());
    let lane = Lane::open_with(
        "tight",
        Some(plugin.clone() as Arc<dyn Handler>),
        slow_retries(2, 1_000),
        store.clone(),
        None,
        budget.clone(),
    )
    .await
    .expect("lane");
    let kind = Arc::new(JobKind::builtin("batch-job").expect("kind"));
    let mut expected = Vec::new();
    for rv in 1..=40u32 {
        for uid in ["u-1", "u-2"] {
            let at = "2026-11-21T10:00:00Z";
            lane.push(Observed {
                event: event(uid, &rv.to_string(), Phase::Running, None, at),
                kind: kind.clone(),
                from_list: false,
                created: None,
            });
            expected.push(format!("east/{uid}/{rv}"));
        }
    }
    let stats = lane.stats();
    assert!(
        stats.spilled >= 60,
        "most of 80 versions wait in the inbox only: {} spilled",
        stats.spilled
    );
    // The copies on their way to the inbox are charged until stored (the dispatcher, not
    // used here, would wait meanwhile); then only the few kept whole are.
    common_wait(|| async { (budget.held() <= budget.limit()).then_some(()) }).await;
    plugin.open.add_permits(1_000);
    common_wait(|| async { (lane.stats().pending == 0).then_some(()) }).await;
    let delivered = plugin.delivered.lock().clone();
    for uid in ["u-1", "u-2"] {
        let of = |ids: &[String]| -> Vec<String> {
            ids.iter()
                .filter(|id| id.contains(&format!("/{uid}/")))
                .cloned()
                .collect()
        };
        assert_eq!(
            of(&delivered),
            of(&expected),
            "{uid}: every version, in order"
        );
    }
    lane.close().await;
    assert_eq!(
        (budget.held(), budget.spilled()),
        (0, 0),
        "the budget given back"
    );
    assert!(store.inbox("tight").await.expect("inbox").events.is_empty());
}

/// A plugin whose calls wait for a permit each; records what it delivered.
struct Gate {
    open: tokio::sync::Semaphore,
    delivered: parking_lot::Mutex<Vec<String>>,
}

impl Default for Gate {
    fn default() -> Gate {
        Gate {
            open: tokio::sync::Semaphore::new(0),
            delivered: Default::default(),
        }
    }
}

#[async_trait::async_trait]
impl Handler for Gate {
    fn name(&self) -> &str {
        "tight"
    }
    fn version(&self) -> &str {
        "0"
    }
    async fn handle(&self, event: &JobEvent) -> Result<(), CallError> {
        self.open
            .acquire()
            .await
            .map(|p| p.forget())
            .map_err(|_| CallError::Retry("closed".into()))?;
        self.delivered.lock().push(event.id.clone());
        Ok(())
    }
}

/// A call that gave up is settled only once its dead letter is stored: while the store
/// refuses the letter (its table gone here), the job's cursor stays where it was and the event
/// waits in the lane; once the store takes it, the letter is there and the cursor moves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_the_store_refuses_holds_the_job_until_it_is_stored() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    let store = open_store(&StateBackend::Sqlite(path.clone()))
        .await
        .expect("store");
    let options = sqlx::sqlite::SqliteConnectOptions::new().filename(&path);
    let mut conn = sqlx::ConnectOptions::connect(&options)
        .await
        .expect("raw connection");
    let ddl: String =
        sqlx::query_scalar("SELECT sql FROM sqlite_master WHERE name = 'dead_letters'")
            .fetch_one(&mut conn)
            .await
            .expect("the table's definition");
    sqlx::query("DROP TABLE dead_letters")
        .execute(&mut conn)
        .await
        .expect("drop the dead letters");
    let settings = LaneSettings {
        retry: RetryPolicy {
            max_attempts: 1,
            min_delay_ms: 1,
            max_delay_ms: 1,
        },
        ..slow_retries(2, 100)
    };
    let plugin = Arc::new(GivesUp);
    let lane = Lane::open("refusing", plugin, settings, store.clone(), None)
        .await
        .expect("lane");
    let kind = Arc::new(JobKind::builtin("batch-job").expect("kind"));
    let at = "2026-11-21T10:00:00Z";
    lane.push(Observed {
        event: event("u-1", "7", Phase::Failed, None, at),
        kind,
        from_list: false,
        created: None,
    });
    common_wait(|| async { (lane.stats().dead_lettered >= 1).then_some(()) }).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(lane.stats().pending, 1, "the event waits for its letter");
    assert!(
        store
            .cursors("refusing")
            .await
            .expect("cursors")
            .iter()
            .all(|c| c.resource_version != "7"),
        "the cursor moved past an event that is neither delivered nor a stored letter"
    );
    sqlx::query(sqlx::AssertSqlSafe(ddl))
        .execute(&mut conn)
        .await
        .expect("the table back");
    common_wait(|| async { (lane.stats().pending == 0).then_some(()) }).await;
    let letters = store.dead_letters(Some("refusing")).await.expect("letters");
    assert_eq!(letters.len(), 1, "the letter is stored");
    assert_eq!(letters[0].event.id, "east/u-1/7");
    lane.close().await;
}

/// A plugin that refuses every event for good.
struct GivesUp;

#[async_trait::async_trait]
impl Handler for GivesUp {
    fn name(&self) -> &str {
        "refusing"
    }
    fn version(&self) -> &str {
        "0"
    }
    async fn handle(&self, _event: &JobEvent) -> Result<(), CallError> {
        Err(CallError::GiveUp("not this one".into()))
    }
}

/// While an event's cluster is offline, its plugin's retryable failures are waited out and
/// spend no attempt: an outage longer than the retries dead-letters nothing. Back online, the
/// attempts count again (and run out here, the plugin being down for that cluster for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offline_clusters_failures_spend_no_attempt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_store(&StateBackend::Sqlite(dir.path().join("state.db")))
        .await
        .expect("store");
    let mut settings = slow_retries(1, 5);
    settings.retry = RetryPolicy {
        max_attempts: 2,
        min_delay_ms: 20,
        max_delay_ms: 40,
    };
    let down = Arc::new(DownFor {
        cluster: "east",
        delivered: Default::default(),
    });
    let lane = Lane::open("down", down, settings, store.clone(), None)
        .await
        .expect("lane");
    lane.set_cluster_offline("east", true);
    let kind = Arc::new(JobKind::builtin("batch-job").expect("kind"));
    lane.push(Observed {
        event: event("u-1", "1", Phase::Running, None, "2026-11-21T10:00:00Z"),
        kind,
        from_list: false,
        created: None,
    });
    // Many failed calls, far past the two attempts, and no dead letter.
    common_wait(|| async { (lane.stats().failed_calls >= 10).then_some(()) }).await;
    assert!(
        store
            .dead_letters(Some("down"))
            .await
            .expect("letters")
            .is_empty(),
        "nothing dead-lettered while the cluster is offline"
    );
    assert_eq!(lane.stats().pending, 1, "the event still waits");

    lane.set_cluster_offline("east", false);
    let letters = common_wait(|| async {
        let letters = store.dead_letters(Some("down")).await.ok()?;
        (!letters.is_empty()).then_some(letters)
    })
    .await;
    assert_eq!(letters[0].attempts, 2, "{:?}", letters[0]);
    lane.close().await;
}
