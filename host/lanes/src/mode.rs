//! Delivery modes: which observed versions of a job a plugin receives.
//!
//! The decision is a pure function of the version and of what the lane already accepted (or
//! still holds queued) for the job, so it is property-tested on arbitrary sequences of versions
//! (`mode/tests.rs`) apart from queues and timing.

use compact_str::CompactString;
use serde::{Deserialize, Serialize};

use jobrelay_contract::event::{JobEvent, Phase};

/// Chosen per plugin in its manifest (`delivery:`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeliveryMode {
    /// Every distinct resourceVersion, in order; nothing merged.
    #[default]
    EveryVersion,
    /// Only when the normalised phase changes, and the deletion.
    Transitions,
    /// The first time the job reaches its end — succeeded, failed, or deletion requested
    /// (terminating) — and the deletion itself.
    Terminal,
    /// Compacted: of the versions waiting, only the newest is delivered.
    Latest,
    /// Fleet events only ([`jobrelay_contract::fleet`]), never chosen in a manifest: a
    /// subject's state when it differs from the last one accepted, as `transitions` — and a
    /// good state (`running`: online, resolved) only once a bad one was accepted. The host
    /// announces each cluster's and rule's first verdict after it starts, whatever it is; the
    /// lane turns that into news only when it ends a state delivered before (an outage that
    /// ended while the host was down), and into nothing otherwise.
    #[serde(skip)]
    FleetStates,
}

/// What a lane has accepted for one job: enough to judge the next version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Accepted {
    /// resourceVersion of the last version accepted (queued or delivered).
    pub resource_version: Option<CompactString>,
    /// Its phase.
    pub phase: Option<Phase>,
    /// Its transition time (RFC 3339), for catching up missed transitions.
    pub transition_time: Option<CompactString>,
    /// An end (terminal phase or terminating) was accepted once (the `terminal` mode's
    /// "first time").
    pub terminal_done: bool,
    /// The deletion was accepted: nothing after it.
    pub deleted: bool,
}

/// What to do with an observed version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Not for this plugin (duplicate, same phase, not terminal, after deletion).
    Skip(SkipReason),
    /// Queue it behind the job's earlier versions.
    Append,
    /// Queue it in place of the job's versions still waiting (`latest`).
    Replace,
}

/// Why a version is not for the plugin, as `jobrelay plugin run` explains a skip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// The same resourceVersion was already accepted (re-list, reconnect, restart).
    Duplicate,
    /// The job's deletion was already accepted.
    AfterDeletion,
    /// `transitions`: the phase did not change.
    SamePhase,
    /// `terminal`: not a first terminal phase nor the deletion.
    NotTerminal,
}

impl DeliveryMode {
    /// Judge `event` given what was accepted, and on acceptance record it in `accepted`.
    ///
    /// `queued` tells whether a version with this resourceVersion is waiting in the queue (a
    /// version can be accepted, queued, and observed again before it is delivered).
    pub fn decide(
        self,
        accepted: &mut Accepted,
        event: &JobEvent,
        queued: impl Fn(&str) -> bool,
    ) -> Decision {
        if accepted.deleted {
            return Decision::Skip(SkipReason::AfterDeletion);
        }
        let rv = event.resource_version.as_str();
        if accepted.resource_version.as_deref() == Some(rv) || queued(rv) {
            return Decision::Skip(SkipReason::Duplicate);
        }
        // A version accepted in a stay its story gave it alone (`1234~queued@…`, see
        // `Tracker::restory`), seen again plain in that same stay (a re-list after a
        // restart, whose book has the story by then): the same version, not news.
        if accepted.phase == Some(event.phase)
            && accepted
                .resource_version
                .as_deref()
                .and_then(|accepted| accepted.split_once('~'))
                .is_some_and(|(version, _)| version == rv)
        {
            return Decision::Skip(SkipReason::Duplicate);
        }
        let deleted = event.phase == Phase::Deleted;
        let decision = match self {
            _ if deleted && self != DeliveryMode::Latest => Decision::Append,
            DeliveryMode::EveryVersion => Decision::Append,
            DeliveryMode::Latest => Decision::Replace,
            DeliveryMode::Transitions if accepted.phase == Some(event.phase) => {
                Decision::Skip(SkipReason::SamePhase)
            }
            DeliveryMode::Transitions => Decision::Append,
            DeliveryMode::FleetStates
                if accepted.phase == Some(event.phase)
                    || (accepted.phase.is_none() && event.phase == Phase::Running) =>
            {
                Decision::Skip(SkipReason::SamePhase)
            }
            DeliveryMode::FleetStates => Decision::Append,
            DeliveryMode::Terminal if is_end(event.phase) && !accepted.terminal_done => {
                Decision::Append
            }
            DeliveryMode::Terminal => Decision::Skip(SkipReason::NotTerminal),
        };
        if !matches!(decision, Decision::Skip(_)) {
            accepted.resource_version = Some(CompactString::new(&event.resource_version));
            accepted.phase = Some(event.phase);
            accepted.transition_time = Some(CompactString::new(&event.transition_time));
            accepted.terminal_done |= is_end(event.phase);
            accepted.deleted |= deleted;
        }
        decision
    }

    /// Whether missed transitions (reconstructed after a watch gap) matter to this mode.
    /// `terminal` takes them too: a job that finished and was deleted during a gap has its
    /// terminal phase only as a reconstructed transition.
    pub fn wants_catch_up(self) -> bool {
        self != DeliveryMode::Latest
    }
}

/// The end of a job's run as the `terminal` mode sees it: an outcome, or deletion requested
/// (which, for a job held by jobrelay's finalizer, is the last moment its pods and logs exist).
pub fn is_end(phase: Phase) -> bool {
    phase.is_terminal() || phase == Phase::Terminating
}

#[cfg(test)]
mod tests;
