//! `probe`: a test plugin that behaves like a small event recorder, and misbehaves on request.
//!
//! Normally it logs one line through the host's `log` import and appends one JSON line
//! (`"by":"probe"` plus id, cluster, name, phase, resource_version, and `instance_calls`, the
//! number of events this instance has handled) to `/data/probe.jsonl`.
//!
//! The label `jobrelay.test/behave` on the event asks for something else:
//!
//! | value          | what happens                                                       |
//! |----------------|--------------------------------------------------------------------|
//! | `trap`         | panics, which traps the instance                                   |
//! | `loop`         | spins forever, until the host's epoch deadline stops it            |
//! | `oom`          | allocates and touches memory until an allocation fails             |
//! | `retry`        | returns `handler-error::retry`                                     |
//! | `giveup`       | returns `handler-error::give-up`                                   |
//! | `sleep-ms:N`   | busy-waits N milliseconds on the monotonic clock, then records     |
//! | `read:PATH`    | reads PATH and returns `give-up` saying whether the read succeeded |
//! | `spam`         | writes 1 MiB to stdout and stderr and 2,000 log lines, then records |
//! | `flaky:N`      | fails with `retry` the first N calls for each event id, then records; the count |
//! |                | is kept in `/data/flaky/<hash of id>` so it survives fresh instances |
//! | `job-writes`   | runs the writes listed in the annotation `jobrelay.test/writes` (below) |
//! |                | through the `job` interface, appends one outcome per write to      |
//! |                | `/data/job-writes.txt` (`<uid> <outcome>` lines), then records     |
//! | `defer:N`      | defers the first N calls for each event id by one second (`deferral.defer(1)`, |
//! |                | then `retry`), counted in `/data/deferred/<hash of id>`, then records |
//! | `http-get`     | GETs the URL in the annotation `jobrelay.test/url` (see below)     |
//! | `http-flood:N` | starts N GETs of that URL at once, waits for them all, and gives up |
//! |                | with `opened A, refused B (connection-limit-reached), failed C`    |
//! | `http-post:N`  | POSTs N bytes (byte `i` is `i % 251`) to that URL through the SDK's |
//! |                | `jobrelay_guest::http::send`; see below                            |
//!
//! `http-get` sends a GET through the standard `wasi:http/outgoing-handler` (the `wasip2`
//! crate, as a real plugin would) and reads the whole body. It gives up with
//! `http: <error-code debug>` (e.g. `http: ErrorCode::HttpRequestDenied`) if the request or
//! the body fails, or with `http: body: <io-error debug string>` for a body error that carries
//! no error code; it asks for a retry with `status <n>` for a non-2xx status; otherwise it
//! returns `Ok` without recording. `http-post:N` is how the SDK's own helper sends a body (the
//! tests try bodies around the stream's 4 KiB pieces and far past them): `Ok` for a 2xx,
//! `retry` with `status <n>, retry-after <value or ->` for any other status (the answer's
//! headers, as the helper returns them), `give-up` with `http: <the helper's error>` when no
//! answer came. The URL travels in an annotation, not in the label, because
//! Kubernetes label values are at most 63 characters with no `:` or `/`.
//!
//! `jobrelay.test/writes` holds one write per line: `annotate KEY VALUE`, `label KEY VALUE`
//! (`-` as the value removes the key), `annotate-big KEY BYTES` (a value of that many `x`),
//! `flood N` (N label writes in a row) or `sleep MS`. The outcome of a write is `ok`, or the
//! error's case (`denied`, `invalid`, `gone`, `unavailable`); a flood appends one line with
//! how many ended each way (`flood ok=8 denied=9992`).
//!
//! The config key `fail_init=true` makes `init` refuse its configuration; `init_marker=true`
//! makes `init` write the file `/data/init-ran`, so a test can tell whether `init` ran.
//!
//! Fleet events (`handle-fleet`) are recorded the same way, to the same file, as a line with
//! `"fleet"` (the event's kind) instead of a job's `name`, `phase` and `resource_version`:
//! `{"by":"probe","fleet":"cluster-offline","id":…,"cluster":…,"rule":…,"since":…,
//! "instance_calls":…}` (`rule` only for rule events). A fleet event has no labels, so what it
//! does is set in the config: `fleet_behave=<value>` for every fleet event, and
//! `fleet_behave.<cluster>=<value>` for those of one cluster (it wins over `fleet_behave`),
//! with the values of the table above that need no job: `trap`, `loop`, `oom`, `retry`,
//! `giveup`, `sleep-ms:N`, `read:PATH`, `spam`, `flaky:N` and `defer:N` (counted per fleet
//! event id, in the same folders). The others give up, saying they need a job event.

use std::fs::OpenOptions;
use std::hint::black_box;
use std::io::Write;
use std::time::{Duration, Instant};

use serde::Serialize;

use jobrelay_guest::log::{self as host_log, Level};
use jobrelay_guest::{FleetEvent, Guest, HandlerError, JobEvent, fleet_kind_name, phase_name};

const BEHAVE_LABEL: &str = "jobrelay.test/behave";
const URL_ANNOTATION: &str = "jobrelay.test/url";
const WRITES_ANNOTATION: &str = "jobrelay.test/writes";
const OUTPUT: &str = "/data/probe.jsonl";

#[derive(Serialize)]
struct Line<'a> {
    by: &'static str,
    id: &'a str,
    cluster: &'a str,
    name: &'a str,
    phase: &'static str,
    resource_version: &'a str,
    /// Events this instance has handled, this one included: 1 on a fresh instance.
    instance_calls: u32,
}

/// One line of the output file for a fleet event.
#[derive(Serialize)]
struct FleetLine<'a> {
    by: &'static str,
    fleet: &'static str,
    id: &'a str,
    cluster: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    rule: Option<&'a str>,
    since: &'a str,
    /// Events (job or fleet) this instance has handled, this one included.
    instance_calls: u32,
}

/// Per-instance counter: shows whether the host reused an instance.
static INSTANCE_CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// The `fleet_behave` config: the behaviour for every fleet event, and per cluster. Set by
/// `init`, which runs on every instance before any event.
static FLEET_BEHAVE: std::sync::Mutex<FleetBehave> = std::sync::Mutex::new(FleetBehave {
    all: String::new(),
    by_cluster: Vec::new(),
});

struct FleetBehave {
    all: String,
    by_cluster: Vec<(String, String)>,
}

impl FleetBehave {
    fn of(config: &[(String, String)]) -> FleetBehave {
        let mut behave = FleetBehave {
            all: String::new(),
            by_cluster: Vec::new(),
        };
        for (key, value) in config {
            if key == "fleet_behave" {
                behave.all = value.clone();
            } else if let Some(cluster) = key.strip_prefix("fleet_behave.") {
                behave.by_cluster.push((cluster.to_string(), value.clone()));
            }
        }
        behave
    }

    fn for_cluster(&self, cluster: &str) -> String {
        self.by_cluster
            .iter()
            .find(|(c, _)| c == cluster)
            .map_or_else(|| self.all.clone(), |(_, value)| value.clone())
    }
}

fn record(event: &JobEvent) -> Result<(), HandlerError> {
    append_line(&Line {
        by: "probe",
        id: &event.id,
        cluster: &event.cluster,
        name: &event.name,
        phase: phase_name(event.phase),
        resource_version: &event.resource_version,
        instance_calls: INSTANCE_CALLS.load(std::sync::atomic::Ordering::Relaxed),
    })
}

fn record_fleet(event: &FleetEvent) -> Result<(), HandlerError> {
    append_line(&FleetLine {
        by: "probe",
        fleet: fleet_kind_name(event.kind),
        id: &event.id,
        cluster: &event.cluster,
        rule: event.rule.as_deref(),
        since: &event.since,
        instance_calls: INSTANCE_CALLS.load(std::sync::atomic::Ordering::Relaxed),
    })
}

/// Appends one JSON line to the output file; a failed append is `retry`.
fn append_line(line: &impl Serialize) -> Result<(), HandlerError> {
    let mut bytes = serde_json::to_vec(line)
        .map_err(|e| HandlerError::GiveUp(format!("cannot encode: {e}")))?;
    bytes.push(b'\n');
    let written = OpenOptions::new()
        .create(true)
        .append(true)
        .open(OUTPUT)
        .and_then(|mut file| file.write_all(&bytes));
    written.map_err(|e| HandlerError::Retry(format!("cannot append to {OUTPUT}: {e}")))
}

/// Never returns: the only way out is the host interrupting the instance.
fn spin_forever() -> ! {
    let mut counter: u64 = 0;
    loop {
        counter = black_box(counter.wrapping_add(1));
    }
}

/// Allocates 1 MiB blocks and writes into each, so the pages are really used, until the
/// allocator cannot grow memory; Rust then aborts, which traps.
fn exhaust_memory() -> ! {
    let mut blocks: Vec<Vec<u8>> = Vec::new();
    loop {
        let block = vec![0xa5u8; 1 << 20];
        blocks.push(black_box(block));
    }
}

fn busy_wait(ms: u64) {
    let until = Instant::now() + Duration::from_millis(ms);
    while Instant::now() < until {
        black_box(());
    }
}

fn spam() {
    let chunk = vec![b'x'; 1023];
    let mut out = std::io::stdout();
    let mut err = std::io::stderr();
    for _ in 0..1024 {
        // Output the host throws away must never fail the plugin; ignore errors anyway.
        let _ = out.write_all(&chunk).and_then(|()| out.write_all(b"\n"));
        let _ = err.write_all(&chunk).and_then(|()| err.write_all(b"\n"));
    }
    for i in 0..2000 {
        host_log::write(Level::Debug, &format!("spam line {i}"));
    }
}

struct Probe;

impl Guest for Probe {
    fn init(config: Vec<(String, String)>) -> Result<(), String> {
        let fail = config
            .iter()
            .any(|(key, value)| key == "fail_init" && value == "true");
        if fail {
            return Err("probe refuses this configuration (fail_init=true)".to_string());
        }
        let marker = config
            .iter()
            .any(|(key, value)| key == "init_marker" && value == "true");
        if marker {
            std::fs::write("/data/init-ran", b"init ran\n")
                .map_err(|e| format!("cannot write /data/init-ran: {e}"))?;
        }
        *FLEET_BEHAVE
            .lock()
            .map_err(|_| "fleet_behave lock poisoned".to_string())? = FleetBehave::of(&config);
        Ok(())
    }

    fn handle(event: JobEvent) -> Result<(), HandlerError> {
        INSTANCE_CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let behave = event
            .labels
            .iter()
            .find(|(key, _)| key == BEHAVE_LABEL)
            .map(|(_, value)| value.as_str())
            .unwrap_or("");
        host_log::write(
            Level::Info,
            &format!("probe handling {} (behave={behave:?})", event.id),
        );
        match behave {
            "job-writes" => job_writes(&event)?,
            "http-get" => {
                let url = event
                    .annotations
                    .iter()
                    .find(|(key, _)| key == URL_ANNOTATION)
                    .map(|(_, value)| value.as_str())
                    .ok_or_else(|| {
                        HandlerError::GiveUp(format!(
                            "http-get needs the annotation {URL_ANNOTATION}"
                        ))
                    })?;
                // Answers without recording: the HTTP tests grant no `/data`.
                return http_get(url);
            }
            other if other.starts_with("http-post:") => {
                let n = other["http-post:".len()..].parse::<usize>().map_err(|_| {
                    HandlerError::GiveUp(format!("http-post: `{other}` has no byte count"))
                })?;
                let url = event
                    .annotations
                    .iter()
                    .find(|(key, _)| key == URL_ANNOTATION)
                    .map(|(_, value)| value.clone())
                    .unwrap_or_default();
                return http_post(&url, n);
            }
            other if other.starts_with("http-flood:") => {
                let n = other["http-flood:".len()..].parse::<usize>().unwrap_or(100);
                let url = event
                    .annotations
                    .iter()
                    .find(|(key, _)| key == URL_ANNOTATION)
                    .map(|(_, value)| value.clone())
                    .unwrap_or_default();
                return Err(http_flood(&url, n));
            }
            other => misbehave(other, &event.id)?,
        }
        record(&event)
    }

    fn handle_fleet(event: FleetEvent) -> Result<(), HandlerError> {
        INSTANCE_CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let behave = FLEET_BEHAVE
            .lock()
            .map(|behave| behave.for_cluster(&event.cluster))
            .unwrap_or_default();
        host_log::write(
            Level::Info,
            &format!(
                "probe handling fleet event {} (behave={behave:?})",
                event.id
            ),
        );
        if matches!(behave.as_str(), "job-writes" | "http-get")
            || behave.starts_with("http-flood:")
            || behave.starts_with("http-post:")
        {
            return Err(HandlerError::GiveUp(format!(
                "probe: `{behave}` needs a job event"
            )));
        }
        misbehave(&behave, &event.id)?;
        record_fleet(&event)
    }
}

/// Does what a behaviour that needs no job asks for (see the table at the top): `Ok` to go
/// on and record the event (also for an empty or unknown value), or the answer to give.
fn misbehave(behave: &str, id: &str) -> Result<(), HandlerError> {
    match behave {
        "trap" => panic!("probe was asked to trap on {id}"),
        "loop" => spin_forever(),
        "oom" => exhaust_memory(),
        "retry" => Err(HandlerError::Retry("probe was asked to retry".to_string())),
        "giveup" => Err(HandlerError::GiveUp(
            "probe was asked to give up".to_string(),
        )),
        "spam" => {
            spam();
            Ok(())
        }
        other => {
            if let Some(ms) = other.strip_prefix("sleep-ms:") {
                let ms = ms
                    .parse::<u64>()
                    .map_err(|e| HandlerError::GiveUp(format!("bad sleep-ms: {e}")))?;
                busy_wait(ms);
            } else if let Some(n) = other.strip_prefix("flaky:") {
                let n = n
                    .parse::<u32>()
                    .map_err(|e| HandlerError::GiveUp(format!("bad flaky: {e}")))?;
                if counted_call(id, "flaky")? <= n {
                    return Err(HandlerError::Retry(format!(
                        "probe is flaky: failing the first {n} calls"
                    )));
                }
            } else if let Some(n) = other.strip_prefix("defer:") {
                let n = n
                    .parse::<u32>()
                    .map_err(|e| HandlerError::GiveUp(format!("bad defer: {e}")))?;
                if counted_call(id, "deferred")? <= n {
                    jobrelay_guest::deferral::defer(1);
                    return Err(HandlerError::Retry(format!(
                        "probe defers the first {n} calls"
                    )));
                }
            } else if let Some(path) = other.strip_prefix("read:") {
                return Err(HandlerError::GiveUp(match std::fs::read(path) {
                    Ok(bytes) => format!("read succeeded: {} bytes from {path}", bytes.len()),
                    Err(e) => format!("read failed: {path}: {e}"),
                }));
            }
            Ok(())
        }
    }
}

/// Runs the writes of `jobrelay.test/writes` and appends their outcomes.
fn job_writes(event: &JobEvent) -> Result<(), HandlerError> {
    use jobrelay_guest::job;
    let outcome = |result: Result<(), job::Error>| match result {
        Ok(()) => "ok",
        Err(job::Error::Denied(_)) => "denied",
        Err(job::Error::Invalid(_)) => "invalid",
        Err(job::Error::Gone(_)) => "gone",
        Err(job::Error::Unavailable(_)) => "unavailable",
    };
    let spec = event
        .annotations
        .iter()
        .find(|(key, _)| key == WRITES_ANNOTATION)
        .map(|(_, value)| value.clone())
        .unwrap_or_default();
    let mut lines = String::new();
    for op in spec.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let parts: Vec<&str> = op.splitn(3, ' ').collect();
        let value = |v: &str| (v != "-").then(|| v.to_string());
        let result = match parts.as_slice() {
            ["annotate", key, v] => outcome(job::annotate(key, value(v).as_deref())).to_string(),
            ["label", key, v] => outcome(job::label(key, value(v).as_deref())).to_string(),
            ["annotate-big", key, n] => {
                let big = "x".repeat(n.parse().unwrap_or(0));
                outcome(job::annotate(key, Some(&big))).to_string()
            }
            ["flood", n] => {
                let mut counts = std::collections::BTreeMap::new();
                for i in 0..n.parse::<u32>().unwrap_or(0) {
                    let key = format!("jobrelay.io/flood-{i}");
                    *counts
                        .entry(outcome(job::label(&key, Some("1"))))
                        .or_insert(0) += 1;
                }
                let counts: Vec<String> = counts.iter().map(|(k, n)| format!("{k}={n}")).collect();
                format!("flood {}", counts.join(" "))
            }
            ["sleep", ms] => {
                busy_wait(ms.parse().unwrap_or(0));
                continue;
            }
            _ => return Err(HandlerError::GiveUp(format!("bad write `{op}`"))),
        };
        lines.push_str(&format!("{} {result}\n", event.uid));
    }
    OpenOptions::new()
        .create(true)
        .append(true)
        .open("/data/job-writes.txt")
        .and_then(|mut file| file.write_all(lines.as_bytes()))
        .map_err(|e| HandlerError::Retry(format!("cannot append the outcomes: {e}")))
}

/// Counts this call for the event id in `/data/<dir>/` (a granted folder, so the count
/// survives fresh instances) and returns its number, from 1.
fn counted_call(id: &str, dir: &str) -> Result<u32, HandlerError> {
    let hash = id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    let dir = format!("/data/{dir}");
    let path = format!("{dir}/{hash:016x}");
    let io = |e: std::io::Error| HandlerError::GiveUp(format!("call counter {path}: {e}"));
    std::fs::create_dir_all(&dir).map_err(io)?;
    let seen: u32 = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0);
    std::fs::write(&path, (seen + 1).to_string()).map_err(io)?;
    Ok(seen + 1)
}

/// GETs `url` (`scheme://authority[/path]`) and reads the whole response body.
fn http_get(url: &str) -> Result<(), HandlerError> {
    use wasip2::http::outgoing_handler;
    use wasip2::http::types::{Fields, IncomingBody, Method, OutgoingRequest, Scheme};
    use wasip2::io::streams::StreamError;

    let give_up = |what: String| HandlerError::GiveUp(format!("http: {what}"));
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| give_up(format!("not a URL: {url}")))?;
    let (authority, path) = match rest.find('/') {
        Some(slash) => rest.split_at(slash),
        None => (rest, "/"),
    };
    let scheme = match scheme {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        other => Scheme::Other(other.to_string()),
    };

    let request = OutgoingRequest::new(Fields::new());
    let refused = |what: &str| give_up(format!("the host refused the request's {what}"));
    request
        .set_method(&Method::Get)
        .map_err(|()| refused("method"))?;
    request
        .set_scheme(Some(&scheme))
        .map_err(|()| refused("scheme"))?;
    request
        .set_authority(Some(authority))
        .map_err(|()| refused("authority"))?;
    request
        .set_path_with_query(Some(path))
        .map_err(|()| refused("path"))?;

    let future =
        outgoing_handler::handle(request, None).map_err(|code| give_up(format!("{code:?}")))?;
    future.subscribe().block();
    let response = match future.get() {
        Some(Ok(Ok(response))) => response,
        Some(Ok(Err(code))) => return Err(give_up(format!("{code:?}"))),
        Some(Err(())) => return Err(give_up("response already taken".to_string())),
        None => return Err(give_up("no response after waiting".to_string())),
    };
    let status = response.status();

    let body = response
        .consume()
        .map_err(|()| give_up("body already taken".to_string()))?;
    let mut read = 0usize;
    {
        let stream = body
            .stream()
            .map_err(|()| give_up("stream already taken".to_string()))?;
        loop {
            match stream.blocking_read(64 * 1024) {
                Ok(chunk) => read += chunk.len(),
                Err(StreamError::Closed) => break,
                Err(StreamError::LastOperationFailed(error)) => {
                    return Err(give_up(
                        match wasip2::http::types::http_error_code(&error) {
                            Some(code) => format!("{code:?}"),
                            None => format!("body: {}", error.to_debug_string()),
                        },
                    ));
                }
            }
        }
        // The stream is a child of the body: dropped here, before the body is finished.
    }
    let trailers = IncomingBody::finish(body);
    trailers.subscribe().block();
    if let Some(Ok(Err(code))) = trailers.get() {
        return Err(give_up(format!("{code:?}")));
    }

    if !(200..300).contains(&status) {
        return Err(HandlerError::Retry(format!("status {status}")));
    }
    host_log::write(Level::Info, &format!("http-get read {read} bytes"));
    Ok(())
}

/// POSTs `n` bytes (byte `i` is `i % 251`, so a piece lost, doubled or out of order shows) to
/// `url` through the SDK's helper, as a shipped plugin posts.
fn http_post(url: &str, n: usize) -> Result<(), HandlerError> {
    use jobrelay_guest::http;

    let body: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
    let request = http::Request {
        headers: vec![("content-type", b"application/octet-stream")],
        body: &body,
        ..http::Request::new(http::Method::Post, url)
    };
    let answer = http::send(&request).map_err(|e| HandlerError::GiveUp(format!("http: {e}")))?;
    if !(200..300).contains(&answer.status) {
        let wait = answer.header("retry-after").unwrap_or("-");
        return Err(HandlerError::Retry(format!(
            "status {}, retry-after {wait}",
            answer.status
        )));
    }
    host_log::write(Level::Info, &format!("http-post sent {n} bytes"));
    Ok(())
}

jobrelay_guest::bindings::export!(Probe with_types_in jobrelay_guest::bindings);

/// Starts `n` GETs of `url` at once (a WASI HTTP request returns a future without waiting),
/// then waits for each, and reports how they ended.
fn http_flood(url: &str, n: usize) -> HandlerError {
    use wasip2::http::outgoing_handler;
    use wasip2::http::types::{ErrorCode, Fields, Method, OutgoingRequest, Scheme};

    let rest = url.strip_prefix("http://").unwrap_or(url);
    let (authority, path) = match rest.find('/') {
        Some(slash) => rest.split_at(slash),
        None => (rest, "/"),
    };
    let (mut opened, mut refused, mut failed) = (0, 0, 0);
    let mut pending = Vec::new();
    for _ in 0..n {
        let request = OutgoingRequest::new(Fields::new());
        let _ = request.set_method(&Method::Get);
        let _ = request.set_scheme(Some(&Scheme::Http));
        let _ = request.set_authority(Some(authority));
        let _ = request.set_path_with_query(Some(path));
        match outgoing_handler::handle(request, None) {
            Ok(future) => pending.push(future),
            Err(ErrorCode::ConnectionLimitReached) => refused += 1,
            Err(_) => failed += 1,
        }
    }
    for future in &pending {
        future.subscribe().block();
        match future.get() {
            Some(Ok(Ok(_))) => opened += 1,
            Some(Ok(Err(ErrorCode::ConnectionLimitReached))) => refused += 1,
            _ => failed += 1,
        }
    }
    HandlerError::GiveUp(format!(
        "opened {opened}, refused {refused} (connection-limit-reached), failed {failed}"
    ))
}
