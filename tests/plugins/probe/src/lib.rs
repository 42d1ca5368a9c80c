//! `probe`: a test plugin that behaves like a small event recorder, and misbehaves on request.
//!
//! Normally it logs one line through the host's `log` import and appends one JSON line
//! (`"by":"probe"` plus id, cluster, name, phase, resource_version) to `/data/probe.jsonl`.
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
//!
//! The config key `fail_init=true` makes `init` refuse its configuration.

use std::fs::OpenOptions;
use std::hint::black_box;
use std::io::Write;
use std::time::{Duration, Instant};

use serde::Serialize;

wit_bindgen::generate!({
    path: "../../../wit",
    world: "plugin",
});

use jobrelay::plugin::log::{self as host_log, Level};
use jobrelay::plugin::types::Phase;

const BEHAVE_LABEL: &str = "jobrelay.test/behave";
const OUTPUT: &str = "/data/probe.jsonl";

#[derive(Serialize)]
struct Line<'a> {
    by: &'static str,
    id: &'a str,
    cluster: &'a str,
    name: &'a str,
    phase: &'static str,
    resource_version: &'a str,
}

fn phase_name(phase: Phase) -> &'static str {
    match phase {
        Phase::Pending => "pending",
        Phase::Running => "running",
        Phase::Restarting => "restarting",
        Phase::Suspended => "suspended",
        Phase::Succeeded => "succeeded",
        Phase::Failed => "failed",
        Phase::Terminating => "terminating",
        Phase::Deleted => "deleted",
        Phase::Unknown => "unknown",
    }
}

fn record(event: &JobEvent) -> Result<(), HandlerError> {
    let line = Line {
        by: "probe",
        id: &event.id,
        cluster: &event.cluster,
        name: &event.name,
        phase: phase_name(event.phase),
        resource_version: &event.resource_version,
    };
    let mut bytes = serde_json::to_vec(&line)
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
        Ok(())
    }

    fn handle(event: JobEvent) -> Result<(), HandlerError> {
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
            "trap" => panic!("probe was asked to trap on {}", event.id),
            "loop" => spin_forever(),
            "oom" => exhaust_memory(),
            "retry" => return Err(HandlerError::Retry("probe was asked to retry".to_string())),
            "giveup" => {
                return Err(HandlerError::GiveUp(
                    "probe was asked to give up".to_string(),
                ));
            }
            "spam" => spam(),
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
                    flaky(&event.id, n)?;
                } else if let Some(path) = other.strip_prefix("read:") {
                    return Err(HandlerError::GiveUp(match std::fs::read(path) {
                        Ok(bytes) => format!("read succeeded: {} bytes from {path}", bytes.len()),
                        Err(e) => format!("read failed: {path}: {e}"),
                    }));
                }
            }
        }
        record(&event)
    }
}

/// Fail the first `n` calls for this event id, counting in a granted file.
fn flaky(id: &str, n: u32) -> Result<(), HandlerError> {
    let hash = id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    let dir = "/data/flaky";
    let path = format!("{dir}/{hash:016x}");
    let io = |e: std::io::Error| HandlerError::GiveUp(format!("flaky counter {path}: {e}"));
    std::fs::create_dir_all(dir).map_err(io)?;
    let seen: u32 = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0);
    if seen < n {
        std::fs::write(&path, (seen + 1).to_string()).map_err(io)?;
        return Err(HandlerError::Retry(format!(
            "probe is flaky: call {} of {n} failing",
            seen + 1
        )));
    }
    Ok(())
}

export!(Probe);
