//! What the timers read of the view ([`crate::timers`]): each job's stay in a timed state, from
//! the record's phase, times and queue facts (set here from each version's story), and the
//! marks of the timers firing on each job that lists filter on and show.

use std::collections::{BTreeMap, HashMap};

use super::{JobView, read, write};
use crate::interner::Interner;
use crate::record::{JobRecord, Secs};
use crate::timers::{JobKey, Pass, Stay, Tally, TimedState};
use jobrelay_contract::event::Phase;
use jobrelay_contract::story::{QueueState, Story};
use jobrelay_contract::uid::Uid;

impl JobView {
    /// Hands `see` every job in a state a timer measures ([`crate::timers`]): queued for
    /// quota, else pending or running, with when that stay began. One cluster at a time,
    /// under its read lock.
    pub fn for_each_stay(&self, mut see: impl FnMut(&Stay<'_>)) {
        self.for_each_timed(|stay, _| {
            if let Some(stay) = stay {
                see(stay)
            }
        });
    }

    /// Judges the timers' `pass` on every job: its stay, and, when a counting timer is
    /// configured, the preemptions and restarts of every unfinished job.
    pub fn judge_timers(&self, pass: &mut Pass<'_>) {
        let counting = pass.counting();
        self.for_each_timed(|stay, tally| {
            if let Some(stay) = stay {
                pass.see(stay);
            }
            if counting && let Some(tally) = tally {
                pass.tally(tally);
            }
        });
    }

    /// Hands `see` each job's stay in a timed state (if any) and, unless it finished, its
    /// tally.
    fn for_each_timed(&self, mut see: impl FnMut(Option<&Stay<'_>>, Option<&Tally<'_>>)) {
        for (cluster, shard) in self.shards() {
            let guard = read(&shard);
            let text = |sym| guard.text(sym);
            for (uid, rec) in guard.jobs.iter() {
                if rec.gone != 0 {
                    continue;
                }
                let job = JobKey {
                    cluster: &cluster,
                    namespace: text(rec.namespace),
                    name: &rec.name,
                    kind: text(rec.kind),
                    uid,
                };
                let entered = rec
                    .history
                    .last()
                    .filter(|t| t.phase == rec.phase)
                    .map_or(rec.created, |t| t.at);
                let stay = if rec.queued_since != 0 {
                    Some((TimedState::Queued, rec.queued_since))
                } else {
                    match rec.phase {
                        // A job waits from its creation unless it left pending and came back.
                        Phase::Pending if rec.started == 0 => {
                            Some((TimedState::Pending, rec.created))
                        }
                        Phase::Pending => Some((TimedState::Pending, entered)),
                        Phase::Running => Some((TimedState::Running, entered)),
                        _ => None,
                    }
                };
                let stay = stay.map(|(state, since)| Stay {
                    job,
                    state,
                    since,
                    queue: rec.queue.map(text),
                });
                let finished =
                    matches!(rec.phase, Phase::Succeeded | Phase::Failed | Phase::Deleted);
                let tally = (!finished).then(|| Tally {
                    job,
                    created: rec.created,
                    preemptions: rec.trail.as_ref().map_or(0, |t| t.preemptions),
                    preempted_at: rec.trail.as_ref().map_or(0, |t| t.preempted_at),
                    history: &rec.history,
                });
                see(stay.as_ref(), tally.as_ref());
            }
        }
    }

    /// The timers firing after an evaluation, `(cluster, job uid, timer)` each: what a list
    /// filters on (`timer=`) and shows. Replaces what the last evaluation left, so a timer
    /// removed from the main file leaves no mark.
    pub fn set_firing(&self, firing: Vec<(String, Uid, String)>) {
        let mut by_cluster: BTreeMap<String, HashMap<Uid, Vec<String>>> = BTreeMap::new();
        for (cluster, uid, timer) in firing {
            by_cluster
                .entry(cluster)
                .or_default()
                .entry(uid)
                .or_default()
                .push(timer);
        }
        for (cluster, shard) in self.shards() {
            let mut marks = by_cluster.remove(&cluster).unwrap_or_default();
            for timers in marks.values_mut() {
                timers.sort();
            }
            write(&shard).firing = marks;
        }
    }
}

/// Notes whether Kueue holds the job for quota, as its event's story says, and since when and
/// in which queue; a kind that tells no story is never queued.
pub(super) fn set_queued(
    rec: &mut JobRecord,
    strings: &mut Interner<String>,
    story: Option<&Story>,
    phase: Phase,
) {
    let queued = story
        .and_then(|story| story.workload.as_ref())
        .filter(|w| matches!(w.state, QueueState::Queued { .. }) && phase != Phase::Deleted);
    rec.queued_since = queued.map_or(0, |w| {
        w.waiting_since
            .and_then(|t| Secs::try_from(t.timestamp()).ok())
            .filter(|t| *t != 0)
            .unwrap_or(rec.created)
    });
    let name = queued.and_then(|w| w.cluster_queue.as_deref().or(w.local_queue.as_deref()));
    let same = match (rec.queue, name) {
        (Some(sym), Some(name)) => strings.get(sym).map(String::as_str) == Some(name),
        (None, None) => true,
        _ => false,
    };
    if !same {
        if let Some(old) = rec.queue.take() {
            strings.release(old);
        }
        rec.queue = name.map(|n| strings.intern(n.to_string()));
    }
}
