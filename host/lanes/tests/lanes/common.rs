//! What the lane tests share: an event of a batch Job on cluster `east`.

use std::collections::BTreeMap;
use std::sync::Arc;

use jobrelay_contract::event::{JobEvent, Phase};

/// An event of job `uid` at version `rv`, in `phase`, with the phase delivered before it and
/// its transition time `at`.
pub fn event(uid: &str, rv: &str, phase: Phase, previous: Option<Phase>, at: &str) -> JobEvent {
    JobEvent {
        id: JobEvent::make_id("east", uid, rv),
        cluster: "east".into(),
        api_version: "batch/v1".into(),
        kind: "Job".into(),
        namespace: "ml".into(),
        name: format!("train-{uid}"),
        uid: uid.into(),
        resource_version: rv.into(),
        generation: Some(1),
        phase,
        raw_phase: format!("{phase:?}"),
        reason: None,
        message: None,
        previous_phase: previous,
        transition_time: at.into(),
        labels: BTreeMap::from([("team".to_string(), "nlp".to_string())]),
        annotations: BTreeMap::new(),
        object_json: Arc::from(r#"{"kind":"Job","status":{}}"#),
        transition_key: String::new(),
        synthetic: false,
        story: None,
    }
}
