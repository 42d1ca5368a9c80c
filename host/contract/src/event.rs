//! The versioned job event: what one observed version of one job means to a plugin.
//!
//! Everything downstream of the watchers (lanes, plugins, the event file of
//! `jobrelay plugin run`) speaks this type, so it carries no Kubernetes client types.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::transition_key::TransitionKey;

/// A job's state, normalised across job kinds. Mirrors `phase` in `wit/plugin.wit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Pending,
    Running,
    Restarting,
    Suspended,
    Succeeded,
    Failed,
    Terminating,
    Deleted,
    Unknown,
}

impl Phase {
    /// Every phase, in the order of the WIT enum.
    pub const ALL: [Phase; 9] = [
        Phase::Pending,
        Phase::Running,
        Phase::Restarting,
        Phase::Suspended,
        Phase::Succeeded,
        Phase::Failed,
        Phase::Terminating,
        Phase::Deleted,
        Phase::Unknown,
    ];

    /// Succeeded and failed end a job's run; deletion ends its life.
    pub fn is_terminal(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "pending",
            Phase::Running => "running",
            Phase::Restarting => "restarting",
            Phase::Suspended => "suspended",
            Phase::Succeeded => "succeeded",
            Phase::Failed => "failed",
            Phase::Terminating => "terminating",
            Phase::Deleted => "deleted",
            Phase::Unknown => "unknown",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One observed version of one job. Field meanings are documented in `wit/plugin.wit`.
///
/// In JSON (event files, logs) the object is embedded as a JSON value under `object`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobEvent {
    /// `cluster/uid/resource_version`: the idempotency key of this version.
    pub id: String,
    /// The identity of the transition this version belongs to (see [`TransitionKey`]). Empty
    /// in an event file that leaves it out; [`JobEvent::transition_key`] then derives it.
    #[serde(default)]
    pub transition_key: String,
    pub cluster: String,
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    #[serde(default)]
    pub generation: Option<i64>,
    pub phase: Phase,
    #[serde(default)]
    pub raw_phase: String,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub previous_phase: Option<Phase>,
    /// RFC 3339.
    pub transition_time: String,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// The observed object as JSON text; shared, because every plugin lane gets the same event.
    #[serde(rename = "object", with = "embedded_json", default = "empty_object")]
    pub object_json: Arc<str>,
    /// Reconstructed from status timestamps after a watch gap, not observed.
    #[serde(default)]
    pub synthetic: bool,
}

impl JobEvent {
    /// The idempotency key of a version: `cluster/uid/resource_version`.
    pub fn make_id(cluster: &str, uid: &str, resource_version: &str) -> String {
        format!("{cluster}/{uid}/{resource_version}")
    }

    /// The transition key, derived from the version when the event did not carry one (an
    /// event file written by hand, a dead letter stored before keys existed).
    pub fn transition_key(&self) -> std::borrow::Cow<'_, str> {
        if self.transition_key.is_empty() {
            let key = if self.phase == Phase::Deleted {
                TransitionKey::Deletion
            } else {
                TransitionKey::Version(&self.resource_version)
            };
            std::borrow::Cow::Owned(key.make(&self.cluster, &self.uid, self.phase))
        } else {
            std::borrow::Cow::Borrowed(&self.transition_key)
        }
    }

    /// The key that orders events: one job on one cluster.
    pub fn job_key(&self) -> JobKey {
        JobKey {
            cluster: self.cluster.clone(),
            uid: self.uid.clone(),
        }
    }
}

/// Identifies one job across the fleet; uids are unique per cluster only.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobKey {
    pub cluster: String,
    pub uid: String,
}

impl fmt::Display for JobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.cluster, self.uid)
    }
}

fn empty_object() -> Arc<str> {
    Arc::from("{}")
}

/// Keeps the object as text in memory but as a nested JSON value on the wire, so event files
/// stay readable and the text is produced once per event, not once per plugin.
mod embedded_json {
    use std::sync::Arc;

    use serde::{Deserialize, Deserializer, Serializer};
    use serde_json::value::RawValue;

    pub fn serialize<S: Serializer>(text: &Arc<str>, s: S) -> Result<S::Ok, S::Error> {
        let raw = RawValue::from_string(text.to_string()).map_err(serde::ser::Error::custom)?;
        serde::Serialize::serialize(&raw, s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<str>, D::Error> {
        let raw: Box<RawValue> = Deserialize::deserialize(d)?;
        Ok(Arc::from(raw.get()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_round_trips_as_nested_json() {
        let text = r#"{"id":"c/u/1","cluster":"c","api_version":"batch/v1","kind":"Job","namespace":"ns","name":"n","uid":"u","resource_version":"1","phase":"running","transition_time":"2026-01-01T00:00:00Z","object":{"spec":{"x":1}}}"#;
        let ev: JobEvent = serde_json::from_str(text).expect("valid event");
        assert_eq!(&*ev.object_json, r#"{"spec":{"x":1}}"#);
        assert_eq!(ev.phase, Phase::Running);
        let back = serde_json::to_value(&ev).expect("serialises");
        assert_eq!(back["object"]["spec"]["x"], 1);
    }
}
