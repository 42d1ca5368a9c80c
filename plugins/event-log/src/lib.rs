//! `event-log`: appends every job event it receives as one JSON line to a file.
//!
//! The smallest useful jobrelay plugin, and the template for new ones: it reads its settings in
//! `init`, writes with plain `std::fs` into a directory the host preopened for it (the manifest's
//! filesystem grant), and reports an I/O failure as `retry` so the host delivers the event again
//! later instead of losing it.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use jobrelay_guest::log::{self as host_log, Level};
use jobrelay_guest::{Configured, Guest, HandlerError, JobEvent, phase_name};

/// Where lines go when the manifest's `config` says nothing.
const DEFAULT_DIR: &str = "/data";
const DEFAULT_FILE: &str = "events.jsonl";

/// Settings from `init`. An instance lives for one event by default, but `init` is always called
/// first, so this is never read before it is set.
static SETTINGS: Configured<Settings> = Configured::new();

/// The manifest's `config`: the folder (a granted directory) and the file name.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Settings {
    #[serde(default = "default_dir")]
    dir: String,
    #[serde(default = "default_file")]
    file: String,
}

fn default_dir() -> String {
    DEFAULT_DIR.to_string()
}

fn default_file() -> String {
    DEFAULT_FILE.to_string()
}

impl Settings {
    fn from_config(config: &[(String, String)]) -> Result<Settings, String> {
        let settings: Settings = jobrelay_guest::config::read(config)?;
        let file = &settings.file;
        if file.is_empty() || file.contains('/') || file == "." || file == ".." {
            return Err(format!(
                "config `file` must be a plain file name, got `{file}`"
            ));
        }
        if settings.dir.is_empty() {
            return Err("config `dir` must not be empty".to_string());
        }
        Ok(settings)
    }

    fn path(&self) -> PathBuf {
        PathBuf::from(&self.dir).join(&self.file)
    }
}

/// One line of the output file. Field order is the order of the JSON object.
#[derive(Serialize)]
struct Line<'a> {
    id: &'a str,
    transition_key: &'a str,
    cluster: &'a str,
    api_version: &'a str,
    kind: &'a str,
    namespace: &'a str,
    name: &'a str,
    uid: &'a str,
    resource_version: &'a str,
    generation: Option<i64>,
    phase: &'static str,
    raw_phase: &'a str,
    reason: Option<&'a str>,
    message: Option<&'a str>,
    previous_phase: Option<&'static str>,
    transition_time: &'a str,
    labels: BTreeMap<&'a str, &'a str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    synthetic: bool,
}

fn render(event: &JobEvent) -> Result<Vec<u8>, String> {
    let line = Line {
        id: &event.id,
        transition_key: &event.transition_key,
        cluster: &event.cluster,
        api_version: &event.api_version,
        kind: &event.kind,
        namespace: &event.namespace,
        name: &event.name,
        uid: &event.uid,
        resource_version: &event.resource_version,
        generation: event.generation,
        phase: phase_name(event.phase),
        raw_phase: &event.raw_phase,
        reason: event.reason.as_deref(),
        message: event.message.as_deref(),
        previous_phase: event.previous_phase.map(phase_name),
        transition_time: &event.transition_time,
        labels: event
            .labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect(),
        synthetic: event.synthetic,
    };
    let mut bytes = serde_json::to_vec(&line).map_err(|e| format!("cannot encode event: {e}"))?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// Appends `line` with a single `write_all` on a file opened in append mode, so every line lands
/// at the end of the file whole; events of other jobs, handled by other instances at the same
/// time, append their own lines. Writers of one file should be one plugin: the host delivers
/// events of one job in order, but makes no promise about the order of lines of different jobs.
fn append(settings: &Settings, line: &[u8]) -> std::io::Result<()> {
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(settings.path())?;
    file.write_all(line)?;
    file.flush()
}

struct EventLog;

impl Guest for EventLog {
    fn init(config: Vec<(String, String)>) -> Result<(), String> {
        SETTINGS.set(Settings::from_config(&config)?)
    }

    fn handle(event: JobEvent) -> Result<(), HandlerError> {
        let settings = SETTINGS.get()?;
        let line = render(&event).map_err(HandlerError::GiveUp)?;
        match append(&settings, &line) {
            Ok(()) => Ok(()),
            Err(e) => {
                let text = format!("cannot append to {}: {e}", settings.path().display());
                host_log::write(Level::Warn, &text);
                Err(HandlerError::Retry(text))
            }
        }
    }
}

jobrelay_guest::export_plugin!(EventLog);
