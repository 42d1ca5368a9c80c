//! What the job view keeps of one job: a few dozen bytes, every shared value interned.
//!
//! A fleet holds a million jobs, so a record is a projection, not the object: its name,
//! interned namespace, kind, raw phase and label set, its phase, its times in seconds and the
//! phases it was observed in. The object itself, its annotations and its messages stay with
//! the events the plugins got.

use compact_str::CompactString;

use super::interner::Sym;
use jobrelay_contract::event::Phase;

/// Seconds since the epoch, 0 for "not known" or "not yet" (a `u32` reaches 2106).
pub type Secs = u32;

/// Most transitions kept per job: the first and the latest ones. A job that flaps between
/// running and restarting for days would otherwise grow without bound.
pub const MAX_HISTORY: usize = 16;

/// One phase a job was observed to enter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    /// When it entered the phase: the time its status records, or when it was observed.
    pub at: Secs,
    pub phase: Phase,
    /// Reconstructed from status timestamps after a watch gap, not observed.
    pub synthetic: bool,
}

/// One job.
#[derive(Debug)]
pub struct JobRecord {
    pub name: CompactString,
    pub namespace: Sym,
    /// The configured kind's name (`batch-job`, `volcano-job`, …).
    pub kind: Sym,
    pub raw_phase: Sym,
    pub labels: Sym,
    pub created: Secs,
    /// When it first ran.
    pub started: Secs,
    /// When it last succeeded or failed (0 again once it runs again).
    pub finished: Secs,
    /// When it was seen deleted (0: it exists).
    pub gone: Secs,
    pub phase: Phase,
    /// Times it entered `restarting`.
    pub restarts: u16,
    /// The phases it entered, oldest first: the first, then the latest [`MAX_HISTORY`] − 1.
    pub history: Box<[Transition]>,
}

impl JobRecord {
    /// Notes that the job entered `transition.phase`, unless it is already in it.
    pub fn enter(&mut self, transition: Transition) {
        if self.history.last().map(|t| t.phase) == Some(transition.phase) {
            return;
        }
        let mut history = std::mem::take(&mut self.history).into_vec();
        if history.len() >= MAX_HISTORY {
            history.remove(1);
        }
        history.push(transition);
        self.history = history.into_boxed_slice();
        let at = transition.at;
        match transition.phase {
            Phase::Running => {
                if self.started == 0 {
                    self.started = at;
                }
                self.finished = 0;
            }
            Phase::Restarting => {
                self.restarts = self.restarts.saturating_add(1);
                self.finished = 0;
            }
            Phase::Succeeded | Phase::Failed => self.finished = at,
            Phase::Pending | Phase::Suspended => self.finished = 0,
            Phase::Terminating | Phase::Deleted | Phase::Unknown => {}
        }
        self.phase = transition.phase;
    }

    /// How long it ran: to its end, or to `now` while it runs.
    pub fn duration(&self, now: Secs) -> Option<u32> {
        if self.started == 0 {
            return None;
        }
        let end = if self.finished != 0 {
            self.finished
        } else if self.gone != 0 || !matches!(self.phase, Phase::Running | Phase::Restarting) {
            return None;
        } else {
            now
        };
        Some(end.saturating_sub(self.started))
    }
}

/// Seconds since the epoch of an RFC 3339 time; `None` when it does not parse or lies outside
/// what [`Secs`] holds.
pub fn secs_of(rfc3339: &str) -> Option<Secs> {
    let at = chrono::DateTime::parse_from_rfc3339(rfc3339).ok()?;
    Secs::try_from(at.timestamp()).ok().filter(|s| *s != 0)
}

/// Seconds since the epoch now.
pub fn now_secs() -> Secs {
    Secs::try_from(chrono::Utc::now().timestamp()).unwrap_or(Secs::MAX)
}

/// RFC 3339 of a time kept, `None` for 0.
pub fn rfc3339(at: Secs) -> Option<String> {
    if at == 0 {
        return None;
    }
    chrono::DateTime::from_timestamp(i64::from(at), 0)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
}
