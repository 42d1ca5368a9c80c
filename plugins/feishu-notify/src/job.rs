//! The plugin's own view of a job event.
//!
//! The logic works on these plain types rather than on the WIT bindings' ones, so it can be
//! unit-tested on the host target without building a component; `lib.rs` converts each event
//! once, on arrival.

/// A job's normalised phase; mirrors the WIT `phase` enum, whose names are the only phase names
/// accepted in the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
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
    /// Every phase, in WIT order (used to list the valid names in an error).
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

    /// The WIT name, which is also how the phase is written in config and shown in cards.
    pub fn name(self) -> &'static str {
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

    /// The phase with exactly this WIT name.
    pub fn from_name(name: &str) -> Option<Phase> {
        Phase::ALL.into_iter().find(|phase| phase.name() == name)
    }

    /// The card header colour (one of Feishu's header templates), chosen so the outcome is
    /// readable at a glance: green done, red failed, orange in trouble, blue busy, grey the rest.
    pub fn colour(self) -> &'static str {
        match self {
            Phase::Running => "blue",
            Phase::Succeeded => "green",
            Phase::Failed => "red",
            Phase::Restarting => "orange",
            Phase::Pending
            | Phase::Suspended
            | Phase::Unknown
            | Phase::Terminating
            | Phase::Deleted => "grey",
        }
    }
}

/// The fields of a job event the plugin uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// `cluster/uid/resource-version`: this version's id.
    pub id: String,
    /// The transition's identity, the same live and reconstructed: the dedup key.
    pub transition_key: String,
    pub cluster: String,
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub phase: Phase,
    pub raw_phase: String,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub previous_phase: Option<Phase>,
    /// RFC 3339; the end of the run time shown on the card.
    pub transition_time: String,
    pub labels: Vec<(String, String)>,
    /// The whole object, for the start time (not lifted into the event).
    pub object_json: String,
}

impl Job {
    /// Whether this event changes the phase. A first event (no previous phase) counts: the
    /// plugin has not reported this job yet.
    pub fn is_transition(&self) -> bool {
        self.previous_phase != Some(self.phase)
    }

    /// The value of label `key`, if the job has it.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A failed PyTorchJob, the usual subject of the other modules' tests.
    pub(crate) fn sample() -> Job {
        Job {
            id: "east/0b0e8d6c/48213".to_string(),
            transition_key: "east/0b0e8d6c/failed@2026-11-21T09:32:03Z".to_string(),
            cluster: "east".to_string(),
            api_version: "kubeflow.org/v1".to_string(),
            kind: "PyTorchJob".to_string(),
            namespace: "ml".to_string(),
            name: "llama-finetune".to_string(),
            uid: "0b0e8d6c".to_string(),
            phase: Phase::Failed,
            raw_phase: "Failed".to_string(),
            reason: Some("BackoffLimitExceeded".to_string()),
            message: Some("worker-0 exited with code 137".to_string()),
            previous_phase: Some(Phase::Running),
            transition_time: "2026-11-21T09:32:03Z".to_string(),
            labels: vec![("team".to_string(), "nlp".to_string())],
            object_json: r#"{"status":{"startTime":"2026-11-21T08:30:00Z"}}"#.to_string(),
        }
    }

    #[test]
    fn names_round_trip() {
        for phase in Phase::ALL {
            assert_eq!(Phase::from_name(phase.name()), Some(phase));
        }
        assert_eq!(Phase::from_name("Running"), None, "names are exact");
        assert_eq!(Phase::from_name("done"), None);
    }

    #[test]
    fn colours() {
        assert_eq!(Phase::Running.colour(), "blue");
        assert_eq!(Phase::Succeeded.colour(), "green");
        assert_eq!(Phase::Failed.colour(), "red");
        assert_eq!(Phase::Restarting.colour(), "orange");
        for grey in [
            Phase::Pending,
            Phase::Suspended,
            Phase::Unknown,
            Phase::Terminating,
            Phase::Deleted,
        ] {
            assert_eq!(grey.colour(), "grey");
        }
    }

    #[test]
    fn transitions() {
        let mut job = sample();
        assert!(job.is_transition());
        job.previous_phase = Some(Phase::Failed);
        assert!(!job.is_transition());
        job.previous_phase = None;
        assert!(job.is_transition());
    }
}
