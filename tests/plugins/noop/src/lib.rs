//! `noop`: a test plugin whose `init` and `handle` return `Ok` at once. What a call to it
//! costs is the host's per-call overhead (instance, event conversion), for the lane
//! throughput benchmark.
//!
//! Built against the oldest world, `jobrelay:plugin@0.1.0`, on purpose: the tests that load it
//! prove a plugin built before 0.2.0 still loads and handles events.

wit_bindgen::generate!({
    path: "../../../wit/0.1.0/plugin.wit",
    world: "plugin",
});

struct Noop;

impl Guest for Noop {
    fn init(_config: Vec<(String, String)>) -> Result<(), String> {
        Ok(())
    }

    fn handle(_event: JobEvent) -> Result<(), HandlerError> {
        Ok(())
    }
}

export!(Noop);
