//! `stamp`: appends `<event id> <unix time in ns>` to `/data/stamps` on every call, the time
//! read as `handle` (or `handle-fleet`) starts. The latency benchmark compares it with the time the status change
//! was written to the simulator: from the write to the plugin call, on one machine's clock.

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

wit_bindgen::generate!({
    path: "../../../wit",
    world: "plugin",
});

struct Stamp;

/// Appends `<id> <now in ns>`, the time read first.
fn stamp(id: &str) -> Result<(), HandlerError> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let line = format!("{id} {now}\n");
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open("/data/stamps")
        .and_then(|mut file| file.write_all(line.as_bytes()))
        .map_err(|e| HandlerError::Retry(format!("cannot append a stamp: {e}")))
}

impl Guest for Stamp {
    fn init(_config: Vec<(String, String)>) -> Result<(), String> {
        Ok(())
    }

    fn handle(event: JobEvent) -> Result<(), HandlerError> {
        stamp(&event.id)
    }

    fn handle_fleet(event: FleetEvent) -> Result<(), HandlerError> {
        stamp(&event.id)
    }
}

export!(Stamp);
