//! The `jobrelay:plugin/log` interface: plugin log lines into the host's `tracing`.
//!
//! Every line is a tracing event with target `jobrelay::plugin` and the fields `plugin`,
//! `version` and `event` (the id of the event being handled, `-` during a load-time `init`), at
//! the level the plugin chose, so plugin logs are filtered and shipped like the host's own.
//!
//! A plugin cannot flood the host: a message is cut at [`MAX_MESSAGE_BYTES`], and a call may
//! write [`MAX_LINES_PER_CALL`] lines; later lines are counted and reported in one warning at
//! the end of the call. Logging never fails and never traps.
//!
//! The lines each plugin wrote are counted by level ([`LogLines`], process-wide, in the
//! services every call shares), so an operator can alert on a plugin's warnings and errors —
//! the way a plugin reports what it handled but found wrong (mysql-sync meeting a transition
//! key again with another origin) — without reading logs.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;
use wasmtime::component::{HasData, Linker};

use super::CallLabels;
use super::{CallScope, Capability, GrantProblem, StoreSetup};
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

    fn configure(&self, call: &CallScope<'_>, setup: &mut StoreSetup) -> Result<(), GrantProblem> {
        setup.state.log.counts = Some(call.services.log_lines.clone());
        Ok(())
    }
}

/// Lines written per plugin and level since the process started.
#[derive(Debug, Default)]
pub struct LogLines {
    counts: Mutex<BTreeMap<(String, &'static str), u64>>,
}

impl LogLines {
    /// Adds one call's lines of `plugin`, by level (in [`LEVELS`] order).
    fn add(&self, plugin: &str, by_level: &[u32; 5]) {
        let mut counts = self.counts.lock();
        for (level, n) in LEVELS.iter().zip(by_level) {
            if *n > 0 {
                *counts.entry((plugin.to_string(), *level)).or_default() += u64::from(*n);
            }
        }
    }

    /// The counts of one plugin, by level name (levels it never wrote at are left out).
    pub fn of(&self, plugin: &str) -> BTreeMap<&'static str, u64> {
        let counts = self.counts.lock();
        counts
            .iter()
            .filter(|((p, _), _)| p == plugin)
            .map(|((_, level), n)| (*level, *n))
            .collect()
    }
}

/// The level names, as the `level` label of the metric says them.
pub const LEVELS: [&str; 5] = ["trace", "debug", "info", "warn", "error"];

fn level_index(level: Level) -> usize {
    match level {
        Level::Trace => 0,
        Level::Debug => 1,
        Level::Info => 2,
        Level::Warn => 3,
        Level::Error => 4,
    }
}

/// What the log functions of one call reach: its line budget, and who is calling.
pub struct LogView<'a> {
    /// The call's line budget, spent by every line written.
    pub throttle: &'a mut LogThrottle,
    /// The plugin, version and event every line is tagged with.
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
    /// Lines written during the call by level (dropped ones included), added to `counts` when
    /// the call is over: one lock per call, not per line.
    by_level: [u32; 5],
    counts: Option<Arc<LogLines>>,
}

impl LogThrottle {
    /// Counts the call's lines and reports lines dropped during it, if any.
    pub fn finish(&self, labels: &CallLabels) {
        if let Some(counts) = &self.counts
            && self.by_level.iter().any(|n| *n > 0)
        {
            counts.add(&labels.plugin, &self.by_level);
        }
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
        let counted = &mut throttle.by_level[level_index(level)];
        *counted = counted.saturating_add(1);
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
