//! What the job view keeps of one job: a few dozen bytes, every shared value interned.
//!
//! A fleet holds a million jobs, so a record is a projection, not the object: its name,
//! interned namespace, kind, raw phase and label set, its phase, its times in seconds and the
//! phases it was observed in. The object itself, its annotations and its messages stay with
//! the events the plugins got.

use compact_str::CompactString;

use super::interner::Sym;
use jobrelay_contract::event::Phase;

/// A job's labels, sorted by key: one allocation for the pairs and one per text, a fraction of
/// a `BTreeMap`'s node (hundreds of bytes even for two labels) — what a label set that only
/// one job has costs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LabelSet(Box<[(Box<str>, Box<str>)]>);

impl LabelSet {
    /// The set of `labels`, copied.
    pub fn of(labels: &std::collections::BTreeMap<String, String>) -> LabelSet {
        LabelSet(
            labels
                .iter()
                .map(|(k, v)| (Box::from(k.as_str()), Box::from(v.as_str())))
                .collect(),
        )
    }

    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &*self.0[i].1)
    }

    /// Whether these are exactly `labels`.
    pub fn is(&self, labels: &std::collections::BTreeMap<String, String>) -> bool {
        self.0.len() == labels.len()
            && self
                .0
                .iter()
                .zip(labels)
                .all(|((k, v), (lk, lv))| **k == **lk && **v == **lv)
    }

    /// The labels as a map again, for an answer of the API.
    pub fn to_map(&self) -> std::collections::BTreeMap<String, String> {
        self.0
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
}

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
    /// The phase entered.
    pub phase: Phase,
    /// Reconstructed from status timestamps after a watch gap, not observed.
    pub synthetic: bool,
}

/// One job.
#[derive(Debug)]
pub struct JobRecord {
    /// The job's name.
    pub name: CompactString,
    /// The job's namespace, interned in its cluster's strings.
    pub namespace: Sym,
    /// The configured kind's name (`batch-job`, `volcano-job`, …).
    pub kind: Sym,
    /// The kind's own phase of the latest version, interned.
    pub raw_phase: Sym,
    /// The job's label set, interned in its cluster's label sets.
    pub labels: Sym,
    /// The object's `creationTimestamp`, else when the view first saw it.
    pub created: Secs,
    /// When it first ran.
    pub started: Secs,
    /// When it last succeeded or failed (0 again once it runs again).
    pub finished: Secs,
    /// When it was seen deleted (0: it exists).
    pub gone: Secs,
    /// The phase of the latest version seen.
    pub phase: Phase,
    /// Times it entered `restarting`.
    pub restarts: u16,
    /// The phases it entered, oldest first: the first, then the latest [`MAX_HISTORY`] − 1.
    pub history: Box<[Transition]>,
    /// While Kueue holds its Workload for quota: since when, by Kueue's rule (the last
    /// requeue, else the Workload's creation); 0 otherwise or when the kind tells no story.
    pub queued_since: Secs,
    /// The queue it waits in while queued (the ClusterQueue, else the LocalQueue), interned.
    pub queue: Option<Sym>,
    /// What its story said over time (kinds that tell one; `None` until a version carries a
    /// story).
    pub trail: Option<Box<crate::jobs::timeline::Trail>>,
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
            Phase::Pending | Phase::Suspended | Phase::Queued | Phase::Preempted => {
                self.finished = 0
            }
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
/// what [`Secs`] holds. The form Kubernetes writes (`2026-11-28T01:52:26Z`) is read directly,
/// once per observed version; any other goes through `chrono`.
pub fn secs_of(rfc3339: &str) -> Option<Secs> {
    let secs = match canonical(rfc3339.as_bytes()) {
        Some(secs) => secs,
        None => chrono::DateTime::parse_from_rfc3339(rfc3339)
            .ok()?
            .timestamp(),
    };
    Secs::try_from(secs).ok().filter(|s| *s != 0)
}

/// `YYYY-MM-DDTHH:MM:SSZ` in seconds since the epoch, checked field by field.
fn canonical(text: &[u8]) -> Option<i64> {
    let text: &[u8; 20] = text.try_into().ok()?;
    if text[4] != b'-' || text[7] != b'-' || text[10] != b'T' || text[13] != b':' {
        return None;
    }
    if text[16] != b':' || text[19] != b'Z' {
        return None;
    }
    let number = |range: std::ops::Range<usize>| -> Option<i64> {
        text[range].iter().try_fold(0i64, |n, d| {
            d.is_ascii_digit().then(|| n * 10 + i64::from(d - b'0'))
        })
    };
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 60 {
        return None;
    }
    // Days from the civil date (the proleptic Gregorian calendar), March-based years.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hour * 3_600 + minute * 60 + second)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quick_reading_agrees_with_chrono() {
        for text in [
            "1970-01-01T00:00:01Z",
            "2000-02-29T23:59:59Z",
            "2026-11-28T01:52:26Z",
            "2027-01-15T08:00:00Z",
            "2100-03-01T00:00:00Z",
            "2024-12-31T12:30:45Z",
        ] {
            let slow = chrono::DateTime::parse_from_rfc3339(text)
                .expect("valid")
                .timestamp();
            assert_eq!(canonical(text.as_bytes()), Some(slow), "{text}");
        }
        for secs in (1..4_200_000_000i64).step_by(9_999_991) {
            let text = chrono::DateTime::from_timestamp(secs, 0)
                .expect("time")
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            assert_eq!(canonical(text.as_bytes()), Some(secs), "{text}");
        }
        for other in ["2026-11-28T01:52:26+02:00", "2026-11-28T01:52:26.5Z"] {
            assert_eq!(canonical(other.as_bytes()), None);
            assert!(secs_of(other).is_some(), "{other} read the slow way");
        }
        for bad in [
            "2026-13-01T00:00:00Z",
            "2026-11-28T25:00:00Z",
            "2026-1x-28T01:52:26Z",
            "",
        ] {
            assert_eq!(secs_of(bad), None, "{bad}");
        }
    }
}
