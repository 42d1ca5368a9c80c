//! What a counting timer counts of one job — its preemptions, its restarts — as times, so that
//! "more than N in the last Z" can be judged, and judged alike by a process started after a
//! kill.
//!
//! Neither a job nor its Workload keeps those times: Kueue counts preemptions
//! (`schedulingStats.evictions`) but keeps only the last eviction's time, and a restart is a
//! phase the job passes through. So the times are the host's own, kept per job in the state
//! store (the daemon writes them; see `jobrelay::daemon::fleet_events`) and merged here with
//! what the job view sees at each evaluation:
//!
//! - **Preemptions** are numbered by Kueue's count, which a restarted process reads again: a
//!   count above the one the times go up to adds the missing ones. The last is dated at the
//!   eviction's time; one never seen alone (several between two evaluations, or while no
//!   process ran) at the latest time known before it, else the job's creation. So each is
//!   dated no later than it happened, and none is counted in a window it may not have been in.
//! - **Restarts** are the view's `restarting` transitions, dated as the job's status records
//!   them. A restarted process sees only the transitions since it started, so its times are
//!   merged by multiplicity: a time seen twice counts twice, and a time both stored and seen
//!   once counts once.
//!
//! A pure state: no I/O, no clock.

use serde::{Deserialize, Serialize};

use crate::record::Secs;

/// What a counting timer counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Counted {
    /// Kueue preempted the job's Workload (needs the kind's `story: {kueue: true}`).
    Preempted,
    /// The job entered `restarting`.
    Restarted,
}

impl Counted {
    /// Each, in the order the timers judge them.
    pub const ALL: [Counted; 2] = [Counted::Preempted, Counted::Restarted];

    /// Its place in a table of one entry per [`Counted`].
    pub fn slot(self) -> usize {
        self as usize
    }

    /// As the main file and a summary say it.
    pub fn as_str(self) -> &'static str {
        match self {
            Counted::Preempted => "preempted",
            Counted::Restarted => "restarted",
        }
    }

    /// The one read back from [`as_str`](Self::as_str).
    pub fn parse(text: &str) -> Option<Counted> {
        match text {
            "preempted" => Some(Counted::Preempted),
            "restarted" => Some(Counted::Restarted),
            _ => None,
        }
    }
}

/// The counted times of one job and one [`Counted`], oldest first (a time may repeat).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Occurrences {
    /// Kueue's preemption count the times go up to (0 for restarts).
    pub count: u32,
    /// The times, oldest first.
    pub times: Vec<Secs>,
}

impl Occurrences {
    /// Kueue counts `count` preemptions of a job created at `created`, the last evicted at
    /// `last_at` (0: not known). Whether anything was added.
    pub fn note_count(&mut self, count: u32, last_at: Secs, created: Secs) -> bool {
        if count <= self.count {
            return false;
        }
        let floor = self.times.last().copied().unwrap_or(created);
        let last = if last_at == 0 {
            floor
        } else {
            last_at.max(floor)
        };
        let unseen = count - self.count - 1;
        self.times
            .extend(std::iter::repeat_n(floor, unseen as usize));
        self.times.push(last);
        self.count = count;
        true
    }

    /// The view saw these restarts (`seen`, any order) from `from` on. Whether anything was
    /// added.
    pub fn note_times(&mut self, seen: &[Secs], from: Secs) -> bool {
        let mut seen: Vec<Secs> = seen.iter().copied().filter(|t| *t >= from).collect();
        seen.sort_unstable();
        let mut added = false;
        let mut i = 0;
        while i < seen.len() {
            let t = seen[i];
            let run = seen[i..].iter().take_while(|s| **s == t).count();
            let stored = self.times.iter().filter(|s| **s == t).count();
            for _ in stored..run {
                let at = self.times.partition_point(|s| *s <= t);
                self.times.insert(at, t);
                added = true;
            }
            i += run;
        }
        added
    }

    /// How many fall in the `within` seconds up to `now`, and the first of them.
    pub fn within(&self, now: Secs, within: u32) -> (u32, Secs) {
        let from = now.saturating_sub(within);
        let start = self.times.partition_point(|t| *t <= from);
        let inside = &self.times[start..];
        (inside.len() as u32, inside.first().copied().unwrap_or(0))
    }

    /// Drops the times at or before `from` and all but the last `keep`: what no timer can
    /// count any more. Whether any was dropped.
    pub fn trim(&mut self, from: Secs, keep: usize) -> bool {
        let old = self.times.partition_point(|t| *t <= from);
        let over = self.times.len().saturating_sub(old).saturating_sub(keep);
        let drop = old + over;
        self.times.drain(..drop);
        drop > 0
    }

    /// As the state store keeps it: `count;t1,t2,…`.
    pub fn to_text(&self) -> String {
        let times: Vec<String> = self.times.iter().map(|t| t.to_string()).collect();
        format!("{};{}", self.count, times.join(","))
    }

    /// Read back from [`to_text`](Self::to_text); `None` for anything else (a damaged entry is
    /// counted afresh, never trusted).
    pub fn from_text(text: &str) -> Option<Occurrences> {
        let (count, times) = text.split_once(';')?;
        let count = count.parse().ok()?;
        let mut parsed = Vec::new();
        for t in times.split(',').filter(|t| !t.is_empty()) {
            parsed.push(t.parse().ok()?);
        }
        if !parsed.is_sorted() {
            return None;
        }
        Some(Occurrences {
            count,
            times: parsed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preemptions_are_dated_no_later_than_they_happened() {
        let mut o = Occurrences::default();
        // First seen with 3: the two before the last are dated at the job's creation.
        assert!(o.note_count(3, 5_000, 1_000));
        assert_eq!(o.times, [1_000, 1_000, 5_000]);
        assert!(
            !o.note_count(3, 5_000, 1_000),
            "the same count adds nothing"
        );
        assert!(!o.note_count(2, 6_000, 1_000), "a lower count adds nothing");
        // Two more between evaluations: the one not seen alone at the last known time.
        assert!(o.note_count(5, 7_000, 1_000));
        assert_eq!(o.times, [1_000, 1_000, 5_000, 5_000, 7_000]);
        assert_eq!(o.within(7_100, 3_000), (3, 5_000));
        // An eviction time older than what is known (a stale story) is never earlier.
        assert!(o.note_count(6, 6_000, 1_000));
        assert_eq!(o.times.last(), Some(&7_000));
        // Not known: the last known time.
        let mut unknown = Occurrences::default();
        unknown.note_count(1, 0, 2_000);
        assert_eq!(unknown.times, [2_000]);
    }

    #[test]
    fn restarts_merge_by_multiplicity() {
        let mut o = Occurrences::default();
        assert!(o.note_times(&[100, 100, 300], 0));
        assert_eq!(o.times, [100, 100, 300]);
        // A process started later sees only the last one: nothing new.
        assert!(!o.note_times(&[300], 0));
        // Two in the same second after it, seen once each.
        assert!(o.note_times(&[300, 400, 400], 0));
        assert_eq!(o.times, [100, 100, 300, 400, 400]);
        // Before `from`: left alone.
        assert!(!o.note_times(&[50], 60));
    }

    #[test]
    fn the_window_and_the_trim() {
        let mut o = Occurrences {
            count: 0,
            times: vec![10, 20, 30, 40, 50],
        };
        assert_eq!(o.within(50, 25), (3, 30), "after 25 exclusive");
        assert!(o.trim(20, 10));
        assert_eq!(o.times, [30, 40, 50]);
        assert!(o.trim(0, 2));
        assert_eq!(o.times, [40, 50]);
        assert!(!o.trim(0, 2));
    }

    #[test]
    fn the_stored_text_round_trips_and_damage_is_refused() {
        let o = Occurrences {
            count: 4,
            times: vec![1, 1, 9],
        };
        assert_eq!(o.to_text(), "4;1,1,9");
        assert_eq!(Occurrences::from_text(&o.to_text()), Some(o));
        assert_eq!(Occurrences::from_text("0;"), Some(Occurrences::default()));
        for bad in ["", "4", "x;1", "4;1,y", "4;9,1", "4;-1"] {
            assert_eq!(Occurrences::from_text(bad), None, "{bad}");
        }
    }
}
