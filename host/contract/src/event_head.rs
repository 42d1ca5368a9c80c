//! A job event in two parts: its head (every field but the object, as JSON) and the object's
//! JSON text as it is. The state store's inbox keeps an event this way.
//!
//! Why not the event's own JSON: that embeds the object as a nested JSON value, so writing it
//! copies the object's text and parses it once more to check it is JSON (`RawValue`), and
//! reading it back scans the object again. The object was valid JSON when the watch decoded
//! it and stays the same text; kept beside the head it is written and read as it is, shared
//! with the event in memory. The head is small (ids, names, labels, reason and message).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

use crate::event::{JobEvent, Phase};
use crate::story::Story;

/// Every field of [`JobEvent`] but `object_json`, by reference, in the event's serde names.
/// A field added to the event and not here fails `the_head_is_the_event_without_its_object`.
///
/// A field at its default (no reason, no labels, not synthetic, …) is left out: the event's
/// decoding gives every such field its default when absent, and each field written costs a
/// stored take its key and value escaped — a fifth of a take's instructions was this head.
#[derive(Serialize)]
struct Head<'a> {
    id: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    transition_key: &'a str,
    cluster: &'a str,
    api_version: &'a str,
    kind: &'a str,
    namespace: &'a str,
    name: &'a str,
    uid: &'a str,
    resource_version: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    generation: Option<i64>,
    phase: Phase,
    #[serde(skip_serializing_if = "str::is_empty")]
    raw_phase: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    previous_phase: Option<Phase>,
    transition_time: &'a str,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    labels: &'a BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    annotations: &'a BTreeMap<String, String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    synthetic: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    story: Option<&'a Story>,
}

impl JobEvent {
    /// The event's head: its JSON without the object (see [`JobEvent::from_parts`]).
    pub fn head_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(&Head {
            id: &self.id,
            transition_key: &self.transition_key,
            cluster: &self.cluster,
            api_version: &self.api_version,
            kind: &self.kind,
            namespace: &self.namespace,
            name: &self.name,
            uid: &self.uid,
            resource_version: &self.resource_version,
            generation: self.generation,
            phase: self.phase,
            raw_phase: &self.raw_phase,
            reason: self.reason.as_deref(),
            message: self.message.as_deref(),
            previous_phase: self.previous_phase,
            transition_time: &self.transition_time,
            labels: &self.labels,
            annotations: &self.annotations,
            synthetic: self.synthetic,
            story: self.story.as_deref(),
        })
    }

    /// The event of a head ([`JobEvent::head_json`]) and its object's JSON text, which is
    /// taken as it is: the caller had it from an event.
    pub fn from_parts(
        head_json: &str,
        object_json: Arc<str>,
    ) -> Result<JobEvent, serde_json::Error> {
        let mut event: JobEvent = serde_json::from_str(head_json)?;
        event.object_json = object_json;
        Ok(event)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::story::FailureCause;

    /// Every field set to something other than its default, so a field the head leaves out
    /// comes back different.
    fn full_event() -> JobEvent {
        JobEvent {
            id: "c/u/7".into(),
            transition_key: "c/u/running/7".into(),
            cluster: "c".into(),
            api_version: "batch.volcano.sh/v1alpha1".into(),
            kind: "Job".into(),
            namespace: "team-a".into(),
            name: "train \"quoted\" \u{1F680}".into(),
            uid: "u".into(),
            resource_version: "7".into(),
            generation: Some(3),
            phase: Phase::Running,
            raw_phase: "Running".into(),
            reason: Some("Started".into()),
            message: Some("line one\nline two".into()),
            previous_phase: Some(Phase::Pending),
            transition_time: "2026-12-01T10:00:00Z".into(),
            labels: BTreeMap::from([("team".into(), "a".into())]),
            annotations: BTreeMap::from([("note".into(), "<b>x</b>".into())]),
            object_json: Arc::from(r#"{"spec":{"minAvailable":4},"s":"a\"b"}"#),
            synthetic: true,
            story: Some(Arc::new(Story {
                workload: None,
                failure: Some(FailureCause {
                    container: "trainer".into(),
                    init: false,
                    reason: "OOMKilled".into(),
                    exit_code: Some(137),
                    last_reason: None,
                    message: Some("killed".into()),
                }),
            })),
        }
    }

    #[test]
    fn the_head_is_the_event_without_its_object() {
        let event = full_event();
        let head = event.head_json().expect("the head encodes");
        let back = JobEvent::from_parts(&head, event.object_json.clone()).expect("decodes");
        assert_eq!(back, event);
        // Field for field what the event's own JSON says, but the object: a field missing
        // from the head is missing here.
        let mut whole = serde_json::to_value(&event).expect("the event encodes");
        let object = whole
            .as_object_mut()
            .and_then(|m| m.remove("object"))
            .expect("the event's JSON has its object");
        assert_eq!(object["spec"]["minAvailable"], 4);
        let head_value: serde_json::Value = serde_json::from_str(&head).expect("the head is JSON");
        assert_eq!(head_value, whole);
    }

    /// An event with every field that may be at its default at it: the head leaves those out
    /// and reads back the same event.
    #[test]
    fn a_head_leaves_out_what_is_at_its_default() {
        let event = JobEvent {
            transition_key: String::new(),
            generation: None,
            raw_phase: String::new(),
            reason: None,
            message: None,
            previous_phase: None,
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            synthetic: false,
            story: None,
            ..full_event()
        };
        let head = event.head_json().expect("the head encodes");
        let fields: Vec<String> =
            serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&head)
                .expect("the head is a JSON object")
                .keys()
                .cloned()
                .collect();
        assert_eq!(
            fields,
            [
                "api_version",
                "cluster",
                "id",
                "kind",
                "name",
                "namespace",
                "phase",
                "resource_version",
                "transition_time",
                "uid"
            ]
        );
        let back = JobEvent::from_parts(&head, event.object_json.clone()).expect("decodes");
        assert_eq!(back, event);
    }

    #[test]
    fn the_object_is_kept_as_its_text() {
        let event = full_event();
        let head = event.head_json().expect("the head encodes");
        assert!(!head.contains("minAvailable"), "{head}");
        let back = JobEvent::from_parts(&head, event.object_json.clone()).expect("decodes");
        assert!(Arc::ptr_eq(&back.object_json, &event.object_json));
    }

    #[test]
    fn a_damaged_head_is_an_error() {
        assert!(JobEvent::from_parts("{\"id\":", Arc::from("{}")).is_err());
        assert!(JobEvent::from_parts("{}", Arc::from("{}")).is_err());
    }
}
