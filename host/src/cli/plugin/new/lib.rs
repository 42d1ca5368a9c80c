//! `{{name}}`: a jobrelay plugin.
//!
//! It counts the failures of jobs per namespace in its key-value store and logs each one.
//! Change `handle` to do what your team needs; `jobrelay plugin run {{name}}.wasm --event events/`
//! tries it, `jobrelay plugin test tests/cases --wasm {{name}}.wasm` runs its recorded cases.
//!
//! Every event gets a fresh instance by default: keep nothing in globals between events,
//! except the settings `init` reads.

use jobrelay_guest::{
    Configured, FleetEvent, Guest, HandlerError, JobEvent, Phase, kv, phase_name, warn,
};
use serde::Deserialize;

/// The manifest's `config:` map.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct Settings {
    /// The phases counted, comma-separated in the manifest (`phases: failed,restarting`).
    #[serde(deserialize_with = "jobrelay_guest::config::phase_list")]
    phases: Vec<Phase>,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            phases: vec![Phase::Failed],
        }
    }
}

static SETTINGS: Configured<Settings> = Configured::new();

struct Plugin;

impl Guest for Plugin {
    fn init(config: Vec<(String, String)>) -> Result<(), String> {
        SETTINGS.set(jobrelay_guest::config::read(&config)?)
    }

    fn handle(event: JobEvent) -> Result<(), HandlerError> {
        let settings = SETTINGS.get()?;
        // Only transitions into a counted phase: a job's later versions in the same phase
        // (`previous_phase` equal) are not counted again.
        if !settings.phases.contains(&event.phase) || event.previous_phase == Some(event.phase) {
            return Ok(());
        }
        // A failed host call is worth retrying: the event comes again later. (After a host
        // restart an event can come again too: where a count must be exact, dedupe on
        // `event.id`.)
        let key = format!("failures/{}", event.namespace);
        let count: u64 = kv::get_json(&key).map_err(HandlerError::Retry)?.unwrap_or(0) + 1;
        kv::set_json(&key, &count, None).map_err(HandlerError::Retry)?;
        warn!(
            "{} {}/{} is {} ({} in this namespace so far)",
            event.kind,
            event.namespace,
            event.name,
            phase_name(event.phase),
            count
        );
        Ok(())
    }

    /// Fleet events (a cluster offline or back online, a fleet rule firing or resolved) come
    /// only if the manifest asks for them (`fleet_events: [clusters, rules]`). This plugin
    /// asks for none, so this is never called; acknowledge and drop.
    fn handle_fleet(_event: FleetEvent) -> Result<(), HandlerError> {
        Ok(())
    }
}

jobrelay_guest::export_plugin!(Plugin);
