//! The one question a plugin's lane asks after a gap: given what it last accepted of a job,
//! which events stand for the transitions the job went through unseen, to be delivered before
//! the version just observed.

use chrono::{DateTime, FixedOffset};

use super::{
    created_after, first_sight_events, missed_transitions, recorded_transitions, stay_unchanged,
    synthetic_events,
};
use crate::kinds::NormalizerSpec;
use jobrelay_contract::event::{JobEvent, Phase};

/// What a lane last accepted of a job (queued or delivered), as far as catching up needs it.
#[derive(Debug, Clone, Copy, Default)]
pub struct LastAccepted<'a> {
    /// The phase accepted last; `None`: nothing of the job was accepted yet.
    pub phase: Option<Phase>,
    /// Its transition time (RFC 3339).
    pub transition_time: Option<&'a str>,
    /// Its resourceVersion.
    pub resource_version: Option<&'a str>,
    /// The job's deletion was accepted: nothing comes after it.
    pub deleted: bool,
}

/// The missed transitions of a job seen again after a gap, as synthetic events, oldest first.
/// A job the lane accepted nothing of (first seen in a list, or noted at its first sight but never delivered
/// before a restart) gets every transition its status records, unless it already existed at
/// `history_from` (when the plugin was installed, or its filter last changed): then only its
/// current state, which is `event` itself. Empty when the version is the one accepted last, when
/// the stay is unchanged, or when the object cannot be read.
pub fn gap_events(
    last: LastAccepted<'_>,
    event: &JobEvent,
    spec: &NormalizerSpec,
    history_from: Option<&DateTime<FixedOffset>>,
) -> Vec<JobEvent> {
    if last.deleted {
        return Vec::new();
    }
    let object = || serde_json::from_str::<serde_json::Value>(&event.object_json).ok();
    let Some(last_phase) = last.phase else {
        let Some(object) = object() else {
            return Vec::new();
        };
        if let Some(from) = history_from
            && !created_after(&object, from)
        {
            return Vec::new();
        }
        return first_sight_events(event, &recorded_transitions(spec, &object));
    };
    let Some(last_time) = last.transition_time else {
        return Vec::new();
    };
    // The version accepted last, seen again (a re-list, a restart): nothing between.
    if last.resource_version == Some(event.resource_version.as_str()) {
        return Vec::new();
    }
    if stay_unchanged(
        spec,
        (last_phase, last_time),
        (event.phase, &event.transition_time),
    ) {
        return Vec::new();
    }
    let Some(object) = object() else {
        return Vec::new();
    };
    let missed = missed_transitions(spec, &object, last_phase, Some(last_time));
    synthetic_events(event, last_phase, &missed)
}
