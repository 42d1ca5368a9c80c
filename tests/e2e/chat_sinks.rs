//! The chat notifiers in the daemon: real lanes, real wasmtime, real HTTP to the test kit's
//! DingTalk, WeCom and Slack receivers. A throttled window of each service is waited out
//! (deferred, not failed) and every transition still arrives exactly once, in its job's order;
//! a digest window holds back (defers) the failures that follow the first and sends them as one
//! message.

use std::collections::BTreeMap;
use std::time::Duration;

use jobrelay::daemon::Daemon;
use jobrelay_e2e::*;
use jobrelay_testkit::chat::{ChatReceiver, Provider, Received};
use jobrelay_testkit::{Flavor, JobDriver, SimCluster};

const SECRET: &str = "SEC-e2e-signing-secret";
const TOKEN: &str = "e2e-robot-token-0001";

/// `(job name, phase)` of each message, from its default title `Kind ns/name: phase`.
fn announced(messages: &[Received]) -> Vec<(String, String)> {
    messages
        .iter()
        .filter_map(|m| {
            let text = m.text();
            let (_, rest) = text.split_once("ml/")?;
            let (name, rest) = rest.split_once(": ")?;
            let phase: String = rest.chars().take_while(char::is_ascii_lowercase).collect();
            Some((name.to_string(), phase))
        })
        .collect()
}

fn manifest(wasm: &str, url: &str, extra: &str) -> String {
    format!(
        "wasm: {wasm}\ndelivery: transitions\n\
         retry: {{max_attempts: 10, min_delay_ms: 20, max_delay_ms: 200}}\n\
         grants:\n  http: {{allow: [\"http://127.0.0.1:*\"], allow_private: true}}\n  kv: true\n\
         config:\n  webhook: \"{url}\"\n  phases: running,succeeded,failed\n{extra}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttled_windows_are_waited_out_and_a_digest_holds_failures_back() {
    init_logs();
    let sim = SimCluster::start("east").await.expect("simulator");
    let mut receivers = BTreeMap::new();
    for provider in [Provider::DingTalk, Provider::WeCom, Provider::Slack] {
        let receiver = ChatReceiver::start(provider).await.expect("receiver");
        let secret = (provider == Provider::DingTalk).then_some(SECRET);
        receiver.add_bot(TOKEN, secret);
        // The throttle below is the window under test; the services' minute limits would
        // only add more of the same.
        receiver.set_rate_limit(TOKEN, false);
        receiver.throttle_next(TOKEN, 4);
        receivers.insert(provider.name(), receiver);
    }
    let digest = ChatReceiver::start(Provider::Slack)
        .await
        .expect("receiver");
    digest.add_bot("digest", None);
    digest.set_rate_limit("digest", false);

    let setup = Setup::new("kinds: [{name: batch-job}]\n");
    for (plugin, wasm) in [
        ("dingtalk", "dingtalk-notify"),
        ("wecom", "wecom-notify"),
        ("slack", "slack-notify"),
    ] {
        setup.install_wasm(wasm, &format!("{wasm}.wasm"));
        let provider = match plugin {
            "dingtalk" => Provider::DingTalk,
            "wecom" => Provider::WeCom,
            _ => Provider::Slack,
        };
        let url = receivers[provider.name()].url(TOKEN);
        let extra = if plugin == "dingtalk" {
            format!("  secret: \"{SECRET}\"\n")
        } else {
            String::new()
        };
        setup.write_manifest(plugin, &manifest(&format!("{wasm}.wasm"), &url, &extra));
    }
    setup.write_manifest(
        "digest",
        &format!(
            "concurrency: 1\n{}",
            manifest(
                "slack-notify.wasm",
                &digest.url("digest"),
                "  digest_window: 10s\n"
            )
            .replace("phases: running,succeeded,failed", "phases: failed")
        ),
    );
    setup.add_cluster(&sim);
    let daemon = Daemon::start(setup.config_dir())
        .await
        .expect("daemon starts");
    wait_synced(&daemon, "east").await;

    let mut expected = Vec::new();
    for i in 0..6 {
        let name = format!("train-{i}");
        let mut job = JobDriver::builder(Flavor::Batch, "ml", &name)
            .create(&sim)
            .expect("job");
        job.running().expect("running");
        let end = if i % 2 == 0 {
            job.failed("OOMKilled").expect("failed");
            "failed"
        } else {
            job.succeeded().expect("succeeded");
            "succeeded"
        };
        expected.push((name.clone(), "running".to_string()));
        expected.push((name, end.to_string()));
    }
    expected.sort();

    // The digest plugin: the first failure went at once; the other two were deferred to the
    // window's end and go as one message listing both. Nothing is lost or repeated.
    let failed: Vec<String> = expected
        .iter()
        .filter(|(_, p)| p == "failed")
        .map(|(n, _)| n.clone())
        .collect();
    let first = digest
        .wait_for_messages("digest", 1, Duration::from_secs(30))
        .await
        .expect("the first failure");
    assert_eq!(announced(&first).len(), 1, "{}", first[0].text());
    wait_for("the digest plugin deferring", || {
        let lane = daemon.plugins().get("digest")?.lane.clone()?;
        (lane.deferred >= 2).then_some(())
    })
    .await;
    let lane = daemon.plugins()["digest"].lane.clone().expect("lane");
    assert_eq!(lane.failed_calls, 0, "a deferral is no failure: {lane:?}");
    assert_eq!(digest.attempts("digest"), 1, "held back for the window");
    let messages = digest
        .wait_for_messages("digest", 2, Duration::from_secs(60))
        .await
        .expect("the digest");
    let list = messages[1].text();
    assert!(list.contains("2 jobs failed in ml"), "{list}");
    let mut listed: Vec<String> = announced(&messages[..1])
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    for name in &failed {
        if list.contains(&format!("Job {name} (east)")) {
            listed.push(name.clone());
        }
    }
    listed.sort();
    assert_eq!(listed, failed, "every failure announced once: {list}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(digest.attempts("digest"), 2, "no message after the digest");
    // The throttled services: each throttled request was waited out (the robots' own 10 s,
    // Slack's `Retry-After: 1`) and delivered once.
    for (service, receiver) in &receivers {
        let messages = receiver
            .wait_for_messages(TOKEN, expected.len(), Duration::from_secs(60))
            .await
            .unwrap_or_else(|e| panic!("{service}: {e}"));
        let mut got = announced(&messages);
        // Each job's messages in its order.
        for (name, _) in &expected {
            let of_job: Vec<&String> = got
                .iter()
                .filter(|(n, _)| n == name)
                .map(|(_, p)| p)
                .collect();
            assert_eq!(
                of_job.first().map(|p| p.as_str()),
                Some("running"),
                "{service}: {name}"
            );
        }
        got.sort();
        assert_eq!(got, expected, "{service}: every transition once");
        let refusals = receiver.refusals(TOKEN);
        assert_eq!(
            refusals.len(),
            4,
            "{service}: the throttled window: {refusals:?}"
        );
        if *service == "DingTalk" {
            assert!(messages.iter().all(|m| m.signed), "{service}: signed");
        }
    }
    for plugin in ["dingtalk", "wecom", "slack"] {
        let lane = daemon.plugins()[plugin].lane.clone().expect("lane");
        assert_eq!(lane.dead_lettered, 0, "{plugin}: {lane:?}");
        assert_eq!(
            lane.failed_calls, 0,
            "{plugin}: a throttle is no failure: {lane:?}"
        );
        assert!(
            lane.deferred >= 4,
            "{plugin}: the throttle deferred: {lane:?}"
        );
    }

    daemon.shutdown(Duration::from_secs(10)).await;
}
