//! `bulky`: a plugin with about 2 MB of code. It mixes each event id through one of its
//! generated functions and appends `{"by":"bulky","id":...,"mix":...}` to `/data/bulky.jsonl`.
//! Used to measure how long compiling and swapping a large plugin takes.

use std::fs::OpenOptions;
use std::io::Write;

wit_bindgen::generate!({
    path: "../../../wit",
    world: "plugin",
});

include!(concat!(env!("OUT_DIR"), "/generated.rs"));

struct Bulky;

impl Guest for Bulky {
    fn init(_config: Vec<(String, String)>) -> Result<(), String> {
        Ok(())
    }

    fn handle(event: JobEvent) -> Result<(), HandlerError> {
        let bytes = event.id.as_bytes();
        let pick = bytes
            .iter()
            .fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(*b as usize));
        let mix = TABLE[pick % TABLE.len()](pick as u64, bytes);
        let line = format!(
            "{{\"by\":\"bulky\",\"id\":\"{}\",\"mix\":{mix}}}\n",
            event.id
        );
        OpenOptions::new()
            .create(true)
            .append(true)
            .open("/data/bulky.jsonl")
            .and_then(|mut f| f.write_all(line.as_bytes()))
            .map_err(|e| HandlerError::Retry(format!("cannot append: {e}")))
    }

    /// Fleet events have nothing to mix: acknowledged.
    fn handle_fleet(_event: FleetEvent) -> Result<(), HandlerError> {
        Ok(())
    }
}

export!(Bulky);
