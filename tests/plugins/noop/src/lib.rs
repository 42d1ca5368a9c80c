//! `noop`: a test plugin whose `init` and `handle` return `Ok` at once. What a call to it
//! costs is the host's per-call overhead (instance, event conversion), for the lane
//! throughput benchmark.

wit_bindgen::generate!({
    path: "../../../wit",
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
