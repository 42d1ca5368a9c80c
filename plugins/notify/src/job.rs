//! What the plugin reads of a job event, beyond its fields.
//!
//! The logic works on the guest crate's `JobEvent` and `Phase` (plain Rust types, so every
//! module is unit-tested on the host target without building a component); this file adds the
//! few questions the plugin asks of them.

pub use jobrelay_guest::story::JobStory;
pub use jobrelay_guest::{JobEvent, Phase};

/// The story of the event being handled (`story.get`): its Kueue Workload, its first
/// failing pod. A host import, so only inside the component; the unit tests, built for the
/// host target, set the one they are about with [`tell`].
#[cfg(target_arch = "wasm32")]
pub fn story() -> Option<JobStory> {
    jobrelay_guest::story::get()
}

#[cfg(not(target_arch = "wasm32"))]
thread_local! {
    static TOLD: std::cell::RefCell<Option<JobStory>> = const { std::cell::RefCell::new(None) };
}

/// The story a unit test set with [`tell`] on this thread.
#[cfg(not(target_arch = "wasm32"))]
pub fn story() -> Option<JobStory> {
    TOLD.with(|told| told.borrow().clone())
}

/// Sets the story [`story`] answers on this thread (unit tests on the host target only).
#[cfg(not(target_arch = "wasm32"))]
pub fn tell(story: Option<JobStory>) {
    TOLD.with(|told| *told.borrow_mut() = story);
}

/// Whether this event changes the phase. A first event (no previous phase) counts: the plugin
/// has not reported this job yet.
pub fn is_transition(job: &JobEvent) -> bool {
    job.previous_phase != Some(job.phase)
}

/// The value of label `key`, if the job has it.
pub fn label<'a>(job: &'a JobEvent, key: &str) -> Option<&'a str> {
    job.labels
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// A failed PyTorchJob, the usual subject of the notifiers' tests (theirs too: a dependency's
/// test-only items are out of reach).
pub fn sample() -> JobEvent {
    JobEvent {
        id: "east/0b0e8d6c/48213".to_string(),
        transition_key: "east/0b0e8d6c/failed@2026-11-21T09:32:03Z".to_string(),
        cluster: "east".to_string(),
        api_version: "kubeflow.org/v1".to_string(),
        kind: "PyTorchJob".to_string(),
        namespace: "ml".to_string(),
        name: "llama-finetune".to_string(),
        uid: "0b0e8d6c".to_string(),
        resource_version: "48213".to_string(),
        generation: Some(1),
        phase: Phase::Failed,
        raw_phase: "Failed".to_string(),
        reason: Some("BackoffLimitExceeded".to_string()),
        message: Some("worker-0 exited with code 137".to_string()),
        previous_phase: Some(Phase::Running),
        transition_time: "2026-11-21T09:32:03Z".to_string(),
        labels: vec![("team".to_string(), "nlp".to_string())],
        annotations: Vec::new(),
        object_json: r#"{"status":{"startTime":"2026-11-21T08:30:00Z"}}"#.to_string(),
        synthetic: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transitions() {
        let mut job = sample();
        assert!(is_transition(&job));
        job.previous_phase = Some(Phase::Failed);
        assert!(!is_transition(&job));
        job.previous_phase = None;
        assert!(is_transition(&job));
    }
}
