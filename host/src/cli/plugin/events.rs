//! The events `plugin run`, `plugin test` and `plugin bench` hand a plugin, read from files:
//! job events in the JSON format of `JobEvent`, and fleet events in the format plugins get them
//! (`FleetEvent`, what `plugin sample-event --fleet` prints).
//!
//! The daemon hands a fleet event through its lanes as the *carrier* of its subject
//! (`jobrelay_contract::fleet`): a job event the runtime recognises and answers with the
//! plugin's `handle-fleet`. A fleet event read here becomes that carrier too, made as the
//! daemon makes it (`FleetEvent::into_job_event`), so the run calls `handle-fleet` with the
//! same record the daemon would, and judges it by the manifest's `fleet_events` as a lane does.
//! Its version is its `time` in milliseconds, as the daemon's is the clock when it made the
//! event (kept growing over the run); an `id` written in the file is kept, else the carrier's
//! is the daemon's (`cluster/uid/version`).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use jobrelay_contract::event::JobEvent;
use jobrelay_contract::fleet::FleetEvent;

/// One event of a file, before fleet events get their carrier (boxed: an event is large, and
/// a run holds every one).
enum Read {
    Job(Box<JobEvent>),
    Fleet(Box<FleetEvent>),
}

/// The events of `source`: `-` (standard input), a folder (its `.json` and `.jsonl` files in
/// name order) or a file; each holds one event, or several as JSON lines (or simply one after
/// another). A fleet event comes back as its carrier.
pub(crate) fn read_events(source: &Path) -> anyhow::Result<Vec<JobEvent>> {
    let mut read = Vec::new();
    if source.as_os_str() == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .context("cannot read events from standard input")?;
        read.extend(parse_events(&text, "standard input")?);
    } else if source.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(source)
            .with_context(|| format!("cannot list the event folder {}", source.display()))?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "json" || e == "jsonl"))
            .collect();
        files.sort();
        for file in files {
            read.extend(read_event_file(&file)?);
        }
    } else {
        read.extend(read_event_file(source)?);
    }
    if read.is_empty() {
        bail!("{}: no event in it", source.display());
    }
    Ok(carriers(read))
}

/// Every event as the daemon hands it on: a fleet event as its carrier, at a version that
/// grows over the run.
fn carriers(read: Vec<Read>) -> Vec<JobEvent> {
    let mut last = 0u64;
    read.into_iter()
        .map(|event| match event {
            Read::Job(event) => *event,
            Read::Fleet(fleet) => {
                let at = chrono::DateTime::parse_from_rfc3339(&fleet.time)
                    .ok()
                    .and_then(|t| u64::try_from(t.timestamp_millis()).ok())
                    .unwrap_or(0);
                last = at.max(last + 1);
                let given = (!fleet.id.is_empty()).then(|| fleet.id.clone());
                let mut carrier = (*fleet).into_job_event(last);
                if let Some(id) = given {
                    carrier.id = id;
                }
                carrier
            }
        })
        .collect()
}

fn read_event_file(path: &Path) -> anyhow::Result<Vec<Read>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the event file {}", path.display()))?;
    parse_events(&text, &path.display().to_string())
}

/// One or more events, one JSON value after another: a job event, or a fleet event (an object
/// with no `api_version`). An error names `origin`, and the event's number and field when
/// there are several.
fn parse_events(text: &str, origin: &str) -> anyhow::Result<Vec<Read>> {
    let values: Vec<serde_json::Value> = serde_json::Deserializer::from_str(text)
        .into_iter::<serde_json::Value>()
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("{origin}: not JSON: {e}"))?;
    let several = values.len() > 1;
    values
        .into_iter()
        .enumerate()
        .map(|(i, value)| {
            let which = if several {
                format!(" (event {})", i + 1)
            } else {
                String::new()
            };
            let fleet = value.is_object() && value.get("api_version").is_none();
            let (what, read) = if fleet {
                (
                    "not a fleet event (an event without `api_version`; a job event has one)",
                    serde_path_to_error::deserialize::<_, FleetEvent>(value)
                        .map(|e| Read::Fleet(Box::new(e))),
                )
            } else {
                (
                    "not a job event",
                    serde_path_to_error::deserialize::<_, JobEvent>(value)
                        .map(|e| Read::Job(Box::new(e))),
                )
            };
            read.map_err(|e| {
                let at = e.path().to_string();
                let inner = e.into_inner();
                if at == "." {
                    anyhow::anyhow!("{origin}{which}: {what}: {inner}")
                } else {
                    anyhow::anyhow!("{origin}{which}: {what}: at `{at}`: {inner}")
                }
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobrelay_contract::fleet::{self, FleetEventKind};

    fn parse(text: &str, origin: &str) -> anyhow::Result<Vec<JobEvent>> {
        parse_events(text, origin).map(carriers)
    }

    #[test]
    fn bad_event_names_file_and_path() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let file = tmp.path().join("event.json");
        std::fs::write(
            &file,
            r#"{"id":"c/u/1","cluster":"c","api_version":"batch/v1","kind":"Job",
               "namespace":"ns","name":"n","uid":"u","resource_version":"1",
               "phase":"runing","transition_time":"2026-01-01T00:00:00Z"}"#,
        )
        .expect("write");
        let err = read_events(&file).expect_err("bad phase").to_string();
        assert!(err.contains("event.json"), "{err}");
        assert!(err.contains("phase"), "{err}");
    }

    fn event_json(rv: u32) -> String {
        format!(
            r#"{{"id":"c/u/{rv}","cluster":"c","api_version":"batch/v1","kind":"Job","namespace":"ns","name":"n","uid":"u","resource_version":"{rv}","phase":"running","transition_time":"2026-01-01T00:00:00Z"}}"#
        )
    }

    /// One event, JSON lines, and a folder of both, in name order; a bad line is named by its
    /// number; an empty source is an error.
    #[test]
    fn events_come_from_a_file_json_lines_or_a_folder() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let ids = |events: Vec<JobEvent>| events.into_iter().map(|e| e.id).collect::<Vec<_>>();
        std::fs::write(tmp.path().join("b.json"), event_json(1)).expect("write");
        std::fs::write(
            tmp.path().join("a.jsonl"),
            format!("{}\n{}\n", event_json(2), event_json(3)),
        )
        .expect("write");
        std::fs::write(tmp.path().join("notes.txt"), "not an event").expect("write");
        assert_eq!(
            ids(read_events(&tmp.path().join("b.json")).expect("one")),
            ["c/u/1"]
        );
        assert_eq!(
            ids(read_events(&tmp.path().join("a.jsonl")).expect("lines")),
            ["c/u/2", "c/u/3"]
        );
        assert_eq!(
            ids(read_events(tmp.path()).expect("folder")),
            ["c/u/2", "c/u/3", "c/u/1"]
        );
        let bad = format!(
            "{}\n{}\n",
            event_json(4),
            event_json(5).replace("running", "runing")
        );
        let err = parse(&bad, "lines.jsonl")
            .expect_err("bad second")
            .to_string();
        assert!(
            err.contains("lines.jsonl (event 2)") && err.contains("phase"),
            "{err}"
        );
        std::fs::write(tmp.path().join("empty.jsonl"), "\n").expect("write");
        let err = read_events(&tmp.path().join("empty.jsonl"))
            .expect_err("empty")
            .to_string();
        assert!(err.contains("no event"), "{err}");
    }

    const OFFLINE: &str = r#"{"kind":"cluster-offline","cluster":"east","since":"2026-01-15T08:29:00Z","time":"2026-01-15T08:30:00Z","summary":"connection refused"}"#;

    /// A fleet event is read as the carrier the daemon makes of it: `handle-fleet` gets the
    /// same record back (its id the carrier's); versions grow over the run even for one
    /// instant; an id written in the file is kept.
    #[test]
    fn fleet_events_become_their_carriers() {
        let firing = r#"{"id":"mine-1","kind":"rule-firing","cluster":"east","rule":"failures","value":0.4,"threshold":0.15,"since":"2026-01-15T08:29:00Z","time":"2026-01-15T08:30:00Z","summary":"job failure ratio 0.4 > 0.15"}"#;
        let events = parse(&format!("{OFFLINE}\n{OFFLINE}\n{firing}\n"), "f.jsonl").expect("read");
        assert!(events.iter().all(fleet::is_fleet));
        let first = FleetEvent::of(&events[0]).expect("a fleet event");
        assert_eq!(first.kind, FleetEventKind::ClusterOffline);
        assert_eq!(first.summary, "connection refused");
        assert_eq!(first.id, events[0].id);
        assert_eq!(events[0].resource_version, "1768465800000");
        assert_eq!(events[1].resource_version, "1768465800001");
        assert_eq!(events[0].uid, events[1].uid);
        assert!(fleet::is_rule(&events[2]));
        assert_eq!(events[2].id, "mine-1");
        assert_eq!(FleetEvent::of(&events[2]).expect("fleet").id, "mine-1");
    }

    /// A fleet event with a field wrong says it is read as one, and which field.
    #[test]
    fn a_bad_fleet_event_names_its_field() {
        let err = parse(&OFFLINE.replace("cluster-offline", "offline"), "fleet.json")
            .expect_err("bad kind")
            .to_string();
        assert!(
            err.starts_with("fleet.json: not a fleet event") && err.contains("at `kind`"),
            "{err}"
        );
    }
}
