//! `jobrelay-guest`: the guest side of the plugin contract, for plugins written in Rust.
//!
//! It generates the bindings of `wit/plugin.wit` (`jobrelay:plugin@0.2.1`) once, so a plugin
//! depends on this crate instead of running `wit_bindgen::generate!` itself, and adds what
//! every plugin otherwise writes again: reading the manifest's `config` map into a typed
//! settings struct ([`config::read`]), keeping it from `init` to `handle` ([`Configured`]),
//! phase and fleet event kind names, and the export. A plugin is its logic only:
//!
//! ```ignore
//! use jobrelay_guest::{Configured, FleetEvent, Guest, HandlerError, JobEvent};
//!
//! #[derive(Clone, Default, serde::Deserialize)]
//! #[serde(deny_unknown_fields, default)]
//! struct Settings { channel: String }
//!
//! static SETTINGS: Configured<Settings> = Configured::new();
//!
//! struct MyPlugin;
//!
//! impl Guest for MyPlugin {
//!     fn init(config: Vec<(String, String)>) -> Result<(), String> {
//!         SETTINGS.set(jobrelay_guest::config::read(&config)?)
//!     }
//!     fn handle(event: JobEvent) -> Result<(), HandlerError> {
//!         let settings = SETTINGS.get()?;
//!         Ok(())
//!     }
//!     // Called only if the manifest lists `fleet_events`; a plugin that wants none returns Ok.
//!     fn handle_fleet(_event: FleetEvent) -> Result<(), HandlerError> {
//!         Ok(())
//!     }
//! }
//!
//! jobrelay_guest::export_plugin!(MyPlugin);
//! ```

/// The generated bindings. In a module of their own: the exported `export!` macro lives at the
/// crate root, and would clash with the generator's own re-export there.
pub mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "plugin",
        pub_export_macro: true,
        default_bindings_module: "jobrelay_guest::bindings",
    });
}

pub mod archive;
pub mod config;
pub mod http;
pub mod kv;
pub mod log;
pub mod pod_logs;
pub mod sql;
pub mod story;

pub use self::bindings::jobrelay::plugin::lifecycle;

/// Annotations and labels on the event's own job, under the prefixes `grants.job` gives
/// (`docs/capabilities.md`).
pub mod job {
    pub use crate::bindings::jobrelay::plugin::job::*;
}

/// Holding an event back without failing it: call `defer(seconds)`, then return
/// [`HandlerError::Retry`]; the host calls `handle` again with the event after that long,
/// spending no attempt of the retry budget (`docs/delivery.md`, "Deferral").
pub mod deferral {
    pub use crate::bindings::jobrelay::plugin::deferral::defer;
}
pub use self::bindings::jobrelay::plugin::types::Phase;
pub use self::bindings::{Guest, HandlerError, JobEvent};

/// Fleet events (since 0.2.1): a cluster going offline or coming back online, a fleet rule
/// starting or ceasing to hold. The host calls [`Guest::handle_fleet`] with one only for a
/// plugin whose manifest lists `fleet_events`; one at a time per subject (a cluster's health,
/// or one rule on one cluster), in order, retried on `retry` and dead-lettered like a job
/// event. A plugin that wants none implements `handle_fleet` as `Ok(())`.
pub use self::bindings::jobrelay::plugin::fleet::{FleetEvent, FleetEventKind};

use std::sync::Mutex;

/// Exports a type implementing [`Guest`] as the component's `init`, `handle` and
/// `handle-fleet`.
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ident) => {
        $crate::bindings::export!($plugin with_types_in $crate::bindings);
    };
}

/// Every phase, in the WIT enum's order.
pub const PHASES: [Phase; 11] = [
    Phase::Pending,
    Phase::Running,
    Phase::Restarting,
    Phase::Suspended,
    Phase::Succeeded,
    Phase::Failed,
    Phase::Terminating,
    Phase::Deleted,
    Phase::Unknown,
    Phase::Queued,
    Phase::Preempted,
];

/// The WIT name of a phase (`running`, `succeeded`, ...): the word plugins use in config keys,
/// table rows and messages.
pub fn phase_name(phase: Phase) -> &'static str {
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
        Phase::Queued => "queued",
        Phase::Preempted => "preempted",
    }
}

/// The phase with this WIT name.
pub fn phase_from_name(name: &str) -> Option<Phase> {
    PHASES.into_iter().find(|phase| phase_name(*phase) == name)
}

/// Every fleet event kind, in the WIT enum's order.
pub const FLEET_EVENT_KINDS: [FleetEventKind; 4] = [
    FleetEventKind::ClusterOffline,
    FleetEventKind::ClusterOnline,
    FleetEventKind::RuleFiring,
    FleetEventKind::RuleResolved,
];

/// The WIT name of a fleet event kind (`cluster-offline`, `rule-firing`, ...): the word plugins
/// use in lines, rows and event types.
pub fn fleet_kind_name(kind: FleetEventKind) -> &'static str {
    match kind {
        FleetEventKind::ClusterOffline => "cluster-offline",
        FleetEventKind::ClusterOnline => "cluster-online",
        FleetEventKind::RuleFiring => "rule-firing",
        FleetEventKind::RuleResolved => "rule-resolved",
    }
}

/// Whether a fleet event reports trouble beginning (`cluster-offline`, `rule-firing`) rather
/// than ending (`cluster-online`, `rule-resolved`).
pub fn fleet_is_trouble(kind: FleetEventKind) -> bool {
    matches!(
        kind,
        FleetEventKind::ClusterOffline | FleetEventKind::RuleFiring
    )
}

/// Whether a phase is the end of a job's run (`succeeded` or `failed`).
pub fn is_terminal(phase: Phase) -> bool {
    matches!(phase, Phase::Succeeded | Phase::Failed)
}

/// What `init` parsed from the plugin's config, for `handle` to read. The host calls `init`
/// before any `handle` on an instance, so a plugin keeps its settings in one of these:
///
/// ```ignore
/// static SETTINGS: Configured<Settings> = Configured::new();
/// // in init:   SETTINGS.set(Settings::from_config(&config)?)?;
/// // in handle: let settings = SETTINGS.get()?;
/// ```
pub struct Configured<T>(Mutex<Option<T>>);

impl<T: Clone> Configured<T> {
    pub const fn new() -> Configured<T> {
        Configured(Mutex::new(None))
    }

    /// Keeps the settings (`init`).
    pub fn set(&self, settings: T) -> Result<(), String> {
        *self
            .0
            .lock()
            .map_err(|_| "settings lock poisoned".to_string())? = Some(settings);
        Ok(())
    }

    /// The settings (`handle`); giving up if `init` never set them.
    pub fn get(&self) -> Result<T, HandlerError> {
        self.0
            .lock()
            .ok()
            .and_then(|slot| slot.clone())
            .ok_or_else(|| HandlerError::GiveUp("handle called before init".to_string()))
    }
}

impl<T: Clone> Default for Configured<T> {
    fn default() -> Configured<T> {
        Configured::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for phase in PHASES {
            assert_eq!(phase_from_name(phase_name(phase)), Some(phase));
        }
        assert_eq!(phase_from_name("Running"), None);
        assert!(is_terminal(Phase::Failed) && !is_terminal(Phase::Deleted));
    }

    #[test]
    fn fleet_kind_names_are_the_wit_names() {
        let names: Vec<&str> = FLEET_EVENT_KINDS.into_iter().map(fleet_kind_name).collect();
        assert_eq!(
            names,
            [
                "cluster-offline",
                "cluster-online",
                "rule-firing",
                "rule-resolved"
            ]
        );
        let trouble: Vec<bool> = FLEET_EVENT_KINDS
            .into_iter()
            .map(fleet_is_trouble)
            .collect();
        assert_eq!(trouble, [true, false, true, false]);
    }
}
