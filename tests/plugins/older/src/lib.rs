//! `older`: a test plugin built against `jobrelay:plugin@0.2.0` (`wit/0.2.0/plugin.wit`), the
//! world before `handle-fleet`, on purpose: the tests that load it prove a plugin built before
//! 0.2.1 still loads, links its 0.2.0 imports to the host's 0.2.1 ones, and handles job events.
//!
//! Each event appends `<id> <transition-key>` to `/data/older.txt` (so a test sees the record
//! arrive whole, the field 0.2.0 added included) and logs one line through the 0.2.0 `log`
//! import; a failed append is `retry`.

use std::io::Write;

wit_bindgen::generate!({
    path: "../../../wit/0.2.0/plugin.wit",
    world: "plugin",
});

use jobrelay::plugin::log::{self, Level};

struct Older;

impl Guest for Older {
    fn init(_config: Vec<(String, String)>) -> Result<(), String> {
        Ok(())
    }

    fn handle(event: JobEvent) -> Result<(), HandlerError> {
        log::write(Level::Info, &format!("older handling {}", event.id));
        let line = format!("{} {}\n", event.id, event.transition_key);
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open("/data/older.txt")
            .and_then(|mut file| file.write_all(line.as_bytes()))
            .map_err(|e| HandlerError::Retry(format!("cannot append to /data/older.txt: {e}")))
    }
}

export!(Older);
