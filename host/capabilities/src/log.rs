//! The `jobrelay:plugin/log` interface: plugin log lines into the host's `tracing`.
//!
//! Every line is a tracing event with target `jobrelay::plugin` and the fields `plugin`,
//! `version` and `event` (the id of the event being handled, `-` during a load-time `init`), at
//! the level the plugin chose, so plugin logs are filtered and shipped like the host's own.
//!
//! A plugin cannot flood the host: a message is cut at [`MAX_MESSAGE_BYTES`], and a call may
//! write [`MAX_LINES_PER_CALL`] lines; later lines are counted and reported in one warning at
//! the end of the call. Logging never fails and never traps.

use wasmtime::component::{HasData, Linker};

use super::CallLabels;
use super::Capability;
use jobrelay_bindings::Level;
use jobrelay_bindings::jobrelay::plugin::log as wit_log;
use jobrelay_bindings::v0_1::jobrelay::plugin::log as older;

/// Longest message kept, in bytes; longer ones are cut at a character boundary.
pub const MAX_MESSAGE_BYTES: usize = 8 * 1024;
/// Lines one call may write.
pub const MAX_LINES_PER_CALL: u32 = 1_000;

/// The log capability. Always granted: the design brief lets every plugin log.
pub struct Log;

impl Capability for Log {
    fn name(&self) -> &'static str {
        "log"
    }
}

/// What the log functions of one call reach: its line budget, and who is calling.
pub struct LogView<'a> {
    pub throttle: &'a mut LogThrottle,
    pub labels: &'a CallLabels,
}

struct LogData;

impl HasData for LogData {
    type Data<'a> = LogView<'a>;
}

/// Links the interface (both served versions) into a linker whose store data gives a
/// [`LogView`] through `get`.
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> LogView<'_>,
) -> wasmtime::Result<()> {
    wit_log::add_to_linker::<T, LogData>(linker, get)?;
    older::add_to_linker::<T, LogData>(linker, get)
}

/// Per-call line budget.
#[derive(Debug, Default)]
pub struct LogThrottle {
    written: u32,
    dropped: u32,
}

impl LogThrottle {
    /// Reports lines dropped during the call, if any.
    pub fn finish(&self, labels: &CallLabels) {
        if self.dropped > 0 {
            tracing::warn!(
                target: "jobrelay::plugin",
                plugin = %labels.plugin,
                version = %labels.version,
                event = %labels.event_or_dash(),
                "plugin wrote more than {MAX_LINES_PER_CALL} log lines in one call; {} dropped",
                self.dropped
            );
        }
    }
}

impl wit_log::Host for LogView<'_> {
    async fn write(&mut self, level: Level, message: String) {
        let throttle = &mut *self.throttle;
        if throttle.written >= MAX_LINES_PER_CALL {
            throttle.dropped = throttle.dropped.saturating_add(1);
            return;
        }
        throttle.written += 1;
        emit(level, self.labels, &cut(&message));
    }
}

impl older::Host for LogView<'_> {
    async fn write(&mut self, level: older::Level, message: String) {
        wit_log::Host::write(self, level.into(), message).await
    }
}

/// `message` cut at [`MAX_MESSAGE_BYTES`] (saying how much was cut) with its control
/// characters escaped, so a plugin's line is one line in every log format.
fn cut(message: &str) -> String {
    jobrelay_contract::text::tame(message, MAX_MESSAGE_BYTES)
}

fn emit(level: Level, labels: &CallLabels, message: &str) {
    let plugin = &*labels.plugin;
    let version = &*labels.version;
    let event = labels.event_or_dash();
    // `tracing` needs the level at compile time, hence one macro call per level.
    match level {
        Level::Trace => {
            tracing::trace!(target: "jobrelay::plugin", plugin, version, event, "{message}")
        }
        Level::Debug => {
            tracing::debug!(target: "jobrelay::plugin", plugin, version, event, "{message}")
        }
        Level::Info => {
            tracing::info!(target: "jobrelay::plugin", plugin, version, event, "{message}")
        }
        Level::Warn => {
            tracing::warn!(target: "jobrelay::plugin", plugin, version, event, "{message}")
        }
        Level::Error => {
            tracing::error!(target: "jobrelay::plugin", plugin, version, event, "{message}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_are_cut_at_a_char_boundary() {
        let short = "hello";
        assert_eq!(cut(short), "hello");
        let long = "é".repeat(MAX_MESSAGE_BYTES); // two bytes each
        let out = cut(&long);
        assert!(out.len() < MAX_MESSAGE_BYTES + 64);
        assert!(out.ends_with("more bytes cut)"));
    }

    #[test]
    fn a_line_cannot_forge_another() {
        let out = cut("done\n2026-11-24T00:00:00.000Z ERROR jobrelay: fake\r\u{1b}[31m");
        assert!(!out.contains(['\n', '\r', '\u{1b}']), "{out}");
    }
}
