//! When a cluster's credentials expire, as the daemon's `/status` shows it: a kubeconfig with a
//! JWT token and a client certificate of known expiry, then the file replaced by one with other
//! dates (a rotation), which the cluster's health follows.

use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine as _;
use jobrelay::daemon::Daemon;
use jobrelay_testkit::{SimCluster, SimOptions};
use serde_json::Value;

const DEADLINE: Duration = Duration::from_secs(60);

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A JWT (unsigned: nothing checks it) that expires at `exp`.
fn jwt(exp: i64) -> String {
    let part = |json: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json);
    format!(
        "{}.{}.c2lnbmF0dXJl",
        part(r#"{"alg":"RS256","kid":"test"}"#),
        part(&format!(r#"{{"iss":"test","sub":"relay","exp":{exp}}}"#))
    )
}

/// A self-signed client certificate valid until midnight UTC of the day, and its key (PEM).
fn certificate(year: i32, month: u8, day: u8) -> (String, String) {
    let mut params =
        rcgen::CertificateParams::new(vec!["jobrelay-relay".to_string()]).expect("params");
    params.not_after = rcgen::date_time_ymd(year, month, day);
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = params.self_signed(&key).expect("certificate");
    (cert.pem(), key.serialize_pem())
}

/// `sim`'s kubeconfig with `token` as the user's token and the client certificate and key.
fn kubeconfig(sim: &SimCluster, token: &str, (cert, key): &(String, String)) -> String {
    let mut doc: Value =
        serde_yaml_ng::from_str(&sim.kubeconfig_yaml_with_token(token)).expect("kubeconfig");
    let user = &mut doc["users"][0]["user"];
    user["client-certificate-data"] = Value::from(b64(cert.as_bytes()));
    user["client-key-data"] = Value::from(b64(key.as_bytes()));
    serde_yaml_ng::to_string(&doc).expect("YAML")
}

fn write_atomic(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp-write");
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

async fn status(addr: std::net::SocketAddr) -> Value {
    serde_json::from_str(&get(addr, "/status").await).expect("status is JSON")
}

/// The body of `GET path`, which must answer 200.
async fn get(addr: std::net::SocketAddr, path: &str) -> String {
    let (head, body) = crate::process::http_get(addr, path)
        .await
        .expect("a response");
    assert!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "{head}"
    );
    body.to_string()
}

fn unix(rfc3339: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .expect("a date")
        .timestamp()
}

/// `(credential, expires_at, expires_unix)` of the cluster in `/status`.
async fn expiries(addr: std::net::SocketAddr, cluster: &str) -> Vec<(String, String, i64)> {
    let status = status(addr).await;
    let list = status["clusters"][cluster]["credentials_expire"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    list.iter()
        .map(|e| {
            (
                e["credential"].as_str().unwrap_or_default().to_string(),
                e["expires_at"].as_str().unwrap_or_default().to_string(),
                e["expires_unix"].as_i64().unwrap_or_default(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_when_credentials_expire_and_follows_a_rotated_kubeconfig() {
    // 2030-03-17T17:46:40Z; the cluster accepts this token, so it is a working cluster.
    let first_token = jwt(1_900_000_000);
    let sim = SimCluster::start_with(
        "east",
        SimOptions {
            token: Some(first_token.clone()),
            ..SimOptions::default()
        },
    )
    .await
    .expect("simulator");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path();
    std::fs::create_dir_all(config.join("clusters")).expect("mkdir");
    std::fs::write(
        config.join("jobrelay.yaml"),
        "state: {path: state/jobrelay.db}\ntelemetry: {listen: \"127.0.0.1:0\"}\n\
         debounce_ms: 100\nrescan_seconds: 2\n",
    )
    .expect("main file");
    let kubeconfig_path = config.join("clusters/east.yaml");
    write_atomic(
        &kubeconfig_path,
        &kubeconfig(&sim, &first_token, &certificate(2031, 5, 6)),
    );

    let daemon = Daemon::start(config).await.expect("daemon starts");
    let addr = daemon.telemetry_addr().expect("telemetry listens");
    let first = vec![
        (
            "token".to_string(),
            "2030-03-17T17:46:40Z".to_string(),
            1_900_000_000,
        ),
        (
            "client_certificate".to_string(),
            "2031-05-06T00:00:00Z".to_string(),
            unix("2031-05-06T00:00:00Z"),
        ),
    ];
    let started = Instant::now();
    loop {
        let synced = daemon
            .clusters()
            .get("east")
            .is_some_and(|h| h.state == jobrelay::clusters::health::HealthState::Synced);
        if synced {
            break;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "east never synced: {:?}",
            daemon.clusters()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(expiries(addr, "east").await, first);

    // The kubeconfig is rotated: a new token and certificate, with other dates.
    let second_token = jwt(2_000_000_000); // 2033-05-18T03:33:20Z
    write_atomic(
        &kubeconfig_path,
        &kubeconfig(&sim, &second_token, &certificate(2034, 7, 8)),
    );
    let second = vec![
        (
            "token".to_string(),
            "2033-05-18T03:33:20Z".to_string(),
            2_000_000_000,
        ),
        (
            "client_certificate".to_string(),
            "2034-07-08T00:00:00Z".to_string(),
            unix("2034-07-08T00:00:00Z"),
        ),
    ];
    let started = Instant::now();
    loop {
        let now = expiries(addr, "east").await;
        if now == second {
            break;
        }
        assert!(
            now == first && started.elapsed() < DEADLINE,
            "the rotated kubeconfig's dates never showed: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The same dates as a metric, for the alerts (Unix seconds).
    let metrics = get(addr, "/metrics").await;
    for line in [
        "jobrelay_cluster_credential_expiry_timestamp_seconds{cluster=\"east\",credential=\"token\"} 2000000000",
        &format!(
            "jobrelay_cluster_credential_expiry_timestamp_seconds{{cluster=\"east\",credential=\"client_certificate\"}} {}",
            unix("2034-07-08T00:00:00Z")
        ),
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in:\n{metrics}");
    }

    // An opaque token and no certificate: nothing to say, and the old dates are gone.
    let mut doc: Value = serde_yaml_ng::from_str(&sim.kubeconfig_yaml()).expect("kubeconfig");
    doc["users"][0]["user"]["token"] = Value::from("opaque-token-without-a-date");
    write_atomic(
        &kubeconfig_path,
        &serde_yaml_ng::to_string(&doc).expect("YAML"),
    );
    let started = Instant::now();
    while status(addr).await["clusters"]["east"]["credentials_expire"] != serde_json::json!([]) {
        assert!(
            started.elapsed() < DEADLINE,
            "the dates of the replaced kubeconfig stayed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let body = status(addr).await.to_string();
    for secret in [&first_token, &second_token] {
        assert!(!body.contains(secret.as_str()), "a token is in /status");
    }
    daemon.shutdown(Duration::from_secs(5)).await;
}
