//! The `http` capability end to end: the `probe` component (built by `plugins/build.sh`) makes
//! a GET through the standard `wasi:http/outgoing-handler`, real wasmtime runs it, and a tiny
//! HTTP server on 127.0.0.1 answers (or does not).
//!
//! The probe's `http-get` behaviour reads its URL from the annotation `jobrelay.test/url` and
//! gives up with `http: <error-code debug>` when the request or its body fails, so each refusal
//! is asserted by the error code's name. After every refusal an allowed request through the
//! same runtime must still succeed: a refusal fails the call it happens in, nothing else.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use jobrelay_capabilities::Grants;
use jobrelay_capabilities::http::HttpGrant;
use jobrelay_contract::event::{JobEvent, Phase};
use jobrelay_runtime::{CallError, LoadError, PluginSpec, PluginVersion, Runtime, RuntimeSettings};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const MIB: u64 = 1 << 20;

fn wasm(name: &str) -> Arc<[u8]> {
    let path: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("target")
        .join("plugins")
        .join(format!("{name}.wasm"));
    match std::fs::read(&path) {
        Ok(bytes) => bytes.into(),
        Err(e) => panic!(
            "cannot read {} ({e}): build the test components first with `plugins/build.sh`",
            path.display()
        ),
    }
}

/// One runtime for every test of this file: the probe is compiled once and each test's
/// plugin versions share its cache. The engine's epoch ticker is a thread of its own, so the
/// runtime outlives the tokio runtime of the test that built it.
fn runtime() -> Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            Runtime::new(RuntimeSettings {
                max_instances: 64,
                max_memory_mb: 64,
                ..RuntimeSettings::default()
            })
            .expect("runtime builds")
        })
        .clone()
}

fn grant(allow: &[&str], allow_private: bool) -> HttpGrant {
    HttpGrant {
        allow: allow.iter().map(|entry| entry.to_string()).collect(),
        allow_private,
        ..HttpGrant::default()
    }
}

async fn load(name: &str, http: Option<HttpGrant>) -> Arc<PluginVersion> {
    try_load(name, http).await.expect("probe loads")
}

async fn try_load(name: &str, http: Option<HttpGrant>) -> Result<Arc<PluginVersion>, LoadError> {
    runtime()
        .load(PluginSpec {
            name: name.into(),
            version: format!("{name}-v1"),
            wasm: wasm("probe"),
            wasm_sha256: String::new(),
            timeout: Duration::from_secs(5),
            memory_bytes: 32 * MIB,
            instance_reuse: 1,
            config: BTreeMap::new(),
            grants: Grants {
                http,
                ..Grants::default()
            },
        })
        .await
}

fn get(url: &str) -> JobEvent {
    JobEvent {
        id: JobEvent::make_id("c1", "u-1", "7"),
        cluster: "c1".into(),
        api_version: "batch/v1".into(),
        kind: "Job".into(),
        namespace: "ml".into(),
        name: "train-1".into(),
        uid: "u-1".into(),
        resource_version: "7".into(),
        generation: Some(1),
        phase: Phase::Running,
        raw_phase: "Running".into(),
        reason: None,
        message: None,
        previous_phase: Some(Phase::Pending),
        transition_time: "2026-11-21T10:00:00Z".into(),
        labels: BTreeMap::from([("jobrelay.test/behave".to_string(), "http-get".to_string())]),
        annotations: BTreeMap::from([("jobrelay.test/url".to_string(), url.to_string())]),
        object_json: Arc::from(r#"{"kind":"Job"}"#),
        transition_key: String::new(),
        synthetic: false,
        story: None,
    }
}

/// An event asking the probe to POST `n` bytes to `url` through the SDK's HTTP helper.
fn post(url: &str, n: usize) -> JobEvent {
    let mut event = get(url);
    event
        .labels
        .insert("jobrelay.test/behave".into(), format!("http-post:{n}"));
    event
}

/// Asserts the call gave up with a message naming one of `codes`.
fn assert_gave_up(result: Result<(), CallError>, codes: &[&str]) -> String {
    match result {
        Err(CallError::GiveUp(message)) => {
            assert!(
                codes.iter().any(|code| message.contains(code)),
                "expected one of {codes:?}, got {message:?}"
            );
            message
        }
        other => panic!("expected give-up with one of {codes:?}, got {other:?}"),
    }
}

/// A fixed-answer HTTP server on 127.0.0.1.
struct Server {
    port: u16,
    /// Connections accepted.
    connections: Arc<AtomicUsize>,
    /// The head (request line and headers) of every request received.
    heads: Arc<Mutex<Vec<String>>>,
}

impl Server {
    /// Answers every request with `answer`; `None`: accepts and never answers.
    async fn start(answer: Option<Vec<u8>>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let port = listener.local_addr().expect("bound address").port();
        let connections = Arc::new(AtomicUsize::new(0));
        let heads = Arc::new(Mutex::new(Vec::new()));
        let (count, seen) = (connections.clone(), heads.clone());
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let (answer, seen) = (answer.clone(), seen.clone());
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match socket.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    if let Ok(mut heads) = seen.lock() {
                        heads.push(String::from_utf8_lossy(&head).into_owned());
                    }
                    match answer {
                        Some(bytes) => {
                            let _ = socket.write_all(&bytes).await;
                            let _ = socket.shutdown().await;
                        }
                        // Hold the connection open, silent, longer than any test waits.
                        None => tokio::time::sleep(Duration::from_secs(60)).await,
                    }
                });
            }
        });
        Server {
            port,
            connections,
            heads,
        }
    }

    fn url(&self, host: &str, path: &str) -> String {
        format!("http://{host}:{}{path}", self.port)
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().map(|h| h.clone()).unwrap_or_default()
    }
}

fn answer(status: &str, body: &[u8]) -> Vec<u8> {
    let mut bytes = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// A body with no declared length: `chunk` bytes at a time, `count` chunks.
fn chunked(chunk: usize, count: usize) -> Vec<u8> {
    let mut bytes =
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n".to_vec();
    for _ in 0..count {
        bytes.extend_from_slice(format!("{chunk:x}\r\n").as_bytes());
        bytes.extend(std::iter::repeat_n(b'y', chunk));
        bytes.extend_from_slice(b"\r\n");
    }
    bytes.extend_from_slice(b"0\r\n\r\n");
    bytes
}

/// An allowed request through the shared runtime still succeeds.
async fn assert_still_serves() {
    let server = Server::start(Some(answer("200 OK", b"still here"))).await;
    let open = load("open", Some(grant(&["http://127.0.0.1:*"], true))).await;
    open.handle(&get(&server.url("127.0.0.1", "/health")))
        .await
        .expect("an allowed request after a refusal succeeds");
    assert_eq!(server.connections(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_grant_every_request_is_denied() {
    let server = Server::start(Some(answer("200 OK", b"ok"))).await;
    let plugin = load("no-grant", None).await;
    for _ in 0..2 {
        let result = plugin.handle(&get(&server.url("127.0.0.1", "/"))).await;
        assert_gave_up(result, &["HttpRequestDenied"]);
    }
    assert_eq!(server.connections(), 0, "nothing reached the server");
    assert_still_serves().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_private_address_is_refused_without_allow_private() {
    let server = Server::start(Some(answer("200 OK", b"ok"))).await;
    let plugin = load("public-only", Some(grant(&["http://127.0.0.1:*"], false))).await;
    let result = plugin.handle(&get(&server.url("127.0.0.1", "/"))).await;
    assert_gave_up(result, &["DestinationIpProhibited"]);
    assert_eq!(server.connections(), 0, "nothing reached the server");
    assert_still_serves().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_allow_private_the_request_is_made_and_answered() {
    let server = Server::start(Some(answer("200 OK", b"hello"))).await;
    let plugin = load("private-ok", Some(grant(&["http://127.0.0.1:*"], true))).await;
    plugin
        .handle(&get(&server.url("127.0.0.1", "/hook/abc?x=1")))
        .await
        .expect("200 handled");
    let heads = server.heads();
    assert_eq!(heads.len(), 1);
    assert!(
        heads[0].starts_with("GET /hook/abc?x=1 HTTP/1.1\r\n"),
        "{}",
        heads[0]
    );
    let host = format!("host: 127.0.0.1:{}\r\n", server.port);
    assert!(
        heads[0].to_ascii_lowercase().contains(&host),
        "{}",
        heads[0]
    );

    // A non-2xx status is the plugin's to judge: the probe asks for a retry.
    let unavailable = Server::start(Some(answer("503 Service Unavailable", b"busy"))).await;
    match plugin
        .handle(&get(&unavailable.url("127.0.0.1", "/")))
        .await
    {
        Err(CallError::Retry(message)) => assert_eq!(message, "status 503"),
        other => panic!("expected retry on 503, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_not_on_the_list_is_denied() {
    let server = Server::start(Some(answer("200 OK", b"ok"))).await;
    let plugin = load("by-address", Some(grant(&["http://127.0.0.1:*"], true))).await;
    // `localhost` resolves to 127.0.0.1, but names are matched as names.
    let result = plugin.handle(&get(&server.url("localhost", "/"))).await;
    assert_gave_up(result, &["HttpRequestDenied"]);
    let result = plugin
        .handle(&get(&format!("https://127.0.0.1:{}/", server.port)))
        .await;
    assert_gave_up(result, &["HttpRequestDenied"]);
    assert_eq!(server.connections(), 0, "nothing reached the server");
    assert_still_serves().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_over_max_response_bytes_fails_the_request() {
    let mut capped = grant(&["http://127.0.0.1:*"], true);
    capped.max_response_bytes = Some(1024);
    let plugin = load("capped", Some(capped)).await;

    // Exactly the cap passes.
    let exact = Server::start(Some(answer("200 OK", &[b'x'; 1024]))).await;
    plugin
        .handle(&get(&exact.url("127.0.0.1", "/")))
        .await
        .expect("a body of exactly max_response_bytes is read");

    // A declared length over the cap: refused with the error code, before the body.
    let declared = Server::start(Some(answer("200 OK", &[b'x'; 4096]))).await;
    let result = plugin.handle(&get(&declared.url("127.0.0.1", "/"))).await;
    assert_gave_up(result, &["HttpResponseBodySize(Some(1024))"]);

    // No declared length: the body fails when it passes the cap. WASI 0.2 hands a body error
    // to the guest as a stream error without an error code, so the probe reports its text.
    let streamed = Server::start(Some(chunked(512, 8))).await;
    let result = plugin.handle(&get(&streamed.url("127.0.0.1", "/"))).await;
    let message = assert_gave_up(result, &["body size exceeds limit: 1024 bytes"]);
    assert!(message.starts_with("http: body:"), "{message}");

    assert_still_serves().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_times_out_within_the_grant() {
    let silent = Server::start(None).await;
    let mut quick = grant(&["http://127.0.0.1:*"], true);
    quick.timeout_ms = Some(300);
    let plugin = load("quick", Some(quick)).await;
    let started = Instant::now();
    let result = plugin.handle(&get(&silent.url("127.0.0.1", "/"))).await;
    let took = started.elapsed();
    // The first-byte timeout and the whole-request deadline are both 300 ms; either may fire.
    assert_gave_up(result, &["ConnectionReadTimeout", "HttpResponseTimeout"]);
    assert!(
        took >= Duration::from_millis(250),
        "gave up too early: {took:?}"
    );
    assert!(
        took < Duration::from_secs(2),
        "took {took:?}; the call's own limit is 5 s"
    );
    assert_eq!(silent.connections(), 1);
    assert_still_serves().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_allow_entry_fails_the_load_naming_it() {
    let error = try_load(
        "bad-grant",
        Some(grant(
            &["https://ok.example.com", "https://hooks.example.com/path"],
            false,
        )),
    )
    .await
    .expect_err("a pattern with a path is refused");
    assert!(matches!(error, LoadError::Grant { .. }), "{error}");
    assert!(
        error
            .to_string()
            .contains("`https://hooks.example.com/path`"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loaded_grant_shows_the_canonical_patterns() {
    let plugin = load(
        "canonical",
        Some(grant(&["HTTPS://Open.Feishu.cn", "http://*.svc:*"], false)),
    )
    .await;
    let allow = plugin.grants().http.as_ref().map(|g| g.allow.clone());
    assert_eq!(
        allow,
        Some(vec![
            "https://open.feishu.cn:443".to_string(),
            "http://*.svc:*".to_string()
        ])
    );
}

/// A `std::io::Write` into a shared buffer, for capturing log lines.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut buffer) = self.0.lock() {
            buffer.extend_from_slice(bytes);
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        self.0
            .lock()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }
}

// One thread, so the thread-local subscriber sees the hook's spawned tasks too.
#[tokio::test(flavor = "current_thread")]
async fn refusals_are_logged_with_plugin_and_destination_but_no_path_or_query() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let plugin = load("logged", Some(grant(&["http://127.0.0.1:*"], false))).await;
    let result = plugin
        .handle(&get(
            "http://127.0.0.1:9/hook/SECRET-TOKEN?sign=SECRET-SIGN",
        ))
        .await;
    assert_gave_up(result, &["DestinationIpProhibited"]);
    let result = plugin
        .handle(&get(
            "http://other.example:8080/hook/SECRET-TOKEN?sign=SECRET-SIGN",
        ))
        .await;
    assert_gave_up(result, &["HttpRequestDenied"]);

    let logs = captured.text();
    let refusals: Vec<&str> = logs
        .lines()
        .filter(|line| line.contains("outbound HTTP request refused"))
        .collect();
    assert_eq!(refusals.len(), 2, "one line per refusal: {logs}");
    // The plugin sees a bare error code: the log says which grant would allow the request,
    // as a warning.
    assert!(refusals.iter().all(|line| line.contains("WARN")), "{logs}");
    assert!(
        refusals[0].contains("grants.http.allow_private: true"),
        "{}",
        refusals[0]
    );
    assert!(
        refusals[1].contains("add \"http://other.example:8080\" there"),
        "{}",
        refusals[1]
    );
    assert!(refusals[0].contains("plugin=\"logged\""), "{}", refusals[0]);
    assert!(
        refusals[0].contains("destination=http://127.0.0.1:9"),
        "{}",
        refusals[0]
    );
    assert!(refusals[0].contains("allow_private"), "{}", refusals[0]);
    assert!(
        refusals[1].contains("destination=http://other.example:8080"),
        "{}",
        refusals[1]
    );
    assert!(
        !logs.contains("SECRET"),
        "a path or query was logged: {logs}"
    );

    // The same refusal again within the minute: a debug line, not another warning.
    let result = plugin
        .handle(&get(
            "http://127.0.0.1:9/hook/SECRET-TOKEN?sign=SECRET-SIGN",
        ))
        .await;
    assert_gave_up(result, &["DestinationIpProhibited"]);
    let logs = captured.text();
    let refusals: Vec<&str> = logs
        .lines()
        .filter(|line| line.contains("outbound HTTP request refused"))
        .collect();
    assert_eq!(refusals.len(), 3, "{logs}");
    assert!(refusals[2].contains("DEBUG"), "{}", refusals[2]);
}

/// One call cannot hold more connections than `max_concurrent_requests`: a plugin starting 200
/// requests at once to a server that never answers gets the rest refused with
/// `connection-limit-reached` (each counted as a refusal of the plugin), and the server sees at
/// most that many connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_call_cannot_open_more_requests_than_its_grant_allows() {
    let silent = Server::start(None).await;
    let mut capped = grant(&["http://127.0.0.1:*"], true);
    // Long enough that the admitted requests stay open while the rest are tried.
    capped.timeout_ms = Some(3_000);
    capped.max_concurrent_requests = Some(8);
    let plugin = load("capped", Some(capped)).await;
    let mut flood = get(&silent.url("127.0.0.1", "/"));
    flood
        .labels
        .insert("jobrelay.test/behave".into(), "http-flood:200".into());
    let result = plugin.handle(&flood).await;
    let Err(CallError::GiveUp(report)) = result else {
        panic!("expected the flood's report, got {result:?}");
    };
    let refused: usize = report
        .split("refused ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(refused >= 150, "{report}");
    assert_eq!(
        runtime()
            .services()
            .refusals
            .of("capped")
            .get("http_open_requests"),
        Some(&(refused as u64)),
        "every refusal is counted for the plugin"
    );
    assert!(
        silent.connections() <= 8,
        "{} connections reached the server",
        silent.connections()
    );
    assert_still_serves().await;
}

/// The SDK's HTTP helper (`jobrelay_guest::http::send`, what every shipped Rust plugin posts
/// with) sends a body of any size whole, its length declared: empty, around the stream's
/// 4,096-byte pieces, and far past them. The request is handed over before its body is
/// written, in the pieces `check-write` allows; a body written first would stop at what the
/// host buffers and the call would run into its time limit. The answer's headers come back:
/// a 429's `Retry-After` reaches the plugin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_posts_bodies_of_every_size_whole() {
    use crate::common::receiver::{BODY_SIZES, Receiver, pattern, whole};

    let receiver = Receiver::answering(|request| match request.target.as_str() {
        "/busy" => (429, vec![("retry-after".into(), "7".into())], Vec::new()),
        _ => (204, Vec::new(), Vec::new()),
    })
    .await;
    let plugin = load("poster", Some(grant(&["http://127.0.0.1:*"], true))).await;
    for (n, size) in BODY_SIZES.into_iter().enumerate() {
        let started = Instant::now();
        plugin
            .handle(&post(&format!("{}/hook", receiver.url), size))
            .await
            .unwrap_or_else(|e| panic!("{size} bytes: {e}"));
        let requests = receiver.wait_for(n + 1, Duration::from_secs(5)).await;
        let request = &requests[n];
        assert_eq!(
            (request.method.as_str(), request.target.as_str()),
            ("POST", "/hook")
        );
        if let Err(why) = whole(request, &pattern(size)) {
            panic!("{size} bytes: {why}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{size} bytes took {:?}",
            started.elapsed()
        );
    }
    match plugin
        .handle(&post(&format!("{}/busy", receiver.url), 10))
        .await
    {
        Err(CallError::Retry(message)) => assert_eq!(message, "status 429, retry-after 7"),
        other => panic!("expected the 429 with its Retry-After, got {other:?}"),
    }
}
