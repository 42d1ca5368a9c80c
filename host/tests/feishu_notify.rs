//! The `feishu-notify` plugin through real wasmtime, the host's HTTP and kv capabilities, and
//! real HTTP to the test kit's Feishu receiver, which checks signatures and answers with
//! Feishu's codes.

use crate::common;

use std::sync::Arc;

use common::{event, spec};
use jobrelay_capabilities::Grants;
use jobrelay_capabilities::http::HttpGrant;
use jobrelay_contract::event::Phase;
use jobrelay_runtime::{CallError, PluginVersion, Runtime};
use jobrelay_testkit::FeishuReceiver;

const SECRET: &str = "test-signing-secret";

struct Setup {
    feishu: FeishuReceiver,
    _state: tempfile::TempDir,
    rt: Runtime,
}

async fn setup() -> Setup {
    let feishu = FeishuReceiver::start().await.expect("receiver");
    let (state, rt) = common::runtime_with_kv().await;
    Setup {
        feishu,
        _state: state,
        rt,
    }
}

fn grants(http: bool) -> Grants {
    Grants {
        http: http.then(|| HttpGrant {
            allow: vec!["http://127.0.0.1:*".into()],
            allow_private: true,
            ..HttpGrant::default()
        }),
        kv: true,
        ..Grants::default()
    }
}

async fn load(rt: &Runtime, webhook: &str, secret: &str, http: bool) -> Arc<PluginVersion> {
    rt.load(spec(
        "feishu-notify",
        "feishu-notify",
        &[("webhook", webhook), ("secret", secret)],
        grants(http),
    ))
    .await
    .expect("feishu-notify loads")
}

fn running(uid: &str, rv: &str) -> jobrelay_contract::event::JobEvent {
    event(
        uid,
        rv,
        Phase::Running,
        Some(Phase::Pending),
        "2026-11-21T10:00:00Z",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_cards_once_per_event_and_feishu_codes_mapped() {
    let s = setup().await;
    let url = s.feishu.add_bot("team", Some(SECRET), None);
    let plugin = load(&s.rt, &url, SECRET, true).await;

    plugin.handle(&running("u-1", "1")).await.expect("posted");
    let cards = s.feishu.messages("team");
    assert_eq!(cards.len(), 1);
    assert!(cards[0].signed, "the receiver verified the signature");
    let card = cards[0].body["card"].to_string();
    assert!(
        card.contains("train-u-1") && card.contains("running"),
        "{card}"
    );

    // The same event again (a re-delivery): not posted twice.
    plugin.handle(&running("u-1", "1")).await.expect("handled");
    assert_eq!(s.feishu.attempts("team"), 1, "no second request at all");

    // Not a configured transition: nothing sent.
    let pending = event("u-2", "1", Phase::Pending, None, "2026-11-21T10:00:00Z");
    plugin.handle(&pending).await.expect("skipped");
    assert_eq!(s.feishu.attempts("team"), 1);

    // Throttled (HTTP 200, code 11232) is deferred, not failed; a server error is retried;
    // then it goes through.
    s.feishu.throttle_next("team", 1);
    match plugin.handle(&running("u-3", "1")).await {
        Err(CallError::Deferred { after, reason }) => {
            assert!(reason.contains("11232"), "{reason}");
            assert_eq!(after, std::time::Duration::from_secs(2));
        }
        other => panic!("expected a deferral, got {other:?}"),
    }
    s.feishu.fail_next("team", 1, 500);
    match plugin.handle(&running("u-3", "1")).await {
        Err(CallError::Retry(reason)) => assert!(reason.contains("500"), "{reason}"),
        other => panic!("expected a retry, got {other:?}"),
    }
    plugin
        .handle(&running("u-3", "1"))
        .await
        .expect("posted after the retries");
    assert_eq!(s.feishu.messages("team").len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_secret_or_a_refused_destination_is_a_clear_give_up() {
    let s = setup().await;
    let url = s.feishu.add_bot("strict", Some(SECRET), None);

    let wrong = load(&s.rt, &url, "not-the-secret", true).await;
    match wrong.handle(&running("u-1", "1")).await {
        Err(CallError::GiveUp(reason)) => {
            assert!(reason.contains("19021"), "{reason}");
            assert!(
                !reason.contains("not-the-secret"),
                "never the secret: {reason}"
            );
            assert!(
                !reason.contains("/hook/strict"),
                "never the token: {reason}"
            );
        }
        other => panic!("expected a give-up, got {other:?}"),
    }

    // No HTTP grant: the host refuses the request and the plugin says so.
    let ungranted = load(&s.rt, &url, SECRET, false).await;
    match ungranted.handle(&running("u-2", "1")).await {
        Err(CallError::GiveUp(reason)) => assert!(reason.contains("refused"), "{reason}"),
        other => panic!("expected a give-up, got {other:?}"),
    }
    assert!(s.feishu.messages("strict").is_empty());

    // Granted, but the receiver is on a private address and `allow_private` is not set: the
    // SDK reports the host's refusal as denied, and the plugin gives up at once (retrying a
    // refusal only fills the lane), saying what to grant.
    let private =
        s.rt.load(spec(
            "feishu-notify",
            "feishu-notify",
            &[("webhook", url.as_str()), ("secret", SECRET)],
            Grants {
                http: Some(HttpGrant {
                    allow: vec!["http://127.0.0.1:*".into()],
                    allow_private: false,
                    ..HttpGrant::default()
                }),
                kv: true,
                ..Grants::default()
            },
        ))
        .await
        .expect("feishu-notify loads");
    match private.handle(&running("u-3", "1")).await {
        Err(CallError::GiveUp(reason)) => {
            assert!(reason.contains("allow_private"), "{reason}")
        }
        other => panic!("expected a give-up, got {other:?}"),
    }
    assert!(s.feishu.messages("strict").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_events_still_make_a_card_under_20_kb() {
    let s = setup().await;
    let url = s.feishu.add_bot("odd", Some(SECRET), None);
    let plugin = load(&s.rt, &url, SECRET, true).await;
    let mut odd = event(
        "u-odd",
        "7",
        Phase::Failed,
        Some(Phase::Running),
        "not a time",
    );
    odd.object_json = Arc::from("{}"); // no status at all
    odd.message = Some("Traceback (most recent call last):\n".repeat(2_000)); // ~70 KB
    odd.reason = Some("é".repeat(3_000));
    odd.labels = (0..500)
        .map(|i| (format!("label-{i}"), "v".repeat(60)))
        .collect();
    plugin.handle(&odd).await.expect("a card despite the size");
    let cards = s.feishu.messages("odd");
    assert_eq!(
        cards.len(),
        1,
        "accepted by the receiver, which refuses bodies over 20 KB"
    );
    assert!(cards[0].body.to_string().len() <= 20 * 1024);
}
