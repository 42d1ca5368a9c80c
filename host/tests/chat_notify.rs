//! The chat notifiers (`dingtalk-notify`, `wecom-notify`, `slack-notify`) through real
//! wasmtime, the host's HTTP, kv and deferral capabilities, and real HTTP to the test kit's
//! receivers, which check each service's body format, signature and limits and answer with its
//! own codes.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{event, spec};
use jobrelay_capabilities::Grants;
use jobrelay_capabilities::http::HttpGrant;
use jobrelay_contract::event::{JobEvent, Phase};
use jobrelay_runtime::{CallError, PluginVersion, Runtime};
use jobrelay_testkit::chat::{ChatReceiver, Provider};

const SECRET: &str = "SEC-test-signing-secret";

struct Setup {
    receiver: ChatReceiver,
    _state: tempfile::TempDir,
    rt: Runtime,
}

async fn setup(provider: Provider) -> Setup {
    let receiver = ChatReceiver::start(provider).await.expect("receiver");
    let (state, rt) = common::runtime_with_kv().await;
    Setup {
        receiver,
        _state: state,
        rt,
    }
}

fn grants() -> Grants {
    Grants {
        http: Some(HttpGrant {
            allow: vec!["http://127.0.0.1:*".into()],
            allow_private: true,
            ..HttpGrant::default()
        }),
        kv: true,
        ..Grants::default()
    }
}

/// The plugin of `provider`, with `config`.
async fn load(rt: &Runtime, provider: Provider, config: &[(&str, &str)]) -> Arc<PluginVersion> {
    let name = match provider {
        Provider::DingTalk => "dingtalk-notify",
        Provider::WeCom => "wecom-notify",
        Provider::Slack => "slack-notify",
        Provider::Webhook => "webhook-notify",
    };
    rt.load(spec(name, name, config, grants()))
        .await
        .unwrap_or_else(|e| panic!("{name} loads: {e}"))
}

fn failed(uid: &str) -> JobEvent {
    let mut job = event(
        uid,
        "2",
        Phase::Failed,
        Some(Phase::Running),
        "2026-11-27T10:00:00Z",
    );
    job.reason = Some("BackoffLimitExceeded".into());
    job
}

/// Each provider's throttle answer, as the plugin reports it.
fn throttle_code(provider: Provider) -> &'static str {
    match provider {
        Provider::DingTalk => "130101",
        Provider::WeCom => "45009",
        _ => "429",
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_service_gets_its_format_once_per_transition_and_its_throttle_is_deferred() {
    for provider in [Provider::DingTalk, Provider::WeCom, Provider::Slack] {
        let s = setup(provider).await;
        let signed = provider == Provider::DingTalk;
        let url = s.receiver.add_bot("team", signed.then_some(SECRET));
        let mention = if provider == Provider::Slack {
            "U0OPS"
        } else {
            "ops"
        };
        let mut config = vec![("webhook", url.as_str()), ("mention", mention)];
        if signed {
            config.push(("secret", SECRET));
        }
        let plugin = load(&s.rt, provider, &config).await;

        plugin.handle(&failed("u-1")).await.expect("posted");
        let messages = s.receiver.messages("team");
        assert_eq!(
            messages.len(),
            1,
            "{provider}: {:?}",
            s.receiver.refusals("team")
        );
        assert_eq!(
            messages[0].signed, signed,
            "{provider}: the receiver checked the signature"
        );
        let text = messages[0].text();
        assert!(
            text.contains("ml/train-u-1") && text.contains("BackoffLimitExceeded"),
            "{provider}: {text}"
        );
        let mentioned = match provider {
            Provider::DingTalk => messages[0].body["at"]["atUserIds"][0] == "ops",
            Provider::WeCom => text.contains("<@ops>"),
            _ => text.contains("<@U0OPS>"),
        };
        assert!(
            mentioned,
            "{provider}: a failure mentions: {}",
            messages[0].body
        );

        // The same transition again: not a second request.
        plugin.handle(&failed("u-1")).await.expect("handled");
        assert_eq!(s.receiver.attempts("team"), 1, "{provider}");

        // The service's throttle answer is no failure: the event is deferred (Slack's
        // `Retry-After: 1`, the robots' own wait), spending no attempt; a 503 is a failure,
        // retried; then the message goes through, once.
        s.receiver.throttle_next("team", 1);
        match plugin.handle(&failed("u-2")).await {
            Err(CallError::Deferred { after, reason }) => {
                assert!(
                    reason.contains(throttle_code(provider)),
                    "{provider}: {reason}"
                );
                let expected = match provider {
                    Provider::Slack => 1,
                    _ => 10,
                };
                assert_eq!(after, Duration::from_secs(expected), "{provider}");
            }
            other => panic!("{provider}: expected a deferral, got {other:?}"),
        }
        s.receiver.fail_next("team", 1, 503);
        assert!(matches!(
            plugin.handle(&failed("u-2")).await,
            Err(CallError::Retry(_))
        ));
        plugin
            .handle(&failed("u-2"))
            .await
            .expect("posted after the retries");
        plugin.handle(&failed("u-2")).await.expect("handled");
        let messages = s.receiver.messages("team");
        assert_eq!(messages.len(), 2, "{provider}");
        assert!(messages[1].text().contains("train-u-2"), "{provider}");
        assert_eq!(s.receiver.attempts("team"), 4, "{provider}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_secret_is_refused_by_the_receiver_and_given_up_without_leaking() {
    let s = setup(Provider::DingTalk).await;
    let token = "dingtoken-0123456789abcdef";
    let url = s.receiver.add_bot(token, Some(SECRET));
    let plugin = load(
        &s.rt,
        Provider::DingTalk,
        &[("webhook", url.as_str()), ("secret", "SEC-not-the-secret")],
    )
    .await;
    match plugin.handle(&failed("u-1")).await {
        Err(CallError::GiveUp(reason)) => {
            assert!(reason.contains("310000"), "{reason}");
            assert!(reason.contains("access_token=***"), "{reason}");
            assert!(!reason.contains(token), "never the token: {reason}");
            assert!(
                !reason.contains("not-the-secret"),
                "never the secret: {reason}"
            );
        }
        other => panic!("expected a give-up, got {other:?}"),
    }
    assert!(s.receiver.messages(token).is_empty());
    let refusals = s.receiver.refusals(token);
    assert!(
        refusals.len() == 1 && refusals[0].starts_with("errcode 310000"),
        "{refusals:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digest_window_sends_one_message_listing_the_jobs_it_held_back() {
    for provider in [Provider::DingTalk, Provider::WeCom, Provider::Slack] {
        let s = setup(provider).await;
        let url = s.receiver.add_bot("digest", None);
        let plugin = load(
            &s.rt,
            provider,
            &[("webhook", url.as_str()), ("digest_window", "2s")],
        )
        .await;
        // The first failure of the window goes at once.
        plugin.handle(&failed("u-1")).await.expect("posted");
        assert_eq!(s.receiver.messages("digest").len(), 1);
        // The next two wait for the window's end: deferred, not failed.
        for uid in ["u-2", "u-3"] {
            match plugin.handle(&failed(uid)).await {
                Err(CallError::Deferred { after, .. }) => {
                    assert!(after <= Duration::from_secs(2), "{provider}: {after:?}")
                }
                other => panic!("{provider}: expected a deferral, got {other:?}"),
            }
        }
        assert_eq!(s.receiver.attempts("digest"), 1, "{provider}: held back");
        tokio::time::sleep(Duration::from_millis(2_100)).await;
        // The first held event to come back sends the digest of both.
        plugin.handle(&failed("u-3")).await.expect("digest posted");
        let messages = s.receiver.messages("digest");
        assert_eq!(
            messages.len(),
            2,
            "{provider}: {:?}",
            s.receiver.refusals("digest")
        );
        let digest = messages[1].text();
        assert!(
            digest.contains("2 jobs failed in ml")
                && digest.contains("train-u-2")
                && digest.contains("train-u-3"),
            "{provider}: {digest}"
        );
        // The other finds its transition sent.
        plugin.handle(&failed("u-2")).await.expect("handled");
        assert_eq!(
            s.receiver.attempts("digest"),
            2,
            "{provider}: no third message"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quiet_hours_defer_every_message_to_their_end() {
    let s = setup(Provider::Slack).await;
    let url = s.receiver.add_bot("night", None);
    // Quiet from a minute ago to two minutes from now, at UTC+08:00.
    let local = chrono::Utc::now() + chrono::Duration::hours(8);
    let hhmm = |t: chrono::DateTime<chrono::Utc>| t.format("%H:%M").to_string();
    let quiet = format!(
        "{}-{}",
        hhmm(local - chrono::Duration::minutes(1)),
        hhmm(local + chrono::Duration::minutes(2))
    );
    let plugin = load(
        &s.rt,
        Provider::Slack,
        &[
            ("webhook", url.as_str()),
            ("quiet_hours", quiet.as_str()),
            ("quiet_utc_offset", "+08:00"),
        ],
    )
    .await;
    match plugin.handle(&failed("u-1")).await {
        Err(CallError::Deferred { after, reason }) => {
            assert!(
                after > Duration::from_secs(60) && after <= Duration::from_secs(180),
                "{after:?}"
            );
            assert!(reason.contains("quiet hours"), "{reason}");
        }
        other => panic!("expected a deferral, got {other:?}"),
    }
    assert_eq!(
        s.receiver.attempts("night"),
        0,
        "nothing sent in quiet hours"
    );
}

/// `rate_limits: [{per_minute: 20}]` — the README's, DingTalk's and WeCom's own 20 a minute
/// per robot — through a whole lane, the real plugin and the receiver, which answers the 21st
/// message of any sixty seconds with the service's throttle: a burst of 27 at the start
/// reaches the robot once each, none throttled. (A full token bucket let about 27 into the
/// first minute: 7 throttle answers, each message sent again after its wait.) A minute of real
/// time: the receiver's window is the service's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_under_twenty_a_minute_reaches_each_robot_once_unthrottled() {
    let (dingtalk, wecom) = tokio::join!(
        burst_under_the_limit(Provider::DingTalk),
        burst_under_the_limit(Provider::WeCom)
    );
    for (provider, (messages, attempts, refusals)) in
        [(Provider::DingTalk, dingtalk), (Provider::WeCom, wecom)]
    {
        assert_eq!(messages, 27, "{provider}: every message arrived");
        assert_eq!(
            attempts, 27,
            "{provider}: none was throttled and sent again: {refusals:?}"
        );
    }
}

/// 27 failures at once through a lane of `provider`'s plugin limited to 20 a minute: the
/// messages the robot accepted, the requests it got, and its refusals.
async fn burst_under_the_limit(provider: Provider) -> (usize, usize, Vec<String>) {
    use jobrelay_lanes::lane::{Lane, Observed};
    use jobrelay_lanes::settings::{LaneSettings, RateLimitSpec};
    use jobrelay_state::{StateBackend, open_store};
    use jobrelay_watch::kinds::JobKind;

    let s = setup(provider).await;
    let signed = provider == Provider::DingTalk;
    let url = s.receiver.add_bot("team", signed.then_some(SECRET));
    let mut config = vec![("webhook", url.as_str())];
    if signed {
        config.push(("secret", SECRET));
    }
    let plugin = load(&s.rt, provider, &config).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_store(&StateBackend::Sqlite(dir.path().join("lanes.db")))
        .await
        .expect("store");
    let settings = LaneSettings {
        mode: jobrelay_lanes::mode::DeliveryMode::EveryVersion,
        concurrency: 4,
        retry: Default::default(),
        rate_limits: vec![RateLimitSpec {
            per_second: None,
            per_minute: Some(20),
            burst: None,
        }],
        kinds: Vec::new(),
        filter: Default::default(),
        max_queued_per_job: 1_000,
        max_inbox_events: 1_000_000,
        fleet_events: Default::default(),
    };
    let lane = Lane::open(&format!("{provider}"), plugin, settings, store, None)
        .await
        .expect("lane");
    let kind = Arc::new(JobKind::builtin("batch-job").expect("kind"));
    for n in 0..27 {
        lane.push(Observed {
            event: failed(&format!("u-{n}")),
            kind: kind.clone(),
            from_list: false,
            created: None,
        });
    }
    lane.idle().await;
    lane.close().await;
    (
        s.receiver.messages("team").len(),
        s.receiver.attempts("team"),
        s.receiver.refusals("team"),
    )
}
