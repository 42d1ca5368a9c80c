//! The transition key: what identifies one transition of one job, whether it was observed live
//! or rebuilt from the status after a gap (`job-event.transition-key` in `wit/plugin.wit`).
//!
//! A plugin that acts once per transition (a chat card, an archive, a transition row) needs an
//! identity that survives the one case the event id cannot cover: a transition delivered live
//! whose acknowledgement was lost (a kill), then delivered again as a reconstruction from a
//! later version (`synthetic`). The reconstruction has no resource version of the live event,
//! and jobrelay's clock differs between the two; the only fact both share is the status's own
//! record of when the phase was entered. So the key is the phase plus that recorded time, read
//! by the same code ([`catch_up::entered_at`] and the catch-up's history) on both paths, and
//! falls back to the version only for phases whose entry no status records (those are never
//! reconstructed).

use serde_json::Value;

use jobrelay_contract::event::Phase;
use jobrelay_contract::transition_key::TransitionKey;

use super::catch_up;
use super::kinds::NormalizerSpec;
use super::normalize::Normalized;

/// The job and version a key is made for.
#[derive(Debug, Clone, Copy)]
pub struct Version<'a> {
    pub cluster: &'a str,
    pub uid: &'a str,
    pub resource_version: &'a str,
}

/// The key of an observed version of a job in `phase` (the normalized phase, or `deleted` for
/// a deletion), given the object and what the normalizer read from it.
pub fn of_version(
    spec: &NormalizerSpec,
    object: &Value,
    normalized: &Normalized,
    phase: Phase,
    version: Version<'_>,
) -> String {
    let entered = (phase != Phase::Deleted)
        .then(|| catch_up::entered_at(spec, object, normalized))
        .flatten();
    let key = match (phase, &entered) {
        (Phase::Deleted, _) => TransitionKey::Deletion,
        (_, Some(at)) => TransitionKey::Entered(at),
        (_, None) => TransitionKey::Version(version.resource_version),
    };
    key.make(version.cluster, version.uid, phase)
}
