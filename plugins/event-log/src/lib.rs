//! `event-log`: appends every job event it receives as one JSON line to a file, and every
//! fleet event (when its manifest asks for them) as a line of its own shape in the same file.
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
use jobrelay_guest::{
    Configured, FleetEvent, Guest, HandlerError, JobEvent, fleet_kind_name, phase_name,
};

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
    /// What the job's Kueue Workload and pods said (`story::get`), when its kind tells it.
    #[serde(skip_serializing_if = "Option::is_none")]
    story: Option<serde_json::Value>,
}

/// The job's story as JSON, in the host's field names (`docs/job-kinds.md`).
fn story_json(story: &jobrelay_guest::story::JobStory) -> serde_json::Value {
    use jobrelay_guest::story::QueueState;
    let workload = story.workload.as_ref().map(|w| {
        let state = match w.state {
            QueueState::Queued => "queued",
            QueueState::Reserved => "reserved",
            QueueState::Admitted => "admitted",
            QueueState::Evicted => "evicted",
            QueueState::Finished => "finished",
        };
        serde_json::json!({
            "state": state,
            "reason": w.reason,
            "message": w.message,
            "preempted": w.preempted.as_ref().map(|p| serde_json::json!({
                "reason": p.reason, "message": p.message})),
            "cluster_queue": w.cluster_queue,
            "local_queue": w.local_queue,
            "waiting_since": w.waiting_since,
            "admitted_at": w.admitted_at,
            "past_execution_seconds": w.past_execution_seconds,
            "evictions": w.evictions.iter().cloned().collect::<BTreeMap<_, _>>(),
            "requeues": w.requeues,
            "accelerators": w.accelerators.iter().cloned().collect::<BTreeMap<_, _>>(),
        })
    });
    let failure = story.failure.as_ref().map(|f| {
        serde_json::json!({
            "container": f.container,
            "init": f.init,
            "reason": f.reason,
            "exit_code": f.exit_code,
            "last_reason": f.last_reason,
            "message": f.message,
        })
    });
    serde_json::json!({"workload": workload, "failure": failure})
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
        story: jobrelay_guest::story::get().as_ref().map(story_json),
    };
    let mut bytes = serde_json::to_vec(&line).map_err(|e| format!("cannot encode event: {e}"))?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// One line of a fleet event: told from a job's line by its `fleet` field (the event's kind).
#[derive(Serialize)]
struct FleetLine<'a> {
    id: &'a str,
    fleet: &'static str,
    cluster: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    rule: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    threshold: Option<f64>,
    since: &'a str,
    time: &'a str,
    summary: &'a str,
}

fn render_fleet(event: &FleetEvent) -> Result<Vec<u8>, String> {
    let line = FleetLine {
        id: &event.id,
        fleet: fleet_kind_name(event.kind),
        cluster: &event.cluster,
        rule: event.rule.as_deref(),
        value: event.value,
        threshold: event.threshold,
        since: &event.since,
        time: &event.time,
        summary: &event.summary,
    };
    let mut bytes =
        serde_json::to_vec(&line).map_err(|e| format!("cannot encode fleet event: {e}"))?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// Appends a rendered line; an I/O failure is `retry`, so the host delivers the event again
/// later instead of losing it.
fn write_line(rendered: Result<Vec<u8>, String>) -> Result<(), HandlerError> {
    let settings = SETTINGS.get()?;
    let line = rendered.map_err(HandlerError::GiveUp)?;
    match append(&settings, &line) {
        Ok(()) => Ok(()),
        Err(e) => {
            let text = format!("cannot append to {}: {e}", settings.path().display());
            host_log::write(Level::Warn, &text);
            Err(HandlerError::Retry(text))
        }
    }
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
        write_line(render(&event))
    }

    fn handle_fleet(event: FleetEvent) -> Result<(), HandlerError> {
        write_line(render_fleet(&event))
    }
}

jobrelay_guest::export_plugin!(EventLog);

#[cfg(test)]
mod tests {
    use super::*;
    use jobrelay_guest::FleetEventKind;

    fn offline() -> FleetEvent {
        FleetEvent {
            id: "east/9c1e-cluster/1700000000123".to_string(),
            kind: FleetEventKind::ClusterOffline,
            cluster: "east".to_string(),
            rule: None,
            value: None,
            threshold: None,
            since: "2026-11-28T10:00:00Z".to_string(),
            time: "2026-11-28T10:00:30Z".to_string(),
            summary: "connection refused".to_string(),
        }
    }

    #[test]
    fn fleet_lines_carry_their_kind_and_leave_out_what_is_absent() {
        let line = render_fleet(&offline()).expect("renders");
        assert_eq!(
            String::from_utf8(line).expect("utf-8"),
            concat!(
                r#"{"id":"east/9c1e-cluster/1700000000123","fleet":"cluster-offline","#,
                r#""cluster":"east","since":"2026-11-28T10:00:00Z","#,
                r#""time":"2026-11-28T10:00:30Z","summary":"connection refused"}"#,
                "\n"
            )
        );
        let mut firing = offline();
        firing.kind = FleetEventKind::RuleFiring;
        firing.rule = Some("failure-ratio".to_string());
        firing.value = Some(0.31);
        firing.threshold = Some(0.15);
        let line: serde_json::Value =
            serde_json::from_slice(&render_fleet(&firing).expect("renders")).expect("JSON");
        assert_eq!(line["fleet"], "rule-firing");
        assert_eq!(line["rule"], "failure-ratio");
        assert_eq!(line["value"], 0.31);
        assert_eq!(line["threshold"], 0.15);
    }
}
