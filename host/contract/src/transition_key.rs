//! What a transition key is made of, and its text.
//!
//! The key identifies one transition of one job, whether it was observed live or rebuilt from
//! the status after a gap (`job-event.transition-key` in `wit/plugin.wit`). How the watchers
//! choose the parts from an object is theirs (`jobrelay_watch::transition_key`); the text is
//! here because an event without a key (an event file written by hand, an old dead letter)
//! derives its own the same way.

use crate::event::Phase;

/// What a transition key is built from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransitionKey<'a> {
    /// The status records when the phase was entered, as this text.
    Entered(&'a str),
    /// The job is gone: a job is deleted once.
    Deletion,
    /// Nothing records the entry: the version it was observed in.
    Version(&'a str),
}

impl TransitionKey<'_> {
    /// `cluster/uid/phase@time`, `cluster/uid/deleted` or `cluster/uid/phase@rv=version`.
    pub fn make(self, cluster: &str, uid: &str, phase: Phase) -> String {
        match self {
            TransitionKey::Entered(at) => format!("{cluster}/{uid}/{phase}@{at}"),
            TransitionKey::Deletion => format!("{cluster}/{uid}/{}", Phase::Deleted),
            TransitionKey::Version(rv) => format!("{cluster}/{uid}/{phase}@rv={rv}"),
        }
    }
}
