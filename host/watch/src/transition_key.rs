//! The transition key: what identifies one transition of one job — one *stay* of the job in
//! one phase — whether it was observed live or rebuilt from the status after a gap
//! (`job-event.transition-key` in `wit/plugin.wit`).
//!
//! A plugin that acts once per transition (a chat card, an archive, a transition row) dedupes
//! on it, so it must hold three things: two stays of one job never share a key; every version
//! of one stay carries the same key; and a stay delivered live and rebuilt later (its
//! acknowledgement lost to a kill) carries the same key both times.
//!
//! The only fact the live path and a rebuild share is the status, so the key is read from it
//! first ([`catch_up::recorded`](crate::catch_up::recorded), the same code and history the
//! catch-up uses): the stay the job was created in (`pending@created`), or the time the status
//! records for entering the phase, numbered when the history holds that phase more than once at
//! that same time (`running@…#2`). But statuses keep times in whole seconds, some keep one
//! entry per condition type, and some phases have no recorded entry at all, so the status alone
//! cannot tell every stay apart. A stream's [`Tracker`](crate::tracker::Tracker) therefore
//! remembers, per job, the [`Stay`] its last version was in, and [`Stay::next`] decides the
//! next one from both:
//!
//! - the same phase as before is the same stay, and keeps its key — even when the status only
//!   now starts recording its entry — unless the status shows the phase entered anew since
//!   (a later time, or a higher number at the same time);
//! - a new phase is a new stay. When the status dates its entry in the same second as the stay
//!   before, the stay is numbered past every stay of that phase the watcher saw begin in that
//!   second (a Kubeflow job that runs, restarts and runs again within a second: the status has
//!   one `Running` entry, the watcher saw two). When the status dates it *before* the stay
//!   before, the record is of an earlier visit (a resumed Kubeflow job back in `pending` shows
//!   only its creation's entry), and the stay is keyed by the version it was first seen in.
//!
//! What is remembered is lost with the process, so after a restart the key is what the status
//! alone tells; `docs/delivery.md` says per kind exactly which identity holds where.

use std::cmp::Ordering;

use chrono::DateTime;
use compact_str::CompactString;

use jobrelay_contract::event::Phase;
use jobrelay_contract::transition_key::TransitionKey;

use super::catch_up::Recorded;

/// One stay of one job, as a watcher keys it: what it remembers of the job's last version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stay {
    phase: Phase,
    mark: Mark,
    /// The latest entry time of the stays seen begin, with every stay entered at it, when
    /// that is not simply this stay alone at its own time — as it is for nearly every stay.
    recent: Option<Box<Recent>>,
}

/// What names a stay besides its phase.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Mark {
    Created,
    Entered { at: CompactString, n: u32 },
    Version(CompactString),
    Deletion,
}

/// The stays whose entry the status dated at `at`: per phase, the highest number given. One
/// entry per phase at most, so however often a status flips between phases under one
/// unchanging time, what a job holds here stays bounded (nine phases).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Recent {
    at: CompactString,
    stays: Vec<(Phase, u32)>,
}

impl Recent {
    /// The highest number a stay of `phase` got at this time; 0 when none.
    fn highest(&self, phase: Phase) -> u32 {
        self.stays
            .iter()
            .find(|(p, _)| *p == phase)
            .map_or(0, |(_, n)| *n)
    }

    fn note(&mut self, phase: Phase, n: u32) {
        match self.stays.iter_mut().find(|(p, _)| *p == phase) {
            Some((_, highest)) => *highest = (*highest).max(n),
            None => self.stays.push((phase, n)),
        }
    }
}

impl Stay {
    /// The phase of this stay.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The stay of a version in `phase` whose status records `recorded`, observed as
    /// `resource_version`; `previous` is the stay of the job's version seen before it (`None`
    /// at first sight).
    pub fn next(
        previous: Option<&Stay>,
        phase: Phase,
        recorded: Recorded,
        resource_version: &str,
    ) -> Stay {
        if phase == Phase::Deleted {
            return Stay::alone(phase, Mark::Deletion);
        }
        let derived = match recorded {
            Recorded::Created => Mark::Created,
            Recorded::Entered { at, n } => Mark::Entered { at: at.into(), n },
            Recorded::Unrecorded => Mark::Version(resource_version.into()),
        };
        let Some(previous) = previous else {
            return Stay::alone(phase, derived);
        };
        if previous.phase != phase {
            return previous.then(phase, derived, resource_version);
        }
        // The same stay, unless the status shows the phase entered anew since: a later
        // entry, or more entries at the same time.
        if let (Mark::Entered { at: was, n: was_n }, Mark::Entered { at, n }) =
            (&previous.mark, &derived)
        {
            let anew = match compare(at, was) {
                Some(Ordering::Greater) => true,
                Some(Ordering::Equal) => n > was_n,
                _ => false,
            };
            if anew {
                return previous.then(phase, derived, resource_version);
            }
        }
        previous.continued(phase, derived)
    }

    /// This stay, seen again in a version of the same phase whose status names it `derived`.
    /// The key stays; but an entry the status records only now (the stay was keyed by its
    /// first version, or by its creation) is noted as the latest seen begin, so that a later
    /// stay the status dates before it is known for a record of an earlier visit — as it would
    /// be had the entry been there from the stay's first version.
    fn continued(&self, phase: Phase, derived: Mark) -> Stay {
        let (Mark::Version(_) | Mark::Created, Mark::Entered { at, n }) = (&self.mark, derived)
        else {
            return self.clone();
        };
        let recent = match self.recent.as_deref() {
            Some(recent) => match compare(&at, &recent.at) {
                Some(Ordering::Less) | None => return self.clone(),
                Some(Ordering::Equal) => {
                    let mut recent = recent.clone();
                    recent.note(phase, n);
                    recent
                }
                Some(Ordering::Greater) => Recent {
                    at,
                    stays: vec![(phase, n)],
                },
            },
            None => Recent {
                at,
                stays: vec![(phase, n)],
            },
        };
        Stay {
            phase,
            mark: self.mark.clone(),
            recent: Some(Box::new(recent)),
        }
    }

    /// The key text of this stay of job `uid` on `cluster`.
    pub fn key(&self, cluster: &str, uid: &str) -> String {
        let key = match &self.mark {
            Mark::Created => TransitionKey::Created,
            Mark::Entered { at, n } => TransitionKey::Entered { at, n: *n },
            Mark::Version(rv) => TransitionKey::Version(rv),
            Mark::Deletion => TransitionKey::Deletion,
        };
        key.make(cluster, uid, self.phase)
    }

    fn alone(phase: Phase, mark: Mark) -> Stay {
        Stay {
            phase,
            mark,
            recent: None,
        }
    }

    /// The stay that begins after this one, in `phase`, named `derived` by its status.
    fn then(&self, phase: Phase, derived: Mark, resource_version: &str) -> Stay {
        // A deletion timestamp is set once per job: it names its stay alone.
        if phase == Phase::Terminating {
            return Stay::alone(phase, derived);
        }
        // A stay in Kueue's queue is named by its Workload: when the wait (or the eviction)
        // began and Kueue's own count of them ([`crate::story::queue_phase`]), which no other
        // stay of the job repeats. So it is never renumbered, nor taken for an earlier visit
        // when the job's status dated a stay after it (a job seen suspended a second after its
        // Workload began to wait); it is only noted among the stays seen begin, so the job's
        // own stays around it are still numbered past those of their second.
        let in_queue = matches!(phase, Phase::Queued | Phase::Preempted);
        let Mark::Entered { at, n } = derived else {
            // Nothing dates this stay: what was seen begin before it still counts for the next.
            return Stay {
                phase,
                mark: derived,
                recent: self.recent(),
            };
        };
        let Some(recent) = self.recent() else {
            return Stay::alone(phase, Mark::Entered { at, n });
        };
        match compare(&at, &recent.at) {
            // Dated in the same second as the latest stay seen begin: past every stay of this
            // phase seen begin in it.
            Some(Ordering::Equal) => {
                let n = if in_queue {
                    n
                } else {
                    n.max(recent.highest(phase) + 1)
                };
                let mut recent = recent;
                recent.note(phase, n);
                Stay {
                    phase,
                    mark: Mark::Entered { at, n },
                    recent: Some(recent),
                }
            }
            // Dated by its Workload before a stay seen begin: its own time, the memory kept.
            Some(Ordering::Less) if in_queue => Stay {
                phase,
                mark: Mark::Entered { at, n },
                recent: Some(recent),
            },
            // Dated before a stay already seen begin: the record is of an earlier visit.
            Some(Ordering::Less) => Stay {
                phase,
                mark: Mark::Version(resource_version.into()),
                recent: Some(recent),
            },
            _ => Stay::alone(phase, Mark::Entered { at, n }),
        }
    }

    /// The latest entry time seen and the stays entered at it.
    fn recent(&self) -> Option<Box<Recent>> {
        match (&self.recent, &self.mark) {
            (Some(recent), _) => Some(recent.clone()),
            (None, Mark::Entered { at, n }) => Some(Box::new(Recent {
                at: at.clone(),
                stays: vec![(self.phase, *n)],
            })),
            _ => None,
        }
    }
}

/// Two recorded times in order, as instants when both are RFC 3339 (statuses may write
/// fractions or offsets), else equal only as the same text; `None`: not comparable.
fn compare(a: &str, b: &str) -> Option<Ordering> {
    // The common case, a version of the same stay: no parsing.
    if a == b {
        return Some(Ordering::Equal);
    }
    match (
        DateTime::parse_from_rfc3339(a),
        DateTime::parse_from_rfc3339(b),
    ) {
        (Ok(a), Ok(b)) => Some(a.cmp(&b)),
        _ => (a == b).then_some(Ordering::Equal),
    }
}

#[cfg(test)]
mod tests;
