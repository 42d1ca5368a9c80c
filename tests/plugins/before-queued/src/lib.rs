//! `before-queued`: a test plugin built against `jobrelay:plugin@0.2.1` (`wit/0.2.1/plugin.wit`),
//! the world before the `queued` and `preempted` phases, on purpose: the tests that load it
//! prove a plugin built before 0.2.2 still loads, takes fleet events, and is given the phases
//! its enum knows.
//!
//! Each job event appends `<id> <phase> <previous-phase or -> <transition-key>` to
//! `/data/before-queued.txt`, each fleet event `fleet <id>`; a failed append is `retry`.

use std::io::Write;

wit_bindgen::generate!({
    path: "../../../wit/0.2.1/plugin.wit",
    world: "plugin",
});

use jobrelay::plugin::types::Phase;

struct BeforeQueued;

fn word(phase: Phase) -> &'static str {
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

fn append(line: String) -> Result<(), HandlerError> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open("/data/before-queued.txt")
        .and_then(|mut file| file.write_all(line.as_bytes()))
        .map_err(|e| HandlerError::Retry(format!("cannot append to /data/before-queued.txt: {e}")))
}

impl Guest for BeforeQueued {
    fn init(_config: Vec<(String, String)>) -> Result<(), String> {
        Ok(())
    }

    fn handle(event: JobEvent) -> Result<(), HandlerError> {
        let previous = event.previous_phase.map_or("-", word);
        append(format!(
            "{} {} {previous} {}\n",
            event.id,
            word(event.phase),
            event.transition_key
        ))
    }

    fn handle_fleet(event: FleetEvent) -> Result<(), HandlerError> {
        append(format!("fleet {}\n", event.id))
    }
}

export!(BeforeQueued);
