//! Timers: a job that stays too long in one state — pending, queued for quota, running —
//! fires its timer once, and resolves it when it moves on.
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
//! A pure state machine: no I/O, no clock; the caller passes the time and the jobs.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};
use wildmatch::WildMatch;

use crate::record::Secs;
use jobrelay_contract::uid::Uid;

pub mod spec;

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

/// One timer, checked (main file `fleet.timers`).
#[derive(Debug, Clone, PartialEq)]
pub struct Timer {
    /// The timer's name; its fleet events carry it as their rule.
    pub name: String,
    /// The state it measures.
    pub state: TimedState,
    /// Seconds a stay may last before the timer fires.
    pub longer_than: u32,
    /// Cluster name patterns (`*` and `?`); empty: every cluster.
    pub clusters: Vec<String>,
    /// Namespaces (empty: all).
    pub namespaces: Vec<String>,
    /// Configured kind names (empty: all).
    pub kinds: Vec<String>,
}

impl Timer {
    /// Whether the timer covers `stay`'s job; `clusters` are the timer's patterns, compiled.
    fn covers(&self, clusters: &[WildMatch], stay: &Stay<'_>) -> bool {
        (clusters.is_empty() || clusters.iter().any(|p| p.matches(stay.cluster)))
            && (self.namespaces.is_empty() || self.namespaces.iter().any(|n| n == stay.namespace))
            && (self.kinds.is_empty() || self.kinds.iter().any(|k| k == stay.kind))
    }
}

/// A job in a timed state, as the view holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stay<'a> {
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
    /// The state it is in.
    pub state: TimedState,
    /// When the stay began (seconds since the epoch).
    pub since: Secs,
    /// The queue it waits in (the ClusterQueue, else the LocalQueue), when Kueue holds it.
    pub queue: Option<&'a str>,
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
    /// When the stay began.
    pub since: Secs,
    /// Seconds the job had stayed when the change was judged.
    pub stayed: u32,
    /// The timer's `longer_than`, seconds.
    pub longer_than: u32,
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
    state: TimedState,
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
    }

    /// Lets go of every firing without a resolution: while this replica delivers nothing (a
    /// follower), so that once it leads, its first pass fires every standing stay again — the
    /// dead leader may not have delivered one — and the lanes' shared cursors keep those it did
    /// from repeating.
    pub fn forget_firings(&mut self) {
        if !self.firing.is_empty() {
            self.firing.clear();
            self.generation += 1;
        }
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

    /// Starts an evaluation at `now`: feed it every job in a timed state, then
    /// [`end`](Pass::end) it.
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
    /// One job in a timed state.
    pub fn see(&mut self, stay: &Stay<'_>) {
        let Pass {
            timers,
            now,
            holding,
            changes,
        } = self;
        let Timers {
            timers,
            patterns,
            firing,
            generation,
        } = &mut **timers;
        for (index, timer) in timers.iter().enumerate() {
            // Cheapest first: most jobs are in another state, or have not stayed long.
            if timer.state != stay.state {
                continue;
            }
            let stayed = now.saturating_sub(stay.since);
            if stay.since == 0
                || stayed < timer.longer_than
                || !timer.covers(&patterns[index], stay)
            {
                continue;
            }
            let key = (index, stay.uid.clone());
            if !firing.contains_key(&key) {
                *generation += 1;
                firing.insert(
                    key.clone(),
                    Firing {
                        cluster: stay.cluster.to_string(),
                        namespace: stay.namespace.to_string(),
                        name: stay.name.to_string(),
                        since: stay.since,
                        state: stay.state,
                    },
                );
                let queue = stay.queue.map(|q| format!(" in {q}")).unwrap_or_default();
                changes.push(TimerChange {
                    timer: timer.name.clone(),
                    cluster: stay.cluster.to_string(),
                    namespace: stay.namespace.to_string(),
                    name: stay.name.to_string(),
                    uid: stay.uid.to_string(),
                    firing: true,
                    since: stay.since,
                    stayed,
                    longer_than: timer.longer_than,
                    summary: format!(
                        "{}/{} {} {}{queue} on {} (longer than {})",
                        stay.namespace,
                        stay.name,
                        stay.state.as_str(),
                        words(stayed),
                        stay.cluster,
                        words(timer.longer_than)
                    ),
                });
            }
            holding.insert(key);
        }
    }

    /// Ends the evaluation: the firing timers no job held in it resolve. The changes, firings
    /// first in the order seen, then resolutions by timer and job.
    pub fn end(self) -> Vec<TimerChange> {
        let Pass {
            timers,
            now,
            holding,
            mut changes,
        } = self;
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
            let stayed = now.saturating_sub(firing.since);
            changes.push(TimerChange {
                timer: timer.name.clone(),
                summary: format!(
                    "{}/{} is no longer {} on {} (after {})",
                    firing.namespace,
                    firing.name,
                    firing.state.as_str(),
                    firing.cluster,
                    words(stayed)
                ),
                cluster: firing.cluster,
                namespace: firing.namespace,
                name: firing.name,
                uid: key.1.to_string(),
                firing: false,
                since: firing.since,
                stayed,
                longer_than: timer.longer_than,
            });
        }
        changes
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
