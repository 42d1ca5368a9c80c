//! One transition, one card: a transition that reached Feishu live, whose acknowledgement was
//! then lost (jobrelay killed between the card and the cursor write), is delivered again after
//! the restart as a reconstruction from a later version of the job. feishu-notify dedupes on
//! the transition key, which the live event and the reconstruction share, so the team sees one
//! `failed` card, not two. (Deduping on the event id, as before 0.2.0, posts twice: the
//! reconstruction's id is `rv~phase~n` of the later version.)

use std::time::Duration;

use jobrelay::daemon::Daemon;
use jobrelay_e2e::{Setup, init_logs, wait_synced};
use jobrelay_testkit::{FeishuReceiver, Flavor, JobDriver, SimCluster};
use serde_json::json;
use sqlx::sqlite::SqlitePool;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transition_delivered_live_and_rebuilt_after_a_lost_ack_posts_one_card() {
    init_logs();
    let sim = SimCluster::start("east").await.expect("simulator");
    let feishu = FeishuReceiver::start().await.expect("feishu receiver");
    let token = "one-card";
    let webhook = feishu.add_bot(token, None, None);
    let setup = Setup::new("kinds: [{name: volcano-job}]\n");
    setup.install_wasm("feishu-notify", "feishu-notify.wasm");
    setup.write_manifest(
        "feishu-notify",
        &format!(
            "wasm: feishu-notify.wasm\ndelivery: transitions\n\
             grants:\n  http: {{allow: [\"http://127.0.0.1:*\"], allow_private: true}}\n  kv: true\n\
             config:\n  webhook: \"{webhook}\"\n  phases: failed\n"
        ),
    );
    setup.add_cluster(&sim);
    let daemon = Daemon::start(setup.config_dir()).await.expect("daemon");
    wait_synced(&daemon, "east").await;

    let mut job = JobDriver::create(&sim, Flavor::Volcano, "ml", "train").expect("job");
    job.running().expect("running");
    let running_rv = job.resource_version().to_string();
    let running_at = job.object().expect("object")["status"]["state"]["lastTransitionTime"]
        .as_str()
        .expect("a transition time")
        .to_string();
    job.failed("OOMKilled").expect("failed");
    feishu
        .wait_for_messages(token, 1, Duration::from_secs(60))
        .await
        .expect("the failed card");
    let state = setup.path("state/jobrelay.db");
    let uid = job.uid().to_string();
    let pool = SqlitePool::connect(&format!("sqlite://{}", state.display()))
        .await
        .expect("state file");
    let started = std::time::Instant::now();
    loop {
        let phase: Option<String> = sqlx::query_scalar(
            "SELECT phase FROM cursors WHERE plugin = 'feishu-notify' AND uid = ?",
        )
        .bind(&uid)
        .fetch_optional(&pool)
        .await
        .expect("read the cursor");
        if phase.as_deref() == Some("failed") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the failed transition is never acknowledged ({phase:?})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    daemon.shutdown(Duration::from_secs(10)).await;

    // The lost acknowledgement: the cursor is back where it was before the card.
    let rewound = sqlx::query(
        "UPDATE cursors SET phase = 'running', resource_version = ?, transition_time = ? \
         WHERE plugin = 'feishu-notify' AND uid = ?",
    )
    .bind(&running_rv)
    .bind(&running_at)
    .bind(&uid)
    .execute(&pool)
    .await
    .expect("rewind the cursor");
    assert_eq!(rewound.rows_affected(), 1);
    pool.close().await;

    // The kit's controller clock runs up to a few seconds ahead of the wall clock the
    // simulator stamps deletions with; a deletion is always after the failure it follows.
    let failed_at = job.object().expect("object")["status"]["state"]["lastTransitionTime"]
        .as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .expect("a failure time");
    while chrono::Utc::now() <= failed_at + chrono::Duration::seconds(1) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // While jobrelay is down, the job is being deleted (held by someone else's finalizer), so
    // the restart sees a later version: `terminating`, after `failed`.
    let gvr = Flavor::Volcano.gvr();
    sim.patch_merge(
        &gvr,
        "ml",
        "train",
        json!({"metadata": {"finalizers": ["example.com/hold"]}}),
    )
    .expect("a foreign finalizer");
    sim.delete(&gvr, "ml", "train").expect("deletion requested");

    let daemon = Daemon::start(setup.config_dir()).await.expect("restart");
    wait_synced(&daemon, "east").await;
    let started = std::time::Instant::now();
    let rebuilt = loop {
        let lane = daemon.plugins()["feishu-notify"]
            .lane
            .clone()
            .expect("a lane");
        if lane.delivered >= 2 && lane.pending == 0 && lane.in_flight == 0 {
            break lane;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the failed transition was not delivered again: {lane:?}; cards: {:#?}",
            feishu.messages(token)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    daemon.idle().await;
    let cards = feishu.messages(token);
    assert_eq!(
        cards.len(),
        1,
        "one failed card, however often the transition is delivered ({rebuilt:?}): {cards:#?}"
    );
    daemon.shutdown(Duration::from_secs(10)).await;
}
