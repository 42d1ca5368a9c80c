//! What a transition key is made of, and its text.
//!
//! The key identifies one transition of one job — one *stay* of the job in one phase —
//! whether it was observed live or rebuilt from the status after a gap
//! (`job-event.transition-key` in `wit/plugin.wit`). How the watchers choose the parts from an
//! object and from what they saw before is theirs (`jobrelay_watch::transition_key`); the text
//! is here because an event without a key (an event file written by hand, an old dead letter)
//! derives its own the same way.

use crate::event::Phase;

/// What a transition key is built from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransitionKey<'a> {
    /// The stay a job is in from its creation until its status records anything else: a job
    /// is created once, so this stay needs no time.
    Created,
    /// The status records when the phase was entered.
    Entered {
        /// The entry time as the status writes it.
        at: &'a str,
        /// The stay's number among the stays in this phase entered at that same text (1 for
        /// the first), so two entries within one second of a status's one-second times still
        /// differ.
        n: u32,
    },
    /// The job is gone: a job is deleted once.
    Deletion,
    /// Nothing records the entry: the version the stay was first observed in.
    Version(&'a str),
}

impl TransitionKey<'_> {
    /// The text: `cluster/uid/phase@created`, `cluster/uid/phase@time` (with `#n` when n > 1),
    /// `cluster/uid/deleted` or `cluster/uid/phase@rv=version`.
    pub fn make(self, cluster: &str, uid: &str, phase: Phase) -> String {
        match self {
            TransitionKey::Created => format!("{cluster}/{uid}/{phase}@created"),
            TransitionKey::Entered { at, n } if n > 1 => {
                format!("{cluster}/{uid}/{phase}@{at}#{n}")
            }
            TransitionKey::Entered { at, .. } => format!("{cluster}/{uid}/{phase}@{at}"),
            TransitionKey::Deletion => format!("{cluster}/{uid}/{}", Phase::Deleted),
            TransitionKey::Version(rv) => format!("{cluster}/{uid}/{phase}@rv={rv}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts() {
        let at = "2026-11-26T19:12:11Z";
        let key = |k: TransitionKey, p| k.make("c0", "u", p);
        assert_eq!(
            key(TransitionKey::Created, Phase::Pending),
            "c0/u/pending@created"
        );
        assert_eq!(
            key(TransitionKey::Entered { at, n: 1 }, Phase::Running),
            "c0/u/running@2026-11-26T19:12:11Z"
        );
        assert_eq!(
            key(TransitionKey::Entered { at, n: 2 }, Phase::Running),
            "c0/u/running@2026-11-26T19:12:11Z#2"
        );
        assert_eq!(key(TransitionKey::Deletion, Phase::Deleted), "c0/u/deleted");
        assert_eq!(
            key(TransitionKey::Version("41"), Phase::Unknown),
            "c0/u/unknown@rv=41"
        );
    }
}
