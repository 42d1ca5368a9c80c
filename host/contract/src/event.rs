//! The versioned job event: what one observed version of one job means to a plugin.
//!
//! Everything downstream of the watchers (lanes, plugins, the event file of
//! `jobrelay plugin run`) speaks this type, so it carries no Kubernetes client types.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::story::Story;
use crate::transition_key::TransitionKey;

/// A job's state, normalised across job kinds. Mirrors `phase` in `wit/plugin.wit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Accepted by the cluster but not running yet (queued, scheduling, pulling images).
    Pending,
    /// At least one worker is running.
    Running,
    /// The controller is restarting workers after a failure; the job may run again.
    Restarting,
    /// Suspended by the user or a queueing system; the job holds no workers.
    Suspended,
    /// Finished successfully. Terminal.
    Succeeded,
    /// Finished unsuccessfully, including aborted or terminated by the controller. Terminal.
    Failed,
    /// Deletion was requested (the object has a deletionTimestamp) but the object still exists,
    /// usually held by a finalizer.
    Terminating,
    /// The object is gone from the cluster; always a job's last event.
    Deleted,
    /// The status could not be interpreted: missing, partial or unknown to the normalizer.
    Unknown,
    /// Waiting for quota in a Kueue queue (its Workload has `QuotaReserved=False`): what the
    /// job's own status calls pending or suspended, for a kind whose story reads Workloads.
    Queued,
    /// Kueue preempted the job (its Workload evicted with `Preempted=True`) and it has not
    /// been requeued yet: what its own status calls suspended, pending or still running.
    Preempted,
}

impl Phase {
    /// Every phase, in the order of the WIT enum.
    pub const ALL: [Phase; 11] = [
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

    /// Succeeded and failed end a job's run; deletion ends its life.
    pub fn is_terminal(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed)
    }

    /// The name as the WIT enum, the state store and the logs spell it (`terminating`).
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
            Phase::Queued => "queued",
            Phase::Preempted => "preempted",
        }
    }

    /// The phase a plugin built against a world before 0.2.2 is given, whose enum lacks
    /// `queued` and `preempted`: each as the older enum's own words describe it (`pending`
    /// is "queued, scheduling, pulling images"; `suspended` is "suspended by a queueing
    /// system"). Every other phase is itself.
    pub fn before_0_2_2(self) -> Phase {
        match self {
            Phase::Queued => Phase::Pending,
            Phase::Preempted => Phase::Suspended,
            other => other,
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
    /// The cluster's name in jobrelay: the stem of its kubeconfig file.
    pub cluster: String,
    /// The job's `apiVersion`, e.g. `batch/v1`.
    pub api_version: String,
    /// The job's `kind`, e.g. `PyTorchJob`.
    pub kind: String,
    /// The job's namespace.
    pub namespace: String,
    /// The job's name.
    pub name: String,
    /// The job's `metadata.uid`: a job deleted and re-created under the same name has a new one.
    pub uid: String,
    /// The `metadata.resourceVersion` of this version; opaque, compared for equality only.
    pub resource_version: String,
    /// `metadata.generation`, when the object has one.
    #[serde(default)]
    pub generation: Option<i64>,
    /// The normalized phase of this version.
    pub phase: Phase,
    /// The kind's own phase or deciding condition, verbatim (Volcano `Completing`); empty when
    /// the status says nothing.
    #[serde(default)]
    pub raw_phase: String,
    /// Machine-readable reason from the deciding status field.
    #[serde(default)]
    pub reason: Option<String>,
    /// Human-readable message from the deciding status field.
    #[serde(default)]
    pub message: Option<String>,
    /// The phase of the previous version delivered to this plugin for this job, if any.
    #[serde(default)]
    pub previous_phase: Option<Phase>,
    /// RFC 3339.
    pub transition_time: String,
    /// `metadata.labels`.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// `metadata.annotations`, without `kubectl.kubernetes.io/last-applied-configuration`.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// The observed object as JSON text; shared, because every plugin lane gets the same event.
    #[serde(rename = "object", with = "embedded_json", default = "empty_object")]
    pub object_json: Arc<str>,
    /// Reconstructed from status timestamps after a watch gap, not observed.
    #[serde(default)]
    pub synthetic: bool,
    /// What the objects around the job said of it when this version was seen (its Kueue
    /// Workload, its pods): `None` when its kind watches none of them, or none named it yet.
    /// Shared: every lane's copy of the event points at the same snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub story: Option<Arc<Story>>,
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
    /// The cluster's name in jobrelay.
    pub cluster: String,
    /// The job's `metadata.uid`, unique within its cluster only.
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
