//! Timers: a job that stays too long in one state — pending, queued for quota, running —
//! fires its timer once, and resolves it when it moves on; and a job preempted or restarted
//! more than N times within a window fires a counting timer, resolved when the window holds
//! N or fewer again (or the job finished or went).
//!
//! Nothing is scheduled per job. Each evaluation walks the job view once (a pass): a job whose
//! stay in a timer's state began at least `longer_than` ago holds the timer; a holding timer
//! that was not firing fires; a firing one that no job holds any more (the job moved on, was
//! deleted, or left the view) resolves. So memory is the firing timers alone — none for a job
//! no timer covers, none for a job that has not stayed long — and a job that moves on between
//! two evaluations before its time never fires.
//!
//! When a stay began comes from the job's objects, not from when this process saw it: the
//! phase's time as its status records it (else the job's creation), and for `queued` the
//! Workload's wait as Kueue counts it (since its last requeue, else its creation). A restarted
//! process, or another replica taking over, so judges the same stay the same way.
//!
//! Why that is enough to fire once per stay across a kill or a take-over: the daemon hands
//! each change to plugins as a fleet event of the subject "this timer on this job", and the
//! lanes deliver a subject's event only when its state differs from the last one delivered,
//! remembered in the state store (see `jobrelay_contract::fleet`). A new process finds the
//! stay still long and fires again; the lanes keep it from the plugins that had it.
//!
//! A counting timer needs times no object keeps ([`counted`]): the caller stores the counted
//! times this state hands it ([`Timers::unsaved_counts`]), reads them back at start and at a
//! take-over ([`Timers::load_counts`]), and a counting timer fires only on times stored, so a
//! process killed after announcing a firing finds what it fired on. Memory is one entry per
//! job a counting timer covers with a counted time in its window, at most `more_than` + 1
//! times each.
//!
//! A pure state machine: no I/O, no clock; the caller passes the time and the jobs.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};
use wildmatch::WildMatch;

use crate::record::{Secs, Transition};
use jobrelay_contract::event::Phase;
use jobrelay_contract::uid::Uid;

pub mod counted;
pub mod spec;

pub use counted::{Counted, Occurrences};

/// The state a timer measures a job's stay in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimedState {
    /// The job's phase is `pending` and Kueue does not hold it for quota.
    Pending,
    /// Kueue holds the job's Workload for quota (`QuotaReserved=False`): needs the kind's
    /// `story: {kueue: true}`.
    Queued,
    /// The job's phase is `running`.
    Running,
}

impl TimedState {
    /// The state in words, as a summary says it.
    pub fn as_str(self) -> &'static str {
        match self {
            TimedState::Pending => "pending",
            TimedState::Queued => "queued",
            TimedState::Running => "running",
        }
    }
}

/// What a timer fires on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// A stay in `state` longer than `longer_than` seconds.
    Stay {
        /// The state.
        state: TimedState,
        /// Seconds a stay may last before the timer fires.
        longer_than: u32,
    },
    /// More than `more_than` of `counted` within the last `within` seconds.
    Count {
        /// What is counted.
        counted: Counted,
        /// How many the window may hold before the timer fires.
        more_than: u32,
        /// The window, seconds.
        within: u32,
    },
}

/// One timer, checked (main file `fleet.timers`).
#[derive(Debug, Clone, PartialEq)]
pub struct Timer {
    /// The timer's name; its fleet events carry it as their rule.
    pub name: String,
    /// What it fires on.
    pub measure: Measure,
    /// Cluster name patterns (`*` and `?`); empty: every cluster.
    pub clusters: Vec<String>,
    /// Namespaces (empty: all).
    pub namespaces: Vec<String>,
    /// Configured kind names (empty: all).
    pub kinds: Vec<String>,
}

impl Timer {
    /// Whether the timer covers the job; `clusters` are the timer's patterns, compiled.
    fn covers(&self, clusters: &[WildMatch], job: &JobKey<'_>) -> bool {
        (clusters.is_empty() || clusters.iter().any(|p| p.matches(job.cluster)))
            && (self.namespaces.is_empty() || self.namespaces.iter().any(|n| n == job.namespace))
            && (self.kinds.is_empty() || self.kinds.iter().any(|k| k == job.kind))
    }
}

/// Which job, as the view names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobKey<'a> {
    /// The cluster's name in jobrelay.
    pub cluster: &'a str,
    /// The job's namespace.
    pub namespace: &'a str,
    /// The job's name.
    pub name: &'a str,
    /// The configured kind's name.
    pub kind: &'a str,
    /// The job's `metadata.uid` (turned into text only for a change).
    pub uid: &'a Uid,
}

/// A job in a timed state, as the view holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stay<'a> {
    /// The job.
    pub job: JobKey<'a>,
    /// The state it is in.
    pub state: TimedState,
    /// When the stay began (seconds since the epoch).
    pub since: Secs,
    /// The queue it waits in (the ClusterQueue, else the LocalQueue), when Kueue holds it.
    pub queue: Option<&'a str>,
}

/// What the view knows of an unfinished job's preemptions and restarts, for the counting
/// timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally<'a> {
    /// The job.
    pub job: JobKey<'a>,
    /// The job's creation.
    pub created: Secs,
    /// Kueue's count of the Workload's preemptions (0 for a kind that tells no story).
    pub preemptions: u32,
    /// When the last of them evicted it (0: not known).
    pub preempted_at: Secs,
    /// The phases the view saw it enter: its `restarting` ones are the restarts.
    pub history: &'a [Transition],
}

/// A timer that started or stopped firing on a job.
#[derive(Debug, Clone, PartialEq)]
pub struct TimerChange {
    /// The timer's name.
    pub timer: String,
    /// The cluster's name in jobrelay.
    pub cluster: String,
    /// The job's namespace.
    pub namespace: String,
    /// The job's name.
    pub name: String,
    /// The job's `metadata.uid`.
    pub uid: String,
    /// Whether it fires (else it resolves).
    pub firing: bool,
    /// When the stay began, or the first counted time in the window.
    pub since: Secs,
    /// Seconds the job had stayed, or how many the window held, when the change was judged.
    pub value: u32,
    /// The timer's `longer_than` in seconds, or its `more_than`.
    pub threshold: u32,
    /// One line for people: `ml/llama-ft queued 2h 10m in cluster-queue a100 (longer than 2h)`.
    pub summary: String,
}

/// What a firing timer remembers, to say its resolution.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Firing {
    cluster: String,
    namespace: String,
    name: String,
    since: Secs,
}

/// One job's counted times, as this process holds them.
#[derive(Debug)]
struct Counts {
    cluster: String,
    occurrences: Occurrences,
    /// Changed since last stored: no timer fires on them until they are.
    unsaved: bool,
}

/// The timers and which are firing on which jobs.
#[derive(Debug, Default)]
pub struct Timers {
    timers: Vec<Timer>,
    /// Each timer's cluster patterns, compiled once.
    patterns: Vec<Vec<WildMatch>>,
    /// (timer index, job uid) → what it fired on.
    firing: HashMap<(usize, Uid), Firing>,
    /// Grows whenever `firing` changes, so the job view's marks are rewritten only then.
    generation: u64,
    /// Per [`Counted`]: the counted times of jobs a counting timer covers that have some in
    /// its window.
    counts: [HashMap<Uid, Counts>; 2],
    /// Per [`Counted`]: the widest window of the timers counting it and the most times any of
    /// them needs (`more_than` + 1); `None` when no timer counts it.
    windows: [Option<(u32, usize)>; 2],
    /// Whether `counts` holds what the state store holds (see [`Timers::load_counts`]):
    /// until then no counting timer is judged.
    counts_loaded: bool,
}

/// One stored entry of counted times: its key in the state store and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCounts {
    /// What it counts, of which job.
    pub of: (Counted, Uid),
    /// `counted/cluster/uid`.
    pub key: String,
    /// [`Occurrences::to_text`].
    pub text: String,
    /// Seconds it is worth keeping: until its last time leaves the widest window.
    pub keep_for: u32,
}

impl Timers {
    /// The main file's timers, from now on. A timer whose definition is unchanged keeps what
    /// it fires on; the firings of a changed or removed timer are let go without a resolution
    /// (a changed timer judges afresh, and the lanes keep an unchanged firing from repeating).
    pub fn set_timers(&mut self, timers: Vec<Timer>) {
        let kept: HashMap<usize, usize> = self
            .timers
            .iter()
            .enumerate()
            .filter_map(|(old, t)| timers.iter().position(|n| n == t).map(|new| (old, new)))
            .collect();
        self.firing = std::mem::take(&mut self.firing)
            .into_iter()
            .filter_map(|((old, uid), f)| kept.get(&old).map(|new| ((*new, uid), f)))
            .collect();
        self.generation += 1;
        self.patterns = timers
            .iter()
            .map(|t| t.clusters.iter().map(|p| WildMatch::new(p)).collect())
            .collect();
        self.timers = timers;
        self.windows = Counted::ALL.map(|counted| self.widest(counted));
        if !self.counting() {
            self.counts = Default::default();
            self.counts_loaded = false;
        }
    }

    /// Lets go of every firing without a resolution: while this replica delivers nothing (a
    /// follower), so that once it leads, its first pass fires every standing stay again — the
    /// dead leader may not have delivered one — and the lanes' shared cursors keep those it did
    /// from repeating. The counted times go too: the leader stores newer ones, read again at
    /// the take-over.
    pub fn forget_firings(&mut self) {
        if !self.firing.is_empty() {
            self.firing.clear();
            self.generation += 1;
        }
        self.counts = Default::default();
        self.counts_loaded = false;
    }

    /// Whether a counting timer is configured.
    pub fn counting(&self) -> bool {
        self.timers
            .iter()
            .any(|t| matches!(t.measure, Measure::Count { .. }))
    }

    /// Whether the counted times must be read from the state store before the next pass
    /// judges a counting timer.
    pub fn needs_counts(&self) -> bool {
        self.counting() && !self.counts_loaded
    }

    /// The counted times the state store holds (`(key, text)` of [`StoredCounts`]), from now
    /// on; a damaged entry is skipped (its job is counted afresh).
    pub fn load_counts(&mut self, entries: Vec<(String, String)>) -> usize {
        self.counts = Default::default();
        let mut skipped = 0;
        for (key, text) in entries {
            let parsed = (|| {
                let mut parts = key.splitn(3, '/');
                let counted = Counted::parse(parts.next()?)?;
                let cluster = parts.next()?.to_string();
                let uid = Uid::new(parts.next()?);
                Some(((counted, uid), cluster, Occurrences::from_text(&text)?))
            })();
            match parsed {
                Some(((counted, uid), cluster, occurrences)) => {
                    self.counts[counted.slot()].insert(
                        uid,
                        Counts {
                            cluster,
                            occurrences,
                            unsaved: false,
                        },
                    );
                }
                None => skipped += 1,
            }
        }
        self.counts_loaded = true;
        skipped
    }

    /// The counted times changed since they were last stored.
    pub fn unsaved_counts(&self) -> Vec<StoredCounts> {
        Counted::ALL
            .into_iter()
            .flat_map(|counted| {
                let keep_for = self.windows[counted.slot()].map_or(0, |(within, _)| within);
                self.counts[counted.slot()]
                    .iter()
                    .filter(|(_, c)| c.unsaved)
                    .map(move |(uid, c)| StoredCounts {
                        of: (counted, uid.clone()),
                        key: format!("{}/{}/{uid}", counted.as_str(), c.cluster),
                        text: c.occurrences.to_text(),
                        keep_for,
                    })
            })
            .collect()
    }

    /// Notes that `saved` reached the state store: the timers may fire on them.
    pub fn counts_saved(&mut self, saved: &[StoredCounts]) {
        for entry in saved {
            // Still as written: a pass between the write and now may have added more.
            if let Some(c) = self.counts[entry.of.0.slot()].get_mut(&entry.of.1)
                && c.unsaved
                && entry.text == c.occurrences.to_text()
            {
                c.unsaved = false;
            }
        }
    }

    /// The widest window and the most times worth keeping, over the timers counting `counted`.
    fn widest(&self, counted: Counted) -> Option<(u32, usize)> {
        self.timers
            .iter()
            .filter_map(|t| match t.measure {
                Measure::Count {
                    counted: c,
                    more_than,
                    within,
                } if c == counted => Some((within, more_than as usize + 1)),
                _ => None,
            })
            .reduce(|(w, k), (w2, k2)| (w.max(w2), k.max(k2)))
    }

    /// A number that changes whenever the firings do (a firing, a resolution, a reload).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Per timer, in the main file's order, how many jobs it fires on.
    pub fn counts(&self) -> Vec<(String, usize)> {
        let mut counts = vec![0usize; self.timers.len()];
        for (t, _) in self.firing.keys() {
            counts[*t] += 1;
        }
        self.timers
            .iter()
            .zip(counts)
            .map(|(t, n)| (t.name.clone(), n))
            .collect()
    }

    /// How many jobs' counted times this process holds.
    pub fn counted_jobs(&self) -> usize {
        self.counts.iter().map(HashMap::len).sum()
    }

    /// The timers in force.
    pub fn timers(&self) -> &[Timer] {
        &self.timers
    }

    /// How many timers fire, over all jobs.
    pub fn firing_count(&self) -> usize {
        self.firing.len()
    }

    /// The uids of the jobs a timer fires on, with the timer's name.
    pub fn firing(&self) -> Vec<(String, String)> {
        let mut all: Vec<(String, String)> = self
            .firing
            .keys()
            .map(|(t, uid)| (self.timers[*t].name.clone(), uid.to_string()))
            .collect();
        all.sort();
        all
    }

    /// The jobs a timer fires on, `(cluster, job uid, timer)`: what the job view marks.
    pub fn firing_jobs(&self) -> Vec<(String, Uid, String)> {
        self.firing
            .iter()
            .map(|((t, uid), f)| (f.cluster.clone(), uid.clone(), self.timers[*t].name.clone()))
            .collect()
    }

    /// Starts an evaluation at `now`: feed it every job in a timed state and every unfinished
    /// job's tally, then [`end`](Pass::end) it.
    pub fn pass(&mut self, now: Secs) -> Pass<'_> {
        Pass {
            timers: self,
            now,
            holding: HashSet::new(),
            changes: Vec::new(),
        }
    }
}

/// One evaluation of the timers over the view's jobs.
pub struct Pass<'t> {
    timers: &'t mut Timers,
    now: Secs,
    holding: HashSet<(usize, Uid)>,
    changes: Vec<TimerChange>,
}

impl Pass<'_> {
    /// Whether a counting timer is judged in this pass (else tallies need not be made).
    pub fn counting(&self) -> bool {
        self.timers.counts_loaded && self.timers.counting()
    }

    /// One job in a timed state.
    pub fn see(&mut self, stay: &Stay<'_>) {
        let now = self.now;
        for index in 0..self.timers.timers.len() {
            let timer = &self.timers.timers[index];
            // Cheapest first: most jobs are in another state, or have not stayed long.
            let Measure::Stay { state, longer_than } = timer.measure else {
                continue;
            };
            if state != stay.state {
                continue;
            }
            let stayed = now.saturating_sub(stay.since);
            if stay.since == 0
                || stayed < longer_than
                || !timer.covers(&self.timers.patterns[index], &stay.job)
            {
                continue;
            }
            let queue = stay.queue.map(|q| format!(" in {q}")).unwrap_or_default();
            let job = stay.job;
            self.hold(index, &job, stay.since, stayed, || {
                format!(
                    "{}/{} {} {}{queue} on {} (longer than {})",
                    job.namespace,
                    job.name,
                    state.as_str(),
                    words(stayed),
                    job.cluster,
                    words(longer_than)
                )
            });
        }
    }

    /// One unfinished job's preemptions and restarts, for the counting timers.
    pub fn tally(&mut self, tally: &Tally<'_>) {
        if !self.timers.counts_loaded {
            return;
        }
        let now = self.now;
        for counted in Counted::ALL {
            let Some((widest, keep)) = self.timers.windows[counted.slot()] else {
                continue;
            };
            let covered = self.timers.timers.iter().enumerate().any(|(i, t)| {
                matches!(t.measure, Measure::Count { counted: c, .. } if c == counted)
                    && t.covers(&self.timers.patterns[i], &tally.job)
            });
            if !covered || !self.note(counted, tally, widest, keep) {
                continue;
            }
            for index in 0..self.timers.timers.len() {
                let timer = &self.timers.timers[index];
                let Measure::Count {
                    counted: c,
                    more_than,
                    within,
                } = timer.measure
                else {
                    continue;
                };
                if c != counted || !timer.covers(&self.timers.patterns[index], &tally.job) {
                    continue;
                }
                let Some(counts) = self.timers.counts[counted.slot()].get(tally.job.uid) else {
                    continue;
                };
                let (n, first) = counts.occurrences.within(now, within);
                if n <= more_than {
                    continue;
                }
                // Fired only on stored times: a process killed after announcing it finds them.
                let firing = self
                    .timers
                    .firing
                    .contains_key(&(index, tally.job.uid.clone()));
                if counts.unsaved && !firing {
                    continue;
                }
                let job = tally.job;
                self.hold(index, &job, first, n, || {
                    format!(
                        "{}/{} {} {n} time{} in {} on {} (more than {more_than})",
                        job.namespace,
                        job.name,
                        counted.as_str(),
                        if n == 1 { "" } else { "s" },
                        words(within),
                        job.cluster,
                    )
                });
            }
        }
    }

    /// Notes the tally's `counted` in the job's counted times; whether it has any left.
    fn note(&mut self, counted: Counted, tally: &Tally<'_>, widest: u32, keep: usize) -> bool {
        let from = self.now.saturating_sub(widest);
        let restarts = || {
            tally
                .history
                .iter()
                .filter(|t| t.phase == Phase::Restarting && t.at > from)
                .map(|t| t.at)
        };
        let map = &mut self.timers.counts[counted.slot()];
        let known = !map.is_empty() && map.contains_key(tally.job.uid);
        // Nothing in the window and nothing held: no entry (most jobs).
        let anything = match counted {
            Counted::Preempted => tally.preemptions > 0 && (known || tally.preempted_at > from),
            Counted::Restarted => known || restarts().next().is_some(),
        };
        if !anything {
            return false;
        }
        if !known {
            map.insert(
                tally.job.uid.clone(),
                Counts {
                    cluster: tally.job.cluster.to_string(),
                    occurrences: Occurrences::default(),
                    unsaved: false,
                },
            );
        }
        let Some(counts) = map.get_mut(tally.job.uid) else {
            return false;
        };
        let o = &mut counts.occurrences;
        let added = match counted {
            Counted::Preempted => {
                o.note_count(tally.preemptions, tally.preempted_at, tally.created)
            }
            Counted::Restarted => {
                // Once as many are held as any timer counts, only newer ones matter.
                let seen_from = match o.times.first() {
                    Some(first) if o.times.len() >= keep => (*first).max(from + 1),
                    _ => from + 1,
                };
                let seen: Vec<Secs> = restarts().collect();
                o.note_times(&seen, seen_from)
            }
        };
        o.trim(from, keep);
        if o.times.is_empty() {
            // All before the window: let go (a preemption count let go is dated again from
            // the job's creation, before the window, so nothing is counted twice).
            map.remove(tally.job.uid);
            return false;
        }
        counts.unsaved |= added;
        true
    }

    /// The job holds timer `index`: fires it unless it fires already.
    fn hold(
        &mut self,
        index: usize,
        job: &JobKey<'_>,
        since: Secs,
        value: u32,
        summary: impl FnOnce() -> String,
    ) {
        let timers = &mut *self.timers;
        let key = (index, job.uid.clone());
        if !timers.firing.contains_key(&key) {
            timers.generation += 1;
            timers.firing.insert(
                key.clone(),
                Firing {
                    cluster: job.cluster.to_string(),
                    namespace: job.namespace.to_string(),
                    name: job.name.to_string(),
                    since,
                },
            );
            let timer = &timers.timers[index];
            self.changes.push(TimerChange {
                timer: timer.name.clone(),
                cluster: job.cluster.to_string(),
                namespace: job.namespace.to_string(),
                name: job.name.to_string(),
                uid: job.uid.to_string(),
                firing: true,
                since,
                value,
                threshold: threshold(&timer.measure),
                summary: summary(),
            });
        }
        self.holding.insert(key);
    }

    /// Ends the evaluation: the firing timers no job held in it resolve, and the counted
    /// times no window holds any more are let go. The changes, firings first in the order
    /// seen, then resolutions by timer and job.
    pub fn end(self) -> Vec<TimerChange> {
        let Pass {
            timers,
            now,
            holding,
            mut changes,
        } = self;
        // Kept while a time is in the widest window, whether or not the pass saw the job: a
        // process just started has times stored for jobs its view has not listed yet.
        for counted in Counted::ALL {
            let widest = timers.windows[counted.slot()].map_or(0, |(within, _)| within);
            let from = now.saturating_sub(widest);
            timers.counts[counted.slot()]
                .retain(|_, c| c.occurrences.times.last().is_some_and(|last| *last > from));
        }
        let mut ended: Vec<(usize, Uid)> = timers
            .firing
            .keys()
            .filter(|key| !holding.contains(*key))
            .cloned()
            .collect();
        ended.sort_by_key(|(t, uid)| (*t, uid.to_string()));
        for key in ended {
            let Some(firing) = timers.firing.remove(&key) else {
                continue;
            };
            timers.generation += 1;
            let timer = &timers.timers[key.0];
            let (value, summary) = match timer.measure {
                Measure::Stay { state, .. } => {
                    let stayed = now.saturating_sub(firing.since);
                    let summary = format!(
                        "{}/{} is no longer {} on {} (after {})",
                        firing.namespace,
                        firing.name,
                        state.as_str(),
                        firing.cluster,
                        words(stayed)
                    );
                    (stayed, summary)
                }
                Measure::Count {
                    counted,
                    more_than,
                    within,
                } => {
                    let n = timers.counts[counted.slot()]
                        .get(&key.1)
                        .map_or(0, |c| c.occurrences.within(now, within).0);
                    let summary = format!(
                        "{}/{} is no longer {} more than {more_than} times in {} on {} ({n} now)",
                        firing.namespace,
                        firing.name,
                        counted.as_str(),
                        words(within),
                        firing.cluster,
                    );
                    (n, summary)
                }
            };
            changes.push(TimerChange {
                timer: timer.name.clone(),
                summary,
                cluster: firing.cluster,
                namespace: firing.namespace,
                name: firing.name,
                uid: key.1.to_string(),
                firing: false,
                since: firing.since,
                value,
                threshold: threshold(&timer.measure),
            });
        }
        changes
    }
}

/// A timer's threshold as its events carry it: `longer_than` in seconds, or `more_than`.
fn threshold(measure: &Measure) -> u32 {
    match *measure {
        Measure::Stay { longer_than, .. } => longer_than,
        Measure::Count { more_than, .. } => more_than,
    }
}

/// Seconds as people read a stay: `2h 10m`, `3m 5s`, `40s`, `2d 4h`.
pub fn words(seconds: u32) -> String {
    let (d, h, m, s) = (
        seconds / 86_400,
        seconds / 3600 % 24,
        seconds / 60 % 60,
        seconds % 60,
    );
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) if s == 0 => format!("{m}m"),
        (0, 0, _) => format!("{m}m {s}s"),
        (0, _, 0) => format!("{h}h"),
        (0, _, _) => format!("{h}h {m}m"),
        (_, 0, _) => format!("{d}d"),
        _ => format!("{d}d {h}h"),
    }
}

#[cfg(test)]
mod tests;
