//! Catch-up for jobs a lane has delivered nothing of: after a kill dropped the queues, or for
//! a job first seen in a list, every transition the job's status records is delivered (the
//! `transitions` mode here, as feishu-notify uses it), except for jobs that existed before the
//! plugin was installed, which get their current state. The install time is the state store's,
//! so a restart is not an install.

use crate::common;

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, FixedOffset};
use jobrelay_contract::event::{JobEvent, Phase};
use jobrelay_lanes::handler::Handler;
use jobrelay_lanes::lane::{Lane, Observed};
use jobrelay_lanes::mode::DeliveryMode;
use jobrelay_lanes::settings::{LaneSettings, RetryPolicy};
use jobrelay_runtime::CallError;
use jobrelay_state::{DeliveryStore, StateBackend, open_store};
use jobrelay_watch::kinds::JobKind;
use serde_json::json;

fn transitions() -> LaneSettings {
    LaneSettings {
        mode: DeliveryMode::Transitions,
        concurrency: 2,
        retry: RetryPolicy {
            max_attempts: 100,
            min_delay_ms: 60_000,
            max_delay_ms: 60_000,
        },
        rate_limits: Vec::new(),
        kinds: Vec::new(),
        filter: Default::default(),
        max_queued_per_job: 1_000,
        max_inbox_events: jobrelay_lanes::settings::DEFAULT_MAX_INBOX_EVENTS,
        fleet_events: Default::default(),
    }
}

/// Records the phases it is handed; or, when `down`, fails every call with a retry (a plugin
/// far behind: nothing is acknowledged).
#[derive(Default)]
struct Recorder {
    down: bool,
    got: Mutex<Vec<(Option<Phase>, Phase, bool)>>,
}

impl Recorder {
    fn got(&self) -> Vec<(Option<Phase>, Phase, bool)> {
        self.got.lock().clone()
    }
}

#[async_trait::async_trait]
impl Handler for Recorder {
    fn name(&self) -> &str {
        "recorder"
    }
    fn version(&self) -> &str {
        "0"
    }
    async fn handle(&self, event: &JobEvent) -> Result<(), CallError> {
        if self.down {
            return Err(CallError::Retry("behind".into()));
        }
        self.got
            .lock()
            .push((event.previous_phase, event.phase, event.synthetic));
        Ok(())
    }
}

fn at(base: &DateTime<FixedOffset>, seconds: i64) -> String {
    (*base + chrono::Duration::seconds(seconds)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// A Volcano job created at `created` that went Pending → Running → Completed a few seconds
/// later; `deleting`: its deletion was requested after that (it is `terminating`).
fn volcano(uid: &str, rv: &str, created: &DateTime<FixedOffset>, deleting: bool) -> Observed {
    let mut metadata = json!({"name": format!("train-{uid}"), "namespace": "ml", "uid": uid,
        "resourceVersion": rv, "creationTimestamp": at(created, 0)});
    if deleting {
        metadata["deletionTimestamp"] = json!(at(created, 9));
    }
    let object = json!({
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": metadata,
        "status": {
            "state": {"phase": "Completed", "lastTransitionTime": at(created, 8)},
            "conditions": [
                {"status": "Pending", "lastTransitionTime": at(created, 1)},
                {"status": "Running", "lastTransitionTime": at(created, 2)},
                {"status": "Completed", "lastTransitionTime": at(created, 8)},
            ]
        }
    });
    let phase = if deleting {
        Phase::Terminating
    } else {
        Phase::Succeeded
    };
    let mut event = common::event(uid, rv, phase, None, &at(created, 9));
    event.api_version = "batch.volcano.sh/v1alpha1".into();
    event.raw_phase = "Completed".into();
    event.object_json = Arc::from(object.to_string());
    Observed {
        event,
        kind: Arc::new(JobKind::builtin("volcano-job").expect("kind")),
        from_list: true,
        created: None,
    }
}

/// The job's first version, as a watch sees it when the job is created.
fn created(uid: &str, created: &DateTime<FixedOffset>) -> Observed {
    let mut observed = volcano(uid, "1", created, false);
    observed.event.phase = Phase::Pending;
    observed.event.transition_time = at(created, 1);
    observed.from_list = false;
    observed
}

async fn store(dir: &tempfile::TempDir) -> Arc<dyn DeliveryStore> {
    open_store(&StateBackend::Sqlite(dir.path().join("state.db")))
        .await
        .expect("store")
}

/// The install time the store holds for `plugin` (the lane recorded it on open).
async fn install_time(store: &Arc<dyn DeliveryStore>, plugin: &str) -> DateTime<FixedOffset> {
    let stored = store
        .install_time(plugin, "2000-01-01T00:00:00Z")
        .await
        .expect("install time");
    DateTime::parse_from_rfc3339(&stored).expect("an RFC 3339 install time")
}

/// A recording `transitions` lane on a new store, and a time one second after its install (a
/// job born then gets its history).
async fn fresh_lane(dir: &tempfile::TempDir) -> (Arc<Recorder>, Lane, DateTime<FixedOffset>) {
    let store = store(dir).await;
    let plugin = Arc::new(Recorder::default());
    let lane = Lane::open("notify", plugin.clone(), transitions(), store.clone(), None)
        .await
        .expect("lane");
    let born = install_time(&store, "notify").await + chrono::Duration::seconds(1);
    (plugin, lane, born)
}

async fn delivered(
    lane: &Lane,
    plugin: &Recorder,
    count: usize,
) -> Vec<(Option<Phase>, Phase, bool)> {
    let started = std::time::Instant::now();
    loop {
        lane.idle().await;
        let got = plugin.got();
        if got.len() >= count {
            return got;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "only {got:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

const HISTORY_THEN_TERMINATING: [(Option<Phase>, Phase, bool); 4] = [
    (None, Phase::Pending, true),
    (Some(Phase::Pending), Phase::Running, true),
    (Some(Phase::Running), Phase::Succeeded, true),
    (Some(Phase::Succeeded), Phase::Terminating, false),
];

/// jobrelay killed while the plugin was behind: the job was seen (its first sight noted) but nothing
/// of it delivered. After the restart the list shows it terminating, after it succeeded: the
/// plugin gets every recorded transition, then the real version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_lane_delivers_the_history_of_a_job_it_delivered_nothing_of() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = store(&dir).await;
    let behind = Arc::new(Recorder {
        down: true,
        ..Recorder::default()
    });
    let first = Lane::open("notify", behind.clone(), transitions(), store.clone(), None)
        .await
        .expect("lane");
    let born = install_time(&store, "notify").await + chrono::Duration::seconds(1);
    first.push(created("u-1", &born));
    first.close().await; // the kill: the queued pending version is not acknowledged
    assert!(behind.got().is_empty());

    let plugin = Arc::new(Recorder::default());
    let lane = Lane::open("notify", plugin.clone(), transitions(), store.clone(), None)
        .await
        .expect("lane after the restart");
    lane.push(volcano("u-1", "40", &born, true));
    let got = delivered(&lane, &plugin, 4).await;
    assert_eq!(got, HISTORY_THEN_TERMINATING);
    lane.close().await;
}

/// A lane with no cursor at all for a job created after the install, first seeing it in a
/// list as terminating: the succeeded transition (and the ones before) are delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_first_seen_terminating_gets_its_outcome_delivered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (plugin, lane, born) = fresh_lane(&dir).await;
    lane.push(volcano("u-2", "50", &born, true));
    let got = delivered(&lane, &plugin, 4).await;
    assert_eq!(got, HISTORY_THEN_TERMINATING);
    // Listed again: nothing repeats.
    lane.push(volcano("u-2", "50", &born, true));
    lane.idle().await;
    assert_eq!(plugin.got().len(), 4);
    lane.close().await;
}

/// A plugin installed while jobs exist: they get their current state, not a card for every
/// step of their past.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_installed_after_jobs_exist_gets_no_history_of_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = store(&dir).await;
    let plugin = Arc::new(Recorder::default());
    let lane = Lane::open("notify", plugin.clone(), transitions(), store.clone(), None)
        .await
        .expect("lane");
    let old = install_time(&store, "notify").await - chrono::Duration::hours(1);
    lane.push(volcano("u-3", "60", &old, true));
    let got = delivered(&lane, &plugin, 1).await;
    assert_eq!(got, vec![(None, Phase::Terminating, false)]);
    lane.close().await;
}

/// The install is recorded once: a lane opened again later (a restart, a replica, the plugin
/// removed and added back) keeps the first install time, so a job created between the install
/// and the restart still gets its history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_after_the_install_is_not_an_install() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = store(&dir).await;
    // Installed at the start of 2026 (the first open of the lane recorded it then).
    store
        .install_time("notify", "2026-01-01T00:00:00Z")
        .await
        .expect("install");
    let plugin = Arc::new(Recorder::default());
    let lane = Lane::open("notify", plugin.clone(), transitions(), store.clone(), None)
        .await
        .expect("lane");
    let born = DateTime::parse_from_rfc3339("2026-03-01T10:00:00Z").expect("time");
    lane.push(volcano("u-4", "70", &born, true));
    let got = delivered(&lane, &plugin, 4).await;
    assert_eq!(got, HISTORY_THEN_TERMINATING);
    assert_eq!(
        install_time(&store, "notify").await,
        DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z").expect("time"),
        "opening the lane again did not move the install"
    );
    lane.close().await;
}

/// A plugin that already had cursors before install times were kept (an upgrade) counts as
/// installed before any job: a job it has not seen gets its history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_with_cursors_but_no_install_time_counts_as_installed_long_ago() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = store(&dir).await;
    let mut seen = common::event("u-old", "5", Phase::Running, None, "2025-01-01T00:00:00Z");
    seen.cluster = "east".into();
    store
        .save_cursor(&jobrelay_state::Cursor::from_event("notify", &seen))
        .await
        .expect("cursor");
    let plugin = Arc::new(Recorder::default());
    let lane = Lane::open("notify", plugin.clone(), transitions(), store.clone(), None)
        .await
        .expect("lane");
    let born = DateTime::parse_from_rfc3339("2025-06-01T10:00:00Z").expect("time");
    lane.push(volcano("u-5", "80", &born, true));
    let got = delivered(&lane, &plugin, 4).await;
    assert_eq!(got, HISTORY_THEN_TERMINATING);
    lane.close().await;
}

/// Running delivered live, then, after a gap, the restart rebuilt and the running seen.
const RUNNING_RESTART_REBUILT_RUNNING: [(Option<Phase>, Phase, bool); 3] = [
    (None, Phase::Running, false),
    (Some(Phase::Running), Phase::Restarting, true),
    (Some(Phase::Restarting), Phase::Running, false),
];

/// Volcano job `u-9` running since `since` (seconds after `born`; the state's time), with
/// status entries `history` (raw phase, seconds after `born`).
fn volcano_running(
    rv: &str,
    born: &DateTime<FixedOffset>,
    since: i64,
    history: &[(&str, i64)],
    from_list: bool,
) -> Observed {
    let entries: Vec<serde_json::Value> = history
        .iter()
        .map(|(p, s)| json!({"status": p, "lastTransitionTime": at(born, *s)}))
        .collect();
    let mut observed = volcano("u-9", rv, born, false);
    let object = json!({
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": "train-u-9", "namespace": "ml", "uid": "u-9",
            "resourceVersion": rv, "creationTimestamp": at(born, 0)},
        "status": {"state": {"phase": "Running", "lastTransitionTime": at(born, since)},
                   "conditions": entries}
    });
    observed.event.phase = Phase::Running;
    observed.event.raw_phase = "Running".into();
    observed.event.transition_time = at(born, since);
    observed.event.object_json = Arc::from(object.to_string());
    observed.from_list = from_list;
    observed
}

/// A Volcano job delivered while running, that restarted and ran again while the watch was
/// broken: the re-list shows it running as before, but entered anew. The restart is rebuilt
/// from its status and delivered between the two stays in running (before, a lane took the
/// same phase for the same stay and the restart was lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_wholly_inside_a_gap_is_rebuilt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (plugin, lane, born) = fresh_lane(&dir).await;
    let first = [("Pending", 1), ("Running", 2)];
    lane.push(volcano_running("10", &born, 2, &first, false));
    assert_eq!(
        delivered(&lane, &plugin, 1).await,
        [(None, Phase::Running, false)]
    );
    let again = [
        ("Pending", 1),
        ("Running", 2),
        ("Restarting", 4),
        ("Running", 5),
    ];
    lane.push(volcano_running("20", &born, 5, &again, true));
    let got = delivered(&lane, &plugin, 3).await;
    assert_eq!(got, RUNNING_RESTART_REBUILT_RUNNING);
    lane.close().await;
}

/// The same within one second: the job's running status was rewritten at t5 (its state time
/// moved on, a Running entry added to the stay entered at t2) and delivered; while the watch
/// was broken it restarted and ran again, all within t5. The re-list shows it running with
/// the same state time as the version delivered — yet another stay, as its entries tell, and
/// the restart between is rebuilt (before, the same phase at the same time was taken for the
/// same stay, and the restart and the new stay were both lost). The version delivered, seen
/// again, rebuilds nothing — before and after jobrelay restarts between the two (what the lane
/// accepted is then its stored cursor).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_within_the_second_of_a_rewrite_is_rebuilt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (plugin, lane, born) = fresh_lane(&dir).await;
    let rewritten = [("Pending", 1), ("Running", 2), ("Running", 5)];
    lane.push(volcano_running("10", &born, 5, &rewritten, false));
    assert_eq!(
        delivered(&lane, &plugin, 1).await,
        [(None, Phase::Running, false)]
    );
    lane.push(volcano_running("10", &born, 5, &rewritten, true));
    lane.idle().await;
    lane.close().await;
    drop(lane);
    let lane = Lane::open(
        "notify",
        plugin.clone(),
        transitions(),
        store(&dir).await,
        None,
    )
    .await
    .expect("lane opened again");
    lane.push(volcano_running("10", &born, 5, &rewritten, true));
    let again = [
        ("Pending", 1),
        ("Running", 2),
        ("Running", 5),
        ("Restarting", 5),
        ("Running", 5),
    ];
    lane.push(volcano_running("20", &born, 5, &again, true));
    let got = delivered(&lane, &plugin, 3).await;
    assert_eq!(got, RUNNING_RESTART_REBUILT_RUNNING);
    // Nothing more: the same version listed again is no gap.
    lane.push(volcano_running("20", &born, 5, &again, true));
    lane.idle().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    lane.idle().await;
    assert_eq!(plugin.got(), got);
    lane.close().await;
}
